"""The transform shape itself: chain order, shared state, the step that ``apply`` returns."""

import pytest
import torch

from fedbench.optim.transform import Moments, Transform, apply, chain, identity, precondition, scale_by_lr


def counter(key: str) -> Transform:
    """A test transform: owns ``key``, counts calls, appends its key's count to ``first``."""

    def update(moments: Moments, state: dict, lr: float) -> Moments:
        state[key] += 1
        return moments._replace(first=moments.first * 10 + state[key])

    return Transform(lambda x: {key: torch.zeros((), dtype=x.dtype)}, update)


def test_chain_inits_in_order_applies_left_to_right_and_nests():
    t = chain(counter("a"), identity(), chain(counter("b"), scale_by_lr()))
    state = t.init(torch.zeros(2))
    assert list(state) == ["a", "b"]
    step = apply(t, torch.ones(2), state, 0.5)
    assert torch.equal(step, torch.full((2,), 0.5 * ((1 * 10 + 1) * 10 + 1)))
    assert apply(t, torch.ones(2), state, 1.0)[0] == (1 * 10 + 2) * 10 + 2


def test_precondition_divides_the_scaled_first_moment():
    first, second = torch.tensor([3.0, -2.0]), torch.tensor([4.0, 0.25])
    out = chain(scale_by_lr(), precondition(0.5)).update(Moments(first, first, second), {}, 2.0)
    assert torch.equal(out.first, 2.0 * first / (second.sqrt() + 0.5)) and out.second is second
    with pytest.raises(ValueError, match="precondition needs a second-moment transform"):
        apply(precondition(0.1), first, {}, 1.0)
