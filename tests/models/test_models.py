"""Model registry: shapes, exact parameter counts, determinism, validation, functional_call."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError
from torch import nn
from torch.func import functional_call, grad

from fedbench.models import MODELS, build_model, count_parameters
from fedbench.registry import UnknownNameError

# (name, params, input_shape, num_classes) on each model's intended input
CASES = [
    ("mlp", {}, (1, 28, 28), 10),
    ("mlp", {"hidden": [32]}, (784,), 10),
    ("logreg", {}, (60,), 10),
    ("lenet5", {}, (3, 32, 32), 10),
    ("lenet5", {}, (1, 28, 28), 10),
    ("cnn1d", {}, (1, 40), 10),
    ("cnn1d", {}, (40,), 10),
    ("small_cnn", {}, (1, 8, 8), 10),
    ("leaf_cnn", {}, (1, 28, 28), 62),
    ("char_lstm", {"hidden": 16}, (80,), 80),
    ("resnet18", {"norm": "batch"}, (3, 32, 32), 10),
    ("resnet18", {"norm": "group"}, (3, 32, 32), 100),
    ("resnet18", {"norm": "group", "stem": "imagenet"}, (3, 32, 32), 10),
    ("resnet18", {"norm": "group", "stem": "imagenet"}, (3, 64, 64), 200),
]
IDS = [f"{n}-{'x'.join(map(str, s))}-{k}{'-' + str(p) if p else ''}" for n, p, s, k in CASES]


def build(name, params, shape, classes, seed=0):
    torch.manual_seed(seed)
    return build_model(name, params, shape, classes)


def test_registered_names():
    assert MODELS.names() == [
        "char_lstm",
        "cnn1d",
        "cnn_fedqvr",
        "convmixer",
        "leaf_cnn",
        "lenet5",
        "lenet5_bn",
        "logreg",
        "mlp",
        "resnet18",
        "resnet20",
        "small_cnn",
        "tinynn",
        "vgg11",
    ]
    assert all(entry.description for entry in MODELS)


@pytest.mark.parametrize("name,params,shape,classes", CASES, ids=IDS)
def test_output_shape_and_no_dropout(name, params, shape, classes):
    model = build(name, params, shape, classes)
    out = model(torch.randn(3, *shape))
    assert out.shape == (3, classes) and out.dtype == torch.float32
    assert not any(isinstance(m, nn.modules.dropout._DropoutNd) for m in model.modules())


@pytest.mark.parametrize(
    "name,params,shape,classes,expected",
    [
        ("mlp", {}, (1, 28, 28), 10, 199_210),  # McMahan 2NN, FedQVR d
        ("logreg", {}, (60,), 10, 610),  # Synthetic(α,β)
        ("lenet5", {}, (3, 32, 32), 10, 797_962),  # FedDyn / FedMIM LeNet
        ("leaf_cnn", {}, (1, 28, 28), 62, 6_603_710),  # LEAF FEMNIST CNN
        ("char_lstm", {}, (80,), 80, 817_880),  # LEAF Shakespeare LSTM (81-row embedding)
        ("resnet18", {"norm": "batch"}, (3, 32, 32), 10, 11_173_962),  # FedCAMS kuangliu ResNet-18
        ("resnet18", {"norm": "group"}, (3, 32, 32), 10, 11_173_962),
        ("resnet18", {"norm": "batch"}, (3, 32, 32), 100, 11_220_132),
        ("resnet18", {"norm": "group", "stem": "cifar"}, (3, 32, 32), 10, 11_173_962),  # default stem unchanged
        # FedMIM notes §3: FL-Simulator's torchvision ResNet-18 with GroupNorm(2)
        ("resnet18", {"norm": "group", "stem": "imagenet"}, (3, 32, 32), 10, 11_181_642),
        ("resnet18", {"norm": "group", "stem": "imagenet"}, (3, 32, 32), 100, 11_227_812),
        ("resnet18", {"norm": "group", "stem": "imagenet"}, (3, 64, 64), 200, 11_279_112),
    ],
)
def test_parameter_counts(name, params, shape, classes, expected):
    assert count_parameters(build(name, params, shape, classes)) == expected


def test_count_parameters_counts_trainable_only():
    model = build("mlp", {}, (784,), 10)
    model.out.weight.requires_grad_(False)
    assert count_parameters(model) == 199_210 - 2_000


@pytest.mark.parametrize("norm", ["batch", "group"])
def test_resnet18_norms(norm):
    model = build("resnet18", {"norm": norm}, (3, 32, 32), 10)
    x = torch.randn(2, 3, 32, 32)
    model.train()
    assert model(x).shape == (2, 10)
    model.eval()
    assert model(x).shape == (2, 10)
    norms = [m for m in model.modules() if isinstance(m, (nn.BatchNorm2d, nn.GroupNorm))]
    assert len(norms) == 20  # stem + 2 per block × 8 + 3 shortcuts
    if norm == "group":
        assert all(isinstance(m, nn.GroupNorm) and m.num_groups == 2 for m in norms)
        assert list(model.buffers()) == []
    else:
        assert all(isinstance(m, nn.BatchNorm2d) for m in norms)
        assert len(list(model.buffers())) == 3 * 20


def test_resnet18_imagenet_stem_is_torchvisions_layout():
    """7×7 stride-2 conv (padding 3) → norm → ReLU → 3×3 stride-2 max-pool: 32×32 reaches layer1 at 8×8."""
    model = build("resnet18", {"norm": "group", "stem": "imagenet"}, (3, 32, 32), 10)
    conv, pool = model.conv1, model.maxpool
    assert (conv.kernel_size, conv.stride, conv.padding, conv.bias) == ((7, 7), (2, 2), (3, 3), None)
    assert isinstance(pool, nn.MaxPool2d) and (pool.kernel_size, pool.stride, pool.padding) == (3, 2, 1)
    stem_out = model.maxpool(torch.relu(model.norm1(model.conv1(torch.randn(2, 3, 32, 32)))))
    assert stem_out.shape == (2, 64, 8, 8)
    cifar = build("resnet18", {"norm": "group"}, (3, 32, 32), 10)
    assert cifar.conv1.kernel_size == (3, 3) and isinstance(cifar.maxpool, nn.Identity)
    assert list(model.buffers()) == []


def test_resnet18_imagenet_stem_matches_torchvision_resnet18_with_groupnorm():
    """Same parameter shapes, in the same order, as torchvision's resnet18(norm_layer=GroupNorm(2))."""
    torchvision = pytest.importorskip("torchvision")
    ref = torchvision.models.resnet18(num_classes=10, norm_layer=lambda ch: nn.GroupNorm(2, ch))
    ours = build("resnet18", {"norm": "group", "stem": "imagenet"}, (3, 32, 32), 10)
    assert [p.shape for p in ours.parameters()] == [p.shape for p in ref.parameters()]


