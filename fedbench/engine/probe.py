"""A run's cost on the current device, timed from its first rounds; nothing written where the user looks.

:func:`probe_run` builds the run as :func:`~fedbench.engine.runner.execute_run` does (same setup,
round plug-ins, the run options' client executor, chunk, eager, compiled or graphed step, client state and
torch threads, precision) and drives :class:`~fedbench.engine.runner.RoundLoop` with evaluation taken
out of its rounds:

    load the data, build the run          not timed (done once per run, small against its rounds)
    round 1                               warm-up: kernels, allocator, lazy initialisation; not counted
    rounds 2 .. 1 + rounds                timed, each with its commit to a throwaway store in a temporary
                                          folder (as a run commits its rounds); their mean is ``round_s``
    evaluate twice                        the first warms up; the second is ``eval_s`` (the test set,
                                          and the clients' accuracy spread when the spec records it)

A run of T rounds evaluated E times then costs about ``T·round_s + E·eval_s``
(:mod:`fedbench.estimate`; the run's setup and checkpoints are left out). Every duration is read
from :data:`CLOCK`, which tests replace.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from tempfile import TemporaryDirectory

from fedbench.engine.pending import read_rounds
from fedbench.engine.precision import run_precision
from fedbench.engine.runner import RoundLoop, local_steps
from fedbench.engine.setup import DataCache, build_run
from fedbench.engine.step_price import PriceBook
from fedbench.engine.threads import pinned_threads
from fedbench.options import RunOptions
from fedbench.scenario import RunSpec, run_id_of, run_record
from fedbench.store import ResultsStore

CLOCK: Callable[[], float] = time.perf_counter
NEVER = 10**9  # an evaluation period (and round count) the probe's rounds never reach


@dataclass(frozen=True)
class RoundCost:
    """Steady-state seconds per round (local work, aggregation; no evaluation) and per evaluation,
    the rounds timed and the client executor's one-line note."""

    round_s: float
    eval_s: float
    rounds: int
    executor: str


def evaluations(spec: RunSpec) -> int:
    """How many times a run of ``spec`` evaluates: every ``eval.every`` rounds and at the last one."""
    every = spec.eval.every
    return spec.rounds // every + (spec.rounds % every != 0)


def timed(fn: Callable[[], object]) -> float:
    """Seconds ``fn()`` took on :data:`CLOCK`."""
    start = CLOCK()
    fn()
    return CLOCK() - start


def _unevaluated(spec: RunSpec) -> RunSpec:
    """``spec`` whose rounds never evaluate on schedule (and never reach its last round)."""
    update = {"rounds": NEVER, "eval": spec.eval.model_copy(update={"every": NEVER})}
    return spec.model_copy(update=update).resolved(spec.scale, spec.components)


def probe_run(
    spec: RunSpec, seed: int, cache: DataCache, options: RunOptions = RunOptions(), rounds: int = 2
) -> RoundCost:
    """Time ``rounds`` steady-state rounds and one evaluation of (``spec``, ``seed``) on ``cache.device``
    as ``options`` run it (client executor, chunk, compiled step, client state, threads; datasets as
    ``cache`` loads them, a missing one raises :class:`~fedbench.data.DatasetNotFoundError`)."""
    quiet = _unevaluated(spec)
    with pinned_threads(options.threads), run_precision(spec.local, cache.device), TemporaryDirectory() as tmp:
        store, run_id = ResultsStore(Path(tmp)), run_id_of(quiet, seed)
        store.start_run(run_record(quiet, seed, "probe"))
        setup = build_run(quiet, seed, cache, options.client_state == "host")
        steps = local_steps(spec, setup.federation.batcher)  # the run's, not the never-ending probe's
        book = PriceBook()  # as the run itself decides (measured here, kept nowhere)
        loop = RoundLoop(
            quiet, seed, setup, options.executor, options.chunk, options.compile_step, book, run_steps=steps
        )

        def one_round(t: int) -> None:
            store.record_round(run_id, t, *loop.round(t))

        one_round(1)
        round_s = sum(timed(partial(one_round, t)) for t in range(2, 2 + rounds)) / rounds

        def evaluate() -> None:
            loop.evaluate(1 + rounds, True)
            if spec.eval.client_spread:
                loop.client_accuracy_spread()

        evaluate()
        eval_s = timed(evaluate)
    return RoundCost(round_s, eval_s, rounds, loop.executor.note)


def probe_population(
    spec: RunSpec, runs: int, cache: DataCache, options: RunOptions = RunOptions(), rounds: int = 2
) -> RoundCost:
    """:func:`probe_run` for ``runs`` seeds of ``spec`` trained as one population
    (:mod:`fedbench.engine.population`): ``round_s`` is each run's share of a population round (the
    round's time / ``runs``), ``eval_s`` one run's evaluation (each run evaluates alone)."""
    from fedbench.engine.population import (  # the population module imports the runner, as this
        member_chunk,
        member_step,
        population_chunk,
        population_round,
    )

    quiet = _unevaluated(spec)
    with pinned_threads(options.threads), run_precision(spec.local, cache.device), TemporaryDirectory() as tmp:
        store = ResultsStore(Path(tmp))
        loops = []
        for seed in range(runs):
            store.start_run(run_record(quiet, seed, "probe"))
            setup = build_run(quiet, seed, cache, options.client_state == "host")
            loops.append(
                RoundLoop(
                    quiet, seed, setup, "batched", member_chunk(options, cache.device, seed == 0), member_step(options)
                )
            )
        chunk = population_chunk(loops[0])

        def one_round(t: int) -> None:  # read and recorded every round: an upper bound of a round's cost
            rounds = population_round(loops, t, chunk)
            read_rounds(rounds)
            store.record_rounds([(run_id_of(quiet, seed), t, r.metrics, r.extra) for seed, r in enumerate(rounds)])

        one_round(1)
        round_s = sum(timed(partial(one_round, t)) for t in range(2, 2 + rounds)) / rounds / runs
        loops[0].evaluate(1 + rounds, True)
        eval_s = timed(lambda: loops[0].evaluate(1 + rounds, True))
    rows = f"chunks of {chunk} rows" if chunk else "all rows at once"
    return RoundCost(round_s, eval_s, rounds, f"population of {runs} runs ({rows}), each run's share of a round")
