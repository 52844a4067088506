"""The arithmetic floor of a scenario's runs on this CPU: how fast the issue's CPU targets could be at best.

    python -m benchmarks.cpu_floor [--config configs/gradma/mnist_s10_w0.01.yaml] [--scale tiny] [--seed 0]
        [--algorithms fedavg,gradma] [--jobs 2]

For each entry of the scenario (its untuned setting, seed ``--seed``), trains the run twice from an empty store on
the CPU's default path (``execute_run``, ``auto``: the sequential executor, one torch thread, the scale's precision):
once timed, once under ``torch.utils.flop_counter.FlopCounterMode``, which counts the floating-point operations of
its matrix products (``mm``, ``addmm``, ``bmm``, ``baddbmm``, convolutions: the work no executor can skip; the
elementwise work is left out, so the floor is a lower bound). The floor of a run is its count divided by the rate
of this CPU's fastest product at the model's first layer (one thread, the run's dtype; measured here, ``mm`` and
``bmm`` of 16 and 80 rows, the best taken: no executor's products run faster). Prints per entry the seconds,
the count, the floor and their ratio, then the column's totals: the most any executor can gain over today's
sequential path is the measured time over the floor, on ``--jobs`` cores both ways (``fedbench reproduce``
already trains one run per core at tiny). Not a timed test.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

from fedbench.engine.precision import train_dtype
from fedbench.engine.runner import execute_run
from fedbench.engine.setup import DataCache, build_run
from fedbench.options import RunOptions
from fedbench.scenario import load_scenario, resolve_runs
from fedbench.scenario.runspec import RunSpec
from fedbench.store import ResultsStore


def product_rate(rows: int, width: int, out: int, dtype: torch.dtype) -> tuple[float, str]:
    """The best FLOP/s of one thread's ``mm`` and ``bmm`` (16 and 80 matrices) of [rows, width] @ [width, out]
    in ``dtype``, and which it was."""
    torch.manual_seed(0)
    best = (0.0, "")
    for batch in (0, 16, 80):
        a = torch.randn(*((batch,) if batch else ()), rows, width, dtype=dtype)
        b = torch.randn(*((batch,) if batch else ()), width, out, dtype=dtype)
        product = torch.bmm if batch else torch.mm
        for _ in range(3):
            product(a, b)
        calls = max(3, 2000 // max(batch, 1))
        start = time.perf_counter()
        for _ in range(calls):
            product(a, b)
        rate = 2 * rows * width * out * max(batch, 1) * calls / (time.perf_counter() - start)
        if rate > best[0]:
            best = (rate, f"{'bmm ×' + str(batch) if batch else 'mm'} [{rows}, {width}] @ [{width}, {out}]")
    return best


def train(spec: RunSpec, seed: int, count: bool, cache: DataCache) -> tuple[float, int]:
    """Seconds and matrix-product FLOPs (0 unless ``count``) of one run from an empty store (its data already
    loaded in ``cache``, as in one ``fedbench run`` of the scenario)."""
    store = ResultsStore(Path(tempfile.mkdtemp(prefix="fedbench-floor-")))
    counter = FlopCounterMode(display=False) if count else None
    start = time.perf_counter()
    if counter is not None:
        with counter:
            outcome = execute_run(spec, seed, store, cache, "floor", options=RunOptions(threads=1))
    else:
        outcome = execute_run(spec, seed, store, cache, "floor", options=RunOptions(threads=1))
    seconds = time.perf_counter() - start
    if outcome.status != "finished":
        raise SystemExit(f"{spec.label} seed {seed}: {outcome}")
    return seconds, counter.get_total_flops() if counter is not None else 0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="configs/gradma/mnist_s10_w0.01.yaml")
    ap.add_argument("--scale", default="tiny")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--algorithms", default="", help="comma-separated entry names (default: every entry)")
    ap.add_argument("--jobs", type=int, default=2, help="cores trained on, one run each (both ways)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    specs = resolve_runs(load_scenario(Path(args.config), ["tune=false"], scale=args.scale), args.scale)
    if args.algorithms:
        wanted = args.algorithms.split(",")
        specs = [s for s in specs if s.algorithm["name"] in wanted]
    cache = DataCache(Path("data"), False, torch.device("cpu"))  # the data, loaded once for every run
    train(specs[0], args.seed, False, cache)  # warm-up: imports, the data's first load, lazy initialisation
    dtype = train_dtype(specs[0].local.precision)
    print(f"{args.config} at {args.scale}, seed {args.seed}, one thread, {dtype}; torch {torch.__version__}")
    print(f"{'entry':<10} {'seconds':>8} {'GFLOP':>8} {'floor s':>8} {'ratio':>6}")
    total_s = total_flops = 0.0
    rate = 0.0
    for spec in specs:
        seconds, _ = train(spec, args.seed, False, cache)
        _, flops = train(spec, args.seed, True, cache)
        if not rate:
            rate, how = product_rate(spec.local.batch_size, *_first_layer(spec, args.seed, cache), dtype)
            print(f"(this CPU's best product at the first layer: {how}, {rate / 1e9:.1f} GFLOP/s)")
        total_s, total_flops = total_s + seconds, total_flops + flops
        print(f"{spec.label:<10} {seconds:8.2f} {flops / 1e9:8.1f} {flops / rate:8.2f} {seconds / (flops / rate):6.1f}")
    floor = total_flops / rate
    print(f"{'total':<10} {total_s:8.2f} {total_flops / 1e9:8.1f} {floor:8.2f} {total_s / floor:6.1f}")
    print(
        f"on {args.jobs} cores, one run each: today's path ≥ {total_s / args.jobs:.1f} s, the floor {floor / args.jobs:.1f} s;"
        f" no executor can be more than {total_s / floor:.1f}× faster than today's on this CPU"
    )


def _first_layer(spec: RunSpec, seed: int, cache: DataCache) -> tuple[int, int]:
    """(in, out) of the model's first weight matrix."""
    run = build_run(spec, seed, cache)
    weight = next(p for p in run.model.module.parameters() if p.dim() == 2)
    return weight.shape[1], weight.shape[0]


if __name__ == "__main__":
    main()
