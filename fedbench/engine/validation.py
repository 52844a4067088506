"""A run's held-out validation split (the ``validation`` protocol of docs/tuning.md): each client
keeps a stratified fraction of its training samples apart, and the global model is scored on the
union of those sets whenever the test set is.

The split comes from each client's ``("validation", client)`` stream: it depends on the seed and
the partition only, so every trial of a tuning (whatever its learning rates or rounds) holds out
the same samples, and none of them is ever trained on.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from fedbench.algorithms.base import Logs
from fedbench.data.base import ArraySplit
from fedbench.engine.local import LocalConfig
from fedbench.engine.plugins import RoundPlugin
from fedbench.models.flat import Buffers
from fedbench.seeding import numpy_stream

if TYPE_CHECKING:
    from fedbench.engine.setup import RunSetup
    from fedbench.scenario import RunSpec


def stratified_counts(labels: np.ndarray, fraction: float) -> dict[int, int]:
    """Held-out samples per label: round(fraction·n) in all (at most n − 1, so that the client keeps
    one training sample), shared over the labels by largest remainder of fraction·n_c (ties: lower label)."""
    classes, sizes = np.unique(labels, return_counts=True)
    total = min(int(round(fraction * len(labels))), len(labels) - 1)
    quota = fraction * sizes
    counts = np.minimum(np.floor(quota).astype(int), sizes)
    extra = max(0, total - int(counts.sum()))
    order = sorted(range(len(classes)), key=lambda k: (-(quota[k] - counts[k]), classes[k]))
    for k in order[:extra]:
        counts[k] += 1
    while counts.sum() > total:  # floors above the total (tiny clients): drop from the largest
        counts[int(np.argmax(counts))] -= 1
    return {int(c): int(n) for c, n in zip(classes, counts)}


def hold_out(
    indices: np.ndarray, labels: np.ndarray, fraction: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """One client's (training, validation) indices, both sorted: per label, a random
    :func:`stratified_counts` share of ``indices`` goes to validation (``labels``: the whole train set's)."""
    indices = np.asarray(indices)
    own = labels[indices]
    counts = stratified_counts(own, fraction)
    picked = [rng.permutation(indices[own == c])[:n] for c, n in counts.items()]
    val = np.sort(np.concatenate(picked)) if picked else indices[:0]
    return np.setdiff1d(indices, val), val


def split_clients(
    parts: list[torch.Tensor], labels: torch.Tensor, fraction: float, seed: int
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Every client's (training, validation) index tensors, from its ``("validation", i)`` stream."""
    y = labels.cpu().numpy()
    train, val = [], []
    for i, p in enumerate(parts):
        t, v = hold_out(p.cpu().numpy(), y, fraction, numpy_stream(seed, "validation", i))
        train.append(torch.as_tensor(t, dtype=torch.int64, device=p.device))
        val.append(torch.as_tensor(v, dtype=torch.int64, device=p.device))
    return train, val


class ValidationScore(RoundPlugin):
    """Scores the global model on every client's validation set when the test set is scored;
    logs ``val_acc`` (sample-weighted over the clients: correct over all validation samples) and
    ``val_loss``. The test-set evaluation is left as it is."""

    name = "validation"

    def __init__(self, spec: RunSpec, seed: int, setup: RunSetup):
        self.spec, self.model = spec, setup.model
        assert setup.validation is not None, "a run with a validation block gets its split from build_run"
        rows = torch.cat(setup.validation)
        self.split = ArraySplit(setup.data.train.x[rows], setup.data.train.y[rows])

    def after_evaluation(self, t: int, state: Any, buffers: Buffers, cfg: LocalConfig) -> tuple[Any, Logs]:
        spec = self.spec
        if not (t % spec.eval.every == 0 or t == spec.rounds) or len(self.split) == 0:
            return state, {}
        acc, loss = self.model.evaluate(state.x, buffers, self.split, spec.eval.batch_size)
        return state, {"val_acc": acc, "val_loss": loss if math.isfinite(loss) else None}
