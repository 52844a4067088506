"""FedProx (Li et al. 2020, MLSys): local steps on f_i(x) + (μ/2)‖x − x_t‖²."""

from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field

from fedbench.algorithms.base import ALGORITHMS, Algorithm, GradFn, RoundContext


class FedProxParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    mu: float = Field(default=0.01, ge=0, description="proximal coefficient μ")


@ALGORITHMS.register(
    "fedprox",
    "FedProx: local SGD with a proximal term μ/2‖x − x_t‖²",
    FedProxParams,
    label="FedProx",
    compression=True,
    row_params=("mu",),
    client_dp=True,
    vmap_server=True,
)
class FedProx(Algorithm):
    """Local step x ← x − η_l(∇f_i(x; ξ) + μ(x − x_t)) (FedProx Alg. 2, the inexact h_k solver)."""

    params: FedProxParams

    def local_step(self, ctx: RoundContext, x: torch.Tensor, carry: Any, grad: GradFn) -> tuple[torch.Tensor, Any]:
        return x - ctx.lr * (grad(x) + self.params.mu * (x - ctx.broadcast["x"])), carry


@ALGORITHMS.register(
    "fedproxm",
    "FedProxM: FedProx local steps with server momentum (GradMA Alg. 5)",
    FedProxParams,
    label="FedProxM",
    server={"momentum": 0.5},
    compression=True,
    row_params=("mu",),
    client_dp=True,
    vmap_server=True,
)
class FedProxM(FedProx):
    """FedProx local steps and the FedAvgM server, GradMA Alg. 5: m ← β1·m + Δ, x ← x + η_g·m with
    Δ = Σ w_i (x_i − x_t); default β1 = 0.5 (GradMA notes §9.7); ``server.momentum: 0`` is FedProx."""
