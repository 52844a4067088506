"""Local work of the sampled clients of R runs as one batched computation over ``[R·S, P]`` rows.

The runs of a population (:mod:`fedbench.engine.population`) share their dataset, model and every
setting their clients' local work reads: the algorithm and its parameters, the ``local`` block
(batch size, weight decay, clipping). η_l and the parameters an algorithm declares in
``Capabilities.row_params`` may differ: each run's value rides on its rows as an ``[R·S, 1]`` column. Each run keeps its own
partition, sampled clients, minibatch plan, dropout keys, BatchNorm buffers, held rows and engine
inputs; its server broadcast becomes per-row (every broadcast tensor is a ``[P]`` row,
:class:`~fedbench.algorithms.base.RoundContext`), so one ``local_step`` moves the clients of every
run at once. The rows are those of the batched executor (:mod:`fedbench.engine.batched`), whose
numbers do not depend on the other rows of a step: run r's rows of the population are its rows
alone, and each run's ``upload`` is then made by its own algorithm (its seed keys the compressor's
draws) from its slice of the rows.
"""

from __future__ import annotations

import copy
from collections.abc import Hashable
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import torch
import torch.nn.functional as F

from fedbench.algorithms.base import Algorithm, RoundContext, map_rows
from fedbench.data.base import ArraySplit
from fedbench.engine.batched import chunks, runs_dropout_keys, train_rows
from fedbench.engine.batched_layers import RowLayers
from fedbench.engine.batches import ClientBatcher, seed_ahead
from fedbench.engine.compiled import StepMode
from fedbench.engine.federation import Federation, accuracy_spreads
from fedbench.engine.local import LocalConfig, LocalResult
from fedbench.engine.pending import to_device
from fedbench.engine.plan import RoundPlan, draw_plan, hashed_plan, lay_out, on_device, row_draws
from fedbench.models.flat import Buffers, FlatModel


@dataclass(frozen=True)
class MemberRound:
    """One run's part of a population round: its algorithm, its clients' context after
    ``prepare_round``, their local steps K_i, its global BatchNorm buffers, its batcher, its
    local configuration (its seed: minibatch, augmentation and dropout streams)."""

    algorithm: Algorithm
    ctx: RoundContext
    steps: list[int]
    buffers: Buffers
    batcher: ClientBatcher
    cfg: LocalConfig


def cat_rows(trees: list[Any]) -> Any:
    """Pytrees of ``[S_r, ...]`` row blocks of one structure, concatenated along the rows (None stays None)."""
    return map_rows(lambda *leaves: torch.cat(leaves), *trees)


def joint_context(ctxs: list[RoundContext]) -> RoundContext:
    """One context over the rows of every run: clients, steps, held rows and inputs concatenated,
    each broadcast ``[P]`` tensor repeated over its run's rows (``[R·S, P]``), and η_l a float
    when the runs' are equal, else an ``[R·S, 1]`` column of each run's η_l. The joint context is a federation of ΣN_r clients: run r's client i is client
    Σ_{q<r} N_q + i, and ``sizes`` are the runs' sizes one after another."""
    first = ctxs[0]
    keys = first.broadcast.keys()
    if any(c.broadcast.keys() != keys for c in ctxs):
        raise ValueError("the runs of a population broadcast different messages")
    for c in ctxs:
        for name, v in c.broadcast.items():
            if v.dim() != 1:
                raise ValueError(f"broadcast {name!r} of shape {tuple(v.shape)} is not a [P] row")
    broadcast = {name: torch.cat([c.broadcast[name].expand(len(c.clients), -1) for c in ctxs]) for name in keys}
    inputs = {name: torch.cat([c.inputs[name] for c in ctxs]) for name in first.inputs}
    sizes, clients = None, torch.cat([c.clients for c in ctxs])
    if all(c.sizes is not None for c in ctxs):  # run r's client i is joint client offset_r + i
        run_sizes = [c.sizes for c in ctxs if c.sizes is not None]
        offsets = to_device(torch.tensor([0, *[len(v) for v in run_sizes[:-1]]]), clients.device).cumsum(0)
        clients = torch.cat([c.clients + o for c, o in zip(ctxs, offsets)])
        sizes = torch.cat(run_sizes)
    lr: Any = first.lr
    if any(c.lr != first.lr for c in ctxs):  # each run's η_l on its rows (Capabilities.row_lr)
        like = first.broadcast["x"]
        lr = torch.cat([like.new_full((len(c.clients), 1), c.lr) for c in ctxs])
    return RoundContext(
        clients,
        lr,
        torch.cat([c.steps for c in ctxs]),
        broadcast,
        cat_rows([c.held for c in ctxs]),
        first.round,
        MappingProxyType(inputs),
        sizes,
        epoch_batches=min(c.epoch_batches for c in ctxs) and max(c.epoch_batches for c in ctxs),  # 0: one not given
    )


