"""The transform shape itself: chain order, each transform's own state, the step that ``apply`` returns."""

from typing import NamedTuple

import pytest
import torch

from fedbench.optim.transform import EMPTY, Moments, Transform, apply, chain, identity, precondition, scale_by_lr


class Counted(NamedTuple):
    n: torch.Tensor


def counter() -> Transform:
    """A test transform: counts its calls in its own state, appends the count to ``first``."""

    def update(moments: Moments, state: Counted, lr: float) -> tuple[Moments, Counted]:
        n = state.n + 1
        return moments._replace(first=moments.first * 10 + n), Counted(n)

    return Transform(lambda x: Counted(torch.zeros((), dtype=x.dtype)), update)


def test_chain_inits_in_order_applies_left_to_right_and_nests():
    t = chain(counter(), identity(), chain(counter(), scale_by_lr()))
    state = t.init(torch.zeros(2))
    assert state == (Counted(torch.tensor(0.0)), EMPTY, (Counted(torch.tensor(0.0)), EMPTY))
    step, state = apply(t, torch.ones(2), state, 0.5)
    assert torch.equal(step, torch.full((2,), 0.5 * ((1 * 10 + 1) * 10 + 1)))
    again, _ = apply(t, torch.ones(2), state, 1.0)
    assert again[0] == (1 * 10 + 2) * 10 + 2
    replay, _ = apply(t, torch.ones(2), state, 1.0)  # the state given is not consumed
    assert torch.equal(replay, again)


def test_precondition_divides_the_scaled_first_moment():
    first, second = torch.tensor([3.0, -2.0]), torch.tensor([4.0, 0.25])
    out, _ = chain(scale_by_lr(), precondition(0.5)).update(Moments(first, first, second), (EMPTY, EMPTY), 2.0)
    assert torch.equal(out.first, 2.0 * first / (second.sqrt() + 0.5)) and out.second is second
    with pytest.raises(ValueError, match="precondition needs a second-moment transform"):
        apply(precondition(0.1), first, EMPTY, 1.0)
