"""Local work of all S sampled clients as one batched computation (the fast path).

Client parameters are stacked ``[S, P]``. The round's minibatches are drawn up front into a
:class:`~fedbench.engine.plan.RoundPlan`; each local step is then one gather of ``[S, B]``
sample indices from the device-resident data and one ``torch.func.vmap``-ed forward/backward of
all S clients, with no per-client Python. Clients that have finished their K_i steps are frozen
by masking, so heterogeneous step counts cost nothing extra but idle rows. The algorithm's hooks
already work on ``[S, P]`` rows, so they run unchanged.

BatchNorm running statistics are kept per client, stacked ``[S, …]``, and move only with the
step's first gradient evaluation, as in the sequential path; BatchNorm normalises over each
client's real samples and dropout masks are hashed from each client's key
(:mod:`fedbench.engine.batched_layers`). ``chunk`` splits the S clients into groups trained one
after another (device memory); every row's numbers are independent of the others', so a chunked
round equals an unchunked one.

Batches, their order and the clipping/weight-decay convention are those of the sequential path
(:mod:`fedbench.engine.local`), which stays the reference: a test runs every registered
algorithm, and every BatchNorm model, both ways and requires the same numbers to float tolerance
(dropout masks differ between the two paths by construction).
"""

from __future__ import annotations

from typing import Any

import torch

from fedbench.algorithms.base import Algorithm, RoundContext, Upload, where_rows
from fedbench.data.base import ArraySplit
from fedbench.engine.batched_layers import RowLayers, mix32
from fedbench.engine.batches import ClientBatcher
from fedbench.engine.compiled import StepMode, objective_step, step_function
from fedbench.engine.executor import STATE_ROWS
from fedbench.engine.local import LocalConfig, LocalResult
from fedbench.engine.pending import to_device
from fedbench.engine.plan import RoundPlan, draw_plan
from fedbench.engine.uploads import merged
from fedbench.models.flat import Buffers, FlatModel, Objective
from fedbench.seeding import torch_seeds


def _twice(t: torch.Tensor) -> torch.Tensor:
    return torch.cat([t, t])


class BatchedOracle:
    """Minibatch gradients of all rows at once: row i on client i's padded, masked batch with its
    own BatchNorm buffers ``[S, …]``; with a ``memory_mask`` (``replay_apart``) the masked samples
    are the step's replay draw, left out of ``grad`` and differentiated by ``memory`` (as the
    sequential oracle). ``keys`` ``[S]`` seed each row's dropout masks (default zeros); ``mode``
    picks the model's eager, compiled or graphed step (:mod:`fedbench.engine.compiled`). ``updated``
    holds the buffers after the step's first ``grad`` call."""

    def __init__(
        self,
        layers: RowLayers,
        buffers: Buffers,
        x: torch.Tensor,
        y: torch.Tensor,
        mask: torch.Tensor,
        cfg: LocalConfig,
        memory_mask: torch.Tensor | None = None,
        keys: torch.Tensor | None = None,
        mode: StepMode = "eager",
        step: int = 0,
    ):
        self.step = step  # the local step's index k in the round
        self.layers, self.buffers, self.x, self.y, self.cfg = layers, buffers, x, y, cfg
        self.keys = torch.zeros(len(y), dtype=torch.int64, device=y.device) if keys is None else keys
        self.mask = mask if memory_mask is None else mask - memory_mask
        self.memory_mask = memory_mask
        self.first_loss: torch.Tensor | None = None
        self.updated: Buffers | None = None
        self.calls = 0
        self._grad = step_function(layers, mode)

    def _evaluate(
        self, points: torch.Tensor, mask: torch.Tensor, objective: Objective | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, Buffers]:
        """Raw gradients, losses and updated buffers of every row (of the cross-entropy, or of ``objective``: an
        algorithm's own loss, each row with its own values of the objective's ``rows`` fields); each call its
        own dropout keys. A single row is evaluated as two copies of itself: vmap over one row runs ungrouped
        convolutions, whose float sums differ from the grouped ones of two or more rows, and a
        chunk of one client must give the numbers of a larger chunk."""
        self.layers.model.module.train()
        self.calls += 1
        keys = self.keys  # read by dropout layers only: mixed per call where the model has one
        if self.layers.has_dropout:
            keys = mix32(self.keys ^ mix32(torch.full_like(self.keys, self.calls)))
        one = len(points) == 1
        rows = _twice if one else (lambda t: t)
        buffers = {n: rows(v) for n, v in self.buffers.items()}
        inputs = (rows(points), buffers, rows(self.x), rows(self.y), rows(mask), rows(keys))
        if objective is None:
            grads, (_, (losses, updated)) = self._grad(*inputs)
        else:
            fields = tuple(rows(v) for v in objective.row_values())
            grads, (_, (losses, updated)) = objective_step(self.layers, objective)(*inputs, fields)
        if one:
            grads, losses, updated = grads[:1], losses[:1], {n: v[:1] for n, v in updated.items()}
        return grads, losses, updated

    def __call__(self, points: torch.Tensor, objective: Objective | None = None) -> torch.Tensor:
        grads, losses, updated = self._evaluate(points, self.mask, objective)
        if self.first_loss is None:
            self.first_loss, self.updated = losses, updated
        return self.cfg.finish(grads, points)

    def memory(self, points: torch.Tensor) -> torch.Tensor:
        """∇f_I(z) of every row on its replay draw; exact zero rows for rows without one."""
        if self.memory_mask is None:
            return torch.zeros_like(points)
        grads, _, _ = self._evaluate(points, self.memory_mask)
        drawn = (self.memory_mask.sum(1) > 0).unsqueeze(1)
        return torch.where(drawn, self.cfg.finish(grads, points), torch.zeros_like(points))


