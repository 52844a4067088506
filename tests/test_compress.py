"""Compressors: decoded values, exact payload sizes, unbiasedness, determinism."""

import numpy as np
import pytest
import torch

from fedbench.compress import build_compressor

LAYOUT = (6, 3, 11)  # three "tensors" of one 20-dim model


def rows(seed=0, s=3, d=20):
    return torch.randn(s, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_identity_costs_32_bits_per_float():
    c = build_compressor("none", {}, LAYOUT)
    x = rows()
    out = c(x, 0, 1, torch.tensor([0, 1, 2]))
    assert torch.equal(out.value, x) and out.bits.tolist() == [640.0] * 3


def test_scaled_sign():
    c = build_compressor("sign", {}, LAYOUT)
    x = rows()
    out = c(x, 0, 1, torch.tensor([0, 1, 2]))
    expected = np.sign(x.numpy()) * np.abs(x.numpy()).sum(1, keepdims=True) / 20
    np.testing.assert_allclose(out.value.numpy(), expected)
    assert out.bits.tolist() == [52.0] * 3  # d + 32


@pytest.mark.parametrize("ratio,k", [(0.25, 5), (1 / 64, 1), (1.0, 20)])
def test_topk_keeps_the_k_largest_magnitudes(ratio, k):
    c = build_compressor("topk", {"ratio": ratio}, LAYOUT)
    x = rows()
    out = c(x, 0, 1, torch.tensor([0, 1, 2])).value.numpy()
    for r in range(3):
        keep = np.argsort(-np.abs(x[r].numpy()))[:k]
        expected = np.zeros(20)
        expected[keep] = x[r].numpy()[keep]
        np.testing.assert_array_equal(out[r], expected)
    assert c.payload_bits(20) == 64 * k


def test_stochastic_quantizer_is_unbiased_on_its_grid_and_deterministic():
    bits = 2
    c = build_compressor("stochastic", {"bits": bits}, LAYOUT)
    x = rows(s=1)
    draws = torch.cat([c(x, seed=0, round_=r, clients=torch.tensor([4])).value for r in range(4000)])
    mean_err = (draws.mean(0) - x[0]).abs()
    spread = draws.std(0) / np.sqrt(len(draws))
    assert (mean_err <= 5 * spread + 1e-12).all()  # unbiased within 5 standard errors
    start = 0
    for size in LAYOUT:  # every value is sign(z)·(lo + k·step) of its own tensor's grid
        z, q = x[0, start : start + size], draws[:, start : start + size]
        lo, hi = z.abs().min(), z.abs().max()
        k = (q.abs() - lo) / ((hi - lo) / (2**bits - 1))
        assert torch.allclose(k, k.round(), atol=1e-9) and (k.round() >= 0).all() and (k.round() <= 3).all()
        assert (torch.sign(q) == torch.sign(z)).all()
        start += size
    again = c(x, 0, 7, torch.tensor([4])).value
    assert torch.equal(again, c(x, 0, 7, torch.tensor([4])).value)
    assert not torch.equal(again, c(x, 0, 7, torch.tensor([5])).value)
    assert c.payload_bits(20) == 20 * (bits + 1) + 2 * 32 * 3


def test_stochastic_quantizer_sends_a_constant_tensor_exactly():
    c = build_compressor("stochastic", {"bits": 1}, (4,))
    x = torch.tensor([[0.5, -0.5, 0.5, 0.5]], dtype=torch.float64)
    assert torch.equal(c(x, 0, 1, torch.tensor([0])).value, x)


def test_table2_of_fedcams_exactly():
    """FedCAMS Table 2: per client, ResNet-18 (d = 11,173,962), T = 500 rounds."""
    d, T = 11_173_962, 500
    exact = {  # (one-way, two-way) from the notes §5.3; uncompressed = 32·d·2T for every row
        ("sign", None): (184_370_389_000, 11_173_994_000),
        ("topk", 1 / 64): (184_370_368_000, 11_173_952_000),
        ("topk", 1 / 128): (181_576_864_000, 5_586_944_000),
        ("topk", 1 / 256): (180_180_128_000, 2_793_472_000),
    }
    for (kind, ratio), (one_way, two_way) in exact.items():
        c = build_compressor(kind, {"ratio": ratio} if ratio else {}, (d,))
        up = c.payload_bits(d)
        assert (up + 32 * d) * T == one_way and 2 * up * T == two_way
    assert build_compressor("none", {}, (d,)).payload_bits(d) * 2 * T == 357_566_784_000
