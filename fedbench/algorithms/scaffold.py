"""SCAFFOLD (Karimireddy et al. 2020, ICML), option II control variates."""

from typing import Any, NamedTuple

import torch

from fedbench.algorithms.base import ALGORITHMS, Algorithm, GradFn, Logs, Message, RoundContext, Upload, weighted_mean
from fedbench.algorithms.client_table import ClientTable
from fedbench.algorithms.state import ServerState, extend, state


@state
class ScaffoldState(ServerState):
    c: torch.Tensor  # server control variate [P]
    c_i: ClientTable  # client control variates [N, P]


class ControlRows(NamedTuple):
    c_i: torch.Tensor  # [S, P]


class ControlChange(NamedTuple):
    delta_c: torch.Tensor  # Δc_i = c_i⁺ − c_i, [S, P]


@ALGORITHMS.register(
    "scaffold",
    "SCAFFOLD: drift-corrected local steps with control variates (option II)",
    label="SCAFFOLD",
    vmap_server=True,
)
class Scaffold(Algorithm):
    """SCAFFOLD Alg. 1 with option II.

    Local step (line 10): y ← y − η_l(g_i(y) − c_i + c).
    Client control variate (line 12, option II): c_i⁺ = c_i − c + (x − y_i)/(K_i·η_l), with the
    client's actual step count K_i and the learning rate of the round.
    Server (lines 16–17): x ← x + η_g·Σ w_i Δy_i (through the server optimizer) and
    c ← c + (1/N)·Σ_{i∈S} Δc_i. Clients send Δy_i and Δc_i, the server sends x and c: twice
    FedAvg's traffic in each direction. c and every c_i start at 0.
    """

    def init_state(self, x0: torch.Tensor) -> ScaffoldState:
        return extend(super().init_state(x0), ScaffoldState, c=torch.zeros_like(x0), c_i=self.client_table(x0))

    def broadcast(self, state: ScaffoldState, clients: torch.Tensor) -> Message:
        return {"x": state.x, "c": state.c}

    def client_state(self, state: ScaffoldState, clients: torch.Tensor) -> ControlRows:
        return ControlRows(state.c_i[clients])

    def local_step(self, ctx: RoundContext, x: torch.Tensor, carry: Any, grad: GradFn) -> tuple[torch.Tensor, Any]:
        return x - ctx.lr * (grad(x) - ctx.held.c_i + ctx.broadcast["c"]), carry  # line 10

    def upload(self, ctx: RoundContext, x: torch.Tensor, carry: Any) -> Upload:
        delta = x - ctx.broadcast["x"]
        c_new = ctx.held.c_i - ctx.broadcast["c"] - delta / (ctx.steps.unsqueeze(1) * ctx.lr)  # line 12, option II
        return Upload({"delta": delta, "delta_c": c_new - ctx.held.c_i})

    def server_update(
        self, state: ScaffoldState, ctx: RoundContext, up: Upload, weights: torch.Tensor
    ) -> tuple[ScaffoldState, Logs]:
        delta_c = up.sent["delta_c"]
        c_i = state.c_i.add(ctx.clients, delta_c)
        c = state.c + delta_c.sum(0) / self.ctx.num_clients  # line 17
        return self.server_step(state, weighted_mean(up.sent["delta"], weights), c=c, c_i=c_i), {}
