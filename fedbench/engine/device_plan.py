"""A round plan drawn on the device (``local.shuffle: device``): every client's epoch permutations of the round
from a counter-based hash, laid out as a :class:`~fedbench.engine.plan.RoundPlan` in a few batched kernels for
all the rows of a run or of a population, with no per-client or per-permutation work on the host.

Under ``local.shuffle: host`` (the default) client i's epoch-e permutation is ``torch.randperm`` from a CPU
generator seeded by the stream ``("batches", i, e)``: one host draw per permutation, which bounds a population
on a GPU (benchmarks/README.md, "Host time of a round plan"). Under ``device`` it is the order of the ranks

    r_j = h(h(j ⊕ k) + k),   j = 0 … n_i − 1,   k = κ(base, i, e)

(:func:`sort_keys`; h is ``mix32``, a bijective 32-bit hash, so the ranks of one permutation never tie and the
order is unique), where ``base`` is the stream's seed (``("batches",)``, or ``("task_batches", task)``) and κ
mixes it with the client and the epoch (:func:`permutation_keys`). Augmentation's crops and flips are hashed the
same way (:func:`hashed_augment`), keyed by κ of the ``("augment",)`` base, the client and the batch's position.
Integer arithmetic only, without overflow: the same permutations on every CPU and GPU, and the same on the host,
where the sequential executor composes them one at a time (:func:`hashed_permutation`), as here, where a round's
are ranked by one sort.

The walk through them is the batcher's (:meth:`~fedbench.engine.batches.ClientBatcher._walk`: a batch never
straddles two epochs, an epoch's lone last sample skipped under ``drop_singleton``), computed for every row at
once in NumPy (:func:`walks`); the cursors move as its draws would have moved them, so a resumed run draws the
batches an uninterrupted one does, and each batch's position keys its augmentation.

A continual run's per-step replay draw (``replay_batch`` of a client's memory joined to each minibatch) is hashed
too: the memory entries at the places of the smallest ranks under κ(``("replay_step", task)``, i, position), sorted
(:func:`hashed_choice` on the host, where the sequential executor draws them batch by batch; :func:`hashed_replay`
for every batch of a round at once on the device, from the memories laid out as one table,
:class:`~fedbench.engine.local.ReplayTable`).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import get_args

import numpy as np
import torch

from fedbench.engine.batched_layers import MASK32, mix32
from fedbench.engine.pending import to_device
from fedbench.scenario import LocalSpec
from fedbench.seeding import torch_seed

SHUFFLES: tuple[str, ...] = get_args(LocalSpec.model_fields["shuffle"].annotation)  # local.shuffle's words


def permutation_keys(base: torch.Tensor, clients: torch.Tensor, epochs: torch.Tensor) -> torch.Tensor:
    """κ(base, i, e): the 32-bit key of client i's epoch-e permutation under a stream's 32-bit ``base`` (int64
    tensors, broadcast together)."""
    return mix32(mix32(base ^ mix32(clients + 0x632BE5AB)) + mix32(epochs + 0x9E3779B9))


def key_of(base: int, client: int, count: int) -> int:
    """:func:`permutation_keys` of one (base, client, epoch or batch position), on the host."""
    return int(permutation_keys(*(torch.tensor(v, dtype=torch.int64) for v in (base, client, count))))


def sort_keys(keys: torch.Tensor, j: torch.Tensor) -> torch.Tensor:
    """r_j = h(h(j ⊕ k) + k) of samples ``j`` (< 2³²) under their permutation's key ``k``: for one k a bijection of
    j, so no two samples of a permutation share a rank."""
    return mix32(mix32(j ^ keys) + keys)


def hashed_permutation(key: int, n: int) -> np.ndarray:
    """The permutation of ``range(n)`` of key ``key``: the samples in the order of their ranks (on the host)."""
    ranks = sort_keys(torch.tensor(key, dtype=torch.int64), torch.arange(n, dtype=torch.int64))
    return torch.argsort(ranks, stable=True).numpy()


def hashed_choice(values: np.ndarray, count: int, key: int) -> np.ndarray:
    """``min(count, len(values))`` of ``values`` without replacement, on the host: those at the places j of the
    smallest ranks r_j = h(h(j ⊕ k) + k) under ``key`` (:func:`sort_keys`, which never tie), sorted;
    :func:`hashed_replay` draws the same on the device."""
    ranks = sort_keys(torch.tensor(key, dtype=torch.int64), torch.arange(len(values), dtype=torch.int64))
    return np.sort(np.asarray(values)[torch.argsort(ranks)[:count].numpy()])


def hashed_replay(
    keys: torch.Tensor, table: torch.Tensor, starts: torch.Tensor, sizes: torch.Tensor, count: int, most: int
) -> torch.Tensor:
    """:func:`hashed_choice` of every (step, row) at once: ``keys`` ``[K, rows]`` (each draw's key), each row's
    memory at ``table[starts[r] : starts[r] + sizes[r]]``, ``most`` the largest size (known on the host: nothing
    is read); returns ``[K, rows, c]`` training-set indices, each draw's min(``count``, size) values sorted first
    (c = min(``count``, ``most``); the rest padding)."""
    j = torch.arange(most, dtype=torch.int64, device=keys.device)
    inside = j < sizes.unsqueeze(1)  # [rows, M]
    ranks = torch.where(inside, sort_keys(keys.unsqueeze(2), j), (1 << 32) + j)  # a row's padding ranks last
    chosen = torch.topk(ranks, min(count, len(j)), largest=False).indices  # [K, rows, c], in rank order
    real = chosen < sizes.view(1, -1, 1)
    values = table[torch.where(real, starts.view(1, -1, 1) + chosen, 0)]
    return torch.where(real, values, torch.iinfo(torch.int64).max).sort(2).values


def hashed_augment(
    keys: torch.Tensor, j: torch.Tensor, flip: bool, crop_padding: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Crop offsets ``dy``, ``dx`` in [0, 2p] and flips of samples ``j`` of batches keyed ``keys`` (κ of the
    ``("augment",)`` base, the client and the batch's position; broadcast together): three salted ranks of each
    sample, ``r mod (2p + 1)`` and the top bit (zero and False where not asked for)."""
    zero = torch.zeros(torch.broadcast_shapes(keys.shape, j.shape), dtype=torch.int64, device=keys.device)
    span = 2 * crop_padding + 1
    dy = sort_keys(keys ^ 0x1B873593, j) % span if crop_padding else zero
    dx = sort_keys(keys ^ 0x5BD1E995, j) % span if crop_padding else zero
    flips = (sort_keys(keys ^ 0x68E31DA4, j) >> 31) == 1 if flip else zero.bool()
    return dy, dx, flips


def stream_base(seed: int, stream: tuple) -> int:
    """The 32-bit base key of a batcher's stream (its ``torch_seed``'s low word)."""
    return torch_seed(seed, *stream) & MASK32


@dataclass(frozen=True)
class Walks:
    """Where the next K batches of each row lie, ``[K, rows]`` each: their epoch, start in the epoch's
    permutation, length (0 past the row's K_i) and the cursor before each (the augmentation key); ``after`` the
    rows' cursors after them ``[rows]``."""

    epoch: np.ndarray
    start: np.ndarray
    length: np.ndarray
    position: np.ndarray
    after: np.ndarray


def walks(sizes: np.ndarray, batch: np.ndarray, drop: np.ndarray, cursors: np.ndarray, steps: np.ndarray) -> Walks:
    """:meth:`~fedbench.engine.batches.ClientBatcher._walk` of every row at once (int64 arrays ``[rows]``: n_i, B,
    drop_singleton, cursor, K_i), the same segments and cursors (tests/engine/test_device_plan.py).

    With b = min(B, n) an epoch holds m = ⌈n/b⌉ batches, ⌊n/b⌋ when its lone last sample is skipped; the cursor
    points at batch g₀ = e₀·m + ⌊pos/b⌋ (a cursor left on a skipped sample points at the next epoch's first), and
    the row's k-th batch is batch g₀ + k: epoch ⌊g/m⌋, start (g mod m)·b. After a skip, a batch's position is the
    cursor that skipped (e·n − 1), as the walk records it."""
    n = sizes.astype(np.int64)
    b = np.minimum(batch, n)
    full, rest = n // b, n % b
    skip = drop.astype(bool) & (rest == 1) & (n > 1)
    m = full + ((rest > 0) & ~skip)
    k = np.arange(int(steps.max()) if len(steps) else 0, dtype=np.int64)[:, None]
    g = (cursors // n) * m + (cursors % n) // b + k
    epoch, j = g // m, g % m
    start = j * b
    valid = k < steps
    length = np.where(valid, np.minimum(b, n - start), 0)
    position = epoch * n + start - (skip & (j == 0) & (epoch > 0))
    last = np.maximum(steps - 1, 0)
    rows = np.arange(len(n))
    if len(k):
        after = np.where(steps > 0, epoch[last, rows] * n + start[last, rows] + length[last, rows], cursors)
    else:
        after = cursors.copy()
    return Walks(epoch, start, length, position, after)


@dataclass(frozen=True)
class Rows:
    """The rows of a round's plan (one run's sampled clients, or every run's of a population, one after another),
    int64 arrays ``[rows]``: n_i, the cursor, B, ``drop_singleton`` (0/1), the stream's base key, the client, its
    part's first place in the parts table, and K_i."""

    sizes: np.ndarray
    cursors: np.ndarray
    batch: np.ndarray
    drop: np.ndarray
    base: np.ndarray
    clients: np.ndarray
    parts: np.ndarray
    steps: np.ndarray


def ranked_batches(rows: Rows, table: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, tuple[int, ...], Walks]:
    """Every row's next K_i batches as ``[K, rows, B]`` training-set indices (0 on padding) and a boolean mask of
    real samples on ``table``'s device, each step's width, and the walks (the rows' cursors after them, each
    batch's position).

    On the host: the walks (NumPy over all rows) and one copy of the round's small tables. On the device: the
    ranks of every (row, epoch) the round touches, one sort of them all (keyed by the pair, then the rank), and
    one gather through the rows' parts (``table``: the parts' training-set indices end to end)."""
    device, n, steps = table.device, rows.sizes, rows.steps
    w = walks(n, rows.batch, rows.drop, rows.cursors, steps)
    count, valid = len(n), w.length > 0
    # the (row, epoch) pairs the round touches: each row's epochs from its first batch's to its last's
    first = w.epoch[0] if len(w.epoch) else np.zeros(count, dtype=np.int64)
    touched = np.where(steps > 0, w.epoch[np.maximum(steps - 1, 0), np.arange(count)] - first + 1, 0)
    pair_row = np.repeat(np.arange(count), touched)
    row_pair = np.cumsum(touched) - touched  # each row's first pair
    pair_epoch = first[pair_row] + np.arange(len(pair_row)) - row_pair[pair_row]
    pair_n = n[pair_row]
    pair_start = np.cumsum(pair_n) - pair_n  # each pair's first rank
    total = int(pair_n.sum())
    at = np.where(valid, np.append(pair_start, 0)[np.where(valid, row_pair + w.epoch - first, 0)] + w.start, 0)
    widths = tuple(int(v) for v in w.length.max(1))
    small = to_device(torch.from_numpy(np.concatenate([at.ravel(), w.length.ravel(), rows.parts])), device)
    at_d, length_d = small[: at.size].view(at.shape), small[at.size : 2 * at.size].view(at.shape)
    pairs = to_device(
        torch.from_numpy(np.stack([rows.base[pair_row], rows.clients[pair_row], pair_epoch, pair_n, pair_start])),
        device,
    )
    keys = permutation_keys(pairs[0], pairs[1], pairs[2])
    element_pair = torch.repeat_interleave(torch.arange(len(pair_row), device=device), pairs[3], output_size=total)
    j = torch.arange(total, device=device) - pairs[4][element_pair]
    order = torch.argsort((element_pair << 32) | sort_keys(keys[element_pair], j), stable=True)
    local = torch.cat([j[order], j.new_zeros(1)])  # pair p's permutation at [start_p, start_p + n_p); a pad place
    columns = torch.arange(max(widths, default=0), device=device)
    real = columns < length_d.unsqueeze(2)  # [K, rows, B]
    place = torch.where(real, at_d.unsqueeze(2) + columns, total)
    index = torch.where(real, table[small[2 * at.size :].view(1, -1, 1) + local[place]], 0)
    return index, real, widths, w


_TABLE: dict[tuple, tuple[torch.Tensor, list[int]]] = {}  # the last parts table, by its partitions


def parts_table(
    partitions: list[tuple[Hashable, list[torch.Tensor]]], device: torch.device
) -> tuple[torch.Tensor, list[int]]:
    """The training-set indices of the ``(partition key, parts)`` end to end on ``device`` (each distinct partition
    once: the trials of one seed share theirs) and each one's first place in it; the last table is kept for the
    next round."""
    key = (str(device), *(k for k, _ in partitions))
    if key not in _TABLE:
        first: dict[Hashable, int] = {}
        blocks, at = [], 0
        for k, parts in partitions:
            if k not in first:
                first[k] = at
                blocks.append(torch.cat(parts).to(device) if parts else torch.zeros(0, dtype=torch.int64))
                at += len(blocks[-1])
        _TABLE.clear()
        _TABLE[key] = (torch.cat(blocks), [first[k] for k, _ in partitions])
    return _TABLE[key]
