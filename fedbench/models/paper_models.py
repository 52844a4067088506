"""Paper-scale models of GradMA (TinyNN, LeNet-5 with BN, VGG-11; notes §5.1) and FedQVR (its
CIFAR-10 CNN; notes §8).

The GradMA models follow the authors' code (LightFed ``models``): BatchNorm after every layer
but the classifier, dropout in the fully connected part. Their dropout draws from torch's
global generator, which the round loop seeds per round from the ``("dropout", t)`` stream
(:meth:`fedbench.engine.runner.RoundLoop.round`). ``dropout: 0`` builds the model without
dropout modules, so its forward pass is deterministic.
"""

from __future__ import annotations

import math
from typing import Annotated, Any

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer
from torch import nn

from fedbench.models.registry import MODELS, Stage, conv_out, image_shape
from fedbench.registry import NoParams


class DropoutParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    dropout: float = Field(default=0.5, ge=0, lt=1, description="dropout probability p in the FC layers (0: none)")


def _dropout(p: float) -> nn.Module:
    return nn.Dropout(p) if p > 0 else nn.Identity()


def _min_size_error(name: str, minimum: int, input_shape: tuple[int, ...]) -> ValueError:
    return ValueError(f"model {name!r} needs images of at least {minimum}×{minimum}, got input_shape {input_shape}")


# --- TinyNN ----------------------------------------------------------------------------------

TINYNN_HIDDEN = (200, 100)


