"""GradMA (Luo et al., "GradMA: A Gradient-Memory-based Accelerated Federated Learning with
Alleviated Catastrophic Forgetting", CVPR 2023) and its ablations GradMA-W and GradMA-S.

Signs follow the paper: a worker's update is d_i = x_t − x_i (its upload is the usual
Δ_i = x_i − x_t = −d_i) and the server moves x ← x − η_g·(…); η_g is the scenario's server ``lr``.
The QP of Eqs. 2–4 is :func:`fedbench.algorithms.projection.project`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any, Literal, NamedTuple

import torch
from pydantic import BaseModel, ConfigDict, Field

from fedbench.algorithms.base import (
    ALGORITHMS,
    Algorithm,
    AlgorithmContext,
    GradFn,
    Logs,
    RoundContext,
    ServerCall,
    Upload,
    weighted_mean,
)
from fedbench.algorithms.client_table import ClientTable
from fedbench.algorithms.projection import project, solve
from fedbench.algorithms.state import ServerState, extend, state
from fedbench.host import host_side
from fedbench.optim.server import ServerOptimizer

SERVER = {"optimizer": "sgd", "lr": 1.0, "momentum": 0.0}
DIAGNOSTICS = {"qp_fallbacks": "QP projection block(s) fell back (left unprojected)"}
ROW_PARAMS = ("beta1", "beta2")  # the server's momentum and memory decay: runs that differ in them train together


@state
class GradMAWState(ServerState):
    last_local: ClientTable | None  # x_{t,−1}^(i): each worker's last local model [N, P] (``prev_anchor: last_local``)


class WorkerMemory(NamedTuple):
    """mem_red's buffer (Alg. 4) of m slots: the worker in each, D_j = exp(``log_scale``_j)·``U``_j. ``U`` lives
    with the model; the slot bookkeeping (every other field) on the host, where mem_red's control flow reads it."""

    U: torch.Tensor  # [m, P]
    log_scale: torch.Tensor  # [m] float64 (host)
    client: torch.Tensor  # the worker in each slot [m] int64, −1: empty (host)
    taken: torch.Tensor  # c(j), the participations counted [m] int64 (host)
    inserted: torch.Tensor  # insertion stamp (tie-break) [m] int64 (host)
    clock: torch.Tensor  # the next stamp, int64 scalar (host)

    @classmethod
    def empty(cls, slots: int, like: torch.Tensor) -> WorkerMemory:
        """m empty slots for rows like ``like`` ``[P]``."""
        zeros = torch.zeros(slots, dtype=torch.int64)
        return cls(
            like.new_zeros((slots, like.numel())),
            torch.zeros(slots, dtype=torch.float64),
            torch.full((slots,), -1, dtype=torch.int64),
            zeros,
            zeros.clone(),
            torch.zeros((), dtype=torch.int64),
        )


class Decay(NamedTuple):
    """Eq. 7's scales of one round (:meth:`GradMAS.decay`), on the host."""

    coef: torch.Tensor  # [participants] float64: β2·exp(log_scale_j), 0 for a fresh entry
    log_scale: torch.Tensor  # [m] float64: the new log scales
    dead: torch.Tensor | None  # [used] bool: slots zeroed by β2 = 0, or None


@state
class GradMASState(ServerState):
    """The server momentum m~ and the worker memory of mem_red (Alg. 4)."""

    momentum: torch.Tensor  # m~ [P]
    memory: WorkerMemory


@state
class GradMAState(GradMASState):
    last_local: ClientTable | None


class PreviousIterate(NamedTuple):
    x_prev: torch.Tensor  # x_{t,−1}^(i) [S, P]


class WorkerCarry(NamedTuple):
    x_prev: torch.Tensor  # x_{τ−1} [S, P]
    fallbacks: torch.Tensor  # QP_l blocks left unprojected so far [S] int64


