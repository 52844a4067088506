"""Build everything a run needs from its resolved spec and seed: data, partition, model, algorithm
(and, for a continual run, the task stream with one partition per task)."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from fedbench.algorithms import ALGORITHMS, Algorithm, AlgorithmContext
from fedbench.compress import build_compressor
from fedbench.continual.tasks import TaskStream, split_tasks
from fedbench.data import DatasetSplits, load_dataset
from fedbench.data.holdout import split_clients
from fedbench.data.partition import make_partition
from fedbench.data.partition_stats import label_histogram, partition_summary
from fedbench.data.stand_in import stand_in
from fedbench.engine.batches import ClientBatcher
from fedbench.engine.federation import Federation
from fedbench.engine.precision import default_dtype, train_dtype
from fedbench.models import build_model
from fedbench.models.flat import Buffers, FlatModel
from fedbench.optim.client import build_local_optimizer
from fedbench.optim.server import ServerOptimizer
from fedbench.options import DEVICE_PATTERN
from fedbench.scenario import RunSpec
from fedbench.seeding import numpy_stream, torch_seed


def resolve_device(name: str = "auto") -> torch.device:
    """``auto`` picks CUDA when present, else the CPU; ``cuda`` without a GPU, ``cuda:N`` beyond the
    GPUs torch sees and ``mps`` without Apple's MPS backend are errors."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"--device {name} was asked for, but torch sees no CUDA device; use --device cpu")
    device = torch.device(name)
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise RuntimeError(
            f"--device {name} was asked for, but torch sees {torch.cuda.device_count()} CUDA "
            f"device(s) (cuda:0 to cuda:{torch.cuda.device_count() - 1})"
        )
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise RuntimeError("--device mps was asked for, but torch sees no MPS device (Apple silicon); use --device cpu")
    return device


def check_device(device: str) -> None:
    """``--device``: auto, cpu, cuda, cuda:N or mps, and only a device torch sees (ValueError of one line)."""
    if not re.fullmatch(DEVICE_PATTERN, device):
        raise ValueError(f"--device {device}: expected auto, cpu, cuda, cuda:N or mps")
    try:
        resolve_device(device)
    except RuntimeError as exc:
        line = str(exc).splitlines()[0]
        raise ValueError(line if line.startswith("--device") else f"--device {device}: {line}") from None


class DataCache:
    """Datasets loaded once per process and kept on the training device; those named in ``stand_ins`` are
    generated of their real shape and size instead (:mod:`fedbench.data.stand_in`: the estimate's probe only)."""

    def __init__(self, data_dir: Path, download: bool, device: torch.device):
        self.data_dir, self.download, self.device = data_dir, download, device
        self._loaded: dict[str, DatasetSplits] = {}
        self.stand_ins: set[str] = set()

    def get(self, spec: RunSpec) -> DatasetSplits:
        """The run's dataset, inputs in its training dtype (the resolved ``dataset`` block and the
        dtype are the cache key)."""
        dtype = train_dtype(spec.local.precision)
        key = json.dumps([spec.dataset, str(dtype)], sort_keys=True)
        if key not in self._loaded:
            if spec.dataset["name"] in self.stand_ins:
                data = stand_in(spec.dataset)
            else:
                data = load_dataset(spec.dataset["name"], spec.components.dataset, self.data_dir, self.download)
            self._loaded[key] = data.to(self.device, dtype)
        return self._loaded[key]


@dataclass
class TaskSetup:
    """A continual run's task stream and, per task, the clients' index tensors and partition summary."""

    stream: TaskStream
    parts: list[list[torch.Tensor]]
    info: list[dict[str, float | int]]


@dataclass
class RunSetup:
    """The pieces of one run, ready for the round loop: its first :class:`Federation` (a continual
    run's task 0) and, for a continual run, every task's partition (``tasks``)."""

    data: DatasetSplits
    federation: Federation
    model: FlatModel
    x0: torch.Tensor
    buffers0: Buffers
    algorithm: Algorithm
    tasks: TaskSetup | None = None
    validation: list[torch.Tensor] | None = None  # each client's held-out samples (spec.validation)


