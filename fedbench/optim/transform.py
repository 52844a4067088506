"""The one shape of every optimizer in :mod:`fedbench.optim` (optax's): a :class:`Transform` is a
pair of pure functions on flat tensors (``[P]`` for the server, ``[S, P]`` rows for the clients)::

    state = t.init(x)                                 # the transform's own typed state
    moments, state = t.update(moments, state, lr)     # one step: new moments, new state
    step, state = apply(t, direction, state, lr)      # = t.update(Moments(d, d), state, lr), .first

Nothing is updated in place: every update returns its new state, and a caller keeps the one
returned (the server's inside the algorithm's :class:`~fedbench.algorithms.state.ServerState`,
the clients' inside their round carry). Each transform's state is its own ``NamedTuple``
(:class:`Count`, :class:`Trace`, …); :func:`chain` keeps the tuple of its members' states, in
order. What flows through a chain is :class:`Moments`: the direction d as handed in, the
first-moment estimate that the chain turns into the step, and the second-moment estimate once one
is kept. η is passed to every update (the clients' η_l changes by round) and read by
:func:`scale_by_lr`. The server applies x ← x + step (ascent along Δ), the clients x ← x − step.
The named compositions are the tables ``SERVER_OPTIMIZERS`` (:mod:`.server`) and
``LOCAL_OPTIMIZERS`` (:mod:`.client`); the primitives that differ between the two (``[P]`` state
with a scalar step count vs. per-round ``[S, P]`` rows with a per-row count, and the float
operations each was pinned with) live next to their table.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch

OptState = Any
"""A transform's state: a ``NamedTuple`` of tensors (``()`` when it keeps none; a tuple of its
members' states for a :func:`chain`). A pytree, so ``torch.utils._pytree`` maps over it."""


class Empty(NamedTuple):
    """The state of a transform that keeps none."""


EMPTY = Empty()


Rate = float | torch.Tensor
"""A learning rate: a float, or a column ``[S, 1]`` of per-row rates (the η_l of a population's runs,
:mod:`fedbench.engine.population_rows`)."""


class Moments(NamedTuple):
    """What flows through a chain: ``direction`` d as handed in (untouched), ``first`` the estimate
    being built into the step (d at the start), ``second`` the second-moment estimate (or None),
    ``step`` the step count t once a counting transform has passed (bias correction reads it)."""

    direction: torch.Tensor
    first: torch.Tensor
    second: torch.Tensor | None = None
    step: torch.Tensor | None = None


class Transform(NamedTuple):
    """``init(x) -> state`` and ``update(moments, state, lr) -> (moments, state)``, both pure."""

    init: Callable[[torch.Tensor], OptState]
    update: Callable[[Moments, OptState, Rate], tuple[Moments, OptState]]


def stateless(update: Callable[[Moments, Rate], Moments]) -> Transform:
    """A transform that keeps no state, from its moments map."""
    return Transform(lambda x: EMPTY, lambda moments, state, lr: (update(moments, lr), state))


def second_of(moments: Moments, who: str) -> torch.Tensor:
    """The second-moment estimate, which ``who`` reads; an error if no transform before it keeps one."""
    if moments.second is None:
        raise ValueError(f"{who} needs a second-moment transform (e.g. ema_second) before it in the chain")
    return moments.second


def step_of(moments: Moments, who: str) -> torch.Tensor:
    """The step count t, which ``who`` reads; an error if no counting transform comes before it."""
    if moments.step is None:
        raise ValueError(f"{who} needs a counting transform (count, count_rows) before it in the chain")
    return moments.step


def apply(transform: Transform, direction: torch.Tensor, state: OptState, lr: Rate) -> tuple[torch.Tensor, OptState]:
    """The step that ``transform`` makes of ``direction``, and its new state."""
    moments, state = transform.update(Moments(direction, direction), state, lr)
    return moments.first, state


def chain(*transforms: Transform) -> Transform:
    """The transforms applied left to right; the state is the tuple of theirs, in the same order."""

    def init(x: torch.Tensor) -> OptState:
        return tuple(t.init(x) for t in transforms)

    def update(moments: Moments, state: OptState, lr: Rate) -> tuple[Moments, OptState]:
        new = []
        for t, own in zip(transforms, state, strict=True):
            moments, own = t.update(moments, own, lr)
            new.append(own)
        return moments, tuple(new)

    return Transform(init, update)


def identity() -> Transform:
    """No state, moments unchanged (an option switched off, e.g. ``bias_correction: false``)."""
    return stateless(lambda moments, lr: moments)


def scale_by_lr() -> Transform:
    """first ← η·first, the learning rate of the call."""
    return stateless(lambda moments, lr: moments._replace(first=lr * moments.first))


def precondition(additive: float) -> Transform:
    """first ← first / (√second + τ): Reddi et al. 2021 Alg. 2 (τ = ``eps``), FedAMS Alg. 1 option 1
    (τ = 0, the floor is inside v̂), Kingma & Ba 2015 Alg. 1 (τ = ε on √v̂)."""

    def update(moments: Moments, lr: Rate) -> Moments:
        return moments._replace(first=moments.first / (second_of(moments, "precondition").sqrt() + additive))

    return stateless(update)
