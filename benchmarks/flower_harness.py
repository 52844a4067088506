"""Flower's side of the benchmark: the same FedAvg round run by Flower's Simulation Engine.

Written against Flower's Message API (flwr >= 1.21: ``ClientApp`` with ``@app.train()``,
``ServerApp`` with ``@app.main()``, ``flwr.serverapp.strategy.FedAvg`` whose ``fraction_train``
is the old ``fraction_fit``) and ``flwr.simulation.run_simulation`` on its Ray backend. The
client is the usual Flower/PyTorch client — model ``load_state_dict`` from the received
``ArrayRecord``, a plain ``torch.optim.SGD`` loop, the model's ``state_dict`` sent back — with
its partition and model kept in the Ray worker between rounds (the fastest fair setting: no
data loading or model construction inside the timed rounds). The round's work is in
:mod:`benchmarks.workload`.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import torch
import torch.nn.functional as F
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from benchmarks.workload import LR, Case, case_named, client_data, initial_model
from fedbench.engine.precision import gpu_precision
from fedbench.seeding import torch_stream

_WORKER_CACHE: dict[tuple[Any, ...], Any] = {}  # per Ray worker process: models and partitions

client_app = ClientApp()


@client_app.train()
def train(msg: Message, context: Context) -> Message:
    """One client's local work: ``steps`` SGD steps over one permutation of its samples."""
    config = msg.content["config"]
    name, device = str(config["case"]), torch.device(str(config["device"]))
    case = case_named(name)
    torch.set_num_threads(int(config["threads"]))
    partition = int(context.node_config["partition-id"])
    key = (name, partition, str(device))
    if key not in _WORKER_CACHE:
        _WORKER_CACHE[key] = tuple(t.to(device) for t in client_data(case, partition))
    if (name, str(device)) not in _WORKER_CACHE:
        _WORKER_CACHE[(name, str(device))] = initial_model(case).to(device)
    x, y = _WORKER_CACHE[key]
    model = _WORKER_CACHE[(name, str(device))]
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=float(config["lr"]))
    epoch = int(config["server-round"]) - 1  # one local epoch per round, as in fedbench's batcher
    order = torch.randperm(case.samples_per_client, generator=torch_stream(0, "batches", partition, epoch)).to(device)
    with gpu_precision(bool(config["tf32"]), device):  # as fedbench's engine: TF32 on a GPU unless switched off
        for s in range(case.steps):
            idx = order[s * case.batch : (s + 1) * case.batch]
            optimizer.zero_grad()
            F.cross_entropy(model(x[idx]), y[idx]).backward()
            optimizer.step()
    metrics = {"num-examples": case.samples_per_client}
    if device.type == "cuda":
        metrics["peak-device-bytes"] = torch.cuda.max_memory_allocated(device)
    content = RecordDict({"arrays": ArrayRecord(model.state_dict()), "metrics": MetricRecord(metrics)})
    return Message(content=content, reply_to=msg)


def train_config(case_name: str, device: torch.device, threads: int, tf32: bool = True) -> ConfigRecord:
    """What the server sends each client with the global model."""
    return ConfigRecord({"case": case_name, "device": str(device), "threads": threads, "lr": LR, "tf32": tf32})


def _max_metrics(records: list[RecordDict], weighting_key: str) -> MetricRecord:
    """Round metrics: the largest value of each client metric (peak memory)."""
    out: dict[str, float] = {}
    for record in records:
        for metrics in record.metric_records.values():
            for k, v in metrics.items():
                out[k] = max(out.get(k, 0), v)
    return MetricRecord(out)


def fedavg_strategy(clients: int) -> FedAvg:
    """Flower's FedAvg with all ``clients`` nodes training every round and no client evaluation."""
    return FedAvg(
        fraction_train=1.0,
        fraction_evaluate=0.0,
        min_train_nodes=clients,
        min_available_nodes=clients,
        train_metrics_aggr_fn=_max_metrics,
    )


def server_app(
    case_name: str,
    clients: int,
    rounds: int,
    warmup: int,
    min_seconds: float,
    device: torch.device,
    threads: int,
    out: dict[str, Any],
    tf32: bool = True,
) -> ServerApp:
    """A ServerApp driving Flower's FedAvg round by round — ``configure_train`` →
    ``Grid.send_and_receive`` → ``aggregate_train``, what ``Strategy.start`` does per round less
    its logging and evaluation — for ``warmup`` rounds, then at least ``rounds`` more until
    ``min_seconds`` have passed. ``out`` receives the time stamp before round 1 and after every
    round, the final model and each round's (max-aggregated) client metrics."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        strategy = fedavg_strategy(clients)
        arrays = ArrayRecord(initial_model(case_named(case_name)).state_dict())
        stamps, metrics = [time.perf_counter()], {}
        server_round = 0
        while server_round < warmup + rounds or stamps[-1] - stamps[warmup] < min_seconds:
            server_round += 1
            messages = strategy.configure_train(
                server_round, arrays, train_config(case_name, device, threads, tf32), grid
            )
            replies = list(grid.send_and_receive(messages=messages, timeout=3600))
            new_arrays, metrics[server_round] = strategy.aggregate_train(server_round, replies)
            if new_arrays is None:
                errors = [r.error for r in replies if r.has_error()]
                raise RuntimeError(f"Flower round {server_round} produced no model; client errors: {errors[:3]}")
            arrays = new_arrays
            stamps.append(time.perf_counter())
        out.update(stamps=stamps, arrays=arrays, metrics=metrics)

    return app


def backend_config(cpus_per_client: float, gpus_per_client: float, total_cpus: int) -> dict[str, Any]:
    """Ray backend settings: ``total_cpus`` CPUs for the whole simulation, each ClientApp actor
    reserving ``cpus_per_client`` of them (and ``gpus_per_client`` GPUs), so
    ``total_cpus / cpus_per_client`` clients train concurrently."""
    return {
        "init_args": {"num_cpus": total_cpus, "logging_level": logging.ERROR, "log_to_driver": False},
        "client_resources": {"num_cpus": cpus_per_client, "num_gpus": gpus_per_client},
    }


def time_flower(
    case: Case,
    case_name: str,
    clients: int,
    rounds: int,
    warmup: int,
    min_seconds: float,
    device: torch.device,
    cpus_per_client: float,
    gpus_per_client: float,
    total_cpus: int,
    tf32: bool = True,
) -> tuple[int, float, dict[str, Any]]:
    """``(timed rounds, seconds, outputs of server_app)`` for Flower's simulation (Ray
    start-up and the first round's model building and data generation fall in the warm-up)."""
    from flwr.simulation import run_simulation

    out: dict[str, Any] = {}
    run_simulation(
        server_app=server_app(
            case_name, clients, rounds, warmup, min_seconds, device, max(1, int(cpus_per_client)), out, tf32
        ),
        client_app=client_app,
        num_supernodes=clients,
        backend_config=backend_config(cpus_per_client, gpus_per_client, total_cpus),
    )
    if "stamps" not in out:
        raise RuntimeError(f"Flower's simulation of {case.label} with S = {clients} ended without finishing its rounds")
    stamps = out["stamps"]
    return len(stamps) - 1 - warmup, stamps[-1] - stamps[warmup], out
