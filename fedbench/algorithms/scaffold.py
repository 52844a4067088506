"""SCAFFOLD (Karimireddy et al. 2020, ICML), option II control variates."""

from typing import Any

import torch

from fedbench.algorithms.base import ALGORITHMS, Algorithm, GradFn, RoundContext, State, weighted_mean


@ALGORITHMS.register("scaffold", "SCAFFOLD: drift-corrected local steps with control variates (option II)", label="SCAFFOLD")
class Scaffold(Algorithm):
    """SCAFFOLD Alg. 1 with option II.

    Local step (line 10): y ← y − η_l(g_i(y) − c_i + c).
    Client control variate (line 12, option II): c_i⁺ = c_i − c + (x − y_i)/(K_i·η_l), with the
    client's actual step count K_i and the learning rate of the round.
    Server (lines 16–17): x ← x + η_g·Σ w_i Δy_i (through the server optimizer) and
    c ← c + (1/N)·Σ_{i∈S} Δc_i. Clients send Δy_i and Δc_i, the server sends x and c: twice
    FedAvg's traffic in each direction. c and every c_i start at 0.
    """

    def init_state(self, x0: torch.Tensor) -> State:
        return {**super().init_state(x0), "c": torch.zeros_like(x0), "c_i": self.client_table(x0)}

    def broadcast(self, state: State, clients: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"x": state["x"], "c": state["c"]}

    def client_state(self, state: State, clients: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"c_i": state["c_i"][clients]}

    def local_step(self, ctx: RoundContext, x: torch.Tensor, grad: GradFn) -> torch.Tensor:
        return x - ctx.lr * (grad(x) - ctx.per_client["c_i"] + ctx.broadcast["c"])

    def upload(self, ctx: RoundContext, x: torch.Tensor) -> dict[str, torch.Tensor]:
        delta = x - ctx.broadcast["x"]
        c_new = ctx.per_client["c_i"] - ctx.broadcast["c"] - delta / (ctx.steps.unsqueeze(1) * ctx.lr)
        return {"delta": delta, "delta_c": c_new - ctx.per_client["c_i"]}

    def server_update(
        self, state: State, ctx: RoundContext, uploads: dict[str, torch.Tensor], weights: torch.Tensor
    ) -> dict[str, Any]:
        self.apply_server_step(state, weighted_mean(uploads["delta"], weights))
        state["c_i"].index_add_(0, ctx.clients, uploads["delta_c"])
        state["c"] += uploads["delta_c"].sum(0) / self.ctx.num_clients
        return {}
