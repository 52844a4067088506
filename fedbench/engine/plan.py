"""A round plan: every minibatch of the round's S sampled clients for all their K_i local steps,
drawn up front, so that the batched executor's step loop is one gather per step.

The draws are those of the sequential path, from the same named streams and in the same order
per client: client i's k-th minibatch is the batcher's k-th ``next(i)`` of the round (the
``("batches", i, e)`` permutations; :mod:`fedbench.engine.batches`), followed by its replay draw
(``("replay_step", task, i, position)``) and augmented from ``("augment", i, position)``. Clients
draw independently of each other and of training, so drawing a whole round before its first
step gives the same batches as drawing them step by step.

The plan is ``[K, S, B]`` index and mask tensors on the data's device, laid out on the host and moved in
one copy each (with a replay memory, laid out on the device) (K = max_i K_i, B the
largest batch of the round); step k uses the first ``width[k]`` columns (its largest batch, as
the batched executor padded each step before plans), so a row's numbers do not depend on which
other rows share its chunk. Padded places hold sample 0 with mask 0; rows past their K_i are all
padding.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

from fedbench.data.base import ArraySplit
from fedbench.engine.augment import apply_augment, augment_base, augment_draws
from fedbench.engine.batches import ClientBatcher, seed_ahead
from fedbench.engine.device_plan import (
    Rows,
    Walks,
    hashed_augment,
    hashed_replay,
    parts_table,
    permutation_keys,
    ranked_batches,
)
from fedbench.engine.local import LocalConfig
from fedbench.engine.pending import to_device


@dataclass(frozen=True)
class RoundPlan:
    """Sample indices ``index`` ``[K, S, B]`` (int64), ``mask`` ``[K, S, B]`` (1 on real samples),
    ``memory`` ``[K, S, B]`` (1 on the replay draw, ``replay_apart`` only), the per-step widths,
    and under ``local.augment`` each sample's crop offsets and flip ``[K, S, B]``."""

    index: torch.Tensor
    mask: torch.Tensor
    width: tuple[int, ...]
    memory: torch.Tensor | None = None
    crops: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
    crop_padding: int = 0

    @property
    def steps(self) -> int:
        return self.index.shape[0]

    def rows(self, rows: slice) -> RoundPlan:
        """The plan of a subset of the clients (a chunk), with the round's widths."""
        pick = None if self.crops is None else tuple(c[:, rows] for c in self.crops)
        memory = None if self.memory is None else self.memory[:, rows]
        return replace(self, index=self.index[:, rows], mask=self.mask[:, rows], memory=memory, crops=pick)

    def batch(self, k: int, train: ArraySplit) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Step k's x ``[S, W, …]``, y ``[S, W]``, mask ``[S, W]`` and replay mask (or None): one gather."""
        w = self.width[k]
        idx = self.index[k, :, :w]
        x, y = train.x[idx], train.y[idx]
        if self.crops is not None:
            dy, dx, flips = (c[k, :, :w].reshape(-1) for c in self.crops)
            x = apply_augment(x.flatten(0, 1), dy, dx, flips, self.crop_padding).view_as(x)
        memory = None if self.memory is None else self.memory[k, :, :w]
        return x, y, self.mask[k, :, :w], memory


@dataclass(frozen=True)
class RowDraws:
    """One client's batches of a round: their indices end to end (on the host, or with a replay memory's draws
    on the device), each batch's length, count of current samples (the rest is its replay draw) and the batcher
    position it was drawn at (the augmentation key)."""

    client: int
    flat: np.ndarray | torch.Tensor
    lengths: list[int]
    current: list[int]
    positions: list[int]


