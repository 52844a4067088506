"""The top of a torch.profiler trace of one round: one run on the batched executor, or R runs as one population.

    python benchmarks/profile_round.py [--runs R] [--algorithm fedavg] [--config configs/gradma/mnist_s10_w0.01.yaml]
        [--scale tiny] [--device cpu|cuda] [--set key=value] [--top 20] [--compile off[,graphs]]

Builds the runs (seeds 0…R−1 of the algorithm's entry), trains two warm-up rounds, then profiles round 3
(CPU, and CUDA on a GPU) and prints its wall time and the operators by self time, once for each ``--compile``
(``graphs``: the step replayed from CUDA graphs, captured in the warm-up rounds). With ``--runs 1`` it drives
:class:`~fedbench.engine.runner.RoundLoop` alone, so that it also profiles code from before populations:
``PYTHONPATH=<worktree of an older commit> python benchmarks/profile_round.py``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from fedbench.engine.runner import RoundLoop
from fedbench.engine.setup import DataCache, build_run
from fedbench.scenario import load_scenario, resolve_runs
from fedbench.store import ResultsStore


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--algorithm", default="fedavg")
    ap.add_argument("--config", default="configs/gradma/mnist_s10_w0.01.yaml")
    ap.add_argument("--scale", default="tiny")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--top", type=int, default=20)
    ap.add_argument("--compile", default="off", help="comma-separated: off, graphs (each profiled in turn)")
    args = ap.parse_args()
    for choice in args.compile.split(","):
        profile_round(args, choice)


def profile_round(args: argparse.Namespace, choice: str) -> None:
    """Round 3 of the runs with ``--compile choice``, profiled, after two warm-up rounds."""
    torch.set_num_threads(1)
    spec = next(
        s
        for s in resolve_runs(load_scenario(Path(args.config), args.set, scale=args.scale), args.scale)
        if s.algorithm["name"] == args.algorithm
    )
    cache = DataCache(Path("data"), False, torch.device(args.device))
    loops = [RoundLoop(spec, seed, build_run(spec, seed, cache), "batched", None, choice) for seed in range(args.runs)]
    store = ResultsStore(Path(tempfile.mkdtemp(prefix="fedbench-profile-")))
    if args.runs == 1:

        def one_round(t: int) -> None:
            loops[0].round(t)
    else:
        from fedbench.engine.population import population_round

        def one_round(t: int) -> None:
            population_round(loops, t)

    for t in (1, 2):
        one_round(t)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device.startswith("cuda") else [])
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    sync()
    start = time.perf_counter()
    with profile(activities=activities) as prof:
        one_round(3)
        sync()
    wall = time.perf_counter() - start
    what = "one run, batched executor" if args.runs == 1 else f"a population of {args.runs} runs"
    what += f", --compile {choice}"
    print(f"{args.algorithm} of {args.config} at {args.scale} on {args.device}, {what}: round 3 took {wall:.3f} s")
    print(f"(profiled; each run is S = {spec.clients.per_round} clients, {spec.local.iterations} local steps)")
    key = "self_cuda_time_total" if args.device.startswith("cuda") else "self_cpu_time_total"
    print(prof.key_averages().table(sort_by=key, row_limit=args.top, max_name_column_width=50))
    del store


if __name__ == "__main__":
    main()
