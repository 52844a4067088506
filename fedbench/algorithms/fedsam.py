"""FedSAM (Qu et al. 2022; Caldarola et al. 2022): sharpness-aware local steps."""

from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field

from fedbench.algorithms.base import ALGORITHMS, Algorithm, GradFn, RoundContext


class FedSAMParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rho: float = Field(default=0.1, gt=0, description="SAM neighbourhood radius ρ")


@ALGORITHMS.register(
    "fedsam",
    "FedSAM: local SAM steps (gradient at the worst point of a ρ-ball)",
    FedSAMParams,
    label="FedSAM",
    row_params=("rho",),
    client_dp=True,
    vmap_server=True,
)
class FedSAM(Algorithm):
    """Local SAM step (Foret et al. 2021, Eq. 2 with the first-order ε̂):
    ε = ρ·g(x)/‖g(x)‖, x ← x − η_l·g(x + ε), both gradients on the same minibatch (two
    forward/backward passes per step); the server averages as FedAvg. The norm is over the
    whole flattened model."""

    params: FedSAMParams

    def local_step(self, ctx: RoundContext, x: torch.Tensor, carry: Any, grad: GradFn) -> tuple[torch.Tensor, Any]:
        g = grad(x)
        eps = self.params.rho * g / (g.norm(dim=1, keepdim=True) + 1e-12)
        return x - ctx.lr * grad(x + eps), carry