def hashed_plan(
    train: ArraySplit, draws: list[tuple[ClientBatcher, list[int], list[int]]], cfgs: list[LocalConfig]
) -> RoundPlan:
    """The :class:`RoundPlan` of the draws ``(batcher, clients, K_i)`` of a round (one run's, or every run's of a
    population, each with its local configuration ``cfgs``), their rows one after another, each batcher under
    ``shuffle: device``, drawn on the data's device (:func:`~fedbench.engine.device_plan.ranked_batches`; under
    ``local.augment`` each sample's crop and flip hashed there too, and per-step replay draws joined to each batch,
    :func:`join_replay`): the plan :func:`lay_out` makes of the batchers' own draws (and ``cfg.replay``'s), with
    their cursors moved as those draws move them."""
    table, offsets = parts_table([(b.partition, b.parts) for b, _, _ in draws], train.y.device)
    ids = [np.asarray(clients, dtype=np.int64) for _, clients, _ in draws]
    counts = [len(i) for i in ids]
    batch, drop, base = (
        np.repeat(np.asarray(column, dtype=np.int64), counts)
        for column in zip(*((b.batch_size, b.drop_singleton, b.base) for b, _, _ in draws))
    )
    rows = Rows(
        np.concatenate([b.sizes[i] for (b, _, _), i in zip(draws, ids)]),
        np.concatenate([np.asarray(b.cursor, dtype=np.int64)[i] for (b, _, _), i in zip(draws, ids)]),
        batch,
        drop,
        base,
        np.concatenate(ids),
        np.concatenate([offset + b.starts[i] for (b, _, _), i, offset in zip(draws, ids, offsets)]),
        np.asarray([k for _, _, s in draws for k in s], dtype=np.int64),
    )
    index, real, widths, walked = ranked_batches(rows, table)
    for (batcher, _, _), i, moved in zip(draws, ids, np.split(walked.after, np.cumsum(counts)[:-1])):
        cursors = np.asarray(batcher.cursor, dtype=np.int64)
        cursors[i] = moved
        batcher.cursor = cursors.tolist()
    memory = None
    if any(c.replay is not None for c in cfgs):
        index, real, widths, memory = join_replay(index, real, walked, ids, cfgs)
        memory = memory.to(train.x.dtype) if any(c.replay_apart for c in cfgs) else None
    crops, a = None, cfgs[0].augment
    if cfgs[0].augments:
        if any(c.augment != a for c in cfgs):
            raise ValueError("the runs of a population augment differently")
        check_images(train)
        bases = np.repeat(np.asarray([augment_base(c.seed) for c in cfgs], dtype=np.int64), counts)
        row_keys = to_device(torch.from_numpy(np.stack([bases, rows.clients])), index.device)  # [2, rows]
        positions = to_device(torch.from_numpy(walked.position), index.device)  # [K, rows]
        keys = permutation_keys(row_keys[0], row_keys[1], positions).unsqueeze(2)  # [K, rows, 1]
        drawn = hashed_augment(keys, torch.arange(index.shape[2], device=index.device), a.flip, a.crop_padding)
        crops = tuple(torch.where(real, v, torch.zeros_like(v)) for v in drawn)  # padding: no shift, no flip
    return RoundPlan(index, real.to(train.x.dtype), widths, memory, crops, a.crop_padding)  # type: ignore[arg-type]


