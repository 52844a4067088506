"""Local work of the round's clients, executed one client after another (the reference path).

The gradient oracle an algorithm receives returns, for each row z of ``[s, P]``,
clip(∇f_i(z; ξ)) + λ·z on the step's minibatch ξ — the order of ``clip_grad_norm_`` followed by
``torch.optim.SGD(weight_decay=λ)`` — so an algorithm's own correction terms are never clipped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from fedbench.algorithms.base import Algorithm, RoundContext, Upload
from fedbench.data.base import ArraySplit
from fedbench.engine.augment import augment_batch
from fedbench.engine.batches import ClientBatcher
from fedbench.engine.uploads import merged
from fedbench.models.flat import Buffers, FlatModel, Objective
from fedbench.scenario import AugmentSpec


@dataclass(frozen=True, eq=False)
class ReplayTable:
    """Per-step replay draws under ``local.shuffle: device``, for a round plan drawn on the device: every client's
    replay memory (training-set indices, task slots in order) end to end in ``table`` on the data's device, each
    client's first place in it and its size (``[N]``, host), the draw's size ``count`` and the 32-bit base key of
    the task's ``("replay_step", task)`` stream (:func:`~fedbench.engine.device_plan.hashed_choice`)."""

    table: torch.Tensor
    starts: np.ndarray
    sizes: np.ndarray
    count: int
    base: int


