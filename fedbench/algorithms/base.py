"""The algorithm API: a few pure hooks around one round loop that the algorithm does not own.

The engine runs every round the same way (see ``fedbench/engine/runner.py``)::

    ctx = RoundContext(clients, lr, steps,
                       algo.broadcast(state, clients),          # server → every sampled client
                       algo.client_state(state, clients),       # what each client already holds
                       inputs)                                  # engine inputs the algorithm declared
    ctx = algo.prepare_round(state, ctx, weights)               # optional exchange before local work
    x, carry = ctx.start, algo.local_init(ctx, ctx.start)       # [S, P] local iterates, their scratch
    for k in range(K_i):                                        # K_i = ctx.steps[i] local steps
        x, carry = algo.local_step(ctx, x, carry, grad)         # grad(z): minibatch gradient at z, [S, P] -> [S, P]
                                                                # grad(z, objective): its own loss (an Objective)
    up = algo.upload(ctx, x, carry)                             # Upload(sent={name: [S, P]}, kept=rows the clients keep)
    state, logs = algo.server_update(state, ctx, up, weights)   # aggregate, move the global model

Every hook is a function of its arguments that returns new values: the server state is the
algorithm's own typed :class:`~fedbench.algorithms.state.ServerState` (a frozen dataclass), the
clients' held rows and carry are ``NamedTuple`` s of ``[S, ...]`` rows, and nothing handed to a hook
is mutated by it (``[N, P]`` client tables are donated, :mod:`~fedbench.algorithms.client_table`).
Everything is a flat parameter vector: ``[P]`` for server quantities, ``[S, P]`` for the round's
clients, ``[N, P]`` for per-client state kept across rounds (SCAFFOLD's c_i, FedDyn's ∇L_i), so
update rules read like the papers' equations and the engine can execute the S clients one by one
or all at once. Algorithms never do I/O, pick devices or print.

Communication is counted from what the hooks return: every tensor of ``broadcast`` (a
:data:`Message`) is sent to each sampled client and every entry of ``Upload.sent`` by each
client — at 32 bits per float, or at the exact size a :class:`~fedbench.compress.Compressed` entry
reports. ``client_state`` is free (the client owns it), and so is ``Upload.kept``: the client's own
new state (e.g. its error-feedback memory) or statistics for the logs, handed to ``server_update``
only so that the simulation can keep it in an ``[N, P]`` table. ``server_update`` receives decoded
tensors.

Engine inputs an algorithm needs beyond the minibatch gradient (a full local gradient, a replay
memory's gradient, a bit allocation) are declared by name in its
:class:`~fedbench.algorithms.capabilities.Capabilities` (``inputs``) and read from ``ctx.inputs``;
the engine's registered providers (:mod:`fedbench.engine.inputs`) fill them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, Protocol, TypeVar

import torch
import torch.utils._pytree as pytree
from pydantic import BaseModel

from fedbench.algorithms.capabilities import Capabilities
from fedbench.algorithms.client_table import ClientTable, DeviceTable, HostTable
from fedbench.algorithms.state import ServerState
from fedbench.compress import Compressed, Compressor
from fedbench.optim.client import LocalOptimizer
from fedbench.optim.server import ServerOptimizer
from fedbench.optim.transform import Rate
from fedbench.registry import NoParams, Registry

if TYPE_CHECKING:
    from fedbench.continual.memory import ReplayMemory
    from fedbench.continual.tasks import TaskStream
    from fedbench.models.flat import FlatModel

Message = dict[str, torch.Tensor]
"""Named tensors on the wire (a broadcast): each entry is charged as communication."""

Logs = dict[str, Any]
"""A hook's per-round logs (JSON-able values), recorded with the round."""

ServerCall = tuple["Algorithm", Any, "RoundContext", "Upload", torch.Tensor]
"""One run's ``server_update`` arguments with its algorithm: ``(algorithm, state, ctx, upload, weights)``
(:meth:`Algorithm.server_updates`)."""

