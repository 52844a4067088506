"""A run's held-out validation split (the ``validation`` protocol of docs/tuning.md): each client keeps
a stratified fraction of its training samples apart, drawn from its ``("validation", client)`` stream, so
that it depends on the seed and the partition only: every trial of a tuning (whatever its learning rates
or rounds) holds out the same samples, and none of them is ever trained on. The scoring is the round
plug-in :class:`fedbench.engine.validation.ValidationScore`.
"""

from __future__ import annotations

import numpy as np
import torch

from fedbench.seeding import numpy_stream


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
