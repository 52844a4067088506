"""A population: R runs trained together, round by round, as one batched computation.

Runs that differ only in their seed, partition, N and S, round count, client availability, server side
(``server.*``: η_g, momentum, the adaptive optimizer; ``privacy``: clipping and noise of the received rows, each
run's plug-in with its own noise stream and accountant), uplink compression, wireless uplink (each run's channel,
outages and bit allocation), a continual run's own task partitions, batches and replay memory (one ``continual``
block, so that every run is in the same task with the same heads), η_l and its decay (``Capabilities.row_lr``) and
the algorithm parameters it declares per row (``Capabilities.row_params``) share everything else their clients'
local work reads (:func:`population_key`). Such runs go through their rounds in lockstep (:func:`population_round`):
each run samples its round alone (sampling, plug-ins: :meth:`~fedbench.engine.runner.RoundLoop.sample_round`), the
engine inputs the runs declared are computed for all of them at once where they can be (their gradients over
samples, :func:`~fedbench.engine.inputs.joint_inputs`), each run opens its round with them (``prepare_round``), the
clients of every run train as one ``[R·S, P]`` batched computation (:mod:`fedbench.engine.population_rows`), the
servers of the runs whose updates have one shape are updated as one vmapped call or through their class's
``server_updates`` (:mod:`fedbench.engine.population_server`; the others alone) and their BatchNorm buffers averaged
together, the runs due to evaluate are evaluated together, and each finishes its round alone (their models'
finiteness checked together); each run's rounds stay on the device until it evaluates, checkpoints or ends, and the
runs reading in a round are read to the host in one transfer and committed at once (:mod:`fedbench.engine.pending`).
A run of a population is the run it would be alone on the batched executor: its own streams (nothing of a
population's round draws from torch's global generators: :func:`no_global_draws`), its own store record, checkpoint
and status. A run that diverges is recorded as diverged and leaves the population; the others go on. Runs resume
from their own checkpoints, so a population killed mid-round resumes exactly, in a population or alone. Should the
population itself fail, its unfinished runs are trained again one by one (each from its last checkpoint), so a crash
is recorded against the run that crashes. On a GPU a population too large for the device's memory trains in
consecutive parts (:func:`fitting_runs`).
"""

from __future__ import annotations

import dataclasses
import gc
import json
import traceback
import warnings
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import torch

from fedbench.engine.compiled import STEP_WORDS
from fedbench.engine.executor import MEMORY_FRACTION, STATE_ROWS, ClientExecutor
from fedbench.engine.inputs import joint_inputs
from fedbench.engine.lease import leased
from fedbench.engine.pending import PendingRound, read_rounds
from fedbench.engine.population_rows import MemberRound, client_spreads, evaluate_runs, run_population_clients
from fedbench.engine.population_server import joint_buffers, server_updates
from fedbench.engine.precision import run_precision
from fedbench.engine.runner import Recorder, RoundLoop, RunOutcome, complete_run, execute_run, open_loop, start_record
from fedbench.engine.setup import DataCache
from fedbench.engine.threads import pinned_threads
from fedbench.options import RunOptions
from fedbench.scenario import RunSpec, run_id_of
from fedbench.store import DONE

if TYPE_CHECKING:
    from fedbench.engine.plugins import Received
    from fedbench.store import ResultsStore

PopulationCallback = Callable[[int, int, dict[str, float | None]], None]  # (member index, round, metrics)

ALL_ROWS = 2**31 - 1  # a chunk size meaning every row of the population at once


