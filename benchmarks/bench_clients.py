"""fedbench sequential vs batched (eager, compiled, graphed) vs Flower's simulation engine: one FedAvg workload.

    python -m benchmarks.bench_clients [--device cpu|cuda] [--cases mlp,cnn,resnet18gn]
        [--clients 10,50] [--rounds 3] [--min-seconds 5] [--warmup 1] [--threads N]
        [--chunk N] [--tf32 on|off] [--precision fp32|bf16] [--max-round-tflop X] [--out table.md]

For every model case and every S, runs the same FedAvg rounds (benchmarks/workload.py) with
fedbench's sequential executor, its batched executor with an eager, a compiled step
(``torch.compile``, as ``fedbench run --compile on``) and a graphed one (CUDA graphs, ``--compile graphs``;
only with ``--device cuda``) and Flower's Simulation Engine (needs
``pip install -e .[bench]``; left out with a note when flwr is missing or ``--no-flower``), each
in a fresh subprocess so that peak memory is per configuration: ``--warmup`` untimed rounds, then
at least ``--rounds`` timed rounds and at least ``--min-seconds``. Prints a Markdown table:
the warm-up (set-up and first round: model building, compilation, Ray's start), rounds/s, client-samples/s (S × steps × batch per round), the speed-up over fedbench sequential
and the ratio to Flower, achieved FLOP/s (FlopCounterMode's forward+backward FLOPs per sample ×
samples/s) against the measured float32 matmul peak, and peak host memory (resident set of the
process tree, Flower's Ray processes included) and device memory. fedbench uses ``--threads``
intra-op threads; Flower gets ``--threads`` CPUs for Ray, ``--flower-cpus-per-client`` per
ClientApp actor (so threads / that many clients train at once, each with that many torch
threads) and ``--flower-gpus-per-client`` GPUs each on CUDA. On CUDA every harness and the matmul
peak run with TF32 on (``--tf32 off``: IEEE float32), as fedbench's engine does by default
(``local.tf32``); fedbench's batched executor trains ``--chunk`` clients at a time (default: the
engine's memory-probed choice on CUDA, the whole round on a CPU). ``--precision bf16`` trains fedbench's executors
with bfloat16 forward passes (``local.precision: bf16``; Flower is left out) and measures the peak as bfloat16
matmuls.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import importlib.util
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
if __package__ in (None, ""):  # run as a script: python benchmarks/bench_clients.py
    sys.path.insert(0, str(ROOT))

from benchmarks.workload import CASES, DEFAULT_CASES, case_named, flops_per_sample, matmul_peak  # noqa: E402  (after sys.path)
from fedbench.engine.precision import gpu_precision  # noqa: E402

EXECUTORS = ("sequential", "batched", "compiled", "graphed", "flower")


def run_one(spec: dict[str, Any]) -> dict[str, Any]:
    """One configuration, in this (fresh) process: timed rounds per second and peak memory."""
    from benchmarks.workload import HostMemory

    torch.set_num_threads(spec["threads"])
    device = torch.device(spec["device"])
    case = case_named(spec["case"])
    extra: dict[str, Any] = {}
    with HostMemory() as host, gpu_precision(spec["tf32"], device):
        if spec["executor"] == "flower":
            import logging

            from benchmarks.flower_harness import time_flower

            logging.getLogger("flwr").setLevel(logging.WARNING)
            start = time.perf_counter()
            rounds, seconds, out = time_flower(
                case,
                spec["case"],
                spec["clients"],
                spec["rounds"],
                spec["warmup"],
                spec["min_seconds"],
                device,
                spec["cpus_per_client"],
                spec["gpus_per_client"],
                spec["threads"],
                spec["tf32"],
            )
            extra["device_peak"] = max((m.get("peak-device-bytes", 0) for m in out["metrics"].values()), default=0)
            extra["warmup_s"] = time.perf_counter() - start - seconds  # all but the timed rounds
        else:
            from benchmarks.fedbench_harness import time_fedbench

            rounds, seconds, extra["warmup_s"] = time_fedbench(
                case,
                spec["clients"],
                spec["rounds"],
                spec["warmup"],
                spec["min_seconds"],
                device,
                spec["executor"],
                spec["chunk"],
                spec.get("precision", "fp32"),
            )
            extra["device_peak"] = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else 0
    return {"rounds": rounds / seconds, "timed_rounds": rounds, "seconds": seconds, "host_peak": host.peak, **extra}


def spawn(spec: dict[str, Any], timeout: float) -> dict[str, Any] | str:
    """Run one configuration in a subprocess; its result, or why there is none."""
    env = dict(os.environ, FLWR_TELEMETRY_ENABLED="0", RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO="0")
    cmd = [sys.executable, "-m", "benchmarks.bench_clients", "--one", json.dumps(spec)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return f"timed out after {timeout:.0f} s"
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    return f"failed (exit {proc.returncode}): " + (proc.stderr.strip().splitlines() or ["no output"])[-1]


def device_name(device: torch.device, threads: int) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores), {threads} threads"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--cases", default=",".join(DEFAULT_CASES), help=f"comma-separated, from {', '.join(CASES)}")
    parser.add_argument("--clients", default="10,50", help="comma-separated values of S")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds, at least")
    parser.add_argument("--min-seconds", type=float, default=5.0, help="timed rounds continue until this long")
    parser.add_argument("--warmup", type=int, default=1, help="untimed rounds before them (at least 1)")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)), help="CPU threads / Ray CPUs")
    parser.add_argument("--executors", default=",".join(EXECUTORS))
    parser.add_argument("--no-flower", action="store_true", help="skip Flower")
    parser.add_argument("--flower-cpus-per-client", type=float, default=None, help="default 1 (CPU), threads/4 (CUDA)")
    parser.add_argument("--flower-gpus-per-client", type=float, default=None, help="default 0.25 on CUDA")
    parser.add_argument(
        "--chunk",
        type=int,
        default=None,
        help="fedbench batched: clients per chunk (default: the engine's choice on CUDA, the whole round on a CPU)",
    )
    parser.add_argument(
        "--tf32", choices=("on", "off"), default="on", help="CUDA: TF32 matmuls/convolutions (as local.tf32)"
    )
    parser.add_argument(
        "--precision", choices=("fp32", "bf16"), default="fp32", help="fedbench: bf16 autocast (local.precision)"
    )
    parser.add_argument("--max-round-tflop", type=float, default=None, help="skip (model, S) whose round needs more")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per configuration")
    parser.add_argument("--out", help="also write the Markdown table here")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: run one configuration (JSON spec)
    args = parser.parse_args()
    if args.one:
        print("RESULT " + json.dumps(run_one(json.loads(args.one))), flush=True)
        return
    if args.warmup < 1:
        parser.error(
            "--warmup must be at least 1: the first round builds models and caches (and, for Flower, starts Ray)"
        )
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    cases = [(name, case_named(name)) for name in args.cases.split(",")]
    executors = [
        e for e in args.executors.split(",") if not (e == "flower" and (args.no_flower or args.precision != "fp32"))
    ]
    if unknown := sorted(set(executors) - set(EXECUTORS)):
        parser.error(f"unknown executor(s) {', '.join(unknown)} in --executors; allowed: {', '.join(EXECUTORS)}")
    if "graphed" in executors and not cuda:
        executors.remove("graphed")
        print("graphed: CUDA graphs need --device cuda; left out", file=sys.stderr)
    if "flower" in executors and importlib.util.find_spec("flwr") is None:
        executors.remove("flower")
        print("flwr is not installed (pip install -e .[bench]): Flower left out", file=sys.stderr)
    cpus_per_client = args.flower_cpus_per_client or (max(1, args.threads // 4) if cuda else 1)
    gpus_per_client = (
        args.flower_gpus_per_client if args.flower_gpus_per_client is not None else (0.25 if cuda else 0.0)
    )

    torch.set_num_threads(args.threads)
    tf32 = args.tf32 == "on"
    dtype = torch.bfloat16 if args.precision == "bf16" else torch.float32
    with gpu_precision(tf32, device):
        peak = matmul_peak(device, repeats=10, dtype=dtype)
    load_before = os.getloadavg()
    lines = [
        f"device: {device_name(device, args.threads)}",
        f"date: {datetime.date.today()}; torch {torch.__version__}"
        + (f"; flwr {importlib.metadata.version('flwr')}" if "flower" in executors else ""),
        "command: python -m benchmarks.bench_clients " + " ".join(sys.argv[1:]),
        f"Flower: Ray with {args.threads} CPUs, {cpus_per_client:g} CPU(s) and {gpus_per_client:g} GPU(s) per ClientApp",
        *([f"TF32 {args.tf32}; fedbench batched chunk: {args.chunk or 'engine default'}"] if cuda else []),
        f"precision {args.precision} (the peak: {dtype} matmuls)",
        "",
        "| model | S | executor | warm-up s | rounds/s | client-samples/s | vs sequential | fedbench / Flower | "
        "GFLOP/s (% of peak) | peak host MiB | peak device MiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    for name, case in cases:
        flops = flops_per_sample(case)
        for clients in (int(c) for c in args.clients.split(",")):
            tflop = flops * clients * case.samples_per_client / 1e12
            if args.max_round_tflop is not None and tflop > args.max_round_tflop:
                row = f"| {case.label} | {clients} | all | skipped: {tflop:.1f} TFLOP a round > --max-round-tflop | | | | | | | |"
                lines.append(row)
                print(row, flush=True)
                continue
            results: dict[str, dict[str, Any] | str] = {}
            for executor in executors:
                spec = {
                    "case": name,
                    "clients": clients,
                    "rounds": args.rounds,
                    "warmup": args.warmup,
                    "min_seconds": args.min_seconds,
                    "device": str(device),
                    "executor": executor,
                    "threads": args.threads,
                    "cpus_per_client": cpus_per_client,
                    "gpus_per_client": gpus_per_client,
                    "chunk": args.chunk,
                    "tf32": tf32,
                    "precision": args.precision,
                }
                results[executor] = spawn(spec, args.timeout)
            rows = _rows(case.label, clients, case.samples_per_client, flops, peak, results, cuda)
            lines += rows
            print("\n".join(rows), flush=True)
    load_after = os.getloadavg()
    footer = (
        f"\n{dtype} matmul peak {peak / 1e9:,.1f} GFLOP/s (measured before the runs; "
        f"{_peak(device, tf32, dtype) / 1e9:,.1f} after); load average (1 min) {load_before[0]:.2f} before, "
        f"{load_after[0]:.2f} after"
    )
    lines.append(footer)
    print(footer)
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")


def _peak(device: torch.device, tf32: bool, dtype: torch.dtype = torch.float32) -> float:
    with gpu_precision(tf32, device):
        return matmul_peak(device, repeats=10, dtype=dtype)


def _rows(
    label: str,
    clients: int,
    per_client: int,
    flops: float,
    peak: float,
    results: dict[str, dict[str, Any] | str],
    cuda: bool,
) -> list[str]:
    """Table rows of one (model, S): one per executor."""
    rate = {e: r["rounds"] for e, r in results.items() if isinstance(r, dict) and "rounds" in r}
    rows = []
    for executor, r in results.items():
        if isinstance(r, str):
            rows.append(f"| {label} | {clients} | {executor} | {r} | | | | | | | |")
            continue
        rounds_s = r["rounds"]
        samples_s = rounds_s * clients * per_client
        vs_seq = f"{rounds_s / rate['sequential']:.2f}×" if "sequential" in rate else ""
        vs_flower = f"{rounds_s / rate['flower']:.2f}×" if "flower" in rate and executor != "flower" else ""
        achieved = flops * samples_s
        dev = f"{r['device_peak'] / 2**20:,.0f}" if cuda else "–"
        rows.append(
            f"| {label} | {clients} | {executor} | {r['warmup_s']:.1f} | {rounds_s:.3g} | {samples_s:,.0f} | {vs_seq} | {vs_flower} | "
            f"{achieved / 1e9:,.1f} ({100 * achieved / peak:.0f}%) | {r['host_peak'] / 2**20:,.0f} | {dev} |"
        )
    return rows


if __name__ == "__main__":
    main()
