"""The clients' local optimizers, for algorithms whose local step is x ← x − η_l·d (``local.optimizer``).

The algorithm computes its direction d (the minibatch gradient for FedAvg) and hands it to
``self.ctx.local_optimizer.step(x, d, state, lr)``, which returns x − step and the optimizer's new
state, with the step of the optimizer's entry in ``LOCAL_OPTIMIZERS`` (:mod:`.transform`):

* ``sgd`` (the default, :class:`LocalOptimizer`): step = η_l·d, bit for bit the plain step; no state.
* ``adam`` (:class:`LocalAdam`): Kingma & Ba (2015) Alg. 1 on d, row by row,
  k ← k + 1;  m ← β1·m + (1−β1)·d;  v ← β2·v + (1−β2)·d²;  step = η_l·m̂/(√v̂ + ε),
  m̂ = m/(1−β1^k), v̂ = v/(1−β2^k), with a per-row step counter k. The state is part of the
  clients' round carry (:meth:`~fedbench.algorithms.base.Algorithm.local_init` starts it from
  :meth:`LocalOptimizer.init`), so every client starts each round from m = v = 0 (C-FLAG's clients:
  Adam reset every round, notes §8.8). Weight decay λ is already inside d (the engine's oracle
  returns g + λ·x), ``torch.optim.Adam(weight_decay=λ)``'s convention.

Only algorithms registered with ``local_optimizer=True`` route their step through it; the scenario
check refuses ``local.optimizer: adam`` for the others.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import torch

from fedbench.optim.transform import (
    Moments,
    OptState,
    Rate,
    Transform,
    apply,
    chain,
    precondition,
    scale_by_lr,
    second_of,
    stateless,
    step_of,
)


class RowCount(NamedTuple):
    k: torch.Tensor  # [S] float, steps taken this round per row


class RowEma(NamedTuple):
    m: torch.Tensor  # [S, P]


class RowSecond(NamedTuple):
    v: torch.Tensor  # [S, P]


def ema_rows(beta1: float) -> Transform:
    """m ← β1·m + (1−β1)·d, first ← m (Kingma & Ba 2015 Alg. 1, first moment)."""

    def update(moments: Moments, state: RowEma, lr: Rate) -> tuple[Moments, RowEma]:
        m = beta1 * state.m + (1 - beta1) * moments.first
        return moments._replace(first=m), RowEma(m)

    return Transform(lambda x: RowEma(torch.zeros_like(x)), update)


def ema_second_rows(beta2: float) -> Transform:
    """v ← β2·v + (1−β2)·d², second ← v (Kingma & Ba 2015 Alg. 1, second raw moment)."""

    def update(moments: Moments, state: RowSecond, lr: Rate) -> tuple[Moments, RowSecond]:
        d = moments.direction
        v = beta2 * state.v + (1 - beta2) * d * d
        return moments._replace(second=v), RowSecond(v)

    return Transform(lambda x: RowSecond(torch.zeros_like(x)), update)


def count_rows() -> Transform:
    """k ← k + 1 per client row (``[S]``, float), handed on in ``Moments.step``; reset with the round."""

    def update(moments: Moments, state: RowCount, lr: Rate) -> tuple[Moments, RowCount]:
        k = state.k + 1
        return moments._replace(step=k), RowCount(k)

    return Transform(lambda x: RowCount(x.new_zeros(x.shape[0])), update)


def bias_correction_rows(beta1: float, beta2: float) -> Transform:
    """m̂ = m/(1−β1^k), v̂ = v/(1−β2^k) with each row's own k from :func:`count_rows`."""

    def update(moments: Moments, lr: Rate) -> Moments:
        k, second = step_of(moments, "bias_correction_rows"), second_of(moments, "bias_correction_rows")
        first = moments.first / (1 - beta1**k).unsqueeze(1)
        return moments._replace(first=first, second=second / (1 - beta2**k).unsqueeze(1))

    return stateless(update)


LOCAL_OPTIMIZERS: dict[str, Callable[[float, float, float], Transform]] = {
    "sgd": lambda beta1, beta2, eps: scale_by_lr(),
    "adam": lambda beta1, beta2, eps: chain(
        count_rows(),
        ema_rows(beta1),
        ema_second_rows(beta2),
        bias_correction_rows(beta1, beta2),
        scale_by_lr(),
        precondition(eps),
    ),
}


@dataclass(frozen=True)
class LocalOptimizer:
    """The clients' step x ← x − step(d) of ``LOCAL_OPTIMIZERS[name]`` (``local.optimizer``, with
    ``local.betas``/``local.eps``); its state rides in the clients' round carry."""

    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    name: str = "sgd"
    transform: Transform = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.name not in LOCAL_OPTIMIZERS:
            raise ValueError(f"local.optimizer must be one of {sorted(LOCAL_OPTIMIZERS)}, got {self.name!r}")
        object.__setattr__(self, "transform", LOCAL_OPTIMIZERS[self.name](self.beta1, self.beta2, self.eps))

    def init(self, x: torch.Tensor) -> OptState:
        """The state of rows ``x`` ``[S, P]`` at the start of a round."""
        return self.transform.init(x)

    def step(
        self, x: torch.Tensor, direction: torch.Tensor, state: OptState, lr: Rate
    ) -> tuple[torch.Tensor, OptState]:
        """x − step(d) for the round's rows ``[S, P]`` at η_l = ``lr``, and the new state."""
        step, state = apply(self.transform, direction, state, lr)
        return x - step, state


@dataclass(frozen=True)
class LocalAdam(LocalOptimizer):
    """``local.optimizer: adam``: Adam on d per client, reset every round (Kingma & Ba 2015 Alg. 1)."""

    name: str = "adam"


def build_local_optimizer(name: str, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> LocalOptimizer:
    """The scenario's ``local.optimizer`` (a ``LOCAL_OPTIMIZERS`` name) with ``local.betas``/``local.eps``."""
    return LocalOptimizer(betas[0], betas[1], eps, name=name)
