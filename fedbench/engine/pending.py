"""What crosses between the host and the device in a run's rounds, without waiting for the device.

A round leaves its metrics on the device: the train loss, the clients' consistency, the bits of a
compressed uplink, whether the model is finite and, in a round that evaluates, the test set's accuracy and
loss and the clients' accuracy spread are 0-d tensors of a :class:`PendingRound`. The run reads
its pending rounds to the host in one transfer (:func:`read_rounds`) only when a round evaluates, checkpoints
or is the last (:meth:`~fedbench.engine.runner.RoundLoop.reads`), and records them then, in one store
transaction. So on a GPU the rounds between two evaluations queue their kernels without a host
synchronisation; the host's copies into a round (sampled clients, local steps, minibatch plans, dropout keys)
go through pinned memory without waiting either (:func:`to_device`). The numbers are those of a run read
every round: a read changes no value, and the rounds after a divergence, trained before the read that finds
it, are dropped unrecorded (:meth:`~fedbench.engine.runner.Recorder.kept`).
"""

from __future__ import annotations

import traceback
from collections import Counter
from dataclasses import dataclass
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from fedbench.host import in_host_side


@dataclass
class PendingRound:
    """A trained round whose device values are not read yet: its number, metrics and logs (0-d tensors
    among their values) and whether the model is finite after it (a 0-d bool tensor until read)."""

    t: int
    metrics: dict[str, Any]
    extra: dict[str, Any]
    finite: torch.Tensor | bool


def read_metrics(tensors: list[torch.Tensor]) -> list[float]:
    """0-d tensors (metrics, flags) read to the host in one transfer: their values as floats, each equal
    to ``float(t)``."""
    if not tensors:
        return []
    return torch.stack([t.detach().double().reshape(()) for t in tensors]).tolist()


def read_rounds(rounds: list[PendingRound]) -> None:
    """Every 0-d tensor of ``rounds`` (metrics, logs, finiteness) replaced by its host value, all read in one
    transfer (floats; an integer tensor's an int, as a count logged on the host is; finiteness a bool)."""
    places: list[tuple[dict[str, Any], str]] = [
        (values, k)
        for r in rounds
        for values in (r.metrics, r.extra)
        for k, v in values.items()
        if isinstance(v, torch.Tensor) and v.dim() == 0
    ]
    flags = [r for r in rounds if isinstance(r.finite, torch.Tensor)]
    read = read_metrics([values[k] for values, k in places] + [r.finite for r in flags])  # type: ignore[misc]
    for (values, k), v in zip(places, read):
        whole = not values[k].is_floating_point() and values[k].dtype != torch.bool
        values[k] = int(v) if whole else v
    for r, v in zip(flags, read[len(places) :]):
        r.finite = bool(v)


def to_device(host: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``host`` on ``device`` without waiting for the device: from the CPU to CUDA a non-blocking copy from
    pinned memory (torch's caching host allocator keeps the pinned block until the copy is done), where a
    copy from pageable memory would synchronise the stream; otherwise ``host.to(device)`` (a tensor already
    there is returned as it is)."""
    if device.type != "cuda" or host.device.type != "cpu":
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)


HOST_READS = frozenset({"item", "tolist", "numpy", "cpu", "__int__", "__float__", "__bool__", "__index__"})


class HostReads(TorchFunctionMode):
    """While active, counts the reads of torch tensors to the host (``item``, ``tolist``, ``numpy``, ``cpu``,
    ``int``, ``float``, ``bool``, indexing with a tensor): each would wait for a GPU to finish its queue.
    On a CPU it counts the reads a GPU run would make (the tests' and benchmarks/host_reads.py's measure),
    less those inside a :func:`~fedbench.host.host_side` function, which reads host copies by design;
    ``where`` keeps the fedbench lines that made them."""

    def __init__(self) -> None:
        super().__init__()
        self.where: Counter[str] = Counter()

    @property
    def count(self) -> int:
        """Reads counted so far."""
        return sum(self.where.values())

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = getattr(func, "__name__", "")
        if name in HOST_READS and not in_host_side():
            lines = [f for f in traceback.extract_stack()[:-1] if "fedbench" in f.filename]
            place = f"{lines[-1].filename.rsplit('fedbench', 1)[-1]}:{lines[-1].lineno}" if lines else "?"
            self.where[f"{name} at {place}"] += 1
        return func(*args, **(kwargs or {}))
