"""MIFA and MIFAM (Gu et al. 2021, "Fast Federated Learning in the Presence of Arbitrary Device
Unavailability"), in the server-momentum form of GradMA (Luo et al. 2023) Alg. 6."""

import torch

from fedbench.algorithms.base import ALGORITHMS, Algorithm, Logs, RoundContext, Upload
from fedbench.algorithms.client_table import ClientTable
from fedbench.algorithms.state import ServerState, extend, state


@state
class MIFAState(ServerState):
    g_old: ClientTable  # every worker's latest Δ_i [N, P]
    d: torch.Tensor  # Σ_i p_i g_old[i] [P]


class MIFA(Algorithm):
    """MIFA: the server averages every worker's *latest* update, not only this round's (GradMA Alg. 6).

    Workers run plain local SGD and upload their model change Δ_i = x_{t,I}^(i) − x_t (= −g^(i) in
    GradMA's descent-sign notation). The server keeps the latest Δ_i of every worker in the ``[N, P]``
    table ``g_old`` (0 for a worker never seen) and the running average ``d`` of that table:

        d_{t+1} = d_t + Σ_{i∈S_t} p_i (Δ_i^new − Δ_i^old)        (Alg. 6 lines 9–11)

    so d = Σ_{i∈[N]} p_i·g_old[i] over ALL N workers, never renormalised to the sampled ones —
    early rounds take small steps by design (GradMA notes, gotcha 13). p_i = 1/N with
    ``server.weighting: uniform`` (the paper's rule) and n_i/Σ_{j∈[N]} n_j with ``samples`` (the
    n_i-weighted convention GradMA's code applies to every method); the engine's per-round weights,
    which sum to one over S_t only, are not used. d then goes through the server optimizer:
    ``sgd`` with momentum β1 is m ← β1·m + d, x ← x + η_g·m, i.e. Alg. 6 lines 12–13 with
    GradMA's m = −m. MIFA is β1 = 0; MIFAM is the same class with server momentum by default.
    Communication is FedAvg's: x down, Δ_i up (the paper's Δ^(i) = g_new − g_old has the same size).
    """

    def init_state(self, x0: torch.Tensor) -> MIFAState:
        return extend(super().init_state(x0), MIFAState, g_old=self.client_table(x0), d=torch.zeros_like(x0))

    def mixing_weights(self, ctx: RoundContext, like: torch.Tensor) -> torch.Tensor:
        """p_i over all N workers ``[N]``: 1/N (``uniform``) or n_i/Σn (``samples``)."""
        if self.server.spec.weighting == "uniform":
            return like.new_full((self.ctx.num_clients,), 1.0 / self.ctx.num_clients)
        sizes = ctx.client_sizes().to(like)
        return sizes / sizes.sum()

    def server_update(
        self, state: MIFAState, ctx: RoundContext, up: Upload, weights: torch.Tensor
    ) -> tuple[MIFAState, Logs]:
        new = up.sent["delta"]
        p = self.mixing_weights(ctx, new)[ctx.clients]
        d = state.d + p @ (new - state.g_old[ctx.clients])  # Alg. 6 lines 9–11
        g_old = state.g_old.write(ctx.clients, new)
        return self.server_step(state, d, d=d, g_old=g_old), {}


ALGORITHMS.register(
    "mifa",
    "MIFA (Gu et al. 2021): average of every worker's latest update, 1/N-normalised",
    label="MIFA",
    vmap_server=True,
)(MIFA)


@ALGORITHMS.register(
    "mifam",
    "MIFAM: MIFA with server momentum (GradMA Alg. 6)",
    label="MIFAM",
    server={"momentum": 0.5},
    vmap_server=True,
)
class MIFAM(MIFA):
    """MIFA with server momentum β1 (GradMA Alg. 6): m ← β1·m + d, x ← x + η_g·m; default β1 = 0.5
    (GradMA notes §9.7); ``server.momentum: 0`` is MIFA."""
