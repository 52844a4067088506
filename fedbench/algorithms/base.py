"""The algorithm API: a few hooks around one round loop that the algorithm does not own.

The engine runs every round the same way (see ``fedbench/engine/runner.py``)::

    ctx = RoundContext(clients, lr, steps,
                       algo.broadcast(state, clients),      # server → every sampled client
                       algo.client_state(state, clients))   # what each client already holds
    algo.prepare_round(state, ctx, weights)                 # optional exchange before local work
    x   = ctx.start                                         # [S, P] local iterates
    for k in range(K_i):                                    # K_i = ctx.steps[i] local steps
        x = algo.local_step(ctx, x, grad)                   # grad(z): minibatch gradient at z, [S, P] -> [S, P]
                                                            # grad(z, objective): of the algorithm's own loss (batchable = False)
    up  = algo.upload(ctx, x)                               # what each client sends, {name: [S, P]}
    algo.server_update(state, ctx, up, weights)             # aggregate, move the global model

Everything is a flat parameter vector: ``[P]`` for server quantities, ``[S, P]`` for the round's
clients, ``[N, P]`` for per-client state kept across rounds (SCAFFOLD's c_i, FedDyn's ∇L_i),
so update rules read like the papers' equations and the engine can execute the S clients one
by one or all at once. Algorithms never do I/O, pick devices or print.

Communication is counted from what the hooks return: every tensor of ``broadcast`` is sent to
each sampled client and every entry of the upload is sent by each client — at 32 bits per float,
or at the exact size a :class:`~fedbench.compress.Compressed` entry reports. ``client_state`` is
free (the client owns it), and so are upload entries whose name starts with ``_``: they are the
client's own new state (e.g. its error-feedback memory), handed to ``server_update`` only so the
simulation can keep it in an ``[N, P]`` table. ``server_update`` receives decoded tensors.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Protocol

import torch
from pydantic import BaseModel

from fedbench.algorithms.capabilities import Capabilities
from fedbench.optim.local import LocalOptimizer
from fedbench.algorithms.client_table import HostTable
from fedbench.compress import Compressed, Compressor
from fedbench.optim.server import ServerOptimizer
from fedbench.registry import NoParams, Registry

if TYPE_CHECKING:
    from fedbench.continual.memory import ReplayMemory
    from fedbench.continual.tasks import TaskStream

State = dict[str, torch.Tensor]


class GradFn(Protocol):
    """The engine's gradient oracle for one local step (same minibatch on every call):
    ``grad(z)`` = clip(∇f_i(z; ξ)) + λz ``[S, P]``; ``grad(z, objective)`` the gradient of an
    algorithm's own local loss (``batchable=False``); ``grad.memory(z)`` the step's replay draw's
    gradient (``replay_apart``)."""

    def __call__(self, z: torch.Tensor, objective: Any = None) -> torch.Tensor: ...

    def memory(self, z: torch.Tensor) -> torch.Tensor: ...


@dataclass
class RoundContext:
    """What the S sampled clients of one round start from.

    ``lr`` is the round's local learning rate η_l, ``steps`` ``[S]`` the local steps K_i each
    client takes (float, for divisions); ``broadcast`` holds the server's message (``[P]``
    tensors, identical for every client); ``per_client`` holds client-specific ``[S, ...]``
    tensors that the clients already own (e.g. SCAFFOLD's c_i), so they cost no communication.

    ``per_client`` is also the clients' scratch space during the round: ``local_step`` may store
    rows there (e.g. GradMA's previous local iterate) and read them at the next step; the
    engine gives each client its own dict when it runs clients one by one. In the batched engine a
    client that has finished its K_i steps keeps receiving (ignored) scratch updates, so scratch
    must not feed ``upload`` unless every client runs the same number of steps.

    The engine's per-client inputs are typed fields, filled as the algorithm's
    :class:`~fedbench.algorithms.capabilities.Capabilities` ask: ``full_grad`` ``[S, P]`` =
    ∇f_i(x) over client i's whole data (``full_gradient``); ``memory_grad`` ``[S, P]`` = ∇f_i†(x)
    on a draw from its replay memory and ``memory_size`` ``[S]`` (``memory_gradient``; rows of an
    empty memory are zeros); ``bits`` ``[S]`` the bit widths of the wireless allocation
    (``adaptive_bits``). With ``replay_per_step`` and ``replay_apart`` the step's replay draw is not
    joined to the minibatch: ``grad(z)`` is the current minibatch's gradient and ``grad.memory(z)``
    the draw's (same clipping/weight decay; exact zero rows while the memory is empty).
    """

    clients: torch.Tensor
    lr: float
    steps: torch.Tensor
    broadcast: dict[str, torch.Tensor]
    per_client: dict[str, torch.Tensor] = field(default_factory=dict)
    round: int = 0
    full_grad: torch.Tensor | None = None
    memory_grad: torch.Tensor | None = None
    memory_size: torch.Tensor | None = None
    bits: torch.Tensor | None = None

    @property
    def start(self) -> torch.Tensor:
        """Initial local iterates ``[S, P]``: the broadcast global model for every client."""
        x = self.broadcast["x"]
        return x.unsqueeze(0).expand(len(self.clients), -1).clone()

    def select(self, rows: slice) -> "RoundContext":
        """The context of a subset of the round's clients (the sequential engine uses one row)."""
        inputs = {k: None if v is None else v[rows] for k, v in self.inputs().items()}
        return RoundContext(
            self.clients[rows], self.lr, self.steps[rows], self.broadcast,
            {k: v[rows] for k, v in self.per_client.items()}, self.round, **inputs,
        )

    def inputs(self) -> dict[str, torch.Tensor | None]:
        """The engine's typed per-client inputs (``None`` where the algorithm did not ask)."""
        return {"full_grad": self.full_grad, "memory_grad": self.memory_grad, "memory_size": self.memory_size, "bits": self.bits}


@dataclass(frozen=True)
class TaskData:
    """A finished task, handed to :meth:`Algorithm.end_task` (continual scenarios): its index, every
    client's sample count on it ``[N]``, and ``gradients(point, squared=False)`` ``[N, P]``: each
    client's mean gradient over its data of the task at ``point`` (the engine's clipping and weight
    decay), or with ``squared`` the mean over its minibatches of g_b ⊙ g_b (raw, e.g. EWC's Fisher).

    For algorithms that need more (LwF's old classes, iCaRL's herding and nearest-mean classifier):
    ``stream`` (classes of every task, test indices, label masks), ``parts`` (each client's training
    indices of the task), ``outputs(point, split, indices=None)`` → (penultimate features ``[n, d]``,
    logits ``[n, K]``, labels ``[n]``) of ``split``'s (``"train"``/``"test"``) samples, all of them when
    ``indices`` is None, in eval mode with the global BatchNorm statistics (models with ``stages()``), and
    ``memory``: the clients' replay memories with the finished task's slot filled, which the algorithm
    may replace (``memory.slots[client][task]``, e.g. by herding)."""

    task: int
    sizes: torch.Tensor
    gradients: Callable[..., torch.Tensor]
    stream: TaskStream | None = None
    parts: tuple[torch.Tensor, ...] = ()
    outputs: Callable[..., tuple[torch.Tensor, torch.Tensor, torch.Tensor]] | None = None
    memory: ReplayMemory | None = None


@dataclass(frozen=True)
class AlgorithmContext:
    """Facts about the federation an algorithm may use: N, P, each client's sample count n_i, the
    run's seed and the configured uplink compressor."""

    num_clients: int
    dim: int
    client_sizes: torch.Tensor  # [N] float
    device: torch.device
    seed: int = 0
    compressor: Compressor = field(default_factory=lambda: Compressor(NoParams(), ()))
    layout: tuple[int, ...] = ()  # sizes of the model's parameter tensors in flat order; () = one block of P
    local_optimizer: LocalOptimizer = field(default_factory=LocalOptimizer)  # local.optimizer (x − η_l·d or Adam on d)
    batch_size: int = 0  # local.batch_size B (0: unknown); C-FLAG's IAG tables count minibatches of ⌈n_i/B⌉ per epoch
    host_client_state: bool = False  # [N, P] client tables in (pinned) host memory (fedbench run --client-state host)

    @property
    def blocks(self) -> tuple[int, ...]:
        """Parameter-tensor sizes summing to P (the whole model as one block when no layout is known)."""
        return self.layout or (self.dim,)


class Algorithm:
    """FedAvg (McMahan et al. 2017) and the base of every algorithm.

    Local work is plain SGD, ``x ← x − η_l·∇f_i(x; ξ)``; the server moves the global model along
    the weighted mean change Δ = Σ_i w_i (x_i − x) with the configured server optimizer
    (:mod:`fedbench.optim.server`), which makes FedAvgM, FedAdam, FedYogi and FedAMSGrad configuration.
    """

    Params: ClassVar[type[BaseModel]] = NoParams
    caps: ClassVar[Capabilities] = Capabilities(label="FedAvg")  # set by AlgorithmRegistry.register

    def __init__(self, params: BaseModel, server: ServerOptimizer, ctx: AlgorithmContext):
        self.params = params
        self.server = server
        self.ctx = ctx

    # -- state -------------------------------------------------------------------------
    def init_state(self, x0: torch.Tensor) -> State:
        """Server state at round 0: the global model ``x`` and the server optimizer's state."""
        return {"x": x0.clone(), **{f"opt.{k}": v for k, v in self.server.init(x0).items()}}

    def client_table(self, like: torch.Tensor, fill: torch.Tensor | None = None) -> torch.Tensor:
        """A preallocated ``[N, P]`` per-client state table with ``like``'s dtype and device, zero or
        every row ``fill``; in host memory (:class:`~fedbench.algorithms.client_table.HostTable`)
        when the run keeps client state on the host. Use it through ``t[rows]``, ``t[rows] = v``,
        ``t.index_add_(0, rows, v)`` and ``t += v`` only."""
        n = self.ctx.num_clients
        table = HostTable.zeros(n, like) if self.ctx.host_client_state else like.new_zeros((n, like.numel()))
        if fill is not None:
            table[torch.arange(n, device=like.device)] = fill.reshape(1, -1).expand(n, -1)
        return table

    # -- hooks ---------------------------------------------------------------------------
    def broadcast(self, state: State, clients: torch.Tensor) -> dict[str, torch.Tensor]:
        """The server's message to every sampled client (``[P]`` tensors; each one costs bits)."""
        return {"x": state["x"]}

    def client_state(self, state: State, clients: torch.Tensor) -> dict[str, torch.Tensor]:
        """Rows ``[S, ...]`` of per-client state the sampled clients hold themselves (free)."""
        return {}

    def prepare_round(self, state: State, ctx: RoundContext, weights: torch.Tensor) -> None:
        """An exchange before local work (e.g. C-FLAG Alg. 1 lines 2–3): the clients' ``full_grad`` /
        ``memory_grad`` rows are in ``ctx.per_client``; tensors added to ``ctx.broadcast`` here are
        charged as downlink. ``weights`` are the round's aggregation weights. Default: nothing."""

    def local_step(self, ctx: RoundContext, x: torch.Tensor, grad: GradFn) -> torch.Tensor:
        """x ← x − η_l·∇f_i(x; ξ), or an Adam step on ∇f_i(x; ξ) under ``local.optimizer: adam``."""
        return self.ctx.local_optimizer.step(ctx, x, grad(x))

    def upload(self, ctx: RoundContext, x: torch.Tensor) -> dict[str, torch.Tensor | Compressed]:
        """Each client's message after its local work, ``{name: [S, P]}``: its model change,
        through the scenario's uplink compressor."""
        return {"delta": self.compress(ctx, x - ctx.broadcast["x"])}

    def server_update(
        self, state: State, ctx: RoundContext, uploads: dict[str, torch.Tensor], weights: torch.Tensor
    ) -> dict[str, Any]:
        """Aggregate and update ``state`` in place; return per-round logs (may be empty)."""
        self.apply_server_step(state, weighted_mean(uploads["delta"], weights))
        return {}

    def end_task(self, state: State, data: TaskData) -> dict[str, Any]:
        """Continual scenarios: called after the last round of each task (after its evaluation and the
        memory fill); may update ``state`` in place (e.g. EWC's Fisher). Returns logs; a ``task_acc``
        entry replaces the network classifier's accuracy-matrix row (an algorithm's own classifier,
        e.g. iCaRL's nearest mean of exemplars). Default: nothing."""
        return {}

    # -- helpers -------------------------------------------------------------------------
    def compress(self, ctx: RoundContext, rows: torch.Tensor) -> Compressed:
        """The configured compressor applied to ``rows`` [S, P] (random draws keyed by round and client)."""
        return self.ctx.compressor(rows, self.ctx.seed, ctx.round, ctx.clients)

    def apply_server_step(self, state: State, delta: torch.Tensor) -> None:
        """x ← server optimizer step along Δ, keeping its state under ``opt.*`` keys."""
        opt = {k[4:]: v for k, v in state.items() if k.startswith("opt.")}
        state["x"] = self.server.step(state["x"], delta, opt)


def weighted_mean(rows: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Σ_i w_i rows_i for ``rows`` [S, P] and weights [S] that sum to one."""
    return weights.to(rows.dtype) @ rows


class AlgorithmRegistry(Registry[type[Algorithm]]):
    """The algorithm registry: each entry declares its :class:`Capabilities` where it registers."""

    def register(self, name: str, description: str, params: type[BaseModel] = NoParams, **caps: Any) -> Callable:
        """Decorator adding an algorithm class under ``name``; ``caps`` are the fields of its
        :class:`Capabilities` (``label`` required), stored on the class as ``cls.caps``."""
        declared = Capabilities(**caps)
        add = super().register(name, description, params)

        def register_class(cls: type[Algorithm]) -> type[Algorithm]:
            if any(entry.obj is cls for entry in self):
                raise ValueError(f"algorithm class {cls.__name__} is registered twice; register a subclass")
            cls.caps = declared
            return add(cls)

        return register_class

    def capabilities(self, name: str) -> Capabilities:
        """The declaration of the algorithm registered as ``name``."""
        return self.get(name).obj.caps


ALGORITHMS = AlgorithmRegistry("algorithm")
