"""Per-row BatchNorm and dropout of the batched executor against torch's own layers."""

import pytest
import torch
from torch import nn

from fedbench.engine.batched_layers import RowLayers, hash_uniform, mix32
from fedbench.models.flat import FlatModel


@pytest.mark.parametrize("momentum", [0.1, None])
def test_masked_batchnorm_is_torch_batchnorm_on_the_real_samples(momentum):
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(2, 3, 3),
        nn.BatchNorm2d(3, momentum=momentum),
        nn.Flatten(),
        nn.Linear(12, 4),
        nn.BatchNorm1d(4, momentum=momentum),
    ).double()
    model = FlatModel(net)
    layers = RowLayers.of(model)
    flat, buffers = model.flatten(), model.buffers()
    x = torch.randn(7, 2, 4, 4, dtype=torch.float64)
    mask = torch.tensor([1.0] * 5 + [0.0] * 2, dtype=torch.float64)
    net.train()
    out, updated = layers.logits(flat, buffers, x, mask, torch.tensor(0))
    reference = {k: v.clone() for k, v in buffers.items()}
    expected = model.logits(flat, reference, x[:5])  # torch's BatchNorm, statistics updated in place
    torch.testing.assert_close(out[:5], expected, rtol=1e-12, atol=1e-12)
    assert torch.equal(out[5:], torch.zeros_like(out[5:]))  # padding leaves the last BatchNorm as zeros
    assert set(updated) == set(reference)
    for name, value in reference.items():
        torch.testing.assert_close(updated[name], value, rtol=1e-12, atol=1e-12)
    assert all(torch.equal(buffers[k], model.buffers()[k]) for k in buffers)  # the caller's buffers are untouched


def test_keyed_dropout_depends_on_key_and_layer_only_and_keeps_one_minus_p():
    u = hash_uniform(torch.tensor(7), 0, torch.Size([200, 50]))
    assert u.min() >= 0 and u.max() < 1 and abs(float(u.mean()) - 0.5) < 0.01
    assert torch.equal(u, hash_uniform(torch.tensor(7), 0, torch.Size([200, 50])))
    assert not torch.equal(u, hash_uniform(torch.tensor(8), 0, torch.Size([200, 50])))
    assert not torch.equal(u, hash_uniform(torch.tensor(7), 1, torch.Size([200, 50])))
    net = nn.Sequential(nn.Linear(5, 400), nn.Dropout(0.25))
    layers, x = RowLayers.of(FlatModel(net)), torch.randn(3, 5)
    flat = layers.model.flatten()
    net.train()
    out, _ = layers.logits(flat, {}, x, torch.ones(3), torch.tensor(1))
    dense = net[0](x)
    kept = out != 0
    assert abs(float(kept.float().mean()) - 0.75) < 0.05
    torch.testing.assert_close(out[kept], dense[kept] / 0.75)
    hidden = torch.randn(3, 400)  # outside logits the layer is torch's dropout again, on torch's generator
    torch.manual_seed(5)
    own = net[1](hidden)
    torch.manual_seed(5)
    torch.testing.assert_close(own, nn.functional.dropout(hidden, 0.25), rtol=0, atol=0)
    with pytest.raises(RuntimeError, match="RowLayers.of"):  # one set of per-row forwards per model
        RowLayers(FlatModel(net))


def test_mix32_is_a_32_bit_bijection_without_overflow():
    x = torch.arange(0, 1 << 16, dtype=torch.int64) * 65537
    h = mix32(x)
    assert h.min() >= 0 and h.max() < 2**32 and len(torch.unique(h)) == len(x)
    assert int(mix32(torch.tensor(0xFFFFFFFF))) < 2**32