def population_key(spec: RunSpec, seed: int | None = None) -> str | None:
    """What the runs of one population must share (canonical JSON): the dataset, the model, the
    ``local`` block (but η_l and its decay for an algorithm with ``Capabilities.row_lr``), the
    algorithm with its parameters (not its label, nor its ``Capabilities.row_params``) and the ``continual``
    block, so that every run is in the same task, with the same heads (the model's label mask), in each
    round; under ``continual.class_order: seeded`` also the ``seed`` (its own classes per task: a seed's
    tuning trials train together, other seeds apart). None for a run that trains alone: a non-batchable
    algorithm (a local loss that cannot run on the batched rows), or one whose local hooks draw from their run's
    own streams (``Capabilities.population`` False)."""
    from fedbench.algorithms import ALGORITHMS

    caps = ALGORITHMS.get(spec.algorithm["name"]).obj.caps
    if not caps.batchable or not caps.population:
        return None
    algorithm = {k: v for k, v in spec.algorithm.items() if k != "label" and k not in caps.row_params}
    local = spec.local.model_dump(mode="json")
    if caps.row_lr:  # each run's η_l rides on its rows
        local = {k: v for k, v in local.items() if k not in ("lr", "lr_decay")}
    payload = {"dataset": spec.dataset, "model": spec.model, "local": local, "algorithm": algorithm}
    if spec.continual is not None:
        payload["continual"] = spec.continual.model_dump(mode="json")
        if spec.continual.class_order == "seeded":
            payload["class_order_seed"] = seed
    return json.dumps(payload, sort_keys=True, default=str)


GPU_POPULATION = 32  # runs per population under --population auto on a GPU (rows are chunked to free memory)


def population_size(options: RunOptions, device: torch.device) -> tuple[int, str]:
    """The most runs per population for ``--population`` on ``device``, and why (one line for the log):
    N as asked, one with ``off`` or ``--executor sequential``, and under ``auto``
    :data:`GPU_POPULATION` on a GPU and one on a CPU, where the vmapped step measured no faster per
    FLOP than the per-client loop (benchmarks/population-2026-11-26.md)."""
    if options.population == "off":
        return 1, "one run at a time (--population off)"
    if options.executor == "sequential":
        return 1, "one run at a time (--executor sequential: populations train on the batched executor)"
    if options.population != "auto":
        n = int(options.population)
        return n, f"populations of up to {n} runs (--population {n})"
    if device.type == "cuda":
        return GPU_POPULATION, f"populations of up to {GPU_POPULATION} runs (auto on cuda)"
    return 1, f"one run at a time (auto on {device.type}: a population measured no faster there; --population N)"


def groups_line(groups: list[list[Any]], why: str) -> str:
    """One line saying how runs train in ``groups`` (:func:`group_runs`) and why; empty when every run
    trains alone."""
    total = sum(len(g) for g in groups)
    together = [g for g in groups if len(g) > 1]
    if not together:
        return ""
    alone = len(groups) - len(together)
    return f"{total} run(s): {len(together)} population(s) of {total - alone}, {alone} alone; {why}"


def group_runs(specs: list[RunSpec], size: int, seeds: list[int] | None = None) -> list[list[int]]:
    """Indices of ``specs`` (of ``seeds``) in populations of at most ``size`` runs, each of one
    :func:`population_key`, in the order of their first run; a run without a key is alone."""
    groups: dict[str, list[list[int]]] = {}
    order: list[list[int]] = []
    for i, spec in enumerate(specs):
        key = population_key(spec, seeds[i] if seeds is not None else None) if size > 1 else None
        if key is None:
            order.append([i])
            continue
        open_groups = groups.setdefault(key, [])
        if not open_groups or len(open_groups[-1]) >= size:
            open_groups.append([])
            order.append(open_groups[-1])
        open_groups[-1].append(i)
    return order


@dataclass(frozen=True)
class PopulationRun:
    """One run of a population: its spec, seed and scenario hash."""

    spec: RunSpec
    seed: int
    scenario_hash: str


@dataclass
class Member:
    """A run of a population while it trains: its round loop, checkpoint, last recorded round and status."""

    index: int
    run: PopulationRun
    run_id: str
    identity: dict[str, Any]
    loop: RoundLoop
    done: int
    warned: set[str] = field(default_factory=set)
    status: str | None = None  # finished | diverged once it ends
    pending: list[PendingRound] = field(default_factory=list)  # trained rounds not yet read and recorded

    def due(self, t: int) -> bool:
        """Whether the member trains round t."""
        return self.status is None and self.done < t <= self.run.spec.rounds

    def recorder(self, store: ResultsStore, on_round: PopulationCallback | None) -> Recorder:
        """Where the member's read rounds go (its diagnostics warned once across reads)."""
        alone = partial(on_round, self.index) if on_round else None
        return Recorder(self.loop, store, self.run_id, self.identity, alone, self.warned)