St = TypeVar("St", bound=ServerState)


class GradFn(Protocol):
    """The engine's gradient oracle for one local step (same minibatch on every call):
    ``grad(z)`` = clip(∇f_i(z; ξ)) + λz ``[S, P]``; ``grad(z, objective)`` the gradient of an
    algorithm's own local loss (a :class:`~fedbench.models.flat.Objective`, one row per client);
    ``grad.memory(z)`` the step's replay draw's gradient (``replay_apart``); ``grad.step`` the step's index k."""

    step: int  # the local step's index k in the round (0-based)

    def __call__(self, z: torch.Tensor, objective: Any = None) -> torch.Tensor: ...

    def memory(self, z: torch.Tensor) -> torch.Tensor: ...


class Upload(NamedTuple):
    """What each client hands over after its local work: ``sent``, its messages ``{name: [S, P]}``
    (charged, possibly :class:`~fedbench.compress.Compressed`), and ``kept``, a ``NamedTuple`` of
    ``[S, ...]`` rows that stay with the client (its new per-client state, or statistics for the
    logs), free, or None."""

    sent: dict[str, Any]
    kept: Any = None

    def rows(self, index: torch.Tensor | slice) -> Upload:
        """The upload of a subset of the round's clients."""
        return Upload({k: v[index] for k, v in self.sent.items()}, select_rows(self.kept, index))


def map_rows(f: Callable[..., torch.Tensor], *trees: Any) -> Any:
    """``f`` over the tensor leaves of pytrees of ``[S, ...]`` row blocks of one structure (None
    leaves stay None)."""
    return pytree.tree_map(lambda *leaves: None if leaves[0] is None else f(*leaves), *trees)


def select_rows(rows: Any, index: torch.Tensor | slice) -> Any:
    """``rows`` (a pytree of ``[S, ...]`` tensors, or None) restricted to ``index``."""
    return map_rows(lambda v: v[index], rows)


def where_rows(on: torch.Tensor, new: Any, old: Any) -> Any:
    """Rows of ``new`` where ``on`` ``[S]``, else rows of ``old``, leaf by leaf (pytrees of ``[S, ...]`` tensors)."""
    return map_rows(lambda n, o: torch.where(on.view(-1, *[1] * (n.dim() - 1)), n, o), new, old)


