"""FedDyn (Acar et al. 2021, ICLR): dynamic regularization."""

from typing import Any, NamedTuple

import torch
from pydantic import BaseModel, ConfigDict, Field

from fedbench.algorithms.base import ALGORITHMS, Algorithm, GradFn, Logs, RoundContext, Upload, weighted_mean
from fedbench.algorithms.client_table import ClientTable
from fedbench.algorithms.state import ServerState, extend, state


@state
class FedDynState(ServerState):
    h: torch.Tensor  # h^t [P]
    grad_i: ClientTable  # ∇L_k(θ_k^t) [N, P]


class DynRows(NamedTuple):
    grad_i: torch.Tensor  # [S, P]


class FedDynParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    alpha: float = Field(default=0.01, gt=0, description="regularization strength α")


@ALGORITHMS.register(
    "feddyn",
    "FedDyn: local objective with a dynamic linear + quadratic regularizer",
    FedDynParams,
    label="FedDyn",
    server={"weighting": "uniform"},
    row_params=("alpha",),
    vmap_server=True,
)
class FedDyn(Algorithm):
    """FedDyn Alg. 1.

    Client k minimizes L_k(θ) − ⟨∇L_k(θ_k^{t−1}), θ⟩ + (α/2)‖θ − θ^{t−1}‖², i.e. local steps
    θ ← θ − η_l(g_k(θ) − ∇L_k(θ_k^{t−1}) + α(θ − θ^{t−1})), then sets
    ∇L_k(θ_k^t) = ∇L_k(θ_k^{t−1}) − α(θ_k^t − θ^{t−1}) (kept in the ``[N, P]`` table ``grad_i``,
    initialised to 0). Server: h^t = h^{t−1} − α(1/N)Σ_{k∈P_t}(θ_k^t − θ^{t−1}) and
    θ^t = (1/|P_t|)Σ_{k∈P_t} θ_k^t − h^t/α; the change θ^t − θ^{t−1} goes through the server
    optimizer (the identity at its defaults). Aggregation is uniform over P_t, as in the paper,
    unless ``server.weighting`` says otherwise. The authors' code additionally divides α by the
    client's relative size; fedbench keeps α as written in the paper.
    """

    params: FedDynParams

    def init_state(self, x0: torch.Tensor) -> FedDynState:
        return extend(super().init_state(x0), FedDynState, h=torch.zeros_like(x0), grad_i=self.client_table(x0))

    def client_state(self, state: FedDynState, clients: torch.Tensor) -> DynRows:
        return DynRows(state.grad_i[clients])

    def local_step(self, ctx: RoundContext, x: torch.Tensor, carry: Any, grad: GradFn) -> tuple[torch.Tensor, Any]:
        alpha = self.params.alpha
        return x - ctx.lr * (grad(x) - ctx.held.grad_i + alpha * (x - ctx.broadcast["x"])), carry

    def server_update(
        self, state: FedDynState, ctx: RoundContext, up: Upload, weights: torch.Tensor
    ) -> tuple[FedDynState, Logs]:
        alpha, delta = self.params.alpha, up.sent["delta"]
        grad_i = state.grad_i.add(ctx.clients, delta, alpha=-alpha)
        h = state.h - alpha * delta.sum(0) / self.ctx.num_clients
        return self.server_step(state, weighted_mean(delta, weights) - h / alpha, h=h, grad_i=grad_i), {}