def execute_population(
    runs: list[PopulationRun],
    store: ResultsStore,
    cache: DataCache,
    options: RunOptions = RunOptions(),
    on_round: PopulationCallback | None = None,
) -> list[RunOutcome]:
    """Run (or resume, or skip) ``runs`` as one population (their :func:`population_key` of spec and seed must
    be equal and not None: a ``ValueError`` before anything trains otherwise); never raises for a failing run.
    Returns each run's outcome, in order. One run is :func:`~fedbench.engine.runner.execute_run`."""
    if len(runs) == 1:
        r = runs[0]
        alone = (lambda t, m: on_round(0, t, m)) if on_round else None
        return [execute_run(r.spec, r.seed, store, cache, r.scenario_hash, alone, options)]
    keys = {population_key(r.spec, r.seed) for r in runs}
    if len(keys) != 1 or None in keys:
        raise ValueError(
            f"these {len(runs)} runs cannot train as one population (they differ in what a population shares, "
            "or one of them trains alone)"
        )
    outcomes: dict[int, RunOutcome] = {}
    retry: list[int] = []
    with ExitStack() as stack:
        stack.enter_context(pinned_threads(options.threads))
        stack.enter_context(run_precision(runs[0].spec.local, cache.device))
        members = []
        for i, run in enumerate(runs):
            member = _join(i, run, store, cache, options, stack, outcomes, probe=not members)
            if member is not None:
                members.append(member)
        try:
            _train(members, store, options, on_round)
        except Exception as exc:  # the population failed: its unfinished runs train again one by one
            retry = [m.index for m in members if m.status is None]
            warnings.warn(
                f"a population of {len(members)} runs failed ({type(exc).__name__}: {exc}); "
                f"its {len(retry)} unfinished runs train one by one from their last checkpoints",
                RuntimeWarning,
                stacklevel=1,
            )
        for m in members:
            if m.status is not None:
                outcomes[m.index] = RunOutcome(m.run_id, m.status)
    for i in retry:  # leases released: each run resumes alone from its last checkpoint
        r = runs[i]
        alone = (lambda t, m, i=i: on_round(i, t, m)) if on_round else None
        outcomes[i] = execute_run(r.spec, r.seed, store, cache, r.scenario_hash, alone, options)
    return [outcomes[i] for i in range(len(runs))]


def member_chunk(options: RunOptions, device: torch.device, first: bool) -> int | None:
    """The batched chunk a member's loop is built with: the first member, on CUDA without ``--chunk``, None
    (the batched executor's memory probe sizes the population's row chunks); any other, ``--chunk`` or all
    rows at once."""
    if first and options.chunk is None and device.type == "cuda":
        return None
    return options.chunk or ALL_ROWS


def member_step(options: RunOptions) -> str:
    """The ``--compile`` a member's loop is built with: ``graphs`` where asked, else ``off`` (a population's
    step is never compiled: its rows' shapes change as runs finish or diverge)."""
    return "graphs" if options.compile_step == "graphs" else "off"


def population_chunk(first: RoundLoop) -> int | None:
    """The rows a population trains at a time, as its first member's executor was sized (None: all at once)."""
    chunk = first.executor.chunk
    return None if chunk == ALL_ROWS else chunk