class WorkerKept(NamedTuple):
    fallbacks: torch.Tensor  # [S] int64
    last_local: torch.Tensor | None  # x_{t+1}^(i) [S, P] (``prev_anchor: last_local``)


class _ProjectionParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    projection: Literal["per_tensor", "whole_model"] = Field(
        default="per_tensor",
        description="one QP per parameter tensor (the authors' code, which produced the paper's numbers) "
        "or one QP on the whole flat model (the paper's Eqs. 2–4)",
    )


class GradMAWParams(_ProjectionParams):
    """Worker-side QP_l (Alg. 2)."""

    prev_anchor: Literal["last_local", "global"] = Field(
        default="last_local",
        description="x_{t,−1}, the 'previous iterate' at a round's start: the worker's last local model "
        "(paper, x_0 if it never took part) or the global model x_t (the full-GradMA code)",
    )


class GradMASParams(_ProjectionParams):
    """Server-side momentum, memory and QP_g (Algs. 3–4)."""

    beta1: float = Field(default=0.5, ge=0, lt=1, description="server momentum β1 on the projected buffer (Eq. 6)")
    beta2: float = Field(default=0.5, ge=0, lt=1, description="decay β2 of the per-worker memory D (Eq. 7)")
    memory_size: int = Field(
        default=100, ge=0, description="m: most workers kept in memory (Alg. 4; S ≤ m); 0 is FedAvgM exactly"
    )


class GradMAParams(GradMASParams, GradMAWParams):
    """GradMA: QP_l on the workers, momentum + memory + QP_g on the server."""


class GradMAW(Algorithm):
    """GradMA-W (Alg. 7): Worker_Update with QP_l (Alg. 2, Eq. 5); server x ← x − η_g·Σ w_i d_i.

    Local step τ: g = ∇f_i(x_τ; ξ_τ), G = [∇f_i(x_{τ−1}; ξ_τ), ∇f_i(x_t; ξ_τ), x_τ − x_t] (all three
    gradients on the step's minibatch, as the authors' code; weight decay and clipping apply to each),
    g~ = QP_l(g, G) = g + Gz, z ≥ 0 (Eq. 5), x_{τ+1} = x_τ − η_l·g~. The constraint x_τ − x_t is
    zero at τ = 0 and dropped. x_{τ−1} at τ = 0 is the worker's last local model (an ``[N, P]``
    table filled through the free ``_last_local`` upload, x_0 before its first round) or x_t
    (``prev_anchor: global``). The server step goes through the configured server optimizer
    (plain ``sgd`` by default: no momentum, as Alg. 7). Three gradient evaluations per local step.
    """

    params: GradMAWParams

    def __init__(self, params: BaseModel, server: ServerOptimizer, ctx: AlgorithmContext):
        super().__init__(params, server, ctx)
        self.blocks = ctx.blocks if self.params.projection == "per_tensor" else (ctx.dim,)

    def worker_table(self, x0: torch.Tensor) -> ClientTable | None:
        """The table of last local models, x_0^(i) = x_0 (``prev_anchor: last_local``), or None."""
        return self.client_table(x0, fill=x0) if self.params.prev_anchor == "last_local" else None

    def init_state(self, x0: torch.Tensor) -> Any:
        return extend(Algorithm.init_state(self, x0), GradMAWState, last_local=self.worker_table(x0))

    def client_state(self, state: Any, clients: torch.Tensor) -> PreviousIterate:
        if state.last_local is not None:
            return PreviousIterate(state.last_local[clients])
        return PreviousIterate(state.x.unsqueeze(0).expand(len(clients), -1))

    def local_init(self, ctx: RoundContext, x: torch.Tensor) -> WorkerCarry:
        return WorkerCarry(ctx.held.x_prev, torch.zeros(len(x), dtype=torch.int64, device=x.device))

    def local_step(
        self, ctx: RoundContext, x: torch.Tensor, carry: WorkerCarry, grad: GradFn
    ) -> tuple[torch.Tensor, WorkerCarry]:
        """Alg. 2 lines 3–6 (Eq. 5); x_{τ−1} and the QP failure count ride in the carry."""
        x_t = ctx.broadcast["x"].expand_as(x)
        g = grad(x)
        G = torch.stack([grad(carry.x_prev), grad(x_t), x - x_t], dim=1)
        g_tilde, failed = project(g, G, self.blocks)
        return x - ctx.lr * g_tilde, WorkerCarry(x, carry.fallbacks + failed)

    def upload(self, ctx: RoundContext, x: torch.Tensor, carry: WorkerCarry) -> Upload:
        last = x if self.params.prev_anchor == "last_local" else None
        return Upload({"delta": x - ctx.broadcast["x"]}, WorkerKept(carry.fallbacks, last))

    def keep_last(self, state: Any, ctx: RoundContext, kept: WorkerKept) -> ClientTable | None:
        """The participants' x_{t+1}^(i) kept (Alg. 1 line 7)."""
        table = state.last_local
        if table is not None and kept.last_local is not None:
            table = table.write(ctx.clients, kept.last_local)
        return table

    def worker_round(self, state: Any, ctx: RoundContext, kept: WorkerKept) -> tuple[ClientTable | None, torch.Tensor]:
        """:meth:`keep_last`, and the round's QP_l fallbacks (a 0-d tensor, read with the round's metrics)."""
        return self.keep_last(state, ctx, kept), kept.fallbacks.sum()

    def server_update(self, state: Any, ctx: RoundContext, up: Upload, weights: torch.Tensor) -> tuple[Any, Logs]:
        table, fallbacks = self.worker_round(state, ctx, up.kept)
        new = self.server_step(state, weighted_mean(up.sent["delta"], weights), last_local=table)
        return new, {"qp_fallbacks": fallbacks}


