"""Server optimizers as small transforms with explicit state (optax style).

Each takes the aggregated model change ``delta`` = Σ_i w_i (x_i − x) — a *descent* direction,
the negative of Reddi et al.'s pseudo-gradient — and moves the global model along it:

* ``sgd``      m ← β·m + Δ;  x ← x + η·m            (FedAvg: η=1, β=0; FedAvgM, Hsu et al. 2019)
* ``adam``     m ← β1·m + (1−β1)Δ;  v ← β2·v + (1−β2)Δ²;  x ← x + η·m/(√v + τ)
* ``yogi``     v ← v − (1−β2)·Δ²·sign(v − Δ²)                    (Reddi et al. 2021, Alg. 2)
* ``amsgrad``  v as in adam, v̂ ← max(v̂, v);  x ← x + η·m/(√v̂ + τ) (FedAMSGrad, Tong et al. 2020;
               FedAMS option 2)
* ``ams``      v as in adam, v̂ ← max(v̂, v, ε);  x ← x + η·m/√v̂      (FedAMS option 1, Wang et al.
               2022, Alg. 1: ε is a floor inside the max, v̂_0 = ε as in the authors' code)

With ``bias_correction`` m and v are divided by (1−β1^t) and (1−β2^t) before the step (the
convention of the FedAMS authors' code and of Keras/TFF; the FedOpt paper itself has none).
"""

from __future__ import annotations

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
