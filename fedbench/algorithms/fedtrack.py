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
clients' round carry (:class:`TrackCarry`) for C-FLAG's AdapLR (:mod:`fedbench.algorithms.cflag`).
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

import torch
from pydantic import BaseModel, ConfigDict, Field

from fedbench.algorithms.base import ALGORITHMS, Algorithm, GradFn, RoundContext, Upload, weighted_mean
from fedbench.optim.transform import OptState

IAG = Literal["off", "batch_table", "sample"]
IAG_HELP = (
    "gradient estimate ∇g_i′ of eq. (5): off = minibatch gradient; batch_table = IAG table with one slot per "
    "minibatch of an epoch; sample = eq. (5) with the step's minibatch as component (local.batch_size: 1 = the paper)"
)


class TrackCarry(NamedTuple):
    """The clients' round carry: steps taken ``k`` ``[S]``, a_i = Σ_k ∇g_i′(x_{t,k}) ``acc`` ``[S, P]``,
    the IAG of ``iag`` (``batch_table``: the slots ``table`` ``[S, n_b, P]`` and their ``mean``;
    ``sample``: the running ``sum``; None where unused) and the local optimizer's state."""

    k: torch.Tensor
    acc: torch.Tensor
    table: torch.Tensor | None
    mean: torch.Tensor | None
    sum: torch.Tensor | None
    opt: OptState


class FedTrackParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    iag: IAG = Field(default="batch_table", description=IAG_HELP)


@ALGORITHMS.register(
    "fedtrack",
    "FedTrack: drift-corrected local steps with incrementally aggregated gradients (C-FLAG eqs. 4-5, 2x communication)",
    FedTrackParams,
    label="FedTrack",
    local_optimizer=True,
    inputs=("full_grad",),
    vmap_server=True,
)
class FedTrack(Algorithm):
    """FedTrack: local steps (4) with the estimate of ``iag``; clients send Δ_i = x_{t,E}^i − x_t and
    ∇g_i(x_t), the server x_{t+1} = Σ p_i x_{t,E}^i (through the server optimizer, SGD lr 1 by default)."""

    params: FedTrackParams

    @property
    def iag(self) -> str:
        return self.params.iag

    def prepare_round(self, state: Any, ctx: RoundContext, weights: torch.Tensor) -> RoundContext:
        """Alg. 1 lines 2–3: the server aggregates ∇g(x_t) = Σ p_i ∇g_i(x_t) and broadcasts it."""
        return ctx.sending(grad_g=weighted_mean(ctx.input("full_grad"), weights))

    def sizes_and_batches(self, ctx: RoundContext, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """n_i ``[S]`` and min(B, n_i) per client (n_b = ⌈n_i / min(B, n_i)⌉ slots)."""
        sizes = ctx.client_sizes()[ctx.clients].to(dtype)
        return sizes, torch.clamp(sizes, max=float(self.batch_size()))

    def most_batches(self, ctx: RoundContext) -> int:
        """The most slots n_b of the context's clients, read from their sizes (a host read: the engine's contexts
        carry it as ``epoch_batches``)."""
        sizes, batch = self.sizes_and_batches(ctx, torch.float64)
        return int(torch.ceil(sizes / batch).max())

    def local_init(self, ctx: RoundContext, x: torch.Tensor) -> TrackCarry:
        """k = 0, a_i = 0; the IAG at τ = 0: every slot (``batch_table``) at ∇g_i(x_t), Σ = 0 (``sample``)."""
        table = mean = total = None
        if self.iag == "batch_table":
            full = ctx.input("full_grad")
            table = full.unsqueeze(1).repeat(1, ctx.epoch_batches or self.most_batches(ctx), 1)
            mean = full.clone()
        elif self.iag == "sample":
            total = torch.zeros_like(x)
        return TrackCarry(x.new_zeros(len(x)), torch.zeros_like(x), table, mean, total, super().local_init(ctx, x))

    def local_step(
        self, ctx: RoundContext, x: torch.Tensor, carry: TrackCarry, grad: GradFn
    ) -> tuple[torch.Tensor, TrackCarry]:
        """Eq. (4) through ``local.optimizer``; adds ∇g_i′(x_{t,k}) to a_i."""
        estimate, carry = self.estimate(ctx, x, carry, grad)
        drift = ctx.broadcast["grad_g"] - ctx.input("full_grad")
        x, opt = self.ctx.local_optimizer.step(x, drift + estimate, carry.opt, ctx.lr)
        return x, carry._replace(k=carry.k + 1, acc=carry.acc + estimate, opt=opt)

    def estimate(
        self, ctx: RoundContext, x: torch.Tensor, carry: TrackCarry, grad: GradFn
    ) -> tuple[torch.Tensor, TrackCarry]:
        """∇g_i′(x_{t,k}) per ``iag`` (module docstring), and the carry with the IAG's new state."""
        g = grad(x)
        if self.iag == "off":
            return g, carry
        full = ctx.input("full_grad")
        sizes, batch = self.sizes_and_batches(ctx, x.dtype)
        if self.iag == "sample":
            assert carry.sum is not None
            total = carry.sum
            if grad.step > 0:  # k = 0: τ_j = 0 for every component, ∇g_i′ = ∇g_i(x_t)
                anchor = grad(ctx.start)  # the same minibatch at x_t
                total = total + (batch / sizes).unsqueeze(1) * (g - anchor)
            return full + total, carry._replace(sum=total)
        assert carry.table is not None and carry.mean is not None
        slots = torch.ceil(sizes / batch)  # n_b per client
        rows = torch.arange(len(x), device=x.device)
        slot = torch.remainder(carry.k, slots).long()
        old = carry.table[rows, slot]
        table = carry.table.index_put((rows, slot), g)
        mean = carry.mean + (g - old) / slots.unsqueeze(1)
        return mean, carry._replace(table=table, mean=mean)

    def batch_size(self) -> int:
        if self.ctx.batch_size <= 0:
            raise ValueError(
                f"iag: {self.iag} needs the local batch size B (AlgorithmContext.batch_size, set by the engine from "
                f"local.batch_size); got {self.ctx.batch_size}"
            )
        return self.ctx.batch_size

    def upload(self, ctx: RoundContext, x: torch.Tensor, carry: TrackCarry) -> Upload:
        return Upload({"delta": x - ctx.broadcast["x"], "full_grad": ctx.input("full_grad")})