class GradMAS(Algorithm):
    """GradMA-S (Alg. 8): plain local SGD; the server runs mem_red (Alg. 4) and Server_Update (Alg. 3).

    With d = Σ w_i d_i (Eq. 6; the engine's weights, n_i or 1/S), m = β1·m~ + d (Eq. 6, the carried
    momentum is the *projected* m~); the memory of every buffered worker j is updated (Eq. 7):
    D_j ← d_j if j entered the buffer this round, β2·D_j + d_j if it took part, β2·D_j otherwise;
    then m~ = QP_g(m, D) (Eq. 8, constraints from every buffered worker) and x ← x − η_g·m~.

    mem_red (Alg. 4): at most m workers are buffered, with participation counters c(j); a
    participant not yet buffered evicts, when the buffer is full, the non-participating buffered
    worker with the least c (ties: the earliest inserted), whose D and c are dropped. D is an
    ``[m, P]`` table of slots (:class:`WorkerMemory`), stored as D_j = exp(``log_scale``_j)·U_j
    so that β2^k decay never underflows (QP_g is invariant to a column's positive scale; β2 = 0
    zeroes absent workers' memory, as Eq. 7 says, and a zero D_j constrains nothing: it is left out of
    QP_g). m = 0 skips memory and QP_g: FedAvgM exactly.
    """

    params: GradMASParams

    def __init__(self, params: BaseModel, server: ServerOptimizer, ctx: AlgorithmContext):
        super().__init__(params, server, ctx)
        spec = server.spec
        if spec.optimizer != "sgd" or spec.momentum != 0:
            raise ValueError(
                f"{type(self).__name__} applies its own server momentum (params beta1) with step size server.lr; "
                f"server.optimizer must be 'sgd' with momentum 0, got optimizer={spec.optimizer!r}, momentum={spec.momentum}"
            )
        self.blocks = ctx.blocks if self.params.projection == "per_tensor" else (ctx.dim,)
        self.slots = min(self.params.memory_size, ctx.num_clients)

    def init_state(self, x0: torch.Tensor) -> Any:
        memory = WorkerMemory.empty(self.slots, x0)
        return extend(Algorithm.init_state(self, x0), GradMASState, momentum=torch.zeros_like(x0), memory=memory)

    @host_side
    def mem_red(self, memory: WorkerMemory, clients: list[int]) -> tuple[WorkerMemory, list[int], list[bool], int]:
        """Alg. 4: buffer the round's workers, evicting as needed. Returns the memory with the new slot
        bookkeeping (``client``, ``taken``, ``inserted``, ``clock``; ``U`` as it was; all on the host), each
        participant's slot, whether it entered the buffer this round (a fresh entry) and the slots in use."""
        owner = memory.client.tolist()
        count = memory.taken.tolist()
        stamp = memory.inserted.tolist()
        clock = int(memory.clock)
        slot_of = {c: j for j, c in enumerate(owner) if c >= 0}
        active = set(clients)
        fresh = []
        for i in clients:
            if i in slot_of:
                count[slot_of[i]] += 1
                fresh.append(False)
                continue
            if len(slot_of) == self.slots:
                old = [j for c, j in slot_of.items() if c not in active]
                if not old:
                    raise ValueError(
                        f"GradMA memory_size m={self.params.memory_size} is smaller than the {len(clients)} clients "
                        "per round: Alg. 4 needs S ≤ m (or m = 0)"
                    )
                j = min(old, key=lambda k: (count[k], stamp[k]))
                del slot_of[owner[j]]
            else:
                j = len(slot_of)  # slots are only freed by eviction and reused at once: a prefix is used
            owner[j], count[j], stamp[j] = i, 1, clock
            clock += 1
            slot_of[i] = j
            fresh.append(True)
        books = memory._replace(
            client=torch.tensor(owner, dtype=torch.int64),
            taken=torch.tensor(count, dtype=torch.int64),
            inserted=torch.tensor(stamp, dtype=torch.int64),
            clock=torch.tensor(clock, dtype=torch.int64),
        )
        return books, [slot_of[i] for i in clients], fresh, len(slot_of)

    def update_memory(
        self, memory: WorkerMemory, used: int, slots: list[int], fresh: list[bool], d_rows: torch.Tensor
    ) -> WorkerMemory:
        """Eq. 7 on the slots: fresh D_j = d_j, participant D_j = β2·D_j + d_j, others D_j = β2·D_j;
        ``used`` slots are filled. Returns the memory with the new U and log scales."""
        scales = self.decay(memory.log_scale, used, slots, fresh)
        U, dev = memory.U.clone(), memory.U.device
        idx = torch.tensor(slots, dtype=torch.int64).to(dev)
        coef = scales.coef.to(U.dtype).to(dev).unsqueeze(1)  # β2·D_j = (β2·exp(log_scale_j))·U_j
        U[idx] = torch.where(torch.tensor(fresh).to(dev).unsqueeze(1), d_rows, coef * U[idx] + d_rows)
        if scales.dead is not None:  # β2 = 0: D_j = 0, no constraint
            U[:used][scales.dead.to(dev)] = 0.0
        return memory._replace(U=U, log_scale=scales.log_scale)

    @host_side
    def decay(self, log_scale: torch.Tensor, used: int, slots: list[int], fresh: list[bool]) -> Decay:
        """Eq. 7's scales, on the host: the participants' coefficients β2·exp(log_scale_j) (0 for a fresh entry),
        the new log scales (absent workers' decayed by log β2, the participants' reset to 0) and the slots β2 = 0
        zeroed (None when none)."""
        log_scale = log_scale.clone()
        beta2 = self.params.beta2
        log_beta2 = math.log(beta2) if beta2 > 0 else -math.inf
        keep = torch.tensor([0.0 if f else beta2 for f in fresh], dtype=torch.float64)
        idx = torch.tensor(slots, dtype=torch.int64)
        coef = keep * log_scale[idx].exp()
        absent = torch.ones(used, dtype=torch.bool)
        absent[idx] = False
        log_scale[:used] = torch.where(absent, log_scale[:used] + log_beta2, log_scale[:used])
        log_scale[idx] = 0.0
        dead = torch.isneginf(log_scale[:used])
        if not bool(dead.any()):
            return Decay(coef, log_scale, None)
        log_scale[:used][dead] = 0.0
        return Decay(coef, log_scale, dead)

    def memory_round(self, state: Any, ctx: RoundContext, up: Upload, weights: torch.Tensor) -> tuple[Any, Logs]:
        """Alg. 4 then Alg. 3 (Eqs. 6–8)."""
        return memory_rounds([(self, state, ctx, up, weights)])[0]

    def server_update(self, state: Any, ctx: RoundContext, up: Upload, weights: torch.Tensor) -> tuple[Any, Logs]:
        return self.memory_round(state, ctx, up, weights)

    @classmethod
    def server_updates(cls, calls: Sequence[ServerCall]) -> list[tuple[Any, Logs]]:
        """:meth:`memory_round` of several runs, their QP_g together (:func:`memory_rounds`)."""
        return memory_rounds(calls)


