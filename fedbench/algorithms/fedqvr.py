"""FedQVR and FedQVR-E (Wang, Xu, You, Shao, Quek, "Communication-Efficient Federated Learning by
Quantized Variance Reduction for Heterogeneous Wireless Edge Networks"), Algorithms 1 and 2."""

import dataclasses
import math
from typing import Any, Literal, NamedTuple

import torch
from pydantic import BaseModel, ConfigDict, Field

from fedbench.algorithms.base import (
    ALGORITHMS,
    Algorithm,
    AlgorithmContext,
    GradFn,
    Logs,
    Message,
    RoundContext,
    Upload,
)
from fedbench.algorithms.client_table import ClientTable
from fedbench.algorithms.state import ServerState, state
from fedbench.compress import Compressed, StochasticQuantizer
from fedbench.optim.server import ServerOptimizer
from fedbench.optim.transform import Rate


@state
class FedQVRState(ServerState):
    """θ (``x``), c and the c_i; ``opt`` is empty (no server optimizer, Eq. 12)."""

    c: torch.Tensor  # [P]
    c_i: ClientTable  # [N, P]


class VariateRows(NamedTuple):
    c_i: torch.Tensor  # [S, P]


class StepScale(NamedTuple):
    scale: torch.Tensor  # s_i = a/(ηẼ_i), [S, 1] (uploaded free unless ``count_scalar``)


class FedQVRParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    gamma: float = Field(default=0.3, gt=0, description="γ: proximal weight toward θ0 in Eq. 9; θ0 = θ − c/γ")
    a: float = Field(default=0.3, gt=0, le=1, description="a: weight of the new gradient estimate in c_i (Eq. 10)")
    count_scalar: bool = Field(
        default=False, description="charge the uploaded scalar a/(ηẼ_i) as 32 bits (the paper's Table I does not)"
    )
    aggregation: Literal["paper", "renormalized"] = Field(
        default="paper",
        description="Eq. 12 as printed, θ0 + (N/m)Σ_{i∈A} p_i Δ_i with p_i = n_i/n over all N clients (paper), or "
        "θ0 + Σ_{i∈A} (n_i/Σ_{j∈A} n_j) Δ_i, renormalised over the clients received (renormalized)",
    )


def effective_steps(steps: torch.Tensor, gamma_eta: Rate) -> torch.Tensor:
    """Ẽ_i = (1 − (1+γη)^(−K_i))/(γη) (Alg. 1), evaluated as −expm1(−K·log1p(γη))/(γη) in float64."""
    return -torch.expm1(-steps.double() * math.log1p(gamma_eta)) / gamma_eta