def _join(
    i: int,
    run: PopulationRun,
    store: ResultsStore,
    cache: DataCache,
    options: RunOptions,
    stack: ExitStack,
    outcomes: dict[int, RunOutcome],
    probe: bool = False,
) -> Member | None:
    """Lease, record and set up run ``i`` (resumed from its checkpoint); None with its outcome in
    ``outcomes`` when it is done, busy elsewhere or fails to set up. ``probe``: the first member sizes
    the population's row chunks (on CUDA, without ``--chunk``: the batched executor's memory probe)."""
    spec, seed = run.spec, run.seed
    run_id = run_id_of(spec, seed)
    if store.status(run_id) in DONE:
        outcomes[i] = RunOutcome(run_id, "skipped")
        return None
    other = stack.enter_context(leased(store, run_id))
    if other is not None:
        outcomes[i] = RunOutcome(run_id, "busy", f"being trained by {other}")
        return None
    if store.status(run_id) in DONE:
        outcomes[i] = RunOutcome(run_id, "skipped")
        return None
    identity = start_record(spec, seed, store, run.scenario_hash, run_id)
    own = dataclasses.replace(
        options, executor="batched", chunk=member_chunk(options, cache.device, probe), compile_step=member_step(options)
    )
    try:
        loop, done = open_loop(spec, seed, store, cache, own, run_id, identity)
    except Exception as exc:
        store.finish_run(run_id, "failed", "".join(traceback.format_exception(exc)))
        outcomes[i] = RunOutcome(run_id, "failed", f"{type(exc).__name__}: {exc}")
        return None
    return Member(i, run, run_id, identity, loop, done)


def _train(
    members: list[Member], store: ResultsStore, options: RunOptions, on_round: PopulationCallback | None
) -> None:
    """The members' rounds in lockstep until each has finished or diverged; on CUDA, in consecutive
    sub-populations of as many members as :func:`fitting_runs` lets the device hold."""
    if not members:
        return
    chunk, step = population_chunk(members[0].loop), members[0].loop.executor.step
    rows = f"chunks of {chunk} rows" if chunk else "all rows at once"
    replayed = f"; step {STEP_WORDS[step]}" if step == "graphed" else ""
    replayed += plans_note(members[0].run.spec, members[0].loop.s.data.train.y.device)
    size = fitting_runs(members)
    for part in range(0, len(members), size):
        group = members[part : part + size]
        note = f"population of {len(group)} runs, their clients as one batched computation ({rows}){replayed}"
        for m in group:
            m.loop.executor = ClientExecutor(True, chunk, note, step)
        with long_lived_frozen(len(group)):
            _lockstep(group, store, chunk, on_round)


FREEZE_FROM = 32  # runs from which a population freezes its long-lived objects (long_lived_frozen)


@contextmanager
def long_lived_frozen(runs: int) -> Iterator[None]:
    """For a population of at least :data:`FREEZE_FROM` ``runs``, the objects alive now (the members' models, data,
    states, stores) moved out of Python's cyclic garbage collector while it trains (``gc.freeze``), so that each
    collection scans the objects of the rounds since, not every run's: at 128 runs of a small model on this
    project's CPU the collections took 19 ms of a round of about 100 ms, 4 ms frozen; at 16 runs 0.4 ms either way
    (benchmarks/population_host.py), so a smaller population leaves the collector alone. A frozen object is still
    freed when its last reference goes; only a reference cycle among them waits for the end, where they are
    unfrozen. A caller's own freeze is left as it is."""
    if runs < FREEZE_FROM or gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def plans_note(spec: RunSpec, device: torch.device) -> str:
    """Where a population's round plans are drawn, for its note: on the device under ``local.shuffle: device``;
    on the host otherwise, said on a GPU (where a run's host draws bound the population) with the key that
    moves them."""
    if spec.local.shuffle == "device":
        return "; round plans drawn on the device"
    if device.type == "cuda":
        return "; round plans drawn on the host (local.shuffle: device draws them on the GPU)"
    return ""


