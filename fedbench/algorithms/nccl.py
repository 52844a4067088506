"""NCCL-FL: NCCL (Han et al., UAI 2023, "nonconvex continual learning") run on every client, with
FedAvg on top — C-FLAG's baseline (notes §5, row NCCL-FL).

Each local step draws a current minibatch J and a replay-memory minibatch I (the engine's per-step
replay kept apart: ``replay_per_step`` + ``replay_apart``, ``continual.memory.replay_batch`` samples
from the ``("replay_step", task, i, position)`` stream) and moves

    x ← x − α_H ∇f_I(x) − β_H ∇g_J(x),   Λ_H = ⟨∇f_I(x), ∇g_J(x)⟩,

with the Λ-sign rule of C-FLAG's Table 1 at N = p_i = E = 1
(:func:`~fedbench.algorithms.cflag.adaptive_rates`): transference (Λ > 0) α_H = α,
β_H = (1 − Lα)Λ/(L‖∇g_J‖²); interference (Λ ≤ 0) α_H = α(1 − Λ/‖∇f_I‖²), β_H = α (A-GEM's projection).
α = ``alpha`` or the round's local rate η_l; ratios clipped to [``min_scale``, ``max_scale``]. With an
empty memory (task 0) ∇f_I = 0 and the step is plain SGD, so NCCL-FL is FedAvg there. The step goes
through ``local.optimizer`` as the direction d = (α_H ∇f_I + β_H ∇g_J)/η_l (SGD takes exactly the step
above; Adam normalises d).
Server: FedAvg, x_{t+1} = x_t + Σ p_i (x_i − x_t); one P-vector each way.

Reading of NCCL as Table 1 with N = p = E = 1 follows the C-FLAG notes (§5); not checked against
Han et al.'s own code.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

from fedbench.algorithms.base import ALGORITHMS, Algorithm, GradFn, Logs, RoundContext, Upload, weighted_mean
from fedbench.algorithms.cflag import adaptive_rates
from fedbench.optim.transform import OptState
from fedbench.strict import check_order


class StepStats(NamedTuple):
    stats: torch.Tensor  # Σ over the client's steps of (interfering, transferring, β_H/α), [S, 3]


class NCCLCarry(NamedTuple):
    stats: torch.Tensor  # as StepStats
    opt: OptState  # the local optimizer's state


class NCCLParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    L: float = Field(default=5.0, gt=0, description="smoothness constant L of the adaptive rates")
    alpha: float | None = Field(default=None, gt=0, description="base step α; null: the round's local lr")
    max_scale: float | None = Field(default=None, gt=0, description="upper clip of α_H/α and β_H/α (null: none)")
    min_scale: float = Field(default=0.0, ge=0, description="lower clip of α_H/α and β_H/α")

    @model_validator(mode="after")
    def _scales(self) -> NCCLParams:
        check_order(self, "min_scale", "max_scale")
        return self


@ALGORITHMS.register(
    "nccl_fl",
    "NCCL-FL: per-step memory/current minibatch step sizes from the sign of their inner product (NCCL) + FedAvg",
    NCCLParams,
    label="NCCL-FL",
    local_optimizer=True,
    replay_per_step=True,
    replay_apart=True,
    row_lr=False,  # adaptive_rates mixes the step size α = η_l with [S] vectors
    vmap_server=True,
)
class NCCLFL(Algorithm):
    """NCCL local steps (module docstring), FedAvg server; logs each client's interfering and transferring
    steps and mean β_H/α (device tensors, read with the round's metrics)."""

    params: NCCLParams

    def local_init(self, ctx: RoundContext, x: torch.Tensor) -> NCCLCarry:
        return NCCLCarry(x.new_zeros((len(x), 3)), super().local_init(ctx, x))

    def local_step(
        self, ctx: RoundContext, x: torch.Tensor, carry: NCCLCarry, grad: GradFn
    ) -> tuple[torch.Tensor, NCCLCarry]:
        p = self.params
        g = grad(x)
        f = grad.memory(x)
        alpha = ctx.lr if p.alpha is None else p.alpha
        lam, alpha_scale, beta_scale, adapted = adaptive_rates(
            f, g, alpha, alpha, p.L, 1.0, True, p.min_scale, p.max_scale
        )
        counts = torch.stack([adapted & (lam <= 0), adapted & (lam > 0)], 1).to(x.dtype)
        stats = carry.stats + torch.cat([counts, beta_scale.unsqueeze(1)], 1)
        scale = alpha / ctx.lr
        direction = scale * (alpha_scale.unsqueeze(1) * f + beta_scale.unsqueeze(1) * g)
        x, opt = self.ctx.local_optimizer.step(x, direction, carry.opt, ctx.lr)
        return x, NCCLCarry(stats, opt)

    def upload(self, ctx: RoundContext, x: torch.Tensor, carry: NCCLCarry) -> Upload:
        return Upload({"delta": x - ctx.broadcast["x"]}, StepStats(carry.stats))

    def server_update(self, state: Any, ctx: RoundContext, up: Upload, weights: torch.Tensor) -> tuple[Any, Logs]:
        new = self.server_step(state, weighted_mean(up.sent["delta"], weights))
        interfering, transferring, beta_sum = up.kept.stats.T
        return new, {
            "nccl": {
                "interfering_steps": interfering,
                "transferring_steps": transferring,
                "mean_beta_scale": beta_sum / ctx.steps,
            }
        }