def join_replay(
    index: torch.Tensor, real: torch.Tensor, walked: Walks, ids: list[np.ndarray], cfgs: list[LocalConfig]
) -> tuple[torch.Tensor, torch.Tensor, tuple[int, ...], torch.Tensor]:
    """Each batch of a device-drawn plan (``index`` and ``real`` ``[K, rows, B]``, the rows of each run's ``ids``)
    followed by its replay draw, hashed on the device from its run's :class:`~fedbench.engine.local.ReplayTable`
    with the key of its client and position (:func:`~fedbench.engine.device_plan.hashed_replay`: the draws of the
    host's ``cfg.replay``): the joined indices and mask, each step's width, and the replay draws' places."""
    device, length = index.device, walked.length  # [K, rows] on the host
    tables = [c.replay_table() if c.replay_table is not None else None for c in cfgs]
    sizes = np.concatenate([t.sizes[i] if t else np.zeros(len(i), dtype=np.int64) for t, i in zip(tables, ids)])
    count = max((t.count for t in tables if t), default=0)
    drawn = np.where(length > 0, np.minimum(sizes, count), 0)  # [K, rows]: each batch's replay draw
    widths = tuple(int(v) for v in (length + drawn).max(1))
    if not drawn.any():
        return index, real, widths, torch.zeros_like(real)
    at, blocks = 0, []
    starts = []
    for t, i in zip(tables, ids):
        starts.append(at + t.starts[i] if t else np.zeros(len(i), dtype=np.int64))
        if t:
            blocks.append(t.table)
            at += len(t.table)
    bases = np.concatenate([np.full(len(i), t.base if t else 0, dtype=np.int64) for t, i in zip(tables, ids)])
    host = np.concatenate([np.stack([bases, np.concatenate(ids), np.concatenate(starts), sizes]), walked.position])
    small = to_device(torch.from_numpy(host), device)  # [4 + K, rows]: one copy
    keys = permutation_keys(small[0], small[1], small[4:])  # [K, rows]
    values = hashed_replay(keys, torch.cat(blocks), small[2], small[3], count, int(sizes.max()))  # [K, rows, c]
    columns = torch.arange(max(widths), device=device)
    lengths = to_device(torch.from_numpy(np.stack([length, drawn])), device)  # [2, K, rows]
    first, last = lengths[0].unsqueeze(2), (lengths[0] + lengths[1]).unsqueeze(2)
    current = columns < first
    replayed = (columns >= first) & (columns < last)
    pad = max(widths) - index.shape[2]
    joined_current = torch.nn.functional.pad(index, (0, pad)) if pad > 0 else index[..., : max(widths)]
    from_memory = values.gather(2, (columns - first).clamp(0, values.shape[2] - 1))
    joined = torch.where(current, joined_current, torch.where(replayed, from_memory, 0))
    return joined, current | replayed, widths, replayed


def check_images(train: ArraySplit) -> None:
    """``local.augment`` flips and crops images: a ValueError for samples that are not ``[C, H, W]``."""
    if train.x.dim() != 4:
        raise ValueError(
            f"local.augment needs image batches [B, C, H, W], got samples of shape {tuple(train.x.shape[1:])}"
        )


def on_device(batcher: ClientBatcher, cfg: LocalConfig) -> bool:
    """Whether the batcher's plans are drawn on the device: ``local.shuffle: device``, its replay draws (if any)
    hashed there too (``cfg.replay_table``)."""
    return batcher.shuffle == "device" and (cfg.replay is None or cfg.replay_table is not None)


def row_draws(batcher: ClientBatcher, clients: list[int], steps: list[int], cfg: LocalConfig) -> list[RowDraws]:
    """Each client's K_i batches: with a replay memory one ``cfg.batch_indices`` call per batch (its draw
    joins each batch), else one :meth:`ClientBatcher.draw` per client (the same batches, fewer host calls)."""
    rows = []
    for row, c in enumerate(clients):
        if cfg.replay is None:
            flat, lengths, positions = batcher.draw(c, steps[row])
            rows.append(RowDraws(c, flat, lengths, lengths, positions))
            continue
        drawn = [cfg.batch_indices(batcher, c) for _ in range(steps[row])]
        flat = torch.cat([idx for idx, _, _ in drawn])
        rows.append(RowDraws(c, flat, [len(d[0]) for d in drawn], [d[1] for d in drawn], [d[2] for d in drawn]))
    return rows


