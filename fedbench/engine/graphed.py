"""The batched step captured as CUDA graphs (``--compile graphs``): one launch a step where eager takes hundreds.

On a GPU the eager vmapped step (:func:`fedbench.engine.compiled.step_function`) is hundreds of small kernels,
each dispatched from Python through functorch's transforms: about 10 ms a step for the peer MLP on an H200, whose
FLOPs take microseconds (issue 26). A CUDA graph records the step's kernels once, for one set of input shapes and
addresses, and replays them with one launch (``torch.cuda.CUDAGraph``).

:class:`GraphedStep` keeps one graph per input signature (the shapes and dtypes of the rows, their buffers,
batch, labels, mask and keys: a round's chunks, a lone row run as two, a population's rows). Each call copies its
inputs into that graph's static inputs, replays it, and returns copies of its outputs: a replay overwrites the
graph's outputs, and the engine keeps a step's first loss and buffers across the step's second evaluation, and an
algorithm may keep a gradient across steps. The replayed kernels are the eager step's own, launched in the same
order on the same inputs, so a graphed run computes the eager run's numbers. Before its capture a graph's step runs
:data:`WARMUP` times on a side stream (cuBLAS handles and lazily built kernels), as torch's CUDA-graph notes ask.
The graphs of one step share one memory pool: every graph's outputs stay referenced for the step's lifetime, so
no capture reuses another's outputs, and their intermediates are dead after each replay.

A shape whose capture fails (an operation CUDA cannot record) runs eagerly, with a warning. The capture is
injected (:class:`Capture`): :func:`cuda_capture` on a GPU, and in the CPU tests a stand-in that
replays by running the step again into the captured outputs' memory, which checks everything here but the
recording itself.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch.utils._pytree import tree_flatten, tree_map

WARMUP = 2  # eager runs of the step on a side stream before each capture

Signature = tuple[Any, tuple[tuple[tuple[int, ...], torch.dtype], ...]]  # (tree structure, shapes and dtypes)


class Capture(Protocol):
    """Records ``step(*inputs)`` once; returns its outputs (fixed memory) and the replay that recomputes them
    in place from the current contents of ``inputs``."""

    def __call__(self, step: Callable[..., Any], inputs: tuple[Any, ...]) -> tuple[Any, Callable[[], None]]: ...


@dataclass
class _Captured:
    inputs: list[torch.Tensor]  # the static inputs, flattened: each call's inputs are copied into them
    outputs: Any  # the static outputs: overwritten by each replay
    replay: Callable[[], None]


def signature(inputs: tuple[Any, ...]) -> Signature:
    """The structure of ``inputs`` (dicts' keys in their order: two buffers of one shape never trade places) and
    the shape and dtype of each of its tensors."""
    return _signature(*tree_flatten(inputs))


def _signature(leaves: list[torch.Tensor], structure: Any) -> Signature:
    return structure, tuple((tuple(t.shape), t.dtype) for t in leaves)


class GraphedStep:
    """``step`` replayed from one captured graph per input :func:`signature` (see the module's notes)."""

    def __init__(self, step: Callable[..., Any], capture: Capture | None = None):
        self.step = step
        self.capture = cuda_capture() if capture is None else capture
        self.graphs: dict[Signature, _Captured | None] = {}  # None: the capture failed, the step runs eagerly

    def __call__(self, *inputs: Any) -> Any:
        leaves, structure = tree_flatten(inputs)  # once a call: the step's hot path
        key = _signature(leaves, structure)
        if key not in self.graphs:
            self.graphs[key] = self._captured(inputs)
        captured = self.graphs[key]
        if captured is None:
            return self.step(*inputs)
        for into, source in zip(captured.inputs, leaves, strict=True):
            into.copy_(source)
        captured.replay()
        return tree_map(torch.Tensor.clone, captured.outputs)

    def _captured(self, inputs: tuple[Any, ...]) -> _Captured | None:
        """A graph of the step on static copies of ``inputs``; None (with a warning) where CUDA cannot capture
        it: that shape's step then runs eagerly, with the same numbers."""
        static = tree_map(torch.Tensor.clone, inputs)
        try:
            outputs, replay = self.capture(self.step, static)
        except RuntimeError as exc:
            warnings.warn(
                f"CUDA graphs: the step runs eagerly, its capture failed ({exc})", RuntimeWarning, stacklevel=3
            )
            return None
        return _Captured(tree_flatten(static)[0], outputs, replay)


def cuda_capture(warmup: int = WARMUP) -> Capture:
    """The :class:`Capture` of a CUDA device: ``warmup`` runs on a side stream, then ``torch.cuda.graph`` into
    the pool the step's graphs share (other threads' CUDA calls, a store's or a tracker's, left alone)."""
    pool: list[Any] = []

    def capture(step: Callable[..., Any], inputs: tuple[Any, ...]) -> tuple[Any, Callable[[], None]]:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(warmup):
                step(*inputs)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool[0] if pool else None, capture_error_mode="thread_local"):
            outputs = step(*inputs)
        if not pool:
            pool.append(graph.pool())
        return outputs, graph.replay

    return capture
