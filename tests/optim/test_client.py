"""The local optimizers as transform chains against the frozen implementation (tests/optim/frozen.py):
bit for bit in the iterates and the round's scratch, for sgd and Adam with varying β, ε, η_l, rows
and steps K, over several rounds (moments reset each round), in float32 and float64."""

import subprocess
import sys
import typing

import pytest
import torch

from fedbench.algorithms.base import RoundContext
from fedbench.optim.client import LOCAL_OPTIMIZERS, LocalAdam, LocalOptimizer, build_local_optimizer
from fedbench.scenario import LocalSpec
from tests.optim import frozen

DTYPES = [torch.float32, torch.float64]


def round_ctx(rows: int, lr: float, scratch: dict[str, torch.Tensor]) -> RoundContext:
    return RoundContext(torch.arange(rows), lr, torch.full((rows,), 3.0), {"x": torch.zeros(1)}, scratch)


def run_rounds(new, old, dtype: torch.dtype, rows: int, seed: int) -> None:
    """Rounds of K steps (K varies by round) with a fresh scratch each; direction at mixed scales."""
    gen = torch.Generator().manual_seed(seed)
    x_new = x_old = torch.randn(rows, 129, dtype=torch.float64, generator=gen).to(dtype)
    for r, k in enumerate([1, 2, 7, 3, 12]):
        lr = [0.1, 0.013, 1.0, 0.37, 2e-3][r]
        keep = torch.randn(rows, 4, generator=gen)  # an algorithm's own scratch entry, left alone
        c_new, c_old = round_ctx(rows, lr, {"acc": keep}), round_ctx(rows, lr, {"acc": keep})
        for step in range(k):
            scale = 10.0 ** torch.empty(rows, 129, dtype=torch.float64).uniform_(-6, 1, generator=gen)
            d = (torch.randn(rows, 129, dtype=torch.float64, generator=gen) * scale).to(dtype)
            d[:, step % 5 :: 11] = 0
            x_new, x_old = new.step(c_new, x_new, d.clone()), old.step(c_old, x_old, d.clone())
            assert torch.equal(x_new, x_old), f"round {r} step {step + 1}"
            assert c_new.per_client.keys() == c_old.per_client.keys()
            assert all(torch.equal(c_new.per_client[n], v) for n, v in c_old.per_client.items())
        assert c_new.per_client["acc"] is keep


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hyper", [(0.9, 0.999, 1e-8), (0.8, 0.95, 1e-6), (0.0, 0.5, 1e-3), (0.99, 0.9999, 0.1)])
@pytest.mark.parametrize("rows", [1, 5])
def test_adam_matches_frozen_bit_for_bit(dtype, hyper, rows):
    run_rounds(LocalAdam(*hyper), frozen.LocalAdam(*hyper), dtype, rows, seed=rows)
    run_rounds(build_local_optimizer("adam", hyper[:2], hyper[2]), frozen.LocalAdam(*hyper), dtype, rows, seed=rows)


@pytest.mark.parametrize("dtype", DTYPES)
def test_sgd_matches_frozen_bit_for_bit_and_leaves_the_scratch_alone(dtype):
    run_rounds(LocalOptimizer(), frozen.LocalOptimizer(), dtype, 3, seed=0)
    run_rounds(build_local_optimizer("sgd", (0.5, 0.6), 1e-3), frozen.LocalOptimizer(), dtype, 3, seed=0)


def test_adam_through_the_sequential_engines_row_contexts():
    """The sequential engine runs ``ctx.select(rows)``: a client's moments live in its own dict."""
    new, old = LocalAdam(0.8, 0.95, 1e-6), frozen.LocalAdam(0.8, 0.95, 1e-6)
    ctx = round_ctx(3, 0.05, {})
    x = torch.randn(3, 6, dtype=torch.float64)
    for i in range(3):
        c_new, c_old = ctx.select(slice(i, i + 1)), ctx.select(slice(i, i + 1))
        x_new = x_old = x[i : i + 1]
        for _ in range(i + 2):
            d = torch.randn(1, 6, dtype=torch.float64)
            x_new, x_old = new.step(c_new, x_new, d), old.step(c_old, x_old, d)
        assert torch.equal(x_new, x_old) and c_new.per_client["adam.k"].tolist() == [i + 2.0]


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
