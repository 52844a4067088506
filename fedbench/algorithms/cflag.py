"""C-FLAG (Keshri, Shah, Prasad: "On the Convergence of Continual Federated Learning Using Incrementally
Aggregated Gradients"), Alg. 1 with AdapLR (Alg. 2) as reconstructed in the notes (§2.4, §8).

Round t (Alg. 1): every client sends ∇g_i(x_t) (full current-task gradient) and ∇f_i†(x_t) (gradient
on a replay-memory draw; zero while the memory is empty, task 0); the server broadcasts
∇g(x_t) = Σ p_i ∇g_i(x_t) and F = ∇f†(x_t) = Σ p_i ∇f_i†(x_t). Each client runs FedTrack's local
phase (eq. 4 with the IAG estimate of eq. 5, by default ``iag: batch_table``; see
:mod:`fedbench.algorithms.fedtrack`), accumulating a_i = Σ_k ∇g_i′(x_{t,k}^i), then
uploads Δx_t^i = AdapLR(…) and the server sets x_{t+1} = Σ p_i Δx_t^i (App. eq. 22). Traffic: three
P-vectors each way per client and round (x, ∇g, F down; Δx, ∇g_i, ∇f_i† up).

AdapLR per client (Table 1; base rates β = η_l of the round, α = ``alpha`` or β):
Λ_{t,i} = ⟨F, a_i⟩; transference (Λ > 0): α_{t,i} = α, β_{t,i} = (1 − Lα)Λ/(L κ p_i ‖a_i‖²) with κ = N
(the round's client count; ``case: worst``) or 1 (``average``); interference (Λ ≤ 0):
α_{t,i} = α(1 − Λ/‖F‖²), β_{t,i} = β. The ratios β_{t,i}/β and α_{t,i}/α are clipped to
[``min_scale``, ``max_scale``] (default [0, ∞): only a negative β_{t,i}, possible for α > 1/L, is cut).
No adaptation (both ratios 1) when ``adaptive`` is off, F = 0 or a_i = 0. Then

* local SGD (the notes' consistent reconstruction, §2.4 / §8.2): rescale only the a_i part,
  x̃ = x_t − βK_i c_i − β_{t,i} a_i = x_{t,E} + (β − β_{t,i}) a_i;
* ``local.optimizer: adam`` (§8.4): Adam's step is not β·a_i, so AdapLR reads the displacement in
  gradient units, a_i = (x_t − x_{t,E})/β (what Alg. 2 line 4 recovers from x_{t,E}), and
  x̃ = x_t − β_{t,i} a_i = x_t + (β_{t,i}/β)(x_{t,E} − x_t). With this a_i the interference case is
  A-GEM's projection of the step actually taken, and a transference step has norm
  β_{t,i}‖a_i‖ ≤ (1 − Lα)‖F‖/(Lκp_i), as with SGD; rates computed on Σ_k ∇g_i′ instead rescaled Adam's
  step by up to ~10¹² and drove the unclipped rule to chance accuracy (configs/cflag/README.md, "C-FLAG defaults");

and Δx_t^i = x̃ − α_{t,i} F: one plain memory step per round (none when F = 0). Non-adaptive C-FLAG
keeps the memory step (Δ = x_{t,E} − αF; §8.1, unlike Alg. 2 line 2). E in the paper is the
client's number of local steps K_i.

Logged per round (``extra["cflag"]``): each client's Λ_{t,i}, α_{t,i}/α, β_{t,i}/β, the numbers of
interfering / transferring clients, Γ(t) of eq. (15) with the base rates and its adapted form
Γ_ad(t) = (L/2)‖Σ p_i β_{t,i} a_i‖² − Σ p_i β_{t,i}(1 − Lα_{t,i})Λ_{t,i} (notes §2.5). a_i and the
rates reach the server as the upload's free ``kept`` rows (:class:`AdapLRStats`): they are logs, not part
of the protocol. The logs are device tensors, read to the host with the round's metrics (no wait inside a
round), so a population updates its C-FLAG runs' servers as one vmapped call.

``cflag_gd`` is the theory form: local GD (no Adam) with eq. (5)'s IAG (``iag: sample``; exact for
``local.batch_size: 1`` and one pass per round, see :mod:`fedbench.algorithms.fedtrack`).
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

from fedbench.algorithms.base import ALGORITHMS, Logs, RoundContext, Upload, weighted_mean
from fedbench.algorithms.fedtrack import IAG, IAG_HELP, FedTrack, TrackCarry
from fedbench.optim.transform import Rate
from fedbench.strict import check_order


class KappaP(NamedTuple):
    kp: torch.Tensor  # κ·p_i of Table 1 per client [S] (set in prepare_round)


class AdapLRStats(NamedTuple):
    a: torch.Tensor  # a_i [S, P]
    stats: torch.Tensor  # (Λ_{t,i}, α_{t,i}/α, β_{t,i}/β, adapted) [S, 4]


class AdapLRParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    adaptive: bool = Field(default=True, description="AdapLR on (Alg. 2); false: fixed rates, memory step kept")
    case: Literal["worst", "average"] = Field(
        default="worst", description="Table 1 case: worst (L·N·p_i) or average (L·p_i)"
    )
    L: float = Field(default=5.0, gt=0, description="smoothness constant L of the adaptive rates (paper: 5)")
    alpha: float | None = Field(default=None, gt=0, description="memory step α; null: the round's local lr (α = β)")
    max_scale: float | None = Field(
        default=None, gt=0, description="upper clip of β_{t,i}/β and α_{t,i}/α (null: none)"
    )
    min_scale: float = Field(default=0.0, ge=0, description="lower clip of β_{t,i}/β and α_{t,i}/α")

    @model_validator(mode="after")
    def _scales(self) -> AdapLRParams:
        check_order(self, "min_scale", "max_scale")
        return self


class CFLAGParams(AdapLRParams):
    iag: IAG = Field(default="batch_table", description=IAG_HELP)


def adaptive_rates(
    F: torch.Tensor,
    a: torch.Tensor,
    alpha: Rate,
    beta: Rate,
    L: float,
    kp: torch.Tensor | float,
    adaptive: bool = True,
    min_scale: float = 0.0,
    max_scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """AdapLR's rates (Alg. 2 lines 5–12, Table 1) for rows a ``[S, P]`` against F ``[P]`` (or one F per
    row, ``[S, P]``): (Λ = ⟨F, a_i⟩, α_{t,i}/α, β_{t,i}/β, adapted) — κp_i = ``kp``; rows with F = 0 or
    a_i = 0 (or ``adaptive`` off) keep both ratios at 1 and ``adapted`` False."""
    F = F.expand_as(a)
    lam = (F * a).sum(1)
    f2, a2 = (F * F).sum(1), (a * a).sum(1)
    adapted = (f2 > 0) & (a2 > 0) & adaptive
    transfer, interfere = adapted & (lam > 0), adapted & (lam <= 0)
    one = torch.ones_like(lam)
    beta_t = (1 - L * alpha) * lam / (L * kp * torch.where(transfer, a2, one))
    beta_scale = torch.where(transfer, beta_t / beta, one)
    alpha_scale = torch.where(interfere, 1 - lam / torch.where(interfere, f2, one), one)
    beta_scale = torch.where(adapted, beta_scale.clamp(min=min_scale, max=max_scale), beta_scale)
    alpha_scale = torch.where(adapted, alpha_scale.clamp(min=min_scale, max=max_scale), alpha_scale)
    return lam, alpha_scale, beta_scale, adapted


@ALGORITHMS.register(
    "cflag",
    "C-FLAG: FedTrack local steps plus one global replay-memory step per round with AdapLR rates (3x communication)",
    CFLAGParams,
    label="C-FLAG",
    local_optimizer=True,
    inputs=("full_grad", "memory_grad"),
    vmap_server=True,
)
class CFLAG(FedTrack):
    """C-FLAG Alg. 1 + AdapLR (module docstring); ``iag`` as FedTrack's."""

    params: CFLAGParams  # type: ignore[assignment]  # narrows FedTrack.params (C-FLAG extends its fields)

    def alpha(self, ctx: RoundContext) -> Rate:
        """Memory step α: ``alpha`` or, by default, the round's local rate (α_t = β_t, paper Sec. 5)."""
        return ctx.lr if self.params.alpha is None else self.params.alpha

    def prepare_round(self, state: Any, ctx: RoundContext, weights: torch.Tensor) -> RoundContext:
        """Alg. 1 lines 2–3: broadcast ∇g(x_t) and F = ∇f†(x_t) = Σ p_i ∇f_i†(x_t); note κ·p_i per client."""
        ctx = (
            super().prepare_round(state, ctx, weights).sending(grad_f=weighted_mean(ctx.input("memory_grad"), weights))
        )
        kappa = len(weights) if self.params.case == "worst" else 1
        return ctx.holding(KappaP(kappa * weights))

    def rates(
        self, ctx: RoundContext, a: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        p = self.params
        return adaptive_rates(
            ctx.broadcast["grad_f"], a, self.alpha(ctx), ctx.lr, p.L, ctx.held.kp, p.adaptive, p.min_scale, p.max_scale
        )

    def upload(self, ctx: RoundContext, x: torch.Tensor, carry: TrackCarry) -> Upload:
        """AdapLR (Alg. 2 reconstructed): Δx_t^i = x̃ − α_{t,i} F, sent with ∇g_i(x_t) and ∇f_i†(x_t)."""
        x_t, F = ctx.broadcast["x"], ctx.broadcast["grad_f"]
        sgd = self.ctx.local_optimizer.name == "sgd"
        a = carry.acc if sgd else (x_t - x) / ctx.lr  # Adam: the displacement in gradient units (Alg. 2 line 4)
        lam, alpha_scale, beta_scale, adapted = self.rates(ctx, a)
        if sgd:  # x_t − βK_i c_i − β_{t,i} a_i
            x_tilde = x + (ctx.lr * (1 - beta_scale)).unsqueeze(1) * a
        else:  # Adam: x_t − β_{t,i} a_i, the current-task displacement scaled by β_{t,i}/β
            x_tilde = x_t + beta_scale.unsqueeze(1) * (x - x_t)
        moved = x_tilde - (self.alpha(ctx) * alpha_scale).unsqueeze(1) * F
        stats = torch.stack([lam, alpha_scale, beta_scale, adapted.to(lam.dtype)], 1)
        sent = {"delta": moved - x_t, "full_grad": ctx.input("full_grad"), "memory_grad": ctx.input("memory_grad")}
        return Upload(sent, AdapLRStats(a, stats))

    def server_update(self, state: Any, ctx: RoundContext, up: Upload, weights: torch.Tensor) -> tuple[Any, Logs]:
        """x_{t+1} = Σ p_i Δx_t^i (App. eq. 22; server optimizer SGD with lr 1) and the round's AdapLR logs."""
        new = self.server_step(state, weighted_mean(up.sent["delta"], weights))
        return new, {"cflag": self.round_log(ctx, up.kept, weights)}

    def round_log(self, ctx: RoundContext, kept: AdapLRStats, weights: torch.Tensor) -> Logs:
        """Λ_{t,i}, α_{t,i}/α, β_{t,i}/β per client; Γ(t) (eq. 15) and Γ_ad(t) (notes §2.5). Tensors on the
        device, read with the round's metrics; Γ's in float64, each operation as on host floats."""
        lam, alpha_scale, beta_scale, adapted = kept.stats.T
        a, L, alpha, beta = kept.a, self.params.L, self.alpha(ctx), ctx.lr
        w = weights.to(a.dtype)
        square, inner = (w @ a).square().sum().double(), (w @ lam).double()
        gamma = L * (beta * beta) / 2 * square - beta * (1 - L * alpha) * inner
        beta_i, alpha_i = beta * beta_scale, alpha * alpha_scale
        square_ad = ((w * beta_i) @ a).square().sum().double()
        gamma_ad = L / 2 * square_ad - ((w * beta_i * (1 - L * alpha_i)) @ lam).double()
        on = adapted > 0
        return {
            "clients": ctx.clients,
            "Lambda": lam,
            "alpha_scale": alpha_scale,
            "beta_scale": beta_scale,
            "interfering": (on & (lam <= 0)).sum(),
            "transferring": (on & (lam > 0)).sum(),
            "Gamma": gamma,
            "Gamma_ad": gamma_ad,
        }


class CFLAGGDParams(AdapLRParams):
    pass


@ALGORITHMS.register(
    "cflag_gd",
    "C-FLAG, theory form: local GD with the IAG of eq. (5) (local.batch_size: 1 for per-sample components)",
    CFLAGGDParams,
    label="C-FLAG-GD",
    inputs=("full_grad", "memory_grad"),
    vmap_server=True,
)
class CFLAGGD(CFLAG):
    """C-FLAG as analysed (Sec. 3–4): plain local GD, eq. (5)'s IAG over the step's components
    (``iag: sample``), AdapLR rescaling only a_i (§2.4). Refuses ``local.optimizer: adam``."""

    params: CFLAGGDParams  # type: ignore[assignment]  # no iag: the theory form fixes it (below)

    @property
    def iag(self) -> str:
        return "sample"