@ALGORITHMS.register(
    "fedqvr",
    "FedQVR: proximal local steps toward θ − c/γ, quantized upload, control variates updated from it",
    FedQVRParams,
    label="FedQVR",
    server={"weighting": "uniform"},
    compression=True,
    row_params=("gamma", "a"),
    vmap_server=True,
)
class FedQVR(Algorithm):
    """FedQVR Alg. 1 (Eqs. 9–12).

    The server keeps θ (``x``) and c; client i keeps c_i (an ``[N, P]`` table, 0 at the start).
    Round r: the server broadcasts θ0 = θ − c/γ (the only downlink vector). Each sampled client
    starts at θ0 and takes its own K_i = ``ctx.steps`` proximal steps (Eq. 9)
    φ ← (φ − η(g_i(φ) − c_i) + γη·θ0)/(1 + γη), then uploads Δ_i = Q(φ − θ0) through the scenario's
    compressor and the scalar s_i = a/(ηẼ_i), Ẽ_i = (1 − (1+γη)^(−K_i))/(γη) (free unless
    ``count_scalar``). Updates: c_i ← c_i − s_i Δ_i (Eq. 10), c ← c − Σ_{i∈A} p_i s_i Δ_i with
    p_i = n_i/n over all N clients (Eq. 11), so c = Σ_i p_i c_i holds after every round, and
    θ ← θ0 + (N/m) Σ_{i∈A} p_i Δ_i (Eq. 12, ``aggregation: paper``, the default): an unbiased
    estimate of Σ_{i=1}^N p_i Δ_i under uniform sampling of m clients, not an average unless the
    n_i are equal. ``aggregation: renormalized`` uses n_i/Σ_{j∈A} n_j instead (fedbench's earlier
    rule); the two agree when all n_i are equal.

    The 1/m is the engine's uniform weight u_i (``server.weighting: uniform``, the registered
    default; other weightings are refused), so outages need no special case (``wireless``, notes
    §12.3). A is the set of uploads received; the lost ones keep c_i and add nothing to c. Under
    ``outage_aggregation: zero_fill`` u_i = 1/(number sampled): Eq. 12 as printed, with N/m kept and a
    lost Δ_i contributing zero. Under ``renormalize`` u_i = 1/|A|: θ0 + (N/|A|)Σ_{i∈A} p_i Δ_i. In
    general θ ← θ0 + Σ_{i∈A} N p_i u_i Δ_i (paper) or θ0 + (Σ_{j∈A} u_j) Σ_{i∈A} (n_i/Σ_{j∈A} n_j) Δ_i
    (renormalized: scaled by the fraction received under zero_fill, 1 otherwise).

    FedQVR has no server learning rate: the server block must keep optimizer ``sgd``, lr 1,
    momentum 0 and weighting ``uniform`` (anything else is refused).
    """

    params: FedQVRParams

    def __init__(self, params: BaseModel, server: ServerOptimizer, ctx: AlgorithmContext):
        super().__init__(params, server, ctx)
        spec = server.spec
        if spec.optimizer != "sgd" or spec.lr != 1.0 or spec.momentum != 0.0:
            raise ValueError(
                "FedQVR has no server optimizer (θ ← θ0 + (N/m)Σ p_i Δ_i, Eq. 12): server.optimizer must be sgd "
                f"with lr 1 and momentum 0, got optimizer={spec.optimizer}, lr={spec.lr}, momentum={spec.momentum}"
            )
        if spec.weighting != "uniform":
            raise ValueError(
                "FedQVR weighs by p_i = n_i/n itself (Eqs. 11–12) and takes only the engine's 1/m: server.weighting "
                f"must be uniform, got {spec.weighting!r}; for n_i/Σ_{{j∈A}} n_j set aggregation: renormalized"
            )

    def init_state(self, x0: torch.Tensor) -> FedQVRState:
        return FedQVRState(x0.clone(), (), torch.zeros_like(x0), self.client_table(x0))

    def broadcast(self, state: FedQVRState, clients: torch.Tensor) -> Message:
        """θ0 = θ − c/γ (Alg. 1 line 3): clients start from it, so ``ctx.start`` is θ0."""
        return {"x": state.x - state.c / self.params.gamma}

    def client_state(self, state: FedQVRState, clients: torch.Tensor) -> VariateRows:
        return VariateRows(state.c_i[clients])

    def local_step(self, ctx: RoundContext, x: torch.Tensor, carry: Any, grad: GradFn) -> tuple[torch.Tensor, Any]:
        """Eq. 9: φ ← (φ − η(g_i(φ) − c_i) + γη·θ0)/(1 + γη)."""
        ge = self.params.gamma * ctx.lr
        return (x - ctx.lr * (grad(x) - ctx.held.c_i) + ge * ctx.broadcast["x"]) / (1 + ge), carry

    def quantize(self, ctx: RoundContext, rows: torch.Tensor) -> Compressed:
        """Q(φ − θ0, B) with the scenario's compressor (FedQVR-E overrides the width per client)."""
        return self.compress(ctx, rows)

    def upload(self, ctx: RoundContext, x: torch.Tensor, carry: Any) -> Upload:
        """Δ_i = Q(φ − θ0) and s_i = a/(ηẼ_i) (Alg. 1 lines 9–11)."""
        eff = effective_steps(ctx.steps, self.params.gamma * ctx.lr)
        scale = (self.params.a / (ctx.lr * eff)).to(x.dtype).unsqueeze(1)
        delta = self.quantize(ctx, x - ctx.broadcast["x"])
        if self.params.count_scalar:
            return Upload({"delta": delta, "scale": scale})
        return Upload({"delta": delta}, StepScale(scale))

    def server_update(
        self, state: FedQVRState, ctx: RoundContext, up: Upload, weights: torch.Tensor
    ) -> tuple[FedQVRState, Logs]:
        """Eqs. 10–12 with the decoded (quantized) Δ_i used in all three; ``weights`` are the
        engine's uniform u_i = 1/m (see the class docstring for outages)."""
        delta = up.sent["delta"]
        scale = up.sent["scale"] if self.params.count_scalar else up.kept.scale
        sizes = ctx.client_sizes().to(delta)
        p = sizes[ctx.clients] / sizes.sum()  # p_i = n_i/n over all N clients
        step = scale * delta  # s_i Δ_i, [S, P]
        c_i = state.c_i.add(ctx.clients, step, alpha=-1.0)  # Eq. 10
        c = state.c - p @ step  # Eq. 11
        u = weights.to(delta)
        if self.params.aggregation == "paper":
            w = self.ctx.num_clients * p * u  # (N/m) p_i
        else:
            w = u.sum() * p / p.sum()  # n_i/Σ_{j∈A} n_j (× the fraction received under zero_fill)
        x = ctx.broadcast["x"] + w @ delta  # Eq. 12
        return dataclasses.replace(state, x=x, c=c, c_i=c_i), {}


@ALGORITHMS.register(
    "fedqvr_e",
    "FedQVR-E: FedQVR with per-device bit widths from the wireless bandwidth allocation",
    FedQVRParams,
    label="FedQVR-E",
    server={"weighting": "uniform"},
    compression=True,
    inputs=("bits",),
    row_params=("gamma", "a"),
    vmap_server=True,
)
class FedQVRE(FedQVR):
    """FedQVR-E Alg. 2: FedQVR where received client i quantizes with its own width B_i.

    The engine allocates the widths (Problem 30, floored) and provides them as the input
    ``bits`` ``[S]`` (``ctx.inputs``), having already removed devices below the minimum width;
    row i then costs d(B_i + 1) + μ bits (Eq. 27). Without allocated widths the scenario's
    configured B is used, i.e. FedQVR. θ follows Eq. 12 with m the number sampled before removal
    under ``zero_fill`` (as Alg. 2 prints it) or |A| after removal and losses under ``renormalize``
    (notes §5.5). c follows Eq. 11 (Alg. 2 line 11's extra 1/N is a typo that
    would break c = Σ p_i c_i, notes §3.1). Widths ≥ 24 are sent unquantized (see
    :mod:`fedbench.compress`). Needs the ``stochastic`` compressor when widths are given.
    """

    def quantize(self, ctx: RoundContext, rows: torch.Tensor) -> Compressed:
        bits = ctx.inputs.get("bits")
        if bits is None:
            return self.compress(ctx, rows)
        compressor = self.ctx.compressor
        if not isinstance(compressor, StochasticQuantizer):
            raise ValueError(
                f"fedqvr_e quantizes with per-device widths and needs compression kind 'stochastic', "
                f"got {type(compressor).__name__}"
            )
        return compressor.with_bits(rows, bits, self.ctx.seed, ctx.round, ctx.clients)
