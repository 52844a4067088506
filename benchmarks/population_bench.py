"""A population of R runs vs the same runs one at a time: one algorithm of a scenario file at a scale, R seeds.

    python -m benchmarks.population_bench gradma 3 [--config configs/gradma/mnist_s10_w0.01.yaml] [--scale tiny]
        [--device cpu|cuda] [--modes sequential,batched,graphed,population,population-graphed] [--alone K]
        [--set key=value] [--trials]

Times, in one process (one torch thread on a CPU), the runs one by one on the sequential and the batched
executors (the first ``--alone`` K of them, default all R; per-run times are compared) and as one population
of all R (after one untimed warm-up run on the batched executor), and says whether the population's metrics
equal the batched runs' bit for bit. ``graphed`` and ``population-graphed`` are the batched executor and the
population with their step replayed from CUDA graphs (``--compile graphs``, CUDA only). With ``--trials`` the R runs are a tuning population's trials instead: seed 0
each, η_l spread over ×½…×2 of the entry's (a grid in log scale). Without the population mode it also times older code:
``PYTHONPATH=<worktree of an older commit> python benchmarks/population_bench.py ... --modes batched``."""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from fedbench.engine.runner import execute_run
from fedbench.engine.setup import DataCache
from fedbench.options import RunOptions
from fedbench.scenario import load_scenario, resolve_runs
from fedbench.store import ResultsStore

COLS = ["test_acc", "test_loss", "train_loss", "bits_up", "bits_down", "consistency"]
GRAPHED = {"graphed": "batched", "population-graphed": "population"}  # modes whose step replays CUDA graphs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("algorithm")
    ap.add_argument("runs", type=int)
    ap.add_argument("--config", default="configs/gradma/mnist_s10_w0.01.yaml")
    ap.add_argument("--scale", default="tiny")
    ap.add_argument("--modes", default="sequential,batched,population")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--set", action="append", default=[], help="a scenario override, e.g. local.precision=fp32")
    ap.add_argument("--alone", type=int, default=None, help="runs timed one by one (default: all R)")
    ap.add_argument("--trials", action="store_true", help="R trials of seed 0 (η_l ×½…×2), not R seeds")
    args = ap.parse_args()

    def entry(overrides: list[str]) -> Any:
        return next(
            s
            for s in resolve_runs(load_scenario(Path(args.config), overrides, scale=args.scale), args.scale)
            if s.algorithm["name"] == args.algorithm
        )

    spec = entry(args.set)
    cache = DataCache(Path("data"), False, torch.device(args.device))
    alone = args.alone or args.runs
    if args.trials:
        factors = [2 ** (2 * r / max(args.runs - 1, 1) - 1) for r in range(args.runs)]
        specs = [entry([*args.set, f"local.lr={spec.local.lr * f!r}"]) for f in factors]
        runs = [SimpleNamespace(spec=trial, seed=0) for trial in specs]
    else:
        runs = [SimpleNamespace(spec=spec, seed=seed) for seed in range(args.runs)]
    tmp = Path(tempfile.mkdtemp(prefix="fedbench-population-"))
    execute_run(spec, 10_000, ResultsStore(tmp / "warm"), cache, "bench", options=RunOptions(executor="batched"))
    what = f", {args.runs} trials of seed 0" if args.trials else ""
    print(f"{args.algorithm} of {args.config} at {args.scale} on {args.device}{what}", flush=True)
    stores, seconds, counts = {}, {}, {}
    for mode in args.modes.split(","):
        store = stores[mode] = ResultsStore(tmp / mode)
        kind, step = GRAPHED.get(mode, mode), "graphs" if mode in GRAPHED else "auto"
        counts[mode] = args.runs if kind == "population" else alone
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        start = time.perf_counter()
        if kind == "population":  # imported here: the other modes also time code from before populations
            from fedbench.engine.population import PopulationRun, execute_population

            members = [PopulationRun(r.spec, r.seed, "bench") for r in runs]
            outs = execute_population(members, store, cache, RunOptions(population=str(args.runs), compile_step=step))
        else:
            outs = [
                execute_run(r.spec, r.seed, store, cache, "bench", options=RunOptions(executor=kind, compile_step=step))
                for r in runs[:alone]
            ]
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        seconds[mode] = time.perf_counter() - start
        assert all(o.status == "finished" for o in outs), outs
        print(f"{args.algorithm} {mode}: {counts[mode]} runs in {seconds[mode]:.2f} s", flush=True)
    ids = [o.run_id for o in outs][:alone]  # the same run ids in every mode
    for mode in ("graphed", "population", "population-graphed"):
        if mode in stores and "batched" in stores:
            same = all(stores[mode].metrics([i])[COLS].equals(stores["batched"].metrics([i])[COLS]) for i in ids)
            print(f"{mode} == batched bit for bit: {same}")
    first = next(iter(seconds))
    for mode in seconds:
        per_run = seconds[mode] / counts[mode]
        print(f"{mode}: {per_run:.3f} s a run; {seconds[first] / counts[first] / per_run:.2f}x {first}'s speed")


if __name__ == "__main__":
    main()
