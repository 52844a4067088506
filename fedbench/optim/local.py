"""Local optimizers for algorithms whose local step is x ← x − η_l·d (``local.optimizer``).

The algorithm computes its direction d (the minibatch gradient for FedAvg) and hands it to
``ctx.local_optimizer.step(ctx, x, d)`` (reached as ``self.ctx.local_optimizer``):

* :class:`LocalOptimizer` (``sgd``, the default): x − η_l·d, bit for bit the plain step.
* :class:`LocalAdam` (``adam``): Kingma & Ba (2015) Alg. 1 on d, with moments m, v and the step
  counter kept in the round's per-client scratch (``ctx.per_client["adam.m" | "adam.v" | "adam.k"]``),
  so every client starts each round from m = v = 0 (C-FLAG's clients: Adam reset every round,
  notes §8.8). Weight decay λ is already inside d (the engine's oracle returns g + λ·x), which is
  ``torch.optim.Adam(weight_decay=λ)``'s convention.

Only algorithms registered with ``local_optimizer=True`` route their step through it; the scenario
check refuses ``local.optimizer: adam`` for the others.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from fedbench.algorithms.base import RoundContext


class LocalOptimizer:
    """Plain local SGD: x ← x − η_l·d."""

    name = "sgd"

    def step(self, ctx: "RoundContext", x: torch.Tensor, direction: torch.Tensor) -> torch.Tensor:
        return x - ctx.lr * direction


@dataclass(frozen=True)
class LocalAdam(LocalOptimizer):
    """Adam on the direction d, per client, reset every round:
    m ← β1·m + (1−β1)·d, v ← β2·v + (1−β2)·d², x ← x − η_l·m̂/(√v̂ + ε), m̂ = m/(1−β1^k), v̂ = v/(1−β2^k)."""

    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    name = "adam"

    def step(self, ctx: "RoundContext", x: torch.Tensor, direction: torch.Tensor) -> torch.Tensor:
        scratch = ctx.per_client
        if "adam.k" not in scratch:
            scratch["adam.m"], scratch["adam.v"] = torch.zeros_like(x), torch.zeros_like(x)
            scratch["adam.k"] = x.new_zeros(x.shape[0])
        k = scratch["adam.k"] + 1
        m = self.beta1 * scratch["adam.m"] + (1 - self.beta1) * direction
        v = self.beta2 * scratch["adam.v"] + (1 - self.beta2) * direction * direction
        scratch["adam.m"], scratch["adam.v"], scratch["adam.k"] = m, v, k
        m_hat = m / (1 - self.beta1**k).unsqueeze(1)
        v_hat = v / (1 - self.beta2**k).unsqueeze(1)
        return x - ctx.lr * m_hat / (v_hat.sqrt() + self.eps)


def build_local_optimizer(name: str, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> LocalOptimizer:
    """The scenario's ``local.optimizer`` (``sgd`` or ``adam`` with ``local.betas``/``local.eps``)."""
    if name == "sgd":
        return LocalOptimizer()
    if name == "adam":
        return LocalAdam(betas[0], betas[1], eps)
    raise ValueError(f"local.optimizer must be sgd or adam, got {name!r}")
