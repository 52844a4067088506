"""FedProx (Li et al. 2020, MLSys): local steps on f_i(x) + (μ/2)‖x − x_t‖²."""

import torch
from pydantic import BaseModel, ConfigDict, Field

from fedbench.algorithms.base import ALGORITHMS, Algorithm, GradFn, RoundContext


class FedProxParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    mu: float = Field(default=0.01, ge=0, description="proximal coefficient μ")


@ALGORITHMS.register(
    "fedprox", "FedProx: local SGD with a proximal term μ/2‖x − x_t‖²", FedProxParams, label="FedProx", compression=True
)
class FedProx(Algorithm):
    """Local step x ← x − η_l(∇f_i(x; ξ) + μ(x − x_t)) (FedProx Alg. 2, the inexact h_k solver)."""

    Params = FedProxParams

    def local_step(self, ctx: RoundContext, x: torch.Tensor, grad: GradFn) -> torch.Tensor:
        return x - ctx.lr * (grad(x) + self.params.mu * (x - ctx.broadcast["x"]))
