"""The batched executor's step function: eager, through ``torch.compile``, or replayed from CUDA graphs (``--compile``).

The step function is the vmapped ∇ of every row's masked minibatch loss,
``vmap(grad_and_value(row_loss))`` (:mod:`fedbench.engine.batched`): one forward/backward of
all the chunk's clients. ``torch.compile`` traces it once per model and shape and fuses its
elementwise work (activations, BatchNorm's masked sums, the hashed dropout masks, the loss)
into a few kernels: fewer launches on a GPU, fewer passes over memory on a CPU. The compiled
step computes the same sums in another order, so its numbers equal the eager ones to float
tolerance, not bit for bit (as the batched and the sequential executors). The step does not
depend on the algorithm, only on how the algorithm calls it, so the tests run both ways the
four kinds of call (one evaluation a step, two, per-client state, a replay draw kept apart)
and the BatchNorm and dropout models.

``--compile`` is ``on``, ``off``, ``auto`` or ``graphs``. Compiling costs seconds per model and chunk shape
(5–35 s on this project's 2-core CPU from an empty cache, ResNet-18 the most; 23–70 s and more on an H200) and
pays back a fixed time per local step, so ``auto`` takes the step whose measured saving over the run repays its
set-up (:mod:`fedbench.engine.step_price`: the eager and compiled steps timed on the run's model, and kept in a
price book under the results folder) for runs of at least :data:`MIN_PRICED_STEPS` local steps
(rounds × the largest K_i); shorter runs stay eager. A run records the step it took in its checkpoints, and its
resume takes it again (``validate --estimate``'s probe prices the step as its run would). A loop built by hand
without a price book falls back to a rule of the spec alone: ``auto`` compiles runs of at least
:data:`COMPILE_MIN_STEPS` steps, where the smallest win measured (benchmarks/README.md) repays it twice over. The
sequential executor is never compiled. A compiled run keeps its compiled graphs under its results folder
(:func:`use_compile_cache`): a later process on the same folder loads them instead of compiling.

``graphs`` replays the eager step from CUDA graphs (:mod:`fedbench.engine.graphed`): the eager step's own kernels,
recorded once per input shape, so the eager numbers without its per-kernel launches. It needs a CUDA device (on
another the step stays eager, and the run log says why), and is the one step a population may take (a population
is never compiled).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Literal

import torch
from torch.func import grad_and_value, vmap

from fedbench.engine.batched_layers import RowLayers
from fedbench.engine.graphed import GraphedStep
from fedbench.models.flat import Buffers, Objective, cross_entropy
from fedbench.options import COMPILE_CHOICES  # noqa: F401  (the vocabulary lives with the run options)

# Local steps from which ``auto`` compiles: twice the break-even of the smallest win measured, a tiny
# MLP at S = 4 on a CPU (1.4 ms a step saved against 13.5 s of compilation from an empty cache:
# about 9,600 steps; benchmarks/README.md).
COMPILE_MIN_STEPS = 20_000
# Local steps from which ``auto`` measures the step's prices (fedbench.engine.step_price): measuring costs four
# calls of the eager step, at most 1 % of such a run.
MIN_PRICED_STEPS = 400

StepMode = Literal["eager", "compiled", "graphed"]  # how the batched step runs (compile_choice)
STEP_WORDS: dict[StepMode, str] = {"eager": "eager", "compiled": "compiled", "graphed": "replayed from CUDA graphs"}
StepFunction = Callable[..., tuple[torch.Tensor, tuple[torch.Tensor, tuple[torch.Tensor, Buffers]]]]


def row_loss(
    layers: RowLayers,
    flat: torch.Tensor,
    buffers: Buffers,
    x: torch.Tensor,
    y: torch.Tensor,
    mask: torch.Tensor,
    key: torch.Tensor,
    fields: tuple[torch.Tensor, ...] = (),
    objective: Objective | None = None,
) -> tuple[torch.Tensor, tuple[torch.Tensor, Buffers]]:
    """One row's mean cross-entropy over its real samples (mask 1), or ``objective``'s loss (an algorithm's own,
    :class:`~fedbench.models.flat.Objective`) with the row's values ``fields`` of its ``rows`` fields, with its
    loss and updated BatchNorm buffers as auxiliary outputs."""
    if objective is not None:
        own = objective.with_rows(fields)
        loss, updated = layers.within(mask, key, lambda: own(layers.model, flat, buffers, x, y, mask.to(flat.dtype)))
        return loss, (loss.detach(), updated)
    logits, updated = layers.logits(flat, buffers, x, mask, key)
    loss = cross_entropy(layers.model.masked(logits, y), y, mask)  # −log softmax at the label: no ignore_index masks
    return loss, (loss.detach(), updated)


def objective_step(layers: RowLayers, objective: Objective) -> StepFunction:
    """``vmap(grad_and_value)`` of an algorithm's own loss over the rows of ``layers``' model (:func:`row_loss`
    with ``objective``), eager, with the same outputs as :func:`step_function`'s; called with each row's values of
    the objective's ``rows`` fields as a last argument. Built per call: its frozen fields change each round."""
    loss = partial(row_loss, layers, objective=objective)
    return vmap(grad_and_value(loss, has_aux=True), randomness="different")


