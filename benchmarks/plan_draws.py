"""Host time of a round plan: drawing every client's minibatches (their epochs' permutations) and laying them out,
for one run and for a population of R runs (issue 26, item 3: a population's host work per run bounds its speed
on a GPU).

    python -m benchmarks.plan_draws [--runs 1,8,32] [--clients 10] [--samples 20] [--batch 10] [--steps 9]
        [--seeds K] [--shuffle host,device]

Synthetic partitions (``samples`` per client, each run its own seed; with ``--seeds K`` the runs cycle through K
seeds, as the trials of a tuning population share theirs), ``steps`` local steps of batch ``batch`` per
client and round: with the defaults each client composes 4.5 permutations a round, as in the tiny GradMA MNIST
column. One run draws with :func:`~fedbench.engine.plan.draw_plan`; a population with
``population_rows.population_plan`` where it exists (else each run's plan side by side, as older commits did).
``--shuffle device`` draws the plans as ``local.shuffle: device`` does (:mod:`fedbench.engine.device_plan`: one
sort for all the rows, on the data's device; ``--device cuda`` puts the data there). Prints microseconds a run a
round (best of 5 repeats of 20 rounds; one thread; on CUDA synchronised after each repeat). Runs on older commits
too, with this file copied there (``--shuffle host`` only). Not a timed test.
"""

from __future__ import annotations

import argparse
import time
from types import SimpleNamespace

import torch

import fedbench.engine.population_rows as population_rows
from fedbench.data.base import ArraySplit
from fedbench.engine.batches import ClientBatcher
from fedbench.engine.local import LocalConfig
from fedbench.engine.plan import draw_plan
from fedbench.scenario import AugmentSpec


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", default="1,8,32")
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--samples", type=int, default=20)
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--steps", type=int, default=9)
    ap.add_argument("--seeds", type=int, default=0, help="seeds the runs cycle through (0: one per run)")
    ap.add_argument("--shuffle", default="host", help="host, device, or both (host,device)")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    torch.set_num_threads(1)
    n, device = args.clients * args.samples, torch.device(args.device)
    train = ArraySplit(torch.zeros(n, 4, device=device), torch.zeros(n, dtype=torch.int64, device=device))
    parts = [torch.arange(i * args.samples, (i + 1) * args.samples, device=device) for i in range(args.clients)]
    cfg = LocalConfig(0.0, None, AugmentSpec(), seed=0)
    clients, steps = list(range(args.clients)), [args.steps] * args.clients
    joint = getattr(population_rows, "population_plan", None)
    seeds = f", the runs cycling through {args.seeds} seed(s)" if args.seeds else ""
    print(f"{args.clients} clients × {args.samples} samples, {args.steps} steps of batch {args.batch} a round{seeds}")
    for shuffle, runs in [(s, int(r)) for s in args.shuffle.split(",") for r in args.runs.split(",")]:
        best = float("inf")
        kind = {} if shuffle == "host" else {"shuffle": shuffle}  # older commits' batchers take no shuffle
        for _ in range(5):
            batchers = [ClientBatcher(parts, args.batch, seed=r % (args.seeds or runs), **kind) for r in range(runs)]
            if device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(20):
                if runs == 1:
                    draw_plan(train, batchers[0], clients, steps, cfg)
                elif joint is not None:
                    ctx = SimpleNamespace(client_ids=lambda: clients)
                    members = [SimpleNamespace(batcher=b, ctx=ctx, steps=steps, cfg=cfg) for b in batchers]
                    joint(members, train, steps * runs)
                else:
                    population_rows.joint_plan([draw_plan(train, b, clients, steps, cfg) for b in batchers])
            if device.type == "cuda":
                torch.cuda.synchronize()
            best = min(best, (time.perf_counter() - start) / 20 / runs)
        print(f"  shuffle {shuffle}, {runs:3d} run(s): {best * 1e6:7.0f} µs a run a round")


if __name__ == "__main__":
    main()
