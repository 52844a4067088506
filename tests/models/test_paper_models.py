"""GradMA's TinyNN, LeNet-5 (BN), VGG-11, ResNet-20 and FedQVR's CIFAR-10 CNN: parameter counts
from the papers' notes, layouts, input shapes, stages(), train/eval behaviour."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError
from torch import nn

from fedbench.models import build_model, count_parameters
from fedbench.models.flat import FlatModel

# (name, params, input_shape, num_classes) on each model's intended input and on other inputs
CASES = [
    ("tinynn", {}, (1, 28, 28), 10),
    ("tinynn", {}, (1, 8, 8), 10),
    ("tinynn", {"hidden": [50, 25]}, (1, 28, 28), 10),
    ("lenet5_bn", {}, (3, 32, 32), 10),
    ("lenet5_bn", {"dropout": 0.2}, (1, 28, 28), 10),
    ("lenet5_bn", {"dropout": 0}, (3, 32, 32), 10),
    ("vgg11", {}, (3, 32, 32), 100),
    ("vgg11", {}, (3, 64, 64), 200),
    ("resnet20", {}, (3, 64, 64), 200),
    ("resnet20", {"norm": "group"}, (3, 32, 32), 10),
    ("resnet20", {}, (1, 8, 8), 10),
    ("cnn_fedqvr", {}, (3, 32, 32), 10),
    ("cnn_fedqvr", {}, (1, 28, 28), 10),
    ("mlp", {"hidden": [32, 16], "dropout": 0.5}, (1, 8, 8), 10),
]
IDS = [f"{n}-{'x'.join(map(str, s))}-{k}{'-' + str(p) if p else ''}" for n, p, s, k in CASES]


def build(name, params, shape, classes, seed=0):
    torch.manual_seed(seed)
    return build_model(name, params, shape, classes)


def conv(cin, cout, k, bias=True):
    return cin * cout * k * k + (cout if bias else 0)


def fc(a, b):
    return a * b + b


def bn(c):
    return 2 * c  # affine γ, β (running statistics are buffers)


@pytest.mark.parametrize(
    "name,params,shape,classes,expected,by_hand",
    [
        # GradMA notes §5.1 "#params (my count)", BN affine included
        ("tinynn", {}, (1, 28, 28), 10, 178_710, fc(784, 200) + bn(200) + fc(200, 100) + bn(100) + fc(100, 10)),
        # GradMA's tiny MNIST columns (configs/gradma/README.md, "Tiny regime")
        (
            "tinynn",
            {"hidden": [50, 25]},
            (1, 28, 28),
            10,
            40_935,
            fc(784, 50) + bn(50) + fc(50, 25) + bn(25) + fc(25, 10),
        ),
        (
            "lenet5_bn",
            {},
            (3, 32, 32),
            10,
            941_834,
            conv(3, 32, 5)
            + bn(32)
            + conv(32, 64, 5)
            + bn(64)
            + fc(1600, 512)
            + bn(512)
            + fc(512, 128)
            + bn(128)
            + fc(128, 10),
        ),
        (
            "vgg11",
            {},
            (3, 32, 32),
            100,
            9_304_548,
            conv(3, 64, 3)
            + conv(64, 128, 3)
            + conv(128, 256, 3)
            + conv(256, 256, 3)
            + conv(256, 512, 3)
            + 3 * conv(512, 512, 3)
            + bn(64)
            + bn(128)
            + 2 * bn(256)
            + 4 * bn(512)
            + fc(512, 128)
            + fc(128, 100),
        ),
        (  # notes §5.1: "std ResNet-20 (16/32/64, 200 cls): 284,824" — 1×1-conv + BN shortcuts
            "resnet20",
            {},
            (3, 64, 64),
            200,
            284_824,
            conv(3, 16, 3, False)
            + bn(16)
            + 6 * (conv(16, 16, 3, False) + bn(16))
            + conv(16, 32, 3, False)
            + 5 * conv(32, 32, 3, False)
            + 6 * bn(32)
            + conv(16, 32, 1, False)
            + bn(32)
            + conv(32, 64, 3, False)
            + 5 * conv(64, 64, 3, False)
            + 6 * bn(64)
            + conv(32, 64, 1, False)
            + bn(64)
            + fc(64, 200),
        ),
        (  # FedQVR notes §8: the recommended layout, d = 2,511,690 (paper: 2,513,418)
            "cnn_fedqvr",
            {},
            (3, 32, 32),
            10,
            2_511_690,
            conv(3, 64, 3)
            + conv(64, 128, 3)
            + conv(128, 256, 3)
            + conv(256, 512, 3)
            + fc(2048, 384)
            + fc(384, 256)
            + fc(256, 192)
            + fc(192, 128)
            + fc(128, 10),
        ),
        ("resnet20", {"norm": "group"}, (3, 64, 64), 200, 284_824, None),  # GroupNorm affine = BN affine
        ("resnet20", {}, (3, 32, 32), 10, 272_474, None),
        ("resnet20", {}, (3, 32, 32), 100, 278_324, None),
        ("vgg11", {}, (3, 32, 32), 10, 9_292_938, None),
        # 1 input channel instead of 3, a 64·4·4 = 1024-wide flatten instead of 1600
        ("lenet5_bn", {}, (1, 28, 28), 10, 941_834 - 2 * 25 * 32 - 576 * 512, None),
        ("lenet5_bn", {"dropout": 0}, (3, 32, 32), 10, 941_834, None),  # dropout adds no parameters
        ("mlp", {"dropout": 0.5}, (1, 28, 28), 10, 199_210, None),
    ],
)
def test_parameter_counts(name, params, shape, classes, expected, by_hand):
    assert count_parameters(build(name, params, shape, classes)) == expected
    if by_hand is not None:
        assert by_hand == expected


@pytest.mark.parametrize("name,params,shape,classes", CASES, ids=IDS)
def test_output_shape_in_train_and_eval_mode(name, params, shape, classes):
    model = build(name, params, shape, classes)
    for train in (True, False):
        model.train(train)
        out = model(torch.randn(4, *shape))
        assert out.shape == (4, classes) and out.dtype == torch.float32 and torch.isfinite(out).all()


def test_layouts_follow_the_notes():
    tiny = build("tinynn", {}, (1, 28, 28), 10)
    assert [type(m) for m in tiny.children()] == [nn.Linear, nn.BatchNorm1d, nn.Linear, nn.BatchNorm1d, nn.Linear]

    lenet = build("lenet5_bn", {}, (3, 32, 32), 10)
    assert [(m.in_channels, m.out_channels, m.kernel_size) for m in lenet.modules() if isinstance(m, nn.Conv2d)] == [
        (3, 32, (5, 5)),
        (32, 64, (5, 5)),
    ]
    assert [m.p for m in lenet.modules() if isinstance(m, nn.Dropout)] == [0.5, 0.5]
    assert sum(isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)) for m in lenet.modules()) == 4

    vgg = build("vgg11", {}, (3, 32, 32), 100)
    convs = [m for m in vgg.modules() if isinstance(m, nn.Conv2d)]
    assert [m.out_channels for m in convs] == [64, 128, 256, 256, 512, 512, 512, 512]
    assert all(m.kernel_size == (3, 3) and m.padding == (1, 1) for m in convs)
    assert sum(isinstance(m, nn.BatchNorm2d) for m in vgg.modules()) == 8
    assert sum(isinstance(m, nn.MaxPool2d) for m in vgg.modules()) == 5
    assert [m.p for m in vgg.modules() if isinstance(m, nn.Dropout)] == [0.5]  # FC part only, as in the code
    assert (vgg.fc1.in_features, vgg.fc2.in_features) == (512, 128)

    res = build("resnet20", {}, (3, 64, 64), 200)
    convs = [m for m in res.modules() if isinstance(m, nn.Conv2d)]
    assert sum(m.kernel_size == (3, 3) for m in convs) == 19  # 19 convs + 1 FC = 20 weighted layers
    assert [m.out_channels for m in convs if m.kernel_size == (1, 1)] == [32, 64]  # two projection shortcuts
    assert sum(isinstance(m, nn.BatchNorm2d) for m in res.modules()) == 21
    assert res.fc.in_features == 64

    qvr = build("cnn_fedqvr", {}, (3, 32, 32), 10)
    assert not any(isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d, nn.Dropout)) for m in qvr.modules())
    assert list(qvr.buffers()) == []
    tensors = list(qvr.parameters())
    assert len(tensors) == 18  # W and b of 9 layers: FedQVR's μ = 9·2·(B=2)·32 = 1152 bits of scales
    assert len(tensors) * 2 * 32 == 1152
    assert qvr.fcs[0].in_features == 512 * 2 * 2


def test_resnet20_group_norm_has_no_buffers():
    model = build("resnet20", {"norm": "group", "groups": 4}, (3, 32, 32), 10)
    norms = [m for m in model.modules() if isinstance(m, (nn.GroupNorm, nn.BatchNorm2d))]
    assert len(norms) == 21 and all(isinstance(m, nn.GroupNorm) and m.num_groups == 4 for m in norms)
    assert list(model.buffers()) == []


@pytest.mark.parametrize(
    "name,shape,match",
    [
        ("vgg11", (1, 8, 8), r"'vgg11' needs images of at least 32×32, got input_shape \(1, 8, 8\)"),
        ("vgg11", (3, 32, 16), "at least 32×32"),
        ("lenet5_bn", (1, 8, 8), r"'lenet5_bn' needs images of at least 16×16, got input_shape \(1, 8, 8\)"),
        ("cnn_fedqvr", (1, 8, 8), r"'cnn_fedqvr' needs images of at least 16×16, got input_shape \(1, 8, 8\)"),
        ("resnet20", (64,), r"'resnet20' needs image inputs"),
        ("vgg11", (3072,), r"'vgg11' needs image inputs"),
    ],
)
def test_too_small_or_non_image_inputs_are_rejected(name, shape, match):
    with pytest.raises(ValueError, match=match):
        build_model(name, {}, shape, 10)


def test_smallest_accepted_images():
    for name, size in (("vgg11", 32), ("lenet5_bn", 16), ("cnn_fedqvr", 16)):
        assert build(name, {}, (1, size, size), 3)(torch.randn(2, 1, size, size)).shape == (2, 3)


@pytest.mark.parametrize(
    "name,params,match",
    [
        ("lenet5_bn", {"dropout": 1.0}, "dropout"),
        ("vgg11", {"dropout": -0.1}, "dropout"),
        ("mlp", {"dropout": 1.0}, "dropout"),
        ("resnet20", {"norm": "group", "groups": 3}, "groups must divide 16"),
        ("resnet20", {"stem": "imagenet"}, "stem"),
        ("tinynn", {"dropout": 0.5}, "dropout"),
        ("tinynn", {"hidden": [50]}, "hidden"),
        ("tinynn", {"hidden": [50, 0]}, "hidden"),
        ("cnn_fedqvr", {"width": 2}, "width"),
    ],
)
def test_bad_params_rejected(name, params, match):
    with pytest.raises(ValidationError, match=match):
        build_model(name, params, (3, 32, 32), 10)


@pytest.mark.parametrize("name,params,shape,classes", CASES, ids=IDS)
def test_stages_compose_to_the_forward_pass_on_any_flat_vector(name, params, shape, classes):
    """C(B_B(…B₁(x))) == forward(x) with the parameters of a flat vector other than the module's
    (so every stage really uses the model's own, swappable submodules), in eval mode and in train
    mode (same dropout draws when the global generator is reseeded)."""
    model = build(name, params, shape, classes)
    flat_model = FlatModel(model)
    point = flat_model.flatten() + 0.01 * torch.randn(flat_model.dim, generator=torch.Generator().manual_seed(1))
    x = torch.randn(6, *shape)
    for train in (False, True):
        model.train(train)
        buffers = flat_model.buffers()
        torch.manual_seed(7)
        expected = flat_model.logits(point, buffers, x)
        buffers = flat_model.buffers()
        torch.manual_seed(7)
        outputs = flat_model.run_stages(point, buffers, x)
        torch.testing.assert_close(outputs[-1], expected, rtol=1e-5, atol=1e-5)
        assert not torch.allclose(expected, model(x), atol=1e-4)  # the module's own parameters differ
    assert len(outputs) == flat_model.num_stages("test") >= 3
    assert outputs[-2].dim() == 2  # the representation fed to the classifier is flat


@pytest.mark.parametrize(
    "name,params,shape,blocks",
    [  # GradMA notes §9 item 14: FedMLB branches after every block but the last
        ("tinynn", {}, (1, 28, 28), 2),
        ("tinynn", {"hidden": [50, 25]}, (1, 28, 28), 2),
        ("lenet5_bn", {}, (3, 32, 32), 4),
        ("vgg11", {}, (3, 32, 32), 4),
        ("resnet20", {}, (3, 32, 32), 3),
        ("cnn_fedqvr", {}, (3, 32, 32), 8),
        ("mlp", {"hidden": [32, 16], "dropout": 0.5}, (1, 8, 8), 2),
    ],
)
def test_number_of_blocks_and_representation_width(name, params, shape, blocks):
    model = build(name, params, shape, 10).eval()
    flat_model = FlatModel(model)
    outputs = flat_model.run_stages(flat_model.flatten(), flat_model.buffers(), torch.randn(2, *shape))
    assert len(outputs) == blocks + 1
    width = {
        "tinynn": params.get("hidden", [200, 100])[1],
        "lenet5_bn": 128,
        "vgg11": 128,
        "resnet20": 64,
        "cnn_fedqvr": 128,
        "mlp": 16,
    }[name]
    assert outputs[-2].shape == (2, width)


@pytest.mark.parametrize(
    "name,params,shape",
    [("lenet5_bn", {}, (3, 32, 32)), ("vgg11", {}, (3, 32, 32)), ("mlp", {"hidden": [64], "dropout": 0.5}, (1, 8, 8))],
)
def test_dropout_is_active_in_train_mode_only(name, params, shape):
    model = build(name, params, shape, 10)
    x = torch.randn(8, *shape)
    model.eval()
    torch.testing.assert_close(model(x), model(x), rtol=0, atol=0)
    model.train()
    torch.manual_seed(0)
    a = model(x)
    b = model(x)
    torch.manual_seed(0)
    torch.testing.assert_close(model(x), a, rtol=0, atol=0)  # the draws come from the global generator
    assert not torch.allclose(a, b)


@pytest.mark.parametrize(
    "name,params,shape",
    [
        ("lenet5_bn", {"dropout": 0}, (3, 32, 32)),
        ("vgg11", {"dropout": 0}, (3, 32, 32)),
        ("mlp", {}, (1, 8, 8)),
        ("tinynn", {}, (1, 8, 8)),
        ("resnet20", {}, (1, 8, 8)),
        ("cnn_fedqvr", {}, (1, 16, 16)),
    ],
)
def test_models_without_dropout_are_deterministic_in_train_mode(name, params, shape):
    model = build(name, params, shape, 10).train()
    assert not any(isinstance(m, nn.Dropout) for m in model.modules())
    x = torch.randn(8, *shape)
    torch.testing.assert_close(model(x), model(x), rtol=0, atol=0)


def test_batchnorm_running_statistics_update_in_train_mode_and_serve_eval():
    model = build("tinynn", {}, (1, 8, 8), 10)
    x = 3.0 + torch.randn(16, 1, 8, 8)
    model.eval()
    before = model(x)
    model.train()
    model(x)
    assert not torch.equal(model.bn1.running_mean, torch.zeros(200))
    model.eval()
    after = model(x)
    assert not torch.allclose(before, after)
    torch.testing.assert_close(model(x[:1]), after[:1])  # eval mode: per-sample, batch-independent


def test_tinynn_hidden_is_left_out_of_the_resolved_json_at_its_default():
    """Run specs written before ``hidden`` existed keep their hash: the default resolves to no key at all."""
    from fedbench.models import MODELS
    from fedbench.scenario.resolve import check_component

    assert check_component(MODELS, "tinynn", {}, "model").resolved == {"name": "tinynn"}
    assert check_component(MODELS, "tinynn", {"hidden": [200, 100]}, "model").resolved == {"name": "tinynn"}
    narrow = check_component(MODELS, "tinynn", {"hidden": [50, 25]}, "model")
    assert narrow.resolved == {"name": "tinynn", "hidden": [50, 25]} and narrow.model.hidden == (50, 25)