@dataclass(frozen=True)
class LocalConfig:
    """The per-step settings of local work (from the scenario's ``local`` block) and the run's seed;
    ``replay(client, position)`` (continual experience replay) returns memory indices to join each
    minibatch, or None; ``replay_table()`` (under ``local.shuffle: device``) the memory as a device table, from
    which a round plan drawn on the device draws the same; ``replay_apart`` (the algorithm's ``replay_apart``
    capability) keeps that draw apart from the minibatch in the gradient oracles (``grad.memory``)."""

    weight_decay: float
    clip_grad_norm: float | None
    augment: AugmentSpec
    seed: int
    replay: Callable[[int, int], torch.Tensor | None] | None = None
    replay_table: Callable[[], ReplayTable] | None = None
    replay_apart: bool = False
    shuffle: str = "host"  # local.shuffle: device hashes the augmentation draws too

    def batch(self, train: ArraySplit, batcher: ClientBatcher, client: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The client's next minibatch (x, y) — followed by a replay-memory draw under ``replay`` —
        augmented when ``local.augment`` asks for it."""
        x, y, _ = self.batch_parts(train, batcher, client)
        return x, y

    def batch_parts(
        self, train: ArraySplit, batcher: ClientBatcher, client: int
    ) -> tuple[torch.Tensor, torch.Tensor, int]:
        """:meth:`batch` and the number of its leading samples that are the current minibatch (the
        rest, if any, is the replay draw)."""
        idx, current, position = self.batch_indices(batcher, client)
        a = self.augment
        x = augment_batch(train.x[idx], a.flip, a.crop_padding, self.seed, client, position, self.shuffle)
        return x, train.y[idx], current

    def batch_indices(self, batcher: ClientBatcher, client: int) -> tuple[torch.Tensor, int, int]:
        """The client's next minibatch as indices into the training set (the replay draw joined
        after the current minibatch), the count of current samples, and the batcher position it
        was drawn at (the augmentation key)."""
        position = int(batcher.cursor[client])
        idx = batcher.next(client)
        current = len(idx)
        if self.replay is not None:
            memory = self.replay(client, position)
            if memory is not None and len(memory):
                idx = torch.cat([idx, memory])
        return idx, current, position

    @property
    def augments(self) -> bool:
        """Whether ``local.augment`` flips or crops."""
        return self.augment.flip or self.augment.crop_padding > 0

    def finish(self, grads: torch.Tensor, points: torch.Tensor) -> torch.Tensor:
        """Rows of raw minibatch gradients → clip(g) + λ·z, each row clipped to its own norm."""
        if self.clip_grad_norm is not None:
            norms = grads.norm(dim=1, keepdim=True)
            grads = grads * torch.clamp(self.clip_grad_norm / (norms + 1e-6), max=1.0)
        if self.weight_decay:
            grads = grads + self.weight_decay * points
        return grads


class GradientOracle:
    """Minibatch gradient at any point(s) for one client and one local step.

    ``grad(points, objective)`` differentiates an algorithm's own local loss (an
    :class:`~fedbench.models.flat.Objective`, row i's ``objective.at(i)``) instead of cross-entropy.

    BatchNorm running statistics are updated by the step's first evaluation only — the gradient
    at the point the client trains; an algorithm's auxiliary evaluations (a perturbed point, an
    earlier iterate, the global model) see the same statistics but leave them untouched, as the
    reference implementations that evaluate such points on separate models do.

    With ``memory_from`` = m (``replay_apart``), samples m… of the batch are the step's replay draw:
    ``grad`` uses the first m only and ``memory(points)`` differentiates the draw.
    ``step`` is the local step's index k in the round.
    """

    def __init__(
        self,
        model: FlatModel,
        buffers: Buffers,
        x: torch.Tensor,
        y: torch.Tensor,
        cfg: LocalConfig,
        memory_from: int | None = None,
        step: int = 0,
    ):
        self.step = step
        cut = len(y) if memory_from is None else memory_from
        self.model, self.buffers, self.x, self.y, self.cfg = model, buffers, x[:cut], y[:cut], cfg
        self.memory_x, self.memory_y = x[cut:], y[cut:]
        self.first_loss: torch.Tensor | None = None

    def memory(self, points: torch.Tensor) -> torch.Tensor:
        """∇f_I(z) on the step's replay draw for each row z (clip + λ·z as ``grad``), BatchNorm
        statistics untouched; exact zeros when the step has no draw (empty memory)."""
        if len(self.memory_y) == 0:
            return torch.zeros_like(points)
        return self._gradients(points, self.memory_x, self.memory_y, None, primary=False)

    def __call__(self, points: torch.Tensor, objective: Objective | None = None) -> torch.Tensor:
        return self._gradients(points, self.x, self.y, objective, primary=True)

    def _gradients(
        self, points: torch.Tensor, x: torch.Tensor, y: torch.Tensor, objective: Objective | None, primary: bool
    ) -> torch.Tensor:
        """clip(∇) + λ·z per row; only the step's first primary evaluation moves BatchNorm
        statistics (and gives the step's loss), every other one works on a scratch copy."""
        grads = []
        for i, z in enumerate(points):
            first = primary and self.first_loss is None
            buffers = self.buffers if first else {k: v.clone() for k, v in self.buffers.items()}
            loss, g = self.model.loss_and_grad(z, buffers, x, y, None if objective is None else objective.at(i))
            if first:
                self.first_loss = loss
            grads.append(g)
        return self.cfg.finish(torch.stack(grads), points)


@dataclass
class LocalResult:
    """The round's client work: the clients' :class:`~fedbench.algorithms.base.Upload` (rows in
    order), final local iterates ``[S, P]``, BatchNorm buffers and each client's mean minibatch loss ``[S]``;
    a population computes its runs' mean loss and consistency together (0-d tensors; else None, and the
    round computes them from ``losses`` and ``final``)."""

    uploads: Upload
    final: torch.Tensor
    buffers: list[Buffers]
    losses: torch.Tensor
    mean_loss: torch.Tensor | None = None
    consistency: torch.Tensor | None = None


def run_clients_sequential(
    algo: Algorithm,
    ctx: RoundContext,
    steps: list[int],
    model: FlatModel,
    global_buffers: Buffers,
    train: ArraySplit,
    batcher: ClientBatcher,
    cfg: LocalConfig,
) -> LocalResult:
    """Train each sampled client in turn from ``ctx.start`` for its ``steps[row]`` local steps."""
    uploads: list[Upload] = []
    finals, all_buffers, losses = [], [], []
    for row, client in enumerate(ctx.client_ids()):
        sub = ctx.select(slice(row, row + 1))
        buffers = {k: v.clone() for k, v in global_buffers.items()}
        x = sub.start
        carry = algo.local_init(sub, x)
        step_losses = []
        for k in range(steps[row]):
            xb, yb, current = cfg.batch_parts(train, batcher, client)
            oracle = GradientOracle(model, buffers, xb, yb, cfg, current if cfg.replay_apart else None, k)
            x, carry = algo.local_step(sub, x, carry, oracle)
            step_losses.append(oracle.first_loss)
        uploads.append(algo.upload(sub, x, carry))
        finals.append(x)
        all_buffers.append(buffers)
        losses.append(torch.stack(step_losses).mean())
    return LocalResult(merged(uploads), torch.cat(finals), all_buffers, torch.stack(losses))
