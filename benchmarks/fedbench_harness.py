"""fedbench's side of the benchmark: FedAvg rounds through the engine's two client executors.

``compiled`` is the batched executor with its step through ``torch.compile`` (``--compile on``), ``graphed`` with
its eager step replayed from CUDA graphs (``--compile graphs``, CUDA only).
The batched executor trains ``chunk`` clients at a time: by default the engine's own choice on
CUDA (a one-client memory probe, :mod:`fedbench.engine.executor`) and the whole round on a CPU (as
the CPU tables in benchmarks/README.md were measured). BatchNorm buffers are averaged as the
engine averages them."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from benchmarks.workload import LR, Case, client_data, initial_model
from fedbench.algorithms import ALGORITHMS, AlgorithmContext
from fedbench.algorithms.base import RoundContext
from fedbench.compress import Compressor
from fedbench.data.base import ArraySplit
from fedbench.engine.batched import probe_client_bytes, run_clients_batched
from fedbench.engine.batches import ClientBatcher
from fedbench.engine.executor import choose_executor
from fedbench.engine.local import LocalConfig, run_clients_sequential
from fedbench.engine.uploads import decoded
from fedbench.models.flat import FlatModel, average_buffers
from fedbench.optim.server import ServerOptimizer
from fedbench.registry import NoParams
from fedbench.scenario import AugmentSpec, ServerSpec

EXECUTORS = ("sequential", "batched", "compiled", "graphed")
STEP_MODES = {"compiled": "compiled", "graphed": "graphed"}  # the batched step of each executor (default eager)


def batched_chunk(model: FlatModel, data: ArraySplit, case: Case, device: torch.device, cfg: LocalConfig) -> int | None:
    """Clients per batched chunk by default: the engine's choice on CUDA, the whole round on a CPU."""
    if device.type != "cuda":
        return None
    return choose_executor(
        "batched", device, probe=lambda: probe_client_bytes(model, model.buffers(), data, case.batch, cfg)
    ).chunk


def fedavg_rounds(
    case: Case, clients: int, device: torch.device, executor: str, chunk: int | None = None, precision: str = "fp32"
) -> tuple[Callable[[int], None], Callable[[], torch.Tensor]]:
    """``(one_round(t), params())``: round t of FedAvg over all ``clients`` clients run by
    ``executor`` (batched: ``chunk`` clients at a time, default :func:`batched_chunk`), and the
    current global model as a flat vector ``[P]``; ``precision`` bf16: forward passes under bfloat16 autocast,
    as ``local.precision: bf16``."""
    if executor not in EXECUTORS:
        raise ValueError(f"unknown executor {executor!r}; allowed: {', '.join(EXECUTORS)}")
    parts = [client_data(case, i) for i in range(clients)]
    data = ArraySplit(torch.cat([p[0] for p in parts]).to(device), torch.cat([p[1] for p in parts]).to(device))
    n = case.samples_per_client
    index = [torch.arange(i * n, (i + 1) * n, device=device) for i in range(clients)]
    model = FlatModel(initial_model(case).to(device))
    model.autocast = torch.bfloat16 if precision == "bf16" else None
    ctx = AlgorithmContext(clients, model.dim, device, 0, Compressor(NoParams(), ()))
    algo = ALGORITHMS.get("fedavg").obj(NoParams(), ServerOptimizer(ServerSpec()), ctx)
    state = [algo.init_state(model.flatten())]  # the server state after the last round (hooks return it new)
    batcher = ClientBatcher(index, case.batch, 0)
    cfg = LocalConfig(0.0, None, AugmentSpec(), 0)
    chosen = torch.arange(clients, device=device)
    steps = torch.full((clients,), float(case.steps), device=device)
    weights = torch.full((clients,), 1 / clients, device=device)
    buffers = [model.buffers()]
    batched, mode = executor != "sequential", STEP_MODES.get(executor, "eager")
    if batched and chunk is None:
        chunk = batched_chunk(model, data, case, device, cfg)

    def one_round(t: int) -> None:
        rc = RoundContext(chosen, LR, steps, algo.broadcast(state[0], chosen), None, t)
        if batched:
            res = run_clients_batched(
                algo, rc, [case.steps] * clients, model, buffers[0], data, batcher, cfg, chunk, mode
            )
        else:
            res = run_clients_sequential(algo, rc, [case.steps] * clients, model, buffers[0], data, batcher, cfg)
        state[0], _ = algo.server_update(state[0], rc, decoded(res.uploads), weights)
        buffers[0] = average_buffers(res.buffers, weights)

    return one_round, lambda: state[0].x


def time_fedbench(
    case: Case,
    clients: int,
    rounds: int,
    warmup: int,
    min_seconds: float,
    device: torch.device,
    executor: str,
    chunk: int | None = None,
    precision: str = "fp32",
) -> tuple[int, float, float]:
    """``(timed rounds, seconds, warm-up seconds)``: after ``warmup`` untimed FedAvg rounds (the
    compiled step compiles in the first), at least ``rounds`` more, continuing until ``min_seconds``
    have passed."""
    sync = torch.cuda.synchronize if device.type == "cuda" else lambda: None
    begin = time.perf_counter()
    one_round, _ = fedavg_rounds(case, clients, device, executor, chunk, precision)
    for t in range(warmup):
        one_round(t)
    sync()
    start, t = time.perf_counter(), warmup
    while t < warmup + rounds or time.perf_counter() - start < min_seconds:
        one_round(t)
        t += 1
        sync()
    return t - warmup, time.perf_counter() - start, start - begin
