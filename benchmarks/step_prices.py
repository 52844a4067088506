"""``--compile auto``'s prices of the batched step, measured as a run measures them, and what auto takes.

    python -m benchmarks.step_prices [--cases mlp-tiny,mlp] [--clients 10] [--device cpu|cuda] [--threads 1]
        [--steps 1000,10000,100000,1000000]

For each model case of benchmarks/workload.py (S clients, its batch), one process times the eager step, on CUDA
the graphed one (which auto prices once ``step_price.AUTO_GRAPHS`` is set), and the compiled one with
``fedbench.engine.step_price.measure``, as a ``--compile auto`` run does,
and prints each price and the step ``auto`` takes for runs of ``--steps`` local steps. The compilation is included:
inductor's cache starts empty (a new temporary folder), and later cases share it with the earlier ones."""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import torch

from benchmarks.workload import case_named, client_data, initial_model
from fedbench.data.base import ArraySplit
from fedbench.engine.batched import probe_inputs
from fedbench.engine.batched_layers import RowLayers
from fedbench.engine.step_price import measure, priced_choice
from fedbench.models.flat import FlatModel


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="mlp-tiny,mlp")
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", default="1000,10000,100000,1000000")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="fedbench-prices-")  # from an empty cache
    lengths = [int(s) for s in args.steps.split(",")]
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu, {args.threads} thread(s)"
    print(f"device: {name}; torch {torch.__version__}; S = {args.clients}")
    print("| case | mode | ms a step | set-up s | agrees | " + " | ".join(f"auto, {n:,} steps" for n in lengths) + " |")
    print("|---|---|---|---|---|" + "---|" * len(lengths))
    for case_name in args.cases.split(","):
        case = case_named(case_name)
        x, y = client_data(case, 0)
        train = ArraySplit(x.to(device), y.to(device))
        model = FlatModel(initial_model(case).to(device))
        inputs = probe_inputs(model, model.buffers(), train, case.batch, args.clients)
        prices = measure(RowLayers.of(model), inputs, 10**12, device, Path(tempfile.mkdtemp()), graphs=True)
        chosen = [priced_choice(prices, n)[0] for n in lengths]
        for mode, price in prices.items():
            cells = [f"{price.step_s * 1e3:.3f}", f"{price.setup_s:.2f}", "yes" if price.agrees else "no"]
            taken = ["**taken**" if c == mode else "" for c in chosen]
            print(f"| {case.label} | {mode} | " + " | ".join(cells + taken) + " |", flush=True)


if __name__ == "__main__":
    main()
