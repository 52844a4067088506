"""Continual metrics on an accuracy matrix (C-FLAG notes §6).

``A[i, j]`` is the accuracy on task j's test set of the global model after the last round of
task i (rows = tasks trained so far, columns = every task). With S tasks:

* Acc = (1/S) Σ_j A[S−1, j], the final model's mean accuracy over all tasks;
* Forgetting = (1/(S−1)) Σ_{i<S−1} (A[i, i] − A[S−1, i]), accuracy lost on each earlier task
  since it was learnt (negative when later tasks help an earlier one; NaN for S = 1);
* the per-task curve (Fig. 2, "average accuracy across tasks"; notes §6):
  A_i = (1/i) Σ_{j≤i} a_{i,j}, the mean accuracy over the tasks seen after training task i.
"""

from __future__ import annotations

import math

import numpy as np


def _square(matrix: np.ndarray) -> np.ndarray:
    a = np.asarray(matrix, dtype=float)
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise ValueError(f"expected a complete S × S accuracy matrix (one row per task), got shape {a.shape}")
    return a


def average_accuracy(matrix: np.ndarray) -> float:
    """Acc = mean_j A[S−1, j]."""
    return float(_square(matrix)[-1].mean())


def forgetting(matrix: np.ndarray) -> float:
    """Forgetting = (1/(S−1)) Σ_{i<S−1} (A[i, i] − A[S−1, i]); NaN for a single task."""
    a = _square(matrix)
    s = len(a)
    if s < 2:
        return math.nan
    return float(np.mean([a[i, i] - a[-1, i] for i in range(s - 1)]))


def average_accuracy_curve(matrix: np.ndarray) -> np.ndarray:
    """[A_1, …, A_n] with A_i = (1/i) Σ_{j≤i} a_{i,j} (notes §6, Fig. 2), for the n ≤ S recorded rows
    (rows = tasks trained so far, columns = every task)."""
    a = np.asarray(matrix, dtype=float)
    if a.ndim != 2 or a.shape[0] > a.shape[1]:
        raise ValueError(
            f"expected an n × S accuracy matrix with n ≤ S (one row per task trained), got shape {a.shape}"
        )
    return np.array([a[i, : i + 1].mean() for i in range(a.shape[0])])
