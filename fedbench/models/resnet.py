"""ResNet-18 (He et al. 2016) with BatchNorm or GroupNorm and a CIFAR or ImageNet stem.

C-FLAG and FedCAMS use the CIFAR stem (3×3 conv, no max-pool) with BatchNorm: 11,173,962
parameters for 10 classes. FedMIM/FedDyn replace every BatchNorm by ``GroupNorm(2, C)``
(``norm: group``), which has no buffers, so the model is exactly its flat parameter vector;
the co-author's FL-Simulator builds it on torchvision's ImageNet stem (``stem: imagenet``: 7×7
stride-2 conv, padding 3, then a 3×3 stride-2 max-pool), 11,181,642 parameters on 3×32×32
with 10 classes (FedMIM notes §3).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field, model_validator
from torch import nn

from fedbench.models.registry import MODELS, Stage, image_shape

Norm = Callable[[int], nn.Module]


class ResNetParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    norm: Literal["batch", "group"] = Field(default="batch", description="BatchNorm2d or GroupNorm")
    groups: int = Field(default=2, ge=1, description="GroupNorm groups (FedMIM/FedDyn: 2)")
    stem: Literal["cifar", "imagenet"] = Field(
        default="cifar",
        description="cifar: 3×3 stride-1 conv; imagenet: torchvision's 7×7 stride-2 conv + 3×3 stride-2 max-pool",
    )

    @model_validator(mode="after")
    def _groups_divide_channels(self) -> ResNetParams:
        if self.norm == "group" and 64 % self.groups:
            raise ValueError(f"groups must divide 64 (the narrowest stage's channels), got {self.groups}")
        return self


class BasicBlock(nn.Module):
    """Two 3×3 convs with a residual; a 1×1 conv + norm shortcut when the shape changes."""

    def __init__(self, in_ch: int, out_ch: int, stride: int, norm: Norm):
        super().__init__()
        self.conv1 = nn.Conv2d(in_ch, out_ch, 3, stride=stride, padding=1, bias=False)
        self.norm1 = norm(out_ch)
        self.conv2 = nn.Conv2d(out_ch, out_ch, 3, stride=1, padding=1, bias=False)
        self.norm2 = norm(out_ch)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_ch != out_ch:
            self.shortcut = nn.Sequential(nn.Conv2d(in_ch, out_ch, 1, stride=stride, bias=False), norm(out_ch))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.norm1(self.conv1(x)))
        out = self.norm2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet18(nn.Module):
    """Stem conv(C,64) → norm → ReLU (→ max-pool); stages 64-128-256-512 of 2 BasicBlocks
    (strides 1,2,2,2); global average pool → Linear(512, K).

    The ``cifar`` stem is a 3×3 stride-1 conv; the ``imagenet`` stem is torchvision's 7×7
    stride-2 conv (padding 3) followed by a 3×3 stride-2 max-pool (padding 1), so a 32×32 image
    reaches the first stage at 8×8.
    """

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, norm: Norm, stem: str = "cifar"):
        super().__init__()
        self.image_shape = image_shape("resnet18", input_shape)
        channels = self.image_shape[0]
        if stem == "imagenet":
            self.conv1 = nn.Conv2d(channels, 64, 7, stride=2, padding=3, bias=False)
            self.maxpool: nn.Module = nn.MaxPool2d(3, stride=2, padding=1)
        else:
            self.conv1 = nn.Conv2d(channels, 64, 3, stride=1, padding=1, bias=False)
            self.maxpool = nn.Identity()
        self.norm1 = norm(64)
        stages, in_ch = [], 64
        for out_ch, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            stages.append(nn.Sequential(BasicBlock(in_ch, out_ch, stride, norm), BasicBlock(out_ch, out_ch, 1, norm)))
            in_ch = out_ch
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.reshape(x.shape[0], *self.image_shape)
        x = self.maxpool(F.relu(self.norm1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.pool(x), 1))

    def stages(self) -> list[Stage]:
        """Blocks stem | layer1 | layer2 | layer3 | layer4 → pool → flatten, then fc: FedMLB's
        ResNet-18 split (Kim et al. 2022 code, ``return_feature``)."""
        return [
            lambda x: self.maxpool(F.relu(self.norm1(self.conv1(x.reshape(x.shape[0], *self.image_shape))))),
            self.layer1,
            self.layer2,
            self.layer3,
            lambda h: torch.flatten(self.pool(self.layer4(h)), 1),
            self.fc,
        ]


@MODELS.register(
    "resnet18",
    "ResNet-18, norm: batch | group (GroupNorm(groups, C)); stem: cifar (3×3, no max-pool) | "
    "imagenet (torchvision 7×7/2 + max-pool)",
    params=ResNetParams,
)
def resnet18(input_shape: tuple[int, ...], num_classes: int, params: ResNetParams) -> nn.Module:
    """11,173,962 parameters for 3×32×32 and 10 classes with either norm and the CIFAR stem;
    11,181,642 with the ImageNet stem (its 7×7 conv has 7,680 more weights)."""
    if params.norm == "batch":
        norm: Norm = nn.BatchNorm2d
    else:
        groups = params.groups
        norm = lambda ch: nn.GroupNorm(groups, ch)  # noqa: E731
    return ResNet18(input_shape, num_classes, norm, params.stem)
