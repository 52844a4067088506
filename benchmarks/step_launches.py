"""Operators a local step of the batched executor dispatches: each is at least one kernel launch on a GPU, where a
small model's step is bound by its launches (issue 26, item 3: the peer scenario's 116 ms a round on an H200).

    python -m benchmarks.step_launches [--hidden 200,200] [--clients 10] [--rounds 5] [--runs 1]

Trains the peer scenario's shape (FedAvg, an MLP of ``hidden`` layers, S = N = ``clients``, one epoch of batch 50,
float32) on MNIST-1D (offline, the stand-in for MNIST: 40 features, 400 samples a client) on the CPU, one run
through the batched executor (or ``--runs R`` seeds as one population), and counts the non-view ATen operators
its rounds dispatch (TorchDispatchMode), per round and per local step, after one untimed round; then times
2 × ``rounds`` more rounds (one thread; a small model's round on a CPU is mostly this overhead too). Runs on older
commits too (``PYTHONPATH=<worktree> python -m benchmarks.step_launches``, with this file copied there). Not a
timed test.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from fedbench.engine.population import population_round
from fedbench.engine.runner import RoundLoop
from fedbench.engine.setup import DataCache, build_run
from fedbench.scenario import parse_scenario, resolve_runs


class Operators(TorchDispatchMode):
    """Counts the non-view ATen operators dispatched while active."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if not getattr(func, "is_view", False):
            self.count += 1
        return func(*args, **(kwargs or {}))


def peer_spec(hidden: list[int], clients: int, rounds: int) -> Any:
    raw = {
        "name": "peer",
        "dataset": {"name": "mnist1d"},
        "model": {"name": "mlp", "hidden": hidden},
        "clients": {"num": clients, "per_round": clients},
        "partition": {"kind": "iid"},
        "local": {"epochs": 1, "batch_size": 50, "lr": 0.05, "precision": "fp32"},
        "rounds": 3 * rounds + 1,
        "eval": {"every": 3 * rounds + 1},
        "algorithms": [{"name": "fedavg"}],
    }
    return resolve_runs(parse_scenario(raw))[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hidden", default="200,200")
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(1)
    spec = peer_spec([int(h) for h in args.hidden.split(",")], args.clients, args.rounds)
    cache = DataCache(Path("data"), False, torch.device("cpu"))
    loops = [RoundLoop(spec, seed, build_run(spec, seed, cache), "batched", None, "off") for seed in range(args.runs)]
    rounds = (lambda t: population_round(loops, t)) if args.runs > 1 else (lambda t: loops[0].lazy_round(t))
    rounds(1)
    with Operators() as ops:
        for t in range(2, 2 + args.rounds):
            rounds(t)
    start = time.perf_counter()
    for t in range(2 + args.rounds, 2 + 3 * args.rounds):
        rounds(t)
    seconds = (time.perf_counter() - start) / (2 * args.rounds)
    steps = max(loops[0].steps_of(list(range(args.clients)), 2))
    per_round = ops.count / args.rounds / args.runs
    what = "one run" if args.runs == 1 else f"a population of {args.runs} runs, per run"
    print(
        f"MLP 40-{args.hidden.replace(',', '-')}-10, S = {args.clients}, {steps} steps a round, {what}: "
        f"{per_round:,.0f} operators a round, {per_round / steps:.0f} a step; {seconds * 1e3:.1f} ms a round on this CPU"
    )


if __name__ == "__main__":
    main()
