"""The benchmark's workload and meters: model cases, per-client synthetic data, FLOPs, peaks.

Every harness (fedbench sequential, fedbench batched, Flower) trains the same FedAvg round: S
clients, each doing ``steps`` SGD steps (lr 0.01, no momentum or weight decay) on minibatches of
``batch`` drawn without replacement from its own ``steps * batch`` synthetic samples — one local
epoch per round, the permutation for (client i, round t) being fedbench's ``("batches", i, t)``
stream — then the server averages the client models (equal sample counts, so equal weights).
"""

from __future__ import annotations

import os
import resource
import threading
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from fedbench.models import build_model

LR = 0.01
NUM_CLASSES = 10


@dataclass(frozen=True)
class Case:
    """One model of the benchmark and its local work per round."""

    label: str
    model: str
    params: dict[str, Any]
    shape: tuple[int, ...]
    steps: int
    batch: int

    @property
    def samples_per_client(self) -> int:
        return self.steps * self.batch


CASES = {
    "mlp": Case("MNIST MLP 784-200-200-10", "mlp", {}, (1, 28, 28), 10, 50),
    "cnn": Case("CIFAR CNN (lenet5)", "lenet5", {}, (3, 32, 32), 10, 50),
    "resnet18gn": Case("ResNet-18-GN (CIFAR)", "resnet18", {"norm": "group"}, (3, 32, 32), 2, 50),
    "resnet18bn": Case("ResNet-18-BN (CIFAR)", "resnet18", {"norm": "batch"}, (3, 32, 32), 2, 50),
    "mlp-tiny": Case("MLP 64-200-100-10 (GradMA tiny)", "mlp", {"hidden": [200, 100]}, (1, 8, 8), 10, 64),
}
DEFAULT_CASES = ("mlp", "cnn", "resnet18gn")


def case_named(name: str) -> Case:
    if name not in CASES:
        raise ValueError(f"unknown benchmark case {name!r}; allowed: {', '.join(CASES)}")
    return CASES[name]


def initial_model(case: Case) -> nn.Module:
    """The round's starting model, identical in every harness (``torch.manual_seed(0)`` first)."""
    torch.manual_seed(0)
    return build_model(case.model, case.params, case.shape, NUM_CLASSES)


def client_data(case: Case, client: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Client ``client``'s synthetic samples (x ~ N(0, 1), uniform labels), from its own seed so
    any process can rebuild exactly one partition."""
    gen = torch.Generator().manual_seed(10_000 + client)
    n = case.samples_per_client
    return torch.randn(n, *case.shape, generator=gen), torch.randint(0, NUM_CLASSES, (n,), generator=gen)


def flops_per_sample(case: Case) -> float:
    """Forward + backward FLOPs of one training sample, counted by ``FlopCounterMode`` (matmuls
    and convolutions at 2 FLOPs per multiply-add; element-wise work and norms are not counted)."""
    model = initial_model(case)
    x, y = client_data(case, 0)
    x, y = x[: case.batch], y[: case.batch]
    with FlopCounterMode(display=False) as counter:
        F.cross_entropy(model(x), y).backward()
    return counter.get_total_flops() / case.batch


def matmul_peak(
    device: torch.device, size: int | None = None, repeats: int = 5, dtype: torch.dtype = torch.float32
) -> float:
    """Measured matmul throughput (FLOP/s) in ``dtype``: best of ``repeats`` timed n×n products."""
    n = size or (8192 if device.type == "cuda" else 2048)
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    best = float("inf")
    for _ in range(repeats + 1):  # the first product is a warm-up
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        a @ b
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best


def _tree_rss_bytes(root: int) -> int:
    """Resident memory of ``root`` and all its descendants, from /proc (0 where unreadable)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    page = os.sysconf("SC_PAGE_SIZE")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
            with open(f"/proc/{entry}/statm") as f:
                pages = int(f.read().split()[1])
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
        rss[int(entry)] = pages * page
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += rss.get(pid, 0)
        todo.extend(children.get(pid, []))
    return total


class HostMemory:
    """Peak resident memory of this process and its descendants (Flower's Ray workers), sampled
    from /proc every ``interval`` seconds; without /proc, this process's ``ru_maxrss``."""

    def __init__(self, interval: float = 0.05):
        self.interval, self.peak = interval, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, _tree_rss_bytes(os.getpid()))
            self._stop.wait(self.interval)

    def __enter__(self) -> HostMemory:
        if os.path.isdir("/proc/self"):
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self.peak = max(self.peak, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
