"""LwF-FL: Learning without Forgetting (Li & Hoiem 2016, ECCV; TPAMI 2018) under FedAvg (C-FLAG Sec. 7).

While training task s, each client minimises on its current minibatch (LwF Eq. 1–3, λ_o = λ)

    CE(masked logits, y) + λ Σ_{heads h} (1/B) Σ_b [ −Σ_{c∈h} p^old_{b,c} log p^new_{b,c} ],
    p_{b,c} = softmax_{c∈h}(z_{b,c}/T),

where z^new are the logits of the model being trained and z^old those of the *old model* θ_old = the
global model at the end of task s−1, both restricted to the classes of each old head h (classes of the
tasks k < s): one head per old task in task-incremental mode (the stream's per-task heads), a single
head over all old classes in class-incremental mode (notes §5: "KD on the old classes"). There is no
T² factor (LwF's formulation) and no old classes during task 0 (plain CE, i.e. Fine-FL).

Choices where the paper (notes §5, §8.14) leaves room:

- θ_old is kept in the server state and handed to the clients as client state (free): every client
  received it as the global model broadcast in task s's first round, so it costs no bits under full
  participation (the paper's setting); a client first sampled later in the task would need it once
  (P floats), which is not charged. Per round LwF-FL costs FedAvg's bits (model down, Δ up).
- The old model runs in train mode with a scratch copy of the BatchNorm buffers and without gradient
  (as MOON's frozen models); without BatchNorm or dropout (mlp, small_cnn, GroupNorm ResNet) this is
  the same as eval mode.
- The loss is an :class:`~fedbench.models.flat.Objective` with one row per client (θ_old and the old heads), so
  it trains on either client executor and in populations: client by client the heads' columns are gathered
  (:func:`distillation`); on the batched executor's padded rows every head is a mask over the K classes and each
  row averages over its real samples (:func:`masked_distillation`, the same loss to float rounding). Steps go
  through ``local.optimizer`` (SGD, or Adam reset every round). λ = 0 is Fine-FL exactly; outside a continual
  run there are no old classes and LwF-FL is FedAvg.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple, TypeVar

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field

from fedbench.algorithms.base import ALGORITHMS, Algorithm, GradFn, Logs, RoundContext, TaskData
from fedbench.algorithms.state import ServerState, extend, state
from fedbench.models.flat import MASKED_LOGIT, Buffers, FlatModel, RowFields, batch_mean, cross_entropy


class LwFParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    lam: float = Field(default=1.0, ge=0, description="weight λ of the distillation loss (notes §8.14: 1)")
    temperature: float = Field(default=2.0, gt=0, description="distillation temperature T (notes §8.14: 2)")


def old_heads(class_task: np.ndarray, finished: int, mode: str) -> torch.Tensor:
    """``[K]`` int64: the old head of each class after task ``finished`` — its task (``mode: task``) or 0
    (``mode: class``) for classes of tasks ≤ finished, −1 for the others."""
    task = torch.as_tensor(class_task, dtype=torch.int64)
    old = (task >= 0) & (task <= finished)
    return torch.where(old, task if mode == "task" else torch.zeros_like(task), torch.full_like(task, -1))


def distillation(new: torch.Tensor, old: torch.Tensor, heads: torch.Tensor, temperature: float) -> torch.Tensor:
    """Σ_h mean_b −Σ_{c∈h} softmax(old_h/T)_c · log softmax(new_h/T)_c over the old heads h (LwF Eq. 2)."""
    total = new.new_zeros(())
    for h in heads[heads >= 0].unique().tolist():
        cols = (heads == h).nonzero().squeeze(1).to(new.device)
        target = F.softmax(old[:, cols] / temperature, dim=1)
        total = total - (target * F.log_softmax(new[:, cols] / temperature, dim=1)).sum(1).mean()
    return total


def masked_distillation(
    new: torch.Tensor, old: torch.Tensor, heads: torch.Tensor, temperature: float, count: int, mask: torch.Tensor | None
) -> torch.Tensor:
    """:func:`distillation` over the batch's real samples (``mask`` 1, or all with None, as
    :func:`~fedbench.models.flat.batch_mean`) without reading the heads: each head id h < ``count`` (a task's, so
    the stream's task count bounds them) is a mask over the K classes, an id no class has adds 0, and the classes
    outside a head get :data:`~fedbench.models.flat.MASKED_LOGIT` (probability 0, no gradient). Its shapes are
    static, so it runs under ``torch.func.vmap`` on the batched executor's rows."""
    inside = (heads == torch.arange(count, device=heads.device).unsqueeze(1)).unsqueeze(1)  # [H, 1, K]
    target = F.softmax(torch.where(inside, (old / temperature).unsqueeze(0), MASKED_LOGIT), dim=-1)
    log_p = F.log_softmax(torch.where(inside, (new / temperature).unsqueeze(0), MASKED_LOGIT), dim=-1)
    per_sample = -torch.where(inside, target * log_p, 0.0).sum((0, 2))  # [B]: Σ_h −Σ_{c∈h} p^old log p^new
    return batch_mean(per_sample, mask)


@state
class LwFState(ServerState):
    old_model: torch.Tensor  # θ_old [P], the global model at the end of the last task
    heads: torch.Tensor  # the old heads [K] int64 ([0] before any task has ended)


OldModelState = TypeVar("OldModelState", bound=LwFState)  # LwF-FL's state, or TARGET's (it adds the pool)


def keep_old_model(state: OldModelState, data: TaskData, name: str) -> OldModelState:
    """At a task's end: θ_old ← x and the old heads now include the task's classes (LwF-FL, TARGET)."""
    if data.stream is None:
        raise ValueError(f"{name}'s end_task needs the task stream (TaskData.stream)")
    heads = old_heads(data.stream.class_task, data.task, data.stream.mode).to(state.x.device)
    return dataclasses.replace(state, old_model=state.x.clone(), heads=heads)


class OldModel(NamedTuple):
    old_model: torch.Tensor  # [S, P]
    heads: torch.Tensor  # [S, K]


@dataclass(frozen=True)
class LwFObjective(RowFields):
    """CE on the current minibatch + λ·KD against the frozen old model on the old heads, one row per client
    ``[S, …]`` (θ_old [S, P] and the old heads [S, K], or [S, 0] before any task has ended); ``count`` bounds the
    head ids (the stream's task count)."""

    rows: ClassVar[tuple[str, ...]] = ("old_model", "heads")
    old_model: torch.Tensor
    heads: torch.Tensor
    lam: float
    temperature: float
    count: int = 1

    def __call__(
        self,
        model: FlatModel,
        point: torch.Tensor,
        buffers: Buffers,
        x: torch.Tensor,
        y: torch.Tensor,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        logits = model.logits(point, buffers, x)
        loss = cross_entropy(model.masked(logits, y), y, mask)
        if self.heads.shape[-1] == 0:  # no task has ended: no old classes
            return loss
        old = model.frozen_logits(self.old_model, buffers, x)
        if mask is None:
            return loss + self.lam * distillation(logits, old, self.heads, self.temperature)
        return loss + self.lam * masked_distillation(logits, old, self.heads, self.temperature, self.count, mask)


@ALGORITHMS.register(
    "lwf_fl",
    "LwF-FL: FedAvg with distillation of the previous task's global model on the old classes",
    LwFParams,
    label="LwF-FL",
    compression=True,
    local_optimizer=True,
    own_loss=True,
    vmap_server=True,
)
class LwFFL(Algorithm):
    """Local steps on CE + λ·KD (module docstring); FedAvg server; θ_old and the old heads set at task ends."""

    params: LwFParams

    def init_state(self, x0: torch.Tensor) -> LwFState:
        heads = torch.zeros(0, dtype=torch.int64, device=x0.device)
        return extend(super().init_state(x0), LwFState, old_model=x0.clone(), heads=heads)

    def client_state(self, state: LwFState, clients: torch.Tensor) -> OldModel:
        """θ_old and the old heads, held by every client (free; module docstring)."""
        rows = len(clients)
        return OldModel(state.old_model.expand(rows, -1), state.heads.expand(rows, -1))

    def objective(self, ctx: RoundContext) -> LwFObjective:
        """The round's loss of each client row: θ_old and the old heads."""
        held, p = ctx.held, self.params
        return LwFObjective(held.old_model, held.heads, p.lam, p.temperature, max(self.ctx.tasks, 1))

    def local_step(self, ctx: RoundContext, x: torch.Tensor, carry: Any, grad: GradFn) -> tuple[torch.Tensor, Any]:
        return self.ctx.local_optimizer.step(x, grad(x, self.objective(ctx)), carry, ctx.lr)

    def end_task(self, state: LwFState, data: TaskData) -> tuple[LwFState, Logs]:
        """θ_old ← x (the global model at the end of this task); the old heads now include its classes."""
        return keep_old_model(state, data, "lwf_fl"), {}
