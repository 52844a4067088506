"""FedTrack (Mitra et al., CDC 2021): drift-corrected local steps on incrementally aggregated gradients
(IAG), i.e. C-FLAG's local phase, eqs. (4)–(5), without the memory step (C-FLAG notes §5, row FedTrk).

Round t, client i (x_{t,0}^i = x_t, β = the round's local rate η_l)::

    x_{t,k+1}^i = x_{t,k}^i − β (c_i + ∇g_i′(x_{t,k}^i)),   c_i = ∇g(x_t) − ∇g_i(x_t)          (4)

with ∇g_i(x_t) the client's full current-task gradient (the engine's ``full_grad``, uploaded) and
∇g(x_t) = Σ p_i ∇g_i(x_t) (broadcast by ``prepare_round``): two P-vectors each way per round.
``local.optimizer: adam`` feeds the direction c_i + ∇g_i′ to per-client Adam instead (notes §8.4).

The gradient estimate ∇g_i′ (``iag``):

* ``off``: the step's minibatch gradient (no IAG; a SCAFFOLD-like drift-corrected step).
* ``batch_table`` (default): an IAG table with one slot per minibatch of an epoch, n_b = ⌈n_i/min(B, n_i)⌉
  slots, every slot starting the round at ∇g_i(x_t) (τ = 0); step k writes its minibatch gradient
  at x_{t,k} into slot k mod n_b and uses the slots' mean. The table holds the client's last n_b
  minibatch gradients (≈ one pass over its data); a per-sample table (eq. 5 as written) is
  infeasible for real models. Memory: n_b·P floats per client; one gradient per step. Against eq. (5)
  with minibatch components: a slot is replaced when refreshed again (τ updated, as in eq. 5, over the
  paper's 2 epochs), but the slots not yet refreshed hold the mean ∇g_i(x_t) instead of their own
  minibatch's gradient at x_t (an O(1/n_b) noise term), and step 0 already writes its slot.
* ``sample``: eq. (5) with the step's minibatch as the refreshed component (a sample for
  ``local.batch_size: 1``, the paper's setting): ∇g_i′(x_{t,0}) = ∇g_i(x_t) and, for k ≥ 1,
  ∇g_i′(x_{t,k}) = ∇g_i(x_t) + w_i Σ_{s=1}^{k} (∇g_{i,j_s}(x_{t,s}) − ∇g_{i,j_s}(x_t)),
  w_i = min(B, n_i)/n_i — the table of eq. (5) kept as a running sum, exact as long as no component
  is refreshed twice in a round (the engine walks a permutation: true for K_i ≤ ⌈n_i/B⌉ steps that
  start an epoch, e.g. ``local.epochs: 1``; a component seen again counts twice). Components come
  from the engine's permutation walk, not uniform draws with replacement. Costs a second gradient
  (the anchor at x_t on the same minibatch) per step. ``cflag_gd`` uses it.

a_i = Σ_k ∇g_i′(x_{t,k}^i) (gradient units, only over the client's own K_i steps) is kept in the
round's scratch for C-FLAG's AdapLR (:mod:`fedbench.algorithms.cflag`).
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field

from fedbench.algorithms.base import ALGORITHMS, Algorithm, GradFn, RoundContext, State, weighted_mean

IAG = Literal["off", "batch_table", "sample"]
IAG_HELP = (
    "gradient estimate ∇g_i′ of eq. (5): off = minibatch gradient; batch_table = IAG table with one slot per "
    "minibatch of an epoch; sample = eq. (5) with the step's minibatch as component (local.batch_size: 1 = the paper)"
)
STEP, ACC = "track.k", "track.a"  # scratch: steps taken this round [S]; a_i = Σ_k ∇g_i′(x_{t,k}) [S, P]
TABLE, MEAN, SUM = "iag.table", "iag.mean", "iag.sum"  # batch_table slots [S, n_b, P] and their mean; sample's Σ


class FedTrackParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    iag: IAG = Field(default="batch_table", description=IAG_HELP)


@ALGORITHMS.register(
    "fedtrack",
    "FedTrack: drift-corrected local steps with incrementally aggregated gradients (C-FLAG eqs. 4-5, 2x communication)",
    FedTrackParams,
    label="FedTrack",
    local_optimizer=True,
    full_gradient=True,
)
class FedTrack(Algorithm):
    """FedTrack: local steps (4) with the estimate of ``iag``; clients send Δ_i = x_{t,E}^i − x_t and
    ∇g_i(x_t), the server x_{t+1} = Σ p_i x_{t,E}^i (through the server optimizer, SGD lr 1 by default)."""

    Params = FedTrackParams
    params: FedTrackParams

    @property
    def iag(self) -> str:
        return self.params.iag

    def prepare_round(self, state: State, ctx: RoundContext, weights: torch.Tensor) -> None:
        """Alg. 1 lines 2–3: the server aggregates ∇g(x_t) = Σ p_i ∇g_i(x_t) and broadcasts it."""
        ctx.broadcast["grad_g"] = weighted_mean(ctx.full_grad, weights)

    def local_step(self, ctx: RoundContext, x: torch.Tensor, grad: GradFn) -> torch.Tensor:
        """Eq. (4) through ``local.optimizer``; adds ∇g_i′(x_{t,k}) to a_i while k < K_i."""
        pc = ctx.per_client
        first = STEP not in pc
        if first:
            pc[STEP], pc[ACC] = x.new_zeros(len(x)), torch.zeros_like(x)
        estimate = self.estimate(ctx, x, grad, first)
        live = (pc[STEP] < ctx.steps).unsqueeze(1)  # batched engine: rows past their K_i keep being called
        pc[ACC] = torch.where(live, pc[ACC] + estimate, pc[ACC])
        pc[STEP] = pc[STEP] + 1
        drift = ctx.broadcast["grad_g"] - ctx.full_grad
        return self.ctx.local_optimizer.step(ctx, x, drift + estimate)

    def estimate(self, ctx: RoundContext, x: torch.Tensor, grad: GradFn, first: bool) -> torch.Tensor:
        """∇g_i′(x_{t,k}) per ``iag`` (module docstring)."""
        g = grad(x)
        if self.iag == "off":
            return g
        pc, full = ctx.per_client, ctx.full_grad
        sizes = self.ctx.client_sizes[ctx.clients].to(x.dtype)
        batch = torch.clamp(sizes, max=float(self.batch_size()))  # min(B, n_i)
        if self.iag == "sample":
            if first:  # k = 0: τ_j = 0 for every component, ∇g_i′ = ∇g_i(x_t)
                pc[SUM] = torch.zeros_like(x)
            else:
                anchor = grad(ctx.start)  # the same minibatch at x_t
                pc[SUM] = pc[SUM] + (batch / sizes).unsqueeze(1) * (g - anchor)
            return full + pc[SUM]
        slots = torch.ceil(sizes / batch)  # n_b per client
        if first:
            pc[TABLE] = full.unsqueeze(1).repeat(1, int(slots.max()), 1)
            pc[MEAN] = full.clone()
        rows = torch.arange(len(x), device=x.device)
        slot = torch.remainder(pc[STEP], slots).long()
        old = pc[TABLE][rows, slot]
        pc[TABLE][rows, slot] = g
        pc[MEAN] = pc[MEAN] + (g - old) / slots.unsqueeze(1)
        return pc[MEAN]

    def batch_size(self) -> int:
        if self.ctx.batch_size <= 0:
            raise ValueError(
                f"iag: {self.iag} needs the local batch size B (AlgorithmContext.batch_size, set by the engine from "
                f"local.batch_size); got {self.ctx.batch_size}"
            )
        return self.ctx.batch_size

    def upload(self, ctx: RoundContext, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"delta": x - ctx.broadcast["x"], "full_grad": ctx.full_grad}

    def server_update(
        self, state: State, ctx: RoundContext, uploads: dict[str, torch.Tensor], weights: torch.Tensor
    ) -> dict[str, Any]:
        self.apply_server_step(state, weighted_mean(uploads["delta"], weights))
        return {}
