"""EWC-FL: Elastic Weight Consolidation (Kirkpatrick et al. 2017, PNAS) under FedAvg (C-FLAG Sec. 7).

While training task s, client i minimises CE_s + (λ/2) Σ_{k<s} Σ_j F_{k,j} (θ_j − θ*_{k,j})² (Kirkpatrick
Eq. 3, one penalty per earlier task). fedbench adds the penalty's gradient to each minibatch gradient,

    d = ∇CE(θ; ξ) + λ Σ_{k<s} F_k ⊙ (θ − θ*_k) = ∇CE(θ; ξ) + λ (Φ ⊙ θ − Ψ),
    Φ = Σ_k F_k,  Ψ = Σ_k F_k ⊙ θ*_k,

and steps along d with ``local.optimizer`` (SGD, or Adam reset every round); the server is FedAvg. The
penalty is not clipped (the engine clips ∇CE only) and involves no custom loss, so both executors run it.

Choices where the paper (notes §5, §8.14) says nothing:

- θ*_k is the global model after the last round of task k; F_k is the diagonal empirical Fisher at θ*_k,
  computed by every client at the task's end (``end_task``) from ``TaskData.gradients(θ*_k, squared=True)``:
  F_{k,i} = Σ_b (n_b/n_i) g_b ⊙ g_b over client i's task-k data in minibatches of ``local.batch_size``
  (raw cross-entropy gradients under task k's head, no clipping or weight decay). This is the mean squared
  *minibatch* gradient; it equals the per-sample empirical Fisher only with ``batch_size: 1`` and is
  otherwise smaller (the minibatch averages out per-sample noise), which λ absorbs.
- ``fisher: local`` (default, notes §5): each client regularises with its own F_{k,i}; Φ and Ψ are ``[N, P]``
  tables the clients own (2·N·P floats however many tasks, free). ``fisher: global``: every client uses
  F_k = Σ_i (n_{k,i}/n_k) F_{k,i}, a one-off exchange at each task's end (P floats up per client, P down per
  client) that the per-round counters do not see; ``end_task`` logs it as ``task_end_bits_up``/``_down``.
- Per round EWC-FL costs FedAvg's bits: the model down, Δ up (the configured compressor). Every client
  needs θ*_k for its Fisher: it is the model broadcast in the next task's first round, so this is free
  under full participation (the paper's setting) and not charged otherwise.
- λ = 0 is Fine-FL; outside a continual run (no ``end_task``) Φ = Ψ = 0 and EWC-FL is FedAvg.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal, NamedTuple

import torch
from pydantic import BaseModel, ConfigDict, Field

from fedbench.algorithms.base import ALGORITHMS, Algorithm, GradFn, Logs, RoundContext, TaskData
from fedbench.algorithms.client_table import ClientTable
from fedbench.algorithms.state import ServerState, extend, state
from fedbench.compress import BITS_PER_FLOAT


@state
class EWCState(ServerState):
    fisher: ClientTable | torch.Tensor  # Φ = Σ_k F_k: [N, P] (local Fisher) or [P] (global)
    anchor: ClientTable | torch.Tensor  # Ψ = Σ_k F_k ⊙ θ*_k, as Φ


class Penalty(NamedTuple):
    fisher: torch.Tensor  # Φ rows [S, P]
    anchor: torch.Tensor  # Ψ rows [S, P]


def _plus(total: ClientTable | torch.Tensor, addend: torch.Tensor) -> ClientTable | torch.Tensor:
    """``total + addend`` for a client table (donated) or a tensor (new)."""
    return total.plus(addend) if isinstance(total, ClientTable) else total + addend


class EWCParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    lam: float = Field(default=100.0, ge=0, description="penalty weight λ (notes §8.14: tune on {10, 100, 1000})")
    fisher: Literal["local", "global"] = Field(
        default="local", description="local: each client's own Fisher; global: the sample-weighted mean over clients"
    )


@ALGORITHMS.register(
    "ewc_fl",
    "EWC-FL: FedAvg with an elastic weight consolidation penalty (diagonal Fisher per task)",
    EWCParams,
    label="EWC-FL",
    compression=True,
    local_optimizer=True,
    vmap_server=True,
)
class EWCFL(Algorithm):
    """Local step on ∇CE + λ(Φ ⊙ x − Ψ) (module docstring); FedAvg server; Fisher at each task's end."""

    params: EWCParams

    def init_state(self, x0: torch.Tensor) -> EWCState:
        """Φ = Σ_k F_k and Ψ = Σ_k F_k ⊙ θ*_k: ``[N, P]`` (local Fisher) or ``[P]`` (global), zero."""
        local = self.params.fisher == "local"
        fisher, anchor = (self.client_table(x0), self.client_table(x0)) if local else (torch.zeros_like(x0),) * 2
        return extend(super().init_state(x0), EWCState, fisher=fisher, anchor=anchor)

    def client_state(self, state: EWCState, clients: torch.Tensor) -> Penalty:
        """Each client's Φ and Ψ rows (it computed them itself, or received them at a task's end)."""
        fisher, anchor = state.fisher, state.anchor
        if isinstance(fisher, ClientTable) or isinstance(anchor, ClientTable):  # fisher: local
            return Penalty(fisher[clients], anchor[clients])
        return Penalty(fisher.expand(len(clients), -1), anchor.expand(len(clients), -1))

    def penalty_gradient(self, ctx: RoundContext, x: torch.Tensor) -> torch.Tensor:
        """λ Σ_k F_k ⊙ (x − θ*_k) = λ (Φ ⊙ x − Ψ), rows ``[S, P]``: the gradient of the penalty
        (λ/2) Σ_k Σ_j F_{k,j}(x_j − θ*_{k,j})² (Kirkpatrick Eq. 3)."""
        return self.params.lam * (ctx.held.fisher * x - ctx.held.anchor)

    def local_step(self, ctx: RoundContext, x: torch.Tensor, carry: Any, grad: GradFn) -> tuple[torch.Tensor, Any]:
        return self.ctx.local_optimizer.step(x, grad(x) + self.penalty_gradient(ctx, x), carry, ctx.lr)

    def end_task(self, state: EWCState, data: TaskData) -> tuple[EWCState, Logs]:
        """θ*_k = x; F_k from every client's task data at θ*_k; Φ += F_k, Ψ += F_k ⊙ θ*_k."""
        theta = state.x
        fisher = data.gradients(theta, squared=True)  # [N, P]
        logs: dict[str, Any] = {}
        if self.params.fisher == "global":
            weights = (data.sizes / data.sizes.sum()).to(fisher.dtype)
            fisher = weights @ fisher
            exchanged = self.ctx.num_clients * theta.numel() * BITS_PER_FLOAT
            logs = {"task_end_bits_up": exchanged, "task_end_bits_down": exchanged}
        new = dataclasses.replace(state, fisher=_plus(state.fisher, fisher), anchor=_plus(state.anchor, fisher * theta))
        return new, {"ewc_fisher_mean": float(fisher.mean()), **logs}
