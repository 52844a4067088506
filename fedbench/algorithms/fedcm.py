"""FedCM (Xu et al. 2021): client-level momentum."""

from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field

from fedbench.algorithms.base import ALGORITHMS, Algorithm, GradFn, Logs, Message, RoundContext, Upload, weighted_mean
from fedbench.algorithms.state import ServerState, extend, state


@state
class FedCMState(ServerState):
    momentum: torch.Tensor  # Δ_t [P], the last round's average applied gradient


class FedCMParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    alpha: float = Field(default=0.1, gt=0, le=1, description="weight α of the local gradient (1 − α on the momentum)")


@ALGORITHMS.register(
    "fedcm",
    "FedCM: local steps along α·gradient + (1−α)·last global update direction",
    FedCMParams,
    label="FedCM",
    row_params=("alpha",),
    vmap_server=True,
)
class FedCM(Algorithm):
    """FedCM Alg. 1.

    Local step: x ← x − η_l(α·g_i(x) + (1−α)·Δ_t). Server: x_{t+1} = x_t + η_g Σ w_i Δ_i and
    Δ_{t+1} = −Σ_i w_i Δ_i / (K_i·η_l), the average applied gradient of the round (Δ_i = x_i − x_t).
    Δ_0 = 0; Δ_t is broadcast with x_t (twice FedAvg's downlink). With lr decay, Δ_{t+1} is
    divided by the round-t rate, as in the FL-Simulator code.
    """

    params: FedCMParams

    def init_state(self, x0: torch.Tensor) -> FedCMState:
        return extend(super().init_state(x0), FedCMState, momentum=torch.zeros_like(x0))  # Δ_0 = 0

    def broadcast(self, state: FedCMState, clients: torch.Tensor) -> Message:
        return {"x": state.x, "momentum": state.momentum}

    def local_step(self, ctx: RoundContext, x: torch.Tensor, carry: Any, grad: GradFn) -> tuple[torch.Tensor, Any]:
        a = self.params.alpha
        return x - ctx.lr * (a * grad(x) + (1 - a) * ctx.broadcast["momentum"]), carry

    def server_update(
        self, state: FedCMState, ctx: RoundContext, up: Upload, weights: torch.Tensor
    ) -> tuple[FedCMState, Logs]:
        delta = up.sent["delta"]
        momentum = -weighted_mean(delta / (ctx.steps.unsqueeze(1) * ctx.lr), weights)
        return self.server_step(state, weighted_mean(delta, weights), momentum=momentum), {}
