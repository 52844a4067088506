"""The round loop shared by every algorithm, with recording, divergence detection and resume.

One round (1-based t) is plain FL: sample S clients from the ``("sampling", t)`` stream, let the
algorithm broadcast, train the clients locally (η_l = lr·decay^(t−1)), let the algorithm aggregate
and update the server, evaluate the global model on the whole test set every ``eval.every``
rounds, and commit the round's metrics to the store. The metrics stay on the device until a round
evaluates, checkpoints or is the last; then the rounds since the last read are read to the host at once
and committed together (:mod:`fedbench.engine.pending`), so on a GPU the rounds in between never wait
for it. A checkpoint every ``checkpoint_every`` rounds lets an interrupted run resume with identical
numbers.

A run diverges, and stops at once, when a round's train or test loss or the model is non-finite,
or when its train loss exceeds :data:`~fedbench.store.DIVERGED_LOSS_FACTOR` × ln C (C classes; ln C is the
cross-entropy of an untrained model's uniform guess). Smaller finite blow-ups finish and are
flagged in the tables (:mod:`fedbench.report.health`).

Every other axis is a round plug-in attached by its scenario block (:mod:`fedbench.engine.axes`):
a wireless uplink (:mod:`fedbench.wireless.plugin`), a continual task stream
(:mod:`fedbench.engine.task_stream`). Their hooks (:mod:`fedbench.engine.plugins`) run around sampling,
local work, aggregation and evaluation; the loop itself has no branch for either. What an algorithm
needs beyond the minibatch gradient comes from the providers of :mod:`fedbench.engine.inputs`, and
what it reports beyond the metrics from its declared diagnostics; the loop names no algorithm.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import time
import traceback
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, TypeVar

import numpy as np
import torch

from fedbench.algorithms.base import Message, RoundContext
from fedbench.algorithms.state import flatten_state, restore_state, state_bytes
from fedbench.compress import BITS_PER_FLOAT
from fedbench.engine.axes import build_plugins
from fedbench.engine.batched import probe_client_bytes, probe_inputs, run_clients_batched
from fedbench.engine.batched_layers import RowLayers
from fedbench.engine.batches import ClientBatcher
from fedbench.engine.checkpoint import LAYOUT, resume_point, run_identity, save_checkpoint
from fedbench.engine.compiled import StepMode, use_compile_cache
from fedbench.engine.executor import ClientExecutor, choose_executor
from fedbench.engine.federation import InputRequest, accuracy_spreads
from fedbench.engine.inputs import PROVIDERS, Provided, resolve
from fedbench.engine.lease import leased
from fedbench.engine.local import LocalConfig, LocalResult, run_clients_sequential
from fedbench.engine.pending import PendingRound, read_rounds, to_device
from fedbench.engine.plugins import Received, RoundPlugin
from fedbench.engine.precision import run_precision
from fedbench.engine.setup import DataCache, RunSetup, build_run
from fedbench.engine.step_price import PriceBook, priced_step
from fedbench.engine.threads import pinned_threads
from fedbench.engine.uploads import aggregation_weights, decoded, sent_bits
from fedbench.models.flat import Buffers, average_buffers
from fedbench.options import RunOptions
from fedbench.scenario import RunSpec, run_id_of, run_record
from fedbench.seeding import numpy_stream, torch_seed
from fedbench.store import DIVERGED_LOSS_FACTOR, DONE, ResultsStore
from fedbench.versions import versions

RoundCallback = Callable[[int, dict[str, float | None]], None]
SHOWN_LOGS = (
    "epsilon",
)  # round logs handed to ``on_round`` beside the metrics (the privacy plug-in's ε, shown per round)


@dataclass(frozen=True)
class RunOutcome:
    """How a run ended: ``finished``, ``diverged``, ``failed``, ``skipped`` (already done) or ``busy``
    (another process holds its lease and trains it)."""

    run_id: str
    status: str
    error: str | None = None


def sample_clients(num: int, per_round: int, seed: int, round_: int) -> np.ndarray:
    """S distinct clients of all N, uniformly without replacement, sorted (the ``("sampling", t)`` stream),
    on the host: a copy of the draw kept for the runs that share the seed (a population's tuning trials draw once)."""
    return _sampled(num, per_round, seed, round_).copy()


@functools.lru_cache(maxsize=4096)
def _sampled(num: int, per_round: int, seed: int, round_: int) -> np.ndarray:
    """:func:`sample_clients`' draws, kept (read-only)."""
    chosen = sample_among(np.arange(num), per_round, seed, round_)
    chosen.setflags(write=False)
    return chosen


def sample_among(eligible: np.ndarray, per_round: int, seed: int, round_: int) -> np.ndarray:
    """min(S, |eligible|) distinct clients of ``eligible``, uniformly without replacement, sorted (the
    ``("sampling", t)`` stream; NumPy's ``choice`` of an array draws the positions its ``choice`` of a count
    would, so all N eligible is plain sampling), as int64 ids on the host: the round reads them there without
    waiting for the device, and moves them to it once (:meth:`RoundLoop.context`)."""
    chosen = numpy_stream(seed, "sampling", round_).choice(eligible, size=min(per_round, len(eligible)), replace=False)
    return np.sort(chosen).astype(np.int64)


def local_consistency(final: torch.Tensor) -> float:
    """(1/S)Σ_i ‖x_{i,K} − x̄‖² with x̄ = (1/S)Σ_i x_{i,K}: the dispersion of the clients' final
    local models (lower means more consistent local updates; docs/adding-an-algorithm.md)."""
    return float(consistency_of(final))


def consistency_of(final: torch.Tensor) -> torch.Tensor:
    """:func:`local_consistency` as a 0-d tensor on the rows' device."""
    return ((final - final.mean(0)) ** 2).sum(1).mean()


T = TypeVar("T", bound=RoundPlugin)
Scores = tuple[float, float] | tuple[torch.Tensor, torch.Tensor]  # the test set's (accuracy, loss), read or not


def round_metrics(ctx: RoundContext, result: LocalResult, buffer_numel: int) -> dict[str, Any]:
    """A trained round's metrics; ``bits_up`` counts every upload sent (the float BatchNorm buffers
    travel both ways at 32 bits), ``test_*`` are filled by the evaluation. The train loss, the
    consistency and the uplink's bits stay 0-d tensors until the round is read
    (:func:`~fedbench.engine.pending.read_rounds`)."""
    n = len(ctx.clients)
    buffer_bits = n * buffer_numel * BITS_PER_FLOAT
    return {
        "train_loss": result.losses.mean() if result.mean_loss is None else result.mean_loss,
        "bits_up": sent_bits(result.uploads) + buffer_bits,
        "bits_down": n * sum(v.numel() for v in ctx.broadcast.values()) * BITS_PER_FLOAT + buffer_bits,
        "consistency": consistency_of(result.final) if result.consistency is None else result.consistency,
        "test_acc": None,
        "test_loss": None,
    }


def idle_metrics() -> dict[str, float | None]:
    """The metrics of a round in which no sampled client trained: nothing sent."""
    nothing: dict[str, float | None] = {"train_loss": None, "bits_up": 0.0, "bits_down": 0.0, "consistency": None}
    return {**nothing, "test_acc": None, "test_loss": None}


def warn_diagnostics(run: str, declared: Mapping[str, str], extra: dict[str, Any], t: int, warned: set[str]) -> None:
    """Warn once per run about each diagnostic count the algorithm declared (``Capabilities.diagnostics``)
    that round t's logs report non-zero; the tables footnote the totals."""
    for key, meaning in declared.items():
        if extra.get(key) and key not in warned:
            warned.add(key)
            warnings.warn(
                f"{run}: {extra[key]} {meaning} at round {t}; the round logs count every later one",
                RuntimeWarning,
                stacklevel=1,
            )


def local_steps(spec: RunSpec, batcher: ClientBatcher) -> int:
    """A run's local steps: rounds × the largest K_i any client can take in a round."""
    local = spec.local
    if local.iterations is not None:
        return spec.rounds * local.iterations
    epochs = local.epochs if local.random_epochs is None else local.random_epochs[1]
    return spec.rounds * max(batcher.steps_for_epochs(c, epochs) for c in range(spec.clients.num))


@dataclass(frozen=True)
class OpenRound:
    """A round opened up to its local work (:meth:`RoundLoop.open_round`): its number, start time,
    learning rate, the plug-ins' ``begin_round`` logs, and the clients' context, local steps and aggregation
    weights (``ctx`` None: no sampled client trains)."""

    t: int
    start: float
    lr: float
    begun: dict
    ctx: RoundContext | None = None
    steps: list[int] = dataclasses.field(default_factory=list)
    weights: torch.Tensor | None = None


@dataclass(frozen=True)
class Sampled:
    """A round opened up to its engine inputs (:meth:`RoundLoop.sample_round`): its number, start time, learning
    rate and the plug-ins' ``begin_round`` logs; the sampled clients on the host (none: no client trains), their
    local steps, and on the device the clients and the server's broadcast to them."""

    t: int
    start: float
    lr: float
    begun: dict
    ids: list[int] = dataclasses.field(default_factory=list)
    steps: list[int] = dataclasses.field(default_factory=list)
    clients: torch.Tensor | None = None
    broadcast: Message | None = None


class RoundLoop:
    """Executes the rounds of one run on a prepared :class:`RunSetup`, with the round plug-ins of
    the spec's blocks (:func:`~fedbench.engine.axes.build_plugins`) around the plain round."""

    def __init__(
        self,
        spec: RunSpec,
        seed: int,
        setup: RunSetup,
        executor: str = "auto",
        chunk: int | None = None,
        compile_step: str = "auto",
        book: PriceBook | None = None,
        resumed: StepMode | None = None,
        run_steps: int | None = None,
    ):
        self.spec, self.seed, self.s = spec, seed, setup
        self.fed = setup.federation  # the clients' data at the current stage (plug-ins may move it on)
        self.state = setup.algorithm.init_state(setup.x0)
        self.buffers = setup.buffers0
        self._stream_seed = (-1, 0)  # (round, its ("dropout", round) seed): :meth:`streams`, computed once a round
        self.plugins = build_plugins(spec, seed, setup)
        caps = setup.algorithm.caps
        local = spec.local
        cfg = LocalConfig(
            local.weight_decay,
            local.clip_grad_norm,
            local.augment,
            seed,
            replay_apart=caps.replay_apart,
            shuffle=local.shuffle,
        )
        for plugin in self.plugins:
            cfg = plugin.local_config(cfg)
        self.local_cfg = cfg
        self.executor = self.client_executor(executor, chunk, compile_step, book, resumed, run_steps)

    def client_executor(
        self,
        executor: str,
        chunk: int | None,
        compile_step: str = "auto",
        book: PriceBook | None = None,
        resumed: StepMode | None = None,
        run_steps: int | None = None,
    ) -> ClientExecutor:
        """The run's client executor, chunk size and step (:mod:`fedbench.engine.executor`): under ``--compile
        auto`` with a price ``book``, the step measured cheapest (:mod:`fedbench.engine.step_price`), or
        ``resumed``, the step the run took before it was resumed. ``run_steps``: the run's local steps where
        they are not this loop's spec's (a probe's never-ending spec)."""
        s, spec = self.s, self.spec
        batch, per_round = spec.local.batch_size, spec.clients.per_round
        steps = local_steps(spec, s.federation.batcher) if run_steps is None else run_steps

        def probe() -> int:
            return probe_client_bytes(s.model, s.buffers0, s.data.train, batch, self.local_cfg)

        def price(chunk: int | None) -> tuple[StepMode, str]:
            rows = max(2, min(chunk or per_round, per_round))  # one chunk's rows (a lone row runs as two)
            inputs = probe_inputs(s.model, s.buffers0, s.data.train, batch, rows)
            assert book is not None
            return priced_step(RowLayers.of(s.model), inputs, steps, s.x0.device, book)

        caps = s.algorithm.caps
        priced = price if book is not None else None
        return choose_executor(
            executor, s.x0.device, caps.batchable, chunk, probe, compile_step, steps, priced, resumed, caps.own_loss
        )

    def plugin(self, kind: type[T]) -> T:
        """The attached plug-in of type ``kind``."""
        found = [p for p in self.plugins if isinstance(p, kind)]
        if not found:
            attached = ", ".join(type(p).__name__ for p in self.plugins) or "none"
            raise LookupError(f"no {kind.__name__} plug-in is attached to this run (attached: {attached})")
        return found[0]

    def steps_of(self, clients: list[int], t: int) -> list[int]:
        """Local steps K_i of each sampled client in round t: fixed iterations, ⌈E·n_i/B⌉ for
        epochs, or ⌈E_i·n_i/B⌉ with E_i drawn from the client's ``("local_epochs", t, i)`` stream."""
        local = self.spec.local
        if local.iterations is not None:
            return [local.iterations] * len(clients)
        if local.random_epochs is not None:
            low, high = local.random_epochs
            epochs = [int(numpy_stream(self.seed, "local_epochs", t, c).integers(low, high + 1)) for c in clients]
            return [self.fed.batcher.steps_for_epochs(c, e) for c, e in zip(clients, epochs)]
        return [self.fed.batcher.steps_for_epochs(c, local.epochs) for c in clients]

    def round(self, t: int) -> tuple[dict[str, float | None], dict]:
        """Run round t; return (metrics, extra logs), read to the host. Dropout masks (the only draws
        from torch's global generators) come from the ``("dropout", t)`` stream: the generators are
        seeded for the round and restored afterwards, so a resumed run draws what an uninterrupted one did."""
        pending = self.lazy_round(t)
        read_rounds([pending])
        return pending.metrics, pending.extra

    def lazy_round(self, t: int) -> PendingRound:
        """:meth:`round` with its device values (and whether the model is finite) left on the device,
        for :func:`~fedbench.engine.pending.read_rounds` when the run :meth:`reads`."""
        with self.streams(t):
            metrics, extra = self._round(t)
        return PendingRound(t, metrics, extra, self.finite())

    def finite(self) -> torch.Tensor:
        """Whether the global model is finite: a 0-d bool tensor on its device."""
        return torch.isfinite(self.state.x).all()

    def reads(self, t: int) -> bool:
        """Whether round t reads the run's pending rounds to the host and records them: when it evaluates
        (a read anyway), checkpoints or is the last round (:mod:`fedbench.engine.pending`)."""
        return self.due(t) or t % self.spec.checkpoint_every == 0 or t >= self.spec.rounds

    @contextmanager
    def streams(self, t: int) -> Iterator[None]:
        """Torch's generators (the CPU's and the run's CUDA device's) seeded from the run's ``("dropout", t)``
        stream, and restored afterwards; seeded through the generators themselves (``torch.manual_seed``
        costs 0.1–1 ms a call, which a population pays for each of its runs twice a round)."""
        device = self.s.x0.device
        cuda = device.type == "cuda"
        with torch.random.fork_rng(devices=[device] if cuda else []):
            if self._stream_seed[0] != t:  # a population enters a round's streams four times
                self._stream_seed = (t, torch_seed(self.seed, "dropout", t))
            seed = self._stream_seed[1]
            torch.default_generator.manual_seed(seed)
            if cuda:
                index = device.index if device.index is not None else torch.cuda.current_device()
                torch.cuda.default_generators[index].manual_seed(seed)
            yield

    def _round(self, t: int) -> tuple[dict[str, Any], dict]:
        """Sample, train, aggregate, evaluate; the plug-ins' hooks in between (:mod:`fedbench.engine.plugins`).
        The metrics' device values are left unread."""
        opened = self.open_round(t)
        if opened.ctx is None:
            return self.close_round(opened, None)
        return self.close_round(opened, self.local_work(opened.ctx, opened.steps))

    def open_round(self, t: int) -> OpenRound:
        """Round t up to its local work: sampling, the learning rate, the plug-ins' hooks, the engine inputs and
        the algorithm's ``prepare_round``; ``ctx`` is None when no sampled client trains."""
        return self.open_sampled(self.sample_round(t))

    def sample_round(self, t: int) -> Sampled:
        """Round t up to its engine inputs: the stage, sampling, the learning rate, the plug-ins' hooks, the
        clients' local steps and the broadcast; the clients and their steps move to the device once, without
        waiting for it (:func:`~fedbench.engine.pending.to_device`)."""
        spec, s = self.spec, self.s
        start = time.perf_counter()
        self.enter_stage(t)
        begun = self.logs(lambda p: p.begin_round(t))
        clients = self.choose_clients(t)
        lr = spec.local.lr * spec.local.lr_decay ** (t - 1)
        for plugin in self.plugins:
            lr = plugin.learning_rate(t, lr)
        for plugin in self.plugins:
            clients = plugin.after_sampling(t, clients)
        if len(clients) == 0:  # nothing trains or is sent
            return Sampled(t, start, lr, begun)
        ids = clients.tolist()
        steps = self.steps_of(ids, t)
        for plugin in self.plugins:
            steps = plugin.local_steps(t, ids, steps)
        on_device = to_device(torch.tensor(ids, dtype=torch.int64), s.x0.device)
        return Sampled(t, start, lr, begun, ids, steps, on_device, s.algorithm.broadcast(self.state, on_device))

    def open_sampled(self, sampled: Sampled, ready: Mapping[str, torch.Tensor] | None = None) -> OpenRound:
        """:meth:`open_round` from its sampling on: the clients' :class:`RoundContext` with the engine inputs their
        algorithm declared (``ready``: some of the engine's, computed elsewhere: a population computes its runs'
        together), then the algorithm's ``prepare_round``."""
        t, s = sampled.t, self.s
        if sampled.clients is None or sampled.broadcast is None:
            return OpenRound(t, sampled.start, sampled.lr, sampled.begun)
        algo, clients = s.algorithm, sampled.clients
        ctx = RoundContext(
            clients,
            sampled.lr,
            to_device(torch.tensor(sampled.steps, dtype=s.x0.dtype), s.x0.device),
            sampled.broadcast,
            algo.client_state(self.state, clients),
            t,
            self.inputs(sampled, ready),
            self.fed.sizes,
            tuple(sampled.ids),
            int(self.fed.batcher.epoch_batches[sampled.ids].max()),
        )
        weights = aggregation_weights(self.spec, self.fed.sizes[ctx.clients])
        ctx = algo.prepare_round(self.state, ctx, weights)
        return OpenRound(t, sampled.start, sampled.lr, sampled.begun, ctx, sampled.steps, weights)

    def close_round(self, opened: OpenRound, result: LocalResult | None) -> tuple[dict[str, Any], dict]:
        """Round t after its local work (``result``; None when nobody trained): aggregation, the
        plug-ins' logs, evaluation; returns (metrics, extra logs), their device values unread."""
        return self.finish_round(opened, *self.settle_round(opened, result))

    def settle_round(self, opened: OpenRound, result: LocalResult | None) -> tuple[dict, dict]:
        """:meth:`close_round` up to its evaluation: aggregation and the plug-ins' round logs."""
        if opened.ctx is None or result is None:
            return idle_metrics(), self.logs(lambda p: p.round_logs(opened.t))
        return self.settle(opened, result, self.receive(opened, result))

    def settle(
        self,
        opened: OpenRound,
        result: LocalResult,
        received: Received | None,
        update: tuple[Any, dict] | None = None,
        buffers: Buffers | None = None,
    ) -> tuple[dict, dict]:
        """:meth:`settle_round` of a round whose clients trained, from what reached the server
        (:meth:`receive`); ``update``: the algorithm's ``server_update`` of it, and ``buffers``: the received
        BatchNorm buffers' average, computed elsewhere (a population updates its runs' servers together,
        :mod:`~fedbench.engine.population_server`, and averages their buffers together)."""
        extra = self.apply_update(received, update, buffers)
        extra = {**extra, **self.logs(lambda p: p.round_logs(opened.t))}
        assert opened.ctx is not None
        return round_metrics(opened.ctx, result, self.s.model.buffer_numel()), extra

    def finish_round(
        self,
        opened: OpenRound,
        metrics: dict[str, Any],
        extra: dict,
        scores: Scores | None = None,
        spread: torch.Tensor | None = None,
    ) -> tuple[dict[str, Any], dict]:
        """:meth:`close_round` from its evaluation on; ``scores``: the test set's (accuracy, loss) when
        due, and ``spread`` the clients' accuracy spread, computed elsewhere (a population evaluates its runs
        together). The evaluation's values stay on the device, read with the round's others
        (:mod:`fedbench.engine.pending`)."""
        return self._finish(opened.t, opened.start, opened.lr, metrics, extra, opened.begun, scores, spread)

    def due(self, t: int) -> bool:
        """Whether round t evaluates on the test set (every ``eval.every`` rounds and the last)."""
        return t % self.spec.eval.every == 0 or t == self.spec.rounds

    def choose_clients(self, t: int) -> np.ndarray:
        """Round t's sampled clients, on the host: the first plug-in's choice (e.g. among the available
        clients), else S of all N (:func:`sample_clients`)."""
        spec = self.spec

        def sample(eligible: np.ndarray) -> np.ndarray:
            return sample_among(eligible, spec.clients.per_round, self.seed, t)

        for plugin in self.plugins:
            chosen = plugin.choose_clients(t, sample)
            if chosen is not None:
                return chosen
        return sample_clients(spec.clients.num, spec.clients.per_round, self.seed, t)

    def enter_stage(self, t: int) -> None:
        """The clients' data for round t: the current :class:`~fedbench.engine.federation.Federation`, or the
        one a plug-in moves on to (a continual run's next task); its logit mask goes to the model."""
        fed = self.fed
        for plugin in self.plugins:
            fed = plugin.stage(t, fed)
        if fed is not self.fed:
            self.fed = fed
            self.s.model.label_mask = fed.label_mask

    def input_request(self, sampled: Sampled) -> InputRequest:
        """What the engine's input providers read for a sampled round (its clients and broadcast model x_t)."""
        assert sampled.clients is not None and sampled.broadcast is not None
        s = self.s
        return InputRequest(
            sampled.t,
            sampled.clients,
            sampled.broadcast["x"],
            self.buffers,
            self.local_cfg,
            self.spec.local.batch_size,
            s.model,
            s.data.train,
            self.fed,
            frozenset(s.algorithm.caps.inputs),
            tuple(sampled.ids),
            min(self.executor.chunk or len(sampled.ids), len(sampled.ids)) if self.executor.batched else 0,
        )

    def inputs(
        self, sampled: Sampled, ready: Mapping[str, torch.Tensor] | None = None
    ) -> MappingProxyType[str, torch.Tensor]:
        """The engine inputs the algorithm declared (:mod:`fedbench.engine.inputs`) for the sampled clients:
        ``ready``, all of them computed elsewhere (a population computes its runs' together), or
        :meth:`asked_inputs` computed here; one nobody provides is absent."""
        if ready is not None:
            return MappingProxyType(dict(ready))
        if not self.s.algorithm.caps.inputs:
            return MappingProxyType({})
        req = self.input_request(sampled)
        return MappingProxyType({name: resolve(req, value) for name, value in self.asked_inputs(req).items()})

    def asked_inputs(self, req: InputRequest) -> dict[str, Provided]:
        """What the providers give for the inputs the algorithm declared: the plug-ins' first, then the engine's
        for the rest, gradients over samples left for the engine to compute (:class:`Gradients`)."""
        wanted = frozenset(self.s.algorithm.caps.inputs)
        given: dict[str, Provided] = {}
        for plugin in self.plugins:
            given.update({k: v for k, v in plugin.provide(req).items() if k in wanted})
        for name in sorted(wanted - given.keys()):
            if name in PROVIDERS:
                given[name] = PROVIDERS[name](req)
        return given

    def local_work(self, ctx: RoundContext, steps: list[int]) -> LocalResult:
        """The clients' local training on the batched or the sequential executor."""
        s, algo = self.s, self.s.algorithm
        if self.executor.batched:
            return run_clients_batched(
                algo,
                ctx,
                steps,
                s.model,
                self.buffers,
                s.data.train,
                self.fed.batcher,
                self.local_cfg,
                self.executor.chunk,
                self.executor.step,
            )
        return run_clients_sequential(
            algo, ctx, steps, s.model, self.buffers, s.data.train, self.fed.batcher, self.local_cfg
        )

    def receive(self, opened: OpenRound, result: LocalResult) -> Received | None:
        """What reaches the server of an opened round whose clients trained: every decoded upload with its
        aggregation weight (the round's, :meth:`open_sampled`), unless a plug-in's ``select_received`` keeps
        fewer; None when nothing does."""
        assert opened.ctx is not None and opened.weights is not None
        ctx, weights = opened.ctx, opened.weights
        received: Received | None = Received(ctx, decoded(result.uploads), result.buffers, weights, weights)
        for plugin in self.plugins:
            if received is None:
                break
            received = plugin.select_received(received, result)
        return received

    def apply_update(
        self, received: Received | None, update: tuple[Any, dict] | None = None, buffers: Buffers | None = None
    ) -> dict:
        """The new server state, ``server_update`` of ``received`` (or ``update``, that same update computed
        elsewhere), and the weighted BatchNorm buffers (or ``buffers``, that same average computed elsewhere);
        with nothing received the model and buffers stay. Returns the algorithm's logs."""
        if received is None:
            return {}
        if update is None:
            update = self.s.algorithm.server_update(self.state, received.ctx, received.uploads, received.weights)
        self.state, extra = update
        self.buffers = average_buffers(received.buffers, received.buffer_weights) if buffers is None else buffers
        return extra

    def _finish(
        self,
        t: int,
        start: float,
        lr: float,
        metrics: dict[str, Any],
        extra: dict,
        begun: dict,
        given: Scores | None = None,
        spread: torch.Tensor | None = None,
    ) -> tuple[dict, dict]:
        """Evaluate on schedule (``given``: the test set's scores, ``spread`` the clients' spread, computed elsewhere;
        unread), time the round, add the once-per-run logs."""
        spec = self.spec
        due = self.due(t)
        scores = self.evaluate(t, due, given, lazy=True)
        if scores is not None:
            metrics["test_acc"], metrics["test_loss"] = scores
        for plugin in self.plugins:
            self.state, logs = plugin.after_evaluation(t, self.state, self.buffers, self.local_cfg)
            extra = {**extra, **logs}
        if due and spec.eval.client_spread:
            metrics["client_acc_std"] = self.client_accuracy_spread(lazy=True) if spread is None else spread
        metrics["wall_s"] = time.perf_counter() - start
        if t == 1:
            extra = {**extra, **self.run_logs()}
        return metrics, {"lr": lr, **extra, **begun}

    def evaluate(self, t: int, due: bool, given: Scores | None = None, lazy: bool = False) -> Scores | None:
        """(accuracy, loss) of round t: the first plug-in's scores (every plug-in is asked), else
        the whole test set's when due (``given``, or evaluated here), else None; 0-d tensors, unread, if ``lazy``
        (a plug-in's may be either way), else floats."""
        x, s = self.state.x, self.s
        scores = [p.evaluate(t, due, x, self.buffers) for p in self.plugins]
        chosen = next((score for score in scores if score is not None), None)
        if chosen is not None and not lazy and isinstance(chosen[0], torch.Tensor):
            acc, loss = torch.stack([torch.as_tensor(v, dtype=torch.float64) for v in chosen]).tolist()  # one read
            return acc, loss
        if chosen is None and due:
            if given is not None:
                return given
            if lazy:
                return s.model.scores(x, self.buffers, s.data.test, self.spec.eval.batch_size)
            return s.model.evaluate(x, self.buffers, s.data.test, self.spec.eval.batch_size)
        return chosen

    def run_logs(self) -> dict[str, Any]:
        """Once per run: the partition's sizes and label skew, the server state's size, the
        executor and threads, then the plug-ins' own."""
        state_mb = state_bytes(self.state) / 2**20
        own = {
            "partition": self.fed.info,
            "server_state_mb": state_mb,
            "executor": self.executor.note,
            "threads": torch.get_num_threads(),
        }
        return {**own, **self.logs(lambda p: p.run_logs())}

    def logs(self, hook: Callable[[RoundPlugin], dict[str, Any]]) -> dict[str, Any]:
        """One hook's logs from every plug-in, merged in attachment order."""
        merged: dict[str, Any] = {}
        for plugin in self.plugins:
            merged.update(hook(plugin))
        return merged

    def client_accuracy_spread(self, lazy: bool = False) -> float | torch.Tensor:
        """Std over all N clients of the global model's accuracy on each client's training data (a 0-d
        tensor, unread, if ``lazy``)."""
        s = self.s
        correct, _ = s.model.per_sample(self.state.x, self.buffers, s.data.train, self.spec.eval.batch_size)
        spread = accuracy_spreads(correct.unsqueeze(0), [self.fed])[0]
        return spread if lazy else float(spread)

    def divergence(self, metrics: dict[str, float | None], finite: bool) -> str | None:
        """Why the round diverged (see the module docstring), or None; ``finite``: whether the model was
        finite after it (read with the round, :mod:`fedbench.engine.pending`)."""
        values = [metrics["train_loss"], metrics["test_loss"]]
        if any(v is not None and not math.isfinite(v) for v in values) or not finite:
            return "non-finite loss or model"
        bound = DIVERGED_LOSS_FACTOR * math.log(self.s.data.num_classes)
        train = metrics["train_loss"]
        if train is not None and train > bound:
            return f"train loss {train:.3g} above {DIVERGED_LOSS_FACTOR:g} × ln {self.s.data.num_classes} = {bound:.3g}"
        return None

    def checkpoint(self, t: int) -> dict:
        """The round, server state, buffers, batcher cursor and each plug-in's state (under its name)."""
        payload = {
            "round": t,
            "layout": LAYOUT,
            "state": flatten_state(self.state),
            "buffers": self.buffers,
            "batcher": self.fed.batcher.state_dict(),
            "step": self.executor.step,  # the batched step taken: an ``auto`` run resumed takes it again
        }
        for plugin in self.plugins:
            kept = plugin.state_dict()
            if kept is not None:
                payload[plugin.name] = kept
        return payload

    def restore(self, payload: dict) -> int:
        """Back to a checkpoint; the plug-ins first, then the checkpoint round's stage (a task stream's
        task) and its batcher's cursor. Returns the checkpoint's round."""
        self.state = restore_state(self.s.algorithm.init_state(self.s.x0), payload["state"], self.s.x0.device)
        self.buffers = payload["buffers"]
        for plugin in self.plugins:
            if plugin.name in payload:
                plugin.load_state_dict(payload[plugin.name])
        done = int(payload["round"])
        self.enter_stage(done)
        self.fed.batcher.load_state_dict(payload["batcher"])
        return done


def execute_run(
    spec: RunSpec,
    seed: int,
    store: ResultsStore,
    cache: DataCache,
    scenario_hash: str,
    on_round: RoundCallback | None = None,
    options: RunOptions = RunOptions(),
) -> RunOutcome:
    """Run (or resume, or skip) one (spec, seed); never raises for a failing run: records it.
    ``options`` (:class:`~fedbench.options.RunOptions`) say how: the client executor and its chunk
    (:mod:`fedbench.engine.executor`; same numbers for every chunk), the compiled step
    (:mod:`fedbench.engine.compiled`; equal to float tolerance), ``client_state: host`` (per-client
    ``[N, P]`` tables in pinned host memory; same numbers) and the torch threads
    (:mod:`fedbench.engine.threads`); ``cache`` holds the data of ``options.data_dir`` on the device."""
    run_id = run_id_of(spec, seed)
    if store.status(run_id) in DONE:
        return RunOutcome(run_id, "skipped")
    with leased(store, run_id) as other:
        if other is not None:
            return RunOutcome(run_id, "busy", f"being trained by {other}")
        if store.status(run_id) in DONE:  # finished by another process between the two looks
            return RunOutcome(run_id, "skipped")
        with pinned_threads(options.threads), run_precision(spec.local, cache.device):
            return _train(spec, seed, store, cache, scenario_hash, on_round, options, run_id)


def _train(
    spec: RunSpec,
    seed: int,
    store: ResultsStore,
    cache: DataCache,
    scenario_hash: str,
    on_round: RoundCallback | None,
    options: RunOptions,
    run_id: str,
) -> RunOutcome:
    """The body of :func:`execute_run` for a run that is not done yet: its rounds stay on the device
    until one :meth:`~RoundLoop.reads` them (:mod:`fedbench.engine.pending`), then are recorded together."""
    identity = start_record(spec, seed, store, scenario_hash, run_id)
    pending: list[PendingRound] = []
    try:
        loop, done = open_loop(spec, seed, store, cache, options, run_id, identity)
        recorder = Recorder(loop, store, run_id, identity, on_round)
        for t in range(done + 1, spec.rounds + 1):
            pending.append(loop.lazy_round(t))
            if loop.reads(t):
                rounds, pending = pending, []
                if recorder.settle(rounds):
                    return RunOutcome(run_id, "diverged")
    except Exception as exc:  # a crashed run is recorded and never stops the suite
        if pending and recorder.diverged_before(pending):
            return RunOutcome(run_id, "diverged")
        store.finish_run(run_id, "failed", "".join(traceback.format_exception(exc)))
        return RunOutcome(run_id, "failed", f"{type(exc).__name__}: {exc}")
    complete_run(store, run_id)
    return RunOutcome(run_id, "finished")


@dataclass
class Recorder:
    """Where a run's read rounds go: its store record (rows, status), its checkpoint and its callbacks."""

    loop: RoundLoop
    store: ResultsStore
    run_id: str
    identity: dict[str, Any]
    on_round: RoundCallback | None = None
    warned: set[str] = dataclasses.field(default_factory=set)

    def settle(self, rounds: list[PendingRound]) -> bool:
        """Read pending ``rounds`` (one transfer), record them up to the first that diverged (one
        transaction) and conclude each; True when the run diverged."""
        read_rounds(rounds)
        kept = self.kept(rounds)
        self.store.record_rounds(self.rows(kept))
        return self.conclude(kept)

    def diverged_before(self, pending: list[PendingRound]) -> bool:
        """After a crash: the rounds trained before it but not yet read, recorded as a read would have; True
        when one of them diverged (the crash follows from training on, as a run read every round would have
        stopped there), False (the run failed) otherwise or when they cannot be read."""
        try:
            return self.settle(pending)
        except Exception:  # the device itself may be what failed: the run is recorded as failed
            return False

    def kept(self, rounds: list[PendingRound]) -> list[PendingRound]:
        """The read ``rounds`` up to and including the first that diverged: what a run read every round
        records (the rounds after a divergence were trained only because the run had not read it yet)."""
        kept = []
        for r in rounds:
            kept.append(r)
            if self.loop.divergence(r.metrics, bool(r.finite)) is not None:
                break
        return kept

    def rows(self, rounds: list[PendingRound]) -> list[tuple[str, int, dict[str, Any], dict[str, Any]]]:
        """The store rows of read ``rounds``."""
        return [(self.run_id, r.t, r.metrics, r.extra) for r in rounds]

    def conclude(self, rounds: list[PendingRound]) -> bool:
        """Each recorded round's aftermath in order (:meth:`conclude_one`); True when one diverged (the last)."""
        return any(self.conclude_one(r) for r in rounds)

    def conclude_one(self, r: PendingRound) -> bool:
        """A recorded round's aftermath: the diagnostics warning, ``on_round`` (the metrics and the round logs
        of :data:`SHOWN_LOGS`), divergence (the run is finished as diverged, its checkpoint removed) and the
        checkpoint on schedule. True when it diverged."""
        loop, store, t = self.loop, self.store, r.t
        spec = loop.spec
        name = f"{spec.scenario} / {spec.label} seed {loop.seed}"
        warn_diagnostics(name, loop.s.algorithm.caps.diagnostics, r.extra, t, self.warned)
        if self.on_round:
            self.on_round(t, {**r.metrics, **{k: r.extra[k] for k in SHOWN_LOGS if k in r.extra}})
        why = loop.divergence(r.metrics, bool(r.finite))
        if why is not None:
            store.finish_run(self.run_id, "diverged", f"{why} at round {t}")
            store.checkpoint_path(self.run_id).unlink(missing_ok=True)
            return True
        if t % spec.checkpoint_every == 0 and t < spec.rounds:
            save_checkpoint(store.checkpoint_path(self.run_id), {**loop.checkpoint(t), "identity": self.identity})
        return False


def start_record(spec: RunSpec, seed: int, store: ResultsStore, scenario_hash: str, run_id: str) -> dict[str, Any]:
    """Record the run as started in ``store`` (with the package versions); returns its checkpoint identity."""
    record = dataclasses.replace(run_record(spec, seed, scenario_hash), versions=json.dumps(versions(), sort_keys=True))
    store.start_run(record)
    return run_identity(run_id, record.spec_hash, seed)


def open_loop(
    spec: RunSpec, seed: int, store: ResultsStore, cache: DataCache, options: RunOptions, run_id: str, identity: dict
) -> tuple[RoundLoop, int]:
    """The run's :class:`RoundLoop` as ``options`` say (executor, chunk, compiled step, client state),
    resumed from its checkpoint with the store's rows after it removed (and, under ``--compile auto``, with
    the step it took); returns the loop and the last round done. A compiled run keeps its graphs, and
    ``auto`` its step prices, under the store's folder."""
    setup = build_run(spec, seed, cache, options.client_state == "host")
    payload = resume_point(store.checkpoint_path(run_id), cache.device, store, run_id, identity)
    out = store.out_dir if isinstance(store, ResultsStore) else None
    resumed = payload.get("step") if payload else None
    loop = RoundLoop(spec, seed, setup, options.executor, options.chunk, options.compile_step, PriceBook(out), resumed)
    if loop.executor.compiled and out is not None:
        use_compile_cache(out)
    done = loop.restore(payload) if payload else 0
    store.truncate_after(run_id, done)
    return loop, done


def complete_run(store: ResultsStore, run_id: str) -> None:
    """The run's last round is recorded: finished, its checkpoint removed."""
    store.finish_run(run_id, "finished")
    store.checkpoint_path(run_id).unlink(missing_ok=True)
