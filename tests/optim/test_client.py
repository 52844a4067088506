"""The local optimizers as transform chains against the frozen implementation (tests/optim/frozen.py):
bit for bit in the iterates and the optimizer's state, for sgd and Adam with varying β, ε, η_l, rows
and steps K, over several rounds (moments reset each round), in float32 and float64; every step
returns a new state and leaves the one it was given alone."""

import dataclasses
import subprocess
import sys
import typing

import pytest
import torch

from fedbench.optim.client import LOCAL_OPTIMIZERS, LocalAdam, LocalOptimizer, build_local_optimizer
from fedbench.scenario import LocalSpec
from tests.optim import frozen, named, snapshot, unchanged

DTYPES = [torch.float32, torch.float64]


@dataclasses.dataclass
class Scratch:
    """What the frozen optimizer read of its round: η_l and the clients' scratch dict."""

    lr: float
    per_client: dict[str, torch.Tensor]


def round_ctx(rows: int, lr: float, scratch: dict[str, torch.Tensor]) -> Scratch:
    return Scratch(lr, scratch)


def run_rounds(new, old, dtype: torch.dtype, rows: int, seed: int) -> None:
    """Rounds of K steps (K varies by round) from a fresh state each; direction at mixed scales."""
    gen = torch.Generator().manual_seed(seed)
    x_new = x_old = torch.randn(rows, 129, dtype=torch.float64, generator=gen).to(dtype)
    for r, k in enumerate([1, 2, 7, 3, 12]):
        lr = [0.1, 0.013, 1.0, 0.37, 2e-3][r]
        c_old, state = round_ctx(rows, lr, {}), new.init(x_new)
        for step in range(k):
            scale = 10.0 ** torch.empty(rows, 129, dtype=torch.float64).uniform_(-6, 1, generator=gen)
            d = (torch.randn(rows, 129, dtype=torch.float64, generator=gen) * scale).to(dtype)
            d[:, step % 5 :: 11] = 0
            before, previous = snapshot(state), state
            (x_new, state), x_old = new.step(x_new, d.clone(), state, lr), old.step(c_old, x_old, d.clone())
            assert unchanged(previous, before), f"round {r} step {step + 1}: the given state changed"
            assert torch.equal(x_new, x_old), f"round {r} step {step + 1}"
            prefix = f"{new.name}."
            assert named(state).keys() == {n[len(prefix) :] for n in c_old.per_client}
            assert all(torch.equal(named(state)[n[len(prefix) :]], v) for n, v in c_old.per_client.items())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hyper", [(0.9, 0.999, 1e-8), (0.8, 0.95, 1e-6), (0.0, 0.5, 1e-3), (0.99, 0.9999, 0.1)])
@pytest.mark.parametrize("rows", [1, 5])
def test_adam_matches_frozen_bit_for_bit(dtype, hyper, rows):
    run_rounds(LocalAdam(*hyper), frozen.LocalAdam(*hyper), dtype, rows, seed=rows)
    run_rounds(build_local_optimizer("adam", hyper[:2], hyper[2]), frozen.LocalAdam(*hyper), dtype, rows, seed=rows)


@pytest.mark.parametrize("dtype", DTYPES)
def test_sgd_matches_frozen_bit_for_bit_and_keeps_no_state(dtype):
    run_rounds(LocalOptimizer(), frozen.LocalOptimizer(), dtype, 3, seed=0)
    run_rounds(build_local_optimizer("sgd", (0.5, 0.6), 1e-3), frozen.LocalOptimizer(), dtype, 3, seed=0)


def test_adam_rows_are_independent_clients():
    """Rows are clients: stepping three rows together equals stepping each alone, bit for bit."""
    opt = LocalAdam(0.8, 0.95, 1e-6)
    x = torch.randn(3, 6, dtype=torch.float64)
    ds = [torch.randn(3, 6, dtype=torch.float64) for _ in range(4)]
    together, state = x, opt.init(x)
    for d in ds:
        together, state = opt.step(together, d, state, 0.05)
    for i in range(3):
        alone, own = x[i : i + 1], opt.init(x[i : i + 1])
        for d in ds:
            alone, own = opt.step(alone, d[i : i + 1], own, 0.05)
        assert torch.equal(alone, together[i : i + 1]) and named(own)["k"].tolist() == [4.0]


def test_names_and_errors():
    assert set(typing.get_args(LocalSpec.model_fields["optimizer"].annotation)) == set(LOCAL_OPTIMIZERS)
    assert LocalOptimizer().name == "sgd" and LocalAdam().name == "adam" and LocalAdam(0.5).beta1 == 0.5
    with pytest.raises(ValueError, match="local.optimizer must be one of \\['adam', 'sgd'\\], got 'rmsprop'"):
        build_local_optimizer("rmsprop")


def test_optim_imports_nothing_above_it_and_spec_stays_torch_free():
    code = (
        "import sys, fedbench.optim.spec; assert 'torch' not in sys.modules; "
        "import fedbench.optim.client, fedbench.optim.server; "
        "assert not [m for m in sys.modules if m.startswith('fedbench.') and not m.startswith(('fedbench.optim', 'fedbench.strict', 'fedbench.kernels'))]"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
