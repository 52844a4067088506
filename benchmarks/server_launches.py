"""Kernels a population's server updates launch, with and without the vmapped update (issue 26, item 1).

    python -m benchmarks.server_launches [--config configs/quickstart.yaml] [--scale tiny] [--algorithms fedavg,fedadam]
        [--runs 8,32] [--rounds 6] [--device cpu|cuda] [--set key=value]

Trains ``R`` seeds of each algorithm's entry of the scenario as one population from an empty store, twice: with
the runs' servers updated as one vmapped call (:mod:`fedbench.engine.population_server`, today's code) and with
each run's server updated alone (the joint key switched off: the code before it). It counts the ATen operators
dispatched (views left out; each of the others is at least one kernel launch on a GPU) in the server update
(``server_update`` and the BatchNorm buffers' average) and in the whole round, per round, and times the rounds.
The runs' numbers must agree both ways (float64: within 1e-9, and the largest difference is printed). On a CPU
a launch costs little, so the counts, not the times, are what a GPU would feel; on CUDA the times say it. Not a
timed test.
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import fedbench.engine.population as population
import fedbench.engine.population_server as population_server
from fedbench.engine.population import PopulationRun, execute_population
from fedbench.engine.runner import RoundLoop
from fedbench.engine.setup import DataCache
from fedbench.options import RunOptions
from fedbench.scenario import load_scenario, resolve_runs
from fedbench.store import ResultsStore


class Launches(TorchDispatchMode):
    """Counts the non-view ATen operators dispatched, in all and while ``server`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.total = self.in_server = 0
        self.server = False

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if not getattr(func, "is_view", False):
            self.total += 1
            self.in_server += self.server
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def counting_server(mode: Launches, joint: bool) -> Iterator[None]:
    """The server update's operators counted apart; ``joint`` False: every run's server updated alone."""
    patches: list[tuple[Any, str, Callable]] = [
        (RoundLoop, "apply_update", RoundLoop.apply_update),
        (population, "server_updates", population.server_updates),
        (population_server, "joint_key", population_server.joint_key),
    ]

    def phase(f: Callable) -> Callable:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            mode.server = True
            try:
                return f(*args, **kwargs)
            finally:
                mode.server = False

        return wrapped

    RoundLoop.apply_update = phase(RoundLoop.apply_update)  # type: ignore[method-assign]
    population.server_updates = phase(population.server_updates)
    if not joint:
        population_server.joint_key = lambda loop, received: None
    try:
        yield
    finally:
        for owner, name, original in patches:
            setattr(owner, name, original)


def measure(
    config: str,
    name: str,
    runs: int,
    rounds: int,
    joint: bool,
    device: str = "cpu",
    scale: str | None = None,
    changes: tuple[str, ...] = (),
) -> tuple[Launches, float, Any]:
    """Operators and seconds of ``runs`` seeds of the entry ``name`` (of the scenario at ``scale`` with the
    overrides ``changes``, untuned) trained ``rounds`` rounds as one population."""
    overrides = [*changes, f"rounds={rounds}", f"eval.every={rounds}", f"checkpoint_every={rounds}", "tune=false"]
    specs = resolve_runs(load_scenario(Path(config), overrides, scale=scale), scale or "paper")
    spec = next(s for s in specs if s.algorithm["name"] == name)
    store = ResultsStore(Path(tempfile.mkdtemp(prefix="fedbench-server-")))
    cache = DataCache(Path("data"), False, torch.device(device))
    mode = Launches()
    with counting_server(mode, joint), mode:
        start = time.perf_counter()
        outcomes = execute_population(
            [PopulationRun(spec, seed, "h") for seed in range(runs)],
            store,
            cache,
            RunOptions(device=device, population=str(runs)),
        )
        if device == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
    assert all(o.status == "finished" for o in outcomes), outcomes
    return mode, seconds, store.metrics([o.run_id for o in outcomes])[["run_id", "round", "train_loss", "test_acc"]]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="configs/quickstart.yaml")
    ap.add_argument("--algorithms", default="fedavg,fedadam")
    ap.add_argument("--runs", default="8,32")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--scale", default=None)
    ap.add_argument("--set", action="append", default=[], help="a scenario override, key=value (repeatable)")
    args = ap.parse_args()
    where = (args.device, args.scale, tuple(args.set))
    print(
        f"{args.config} (scale {args.scale}), {args.rounds} rounds, one population, {args.device}, torch {torch.__version__}"
    )
    print("operators a round (non-view ATen ops, each ≥ 1 kernel launch on a GPU), and wall seconds in all")
    print(
        "| algorithm | R | server update: alone | vmapped | ratio | whole round: alone | vmapped | s alone | s vmapped "
        "| largest difference |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    names = args.algorithms.split(",")
    measure(args.config, names[0], 2, args.rounds, True, *where)  # warm-up: imports, data, first calls
    for name in names:
        for runs in [int(r) for r in args.runs.split(",")]:
            before, t_before, m_before = measure(args.config, name, runs, args.rounds, False, *where)
            after, t_after, m_after = measure(args.config, name, runs, args.rounds, True, *where)
            a, b = (m.drop(columns="run_id").to_numpy(dtype=float) for m in (m_before, m_after))
            differs = float(abs(a - b)[~(pd.isna(a) & pd.isna(b))].max())
            assert differs <= 1e-9, f"the numbers moved by {differs:.3g}"
            r = args.rounds
            print(
                f"| {name} | {runs} | {before.in_server / r:,.0f} | {after.in_server / r:,.0f} | "
                f"{before.in_server / max(after.in_server, 1):.1f}× | {before.total / r:,.0f} | {after.total / r:,.0f} | "
                f"{t_before:.2f} | {t_after:.2f} | {differs:.2g} |"
            )


if __name__ == "__main__":
    main()
