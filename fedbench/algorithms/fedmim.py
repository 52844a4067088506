"""FedMIM (Liu et al., "Enhance Local Consistency in Federated Learning: A Multi-Step Inertial
Momentum Approach"): multi-step inertial momentum on every local step."""

import dataclasses
from typing import Any, NamedTuple

import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

from fedbench.algorithms.base import ALGORITHMS, Algorithm, GradFn, Logs, RoundContext, Upload
from fedbench.algorithms.state import ServerState, extend, state


@state
class FedMIMState(ServerState):
    history: torch.Tensor  # [x_t, x_{t−1}, …, x_{t−J}], [J + 1, P]


class Pushes(NamedTuple):
    push_alpha: torch.Tensor  # Σ_j α_j (x_{t−j−1} − x_{t−j}), [S, P]
    push_beta: torch.Tensor  # Σ_j β_j (x_{t−j−1} − x_{t−j}), [S, P]


class FedMIMParams(BaseModel):
    """α_j weights δ_{t−j} in the iterate shift, β_j in the gradient look-ahead; index 0 is the
    most recent global change (the paper's label 1). Defaults: the best row of Table III."""

    model_config = ConfigDict(extra="forbid")
    alpha: list[float] = Field(default_factory=lambda: [0.6, 0.3], description="inertial weights α_1..α_J")
    beta: list[float] = Field(default_factory=lambda: [0.9, 0.1], description="look-ahead weights β_1..β_J")

    @model_validator(mode="after")
    def _constraints(self) -> "FedMIMParams":
        if any(a < 0 for a in self.alpha) or any(b < 0 for b in self.beta):
            raise ValueError(f"alpha and beta must be ≥ 0, got alpha={self.alpha}, beta={self.beta}")
        if sum(self.alpha) >= 1:
            raise ValueError(f"sum(alpha) must be < 1 so that A = 1 − Σα > 0, got {sum(self.alpha):g}")
        return self

    @property
    def history(self) -> int:
        """J: how many past global changes the rule uses."""
        return max(len(self.alpha), len(self.beta))


def _weighted_changes(history: torch.Tensor, weights: list[float]) -> torch.Tensor:
    """Σ_j w_j (x_{t−j−1} − x_{t−j}) from ``history`` = [x_t, x_{t−1}, …, x_{t−J}]."""
    out = torch.zeros_like(history[0])
    for j, w in enumerate(weights):
        if w:
            out += w * (history[j + 1] - history[j])
    return out


@ALGORITHMS.register(
    "fedmim",
    "FedMIM: local steps with multi-step inertial momentum and a look-ahead gradient",
    FedMIMParams,
    label="FedMIM",
    vmap_server=True,
)
class FedMIM(Algorithm):
    """FedMIM Alg. 1.

    With δ_s = (x_{s−1} − x_s)/K and A = 1 − Σ_j α_j, every local step is
    x ← x − Σ_j α_j δ_{t−j} − A·η_l·∇f_i(x − Σ_j β_j δ_{t−j}; ξ): the gradient is taken at the
    look-ahead point and applied to the inertially shifted iterate. δ_s = 0 for s ≤ 0. K is each
    client's own step count K_i, so a client's per-round inertial push is Σ_j α_j (x_{t−j−1} − x_{t−j})
    whatever its K_i (identical to the paper when all K_i are equal). The server averages (η_g = 1).
    α = β = 0 is FedAvg; one α with β = 0 is FedCM with gradient weight 1 − α at a constant lr.

    Bits follow the paper's accounting: only the model goes each way; the past global models
    the δ's come from are assumed kept by every client (Alg. 1 broadcasts before sampling).
    """

    params: FedMIMParams

    def init_state(self, x0: torch.Tensor) -> FedMIMState:
        history = x0.unsqueeze(0).repeat(self.params.history + 1, 1)  # x_{−1} = … = x_0
        return extend(super().init_state(x0), FedMIMState, history=history)

    def client_state(self, state: FedMIMState, clients: torch.Tensor) -> Pushes:
        rows = len(clients)
        return Pushes(
            _weighted_changes(state.history, self.params.alpha).expand(rows, -1),
            _weighted_changes(state.history, self.params.beta).expand(rows, -1),
        )

    def local_step(self, ctx: RoundContext, x: torch.Tensor, carry: Any, grad: GradFn) -> tuple[torch.Tensor, Any]:
        p = self.params
        steps = ctx.steps.unsqueeze(1)
        m_alpha = ctx.held.push_alpha / steps
        m_beta = ctx.held.push_beta / steps
        damping = 1 - sum(p.alpha)
        return x - m_alpha - damping * ctx.lr * grad(x - m_beta), carry

    def server_update(
        self, state: FedMIMState, ctx: RoundContext, up: Upload, weights: torch.Tensor
    ) -> tuple[FedMIMState, Logs]:
        new, logs = super().server_update(state, ctx, up, weights)
        history = torch.cat([new.x.unsqueeze(0), state.history[:-1]])
        return dataclasses.replace(new, history=history), logs
