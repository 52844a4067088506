"""FedCAMS (Wang et al. 2022, Alg. 2): FedAMS with compressed uplink and client error feedback."""

from typing import Any, NamedTuple

import torch

from fedbench.algorithms.base import ALGORITHMS, Algorithm, Logs, RoundContext, Upload, weighted_mean
from fedbench.algorithms.client_table import ClientTable
from fedbench.algorithms.state import ServerState, extend, state


@state
class FedCAMSState(ServerState):
    error: ClientTable  # e_i, [N, P]


class ErrorRows(NamedTuple):
    error: torch.Tensor  # e_i of the round's clients, [S, P]


@ALGORITHMS.register(
    "fedcams",
    "FedCAMS: FedAMS with a compressed uplink and client-side error feedback",
    label="FedCAMS",
    server={"optimizer": "ams", "lr": 1.0, "eps": 1e-3, "weighting": "uniform"},
    compression=True,
    vmap_server=True,
)
class FedCAMS(Algorithm):
    """FedCAMS Alg. 2.

    Client i sends Δ̂_i = C(Δ_i + e_i) and keeps e_i ← Δ_i + e_i − Δ̂_i; clients not sampled keep
    their (stale) e_i; every e_i starts at 0. The server averages the Δ̂_i and applies the FedAMS
    update (option 1 by default; any server optimizer is configuration). The broadcast is
    uncompressed. The error memories form an ``[N, P]`` table (N·P floats of client state).
    With the ``none`` compressor the error stays 0 and FedCAMS is FedAMS exactly.
    """

    def init_state(self, x0: torch.Tensor) -> FedCAMSState:
        return extend(super().init_state(x0), FedCAMSState, error=self.client_table(x0))  # e_i = 0

    def client_state(self, state: FedCAMSState, clients: torch.Tensor) -> ErrorRows:
        return ErrorRows(state.error[clients])

    def upload(self, ctx: RoundContext, x: torch.Tensor, carry: Any) -> Upload:
        corrected = x - ctx.broadcast["x"] + ctx.held.error
        sent = self.compress(ctx, corrected)
        return Upload({"delta": sent}, ErrorRows(corrected - sent.value))  # e_i ← Δ_i + e_i − Δ̂_i

    def server_update(
        self, state: FedCAMSState, ctx: RoundContext, up: Upload, weights: torch.Tensor
    ) -> tuple[FedCAMSState, Logs]:
        error = state.error.write(ctx.clients, up.kept.error)
        return self.server_step(state, weighted_mean(up.sent["delta"], weights), error=error), {}