def fitting_runs(members: list[Member]) -> int:
    """How many members train at once: all of them, but on CUDA only as many as keep their
    :data:`~fedbench.engine.executor.STATE_ROWS` ``[P]`` rows per client (iterates, broadcast rows,
    carries, uploads; the step's activations are chunked apart) within
    :data:`~fedbench.engine.executor.MEMORY_FRACTION` of the free memory."""
    device = members[0].loop.s.x0.device
    if device.type != "cuda":
        return len(members)
    first = members[0].loop.s
    per_run = (
        first.x0.numel() * first.x0.element_size() * STATE_ROWS * max(m.run.spec.clients.per_round for m in members)
    )
    free, _ = torch.cuda.mem_get_info(device)
    return max(1, min(len(members), int(MEMORY_FRACTION * free // per_run)))


def _lockstep(
    members: list[Member], store: ResultsStore, chunk: int | None, on_round: PopulationCallback | None
) -> None:
    """The members' rounds in lockstep (one population) until each has finished or diverged. A member's
    rounds stay on the device until one :meth:`~fedbench.engine.runner.RoundLoop.reads` them; the members
    reading in a round are read in one transfer and recorded in one transaction."""
    t = min(m.done for m in members) + 1
    while any(m.status is None for m in members):
        active = [m for m in members if m.due(t)]
        for m, pending in zip(active, population_round([m.loop for m in active], t, chunk)):
            m.pending.append(pending)
            m.done = t
        reading = [m for m in active if m.loop.reads(t)]
        read_rounds([r for m in reading for r in m.pending])
        recorders = [m.recorder(store, on_round) for m in reading]
        kept = [rec.kept(m.pending) for rec, m in zip(recorders, reading)]
        store.record_rounds([row for rec, rounds in zip(recorders, kept) for row in rec.rows(rounds)])
        for m, rec, rounds in zip(reading, recorders, kept):
            m.pending = []
            if rec.conclude(rounds):
                m.status = "diverged"
        for m in members:
            if m.status is None and m.done >= m.run.spec.rounds:
                m.status = "finished"
                complete_run(store, m.run_id)
        t += 1


def population_round(loops: list[RoundLoop], t: int, chunk: int | None = None) -> list[PendingRound]:
    """Round t of every run of ``loops`` (one population): each samples its round alone, their engine inputs
    are computed together where they can be, each opens its round, their clients train together (``chunk`` rows
    at a time; all when None), their servers are updated together where they can be, each closes its round.
    Returns each run's round as :meth:`RoundLoop.lazy_round` would (its device values unread). Nothing of it may
    draw from torch's global generators (:func:`no_global_draws`)."""
    with no_global_draws(loops[0].s.x0.device if loops else torch.device("cpu")):
        return _population_round(loops, t, chunk)


@contextmanager
def no_global_draws(device: torch.device) -> Iterator[None]:
    """Torch's global generators (the CPU's and ``device``'s) forked for a population round and restored after it,
    which is to draw nothing from them: a run alone seeds them from its ``("dropout", t)`` stream for its round
    (:meth:`~fedbench.engine.runner.RoundLoop.streams`, its sequential executor's dropout), while every draw of a
    population's round is keyed (its dropout masks, plans and replay draws hashed, the rest from generators of
    the run's own streams). Seeding them for each run and phase of a round cost about 0.1 ms a run a round, so
    they are checked instead: a round that drew from them raises (a draw that would differ from the run's alone)."""
    cuda = device.type == "cuda"
    with torch.random.fork_rng(devices=[device] if cuda else []):
        before = _global_states(device)
        yield
        after = _global_states(device)
    if any(not torch.equal(a, b) for a, b in zip(before, after)):
        raise RuntimeError(
            "a population round drew from torch's global random generators (torch.rand, nn.Dropout, … without a "
            "generator=): its runs would not be the runs they are alone. Draw from a generator of the run's own "
            "streams (fedbench.seeding.torch_stream), or train the runs alone (--population off)"
        )


def _global_states(device: torch.device) -> list[torch.Tensor]:
    """The states of torch's CPU generator and of ``device``'s (a CUDA generator's seed and offset: no wait)."""
    states = [torch.default_generator.get_state()]
    if device.type == "cuda":
        states.append(torch.cuda.get_rng_state(device))
    return states


def _population_round(loops: list[RoundLoop], t: int, chunk: int | None) -> list[PendingRound]:
    """:func:`population_round` inside :func:`no_global_draws`."""
    sampled = [loop.sample_round(t) for loop in loops]
    asked = {}
    for i, (loop, s) in enumerate(zip(loops, sampled)):
        if s.ids and loop.s.algorithm.caps.inputs:
            req = loop.input_request(s)
            asked[i] = (req, loop.asked_inputs(req))
    ready = joint_inputs(asked, chunk)
    opened = [loop.open_sampled(s, ready.get(i)) for i, (loop, s) in enumerate(zip(loops, sampled))]
    training = [i for i, o in enumerate(opened) if o.ctx is not None]
    rounds = [
        MemberRound(loop.s.algorithm, o.ctx, o.steps, loop.buffers, loop.fed.batcher, loop.local_cfg)
        for loop, o in zip(loops, opened)
        if o.ctx is not None
    ]
    first = loops[0].s if loops else None
    if rounds and first:
        results = run_population_clients(rounds, first.model, first.data.train, chunk, loops[0].executor.step)
    else:
        results = []
    by_loop = dict(zip(training, results))
    received: list[Received | None] = [None] * len(loops)
    for i, result in by_loop.items():
        received[i] = loops[i].receive(opened[i], result)
    updates, buffers = server_updates(loops, received), joint_buffers(received)
    settled = []
    for i, (loop, o) in enumerate(zip(loops, opened)):
        if i in by_loop:
            settled.append(loop.settle(o, by_loop[i], received[i], updates.get(i), buffers.get(i)))
        else:
            settled.append(loop.settle_round(o, None))
    scores, spreads = _test_scores(loops, t), _client_spreads(loops, t)
    finished = [
        loop.finish_round(o, metrics, extra, scores.get(i), spreads.get(i))
        for i, (loop, o, (metrics, extra)) in enumerate(zip(loops, opened, settled))
    ]
    return [PendingRound(t, m, e, finite) for (m, e), finite in zip(finished, finite_runs(loops))]


def finite_runs(loops: list[RoundLoop]) -> list[torch.Tensor]:
    """:meth:`RoundLoop.finite` of every run (after its plug-ins' last word on its model), the runs of one model
    shape checked together: a 0-d bool tensor each, unread."""
    by_shape: dict[tuple, list[int]] = {}
    for i, loop in enumerate(loops):
        x = loop.state.x
        by_shape.setdefault((x.shape, x.dtype, x.device), []).append(i)
    finite: list[torch.Tensor] = [torch.empty(0)] * len(loops)
    for runs in by_shape.values():
        if len(runs) == 1:
            finite[runs[0]] = loops[runs[0]].finite()
            continue
        flags = torch.isfinite(torch.stack([loops[i].state.x for i in runs])).flatten(1).all(1)
        for i, flag in zip(runs, flags.unbind(0)):
            finite[i] = flag
    return finite


def _test_scores(loops: list[RoundLoop], t: int) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
    """The test-set scores of the runs due to evaluate in round t, evaluated together
    (:func:`~fedbench.engine.population_rows.evaluate_runs`); runs with a plug-in of their own are
    left to it (it may score the round itself)."""
    by_batch: dict[int, list[int]] = {}  # eval.batch_size → the runs due that evaluate in batches of it
    for i, loop in enumerate(loops):
        if loop.due(t) and not loop.plugins:
            by_batch.setdefault(loop.spec.eval.batch_size, []).append(i)
    scores: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    for batch, due in by_batch.items():
        first = loops[due[0]].s
        points, buffers = [loops[i].state.x for i in due], [loops[i].buffers for i in due]
        scores.update(zip(due, evaluate_runs(first.model, points, buffers, first.data.test, batch)))
    return scores


def _client_spreads(loops: list[RoundLoop], t: int) -> dict[int, torch.Tensor]:
    """The clients' accuracy spread (``eval.client_spread``) of the runs due to evaluate in round t, computed
    together (:func:`~fedbench.engine.population_rows.client_spreads`); runs with a plug-in are left to their
    loop (a continual run's logit mask is its own)."""
    by_batch: dict[int, list[int]] = {}
    for i, loop in enumerate(loops):
        if loop.due(t) and loop.spec.eval.client_spread and not loop.plugins:
            by_batch.setdefault(loop.spec.eval.batch_size, []).append(i)
    spreads: dict[int, torch.Tensor] = {}
    for batch, due in by_batch.items():
        first = loops[due[0]].s
        points, buffers = [loops[i].state.x for i in due], [loops[i].buffers for i in due]
        feds = [loops[i].fed for i in due]
        spreads.update(zip(due, client_spreads(first.model, points, buffers, first.data.train, batch, feds)))
    return spreads
