"""Gradients over a client's whole local data (the engine input ``full_grad``, a replay memory's
gradient, a diagonal Fisher at a task's end), computed for all listed clients as one batched computation.

Convention (the same on every executor and device):

- Client i's n_i samples are cut in order into chunks of ``batch_size`` (its minibatch size); a
  last chunk of one sample is merged into the chunk before it (so chunks hold B, …, B, B + 1 or
  B, …, B, r with 2 ≤ r < B). A one-sample chunk would normalise a BatchNorm layer over a single
  value per channel, which torch refuses in train mode ("Expected more than 1 value per channel")
  and which is no estimate of the batch statistics anyway. A client of one sample has one chunk
  of one sample, as its local training has (a BatchNorm1d model cannot train on it at all).
- ∇f_i(z) = Σ_b (n_b / n_i) · g_b with g_b the mean cross-entropy gradient of chunk b at z
  (``squared``: Σ_b (n_b / n_i) · g_b ⊙ g_b, a diagonal empirical Fisher); no augmentation.
- BatchNorm normalises with each chunk's own batch statistics (train mode), as the minibatches of
  local training do; running statistics are left untouched. Dropout is active with masks hashed
  from each client's key and the chunk (``keys``; :mod:`fedbench.engine.batched_layers`).

Every chunk of every client is one row of the batched executor's vmapped step (padded to the
longest chunk and masked), :data:`CHUNK_SAMPLES` samples per call at most, or as many rows as the
caller's device holds at once for local steps (``rows``: its executor's chunk, more on a GPU): no per-client or
per-chunk Python loop, no buffer copies.
"""

from __future__ import annotations

import torch

from fedbench.data.base import ArraySplit
from fedbench.engine.batched import chunks
from fedbench.engine.batched_layers import RowLayers, mix32
from fedbench.engine.compiled import step_function
from fedbench.engine.local import LocalConfig
from fedbench.engine.pending import to_device
from fedbench.models.flat import Buffers, FlatModel

CHUNK_SAMPLES = 4096  # (padded) samples evaluated in one vmapped call: rows per call = max(2, this // longest chunk)


