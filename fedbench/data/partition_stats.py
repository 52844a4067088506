"""Per-client label histograms and a one-line summary of a partition's heterogeneity."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def label_histogram(labels: np.ndarray, parts: Sequence[np.ndarray], num_classes: int) -> np.ndarray:
    """Counts ``[N, C]``: entry ``(i, c)`` is the number of client ``i``'s samples with label ``c``."""
    labels = np.asarray(labels)
    hist = np.zeros((len(parts), num_classes), dtype=np.int64)
    for i, idx in enumerate(parts):
        hist[i] = np.bincount(labels[np.asarray(idx, dtype=np.int64)], minlength=num_classes)[:num_classes]
    return hist


def partition_summary(hist: np.ndarray) -> dict[str, float | int]:
    """Sizes, label coverage and label skew of a partition given its ``[N, C]`` histogram.

    - ``size_min`` / ``size_median`` / ``size_max``: client sizes ``n_i = Σ_c hist[i, c]``;
    - ``mean_classes_per_client``: mean over clients of the number of classes with ≥ 1 sample;
    - ``label_skew_tv``: mean over the non-empty clients of the total-variation distance
      ``½ Σ_c |n_ic / n_i − n_c / n|`` between a client's label distribution and the global one
      (0 for a perfectly IID split, close to 1 when every client holds one rare class).
    """
    hist = np.asarray(hist, dtype=np.float64)
    sizes = hist.sum(axis=1)
    total = sizes.sum()
    nonempty = sizes > 0
    if total > 0 and nonempty.any():
        p_global = hist.sum(axis=0) / total
        p_client = hist[nonempty] / sizes[nonempty, None]
        tv = float(0.5 * np.abs(p_client - p_global).sum(axis=1).mean())
    else:
        tv = 0.0
    return {
        "num_clients": int(hist.shape[0]),
        "num_classes": int(hist.shape[1]),
        "num_samples": int(total),
        "size_min": int(sizes.min()) if sizes.size else 0,
        "size_median": float(np.median(sizes)) if sizes.size else 0.0,
        "size_max": int(sizes.max()) if sizes.size else 0,
        "mean_classes_per_client": float((hist > 0).sum(axis=1).mean()) if sizes.size else 0.0,
        "label_skew_tv": tv,
    }
