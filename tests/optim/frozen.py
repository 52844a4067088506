"""Frozen copies of the server and local optimizers as they were before the transform rewrite
(fedbench/optim/{server,local}.py at aa6fa89), kept verbatim as the bit-for-bit reference of
``tests/optim/test_server.py`` and ``tests/optim/test_local.py``. Do not edit."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from fedbench.optim.spec import ServerSpec

OptState = dict[str, torch.Tensor]


class ServerOptimizer:
    """Applies a :class:`ServerSpec` to the global model; state lives in a plain tensor dict."""

    def __init__(self, spec: ServerSpec):
        self.spec = spec

    def init(self, x: torch.Tensor) -> OptState:
        s = self.spec
        state: OptState = {"step": torch.zeros((), dtype=torch.int64, device=x.device)}
        if s.optimizer == "sgd":
            if s.momentum > 0:
                state["m"] = torch.zeros_like(x)
            return state
        state["m"] = torch.zeros_like(x)
        state["v"] = torch.full_like(x, s.initial_accumulator)
        if s.optimizer == "amsgrad":
            state["v_max"] = torch.full_like(x, s.initial_accumulator)
        if s.optimizer == "ams":
            state["v_max"] = torch.full_like(x, max(s.initial_accumulator, s.eps))
        return state

    def step(self, x: torch.Tensor, delta: torch.Tensor, state: OptState) -> torch.Tensor:
        """Return the new global model; updates ``state`` in place."""
        s = self.spec
        state["step"] += 1
        if s.optimizer == "sgd":
            if s.momentum > 0:
                state["m"].mul_(s.momentum).add_(delta)
                delta = state["m"]
            return x + s.lr * delta
        m, v = state["m"], state["v"]
        m.mul_(s.beta1).add_(delta, alpha=1 - s.beta1)
        sq = delta * delta
        if s.optimizer == "yogi":
            v.sub_((1 - s.beta2) * sq * torch.sign(v - sq))
        else:
            v.mul_(s.beta2).add_(sq, alpha=1 - s.beta2)
        second = v
        if s.optimizer in ("amsgrad", "ams"):
            torch.maximum(state["v_max"], v, out=state["v_max"])
            second = state["v_max"]
        first = m
        if s.bias_correction:
            t = float(state["step"])
            first = m / (1 - s.beta1**t)
            second = second / (1 - s.beta2**t)
        additive = 0.0 if s.optimizer == "ams" else s.eps
        return x + s.lr * first / (second.sqrt() + additive)


class LocalOptimizer:
    """Plain local SGD: x ← x − η_l·d."""

    name = "sgd"

    def step(self, ctx: Any, x: torch.Tensor, direction: torch.Tensor) -> torch.Tensor:
        return x - ctx.lr * direction


@dataclass(frozen=True)
class LocalAdam(LocalOptimizer):
    """Adam on the direction d, per client, reset every round."""

    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    name = "adam"

    def step(self, ctx: Any, x: torch.Tensor, direction: torch.Tensor) -> torch.Tensor:
        scratch = ctx.per_client
        if "adam.k" not in scratch:
            scratch["adam.m"], scratch["adam.v"] = torch.zeros_like(x), torch.zeros_like(x)
            scratch["adam.k"] = x.new_zeros(x.shape[0])
        k = scratch["adam.k"] + 1
        m = self.beta1 * scratch["adam.m"] + (1 - self.beta1) * direction
        v = self.beta2 * scratch["adam.v"] + (1 - self.beta2) * direction * direction
        scratch["adam.m"], scratch["adam.v"], scratch["adam.k"] = m, v, k
        m_hat = m / (1 - self.beta1**k).unsqueeze(1)
        v_hat = v / (1 - self.beta2**k).unsqueeze(1)
        return x - ctx.lr * m_hat / (v_hat.sqrt() + self.eps)