def rows_per_call(longest: int, rows: int = 0) -> int:
    """Rows (chunks of at most ``longest`` samples) one vmapped call evaluates: :data:`CHUNK_SAMPLES` samples'
    worth, or ``rows`` (the rows the device holds at once for local steps of as many samples) where more."""
    return max(2, CHUNK_SAMPLES // longest, rows)


CHUNK_SALT = 0x20000  # keeps the chunks' dropout keys apart from the local steps' (0x10000 + k)


def chunk_sizes(n: int, batch_size: int) -> list[int]:
    """The sizes of a client's chunks: ``batch_size`` each in order, a one-sample tail merged into the chunk before."""
    sizes = [batch_size] * (n // batch_size) + ([n % batch_size] if n % batch_size else [])
    if len(sizes) > 1 and sizes[-1] == 1:
        sizes[-2:] = [sizes[-2] + 1]
    return sizes


def _rows(parts: list[torch.Tensor], batch_size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Every chunk of every client as a row: sample indices ``[R, L]`` (padding repeats the chunk's
    first sample), mask ``[R, L]``, the row's client ``[R]`` and its chunk number within the client
    ``[R]``. The plan is host integers, one entry per chunk; the gather is one indexing."""
    device = parts[0].device
    client, chunk, start, size, offset = [], [], [], [], 0
    for i, part in enumerate(parts):
        for b, n in enumerate(chunk_sizes(len(part), batch_size)):
            client.append(i), chunk.append(b), start.append(offset), size.append(n)
            offset += n
    client_t, chunk_t, start_t, size_t = (to_device(torch.tensor(v), device) for v in (client, chunk, start, size))
    within = torch.arange(max(size), device=device)
    mask = within.unsqueeze(0) < size_t.unsqueeze(1)
    return torch.cat(parts)[start_t.unsqueeze(1) + torch.where(mask, within, 0)], mask, client_t, chunk_t


def client_gradients(
    model: FlatModel,
    buffers: Buffers,
    train: ArraySplit,
    parts: list[torch.Tensor],
    point: torch.Tensor,
    batch_size: int,
    squared: bool = False,
    keys: torch.Tensor | None = None,
    rows: int = 0,
) -> torch.Tensor:
    """Per listed client ``[S, P]``: Σ_b (n_b/n_i)·g_b over its chunks (module docstring), g_b ⊙ g_b
    when ``squared``; ``keys`` ``[S]`` (32-bit) seed each client's dropout masks (zeros when None); ``rows``: see
    :func:`rows_per_call`."""
    index, mask, client, chunk = _rows(parts, batch_size)
    sizes = to_device(torch.tensor([len(p) for p in parts], dtype=point.dtype), point.device)
    weight = mask.sum(1).to(point.dtype) / sizes[client]
    keys = torch.zeros(len(parts), dtype=torch.int64, device=point.device) if keys is None else keys
    row_keys = mix32(keys[client] ^ mix32(chunk + CHUNK_SALT))
    step = step_function(RowLayers.of(model))
    model.module.train()
    total = point.new_zeros(len(parts), point.numel())
    for r in chunks(len(index), rows_per_call(index.shape[1], rows)):
        idx, m, k = index[r], mask[r].to(point.dtype), row_keys[r]
        n = len(idx)
        if n == 1:  # one row runs as two, as in BatchedOracle (vmap over one row runs ungrouped convolutions)
            idx, m, k = idx.repeat(2, 1), m.repeat(2, 1), k.repeat(2)
        stacked = {name: v.unsqueeze(0).expand(len(idx), *v.shape) for name, v in buffers.items()}
        grads, _ = step(point.unsqueeze(0).expand(len(idx), -1), stacked, train.x[idx], train.y[idx], m, k)
        g = grads[:n]
        total.index_add_(0, client[r], (g * g if squared else g) * weight[r].unsqueeze(1))
    return total


def runs_client_gradients(
    model: FlatModel,
    train: ArraySplit,
    runs: list[tuple[Buffers, list[torch.Tensor], torch.Tensor, torch.Tensor]],
    batch_size: int,
    rows: int = 0,
) -> list[torch.Tensor]:
    """:func:`client_gradients` of several runs' clients as one batched computation (a population's): each run
    ``(buffers, parts, point, keys)`` with its own BatchNorm buffers, clients' samples, point and dropout keys;
    every chunk of every run's clients is one row, at its run's point with its run's buffers (``rows``: see
    :func:`rows_per_call`). Returns each run's ``[S_r, P]``."""
    parts = [part for _, own, _, _ in runs for part in own]
    index, mask, client, chunk = _rows(parts, batch_size)
    points = torch.stack([point for _, _, point, _ in runs])  # [R, P]
    device, dtype = points.device, points.dtype
    run_of = to_device(torch.tensor([r for r, (_, own, _, _) in enumerate(runs) for _ in own]), device)
    sizes = to_device(torch.tensor([len(p) for p in parts], dtype=dtype), device)
    weight = mask.sum(1).to(dtype) / sizes[client]
    row_keys = mix32(torch.cat([keys for *_, keys in runs])[client] ^ mix32(chunk + CHUNK_SALT))
    row_run = run_of[client]
    buffers = {name: torch.stack([own[name] for own, *_ in runs]) for name in runs[0][0]}  # [R, …]
    step = step_function(RowLayers.of(model))
    model.module.train()
    total = points.new_zeros(len(parts), points.shape[1])
    for r in chunks(len(index), rows_per_call(index.shape[1], rows)):
        idx, m, k, at = index[r], mask[r].to(dtype), row_keys[r], row_run[r]
        n = len(idx)
        if n == 1:  # one row runs as two (client_gradients)
            idx, m, k, at = idx.repeat(2, 1), m.repeat(2, 1), k.repeat(2), at.repeat(2)
        grads, _ = step(points[at], {name: v[at] for name, v in buffers.items()}, train.x[idx], train.y[idx], m, k)
        total.index_add_(0, client[r], grads[:n] * weight[r].unsqueeze(1))
    return list(total.split([len(own) for _, own, _, _ in runs]))


def full_local_gradients(
    model: FlatModel,
    buffers: Buffers,
    train: ArraySplit,
    parts: list[torch.Tensor],
    point: torch.Tensor,
    batch_size: int,
    cfg: LocalConfig,
    keys: torch.Tensor | None = None,
    rows: int = 0,
) -> torch.Tensor:
    """∇f_i(point) over each listed client's whole local data ``[S, P]`` (the engine input
    ``full_grad``): :func:`client_gradients` with the run's clipping/weight-decay convention."""
    grads = client_gradients(model, buffers, train, parts, point, batch_size, keys=keys, rows=rows)
    return cfg.finish(grads, point.unsqueeze(0).expand(len(parts), -1))
