"""Algorithms' own local losses on the batched rows (issue 26): operators and seconds a run a round.

    python -m benchmarks.own_losses [--algorithms moon,fedmlb] [--runs 4] [--rounds 3]
        [--config configs/gradma/mnist_s10_w0.01.yaml] [--scale tiny] [--device cpu|cuda] [--set key=value]

MOON and FedMLB on the tiny GradMA MNIST column by default; LwF-FL, iCaRL-FL and TARGET on a C-FLAG file, e.g.
``--config configs/cflag/ci_cifar10_iid.yaml --algorithms lwf_fl,icarl_fl,target_fl --rounds 10 --set
continual.rounds_per_task=2`` (5 tasks of 2 rounds: the distillation from the second task on).

Trains seeds 0…R−1 of each algorithm's entry of the scenario (untuned) three ways from an empty store: each run
alone on the sequential executor (the only way these algorithms trained before their losses ran on the rows),
each alone on the batched executor, and all R as one population (not TARGET, whose runs train alone). It counts the non-view ATen operators
dispatched (each at least one kernel launch on a GPU) and times the whole, per run and round, and checks that the
batched runs' and the population's numbers agree with the sequential ones to float tolerance (keep ``--rounds``
short: at η_l = 0.1 the tiny GradMA MNIST column multiplies a rounding difference by about 30 a round, FedAvg's
two executors as much, in float32 and float64 alike). Each way's seconds include its runs' set-up. On a CPU a launch
costs little, so the counts, not the times, are what a GPU would feel; on CUDA the times say it. Not a timed test.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.step_launches import Operators
from fedbench.algorithms import ALGORITHMS
from fedbench.engine.population import PopulationRun, execute_population
from fedbench.engine.setup import DataCache
from fedbench.options import RunOptions
from fedbench.scenario import load_scenario, resolve_runs
from fedbench.store import ResultsStore

COLS = ["round", "train_loss", "test_loss", "test_acc"]


def train(
    config: str, scale: str, name: str, runs: int, rounds: int, how: str, device: str, extra: list[str]
) -> tuple[int, float, Any]:
    """Operators, seconds and metrics of seeds 0…runs−1 of the entry ``name``, ``how``: ``sequential`` or
    ``batched`` (each run alone) or ``population`` (all as one); ``extra``: more ``key=value`` overrides."""
    overrides = [f"rounds={rounds}", f"eval.every={rounds}", f"checkpoint_every={rounds}", "tune=false", *extra]
    spec = next(
        s
        for s in resolve_runs(load_scenario(Path(config), overrides, scale=scale), scale)
        if s.algorithm["name"] == name
    )
    store = ResultsStore(Path(tempfile.mkdtemp(prefix="fedbench-own-")))
    cache = DataCache(Path("data"), False, torch.device(device))
    executor = "sequential" if how == "sequential" else "batched"
    groups = [list(range(runs))] if how == "population" else [[seed] for seed in range(runs)]
    with Operators() as ops:
        start = time.perf_counter()
        outcomes = []
        for seeds in groups:
            options = RunOptions(device=device, executor=executor, population=str(len(seeds)))
            outcomes += execute_population([PopulationRun(spec, s, "h") for s in seeds], store, cache, options)
        if device == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
    assert all(o.status == "finished" for o in outcomes), outcomes
    return ops.count, seconds, store.metrics([o.run_id for o in outcomes])[COLS].to_numpy(dtype=float)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--algorithms", default="moon,fedmlb")
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--config", default="configs/gradma/mnist_s10_w0.01.yaml")
    ap.add_argument("--scale", default="tiny")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--set", action="append", default=[], help="a scenario override, key=value (repeatable)")
    args = ap.parse_args()
    print(
        f"{args.config} at {args.scale}, {args.runs} seeds, {args.rounds} rounds, {args.device}, torch {torch.__version__}"
    )
    print("| algorithm | how | operators a run a round | s a run a round | largest difference from sequential |")
    print("|---|---|---|---|---|")
    names = args.algorithms.split(",")
    train(args.config, args.scale, names[0], 1, args.rounds, "batched", args.device, args.set)  # warm-up: imports, data
    for name in names:
        reference = None
        joins = ALGORITHMS.capabilities(name).population  # TARGET's runs train alone
        for how in ("sequential", "batched", "population") if joins else ("sequential", "batched"):
            ops, seconds, numbers = train(
                args.config, args.scale, name, args.runs, args.rounds, how, args.device, args.set
            )
            per = args.runs * args.rounds
            if reference is None:
                reference, differs = numbers, ""
            else:
                gap = float(np.nanmax(np.abs(numbers - reference)))
                assert gap <= 1e-3, f"{name} {how}: the numbers moved by {gap:.3g}"
                differs = f"{gap:.2g}"
            print(f"| {name} | {how} | {ops / per:,.0f} | {seconds / per:.3f} | {differs} |")


if __name__ == "__main__":
    main()
