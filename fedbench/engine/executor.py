"""Which client executor a run uses, and how many clients each batched chunk holds.

``sequential`` trains the sampled clients one after another (the reference path,
:mod:`fedbench.engine.local`); ``batched`` trains them together in chunks of ``chunk`` clients
(:mod:`fedbench.engine.batched`); ``auto`` takes the batched path on a GPU and the sequential one
on a CPU, where the vmapped step measured slower than the per-client loop (benchmarks/README.md).
Without a chunk size the batched path sizes its chunks from free device memory on CUDA (a
one-client probe of the step's peak memory, :func:`probe_client_bytes`) and holds
:data:`DEFAULT_CPU_CHUNK` clients on a CPU. Algorithms with ``batchable = False`` (a local loss that
cannot run on padded rows) always run sequentially. A batched run compiles its step per ``--compile``
(:func:`~fedbench.engine.compiled.compile_choice`). The choice and its reasons are one line of the
run log.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from fedbench.engine.compiled import StepMode, compile_choice
from fedbench.options import EXECUTORS  # noqa: F401  (the vocabulary lives with the run options)

DEFAULT_CPU_CHUNK = 16  # clients per vmapped chunk on a CPU unless --chunk says otherwise (bounds host memory)
MEMORY_FRACTION = 0.7  # of the free CUDA memory that chunks may fill
STATE_ROWS = 16  # [P] float rows per client besides the probed step (iterates, uploads, algorithm scratch)


@dataclass(frozen=True)
class ClientExecutor:
    """The executor chosen for a run: ``batched``, its ``chunk`` (clients per vmapped chunk; None:
    all S at once), ``note``, the one-line reason for the run log, and how the batched step runs
    (``step``: eager, compiled or graphed)."""

    batched: bool
    chunk: int | None
    note: str
    step: StepMode = "eager"

    @property
    def compiled(self) -> bool:
        return self.step == "compiled"


def choose_executor(
    executor: str,
    device: torch.device,
    batchable: bool = True,
    chunk: int | None = None,
    probe: Callable[[], int] | None = None,
    compile_step: str = "auto",
    steps: int = 0,
    price: Callable[[int | None], tuple[StepMode, str]] | None = None,
    resumed: StepMode | None = None,
    own_loss: bool = False,
) -> ClientExecutor:
    """The executor for ``--executor`` on ``device`` (``chunk``: ``--chunk``; ``probe``: bytes one
    client's batched step needs on CUDA), its step eager, compiled or graphed per ``--compile`` (``compile_step``) for
    a run of ``steps`` local steps: under ``auto``, ``price(chunk)``'s choice at the step's measured prices, or
    ``resumed``, the step the run took before (:func:`~fedbench.engine.compiled.compile_choice`); an algorithm's
    own local loss (``own_loss``) runs eager, unpriced."""
    chosen = _executor(executor, device, batchable, chunk, probe)
    priced = None if price is None else (lambda: price(chosen.chunk))
    step, why = compile_choice(compile_step, chosen.batched, steps, device, priced, resumed, own_loss)
    return ClientExecutor(chosen.batched, chosen.chunk, "; ".join(filter(None, [chosen.note, why])), step)


def _executor(
    executor: str, device: torch.device, batchable: bool, chunk: int | None, probe: Callable[[], int] | None
) -> ClientExecutor:
    """:func:`choose_executor` before the step's compilation."""
    if executor not in EXECUTORS:
        raise ValueError(f"executor must be one of {', '.join(EXECUTORS)}, got {executor!r}")
    if chunk is not None and chunk < 1:
        raise ValueError(f"chunk must be a positive number of clients, got {chunk}")
    if not batchable:
        return ClientExecutor(False, None, "sequential (the algorithm's local loss runs client by client)")
    if executor == "sequential":
        return ClientExecutor(False, None, "sequential (asked for)")
    if executor == "auto" and device.type != "cuda":
        return ClientExecutor(False, None, f"sequential (auto on {device.type}: the per-client loop measured faster)")
    why = "asked for" if executor == "batched" else f"auto on {device.type}"
    if chunk is not None:
        return ClientExecutor(True, chunk, f"batched, chunks of {chunk} clients ({why}; --chunk)")
    if device.type != "cuda" or probe is None:
        return ClientExecutor(
            True, DEFAULT_CPU_CHUNK, f"batched, chunks of {DEFAULT_CPU_CHUNK} clients ({why}; {device.type} default)"
        )
    per_client = max(1, probe())
    free, _ = torch.cuda.mem_get_info(device)
    fitted = int(MEMORY_FRACTION * free // per_client)
    sizes = f"one client's step {per_client / 2**20:.0f} MiB, {free / 2**30:.1f} GiB free"
    if fitted < 2 and executor == "auto":
        return ClientExecutor(False, None, f"sequential (auto on cuda: no room for two clients at once; {sizes})")
    fitted = max(fitted, 1)
    return ClientExecutor(True, fitted, f"batched, chunks of {fitted} clients ({why}; {sizes})")