def dropout_keys(seed: int, round_: int, clients: list[int], device: torch.device) -> torch.Tensor:
    """Each client's 32-bit dropout key of the round, from its ``("dropout", t, i)`` stream."""
    return runs_dropout_keys([(seed, round_, clients)], device)


def runs_dropout_keys(runs: list[tuple[int, int, list[int]]], device: torch.device) -> torch.Tensor:
    """:func:`dropout_keys` of several runs' ``(seed, round, clients)``, end to end: their streams' seeds computed
    together (:func:`~fedbench.seeding.torch_seeds`, the same integers) and moved to ``device`` in one copy."""
    rows = [(seed, round_, c) for seed, round_, clients in runs for c in clients]
    return to_device(torch.tensor([v & 0xFFFFFFFF for v in torch_seeds("dropout", rows)], dtype=torch.int64), device)


def train_rows(
    algo: Algorithm,
    ctx: RoundContext,
    steps: list[int],
    plan: RoundPlan,
    layers: RowLayers,
    buffers: Buffers,
    train: ArraySplit,
    cfg: LocalConfig,
    keys: torch.Tensor,
    mode: StepMode = "eager",
) -> tuple[torch.Tensor, Any, Buffers, torch.Tensor]:
    """The K_i local steps (``steps``) of one chunk of clients: final iterates ``[s, P]``, the
    clients' final carry, buffers ``[s, …]`` and mean minibatch losses ``[s]``. A client past its
    K_i keeps its iterate, carry and buffers."""
    x = ctx.start
    carry = algo.local_init(ctx, x)
    k_of, shortest = to_device(torch.tensor(steps), x.device), min(steps)
    loss_sum = x.new_zeros(len(ctx.clients))
    for k in range(max(steps)):
        xb, yb, mask, memory = plan.batch(k, train)
        step_keys = mix32(keys ^ mix32(torch.full_like(keys, 0x10000 + k))) if layers.has_dropout else keys
        oracle = BatchedOracle(layers, buffers, xb, yb, mask, cfg, memory, step_keys, mode, k)
        moved, moved_carry = algo.local_step(ctx, x, carry, oracle)
        on = k_of > k
        x = where_rows(on, moved, x)
        carry = moved_carry if k < shortest else where_rows(on, moved_carry, carry)  # every row still on: as moved
        loss_sum += torch.where(on, oracle.first_loss, 0.0)
        if oracle.updated:
            buffers = {n: where_rows(on, oracle.updated[n], v) for n, v in buffers.items()}
    return x, carry, buffers, loss_sum / k_of.to(loss_sum.dtype)