class TinyNNParams(BaseModel):
    """``hidden``: the two hidden widths (the paper's 200, 100 by default). At its default the key is left out
    of the resolved JSON, so run specs written before it existed keep their hash."""

    model_config = ConfigDict(extra="forbid")

    hidden: tuple[Annotated[int, Field(ge=1)], Annotated[int, Field(ge=1)]] = Field(
        default=TINYNN_HIDDEN, description="the two hidden widths (the paper's: 200, 100)"
    )

    @model_serializer(mode="wrap")
    def _omit_default(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        if self.hidden == TINYNN_HIDDEN:
            data.pop("hidden", None)
        return data


class TinyNN(nn.Module):
    """GradMA's MNIST "NN with three linear hidden layers" (code: TinyNN, notes §5.1 and §9 item 9):
    flatten → Linear(D,h1) → BN1d → ReLU → Linear(h1,h2) → BN1d → ReLU → Linear(h2,K), h = (200, 100).
    178,710 parameters for 784 inputs and 10 classes (BN affine included)."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, hidden: tuple[int, int] = TINYNN_HIDDEN):
        super().__init__()
        h1, h2 = hidden
        self.fc1 = nn.Linear(math.prod(input_shape), h1)
        self.bn1 = nn.BatchNorm1d(h1)
        self.fc2 = nn.Linear(h1, h2)
        self.bn2 = nn.BatchNorm1d(h2)
        self.fc3 = nn.Linear(h2, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.bn1(self.fc1(torch.flatten(x, 1))))
        return self.fc3(F.relu(self.bn2(self.fc2(h))))

    def stages(self) -> list[Stage]:
        """Blocks flatten → fc1 → bn1 → ReLU | fc2 → bn2 → ReLU, then fc3 (FedMLB branches after
        each hidden layer, GradMA notes §9 item 14)."""
        return [
            lambda x: F.relu(self.bn1(self.fc1(torch.flatten(x, 1)))),
            lambda h: F.relu(self.bn2(self.fc2(h))),
            self.fc3,
        ]


@MODELS.register(
    "tinynn",
    "GradMA MNIST NN: flatten → FC 200 → BN → ReLU → FC 100 → BN → ReLU → FC (178,710 params); `hidden` narrows it",
    params=TinyNNParams,
)
def tinynn(input_shape: tuple[int, ...], num_classes: int, params: TinyNNParams) -> nn.Module:
    return TinyNN(input_shape, num_classes, params.hidden)


# --- LeNet-5 with BatchNorm -----------------------------------------------------------------


class LeNet5BN(nn.Module):
    """GradMA's CIFAR-10 "Lenet-5" (notes §5.1): Conv(C,32,5) → BN → ReLU → MaxPool2 →
    Conv(32,64,5) → BN → ReLU → MaxPool2 → flatten → FC 512 → BN1d → ReLU → Dropout(p) → FC 128
    → BN1d → ReLU → Dropout(p) → FC K. The flatten size is 64·h·w with h = ((H−4)//2 − 4)//2
    (1600 on 32×32); 941,834 parameters for 3×32×32 and 10 classes."""

    fedmlb_branches = (1, 2, 3)  # FedMLB branch points per GradMA notes §9.14

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, dropout: float):
        super().__init__()
        self.image_shape = image_shape("lenet5_bn", input_shape)
        c, h, w = self.image_shape
        h2, w2 = (conv_out(conv_out(s, 5) // 2, 5) // 2 for s in (h, w))
        if h2 < 1 or w2 < 1:
            raise _min_size_error("lenet5_bn", 16, input_shape)
        self.conv1, self.bn1 = nn.Conv2d(c, 32, 5), nn.BatchNorm2d(32)
        self.conv2, self.bn2 = nn.Conv2d(32, 64, 5), nn.BatchNorm2d(64)
        self.fc1, self.bn3 = nn.Linear(64 * h2 * w2, 512), nn.BatchNorm1d(512)
        self.fc2, self.bn4 = nn.Linear(512, 128), nn.BatchNorm1d(128)
        self.fc3 = nn.Linear(128, num_classes)
        self.drop1, self.drop2 = _dropout(dropout), _dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.reshape(x.shape[0], *self.image_shape)
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        x = self.drop1(F.relu(self.bn3(self.fc1(torch.flatten(x, 1)))))
        return self.fc3(self.drop2(F.relu(self.bn4(self.fc2(x)))))

    def stages(self) -> list[Stage]:
        """Blocks conv1 → BN → ReLU → pool | conv2 → BN → ReLU → pool | flatten → fc1 → BN → ReLU →
        dropout | fc2 → BN → ReLU → dropout, then fc3 (FedMLB branches after each conv block and
        after fc1, GradMA notes §9 item 14)."""
        return [
            lambda x: F.max_pool2d(F.relu(self.bn1(self.conv1(x.reshape(x.shape[0], *self.image_shape)))), 2),
            lambda h: F.max_pool2d(F.relu(self.bn2(self.conv2(h))), 2),
            lambda h: self.drop1(F.relu(self.bn3(self.fc1(torch.flatten(h, 1))))),
            lambda h: self.drop2(F.relu(self.bn4(self.fc2(h)))),
            self.fc3,
        ]


@MODELS.register(
    "lenet5_bn",
    "GradMA Lenet-5: conv5 32/64 with BN, pool2 → FC 512-128 with BN + dropout(p) (941,834 params on CIFAR-10)",
    params=DropoutParams,
)
def lenet5_bn(input_shape: tuple[int, ...], num_classes: int, params: DropoutParams) -> nn.Module:
    return LeNet5BN(input_shape, num_classes, params.dropout)


# --- VGG-11 ---------------------------------------------------------------------------------

VGG11_BLOCKS = ((1, 64), (1, 128), (2, 256), (2, 512), (2, 512))
"""(number of 3×3 convs, channels) of each block; a 2×2 max-pool closes every block."""


class VGG11(nn.Module):
    """GradMA's CIFAR-100 "VGG-11" (notes §5.1): five blocks of [Conv3×3 (pad 1) → BN → ReLU]×n
    with (n, channels) = (1,64), (1,128), (2,256), (2,512), (2,512), each closed by MaxPool2 →
    flatten → FC 128 → ReLU → Dropout(p) → FC K. The flatten size is 512·(H//32)·(W//32)
    (512 on 32×32); 9,304,548 parameters for 3×32×32 and 100 classes."""

    fedmlb_branches = (1, 2, 3)  # FedMLB branch points per GradMA notes §9.14

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, dropout: float):
        super().__init__()
        self.image_shape = image_shape("vgg11", input_shape)
        c, h, w = self.image_shape
        if h < 32 or w < 32:
            raise _min_size_error("vgg11", 32, input_shape)
        blocks, in_ch = [], c
        for convs, ch in VGG11_BLOCKS:
            layers: list[nn.Module] = []
            for _ in range(convs):
                layers += [nn.Conv2d(in_ch, ch, 3, padding=1), nn.BatchNorm2d(ch), nn.ReLU()]
                in_ch = ch
            blocks.append(nn.Sequential(*layers, nn.MaxPool2d(2)))
        self.blocks = nn.ModuleList(blocks)
        self.fc1 = nn.Linear(in_ch * (h // 32) * (w // 32), 128)
        self.drop = _dropout(dropout)
        self.fc2 = nn.Linear(128, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.reshape(x.shape[0], *self.image_shape)
        for block in self.blocks:
            x = block(x)
        return self.fc2(self.drop(F.relu(self.fc1(torch.flatten(x, 1)))))

    def stages(self) -> list[Stage]:
        """Blocks conv blocks 1–2 | block 3 | block 4 | block 5 → flatten → fc1 → ReLU → dropout,
        then fc2: FedMLB branches after conv blocks 2, 3 and 4 (GradMA notes §9 item 14)."""
        b = self.blocks
        return [
            lambda x: b[1](b[0](x.reshape(x.shape[0], *self.image_shape))),
            b[2],
            b[3],
            lambda h: self.drop(F.relu(self.fc1(torch.flatten(b[4](h), 1)))),
            self.fc2,
        ]


@MODELS.register(
    "vgg11",
    "GradMA VGG-11: 8 conv3 with BN in 5 pooled blocks → FC 128 → dropout(p) → FC (9,304,548 params on CIFAR-100)",
    params=DropoutParams,
)
def vgg11(input_shape: tuple[int, ...], num_classes: int, params: DropoutParams) -> nn.Module:
    return VGG11(input_shape, num_classes, params.dropout)


# --- FedQVR's CIFAR-10 CNN ------------------------------------------------------------------

CNN_FEDQVR_CHANNELS = (64, 128, 256, 512)
CNN_FEDQVR_HIDDEN = (384, 256, 192, 128)


class CNNFedQVR(nn.Module):
    """FedQVR's CIFAR-10 model, "four conv layers, four pooling layers, five fully connected
    layers" with the widths FedQVR notes §8 recommend: 4 × [Conv3×3 (same padding) → ReLU →
    MaxPool2] with 64-128-256-512 channels → flatten (512·2·2 on 32×32) → FC 384-256-192-128 with
    ReLU → FC K; no BatchNorm, so the 9 layers' W and b are the 18 tensors the quantizer sees.
    d = 2,511,690 for 3×32×32 and 10 classes (the paper states 2,513,418)."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int):
        super().__init__()
        self.image_shape = image_shape("cnn_fedqvr", input_shape)
        c, h, w = self.image_shape
        if h < 16 or w < 16:
            raise _min_size_error("cnn_fedqvr", 16, input_shape)
        chans = (c, *CNN_FEDQVR_CHANNELS)
        self.convs = nn.ModuleList(nn.Conv2d(a, b, 3, padding=1) for a, b in zip(chans, chans[1:]))
        widths = (chans[-1] * (h // 16) * (w // 16), *CNN_FEDQVR_HIDDEN)
        self.fcs = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths, widths[1:]))
        self.out = nn.Linear(widths[-1], num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.reshape(x.shape[0], *self.image_shape)
        for conv in self.convs:
            x = F.max_pool2d(F.relu(conv(x)), 2)
        x = torch.flatten(x, 1)
        for fc in self.fcs:
            x = F.relu(fc(x))
        return self.out(x)

    def stages(self) -> list[Stage]:
        """Blocks conv_k → ReLU → pool (k = 1…4; the fourth also flattens) | fc_k → ReLU (k = 1…4),
        then the output layer."""
        conv = [lambda h, m=m: F.max_pool2d(F.relu(m(h)), 2) for m in self.convs]
        first, last = conv[0], conv[-1]
        conv[0] = lambda x: first(x.reshape(x.shape[0], *self.image_shape))
        conv[-1] = lambda h: torch.flatten(last(h), 1)
        return [*conv, *(lambda h, m=m: F.relu(m(h)) for m in self.fcs), self.out]


@MODELS.register(
    "cnn_fedqvr",
    "FedQVR CIFAR-10 CNN: 4 × (conv3 → ReLU → pool2), 64-128-256-512 → FC 384-256-192-128 → FC, no BN "
    "(2,511,690 params)",
)
def cnn_fedqvr(input_shape: tuple[int, ...], num_classes: int, params: NoParams) -> nn.Module:
    return CNNFedQVR(input_shape, num_classes)
