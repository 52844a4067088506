"""Operators a population round dispatches for each of its runs, by phase (issue 26: a population's work per
run bounds it on a GPU, where every operator is at least one kernel launch or a host dispatch).

    python -m benchmarks.run_operators [--algorithm fedavg] [--runs 4,8] [--rounds 4] [--seeds K]
        [--config configs/gradma/mnist_s10_w0.01.yaml] [--scale tiny] [--depth 3] [--set local.shuffle=device]

Trains seeds 0…R−1 of the algorithm's entry (with ``--seeds K``, the runs cycle through K seeds, as the trials of
a tuning population share theirs) as one population for each R of ``--runs`` (two sizes), one untimed
round, then counts the non-view ATen operators of ``rounds`` rounds (TorchDispatchMode), each attributed to the
chain of fedbench functions under ``population_round`` that dispatched it (``depth`` of them). The difference
between the two sizes, per added run and round, is what each run costs beyond the work the population shares.
The plan's permutations (``row_draws``) are host operators by design (a host generator's ``randperm``); the rest
run on the data's device, and so do the plan's under ``--set local.shuffle=device`` (``hashed_plan``). Runs on older commits too (``PYTHONPATH=<worktree> python -m benchmarks.run_operators``,
with this file copied there). Not a timed test.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from fedbench.engine.population import population_round
from fedbench.engine.runner import RoundLoop
from fedbench.engine.setup import DataCache, build_run
from fedbench.scenario import load_scenario, resolve_runs


class PhaseOperators(TorchDispatchMode):
    """Counts the non-view ATen operators dispatched while active, by the fedbench functions that called them
    (the first ``depth`` under ``population_round``)."""

    def __init__(self, depth: int) -> None:
        super().__init__()
        self.depth = depth
        self.by: Counter[str] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if not getattr(func, "is_view", False):
            frame, chain = sys._getframe(1), []
            while frame is not None and frame.f_code.co_name != "population_round":
                if "fedbench" in frame.f_code.co_filename:
                    chain.append(frame.f_code.co_name)
                frame = frame.f_back
            self.by["/".join(list(reversed(chain))[: self.depth]) or "population_round"] += 1
        return func(*args, **(kwargs or {}))


def count(spec: Any, runs: int, rounds: int, depth: int, seeds: int) -> Counter[str]:
    cache = DataCache(Path("data"), False, torch.device("cpu"))
    loops = [
        RoundLoop(spec, r % (seeds or runs), build_run(spec, r % (seeds or runs), cache), "batched", None, "off")
        for r in range(runs)
    ]
    population_round(loops, 1)
    with PhaseOperators(depth) as ops:
        for t in range(2, 2 + rounds):
            population_round(loops, t)
    return ops.by


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--algorithm", default="fedavg")
    ap.add_argument("--runs", default="4,8")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--config", default="configs/gradma/mnist_s10_w0.01.yaml")
    ap.add_argument("--scale", default="tiny")
    ap.add_argument("--depth", type=int, default=3)
    ap.add_argument("--seeds", type=int, default=0, help="seeds the runs cycle through (0: one per run)")
    ap.add_argument("--set", action="append", default=[], help="KEY=VALUE scenario overrides, as fedbench run's")
    args = ap.parse_args()
    torch.set_num_threads(1)
    small, large = (int(r) for r in args.runs.split(","))
    spec = next(
        s
        for s in resolve_runs(load_scenario(Path(args.config), args.set, scale=args.scale), args.scale)
        if s.algorithm["name"] == args.algorithm
    )
    a, b = (count(spec, runs, args.rounds, args.depth, args.seeds) for runs in (small, large))
    added = (large - small) * args.rounds
    total = (sum(b.values()) - sum(a.values())) / added
    print(
        f"{args.algorithm} of {args.config} at {args.scale}{f', {args.seeds} seed(s)' if args.seeds else ''}"
        f"{''.join(f', --set {v}' for v in args.set)}: "
        f"{sum(a.values()) / args.rounds:,.0f} operators a round "
        f"for {small} runs, {sum(b.values()) / args.rounds:,.0f} for {large}: {total:.1f} a run a round, by phase:"
    )
    for phase in sorted(set(a) | set(b), key=lambda k: (a[k] - b[k], k)):
        per_run = (b[phase] - a[phase]) / added
        if abs(per_run) >= 0.05:
            print(f"  {per_run:7.1f}  {phase}")


if __name__ == "__main__":
    main()
