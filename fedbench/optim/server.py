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
η·m̂ / (√v̂ + τ), computed in that order, and x ← x + step. Each transform's state is its own type
(:class:`Count` t, an int64 scalar, handed on in ``Moments.step``; :class:`Trace`/:class:`Ema` m;
:class:`Second` v; :class:`RunningMax` v̂), returned new by every update (:mod:`.transform`); the algorithms
keep the chain's state in their :class:`~fedbench.algorithms.state.ServerState` (``opt``). The float
operations are those the optimizers were pinned with (``tests/optim/frozen.py``), out of place.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import NamedTuple

import torch

from fedbench.optim.spec import ServerSpec
from fedbench.optim.transform import (
    Moments,
    OptState,
    Rate,
    Transform,
    apply,
    chain,
    identity,
    precondition,
    scale_by_lr,
    second_of,
    stateless,
    step_of,
)


class Count(NamedTuple):
    step: torch.Tensor  # t, int64 scalar


def count() -> Transform:
    """t ← t + 1, the round counter that bias correction reads (``Moments.step``)."""

    def update(moments: Moments, state: Count, lr: Rate) -> tuple[Moments, Count]:
        step = state.step + 1
        return moments._replace(step=step), Count(step)

    return Transform(lambda x: Count(torch.zeros((), dtype=torch.int64, device=x.device)), update)


class Trace(NamedTuple):
    m: torch.Tensor


class Ema(NamedTuple):
    m: torch.Tensor


class Second(NamedTuple):
    v: torch.Tensor


class RunningMax(NamedTuple):
    v_max: torch.Tensor


def trace(beta: float) -> Transform:
    """Heavy-ball momentum m ← β·m + Δ, first ← m (FedAvgM, Hsu et al. 2019); no state at β = 0."""
    if beta == 0:
        return identity()

    def update(moments: Moments, state: Trace, lr: Rate) -> tuple[Moments, Trace]:
        m = state.m.mul(beta).add(moments.first)
        return moments._replace(first=m), Trace(m)

    return Transform(lambda x: Trace(torch.zeros_like(x)), update)


def ema(beta1: float) -> Transform:
    """m ← β1·m + (1−β1)·Δ, first ← m (Reddi et al. 2021 Alg. 2 line 9)."""

    def update(moments: Moments, state: Ema, lr: Rate) -> tuple[Moments, Ema]:
        m = state.m.mul(beta1).add(moments.first, alpha=1 - beta1)
        return moments._replace(first=m), Ema(m)

    return Transform(lambda x: Ema(torch.zeros_like(x)), update)


def ema_second(beta2: float, initial: float) -> Transform:
    """v ← β2·v + (1−β2)·Δ², second ← v, v_0 = ``initial`` (Alg. 2 line 10, FedAdam)."""

    def update(moments: Moments, state: Second, lr: Rate) -> tuple[Moments, Second]:
        sq = moments.direction * moments.direction
        v = state.v.mul(beta2).add(sq, alpha=1 - beta2)
        return moments._replace(second=v), Second(v)

    return Transform(lambda x: Second(torch.full_like(x, initial)), update)


def yogi_second(beta2: float, initial: float) -> Transform:
    """v ← v − (1−β2)·Δ²·sign(v − Δ²), second ← v, v_0 = ``initial`` (Alg. 2 line 10, FedYogi)."""

    def update(moments: Moments, state: Second, lr: Rate) -> tuple[Moments, Second]:
        sq = moments.direction * moments.direction
        v = state.v.sub((1 - beta2) * sq * torch.sign(state.v - sq))
        return moments._replace(second=v), Second(v)

    return Transform(lambda x: Second(torch.full_like(x, initial)), update)


def running_max(floor: float) -> Transform:
    """v̂ ← max(v̂, second), second ← v̂, v̂_0 = ``floor`` (FedAMSGrad; FedAMS Alg. 1 line 8 with
    floor ε, which keeps v̂ ≥ ε)."""

    def update(moments: Moments, state: RunningMax, lr: Rate) -> tuple[Moments, RunningMax]:
        v_max = torch.maximum(state.v_max, second_of(moments, "running_max"))
        return moments._replace(second=v_max), RunningMax(v_max)

    return Transform(lambda x: RunningMax(torch.full_like(x, floor)), update)


def bias_correction(beta1: float, beta2: float) -> Transform:
    """first ← first/(1−β1^t), second ← second/(1−β2^t), with t from :func:`count` (Kingma & Ba 2015).
    β^t is a 0-d float64 tensor on t's device, so the step reads nothing to the host; on a CPU it is the
    number Python's ``β ** t`` is (tests/optim/test_server.py)."""

    def update(moments: Moments, lr: Rate) -> Moments:
        t, second = step_of(moments, "bias_correction").to(torch.float64), second_of(moments, "bias_correction")
        return moments._replace(
            first=moments.first / (1 - torch.pow(beta1, t)), second=second / (1 - torch.pow(beta2, t))
        )

    return stateless(update)


def adaptive_step(s: ServerSpec, additive: float) -> Transform:
    """(bias correction,) η·m̂, then / (√v̂ + τ): the tail shared by the adaptive optimizers."""
    correct = bias_correction(s.beta1, s.beta2) if s.bias_correction else identity()
    return chain(correct, scale_by_lr(), precondition(additive))


SERVER_OPTIMIZERS: dict[str, Callable[[ServerSpec], Transform]] = {
    "sgd": lambda s: chain(count(), trace(s.momentum), scale_by_lr()),
    "adam": lambda s: chain(count(), ema(s.beta1), ema_second(s.beta2, s.initial_accumulator), adaptive_step(s, s.eps)),
    "yogi": lambda s: chain(
        count(), ema(s.beta1), yogi_second(s.beta2, s.initial_accumulator), adaptive_step(s, s.eps)
    ),
    "amsgrad": lambda s: chain(
        count(),
        ema(s.beta1),
        ema_second(s.beta2, s.initial_accumulator),
        running_max(s.initial_accumulator),
        adaptive_step(s, s.eps),
    ),
    "ams": lambda s: chain(
        count(),
        ema(s.beta1),
        ema_second(s.beta2, s.initial_accumulator),
        running_max(max(s.initial_accumulator, s.eps)),
        adaptive_step(s, 0.0),
    ),
}


class ServerOptimizer:
    """Applies a :class:`ServerSpec` to the global model through its ``SERVER_OPTIMIZERS`` chain."""

    def __init__(self, spec: ServerSpec):
        self.spec = spec
        self.transform = SERVER_OPTIMIZERS[spec.optimizer](spec)
        self.lr: Rate = spec.lr  # η_g: the spec's, or a tensor where a population's runs are updated at once

    def at_rate(self, lr: Rate) -> ServerOptimizer:
        """This optimizer stepping at η_g = ``lr`` (a population's runs of several η_g updated together
        under ``torch.func.vmap``, :mod:`fedbench.engine.population_server`, each with its own)."""
        other = copy.copy(self)
        other.lr = lr
        return other

    def init(self, x: torch.Tensor) -> OptState:
        """The optimizer's state at round 0 (the chain's tuple of transform states)."""
        return self.transform.init(x)

    def step(self, x: torch.Tensor, delta: torch.Tensor, state: OptState) -> tuple[torch.Tensor, OptState]:
        """The new global model x + step(Δ) and the optimizer's new state."""
        step, state = apply(self.transform, delta, state, self.lr)
        return x + step, state
