"""The server optimizers as transform chains against the frozen if/elif implementation
(tests/optim/frozen.py): bit for bit (``torch.equal``) in the new model and every state tensor,
over many random steps, for every optimizer and option, in float32 and float64."""

import itertools

import pytest
import torch

from fedbench.optim.server import SERVER_OPTIMIZERS, ServerOptimizer
from fedbench.optim.spec import ServerSpec
from tests.optim import frozen

DTYPES = [torch.float32, torch.float64]
P, STEPS = 257, 60


def random_delta(gen: torch.Generator, dtype: torch.dtype, t: int) -> torch.Tensor:
    """Δ with coordinates at scales 1e-5 … 10 (jittered each step), exact zeros and a repeated step,
    so Yogi's sign(v − Δ²) takes every value and the AMS floor ε binds on some coordinates only."""
    jitter = torch.empty(P, dtype=torch.float64).uniform_(-0.5, 0.5, generator=gen)
    scale = 10.0 ** (torch.linspace(-5, 1, P, dtype=torch.float64) + jitter)
    delta = (torch.randn(P, dtype=torch.float64, generator=gen) * scale).to(dtype)
    delta[torch.rand(P, generator=gen) < 0.1] = 0
    if t % 7 == 3:  # same magnitudes again: v − Δ² crosses zero
        delta = delta.flip(0)
    return delta


def run_both(spec: ServerSpec, dtype: torch.dtype, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    x_new = x_old = torch.randn(P, dtype=torch.float64, generator=gen).to(dtype)
    new, old = ServerOptimizer(spec), frozen.ServerOptimizer(spec)
    s_new, s_old = new.init(x_new), old.init(x_old)
    assert list(s_new) == list(s_old)
    for t in range(STEPS):
        delta = random_delta(gen, dtype, t)
        x_new, x_old = new.step(x_new, delta.clone(), s_new), old.step(x_old, delta.clone(), s_old)
        assert torch.equal(x_new, x_old), f"{spec.optimizer} x differs at step {t + 1}"
        for k in s_old:
            assert s_new[k].dtype == s_old[k].dtype and torch.equal(s_new[k], s_old[k]), f"{k} differs at step {t + 1}"
    assert list(s_new) == list(s_old) and int(s_new["step"]) == STEPS


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("momentum", [0.0, 0.5, 0.9])
@pytest.mark.parametrize("lr", [1.0, 0.37])
def test_sgd_and_momentum_match_frozen_bit_for_bit(dtype, momentum, lr):
    run_both(ServerSpec(optimizer="sgd", momentum=momentum, lr=lr, bias_correction=True), dtype, seed=1)


ADAPTIVE = list(itertools.product(
    ["adam", "yogi", "amsgrad", "ams"],  # optimizer
    [False, True],  # bias_correction
    [0.0, 1e-6, 0.1],  # initial_accumulator
    [(0.9, 0.99, 1e-3, 0.1), (0.5, 0.999, 1e-8, 1.0), (0.0, 0.3, 0.05, 0.01)],  # beta1, beta2, eps, lr
))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name, bias_correction, initial, hyper", ADAPTIVE)
def test_adaptive_optimizers_match_frozen_bit_for_bit(dtype, name, bias_correction, initial, hyper):
    beta1, beta2, eps, lr = hyper
    spec = ServerSpec(
        optimizer=name, bias_correction=bias_correction, initial_accumulator=initial,
        beta1=beta1, beta2=beta2, eps=eps, lr=lr,
    )
    run_both(spec, dtype, seed=len(name) + 10 * int(bias_correction))


def test_yogi_sign_takes_every_value_and_ams_floor_binds_in_the_test_data():
    """The random Δ of these tests exercise what they claim to: sign(v − Δ²) ∈ {−1, 0, 1} and v < ε."""
    gen = torch.Generator().manual_seed(0)
    opt = ServerOptimizer(ServerSpec(optimizer="yogi"))
    state, signs = opt.init(torch.zeros(P)), set()
    for t in range(STEPS):
        delta = random_delta(gen, torch.float32, t)
        signs |= set(torch.sign(state["v"] - delta * delta).tolist())
        opt.step(torch.zeros(P), delta, state)
    assert signs == {-1.0, 0.0, 1.0}
    ams = ServerOptimizer(ServerSpec(optimizer="ams"))
    state = ams.init(torch.zeros(P))
    for t in range(STEPS):
        ams.step(torch.zeros(P), random_delta(gen, torch.float32, t), state)
    assert (state["v"] < 1e-3).any() and (state["v"] > 1e-3).any() and (state["v_max"] >= 1e-3).all()


def test_state_is_updated_in_place_through_a_rebuilt_dict():
    """The algorithms keep the state under ``opt.*`` and hand the optimizer a fresh dict each round."""
    for name in SERVER_OPTIMIZERS:
        spec = ServerSpec(optimizer=name, momentum=0.9 if name == "sgd" else 0.0)
        opt, ref = ServerOptimizer(spec), frozen.ServerOptimizer(spec)
        full = {f"opt.{k}": v for k, v in opt.init(torch.zeros(5)).items()}
        x, x_ref, s_ref = torch.zeros(5), torch.zeros(5), ref.init(torch.zeros(5))
        for t in range(4):
            delta = torch.randn(5, generator=torch.Generator().manual_seed(t))
            x = opt.step(x, delta, {k[4:]: v for k, v in full.items()})
            x_ref = ref.step(x_ref, delta, s_ref)
        assert torch.equal(x, x_ref) and all(torch.equal(full[f"opt.{k}"], v) for k, v in s_ref.items())


def test_every_spec_optimizer_is_a_table_entry():
    names = set(ServerSpec.model_fields["optimizer"].annotation.__args__)
    assert names == set(SERVER_OPTIMIZERS)
