"""Host time a population spends on each of its runs a round (issue 26: on a GPU, where a small model's rows take
little device time, the per-run host work of a round bounds a population's speed per run).

    python -m benchmarks.population_host [--algorithm fedavg] [--runs 16,64] [--rounds 20] [--repeat 3]
        [--set key=value] [--profile]

Trains R seeds of a small scenario (digits, an MLP 64-8-10, N = 50, S = 10, 4 local steps of 8, ``local.shuffle:
device``, float32) as one population on the batched executor, for each R of ``--runs`` (two sizes), and times
``population_round`` (the rounds, not the runs' opening and closing) in one thread. The model is so small that the
device work of a round barely grows with R, so the difference of the two sizes per added run and round is the
host's work for a run: its sampling, context, streams, server key, upload, metrics. Prints the median of ``repeat``
repeats (and each); ``--profile`` adds cProfile's top fedbench functions of the larger population. Runs on older commits too
(``PYTHONPATH=<worktree> python -m benchmarks.population_host``, with this file copied there). It also says how long
Python's cyclic garbage collector took (a median, per round, over the runs' whole training). Not a timed test.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import pstats
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

import fedbench.engine.population as population
from fedbench.engine.population import PopulationRun, execute_population
from fedbench.engine.setup import DataCache
from fedbench.options import RunOptions
from fedbench.scenario import parse_scenario, resolve_runs
from fedbench.store import ResultsStore

SCENARIO: dict[str, Any] = {
    "name": "population_host",
    "dataset": {"name": "digits"},
    "model": {"name": "mlp", "hidden": [8]},
    "clients": {"num": 50, "per_round": 10},
    "partition": {"kind": "dirichlet", "omega": 0.3},
    "local": {"iterations": 4, "batch_size": 8, "lr": 0.05, "shuffle": "device"},
    "seeds": [0],
}


class Collections:
    """While active, the seconds Python's cyclic garbage collector spends collecting (``gc.callbacks``)."""

    def __init__(self) -> None:
        self.seconds, self._start = 0.0, 0.0

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._start

    def __enter__(self) -> Collections:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self)


def rounds_seconds(runs: int, rounds: int, algorithm: str, changes: list[str]) -> tuple[float, float]:
    """Seconds in ``population_round`` of ``runs`` seeds trained ``rounds`` rounds as one population, and the
    seconds the garbage collector took during the whole."""
    raw = {**SCENARIO, "rounds": rounds, "eval": {"every": rounds}, "checkpoint_every": rounds}
    raw["algorithms"] = [{"name": algorithm}]
    spec = resolve_runs(parse_scenario(raw, overrides=changes))[0]
    spent = [0.0]
    original = population.population_round

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - start

    population.population_round = timed
    try:
        store = ResultsStore(Path(tempfile.mkdtemp(prefix="fedbench-host-")))
        cache = DataCache(Path("data"), False, torch.device("cpu"))
        options = RunOptions(population=str(runs), executor="batched")
        with Collections() as collections:
            outcomes = execute_population([PopulationRun(spec, s, "h") for s in range(runs)], store, cache, options)
    finally:
        population.population_round = original
    assert all(o.status == "finished" for o in outcomes), outcomes
    return spent[0], collections.seconds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--algorithm", default="fedavg")
    ap.add_argument("--runs", default="16,64")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--set", action="append", default=[], help="a scenario override, key=value (repeatable)")
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    small, large = (int(r) for r in args.runs.split(","))
    rounds_seconds(2, 2, args.algorithm, args.set)  # warm-up: imports, data, first calls
    times = {
        r: sorted(rounds_seconds(r, args.rounds, args.algorithm, args.set) for _ in range(args.repeat))
        for r in (small, large)
    }
    per_round = {r: 1e3 * s[len(s) // 2][0] / args.rounds for r, s in times.items()}
    print(f"{args.algorithm}, {args.rounds} rounds, torch {torch.__version__}, one thread, median of {args.repeat}")
    for r, ms in per_round.items():
        each = ", ".join(f"{1e3 * s / args.rounds:.1f}" for s, _ in times[r])
        collected = sorted(1e3 * c / args.rounds for _, c in times[r])[len(times[r]) // 2]
        print(
            f"  {r:4d} runs: {ms:7.2f} ms a round, {ms / r:.3f} ms a run a round (each repeat: {each}); "
            f"garbage collection {collected:.2f} ms a round"
        )
    print(f"  each added run: {(per_round[large] - per_round[small]) / (large - small):.3f} ms a round")
    if args.profile:
        profile = cProfile.Profile()
        profile.enable()
        rounds_seconds(large, args.rounds, args.algorithm, args.set)
        profile.disable()
        out = io.StringIO()
        pstats.Stats(profile, stream=out).sort_stats("cumulative").print_stats("fedbench/engine", 30)
        print(out.getvalue())


if __name__ == "__main__":
    main()
