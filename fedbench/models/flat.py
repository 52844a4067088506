"""A model seen as a flat parameter vector: the engine's bridge between nn.Modules and algorithms.

Algorithms work on ``[P]``/``[S, P]`` tensors; this module turns a flat vector back into the
module's parameters (views, no copies) for a functional forward pass, returns the minibatch
gradient as a flat vector, and evaluates a flat model on a whole split. Buffers (BatchNorm
running statistics) are kept apart from parameters as a name → tensor dict.

The minibatch loss is cross-entropy unless an :class:`Objective` replaces it (MOON, FedMLB, LwF-FL, iCaRL-FL and
TARGET, on either client executor);
models that define ``stages()`` (see ``fedbench/models/registry.py``) can be evaluated block by
block with :meth:`FlatModel.run_stages`, e.g. local blocks followed by a frozen global model's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import ClassVar, Protocol

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from fedbench.data.base import ArraySplit

Buffers = dict[str, torch.Tensor]
MASKED_LOGIT = -1e9  # exp underflows to exactly 0 in float32; finite, so KL terms stay NaN-free (−inf: 0·∞)


class Objective(Protocol):
    """A local minibatch loss replacing cross-entropy: a scalar, differentiable in ``point``.

    Called in train mode with the step's buffers (BatchNorm statistics move with the step's forward pass
    through ``point``, as with cross-entropy: a frozen pass gets a scratch copy); frozen reference points (the
    global model, a client's previous model) are the objective's own fields, one row per client ``[S, …]`` for
    the fields named in ``rows``. The sequential executor calls client i's objective (:meth:`at`) on its
    unpadded batch (``mask`` None); the batched one calls each row's on its padded batch, whose real samples
    (``mask`` 1) the loss averages over (:func:`batch_mean`), under ``torch.func.vmap`` (eager, whatever
    ``--compile`` says). Classifier outputs go through ``model.masked(logits, y)`` (continual heads; identity
    otherwise).
    """

    rows: ClassVar[tuple[str, ...]]

    def __call__(
        self,
        model: FlatModel,
        point: torch.Tensor,
        buffers: Buffers,
        x: torch.Tensor,
        y: torch.Tensor,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor: ...

    def row_values(self) -> tuple[torch.Tensor, ...]: ...

    def with_rows(self, values: tuple[torch.Tensor, ...]) -> Objective: ...

    def at(self, i: int) -> Objective: ...


class RowFields:
    """The row fields of a frozen dataclass objective: their values (:meth:`row_values`), the objective with
    others (:meth:`with_rows`: a batched row's, inside ``vmap``) and client i's (:meth:`at`)."""

    rows: ClassVar[tuple[str, ...]] = ()

    def row_values(self) -> tuple[torch.Tensor, ...]:
        return tuple(getattr(self, n) for n in self.rows)

    def with_rows(self, values: tuple[torch.Tensor, ...]) -> Objective:
        return dataclasses.replace(self, **dict(zip(self.rows, values)))  # type: ignore[type-var]

    def at(self, i: int) -> Objective:
        return self.with_rows(tuple(v[i] for v in self.row_values()))


def batch_mean(values: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """The mean of per-sample ``values`` [B] over the batch's real samples: every one (``mask`` None) or those
    with mask 1."""
    if mask is None:
        return values.mean()
    return (values * mask).sum() / mask.sum().clamp(min=1)


def one_hot(y: torch.Tensor, classes: int) -> torch.Tensor:
    """``[B, classes]`` bool, True at each sample's label: ``F.one_hot`` without its check of the labels' values,
    a read that ``torch.func.vmap`` refuses (an objective's loss on the batched executor's rows)."""
    return y.unsqueeze(-1) == torch.arange(classes, device=y.device)


def cross_entropy(logits: torch.Tensor, y: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean cross-entropy over the batch's real samples: ``F.cross_entropy`` (``mask`` None), or the
    masked mean of −log softmax at the label (the batched executor's padded batch)."""
    if mask is None:
        return F.cross_entropy(logits, y)
    return batch_mean(-torch.log_softmax(logits, -1).gather(-1, y.unsqueeze(-1)).squeeze(-1), mask)


class _StageRunner(nn.Module):
    """Runs ``net.stages()[start:stop]`` in turn and returns every stage's output (a wrapper so
    that ``functional_call`` can swap ``net``'s parameters for any range of blocks)."""

    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net

    def forward(self, h: torch.Tensor, start: int, stop: int | None) -> list[torch.Tensor]:
        outputs = []
        for stage in self.net.stages()[start:stop]:  # type: ignore[operator]
            h = stage(h)
            outputs.append(h)
        return outputs


class FlatModel:
    """Functional view of ``module`` with parameters packed in one ``[P]`` vector."""

    def __init__(self, module: nn.Module):
        self.module = module
        params = list(module.named_parameters())
        self.names = [n for n, _ in params]
        self.shapes = [p.shape for _, p in params]
        self.numels = [p.numel() for _, p in params]
        self._buffer_numel = sum(b.numel() for b in module.buffers() if b.is_floating_point())
        self.dim = sum(self.numels)
        self.label_mask: torch.Tensor | None = None  # [K, K] bool set by the engine in continual runs
        self.autocast: torch.dtype | None = None  # local.precision bf16: forward passes under autocast
        self.engine_cache: dict[str, object] = {}  # what the engine builds once per model (the batched step)
        # set by the batched executor's per-row layers (fedbench.engine.batched_layers): see own_batch
        self.batch_scope: Callable[[int, bool], AbstractContextManager[None]] | None = None

    def own_batch(self, size: int, moves_statistics: bool) -> AbstractContextManager[None]:
        """The context of a forward pass on a batch of an objective's own, not the step's minibatch (``size``
        samples, all real: TARGET's synthetic ones). On the batched executor's rows its BatchNorm normalises over
        all of them and, with ``moves_statistics``, moves the row's running statistics once more, as the
        sequential path's second train-mode pass moves them in place (a frozen model's pass, on scratch buffers
        there, moves none); its dropout masks are keyed apart from the minibatch's. Elsewhere it changes nothing."""
        return nullcontext() if self.batch_scope is None else self.batch_scope(size, moves_statistics)

    def masked(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Continual heads: each sample's logits outside ``label_mask[y]`` (the classes its label may
        be predicted as: its task's for task-incremental, those seen so far for class-incremental)
        set to :data:`MASKED_LOGIT`, so they get probability 0 and no gradient. Without a mask (every
        non-continual run) the logits themselves. Custom objectives apply it to their logits too."""
        if self.label_mask is None:
            return logits
        return logits.masked_fill(~self.label_mask[y], MASKED_LOGIT)

    def flatten(self) -> torch.Tensor:
        """The module's current parameters as one detached ``[P]`` vector."""
        return torch.cat([p.detach().reshape(-1) for p in self.module.parameters()])

    def unflatten(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """Name → parameter-shaped views into ``flat``."""
        chunks = torch.split(flat, self.numels)
        return {n: c.view(s) for n, c, s in zip(self.names, chunks, self.shapes)}

    def buffers(self) -> Buffers:
        """A copy of the module's buffers (empty for models without BatchNorm)."""
        return {n: b.detach().clone() for n, b in self.module.named_buffers()}

    def buffer_numel(self) -> int:
        """Elements of the module's float buffers (BatchNorm's running statistics), counted once at
        construction (the round loop charges them as communication every round)."""
        return self._buffer_numel

    def logits(self, flat: torch.Tensor, buffers: Buffers, x: torch.Tensor) -> torch.Tensor:
        """The module's output at the flat parameters; with ``autocast`` set (``local.precision:
        bf16``) the forward runs in that dtype under ``torch.autocast`` (parameters and gradients
        stay float32: mixed precision) and the logits come back as float32."""
        if self.autocast is None:
            return functional_call(self.module, {**self.unflatten(flat), **buffers}, (x,))
        with torch.autocast(x.device.type, dtype=self.autocast):
            out = functional_call(self.module, {**self.unflatten(flat), **buffers}, (x,))
        return out.float()

    def frozen_logits(self, flat: torch.Tensor, buffers: Buffers, x: torch.Tensor) -> torch.Tensor:
        """:meth:`logits` of a frozen model (an old or global one in a client's objective): no gradient, and
        a scratch copy of ``buffers``, so that its train-mode pass leaves the step's BatchNorm statistics as
        they are."""
        with torch.no_grad():
            return self.logits(flat, {k: v.clone() for k, v in buffers.items()}, x)

    def loss_and_grad(
        self, flat: torch.Tensor, buffers: Buffers, x: torch.Tensor, y: torch.Tensor, objective: Objective | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean cross-entropy on (x, y) at ``flat`` — or ``objective``'s loss when given — and its
        gradient ``[P]`` (train mode; BatchNorm running statistics in ``buffers`` are updated in place)."""
        self.module.train()
        point = flat.detach().requires_grad_(True)
        if objective is None:
            loss = F.cross_entropy(self.masked(self.logits(point, buffers, x), y), y)
        else:
            loss = objective(self, point, buffers, x, y)
        (grad,) = torch.autograd.grad(loss, point)
        return loss.detach(), grad

    # -- blocks (models with stages(); see fedbench/models/registry.py) ---------------------
    def num_stages(self, who: str) -> int:
        """B + 1: the model's feature blocks plus its classifier; an error naming the model and
        ``who`` (the algorithm) when the model is not split into blocks."""
        name = getattr(self.module, "registry_name", type(self.module).__name__)
        make = getattr(self.module, "stages", None)
        if make is None:
            raise ValueError(
                f"{who} needs a model split into blocks (a stages() method, fedbench/models/registry.py); "
                f"model {name!r} has none — use mlp, lenet5, cnn1d, small_cnn or resnet18"
            )
        count = len(make())
        if count < 2:
            raise ValueError(f"{who} needs at least one hidden block before the classifier; model {name!r} has none")
        return count

    def run_stages(
        self, flat: torch.Tensor, buffers: Buffers, h: torch.Tensor, start: int = 0, stop: int | None = None
    ) -> list[torch.Tensor]:
        """Outputs of stages ``start``…``stop−1`` (0-based; the classifier is the last) applied in
        turn to ``h`` with the parameters ``flat``, in the module's current train/eval mode."""
        if not hasattr(self, "_runner"):
            self._runner = _StageRunner(self.module)
        tensors = {f"net.{k}": v for k, v in {**self.unflatten(flat), **buffers}.items()}
        return functional_call(self._runner, tensors, (h, start, stop))

    @torch.no_grad()
    def per_sample(
        self, flat: torch.Tensor, buffers: Buffers, split: ArraySplit, batch_size: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Correctness ``[n]`` (bool) and cross-entropy ``[n]`` of the model ``flat`` on a split, eval mode."""
        self.module.eval()
        correct, losses = [], []
        for start in range(0, len(split), batch_size):
            x, y = split.x[start : start + batch_size], split.y[start : start + batch_size]
            out = self.masked(self.logits(flat, buffers, x), y)
            losses.append(F.cross_entropy(out, y, reduction="none"))
            correct.append(out.argmax(1) == y)
        return torch.cat(correct), torch.cat(losses)

    def evaluate(self, flat: torch.Tensor, buffers: Buffers, split: ArraySplit, batch_size: int) -> tuple[float, float]:
        """(accuracy, mean cross-entropy) of the model ``flat`` on a whole split."""
        accuracy, loss = self.scores(flat, buffers, split, batch_size)
        return float(accuracy), float(loss)

    def scores(
        self, flat: torch.Tensor, buffers: Buffers, split: ArraySplit, batch_size: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`evaluate` as 0-d tensors on the model's device, unread (a round reads them with its other
        values, :mod:`fedbench.engine.pending`)."""
        correct, losses = self.per_sample(flat, buffers, split, batch_size)
        return correct.float().mean(), losses.mean()


def average_buffers(per_client: list[Buffers], weights: torch.Tensor) -> Buffers:
    """Weighted mean of the clients' float buffers; integer counters take the maximum."""
    if not per_client or not per_client[0]:
        return {}
    out = {}
    for name, first in per_client[0].items():
        stacked = torch.stack([b[name] for b in per_client])
        if first.is_floating_point():
            out[name] = torch.tensordot(weights.to(first.dtype), stacked, dims=1)
        else:
            out[name] = stacked.max(0).values
    return out
