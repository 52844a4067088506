"""Host reads a run makes, round by round: each would make a GPU wait for its queue (issue 26, item 3).

    python -m benchmarks.host_reads [--config configs/quickstart.yaml] [--algorithms fedavg,scaffold]
        [--rounds 10] [--every 5] [--runs 1] [--top 3] [--qp-here] [--set key=value]

Trains each algorithm's entry of the scenario (at ``--scale``, if given; evaluated every ``every`` rounds) from an
empty store through :func:`~fedbench.engine.runner.execute_run`, or ``--runs R`` seeds as one population, for
``rounds`` and for 2 × ``rounds`` rounds (a continual scenario's tasks of ``rounds`` / tasks rounds each), and counts the reads of torch tensors to the host (``item``, ``tolist``, ``float``, ``bool``, …;
:class:`~fedbench.engine.pending.HostReads`). On a CPU nothing waits, but the count is what a GPU run would
wait for; and the host→device copies (:class:`Copies`). The difference of the two runs is what ``rounds`` more rounds
read, without the setup's reads. ``--qp-here`` solves GradMA's QP_l (C ≤ 4) as on a GPU, on the device
(``fedbench.algorithms.projection.HERE``; the CPU's default is the host). Not a timed test; runs on older commits too
(``PYTHONPATH=<worktree> python -m benchmarks.host_reads`` with this file's HostReads copied there).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

import fedbench.engine.pending as pending
from fedbench.engine.pending import HostReads
from fedbench.engine.population import PopulationRun, execute_population
from fedbench.engine.precision import default_dtype
from fedbench.engine.setup import DataCache
from fedbench.options import RunOptions
from fedbench.scenario import load_scenario, resolve_runs
from fedbench.store import ResultsStore


class Copies:
    """While active, counts the calls of :func:`~fedbench.engine.pending.to_device` (each a host→device copy on
    a GPU), wherever a fedbench module imported it."""

    def __init__(self) -> None:
        self.count = 0
        self.modules: list[Any] = []

    def __enter__(self) -> Copies:
        original = pending.to_device

        def counting(host: torch.Tensor, device: torch.device) -> torch.Tensor:
            self.count += 1
            return original(host, device)

        self.original = original
        self.modules = [
            m
            for n, m in list(sys.modules.items())
            if n.startswith("fedbench") and getattr(m, "to_device", None) is original
        ]
        for m in self.modules:
            m.to_device = counting
        return self

    def __exit__(self, *exc: object) -> None:
        for m in self.modules:
            m.to_device = self.original


def reads_of(
    config: str, scale: str | None, name: str, rounds: int, every: int, runs: int, changes: Sequence[str] = ()
) -> tuple[HostReads, Copies]:
    """The host reads of ``runs`` seeds of the scenario's ``name`` entry trained ``rounds`` rounds from an empty
    store (one population when ``runs`` > 1), evaluated every ``every``, with the overrides ``changes``."""
    overrides = [*changes, f"rounds={rounds}", f"eval.every={every}", f"checkpoint_every={rounds}", "tune=false"]
    continual = load_scenario(Path(config), changes, scale=scale).continual
    if continual is not None:  # a continual run's rounds are its tasks' (the same task ends in both runs)
        overrides.append(f"continual.rounds_per_task={rounds // continual.tasks}")
    specs = resolve_runs(load_scenario(Path(config), overrides, scale=scale), scale)
    spec = next(s for s in specs if s.algorithm["name"] == name)
    store = ResultsStore(Path(tempfile.mkdtemp(prefix="fedbench-reads-")))
    cache = DataCache(Path("data"), False, torch.device("cpu"))
    with HostReads() as reads, Copies() as copies, default_dtype(torch.float64):
        outcomes = execute_population(
            [PopulationRun(spec, seed, "h") for seed in range(runs)], store, cache, RunOptions(executor="batched")
        )
    assert all(o.status == "finished" for o in outcomes), outcomes
    return reads, copies


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="configs/quickstart.yaml")
    ap.add_argument("--algorithms", default="fedavg,fedprox,scaffold,fedadam,feddyn")
    ap.add_argument("--scale", default=None)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--every", type=int, default=5)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--top", type=int, default=3)
    ap.add_argument("--qp-here", action="store_true", help="GradMA's QP_l on the device, as on a GPU")
    ap.add_argument("--set", action="append", default=[], help="a scenario override, key=value (repeatable)")
    args = ap.parse_args()
    if args.qp_here:
        import fedbench.algorithms.projection as projection

        projection.HERE = True
    what = "one run" if args.runs == 1 else f"a population of {args.runs} runs"
    qp = ", QP_l on the device" if args.qp_here else ""
    print(f"{args.config} (scale {args.scale}), evaluated every {args.every} rounds, {what}{qp}, on cpu: the reads of")
    print(f"rounds {args.rounds + 1}-{2 * args.rounds} (a run of {2 * args.rounds} rounds less one of {args.rounds})")
    for name in args.algorithms.split(","):
        (short, short_copies), (long, long_copies) = (
            reads_of(args.config, args.scale, name, r, args.every, args.runs, args.set)
            for r in (args.rounds, 2 * args.rounds)
        )
        extra = long.where - short.where
        per_round = (long.count - short.count) / args.rounds / args.runs
        copies = (long_copies.count - short_copies.count) / args.rounds / args.runs
        print(
            f"{name:10s} {long.count - short.count:5d} reads, {per_round:5.2f} a round a run; "
            f"{copies:5.1f} copies to the device a round a run"
        )
        for place, n in extra.most_common(args.top):
            print(f"    {n:5d} {place}")


if __name__ == "__main__":
    main()