def step_function(layers: RowLayers, mode: StepMode = "eager") -> StepFunction:
    """``vmap(grad_and_value(row_loss))`` over the rows of ``layers``' model, eager, compiled or
    graphed (``mode``); built once per :class:`RowLayers` (one per model, :meth:`RowLayers.of`). A new
    compiled model clears dynamo's caches first: each run compiles its own model afresh (from
    inductor's on-disk cache when the graph was seen before) instead of piling guards on one code
    object until dynamo gives up and runs eagerly. The graphed step replays the eager one."""
    if mode not in layers.steps:
        if mode == "graphed":
            layers.steps[mode] = GraphedStep(step_function(layers, "eager"))
        else:
            step = vmap(grad_and_value(partial(row_loss, layers), has_aux=True), randomness="different")
            if mode == "compiled":
                torch.compiler.reset()
                step = torch.compile(step)
            layers.steps[mode] = step
    return layers.steps[mode]


COMPILE_CACHE = "compile-cache"  # under the results folder: inductor's graphs and Triton's kernels


def use_compile_cache(out: Path) -> Path | None:
    """Keep this process's compiled graphs (inductor's FX graph cache, Triton's kernels on a GPU) in
    ``<out>/compile-cache``, so that a second process training into the same results folder loads them
    instead of compiling again; returns the folder, or None where ``TORCHINDUCTOR_CACHE_DIR`` is
    already set (by the user, or by an earlier call of this process: the first folder stays)."""
    if "TORCHINDUCTOR_CACHE_DIR" in os.environ:
        return None
    folder = (Path(out) / COMPILE_CACHE).absolute()
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(folder)
    os.environ.setdefault("TRITON_CACHE_DIR", str(folder / "triton"))
    return folder


def compile_choice(
    choice: str,
    batched: bool,
    steps: int,
    device: torch.device | None = None,
    priced: Callable[[], tuple[StepMode, str]] | None = None,
    resumed: StepMode | None = None,
    own_loss: bool = False,
) -> tuple[StepMode, str]:
    """How a run's batched step runs (``choice``: ``--compile``; ``steps``: its local steps, on ``device``), and
    why. An algorithm's own loss (``own_loss``) runs eager whatever ``choice`` says (:func:`objective_step`).
    ``auto`` takes ``priced()``, the choice at the step's measured prices (:mod:`fedbench.engine.step_price`),
    for runs of at least :data:`MIN_PRICED_STEPS` steps, and ``resumed``, the step a resumed run took before; with
    neither (a loop built by hand without a price book), the spec rule of :data:`COMPILE_MIN_STEPS`."""
    if choice not in COMPILE_CHOICES:
        raise ValueError(f"compile must be one of {', '.join(COMPILE_CHOICES)}, got {choice!r}")
    if not batched:
        return "eager", ""
    if own_loss:
        return "eager", "step eager (the algorithm's own local loss; --compile applies to cross-entropy's step)"
    if choice == "graphs":
        if device is not None and device.type == "cuda":
            return "graphed", f"step {STEP_WORDS['graphed']} (--compile graphs)"
        return "eager", f"step eager (--compile graphs needs a CUDA device, not {device or 'none'})"
    if choice != "auto":
        return (
            ("compiled", "step compiled (--compile on)") if choice == "on" else ("eager", "step eager (--compile off)")
        )
    if resumed is not None:
        if resumed == "graphed" and (device is None or device.type != "cuda"):
            resumed = "eager"  # the graphed step's numbers, on a device without CUDA graphs
        return resumed, f"step {resumed} (auto: as the run took it before it was resumed)"
    if priced is not None:
        if steps < MIN_PRICED_STEPS:
            return (
                "eager",
                f"step eager (auto: {steps:,} local steps < {MIN_PRICED_STEPS:,}, too few to measure its price)",
            )
        return priced()
    if steps >= COMPILE_MIN_STEPS:
        return "compiled", f"step compiled (auto: {steps:,} local steps ≥ {COMPILE_MIN_STEPS:,})"
    return "eager", f"step eager (auto: {steps:,} local steps < {COMPILE_MIN_STEPS:,}, too few to repay compiling)"
