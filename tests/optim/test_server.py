"""The server optimizers as transform chains against the frozen if/elif implementation
(tests/optim/frozen.py): bit for bit (``torch.equal``) in the new model and every state tensor,
over many random steps, for every optimizer and option, in float32 and float64; every update
returns a new state and leaves the one it was given as it was."""

import itertools

import pytest
import torch

from fedbench.optim.server import SERVER_OPTIMIZERS, ServerOptimizer
from fedbench.optim.spec import ServerSpec
from tests.optim import frozen, named, snapshot, unchanged

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
    assert set(named(s_new)) == set(s_old)
    for t in range(STEPS):
        delta = random_delta(gen, dtype, t)
        before = snapshot(s_new)
        previous = s_new
        (x_new, s_new), x_old = new.step(x_new, delta.clone(), s_new), old.step(x_old, delta.clone(), s_old)
        assert unchanged(previous, before), f"{spec.optimizer} changed the state it was given at step {t + 1}"
        assert torch.equal(x_new, x_old), f"{spec.optimizer} x differs at step {t + 1}"
        mine = named(s_new)
        for k in s_old:
            assert mine[k].dtype == s_old[k].dtype and torch.equal(mine[k], s_old[k]), f"{k} differs at step {t + 1}"
    assert set(named(s_new)) == set(s_old) and int(named(s_new)["step"]) == STEPS


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("momentum", [0.0, 0.5, 0.9])
@pytest.mark.parametrize("lr", [1.0, 0.37])
def test_sgd_and_momentum_match_frozen_bit_for_bit(dtype, momentum, lr):
    run_both(ServerSpec(optimizer="sgd", momentum=momentum, lr=lr, bias_correction=True), dtype, seed=1)


ADAPTIVE = list(
    itertools.product(
        ["adam", "yogi", "amsgrad", "ams"],  # optimizer
        [False, True],  # bias_correction
        [0.0, 1e-6, 0.1],  # initial_accumulator
        [(0.9, 0.99, 1e-3, 0.1), (0.5, 0.999, 1e-8, 1.0), (0.0, 0.3, 0.05, 0.01)],  # beta1, beta2, eps, lr
    )
)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name, bias_correction, initial, hyper", ADAPTIVE)
def test_adaptive_optimizers_match_frozen_bit_for_bit(dtype, name, bias_correction, initial, hyper):
    beta1, beta2, eps, lr = hyper
    spec = ServerSpec(
        optimizer=name,
        bias_correction=bias_correction,
        initial_accumulator=initial,
        beta1=beta1,
        beta2=beta2,
        eps=eps,
        lr=lr,
    )
    run_both(spec, dtype, seed=len(name) + 10 * int(bias_correction))


def test_yogi_sign_takes_every_value_and_ams_floor_binds_in_the_test_data():
    """The random Δ of these tests exercise what they claim to: sign(v − Δ²) ∈ {−1, 0, 1} and v < ε."""
    gen = torch.Generator().manual_seed(0)
    opt = ServerOptimizer(ServerSpec(optimizer="yogi"))
    state, signs = opt.init(torch.zeros(P)), set()
    for t in range(STEPS):
        delta = random_delta(gen, torch.float32, t)
        signs |= set(torch.sign(named(state)["v"] - delta * delta).tolist())
        _, state = opt.step(torch.zeros(P), delta, state)
    assert signs == {-1.0, 0.0, 1.0}
    ams = ServerOptimizer(ServerSpec(optimizer="ams"))
    state = ams.init(torch.zeros(P))
    for t in range(STEPS):
        _, state = ams.step(torch.zeros(P), random_delta(gen, torch.float32, t), state)
    v, v_max = named(state)["v"], named(state)["v_max"]
    assert (v < 1e-3).any() and (v > 1e-3).any() and (v_max >= 1e-3).all()


def test_each_transform_keeps_its_own_typed_state_and_an_old_state_replays_the_same_step():
    """Pure updates: stepping twice from one state gives the same model and state both times."""
    for name in SERVER_OPTIMIZERS:
        opt = ServerOptimizer(ServerSpec(optimizer=name, momentum=0.9 if name == "sgd" else 0.0, bias_correction=True))
        state = opt.init(torch.zeros(5))
        assert all(hasattr(s, "_fields") or type(s) is tuple for s in state), (
            state
        )  # a NamedTuple per transform, a tuple per chain
        for t in range(3):
            _, state = opt.step(torch.zeros(5), torch.randn(5, generator=torch.Generator().manual_seed(t)), state)
        delta = torch.randn(5)
        (x1, s1), (x2, s2) = opt.step(torch.ones(5), delta, state), opt.step(torch.ones(5), delta, state)
        assert torch.equal(x1, x2) and all(torch.equal(named(s1)[k], v) for k, v in named(s2).items())


def test_every_spec_optimizer_is_a_table_entry():
    names = set(ServerSpec.model_fields["optimizer"].annotation.__args__)
    assert names == set(SERVER_OPTIMIZERS)


@pytest.mark.parametrize("beta", [0.9, 0.99, 0.999, 0.5])
def test_bias_corrections_power_is_pythons_on_a_cpu(beta):
    """β^t of a 0-d float64 tensor t (what bias correction divides by) is Python's β ** t, for t up to 20,000."""
    t = torch.arange(1, 20_001, dtype=torch.float64)
    got = torch.tensor([float(torch.pow(beta, k)) for k in t.unbind()], dtype=torch.float64)
    want = torch.tensor([beta ** float(k) for k in range(1, 20_001)], dtype=torch.float64)
    assert torch.equal(got, want)


@pytest.mark.parametrize("name", ["adam", "amsgrad", "ams"])
def test_a_bias_corrected_step_reads_nothing_to_the_host(name):
    from fedbench.engine.pending import HostReads

    opt = ServerOptimizer(ServerSpec(optimizer=name, bias_correction=True))
    x = torch.zeros(5)
    state = opt.init(x)
    with HostReads() as reads:
        for _ in range(3):
            x, state = opt.step(x, torch.ones(5), state)
    assert reads.count == 0, reads.where