def chunks(total: int, size: int | None) -> list[slice]:
    """Consecutive row slices of at most ``size`` rows (one slice of all rows when None)."""
    step = total if size is None else max(1, size)
    return [slice(i, min(i + step, total)) for i in range(0, total, step)]


def run_clients_batched(
    algo: Algorithm,
    ctx: RoundContext,
    steps: list[int],
    model: FlatModel,
    global_buffers: Buffers,
    train: ArraySplit,
    batcher: ClientBatcher,
    cfg: LocalConfig,
    chunk: int | None = None,
    mode: StepMode = "eager",
) -> LocalResult:
    """Train the round's S clients from ``ctx.start``, ``chunk`` clients at a time (all when None),
    through the eager, compiled or graphed step (``mode``); client i stops after ``steps[i]`` steps."""
    clients, device = ctx.client_ids(), ctx.start.device
    plan = draw_plan(train, batcher, clients, steps, cfg)
    layers = RowLayers.of(model)
    keys = dropout_keys(cfg.seed, ctx.round, clients, device) if layers.has_dropout else torch.zeros_like(ctx.clients)
    uploads: list[Upload] = []
    finals, per_client, losses = [], [], []
    for rows in chunks(len(clients), chunk):
        sub, size = ctx.select(rows), rows.stop - rows.start
        buffers = {n: v.unsqueeze(0).expand(size, *v.shape).clone() for n, v in global_buffers.items()}
        x, carry, buffers, loss = train_rows(
            algo, sub, steps[rows], plan.rows(rows), layers, buffers, train, cfg, keys[rows], mode
        )
        uploads.append(algo.upload(sub, x, carry))
        finals.append(x)
        per_client += [{n: v[i] for n, v in buffers.items()} for i in range(size)]
        losses.append(loss)
    return LocalResult(merged(uploads), torch.cat(finals), per_client, torch.cat(losses))


def probe_inputs(
    model: FlatModel, buffers: Buffers, train: ArraySplit, batch_size: int, rows: int
) -> tuple[torch.Tensor, Buffers, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The batched step's inputs for ``rows`` clients at the model's point, each on the first ``batch_size``
    training samples (a full mask, zero dropout keys): shapes for probes, nothing drawn from a run's streams."""
    device = train.y.device
    idx = torch.arange(min(batch_size, len(train.y)), device=device).expand(rows, -1)
    stacked = {n: v.unsqueeze(0).expand(rows, *v.shape).clone() for n, v in buffers.items()}
    mask = torch.ones(idx.shape, dtype=train.x.dtype, device=device)
    flat = model.flatten().unsqueeze(0).expand(rows, -1).clone()
    return flat, stacked, train.x[idx], train.y[idx], mask, torch.zeros(rows, dtype=torch.int64, device=device)


def probe_client_bytes(model: FlatModel, buffers: Buffers, train: ArraySplit, batch_size: int, cfg: LocalConfig) -> int:
    """Peak CUDA memory per client of a two-client batched gradient on batches of ``batch_size``
    training samples, plus :data:`~fedbench.engine.executor.STATE_ROWS` ``[P]`` rows: what each
    client of a chunk adds (a chunk of one runs as two rows). Draws nothing from the run's streams
    (its generators are forked)."""
    device = train.y.device
    torch.cuda.synchronize(device)
    base = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    with torch.random.fork_rng(devices=[device]):
        flat, stacked, x, y, mask, _ = probe_inputs(model, buffers, train, batch_size, 2)
        oracle = BatchedOracle(RowLayers.of(model), stacked, x, y, mask, cfg)
        oracle(flat)
        del oracle
    torch.cuda.synchronize(device)
    return (torch.cuda.max_memory_allocated(device) - base) // 2 + STATE_ROWS * model.dim * 4
