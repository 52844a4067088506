"""FedCOMGATE (Haddadpour, Kamani, Mokhtari, Mahdavi 2021, AISTATS, Alg. 2): compressed uploads with
local gradient tracking."""

from typing import Any, Literal, NamedTuple

import torch
from pydantic import BaseModel, ConfigDict, Field

from fedbench.algorithms.base import ALGORITHMS, Algorithm, GradFn, Logs, RoundContext, Upload, weighted_mean
from fedbench.algorithms.client_table import ClientTable
from fedbench.algorithms.state import ServerState, extend, state


@state
class FedCOMGATEState(ServerState):
    delta_i: ClientTable  # δ_i [N, P]


class TrackingRows(NamedTuple):
    delta_i: torch.Tensor  # [S, P]


class ExactChange(NamedTuple):
    change: torch.Tensor  # x_i − x_t = −D_i unquantized, [S, P] (``fedtorch``)


class FedCOMGATEParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tracking: Literal["sampled", "fedtorch"] = Field(
        default="sampled",
        description="δ_i update: G_i − Ḡ with G_i = Q(D_i)/(ηK_i) and Ḡ their weighted mean over the clients "
        "received, which keeps Σ_i w_i δ_i = 0 under sampling (sampled), or (D_i − D̄)/(ηK_i) with the exact D_i "
        "and the mean model change D̄, as FedTorch's fedgate code (fedtorch)",
    )


@ALGORITHMS.register(
    "fedcomgate",
    "FedCOMGATE: local steps corrected by a gradient-tracking term δ_i, quantized model change",
    FedCOMGATEParams,
    label="FedCOMGATE",
    server={"weighting": "uniform"},
    compression=True,
    vmap_server=True,
)
class FedCOMGATE(Algorithm):
    """FedCOMGATE Alg. 2 for partial participation.

    Client i keeps δ_i (an ``[N, P]`` table, 0 at the start) and takes K_i local steps
    x ← x − η(g_i(x) − δ_i) from the global model x_t. With D_i = x_t − x_i it uploads Q(D_i)
    (the paper's Q(D_i/(ηK))·ηK; the magnitude grid scales with its input, so the two agree).
    The server forms D̄ = Σ_{i∈S} w_i Q(D_i) (uniform 1/|S| by default, as in FedTorch) and moves
    x ← x − η_g·D̄ (the server optimizer: sgd at lr η_g).

    Tracking under partial participation. Alg. 2 is stated with every device in every round and one
    τ = K (written for full participation, FedQVR notes §12.17). FedTorch (the authors' code) runs it
    on the round's online clients: D̄ averages them and only they update δ_i ← δ_i + (D_i − D̄)/(ηK_i)
    with their exact D_i (``tracking: fedtorch``). With equal K and no compression Σ_{i∈S} (D_i − D̄)
    = 0, so Σ_i δ_i stays 0 and the corrected directions g_i − δ_i average to the global gradient.
    With quantization (Σ_{i∈S} (D_i − Q(D_i))/(ηK) for equal K), unequal K_i, or a zero-filled
    outage, the sampled clients' increments do not sum to zero, and the clients not sampled, who
    keep their δ_j, never offset it: Σ_i δ_i ≠ 0.
    Derived here (``tracking: sampled``, the default): each sampled client i moves δ_i by G_i − Ḡ,
    with G_i = Q(D_i)/(ηK_i) (what the server received, per step of the client's own K_i) and
    Ḡ = Σ_{j∈S} w_j G_j / Σ_{j∈S} w_j over the clients received. Then Σ_{i∈S} w_i (G_i − Ḡ) = 0
    exactly, so Σ_{i=1}^N δ_i = 0 (uniform weights; Σ_i n_i δ_i = 0 with ``server.weighting:
    samples``) after every round whatever S, K_i, Q and lost uploads; unsampled clients keep δ_j.
    Both rules are Alg. 2 with full participation, equal K and Q = identity. Ḡ (or D̄) reaches the
    sampled clients after aggregation; that downlink message is not counted in ``bits_down`` (the
    broadcast is x only).
    """

    params: FedCOMGATEParams

    def init_state(self, x0: torch.Tensor) -> FedCOMGATEState:
        return extend(super().init_state(x0), FedCOMGATEState, delta_i=self.client_table(x0))

    def client_state(self, state: FedCOMGATEState, clients: torch.Tensor) -> TrackingRows:
        return TrackingRows(state.delta_i[clients])

    def local_step(self, ctx: RoundContext, x: torch.Tensor, carry: Any, grad: GradFn) -> tuple[torch.Tensor, Any]:
        """x ← x − η(g_i(x) − δ_i) (Alg. 2 local update)."""
        return x - ctx.lr * (grad(x) - ctx.held.delta_i), carry

    def upload(self, ctx: RoundContext, x: torch.Tensor, carry: Any) -> Upload:
        """Q(x_i − x_t) = −Q(D_i) on the uplink; for ``fedtorch`` the exact change stays with the client (kept)."""
        change = x - ctx.broadcast["x"]
        sent = {"delta": self.compress(ctx, change)}
        return Upload(sent, ExactChange(change) if self.params.tracking == "fedtorch" else None)

    def server_update(
        self, state: FedCOMGATEState, ctx: RoundContext, up: Upload, weights: torch.Tensor
    ) -> tuple[FedCOMGATEState, Logs]:
        """x ← x − η_g D̄; for the sampled i, δ_i += G_i − Ḡ (``sampled``) or (D_i − D̄)/(ηK_i) (``fedtorch``)."""
        received = up.sent["delta"]  # Q(x_i − x_t) = −Q(D_i)
        w = weights.to(received)
        mean = weighted_mean(received, w)  # −D̄
        steps = ctx.lr * ctx.steps.to(received).unsqueeze(1)  # ηK_i
        if self.params.tracking == "sampled":
            g = received / steps  # −G_i
            tracking = weighted_mean(g, w / w.sum()) - g  # G_i − Ḡ
        else:
            tracking = (mean - up.kept.change) / steps  # (D_i − D̄)/(ηK_i)
        delta_i = state.delta_i.add(ctx.clients, tracking)
        return self.server_step(state, mean, delta_i=delta_i), {}