@dataclass(frozen=True)
class RoundContext:
    """What the S sampled clients of one round start from.

    ``lr`` is the round's local learning rate η_l (in a population of runs of several η_l, an ``[S, 1]``
    column of each row's), ``steps`` ``[S]`` the local steps K_i each
    client takes (float, for divisions); ``broadcast`` holds the server's message (``[P]``
    tensors, identical for every client; in a population of runs, :mod:`fedbench.engine.population_rows`,
    each is ``[S, P]``, its run's message on each of its rows, so local hooks use it as a row against ``[S, P]``); ``held`` the rows the clients already own (the
    algorithm's ``client_state``, a ``NamedTuple`` of ``[S, ...]`` rows, or None), so they cost no
    communication; ``inputs`` the engine inputs the algorithm declared (``Capabilities.inputs``),
    each ``[S, ...]``: ``full_grad`` = ∇f_i(x) over client i's whole data; ``memory_grad`` =
    ∇f_i†(x) on a draw from its replay memory and ``memory_size`` ``[S]`` (rows of an empty memory
    are zeros); ``bits`` ``[S]`` the bit widths of the wireless allocation. With
    ``replay_per_step`` and ``replay_apart`` the step's replay draw is not joined to the minibatch:
    ``grad(z)`` is the current minibatch's gradient and ``grad.memory(z)`` the draw's. ``sizes``
    ``[N]`` are every client's sample counts n_i at this stage of the run (a continual run's current
    task), or None where the caller has none to give (:meth:`client_sizes` then refuses). ``ids`` are
    ``clients`` on the host where the engine has them (:meth:`client_ids`), so that nothing host-side
    in a round waits for the device. ``epoch_batches`` is at least the most minibatches of one epoch,
    ⌈n_i / min(B, n_i)⌉, of any of the context's clients, on the host (0: not given), so that a table of one
    slot per minibatch is shaped without reading ``sizes``.
    """

    clients: torch.Tensor
    lr: Rate
    steps: torch.Tensor
    broadcast: Message
    held: Any = None
    round: int = 0
    inputs: Mapping[str, torch.Tensor] = field(default_factory=lambda: MappingProxyType({}))
    sizes: torch.Tensor | None = None
    ids: tuple[int, ...] | None = None
    epoch_batches: int = 0

    @property
    def start(self) -> torch.Tensor:
        """Initial local iterates ``[S, P]``: the broadcast global model for every client."""
        return self.broadcast["x"].expand(len(self.clients), -1).clone()

    def client_ids(self) -> list[int]:
        """The clients on the host: ``ids`` where the engine gave them, else ``clients`` read (which waits
        for a GPU). For what a round keys by client on the host (the compressors' streams)."""
        return list(self.ids) if self.ids is not None else self.clients.tolist()

    def select(self, rows: torch.Tensor | slice) -> RoundContext:
        """The context of a subset of the round's clients (the sequential engine uses one row)."""
        return RoundContext(
            self.clients[rows],
            self.lr[rows] if isinstance(self.lr, torch.Tensor) else self.lr,
            self.steps[rows],
            {k: v[rows] if v.dim() == 2 else v for k, v in self.broadcast.items()},
            select_rows(self.held, rows),
            self.round,
            MappingProxyType({k: v[rows] for k, v in self.inputs.items()}),
            self.sizes,
            self.ids[rows] if self.ids is not None and isinstance(rows, slice) else None,
            self.epoch_batches,
        )

    def sending(self, **message: torch.Tensor) -> RoundContext:
        """This context with ``message`` added to the broadcast (charged as downlink)."""
        return dataclasses.replace(self, broadcast={**self.broadcast, **message})

    def holding(self, held: Any) -> RoundContext:
        """This context with the clients' held rows replaced by ``held``."""
        return dataclasses.replace(self, held=held)

    def client_sizes(self) -> torch.Tensor:
        """n_i of every client ``[N]`` at this stage of the run (the round's ``sizes``)."""
        if self.sizes is None:
            raise ValueError("this round's context carries no client sizes (RoundContext.sizes)")
        return self.sizes

    def input(self, name: str) -> torch.Tensor:
        """The engine input ``name`` ``[S, ...]``; a KeyError naming the declaration if it is absent."""
        if name not in self.inputs:
            raise KeyError(
                f"engine input {name!r} is not in this round's context: declare it in the algorithm's "
                f"Capabilities(inputs=...) (provided: {sorted(self.inputs) or 'none'})"
            )
        return self.inputs[name]


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
    may replace (``memory.slots[client][task]``, e.g. by herding).

    For algorithms that run the network on inputs of their own (TARGET's server-side generator):
    ``model``, the run's :class:`~fedbench.models.flat.FlatModel`, ``buffers``, the global BatchNorm
    statistics (empty without BatchNorm; not to be mutated), ``input_shape``, one sample's shape, and
    ``input_range``, the smallest and largest training input value (the domain's bounds, e.g. the pixel
    range after normalisation)."""

    task: int
    sizes: torch.Tensor
    gradients: Callable[..., torch.Tensor]
    stream: TaskStream | None = None
    parts: tuple[torch.Tensor, ...] = ()
    outputs: Callable[..., tuple[torch.Tensor, torch.Tensor, torch.Tensor]] | None = None
    memory: ReplayMemory | None = None
    model: FlatModel | None = None
    buffers: Mapping[str, torch.Tensor] = field(default_factory=lambda: MappingProxyType({}))
    input_shape: tuple[int, ...] = ()
    input_range: tuple[float, float] | None = None


@dataclass(frozen=True)
class AlgorithmContext:
    """Facts about the federation an algorithm may use: N, P, the run's device and seed and the
    configured uplink compressor. The clients' sample counts n_i change with a continual run's task,
    so they come with each round (``RoundContext.sizes``), not from here."""

    num_clients: int
    dim: int
    device: torch.device
    seed: int = 0
    compressor: Compressor = field(default_factory=lambda: Compressor(NoParams(), ()))
    layout: tuple[int, ...] = ()  # sizes of the model's parameter tensors in flat order; () = one block of P
    local_optimizer: LocalOptimizer = field(default_factory=LocalOptimizer)  # local.optimizer (x − η_l·d or Adam on d)
    batch_size: int = 0  # local.batch_size B (0: unknown); C-FLAG's IAG tables count minibatches of ⌈n_i/B⌉ per epoch
    host_client_state: bool = False  # [N, P] client tables in (pinned) host memory (fedbench run --client-state host)
    tasks: int = 0  # a continual run's number of tasks (0 outside one)

    @property
    def blocks(self) -> tuple[int, ...]:
        """Parameter-tensor sizes summing to P (the whole model as one block when no layout is known)."""
        return self.layout or (self.dim,)


class Algorithm:
    """FedAvg (McMahan et al. 2017) and the base of every algorithm.

    Local work is ``local.optimizer`` on the minibatch gradient (plain SGD, ``x ← x − η_l·∇f_i(x; ξ)``,
    by default); the server moves the global model along the weighted mean change
    Δ = Σ_i w_i (x_i − x) with the configured server optimizer (:mod:`fedbench.optim.server`),
    which makes FedAvgM, FedAdam, FedYogi and FedAMSGrad configuration. The parameters' type is
    the one the registry was given (``ALGORITHMS.register(name, description, Params)``); a
    subclass may annotate ``params: Params`` for the type checker.
    """

    caps: ClassVar[Capabilities] = Capabilities(label="FedAvg")  # set by AlgorithmRegistry.register
    params: BaseModel

    def __init__(self, params: BaseModel, server: ServerOptimizer, ctx: AlgorithmContext):
        self.params = params
        self.server = server
        self.ctx = ctx

    # -- state -------------------------------------------------------------------------
    def init_state(self, x0: torch.Tensor) -> ServerState:
        """Server state at round 0: the global model ``x`` and the server optimizer's state."""
        return ServerState(x0.clone(), self.server.init(x0))

    def client_table(self, like: torch.Tensor, fill: torch.Tensor | None = None) -> ClientTable:
        """A preallocated ``[N, P]`` per-client state table with ``like``'s dtype and device, zero or
        every row ``fill``; in host memory (:class:`~fedbench.algorithms.client_table.HostTable`)
        when the run keeps client state on the host."""
        n = self.ctx.num_clients
        table: ClientTable = (HostTable if self.ctx.host_client_state else DeviceTable).zeros(n, like)
        if fill is not None:
            table = table.write(torch.arange(n, device=like.device), fill.reshape(1, -1).expand(n, -1))
        return table

    # -- hooks ---------------------------------------------------------------------------
    def broadcast(self, state: Any, clients: torch.Tensor) -> Message:
        """The server's message to every sampled client (``[P]`` tensors; each one costs bits)."""
        return {"x": state.x}

    def client_state(self, state: Any, clients: torch.Tensor) -> Any:
        """Rows ``[S, ...]`` of per-client state the sampled clients hold themselves (free): a
        ``NamedTuple``, or None (the default)."""
        return None

    def prepare_round(self, state: Any, ctx: RoundContext, weights: torch.Tensor) -> RoundContext:
        """An exchange before local work (e.g. C-FLAG Alg. 1 lines 2–3) from the clients' ``ctx.inputs``;
        returns the context to train with (``ctx.sending(...)`` adds downlink messages, charged;
        ``ctx.holding(...)`` replaces the held rows). ``weights`` are the round's aggregation weights.
        Default: ``ctx`` as it is."""
        return ctx

    def local_init(self, ctx: RoundContext, x: torch.Tensor) -> Any:
        """The clients' carry at their first local step from iterates ``x`` ``[S, P]``: every leaf
        an ``[S, ...]`` row block (the batched engine keeps a finished client's rows as they are).
        Default: the local optimizer's state."""
        return self.ctx.local_optimizer.init(x)

    def local_step(self, ctx: RoundContext, x: torch.Tensor, carry: Any, grad: GradFn) -> tuple[torch.Tensor, Any]:
        """x ← x − η_l·∇f_i(x; ξ), or an Adam step on ∇f_i(x; ξ) under ``local.optimizer: adam``."""
        return self.ctx.local_optimizer.step(x, grad(x), carry, ctx.lr)

    def upload(self, ctx: RoundContext, x: torch.Tensor, carry: Any) -> Upload:
        """Each client's message after its local work: its model change, through the scenario's
        uplink compressor."""
        return Upload({"delta": self.compress(ctx, x - ctx.broadcast["x"])})

    def server_update(self, state: Any, ctx: RoundContext, up: Upload, weights: torch.Tensor) -> tuple[Any, Logs]:
        """The new state from the (decoded) uploads, and per-round logs (may be empty)."""
        return self.server_step(state, weighted_mean(up.sent["delta"], weights)), {}

    @classmethod
    def server_updates(cls, calls: Sequence[ServerCall]) -> list[tuple[Any, Logs]]:
        """``server_update`` of several runs of this class (a population's), one ``(algorithm, state, ctx, upload,
        weights)`` call each, in order. Default: each alone; a class that declares ``Capabilities.joint_server``
        computes them together where that saves work (GradMA's QP_g over the runs' rows)."""
        return [algorithm.server_update(state, ctx, up, weights) for algorithm, state, ctx, up, weights in calls]

    def end_task(self, state: Any, data: TaskData) -> tuple[Any, Logs]:
        """Continual scenarios: called after the last round of each task (after its evaluation and the
        memory fill); returns the new state (e.g. with EWC's Fisher) and logs; a ``task_acc`` entry
        replaces the network classifier's accuracy-matrix row (an algorithm's own classifier, e.g.
        iCaRL's nearest mean of exemplars). Default: nothing."""
        return state, {}

    # -- helpers -------------------------------------------------------------------------

    def compress(self, ctx: RoundContext, rows: torch.Tensor) -> Compressed:
        """The configured compressor applied to ``rows`` [S, P] (random draws keyed by round and client)."""
        return self.ctx.compressor(rows, self.ctx.seed, ctx.round, ctx.client_ids())

    def server_step(self, state: St, delta: torch.Tensor, **changes: Any) -> St:
        """``state`` with x ← server optimizer step along Δ, its new optimizer state and ``changes``."""
        x, opt = self.server.step(state.x, delta, state.opt)
        return dataclasses.replace(state, x=x, opt=opt, **changes)


def weighted_mean(rows: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Σ_i w_i rows_i for ``rows`` [S, P] and weights [S] that sum to one."""
    return weights.to(rows.dtype) @ rows


class AlgorithmRegistry(Registry[type[Algorithm]]):
    """The algorithm registry: each entry declares its :class:`Capabilities` where it registers."""

    def register(
        self, name: str, description: str, params: type[BaseModel] = NoParams, tags: tuple[str, ...] = (), **caps: Any
    ) -> Callable[[type[Algorithm]], type[Algorithm]]:
        """Decorator adding an algorithm class under ``name``; ``caps`` are the fields of its
        :class:`Capabilities` (``label`` required), stored on the class as ``cls.caps``."""
        declared = Capabilities(**caps)
        add = super().register(name, description, params, tags)

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