def row_columns(members: list[MemberRound], like: torch.Tensor) -> dict[str, torch.Tensor]:
    """Each parameter of the first member's ``Capabilities.row_params`` on which the members differ, as
    an ``[R·S, 1]`` column of each run's value (``like``'s dtype and device)."""
    first = members[0].algorithm
    column = {}
    for name in first.caps.row_params:
        values = [getattr(m.algorithm.params, name) for m in members]
        if all(v == values[0] for v in values):
            continue
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            raise ValueError(
                f"{first.caps.label}'s parameter {name} differs between runs and is not a number: {values}"
            )
        column[name] = torch.cat([like.new_full((len(m.ctx.clients), 1), float(v)) for m, v in zip(members, values)])
    return column


def local_algorithm(first: Algorithm, columns: dict[str, torch.Tensor], rows: slice) -> Algorithm:
    """The algorithm whose local hooks train ``rows`` of the joint rows: ``first``, with its per-row
    parameters (:func:`row_columns`) restricted to those rows."""
    if not columns:
        return first
    local = copy.copy(first)
    local.params = first.params.model_copy(update={name: v[rows] for name, v in columns.items()})
    return local


def joint_plan(plans: list[RoundPlan]) -> RoundPlan:
    """The runs' round plans side by side: ``[K, ΣS_r, B]`` with K and B the largest of any run;
    the widths are each step's largest (padding has mask 0, so a row's numbers do not change)."""
    k_max = max(p.steps for p in plans)
    b_max = max(p.index.shape[2] for p in plans)

    def pad(t: torch.Tensor, steps: int) -> torch.Tensor:
        return torch.nn.functional.pad(t, (0, b_max - t.shape[2], 0, 0, 0, k_max - steps))

    widths = tuple(max(p.width[k] if k < p.steps else 0 for p in plans) for k in range(k_max))
    memory = None
    if any(p.memory is not None for p in plans):
        memory = torch.cat(
            [pad(p.memory if p.memory is not None else torch.zeros_like(p.mask), p.steps) for p in plans], 1
        )
    crops = None
    if any(p.crops is not None for p in plans):
        if not all(p.crops is not None for p in plans) or len({p.crop_padding for p in plans}) > 1:
            raise ValueError("the runs of a population augment differently")
        crops = tuple(torch.cat([pad(p.crops[i], p.steps) for p in plans if p.crops is not None], 1) for i in range(3))
    return RoundPlan(
        torch.cat([pad(p.index, p.steps) for p in plans], 1),
        torch.cat([pad(p.mask, p.steps) for p in plans], 1),
        widths,
        memory,
        crops,  # type: ignore[arg-type]
        plans[0].crop_padding,
    )


def population_plan(members: list[MemberRound], train: ArraySplit, steps: list[int]) -> RoundPlan:
    """The round plan of every member's rows: drawn run by run from each run's batcher, then laid out at once
    on the host (two copies for the whole population) where no run joins replay draws or augments; else each
    run's plan, side by side (:func:`joint_plan`). The same plan either way.

    Runs whose batchers would draw the same batches (one :attr:`~fedbench.engine.batches.ClientBatcher.fingerprint`
    and cursor, the same clients and steps: the trials of one seed in a tuning population) draw them once; the
    others' cursors move as their own draws would have moved them. Under ``local.shuffle: device`` every run's
    rows are drawn on the device at once (:func:`~fedbench.engine.plan.hashed_plan`)."""
    if all(on_device(m.batcher, m.cfg) for m in members):
        return hashed_plan(train, [(m.batcher, m.ctx.client_ids(), m.steps) for m in members], [m.cfg for m in members])
    if any(m.cfg.replay is not None or m.cfg.augments for m in members):
        return joint_plan([draw_plan(train, m.batcher, m.ctx.client_ids(), m.steps, m.cfg) for m in members])
    alike: dict[Hashable, list[MemberRound]] = {}
    for m in members:
        key = (m.batcher.fingerprint, tuple(m.batcher.cursor), tuple(m.ctx.client_ids()), tuple(m.steps))
        alike.setdefault(key, []).append(m)
    leaders = [group[0] for group in alike.values()]
    seed_ahead([(m.batcher, m.ctx.client_ids(), m.steps) for m in leaders])  # their permutations' seeds at once
    drawn = {}
    for group in alike.values():
        leader = group[0]
        rows = row_draws(leader.batcher, leader.ctx.client_ids(), leader.steps, leader.cfg)
        for m in group:
            m.batcher.cursor = list(leader.batcher.cursor)
            drawn[id(m)] = rows
    return lay_out(train, [r for m in members for r in drawn[id(m)]], steps, members[0].cfg)