def memory_rounds(calls: Sequence[ServerCall]) -> list[tuple[Any, Logs]]:
    """Alg. 4 then Alg. 3 (Eqs. 6–8) of each call's run (a :class:`GradMAS` or :class:`GradMA`, a population's runs
    or one): its momentum and memory on its own; QP_g (Eq. 8) of the runs whose live constraints are as many, cut
    into the same blocks, as one projection of their rows (each row projected alone); every run's live constraints
    read to the host in one transfer (:func:`project_memories`)."""
    moved = []  # each run's (algorithm, old state, m, memory, slots in use)
    for algorithm, old, ctx, up, weights in calls:
        assert isinstance(algorithm, GradMAS)
        d_rows = -up.sent["delta"]  # d_i = x_t − x_{t+1}^(i)
        d = -weighted_mean(up.sent["delta"], weights)  # Eq. 6
        m = old.momentum * algorithm.params.beta1 + d  # Eq. 6
        memory, used = old.memory, 0
        if algorithm.slots > 0:
            memory, slots, fresh, used = algorithm.mem_red(memory, ctx.client_ids())
            memory = algorithm.update_memory(memory, used, slots, fresh, d_rows)  # Eq. 7
        moved.append((algorithm, old, m, memory, used))
    remembering = [i for i, (algorithm, *_) in enumerate(moved) if algorithm.slots > 0]
    projected = project_memories([(moved[i][2], moved[i][3].U[: moved[i][4]], moved[i][0].blocks) for i in remembering])
    out = dict(zip(remembering, projected))
    results = []
    for i, (algorithm, old, m, memory, used) in enumerate(moved):
        m, fallbacks = out.get(i, (m, 0))
        x = old.x - algorithm.server.spec.lr * m
        new = dataclasses.replace(old, x=x, momentum=m, memory=memory)
        results.append((new, {"qp_fallbacks": fallbacks, "memory_slots": used}))
    return results


