"""Model blocks (``stages()``): composing them is the model, FlatModel runs any range of them on a
flat vector, and models without blocks fail with an error naming the model and the algorithm."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.nn.utils import vector_to_parameters

from fedbench.models import build_model
from fedbench.models.flat import FlatModel

CASES = [
    ("mlp", {"hidden": [7, 5]}, (1, 4, 4), 3, 3),
    ("mlp", {}, (784,), 10, 3),
    ("lenet5", {}, (3, 32, 32), 10, 5),
    ("lenet5", {}, (1, 16, 16), 4, 5),
    ("cnn1d", {}, (1, 40), 10, 4),
    ("cnn1d", {}, (40,), 10, 4),
    ("small_cnn", {}, (1, 8, 8), 10, 4),
    ("resnet18", {"norm": "group"}, (3, 16, 16), 5, 6),
    ("resnet18", {"norm": "batch", "stem": "imagenet"}, (3, 32, 32), 5, 6),
]
IDS = [f"{n}-{'x'.join(map(str, s))}{'-' + str(p) if p else ''}" for n, p, s, _, _ in CASES]


def build(name, params, shape, classes, seed=0):
    torch.manual_seed(seed)
    return build_model(name, params, shape, classes)


@pytest.mark.parametrize("name,params,shape,classes,count", CASES, ids=IDS)
def test_stages_compose_to_forward(name, params, shape, classes, count):
    model = build(name, params, shape, classes).eval()
    x = torch.randn(3, *shape)
    stages = model.stages()
    assert len(stages) == count
    h = x
    for stage in stages:
        h = stage(h)
    torch.testing.assert_close(h, model(x), rtol=0, atol=0)


@pytest.mark.parametrize("name,params,shape,classes,count", CASES, ids=IDS)
def test_run_stages_on_a_flat_vector(name, params, shape, classes, count):
    """run_stages at another point equals the module loaded with that point; split runs chain."""
    model = build(name, params, shape, classes)
    flat = FlatModel(model)
    other = torch.randn(flat.dim) * 0.05
    buffers = flat.buffers()
    x = torch.randn(2, *shape)
    model.eval()
    outs = flat.run_stages(other, buffers, x)
    assert len(outs) == count
    loaded = build(name, params, shape, classes, seed=1).eval()
    vector_to_parameters(other, loaded.parameters())
    torch.testing.assert_close(outs[-1], loaded(x), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(outs[-1], flat.logits(other, buffers, x), rtol=0, atol=0)
    for b in range(1, count):
        tail = flat.run_stages(other, buffers, outs[b - 1], start=b)
        torch.testing.assert_close(tail[-1], outs[-1], rtol=0, atol=0)
    assert torch.equal(
        flat.flatten(), torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    )  # module untouched


def test_mlp_parameter_names_and_order_unchanged():
    model = build("mlp", {"hidden": [7, 5]}, (16,), 3)
    assert [n for n, _ in model.named_parameters()] == [
        "fc1.weight",
        "fc1.bias",
        "fc2.weight",
        "fc2.bias",
        "out.weight",
        "out.bias",
    ]


def test_mlp_representation_is_the_last_hidden_layer():
    model = build("mlp", {"hidden": [7, 5]}, (16,), 3)
    x = torch.randn(4, 16)
    expected = F.relu(model.fc2(F.relu(model.fc1(x))))  # by hand
    flat = FlatModel(model)
    outs = flat.run_stages(flat.flatten(), {}, x)
    torch.testing.assert_close(outs[-2], expected)
    assert outs[-2].shape == (4, 5)


def test_lenet5_blocks_by_hand():
    model = build("lenet5", {}, (1, 16, 16), 4)
    x = torch.randn(2, 1, 16, 16)
    h1 = F.max_pool2d(F.relu(F.conv2d(x, model.conv1.weight, model.conv1.bias)), 2)
    h2 = F.max_pool2d(F.relu(F.conv2d(h1, model.conv2.weight, model.conv2.bias)), 2)
    h3 = F.relu(F.linear(h2.flatten(1), model.fc1.weight, model.fc1.bias))
    h4 = F.relu(F.linear(h3, model.fc2.weight, model.fc2.bias))
    outs = FlatModel(model).run_stages(FlatModel(model).flatten(), {}, x)
    for got, want in zip(outs, [h1, h2, h3, h4, F.linear(h4, model.fc3.weight, model.fc3.bias)]):
        torch.testing.assert_close(got, want)


def test_models_without_blocks_name_the_model_and_the_algorithm():
    conv = FlatModel(build("convmixer", {"dim": 8, "depth": 1, "kernel_size": 3, "patch_size": 2}, (3, 8, 8), 10))
    with pytest.raises(ValueError, match=r"moon needs a model split into blocks.*'convmixer'"):
        conv.num_stages("moon")
    logreg = FlatModel(build("logreg", {}, (60,), 10))
    with pytest.raises(ValueError, match=r"fedmlb needs at least one hidden block.*'logreg'"):
        logreg.num_stages("fedmlb")
    assert FlatModel(build("mlp", {"hidden": [4]}, (6,), 2)).num_stages("moon") == 2
