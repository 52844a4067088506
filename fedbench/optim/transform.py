"""The one shape of every optimizer in :mod:`fedbench.optim` (optax style): a :class:`Transform`
is a pair of functions on flat tensors (``[P]`` for the server, ``[S, P]`` rows for the clients)::

    state = t.init(x)                          # the transform's entries of the state dict
    moments = t.update(moments, state, lr)     # one step: updates ``state``, returns new moments
    step = apply(t, direction, state, lr)      # = t.update(Moments(d, d), state, lr).first

What flows through a chain is :class:`Moments`: the direction d as handed in, the first-moment
estimate that the chain turns into the step, and the second-moment estimate once one is kept.
Transforms :func:`chain` left to right and share one state dict, each owning its own keys; η is
passed to every update (the clients' η_l changes by round) and read by :func:`scale_by_lr`.
The server applies x ← x + step (ascent along Δ), the clients x ← x − step. The named
compositions are the tables ``SERVER_OPTIMIZERS`` (:mod:`.server`) and ``LOCAL_OPTIMIZERS``
(:mod:`.local`); the primitives that differ between the two (in-place ``[P]`` state with a scalar
step count vs. per-round ``[S, P]`` rows with a per-row count) live next to their table.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import torch

OptState = dict[str, torch.Tensor]


class Moments(NamedTuple):
    """What flows through a chain: ``direction`` d as handed in (untouched), ``first`` the estimate
    being built into the step (d at the start), ``second`` the second-moment estimate (or None)."""

    direction: torch.Tensor
    first: torch.Tensor
    second: torch.Tensor | None = None


class Transform(NamedTuple):
    """``init(x) -> state entries`` and ``update(moments, state, lr) -> moments``; an update may
    change ``state`` (in place for the server, whose state dict is rebuilt from ``opt.*`` keys)."""

    init: Callable[[torch.Tensor], OptState]
    update: Callable[[Moments, OptState, float], Moments]


def second_of(moments: Moments, who: str) -> torch.Tensor:
    """The second-moment estimate, which ``who`` reads; an error if no transform before it keeps one."""
    if moments.second is None:
        raise ValueError(f"{who} needs a second-moment transform (e.g. ema_second) before it in the chain")
    return moments.second


def apply(transform: Transform, direction: torch.Tensor, state: OptState, lr: float) -> torch.Tensor:
    """The step that ``transform`` makes of ``direction`` (updating ``state``)."""
    return transform.update(Moments(direction, direction), state, lr).first


def chain(*transforms: Transform) -> Transform:
    """The transforms applied left to right on one shared state dict (init in the same order)."""

    def init(x: torch.Tensor) -> OptState:
        return {k: v for t in transforms for k, v in t.init(x).items()}

    def update(moments: Moments, state: OptState, lr: float) -> Moments:
        for t in transforms:
            moments = t.update(moments, state, lr)
        return moments

    return Transform(init, update)


def identity() -> Transform:
    """No state, moments unchanged (an option switched off, e.g. ``bias_correction: false``)."""
    return Transform(lambda x: {}, lambda moments, state, lr: moments)


def scale_by_lr() -> Transform:
    """first ← η·first, the learning rate of the call."""
    return Transform(lambda x: {}, lambda moments, state, lr: moments._replace(first=lr * moments.first))


def precondition(additive: float) -> Transform:
    """first ← first / (√second + τ): Reddi et al. 2021 Alg. 2 (τ = ``eps``), FedAMS Alg. 1 option 1
    (τ = 0, the floor is inside v̂), Kingma & Ba 2015 Alg. 1 (τ = ε on √v̂)."""

    def update(moments: Moments, state: OptState, lr: float) -> Moments:
        return moments._replace(first=moments.first / (second_of(moments, "precondition").sqrt() + additive))

    return Transform(lambda x: {}, update)