def project_memories(
    items: Sequence[tuple[torch.Tensor, torch.Tensor, tuple[int, ...]]],
) -> list[tuple[torch.Tensor, int]]:
    """QP_g (Eq. 8) of each ``(m [P], D [used, P], blocks)``: m~ and its blocks left unprojected. A zero D_j (β2 = 0
    zeroes absent workers': ⟨m~, 0⟩ ≥ 0 holds) is no constraint and is dropped; the items with as many live
    constraints and one block layout are one projection of their rows (:func:`~fedbench.algorithms.projection.solve`)."""
    if not items:
        return []
    lives = [D.any(1) for _, D, _ in items]
    flags = torch.cat(lives).tolist()  # every item's live constraints, one read
    groups: dict[tuple, list[int]] = {}
    constraints = []
    at = 0
    for k, (m, D, blocks) in enumerate(items):
        live, at = flags[at : at + len(D)], at + len(D)
        if not all(live):
            D = D[torch.tensor([j for j, on in enumerate(live) if on], dtype=torch.int64, device=D.device)]
        constraints.append(D)
        groups.setdefault((len(D), tuple(blocks), m.shape, m.dtype, m.device), []).append(k)
    out: list[tuple[torch.Tensor, int]] = [(items[0][0], 0)] * len(items)
    for members in groups.values():
        blocks = items[members[0]][2]
        if len(members) == 1:
            m, D = items[members[0]][0].unsqueeze(0), constraints[members[0]].unsqueeze(0)
        else:
            m, D = torch.stack([items[k][0] for k in members]), torch.stack([constraints[k] for k in members])
        m_tilde, dual = solve(m, D, blocks)  # Eq. 8; the fallback counts on the host
        for k, row, count in zip(members, m_tilde.unbind(0), dual.counts):
            out[k] = (row, count)
    return out


