"""iCaRL-FL: iCaRL (Rebuffi et al. 2017, CVPR) under FedAvg (C-FLAG Sec. 7), as implemented here.

**Training** (iCaRL Alg. 3, UpdateRepresentation). Each local minibatch is the client's current-task
minibatch joined by ``continual.memory.replay_batch`` of its exemplars (the engine's per-step replay),
and the loss is iCaRL's sigmoid binary cross-entropy with distillation,

    (1/B) Σ_b Σ_{c∈C_b} BCE(σ(z_{b,c}), t_{b,c}),   t_{b,c} = σ(z^old_{b,c}) for old classes c, δ_{c=y_b} otherwise,

where old classes are those of the finished tasks, z^old the logits of the old model θ_old = the global
model at the end of the previous task, and C_b = (the classes sample b may be predicted as: the task's
head, or every class seen so far in class-incremental mode) ∪ the old classes. In task 0 there are no
old classes: BCE on one-hot targets (so iCaRL-FL differs from Fine-FL from the start). Samples are
averaged, classes summed (the paper writes both as sums).

**Exemplars** (iCaRL Alg. 4, ConstructExemplarSet). At the end of each task every client replaces its
memory slot for the task (the engine's class-balanced random draw) by *herding*: for each class c with
quota m_c (the random slot's count of c, so the buffer has the same size and class balance as every
other method's: ``memory.per_task`` per task, notes §8.14 "iCaRL: the same buffer"), with φ̂ the
L2-normalised penultimate features of the client's task-k samples of c at the global model and
μ = mean φ̂, pick p_k = argmin_x ‖μ − (φ̂(x) + Σ_{j<k} φ̂(p_j))/k‖ over samples not yet picked (ties:
lowest index). The memory grows by one slot per task (no ReduceExemplarSet: the budget is per task,
not iCaRL's fixed total K).

**Classification** (iCaRL Alg. 1, nearest mean of exemplars), at each task's end after herding:
μ_c = normalise(Σ_i Σ_{p∈P_{i,c}} φ̂(p) / Σ_i |P_{i,c}|), the federated mean over every client's exemplars
of class c at the global model (each client sends its per-class sums and counts, the server returns the
means), and a test sample of label y is predicted as argmin_{c allowed} ‖φ̂(x) − μ_c‖ with the allowed
classes of the accuracy matrix's masks (y's task head; the classes seen so far in class mode).
With ``classifier: nme`` (default) this row is the run's accuracy-matrix row ``task_acc`` (so Acc and
Forgetting are NME's), and the network's masked-classifier row is kept as ``task_acc_network``; tasks not
yet seen have no exemplar means and score 0. ``classifier: network`` keeps the network's row. The
per-round ``test_acc``/``test_loss`` are always the network classifier's.

**Communication.** Per round FedAvg's bits (model down, Δ up). θ_old is the model broadcast in the
task's first round (free under full participation, not charged otherwise). The NME exchange at each
task's end (N·|seen|·(d+1) floats up, N·|seen|·d down) is logged as ``nme_bits_up``/``nme_bits_down``,
outside the per-round counters. The old model runs in train mode with scratch BatchNorm buffers (as
MOON's frozen models). The loss is an :class:`~fedbench.models.flat.Objective` with one row per client, so it
trains on either client executor and in populations; local steps go through ``local.optimizer``. Needs a model
with ``stages()`` (features) in a continual run.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field

from fedbench.algorithms.base import ALGORITHMS, Algorithm, GradFn, Logs, RoundContext, TaskData
from fedbench.algorithms.state import ServerState, extend, state
from fedbench.compress import BITS_PER_FLOAT
from fedbench.models.flat import Buffers, FlatModel, RowFields, batch_mean, one_hot


class ICaRLParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    classifier: Literal["nme", "network"] = Field(
        default="nme", description="accuracy-matrix classifier: nearest mean of exemplars, or the network's own head"
    )


@dataclass(frozen=True)
class ICaRLObjective(RowFields):
    """iCaRL's BCE with distillation targets on the old classes (Alg. 3; module docstring), one row per client
    ``[S, …]``: θ_old [S, P] and the old classes [S, K] bool, or [S, 0] before any task has ended. Each sample's
    loss is summed over its classes and averaged over the batch's real samples (``mask`` 1 on the batched
    executor's padded rows)."""

    rows: ClassVar[tuple[str, ...]] = ("old_model", "old")
    old_model: torch.Tensor
    old: torch.Tensor

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
        targets = one_hot(y, logits.shape[1]).to(logits.dtype)
        allowed = torch.ones_like(logits, dtype=torch.bool) if model.label_mask is None else model.label_mask[y]
        if self.old.shape[-1]:  # a task has ended: its classes are old
            old_logits = model.frozen_logits(self.old_model, buffers, x)
            targets = torch.where(self.old, torch.sigmoid(old_logits), targets)
            allowed = allowed | self.old
        bce = F.binary_cross_entropy_with_logits(logits, targets, reduction="none")
        return batch_mean((bce * allowed).sum(1), mask)