def partition_clients(
    spec: RunSpec, data: DatasetSplits, seed: int, task: int | None = None, indices: np.ndarray | None = None
) -> list[torch.Tensor]:
    """Client index tensors on the data's device, from the ``("partition",)`` stream; in a continual
    run the training indices ``indices`` of task ``task`` are split, from the ``("partition", task)`` stream."""
    labels, ids, keys = data.train.y.cpu().numpy(), data.client_ids, () if task is None else (task,)
    if indices is not None:
        labels, ids = labels[indices], None if ids is None else ids[indices]
    parts = make_partition(
        spec.partition["kind"],
        labels,
        spec.clients.num,
        numpy_stream(seed, "partition", *keys),
        spec.components.partition,
        ids,
    )
    if indices is not None:
        parts = [np.asarray(indices)[p] for p in parts]
    if spec.local.data_fraction < 1:
        parts = [
            subsample(p, spec.local.data_fraction, numpy_stream(seed, "subset", i, *keys)) for i, p in enumerate(parts)
        ]
    empty = [i for i, p in enumerate(parts) if len(p) == 0]
    if empty:
        where = "" if task is None else f" of continual task {task}"
        raise ValueError(
            f"partition {spec.partition} left {len(empty)} of {spec.clients.num} clients without data{where} "
            f"(e.g. client {empty[0]}); use fewer clients or a partition with min_samples"
        )
    return [torch.as_tensor(p, dtype=torch.int64, device=data.train.y.device) for p in parts]


def partition_info(data: DatasetSplits, parts: list[torch.Tensor]) -> dict[str, float | int]:
    """Sizes and label skew of a partition (logged with the first round it is used in)."""
    hist = label_histogram(data.train.y.cpu().numpy(), [p.cpu().numpy() for p in parts], data.num_classes)
    return partition_summary(hist)


def task_setup(spec: RunSpec, data: DatasetSplits, seed: int) -> TaskSetup:
    """The task stream of ``spec.continual`` and the scenario's partition applied to each task."""
    c = spec.continual
    assert c is not None
    stream = split_tasks(
        data.train.y.cpu().numpy(),
        data.test.y.cpu().numpy(),
        data.num_classes,
        c.tasks,
        c.classes_per_task,
        c.class_order,
        c.mode,
        seed,
    )
    parts = [partition_clients(spec, data, seed, j, stream.train[j]) for j in range(stream.num_tasks)]
    return TaskSetup(stream, parts, [partition_info(data, p) for p in parts])


def subsample(indices: np.ndarray, fraction: float, rng: np.random.Generator) -> np.ndarray:
    """A random ⌈fraction·n⌉ of a client's indices (sorted), e.g. a paper code's 80% local subset."""
    keep = rng.permutation(len(indices))[: math.ceil(fraction * len(indices))]
    return np.sort(np.asarray(indices)[keep])


def build_run(spec: RunSpec, seed: int, cache: DataCache, host_client_state: bool = False) -> RunSetup:
    """Load data, split it (holding out each client's validation samples when the spec asks), initialise the
    model from the ``("init",)`` stream in the run's dtype, build the algorithm."""
    device = cache.device
    data = cache.get(spec)
    tasks = None if spec.continual is None else task_setup(spec, data, seed)
    parts = partition_clients(spec, data, seed) if tasks is None else tasks.parts[0]
    validation = None
    if spec.validation is not None:  # resolution refuses it with a task stream
        parts, validation = split_clients(parts, data.train.y, spec.validation.fraction, seed)
    dtype = train_dtype(spec.local.precision)
    with torch.random.fork_rng(devices=[]), default_dtype(dtype):  # float64: drawn in float64 (see engine/precision.py)
        torch.manual_seed(torch_seed(seed, "init"))
        module = build_model(spec.model["name"], spec.components.model, data.input_shape, data.num_classes)
    model = FlatModel(module.to(device))
    model.autocast = torch.bfloat16 if spec.local.precision == "bf16" else None
    sizes = torch.tensor([len(p) for p in parts], dtype=dtype, device=device)
    entry = ALGORITHMS.get(spec.algorithm["name"])
    compressor = build_compressor(spec.compression["kind"], spec.components.compression, tuple(model.numels))
    local = spec.local
    optimizer = build_local_optimizer(local.optimizer, local.betas, local.eps)
    ctx = AlgorithmContext(
        spec.clients.num,
        model.dim,
        device,
        seed,
        compressor,
        tuple(model.numels),
        optimizer,
        local.batch_size,
        host_client_state,
        0 if spec.continual is None else spec.continual.tasks,
    )
    algorithm = entry.obj(spec.components.algorithm, ServerOptimizer(spec.server), ctx)
    task0 = None if tasks is None else 0
    batcher = ClientBatcher(parts, local.batch_size, seed, local.drop_singleton_batch, task0, local.shuffle)
    info = partition_info(data, parts) if tasks is None else tasks.info[0]
    federation = Federation(tuple(parts), sizes, batcher, info)
    return RunSetup(data, federation, model, model.flatten(), model.buffers(), algorithm, tasks, validation)