def test_resnet18_group_count():
    model = build("resnet18", {"norm": "group", "groups": 32}, (3, 32, 32), 10)
    assert {m.num_groups for m in model.modules() if isinstance(m, nn.GroupNorm)} == {32}


@pytest.mark.parametrize("name,params,shape,classes", CASES, ids=IDS)
def test_construction_deterministic_under_manual_seed(name, params, shape, classes):
    a, b = build(name, params, shape, classes, seed=3), build(name, params, shape, classes, seed=3)
    c = build(name, params, shape, classes, seed=4)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not all(torch.equal(sa[k], sc[k]) for k in sa)


@pytest.mark.parametrize(
    "name,params,match",
    [
        ("resnet18", {"norm": "foo"}, "norm"),
        ("resnet18", {"norm": "group", "groups": 3}, "groups must divide 64"),
        ("resnet18", {"norm": "group", "groups": 0}, "groups"),
        ("resnet18", {"stem": "tiny"}, "stem"),
        ("mlp", {"hidden": [200, 0]}, "hidden"),
        ("mlp", {"hiden": [200]}, "hiden"),
        ("lenet5", {"width": 2}, "width"),
    ],
)
def test_bad_params_rejected(name, params, match):
    with pytest.raises(ValidationError, match=match):
        build_model(name, params, (3, 32, 32), 10)


def test_bad_name_and_shapes_rejected():
    with pytest.raises(UnknownNameError, match="unknown model 'resnet50'"):
        build_model("resnet50", {}, (3, 32, 32), 10)
    with pytest.raises(ValueError, match="at least 16×16"):
        build_model("lenet5", {}, (1, 8, 8), 10)
    with pytest.raises(ValueError, match=r"needs image inputs"):
        build_model("small_cnn", {}, (64,), 10)
    with pytest.raises(ValueError, match="num_classes"):
        build_model("mlp", {}, (784,), 0)


@pytest.mark.parametrize("name,params,shape,classes", CASES, ids=IDS)
def test_functional_call_matches_module(name, params, shape, classes):
    """The trainer's path: a params dict through ``functional_call``, gradients with ``torch.func.grad``."""
    model = build(name, params, shape, classes).eval()
    x, y = torch.randn(4, *shape), torch.arange(4) % classes
    named = {k: v.detach().clone() for k, v in model.named_parameters()}
    buffers = dict(model.named_buffers())
    torch.testing.assert_close(functional_call(model, (named, buffers), (x,)), model(x), rtol=0, atol=0)

    def loss(p):
        return nn.functional.cross_entropy(functional_call(model, (p, buffers), (x,)), y)

    g = grad(loss)(named)
    model.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    for k, p in model.named_parameters():
        torch.testing.assert_close(g[k], p.grad)
    shifted = {k: v + 0.01 for k, v in named.items()}  # other parameters really are used
    assert not torch.equal(functional_call(model, (shifted, buffers), (x,)), model(x))
