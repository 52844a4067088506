"""GradMA's worker QP_l (C = 3 constraints, per parameter tensor) on its two paths (issue 26, item 3).

    python -m benchmarks.qp_paths [--rows 10,100,1000] [--device cpu|cuda] [--repeat 5]

Projects ``rows`` rows (clients, or a population's runs × clients) of the tiny GradMA MNIST model's shape (tinynn
784-50-25-10 with BatchNorm: 40,935 parameters in 10 tensors) against 3 random constraints, as GradMA-W's local
step does, on the host path (the reduced factors read to the host and solved there: the CPU's default) and on the
device path (``fedbench.algorithms.projection.HERE``: solved where p is, without a host read: a GPU's default).
Prints, per path: the median seconds of the whole projection and of its dual (the reduced problems) alone, the
reads to the host (:class:`~fedbench.engine.pending.HostReads`: each makes a GPU wait) and the ATen operators
the dual dispatches (non-view; on the device path each is a kernel launch on a GPU, on the host path they run on
the host after the read), and the largest difference between the two paths' projections. On a CPU nothing waits
for a read, so the times say what the arithmetic costs, not what a GPU saves. Not a timed test.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import torch

from benchmarks.step_launches import Operators
from fedbench.algorithms import projection
from fedbench.engine.pending import HostReads

BLOCKS = (39200, 50, 50, 50, 1250, 25, 25, 25, 250, 10)  # tinynn 784-50-25-10 with BatchNorm, per tensor
C = 3  # GradMA's worker constraints: ∇f(x_{τ−1}), ∇f(x_t), x_τ − x_t


def median_seconds(f: Callable[[], Any], repeat: int, device: torch.device) -> float:
    """The median wall time of ``f`` over ``repeat`` calls after one warm-up call."""
    f()
    times = []
    for _ in range(repeat):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        f()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def dual_of(R: torch.Tensor, dtype: torch.dtype, here: bool) -> projection.Dual:
    """The dual of the factors R on the device path, or read to the host and solved there."""
    if here:
        return projection._dual_here(R, C, projection.KKT_TOL, dtype)
    return projection._dual(R.cpu(), C, projection.KKT_TOL, dtype)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", default="10,100,1000")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    device = torch.device(args.device)
    print(f"GradMA QP_l, C = {C}, {len(BLOCKS)} blocks of {sum(BLOCKS):,} parameters, float32, on {device}, ", end="")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print("| rows | path | projection ms | dual ms | reads to the host | dual operators | largest difference |")
    print("|---|---|---|---|---|---|---|")
    generator = torch.Generator(device).manual_seed(0)
    for rows in [int(r) for r in args.rows.split(",")]:
        p = torch.randn(rows, sum(BLOCKS), generator=generator, device=device)
        M = torch.randn(rows, C, sum(BLOCKS), generator=generator, device=device)
        R = projection._factor(p, M, BLOCKS)
        outs = {}
        for here in (False, True):
            projection.HERE = here
            project = partial(projection.project, p, M, BLOCKS)
            dual = partial(dual_of, R, p.dtype, here)
            outs[here] = project()[0]
            project_s, dual_s = (median_seconds(f, args.repeat, device) for f in (project, dual))
            with HostReads() as reads:
                project()
            with Operators() as ops:
                dual()
            differs = f"{(outs[True] - outs[False]).abs().max().item():.2g}" if here else ""
            name = "device (HERE)" if here else "host"
            print(
                f"| {rows} | {name} | {project_s * 1e3:.1f} | {dual_s * 1e3:.1f} | {reads.count} | {ops.count} | {differs} |"
            )
    assert projection.fallback_total() == 0


if __name__ == "__main__":
    main()
