"""MOON (Li, He & Song 2021, CVPR): model-contrastive federated learning, and MOONM.

Each client minimises ``CE(f(x; w), y) + μ·ℓ_con`` (MOON Eq. 3–4), where ℓ_con pulls the
representation z of the model being trained towards z_glob of the frozen global model x_t and
away from z_prev of the client's frozen previous local model. The server averages models
(FedAvg); MOONM uses server momentum (FedAvgM), as GradMA's group G3 baseline.

fedbench's choices where the paper or the GradMA notes (§4.6, §9.13) leave room:

- z is the model's penultimate features (the input of its classifier, see ``stages()`` in
  ``fedbench/models/registry.py``), not a 2-layer projection head: a head would be extra
  parameters, trained and averaged but unused for classification.
- A client's first participation uses the global model x_t as its previous model; then
  z_prev = z_glob and ∇ℓ_con = 0, so that step is plain cross-entropy. The original code
  instead compares against the client's randomly initialised network.
- The frozen models run in train mode with the minibatch's statistics and a scratch copy of
  the BatchNorm buffers (the original runs them in eval mode with their stored running
  statistics, which fedbench keeps only for the global model). Without BatchNorm (mlp, lenet5,
  cnn1d, small_cnn, GroupNorm ResNet) both are the same.
- Only z carries gradient, as in the original (the frozen networks have ``requires_grad=False``).

The previous local models live in an ``[N, P]`` server-side table filled from the free ``_local``
upload; in a deployment each client keeps its own. The loss is an
:class:`~fedbench.models.flat.Objective` with one row per client (the global and the previous models), so it
trains on either client executor and in populations; batched, each row averages over its real samples.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field

from fedbench.algorithms.base import ALGORITHMS, Algorithm, GradFn, Logs, RoundContext, Upload
from fedbench.algorithms.client_table import ClientTable
from fedbench.algorithms.state import ServerState, extend, state
from fedbench.models.flat import Buffers, FlatModel, RowFields, cross_entropy


class MoonParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    mu: float = Field(default=1.0, ge=0, description="weight μ of the model-contrastive loss (MOON: 1 or 5)")
    temperature: float = Field(default=0.5, gt=0, description="temperature τ of the contrastive loss")


def contrastive_loss(
    z: torch.Tensor, z_glob: torch.Tensor, z_prev: torch.Tensor, temperature: float, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """ℓ_con = −log(e^{sim(z,z_glob)/τ} / (e^{sim(z,z_glob)/τ} + e^{sim(z,z_prev)/τ})), cosine sim,
    mean over the batch's real samples (MOON Eq. 3; the code's cross-entropy on the two logits with label 0)."""
    logits = torch.stack([F.cosine_similarity(z, z_glob, dim=-1), F.cosine_similarity(z, z_prev, dim=-1)], 1)
    return cross_entropy(logits / temperature, torch.zeros(len(z), dtype=torch.long, device=z.device), mask)


@dataclass(frozen=True)
class MoonObjective(RowFields):
    """MOON's local loss CE + μ·ℓ_con (Eq. 4) at a point, with the frozen global and previous models, one row
    per client ``[S, P]`` (``[P]`` once :meth:`~fedbench.models.flat.RowFields.at` a client)."""

    rows: ClassVar[tuple[str, ...]] = ("global_model", "previous_model")
    global_model: torch.Tensor
    previous_model: torch.Tensor
    mu: float
    temperature: float

    def __call__(
        self,
        model: FlatModel,
        point: torch.Tensor,
        buffers: Buffers,
        x: torch.Tensor,
        y: torch.Tensor,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        blocks = model.num_stages("moon") - 1
        *_, z, logits = model.run_stages(point, buffers, x)
        with torch.no_grad():
            scratch = {k: v.clone() for k, v in buffers.items()}
            z_glob = model.run_stages(self.global_model, scratch, x, stop=blocks)[-1]
            z_prev = model.run_stages(self.previous_model, scratch, x, stop=blocks)[-1]
        return cross_entropy(model.masked(logits, y), y, mask) + self.mu * contrastive_loss(
            z, z_glob, z_prev, self.temperature, mask
        )


@state
class MoonState(ServerState):
    previous: ClientTable  # each client's last local model [N, P]
    seen: torch.Tensor  # whether it has taken part yet [N] bool


class LocalModel(NamedTuple):
    previous: torch.Tensor  # [S, P]


@ALGORITHMS.register(
    "moon",
    "MOON: local model-contrastive loss on representations, FedAvg server",
    MoonParams,
    label="MOON",
    compression=True,
    own_loss=True,
    vmap_server=True,
)
class Moon(Algorithm):
    """Local step w ← w − η_l·∇(CE + μ·ℓ_con)(w; ξ) (MOON Alg. 1, lines 9–17); server FedAvg."""

    params: MoonParams

    def init_state(self, x0: torch.Tensor) -> MoonState:
        seen = torch.zeros(self.ctx.num_clients, dtype=torch.bool, device=x0.device)
        return extend(super().init_state(x0), MoonState, previous=self.client_table(x0), seen=seen)

    def client_state(self, state: MoonState, clients: torch.Tensor) -> LocalModel:
        """Each client's previous local model; the global model x_t at its first participation."""
        seen = state.seen[clients].unsqueeze(1)
        return LocalModel(torch.where(seen, state.previous[clients], state.x))

    def objective(self, ctx: RoundContext) -> MoonObjective:
        """The round's loss of each client row: the global model x_t and the client's previous model."""
        previous = ctx.held.previous
        return MoonObjective(ctx.broadcast["x"].expand_as(previous), previous, self.params.mu, self.params.temperature)

    def local_step(self, ctx: RoundContext, x: torch.Tensor, carry: Any, grad: GradFn) -> tuple[torch.Tensor, Any]:
        return x - ctx.lr * grad(x, objective=self.objective(ctx)), carry

    def upload(self, ctx: RoundContext, x: torch.Tensor, carry: Any) -> Upload:
        """Δ_i as FedAvg, plus the final local model kept for the next participation (free)."""
        return Upload(super().upload(ctx, x, carry).sent, LocalModel(x))

    def server_update(
        self, state: MoonState, ctx: RoundContext, up: Upload, weights: torch.Tensor
    ) -> tuple[MoonState, Logs]:
        new, logs = super().server_update(state, ctx, up, weights)
        previous = state.previous.write(ctx.clients, up.kept.previous)
        seen = state.seen.index_fill(0, ctx.clients, True)
        return dataclasses.replace(new, previous=previous, seen=seen), logs


@ALGORITHMS.register(
    "moonm",
    "MOON with server momentum (FedAvgM server; GradMA's MOONM)",
    MoonParams,
    label="MOONM",
    server={"optimizer": "sgd", "momentum": 0.5},
    compression=True,
    own_loss=True,
    vmap_server=True,
)
class MoonM(Moon):
    """MOON's local loss with the FedAvgM server m ← β·m + Δ, x ← x + η_g·m (GradMA Alg. 5; β = 0.5)."""