class GradMA(GradMAW, GradMAS):
    """GradMA (Alg. 1): Worker_Update with QP_l (Alg. 2, see :class:`GradMAW`) and, on the server,
    mem_red (Alg. 4) with Server_Update (Alg. 3, see :class:`GradMAS`). ``qp_fallbacks`` logs the
    blocks left unprojected by QP_l (all workers, all steps) plus QP_g."""

    params: GradMAParams

    def init_state(self, x0: torch.Tensor) -> GradMAState:
        """GradMA-S's state (momentum, memory) with GradMA-W's last local models."""
        return extend(GradMAS.init_state(self, x0), GradMAState, last_local=self.worker_table(x0))

    def server_update(self, state: Any, ctx: RoundContext, up: Upload, weights: torch.Tensor) -> tuple[Any, Logs]:
        return GradMA.server_updates([(self, state, ctx, up, weights)])[0]

    @classmethod
    def server_updates(cls, calls: Sequence[ServerCall]) -> list[tuple[Any, Logs]]:
        """Each run's last local models kept, then its memory round (QP_g together, :func:`memory_rounds`);
        ``qp_fallbacks`` adds its workers' QP_l fallbacks (a 0-d tensor, read with the round's metrics)."""
        worker = [up.kept.fallbacks.sum() for _, _, _, up, _ in calls]
        tabled = []
        for algorithm, old, ctx, up, weights in calls:
            assert isinstance(algorithm, GradMA)
            table = algorithm.keep_last(old, ctx, up.kept)
            tabled.append((algorithm, dataclasses.replace(old, last_local=table), ctx, up, weights))
        return [
            (new, {**logs, "qp_fallbacks": logs["qp_fallbacks"] + count})
            for (new, logs), count in zip(memory_rounds(tabled), worker)
        ]


ALGORITHMS.register(
    "gradma",
    "GradMA: QP-projected local steps, server momentum projected onto a worker memory",
    GradMAParams,
    label="GradMA",
    server=SERVER,
    diagnostics=DIAGNOSTICS,
    row_params=ROW_PARAMS,
    joint_server=True,
)(GradMA)
ALGORITHMS.register(
    "gradma_w",
    "GradMA-W: GradMA's QP-projected local steps with plain server averaging",
    GradMAWParams,
    label="GradMA-W",
    server=SERVER,
    diagnostics=DIAGNOSTICS,
    vmap_server=True,
)(GradMAW)
ALGORITHMS.register(
    "gradma_s",
    "GradMA-S: local SGD, server momentum projected onto a worker memory (mem_red + QP_g)",
    GradMASParams,
    label="GradMA-S",
    server=SERVER,
    diagnostics=DIAGNOSTICS,
    row_params=ROW_PARAMS,
    joint_server=True,
)(GradMAS)
