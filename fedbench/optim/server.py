"""Server optimizers as small transforms with explicit state (optax style, :mod:`.transform`).

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

Each name is one entry of ``SERVER_OPTIMIZERS``, a chain of the transforms below; the step is
η·m̂ / (√v̂ + τ), computed in that order, and x ← x + step. The state dict holds ``step`` (t, an
int64 scalar), ``m``, ``v`` and ``v_max``, updated in place (the algorithms keep them as ``opt.*``).
"""

from __future__ import annotations

from typing import Callable

import torch

from fedbench.optim.spec import ServerSpec
from fedbench.optim.transform import (
    Moments, OptState, Transform, apply, chain, identity, precondition, scale_by_lr, second_of,
)


def count() -> Transform:
    """t ← t + 1, the round counter ``step`` (int64 scalar) that bias correction reads."""

    def update(moments: Moments, state: OptState, lr: float) -> Moments:
        state["step"] += 1
        return moments

    return Transform(lambda x: {"step": torch.zeros((), dtype=torch.int64, device=x.device)}, update)


def trace(beta: float) -> Transform:
    """Heavy-ball momentum m ← β·m + Δ, first ← m (FedAvgM, Hsu et al. 2019); no state at β = 0."""
    if beta == 0:
        return identity()

    def update(moments: Moments, state: OptState, lr: float) -> Moments:
        state["m"].mul_(beta).add_(moments.first)
        return moments._replace(first=state["m"])

    return Transform(lambda x: {"m": torch.zeros_like(x)}, update)


def ema(beta1: float) -> Transform:
    """m ← β1·m + (1−β1)·Δ, first ← m (Reddi et al. 2021 Alg. 2 line 9)."""

    def update(moments: Moments, state: OptState, lr: float) -> Moments:
        state["m"].mul_(beta1).add_(moments.first, alpha=1 - beta1)
        return moments._replace(first=state["m"])

    return Transform(lambda x: {"m": torch.zeros_like(x)}, update)


def ema_second(beta2: float, initial: float) -> Transform:
    """v ← β2·v + (1−β2)·Δ², second ← v, v_0 = ``initial`` (Alg. 2 line 10, FedAdam)."""

    def update(moments: Moments, state: OptState, lr: float) -> Moments:
        sq = moments.direction * moments.direction
        state["v"].mul_(beta2).add_(sq, alpha=1 - beta2)
        return moments._replace(second=state["v"])

    return Transform(lambda x: {"v": torch.full_like(x, initial)}, update)


def yogi_second(beta2: float, initial: float) -> Transform:
    """v ← v − (1−β2)·Δ²·sign(v − Δ²), second ← v, v_0 = ``initial`` (Alg. 2 line 10, FedYogi)."""

    def update(moments: Moments, state: OptState, lr: float) -> Moments:
        sq = moments.direction * moments.direction
        v = state["v"]
        v.sub_((1 - beta2) * sq * torch.sign(v - sq))
        return moments._replace(second=v)

    return Transform(lambda x: {"v": torch.full_like(x, initial)}, update)


def running_max(floor: float) -> Transform:
    """v̂ ← max(v̂, second), second ← v̂, v̂_0 = ``floor`` (FedAMSGrad; FedAMS Alg. 1 line 8 with
    floor ε, which keeps v̂ ≥ ε)."""

    def update(moments: Moments, state: OptState, lr: float) -> Moments:
        torch.maximum(state["v_max"], second_of(moments, "running_max"), out=state["v_max"])
        return moments._replace(second=state["v_max"])

    return Transform(lambda x: {"v_max": torch.full_like(x, floor)}, update)


def bias_correction(beta1: float, beta2: float) -> Transform:
    """first ← first/(1−β1^t), second ← second/(1−β2^t), with t from :func:`count` (Kingma & Ba 2015)."""

    def update(moments: Moments, state: OptState, lr: float) -> Moments:
        t, second = float(state["step"]), second_of(moments, "bias_correction")
        return moments._replace(first=moments.first / (1 - beta1**t), second=second / (1 - beta2**t))

    return Transform(lambda x: {}, update)


def adaptive_step(s: ServerSpec, additive: float) -> Transform:
    """(bias correction,) η·m̂, then / (√v̂ + τ): the tail shared by the adaptive optimizers."""
    correct = bias_correction(s.beta1, s.beta2) if s.bias_correction else identity()
    return chain(correct, scale_by_lr(), precondition(additive))


SERVER_OPTIMIZERS: dict[str, Callable[[ServerSpec], Transform]] = {
    "sgd": lambda s: chain(count(), trace(s.momentum), scale_by_lr()),
    "adam": lambda s: chain(count(), ema(s.beta1), ema_second(s.beta2, s.initial_accumulator), adaptive_step(s, s.eps)),
    "yogi": lambda s: chain(count(), ema(s.beta1), yogi_second(s.beta2, s.initial_accumulator), adaptive_step(s, s.eps)),
    "amsgrad": lambda s: chain(
        count(), ema(s.beta1), ema_second(s.beta2, s.initial_accumulator), running_max(s.initial_accumulator),
        adaptive_step(s, s.eps),
    ),
    "ams": lambda s: chain(
        count(), ema(s.beta1), ema_second(s.beta2, s.initial_accumulator),
        running_max(max(s.initial_accumulator, s.eps)), adaptive_step(s, 0.0),
    ),
}


class ServerOptimizer:
    """Applies a :class:`ServerSpec` to the global model; state lives in a plain tensor dict."""

    def __init__(self, spec: ServerSpec):
        self.spec = spec
        self.transform = SERVER_OPTIMIZERS[spec.optimizer](spec)

    def init(self, x: torch.Tensor) -> OptState:
        """The optimizer's state at round 0 (``step``, and ``m``/``v``/``v_max`` as its chain keeps them)."""
        return self.transform.init(x)

    def step(self, x: torch.Tensor, delta: torch.Tensor, state: OptState) -> torch.Tensor:
        """Return the new global model x + step(Δ); updates ``state`` in place."""
        return x + apply(self.transform, delta, state, self.spec.lr)
