"""Host time a population spends on each of its runs a round (issue 26: on a GPU, where a small model's rows take
little device time, the per-run host work of a round bounds a population's speed per run).

    python -m benchmarks.population_host [--algorithm fedavg] [--runs 16,64] [--rounds 20] [--repeat 3]
        [--set key=value] [--trials] [--phases] [--profile] [--device cuda]

Trains R seeds (``--trials``: R tuning trials of seed 0, η_l spread over ½×–2× the scenario's) of a small scenario
(digits, an MLP 64-8-10, N = 50, S = 10, 4 local steps of 8, ``local.shuffle: device``, float32) as one population
on the batched executor, for each R of ``--runs`` (two sizes), and times ``population_round`` (the rounds, not the
runs' opening and closing; on ``--device cuda`` to the end of their device work) in one thread. The model is so small
that the device work of a round barely grows with R, so the difference of the two sizes per added run and round is
the host's work for a run: its sampling, context, server key, upload, metrics. Prints the median of ``repeat``
repeats (and each); ``--phases`` adds the microseconds a run a round of each per-run phase of the larger
population's rounds (its loop's methods and the server key, timed by ``perf_counter`` wrappers); ``--profile`` adds
cProfile's top fedbench functions of the larger population. Runs on older commits too (``PYTHONPATH=<worktree>
python -m benchmarks.population_host``, with this file copied there). It also says how long Python's cyclic garbage
collector took (a median, per round, over the runs' whole training). Not a timed test.
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
import fedbench.engine.population_server as population_server
import fedbench.engine.runner as runner
from fedbench.engine.population import PopulationRun, execute_population
from fedbench.engine.runner import RoundLoop
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


def population_of(runs: int, rounds: int, algorithm: str, changes: list[str], trials: bool) -> list[PopulationRun]:
    """``runs`` seeds of the scenario, or with ``trials`` ``runs`` trials of seed 0 (η_l from ½× to 2×)."""
    raw = {**SCENARIO, "rounds": rounds, "eval": {"every": rounds}, "checkpoint_every": rounds}
    raw["algorithms"] = [{"name": algorithm}]
    spec = resolve_runs(parse_scenario(raw, overrides=changes))[0]
    if not trials:
        return [PopulationRun(spec, s, "h") for s in range(runs)]
    rates = [spec.local.lr * 2 ** (-1 + 2 * i / max(runs - 1, 1)) for i in range(runs)]
    return [
        PopulationRun(spec.model_copy(update={"local": spec.local.model_copy(update={"lr": lr})}), 0, "h")
        for lr in rates
    ]


def rounds_seconds(
    runs: int, rounds: int, algorithm: str, changes: list[str], trials: bool = False
) -> tuple[float, float]:
    """Seconds in ``population_round`` of ``runs`` seeds (or trials) trained ``rounds`` rounds as one population, and
    the seconds the garbage collector took during the whole."""
    members = population_of(runs, rounds, algorithm, changes, trials)
    clear = getattr(getattr(runner, "_sampled", None), "cache_clear", None)
    if clear is not None:  # each repeat samples afresh (a population's trials share one draw within it)
        clear()
    spent = [0.0]
    original = population.population_round

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            if DEVICE.type == "cuda":  # the round's device work too
                torch.cuda.synchronize(DEVICE)
            spent[0] += time.perf_counter() - start

    population.population_round = timed
    try:
        store = ResultsStore(Path(tempfile.mkdtemp(prefix="fedbench-host-")))
        cache = DataCache(Path("data"), False, DEVICE)
        options = RunOptions(population=str(runs), executor="batched")
        with Collections() as collections:
            outcomes = execute_population(members, store, cache, options)
    finally:
        population.population_round = original
    assert all(o.status == "finished" for o in outcomes), outcomes
    return spent[0], collections.seconds


DEVICE = torch.device("cpu")  # --device: the data's and the runs' device

PHASES = ("sample_round", "asked_inputs", "open_sampled", "receive", "settle", "finish_round")  # RoundLoop's, per run


def phases(runs: int, rounds: int, algorithm: str, changes: list[str], trials: bool) -> dict[str, float]:
    """Seconds of each per-run phase of a population's rounds, summed over its runs and rounds: the
    :data:`PHASES` of each run's loop and its server key (``joint_key``)."""
    spent: dict[str, float] = {}
    targets = [(RoundLoop, name) for name in PHASES if hasattr(RoundLoop, name)] + [(population_server, "joint_key")]
    originals = [(owner, name, getattr(owner, name)) for owner, name in targets]

    def wrapped(name: str, function: Any) -> Any:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                spent[name] = spent.get(name, 0.0) + time.perf_counter() - start

        return timed

    for owner, name, function in originals:
        setattr(owner, name, wrapped(name, function))
    try:
        rounds_seconds(runs, rounds, algorithm, changes, trials)
    finally:
        for owner, name, function in originals:
            setattr(owner, name, function)
    return spent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--algorithm", default="fedavg")
    ap.add_argument("--runs", default="16,64")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--set", action="append", default=[], help="a scenario override, key=value (repeatable)")
    ap.add_argument("--trials", action="store_true", help="tuning trials of seed 0 in place of seeds")
    ap.add_argument("--phases", action="store_true", help="time each per-run phase of the larger population")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--device", default="cpu", help="cpu or cuda: the rounds are timed to their device work's end")
    args = ap.parse_args()
    torch.set_num_threads(1)
    global DEVICE
    DEVICE = torch.device(args.device)
    small, large = (int(r) for r in args.runs.split(","))
    rounds_seconds(2, 2, args.algorithm, args.set)  # warm-up: imports, data, first calls
    times = {
        r: sorted(rounds_seconds(r, args.rounds, args.algorithm, args.set, args.trials) for _ in range(args.repeat))
        for r in (small, large)
    }
    per_round = {r: 1e3 * s[len(s) // 2][0] / args.rounds for r, s in times.items()}
    kind = "trials of seed 0" if args.trials else "seeds"
    print(
        f"{args.algorithm}, {kind}, {args.rounds} rounds, on {DEVICE}, torch {torch.__version__}, one thread, "
        f"median of {args.repeat}"
    )
    for r, ms in per_round.items():
        each = ", ".join(f"{1e3 * s / args.rounds:.1f}" for s, _ in times[r])
        collected = sorted(1e3 * c / args.rounds for _, c in times[r])[len(times[r]) // 2]
        print(
            f"  {r:4d} runs: {ms:7.2f} ms a round, {ms / r:.3f} ms a run a round (each repeat: {each}); "
            f"garbage collection {collected:.2f} ms a round"
        )
    print(f"  each added run: {(per_round[large] - per_round[small]) / (large - small):.3f} ms a round")
    if args.phases:
        spent = phases(large, args.rounds, args.algorithm, args.set, args.trials)
        print(f"  per-run phases of {large} runs, µs a run a round:")
        for name, seconds in sorted(spent.items(), key=lambda item: -item[1]):
            print(f"    {name:<14} {1e6 * seconds / (large * args.rounds):7.1f}")
    if args.profile:
        profile = cProfile.Profile()
        profile.enable()
        rounds_seconds(large, args.rounds, args.algorithm, args.set, args.trials)
        profile.disable()
        out = io.StringIO()
        pstats.Stats(profile, stream=out).sort_stats("cumulative").print_stats("fedbench/engine", 30)
        print(out.getvalue())


if __name__ == "__main__":
    main()