def run_population_clients(
    members: list[MemberRound], model: FlatModel, train: ArraySplit, chunk: int | None = None, mode: StepMode = "eager"
) -> list[LocalResult]:
    """Train the sampled clients of every member together, ``chunk`` rows at a time (all when None),
    through the eager or graphed step (``mode``), with the first member's local hooks (the population
    shares them); each member's upload is made by its own algorithm. Returns each member's
    :class:`LocalResult`."""
    ctx = joint_context([m.ctx for m in members])
    columns = row_columns(members, ctx.broadcast["x"])
    steps = [k for m in members for k in m.steps]
    plan = population_plan(members, train, steps)
    layers = RowLayers.of(model)
    device = ctx.clients.device
    if layers.has_dropout:
        keys = runs_dropout_keys([(m.cfg.seed, m.ctx.round, m.ctx.client_ids()) for m in members], device)
    else:
        keys = torch.zeros_like(ctx.clients)
    start_buffers = {  # each run's global BatchNorm buffers on each of its rows
        n: torch.cat([m.buffers[n].unsqueeze(0).expand(len(m.ctx.clients), *m.buffers[n].shape) for m in members])
        for n in members[0].buffers
    }
    finals, carries, buffers_out, losses = [], [], [], []
    for rows in chunks(len(steps), chunk):
        sub = ctx.select(rows)
        buffers = {n: v[rows].clone() for n, v in start_buffers.items()}
        x, carry, buffers, loss = train_rows(
            local_algorithm(members[0].algorithm, columns, rows),
            sub,
            steps[rows],
            plan.rows(rows),
            layers,
            buffers,
            train,
            members[0].cfg,
            keys[rows],
            mode,
        )
        finals.append(x)
        carries.append(carry)
        buffers_out.append(buffers)
        losses.append(loss)
    x, carry, loss = torch.cat(finals), cat_rows(carries), torch.cat(losses)
    buffers = {n: torch.cat([b[n] for b in buffers_out]) for n in members[0].buffers}
    results, at = [], 0
    # each client's buffers as views of the joint rows (one unbind a buffer): their average stacks them anyway
    client_rows = {n: v.unbind(0) for n, v in buffers.items()}
    summaries = run_summaries(members, x, loss)
    for m, (mean_loss, consistency) in zip(members, summaries):
        rows = slice(at, at + len(m.ctx.clients))
        at = rows.stop
        own = x[rows].clone()  # fresh, aligned storage: reductions over a run's rows sum as they do alone
        upload = m.algorithm.upload(m.ctx, own, map_rows(lambda v, rows=rows: v[rows].clone(), carry))
        per_client = [{n: v[i] for n, v in client_rows.items()} for i in range(rows.start, rows.stop)]
        results.append(LocalResult(upload, own, per_client, loss[rows].clone(), mean_loss, consistency))
    return results


def run_summaries(
    members: list[MemberRound], x: torch.Tensor, loss: torch.Tensor
) -> list[tuple[torch.Tensor | None, torch.Tensor | None]]:
    """Each member's mean client loss and consistency (:func:`~fedbench.engine.runner.consistency_of`) from the
    joint final rows ``x`` ``[R·S, P]`` and losses ``[R·S]``, computed for all runs at once (0-d views) where the
    members share S; else None each (the run computes its own)."""
    sizes = {len(m.ctx.clients) for m in members}
    if len(members) < 2 or len(sizes) > 1:
        return [(None, None)] * len(members)
    rows = x.unflatten(0, (len(members), -1))  # [R, S, P]
    consistency = ((rows - rows.mean(1, keepdim=True)) ** 2).sum(2).mean(1)
    return list(zip(loss.unflatten(0, (len(members), -1)).mean(1).unbind(0), consistency.unbind(0)))


