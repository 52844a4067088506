"""What crosses between the host and the device in a run's rounds, without waiting for the device.

A round leaves its metrics on the device: the train loss, the clients' consistency, the bits of a
compressed uplink, whether the model is finite and, in a round that evaluates, the test set's accuracy and
loss and the clients' accuracy spread are 0-d tensors of a :class:`PendingRound`, and an algorithm's logs
may be tensors too, per-client ones nested in its dicts (read as lists). The run reads
its pending rounds to the host in one transfer (:func:`read_rounds`) only when a round evaluates, checkpoints
or is the last (:meth:`~fedbench.engine.runner.RoundLoop.reads`), and records them then, in one store
transaction. So on a GPU the rounds between two evaluations queue their kernels without a host
synchronisation; the host's copies into a round (sampled clients, local steps, minibatch plans, dropout keys)
go through pinned memory without waiting either (:func:`to_device`). The numbers are those of a run read
every round: a read changes no value, and the rounds after a divergence, trained before the read that finds
it, are dropped unrecorded (:meth:`~fedbench.engine.runner.Recorder.kept`).
"""

from __future__ import annotations

import math
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


def device_places(values: dict[str, Any] | list[Any]) -> list[tuple[dict[str, Any] | list[Any], Any]]:
    """Where the tensors of a round's metrics or logs are: (container, key or index) of every tensor in
    ``values`` and in the dicts and lists nested in it (a log of one value per client)."""
    items = values.items() if isinstance(values, dict) else enumerate(values)
    places: list[tuple[dict[str, Any] | list[Any], Any]] = []
    for k, v in items:
        if isinstance(v, torch.Tensor):
            places.append((values, k))
        elif isinstance(v, dict | list):
            places.extend(device_places(v))
    return places


def host_value(tensor: torch.Tensor, read: list[float]) -> Any:
    """A tensor's host value from its elements read as floats: a 0-d tensor's a float, or an int for an
    integer tensor (as a count logged on the host is); a tensor with dimensions its nested list of those."""
    whole = not tensor.is_floating_point() and tensor.dtype != torch.bool
    values: list[Any] = [int(v) for v in read] if whole else read
    return values[0] if tensor.dim() == 0 else nested(values, tuple(tensor.shape))


def nested(values: list[Any], shape: tuple[int, ...]) -> list[Any]:
    """The row-major ``values`` of a tensor of ``shape`` (one dimension at least) as nested lists."""
    if len(shape) == 1:
        return values
    size = math.prod(shape[1:])
    return [nested(values[i * size : (i + 1) * size], shape[1:]) for i in range(shape[0])]


def read_rounds(rounds: list[PendingRound]) -> None:
    """Every tensor of ``rounds`` (metrics, logs and the lists and dicts nested in them, finiteness) replaced
    by its host value (:func:`host_value`; finiteness a bool), all read in one transfer."""
    places = [place for r in rounds for values in (r.metrics, r.extra) for place in device_places(values)]
    flags = [r for r in rounds if isinstance(r.finite, torch.Tensor)]
    tensors = [values[k] for values, k in places] + [r.finite for r in flags]  # type: ignore[index,misc]
    if not tensors:
        return
    read = torch.cat([t.detach().double().reshape(-1) for t in tensors]).tolist()
    start = 0
    for (values, k), tensor in zip(places, tensors):
        values[k] = host_value(tensor, read[start : start + tensor.numel()])  # type: ignore[index]
        start += tensor.numel()
    for r in flags:
        r.finite = bool(read[start])
        start += 1


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