def draw_plan(
    train: ArraySplit, batcher: ClientBatcher, clients: list[int], steps: list[int], cfg: LocalConfig
) -> RoundPlan:
    """Draw every client's K_i minibatches (advancing the batcher as K_i ``next`` calls would) and
    lay them out as a :class:`RoundPlan`; without a replay memory, the seeds of the round's permutations are
    computed together first (:func:`~fedbench.engine.batches.seed_ahead`), and under ``local.shuffle: device``
    the plan is drawn on the device (:func:`~fedbench.engine.device_plan.hashed_plan`, the same plan)."""
    if on_device(batcher, cfg):
        return hashed_plan(train, [(batcher, clients, steps)], [cfg])
    if cfg.replay is None:
        seed_ahead([(batcher, clients, steps)])
    return lay_out(train, row_draws(batcher, clients, steps, cfg), steps, cfg)


def lay_out(train: ArraySplit, rows: list[RowDraws], steps: list[int], cfg: LocalConfig) -> RoundPlan:
    """The :class:`RoundPlan` of clients' drawn batches ``rows`` (K_i = ``steps``), one row each: on the host
    where they were drawn there (one copy each of the indices and the mask), else on the device. A population
    lays out every run's rows at once (:mod:`fedbench.engine.population_rows`)."""
    flat_lengths = [n for r in rows for n in r.lengths]
    shape = (max(steps), len(rows), max(flat_lengths))
    widths = [max(r.lengths[k] for r in rows if k < len(r.lengths)) for k in range(shape[0])]
    lengths = torch.tensor(flat_lengths)
    slot = torch.tensor([k * shape[1] + row for row, r in enumerate(rows) for k in range(len(r.lengths))])
    within = torch.arange(sum(flat_lengths)) - torch.repeat_interleave(lengths.cumsum(0) - lengths, lengths)
    dest = torch.repeat_interleave(slot * shape[2], lengths) + within
    device, size = train.y.device, shape[0] * shape[1] * shape[2]
    if all(isinstance(r.flat, np.ndarray) for r in rows):  # drawn on the host: laid out there, one copy each
        index_h = torch.zeros(size, dtype=torch.int64)
        index_h[dest] = torch.from_numpy(np.concatenate([r.flat for r in rows]))
        mask_h = torch.zeros(size, dtype=train.x.dtype)
        mask_h[dest] = 1.0
        index, mask, dest_d = to_device(index_h, device), to_device(mask_h, device), dest
    else:  # with a replay memory's draws, on the device
        dest_d = to_device(dest, device)
        index = torch.zeros(size, dtype=torch.int64, device=device)
        index[dest_d] = torch.cat([torch.as_tensor(r.flat, device=device) for r in rows])
        mask = train.x.new_zeros(size)
        mask[dest_d] = 1.0
    memory = None
    if cfg.replay_apart:  # the samples after a batch's current ones are its replay draw
        current = torch.repeat_interleave(torch.tensor([n for r in rows for n in r.current]), lengths)
        memory = train.x.new_zeros(size)
        memory[dest_d[to_device(within >= current, device)]] = 1.0
        memory = memory.view(shape)
    if cfg.augments:
        check_images(train)
    crops = _augment_plan(rows, dest, shape, cfg, device) if cfg.augments else None
    return RoundPlan(index.view(shape), mask.view(shape), tuple(widths), memory, crops, cfg.augment.crop_padding)


def _augment_plan(
    rows: list[RowDraws], dest: torch.Tensor, shape: tuple[int, int, int], cfg: LocalConfig, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each planned sample's crop offsets and flip from its batch's ``("augment", client, position)``
    stream (padding: no crop shift, no flip)."""
    a = cfg.augment
    draws = [
        augment_draws(n, a.flip, a.crop_padding, cfg.seed, r.client, position, cfg.shuffle)
        for r in rows
        for n, position in zip(r.lengths, r.positions)
    ]
    out = []
    for part, dtype in zip(zip(*draws), (torch.int64, torch.int64, torch.bool)):
        full = torch.zeros(shape[0] * shape[1] * shape[2], dtype=dtype)
        full[dest] = torch.cat(part)
        out.append(to_device(full.view(shape), device))
    return out[0], out[1], out[2]