EVAL_RUNS = 16  # runs evaluated together at most (each batch of the test set is [runs, batch, …] at once)


@torch.no_grad()
def evaluate_runs(
    model: FlatModel, points: list[torch.Tensor], buffers: list[Buffers], split: ArraySplit, batch_size: int
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(accuracy, mean cross-entropy) of each model ``points[r]`` with its BatchNorm ``buffers[r]`` on a
    whole split, as :meth:`FlatModel.scores` gives them one by one (0-d tensors, unread: each run reads
    them with its round, :mod:`fedbench.engine.pending`): each test batch goes through up to
    :data:`EVAL_RUNS` models at once (:func:`runs_per_sample`), and each run's per-sample losses are reduced
    alone."""
    scores: list[tuple[torch.Tensor, torch.Tensor]] = []
    for hits, loss in runs_per_sample(model, points, buffers, split, batch_size):
        accuracy = hits.float().mean(1).unbind(0)  # counts of 0/1 summed exactly, in any order
        scores += [(accuracy[r], loss[r].contiguous().mean()) for r in range(len(hits))]
    return scores


@torch.no_grad()
def runs_per_sample(
    model: FlatModel, points: list[torch.Tensor], buffers: list[Buffers], split: ArraySplit, batch_size: int
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Correctness ``[R_g, n]`` (bool) and cross-entropy ``[R_g, n]`` of the models ``points`` (with their
    BatchNorm ``buffers``) on a whole split, in eval mode, for groups of up to :data:`EVAL_RUNS` runs in order:
    each batch of the split goes through a group's models at once (``torch.func.vmap`` over the runs). A model
    that does not vmap in eval mode is evaluated one run at a time (:meth:`FlatModel.per_sample`)."""
    groups = []
    for group in chunks(len(points), EVAL_RUNS):
        flats = torch.stack(points[group])
        stacked = {n: torch.stack([b[n] for b in buffers[group]]) for n in buffers[group.start]}
        try:
            groups.append(_group_per_sample(model, flats, stacked, split, batch_size))
        except RuntimeError:  # a layer without a batching rule in eval mode
            alone = [model.per_sample(p, b, split, batch_size) for p, b in zip(points[group], buffers[group])]
            groups.append((torch.stack([c for c, _ in alone]), torch.stack([v for _, v in alone])))
    return groups


def _group_per_sample(
    model: FlatModel, flats: torch.Tensor, buffers: Buffers, split: ArraySplit, batch_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    model.module.eval()

    def one(flat: torch.Tensor, own: Buffers, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return model.masked(model.logits(flat, own, x), y)

    forward = torch.func.vmap(one, in_dims=(0, 0, None, None))
    correct, losses = [], []
    for start in range(0, len(split), batch_size):
        x, y = split.x[start : start + batch_size], split.y[start : start + batch_size]
        out = forward(flats, buffers, x, y)  # [R, n, C]
        runs, n = out.shape[:2]
        losses.append(F.cross_entropy(out.flatten(0, 1), y.repeat(runs), reduction="none").view(runs, n))
        correct.append(out.argmax(2) == y)
    return torch.cat(correct, 1), torch.cat(losses, 1)


@torch.no_grad()
def client_spreads(
    model: FlatModel,
    points: list[torch.Tensor],
    buffers: list[Buffers],
    split: ArraySplit,
    batch_size: int,
    feds: list[Federation],
) -> list[torch.Tensor]:
    """The std over its clients of each model's accuracy on each of its clients' samples of ``split`` (the training
    set; ``feds[r]`` the run's clients), as :meth:`~fedbench.engine.runner.RoundLoop.client_accuracy_spread` gives it
    one by one (0-d tensors, unread): the models' correctness from :func:`runs_per_sample`, every run's per-client
    means together (:func:`~fedbench.engine.federation.accuracy_spreads`)."""
    hits = torch.cat([h for h, _ in runs_per_sample(model, points, buffers, split, batch_size)])  # [R, n]
    return accuracy_spreads(hits, feds)
