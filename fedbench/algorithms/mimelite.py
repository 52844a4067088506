"""MimeLite (Karimireddy et al. 2020, "Mime: Mimicking Centralized Stochastic Algorithms in
Federated Learning") with SGD-momentum as the base optimizer."""

from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field

from fedbench.algorithms.base import ALGORITHMS, Algorithm, GradFn, Logs, Message, RoundContext, Upload, weighted_mean
from fedbench.algorithms.state import ServerState, extend, state


@state
class MimeState(ServerState):
    s: torch.Tensor  # the mimicked optimizer's momentum [P]


class MimeLiteParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    beta: float = Field(
        default=0.9, ge=0, lt=1, description="momentum β of the mimicked SGDm (Mime's β; GradMA tunes {0.1, 0.5, 0.9})"
    )


@ALGORITHMS.register(
    "mimelite",
    "MimeLite: local steps with the server's frozen SGD-momentum state (2x communication)",
    MimeLiteParams,
    label="MimeLite",
    inputs=("full_grad",),
    row_params=("beta",),
    vmap_server=True,
)
class MimeLite(Algorithm):
    """MimeLite (Mime Alg. 1 with the SGDm base optimizer, Mime Eq. 3 / GradMA notes §4.10).

    The server sends the model x and the momentum s (s_0 = 0). Client i computes
    c_i = ∇f_i(x) on its whole local data (the engine's ``full_grad``), then takes its K_i local steps
    y ← y − η_l((1 − β)·∇f_i(y; ξ) + β·s) with s frozen, and uploads Δy_i = y − x and c_i.
    Server: s ← (1 − β)·Σ w_i c_i + β·s, the momentum update of SGDm on the sampled full-batch
    gradient, and x ← x + η_g·Σ w_i Δy_i through the server optimizer (η_g = ``server.lr``;
    keep ``optimizer: sgd, momentum: 0`` to match the paper, momentum already lives in s).
    The weights w_i are the scenario's aggregation weights (Mime: 1/|S|, ``weighting: uniform``).
    Two P-vectors each way: twice FedAvg's traffic in both directions. β = 0 is FedAvg.
    """

    params: MimeLiteParams

    def init_state(self, x0: torch.Tensor) -> MimeState:
        return extend(super().init_state(x0), MimeState, s=torch.zeros_like(x0))

    def broadcast(self, state: MimeState, clients: torch.Tensor) -> Message:
        return {"x": state.x, "s": state.s}

    def local_step(self, ctx: RoundContext, x: torch.Tensor, carry: Any, grad: GradFn) -> tuple[torch.Tensor, Any]:
        beta = self.params.beta
        return x - ctx.lr * ((1 - beta) * grad(x) + beta * ctx.broadcast["s"]), carry

    def upload(self, ctx: RoundContext, x: torch.Tensor, carry: Any) -> Upload:
        return Upload({"delta": x - ctx.broadcast["x"], "full_grad": ctx.input("full_grad")})

    def server_update(
        self, state: MimeState, ctx: RoundContext, up: Upload, weights: torch.Tensor
    ) -> tuple[MimeState, Logs]:
        beta = self.params.beta
        s = (1 - beta) * weighted_mean(up.sent["full_grad"], weights) + beta * state.s
        return self.server_step(state, weighted_mean(up.sent["delta"], weights), s=s), {}