def herding(features: torch.Tensor, count: int) -> list[int]:
    """iCaRL Alg. 4 on L2-normalised features ``[n, d]``: ``count`` distinct rows, in selection order."""
    mu = features.mean(0)
    chosen: list[int] = []
    total = torch.zeros_like(mu)
    free = torch.ones(len(features), dtype=torch.bool, device=features.device)
    for k in range(1, min(count, len(features)) + 1):
        dist = (mu - (features + total) / k).norm(dim=1).masked_fill(~free, float("inf"))
        pick = int(dist.argmin())
        chosen.append(pick)
        total = total + features[pick]
        free[pick] = False
    return chosen


def nearest_mean(features: torch.Tensor, means: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """argmin over allowed classes with a mean of ‖φ̂ − μ_c‖ per row; −1 where no allowed class has one."""
    dist = torch.cdist(features, means).masked_fill(~allowed | means.isnan().any(1), float("inf"))
    pred = dist.argmin(1)
    return torch.where(torch.isfinite(dist.min(1).values), pred, torch.full_like(pred, -1))


@state
class ICaRLState(ServerState):
    old_model: torch.Tensor  # θ_old [P]
    old: torch.Tensor  # which classes are old, [K] bool ([0] before any task has ended)


class OldClasses(NamedTuple):
    old_model: torch.Tensor  # [S, P]
    old: torch.Tensor  # [S, K]


@ALGORITHMS.register(
    "icarl_fl",
    "iCaRL-FL: FedAvg with herded exemplars, sigmoid distillation and a nearest-mean-of-exemplars classifier",
    ICaRLParams,
    label="iCaRL-FL",
    compression=True,
    local_optimizer=True,
    own_loss=True,
    replay_per_step=True,
    vmap_server=True,
)
class ICaRLFL(Algorithm):
    """Local steps on iCaRL's loss over current data + exemplars; herding and NME at each task's end."""

    params: ICaRLParams

    def init_state(self, x0: torch.Tensor) -> ICaRLState:
        old = torch.zeros(0, dtype=torch.bool, device=x0.device)
        return extend(super().init_state(x0), ICaRLState, old_model=x0.clone(), old=old)

    def client_state(self, state: ICaRLState, clients: torch.Tensor) -> OldClasses:
        """θ_old and the old classes, held by every client (free; module docstring)."""
        rows = len(clients)
        return OldClasses(state.old_model.expand(rows, -1), state.old.expand(rows, -1))

    def objective(self, ctx: RoundContext) -> ICaRLObjective:
        """The round's loss of each client row: θ_old and the old classes."""
        return ICaRLObjective(ctx.held.old_model, ctx.held.old)

    def local_step(self, ctx: RoundContext, x: torch.Tensor, carry: Any, grad: GradFn) -> tuple[torch.Tensor, Any]:
        return self.ctx.local_optimizer.step(x, grad(x, self.objective(ctx)), carry, ctx.lr)

    # -- task end ------------------------------------------------------------------------
    def end_task(self, state: ICaRLState, data: TaskData) -> tuple[ICaRLState, Logs]:
        """Herd every client's exemplars of the task, set θ_old and the old classes, score NME."""
        if data.stream is None or data.memory is None or data.outputs is None:
            raise ValueError("icarl_fl's end_task needs the task stream, the replay memories and outputs (TaskData)")
        x = state.x
        for client, part in enumerate(data.parts):
            self.herd(data, x, client, part)
        class_task = torch.as_tensor(data.stream.class_task, device=x.device)
        old = (class_task >= 0) & (class_task <= data.task)
        return dataclasses.replace(state, old_model=x.clone(), old=old), self.score(data, x)

    def herd(self, data: TaskData, x: torch.Tensor, client: int, part: torch.Tensor) -> None:
        """Replace the client's random slot of the task by herded exemplars with the same class counts."""
        assert data.outputs is not None and data.memory is not None
        feats, _, labels = data.outputs(x, "train", part)
        feats, labels_np, part_np = F.normalize(feats, dim=1), labels.cpu().numpy(), part.cpu().numpy()
        slot = data.memory.slots[client][data.task]
        slot_labels = labels_np[np.isin(part_np, slot)]
        kept = []
        for c in np.unique(slot_labels):
            rows = np.flatnonzero(labels_np == c)
            picks = herding(feats[torch.as_tensor(rows, device=feats.device)], int((slot_labels == c).sum()))
            kept.append(part_np[rows[picks]])
        data.memory.slots[client][data.task] = np.sort(np.concatenate(kept)).astype(np.int64) if kept else slot

    def class_means(self, data: TaskData, x: torch.Tensor, num_classes: int) -> tuple[torch.Tensor, int]:
        """μ_c ``[K, d]`` over every client's exemplars (NaN rows for classes without one), and d."""
        assert data.outputs is not None and data.memory is not None
        sums, counts = None, torch.zeros(num_classes, dtype=x.dtype, device=x.device)
        for client in range(len(data.memory.slots)):
            memory = data.memory.indices(client)
            if len(memory) == 0:
                continue
            feats, _, labels = data.outputs(x, "train", torch.as_tensor(memory))
            feats = F.normalize(feats, dim=1)
            sums = feats.new_zeros((num_classes, feats.shape[1])) if sums is None else sums
            sums.index_add_(0, labels, feats)
            counts.index_add_(0, labels, torch.ones_like(labels, dtype=x.dtype))
        assert sums is not None, "every memory is empty at a task's end"
        means = F.normalize(sums / counts.unsqueeze(1), dim=1)  # 0/0 = NaN rows stay NaN
        return means, sums.shape[1]

    def score(self, data: TaskData, x: torch.Tensor) -> dict[str, Any]:
        """The NME and the network's accuracy-matrix rows under the task's masks (module docstring)."""
        assert data.outputs is not None and data.stream is not None
        feats, logits, labels = data.outputs(x, "test")
        mask = torch.as_tensor(data.stream.label_mask(data.task), device=labels.device)[labels]
        means, dim = self.class_means(data, x, logits.shape[1])
        nme = nearest_mean(F.normalize(feats, dim=1), means.to(feats.dtype), mask) == labels
        network = logits.masked_fill(~mask, float("-inf")).argmax(1) == labels
        rows = {
            name: [float(hit[torch.as_tensor(idx, device=hit.device)].float().mean()) for idx in data.stream.test]
            for name, hit in (("nme", nme), ("network", network))
        }
        seen = int((~means.isnan().any(1)).sum())
        logs: dict[str, Any] = {
            "task_acc_nme": rows["nme"],
            "task_acc_network": rows["network"],
            "nme_bits_up": len(data.memory.slots) * seen * (dim + 1) * BITS_PER_FLOAT,  # type: ignore[union-attr]
            "nme_bits_down": len(data.memory.slots) * seen * dim * BITS_PER_FLOAT,  # type: ignore[union-attr]
        }
        if self.params.classifier == "nme":
            logs["task_acc"] = rows["nme"]
        return logs
