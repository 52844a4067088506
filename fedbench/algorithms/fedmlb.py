"""FedMLB (Kim, Kim & Han 2022, ICML): multi-level branched regularization, and FedMLBM.

The model is split into blocks B₁…B_B and a classifier C (``stages()``, see
``fedbench/models/registry.py``). Hybrid path b feeds the local features h_b = B_b(…B₁(x)) into
the **frozen global** blocks B_{b+1}…B_B and classifier, giving logits q_b; the main path gives p.
Each client minimises (GradMA notes §4.7, FedMLB Eq. 5–7)::

    L = CE(p, y) + λ1·mean_b CE(q_b, y) + λ2·mean_b KL(softmax(q_b/T) ‖ softmax(p/T))

The server averages models (FedAvg); FedMLBM uses server momentum (FedAvgM).

Choices, following the authors' code (``local_update_method/FedMLB.py``) where the notes are silent:

- KD direction: the hybrid (global) path's distribution is the target, KL(q_b ‖ p), mean over the
  batch (``KLDivLoss(log_softmax(p/T), softmax(q_b/T), "batchmean")``) with **no T² factor**, and
  the gradient flows through both p and q_b (q_b reaches the local blocks 1…b).
- Branches: ``branches`` if given, else the model's ``fedmlb_branches`` attribute if it has one
  (for GradMA's nets, notes §9.14), else one after every block before the classifier, as the
  authors' ResNet-18 (5 paths: stem, layer1–3, layer4+pool). For fedbench's ``lenet5`` the
  notes' choice (after each conv block and after fc1) is ``branches: [1, 2, 3]``.
- The global blocks run in train mode, like the authors' deep-copied global model, with a
  scratch copy of any BatchNorm buffers.

The loss is an :class:`~fedbench.models.flat.Objective` with one row per client (the global model), so it
trains on either client executor and in populations; batched, each row averages over its real samples.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field, field_validator

from fedbench.algorithms.base import ALGORITHMS, Algorithm, GradFn, RoundContext
from fedbench.models.flat import Buffers, FlatModel, RowFields, batch_mean, cross_entropy


class FedMLBParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    lambda1: float = Field(default=1.0, ge=0, description="weight λ1 of the hybrid paths' cross-entropy")
    lambda2: float = Field(default=1.0, ge=0, description="weight λ2 of the KL(hybrid ‖ main) distillation")
    temperature: float = Field(default=1.0, gt=0, description="distillation temperature T")
    branches: list[int] | None = Field(
        default=None,
        description="blocks b (1-based) after which a hybrid path leaves; default: the model's fedmlb_branches, "
        "else every block before the classifier",
    )

    @field_validator("branches")
    @classmethod
    def _distinct_positive(cls, value: list[int] | None) -> list[int] | None:
        if value is not None and (not value or min(value) < 1 or len(set(value)) != len(value)):
            raise ValueError(f"branches must be distinct block numbers ≥ 1, got {value}")
        return value


def distillation(
    q: torch.Tensor, p: torch.Tensor, temperature: float, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """KL(softmax(q/T) ‖ softmax(p/T)), summed over classes and averaged over the batch's real samples."""
    log_q, log_p = F.log_softmax(q / temperature, 1), F.log_softmax(p / temperature, 1)
    return batch_mean((log_q.exp() * (log_q - log_p)).sum(1), mask)


@dataclass(frozen=True)
class MLBObjective(RowFields):
    """FedMLB's local loss (module docstring) at a point, with the frozen global model, one row per client
    ``[S, P]`` (``[P]`` once :meth:`~fedbench.models.flat.RowFields.at` a client)."""

    rows: ClassVar[tuple[str, ...]] = ("global_model",)
    global_model: torch.Tensor
    lambda1: float
    lambda2: float
    temperature: float
    branches: tuple[int, ...] | None = None

    def __call__(
        self,
        model: FlatModel,
        point: torch.Tensor,
        buffers: Buffers,
        x: torch.Tensor,
        y: torch.Tensor,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        blocks = model.num_stages("fedmlb") - 1
        branches = self.branches or getattr(model.module, "fedmlb_branches", None) or tuple(range(1, blocks + 1))
        if max(branches) > blocks:
            raise ValueError(f"fedmlb branches must be between 1 and {blocks} for this model, got {list(branches)}")
        *features, p = model.run_stages(point, buffers, x)
        p = model.masked(p, y)  # continual heads (identity otherwise)
        scratch = {k: v.clone() for k, v in buffers.items()}
        ce, kd = [], []
        for b in branches:
            q = model.masked(model.run_stages(self.global_model, scratch, features[b - 1], start=b)[-1], y)
            ce.append(cross_entropy(q, y, mask))
            kd.append(distillation(q, p, self.temperature, mask))
        return cross_entropy(p, y, mask) + self.lambda1 * torch.stack(ce).mean() + self.lambda2 * torch.stack(kd).mean()


@ALGORITHMS.register(
    "fedmlb",
    "FedMLB: hybrid paths through frozen global blocks (CE + KD), FedAvg server",
    FedMLBParams,
    label="FedMLB",
    compression=True,
    own_loss=True,
    vmap_server=True,
)
class FedMLB(Algorithm):
    """Local step w ← w − η_l·∇L(w; ξ) with FedMLB's loss L (module docstring); server FedAvg."""

    params: FedMLBParams

    def objective(self, ctx: RoundContext, rows: torch.Tensor) -> MLBObjective:
        """The round's loss of each client row of ``rows`` [S, P]: the global model x_t."""
        p = self.params
        branches = tuple(p.branches) if p.branches is not None else None
        return MLBObjective(ctx.broadcast["x"].expand_as(rows), p.lambda1, p.lambda2, p.temperature, branches)

    def local_step(self, ctx: RoundContext, x: torch.Tensor, carry: Any, grad: GradFn) -> tuple[torch.Tensor, Any]:
        return x - ctx.lr * grad(x, objective=self.objective(ctx, x)), carry


@ALGORITHMS.register(
    "fedmlbm",
    "FedMLB with server momentum (FedAvgM server; GradMA's FedMLBM)",
    FedMLBParams,
    label="FedMLBM",
    server={"optimizer": "sgd", "momentum": 0.5},
    compression=True,
    own_loss=True,
    vmap_server=True,
)
class FedMLBM(FedMLB):
    """FedMLB's local loss with the FedAvgM server m ← β·m + Δ, x ← x + η_g·m (GradMA Alg. 5; β = 0.5)."""
