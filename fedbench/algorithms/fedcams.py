"""FedCAMS (Wang et al. 2022, Alg. 2): FedAMS with compressed uplink and client error feedback."""

from typing import Any

import torch

from fedbench.algorithms.base import ALGORITHMS, Algorithm, RoundContext, State, weighted_mean
from fedbench.compress import Compressed


@ALGORITHMS.register(
    "fedcams",
    "FedCAMS: FedAMS with a compressed uplink and client-side error feedback",
    label="FedCAMS",
    server={"optimizer": "ams", "lr": 1.0, "eps": 1e-3, "weighting": "uniform"},
    compression=True,
)
class FedCAMS(Algorithm):
    """FedCAMS Alg. 2.

    Client i sends Δ̂_i = C(Δ_i + e_i) and keeps e_i ← Δ_i + e_i − Δ̂_i; clients not sampled keep
    their (stale) e_i; every e_i starts at 0. The server averages the Δ̂_i and applies the FedAMS
    update (option 1 by default; any server optimizer is configuration). The broadcast is
    uncompressed. The error memories form an ``[N, P]`` table (N·P floats of client state).
    With the ``none`` compressor the error stays 0 and FedCAMS is FedAMS exactly.
    """

    def init_state(self, x0: torch.Tensor) -> State:
        return {**super().init_state(x0), "error": self.client_table(x0)}

    def client_state(self, state: State, clients: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"error": state["error"][clients]}

    def upload(self, ctx: RoundContext, x: torch.Tensor) -> dict[str, torch.Tensor | Compressed]:
        corrected = x - ctx.broadcast["x"] + ctx.per_client["error"]
        sent = self.compress(ctx, corrected)
        return {"delta": sent, "_error": corrected - sent.value}

    def server_update(
        self, state: State, ctx: RoundContext, uploads: dict[str, torch.Tensor], weights: torch.Tensor
    ) -> dict[str, Any]:
        state["error"][ctx.clients] = uploads["_error"]
        self.apply_server_step(state, weighted_mean(uploads["delta"], weights))
        return {}
