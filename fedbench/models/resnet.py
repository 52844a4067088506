"""CIFAR ResNet-18 (He et al. 2016, 3×3 stem, no max-pool) with BatchNorm or GroupNorm.

C-FLAG and FedCAMS use the CIFAR stem with BatchNorm (11,173,962 parameters for 10 classes);
FedMIM/FedDyn replace every BatchNorm by ``GroupNorm(2, C)`` (``norm: group``), which has no
buffers, so the model is exactly its flat parameter vector. (FL-Simulator itself uses
torchvision's ImageNet stem; this builder keeps the CIFAR stem for both norms.)
"""

from __future__ import annotations

from typing import Callable, Literal

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field, model_validator
from torch import nn

from fedbench.models.registry import MODELS, image_shape

Norm = Callable[[int], nn.Module]


class ResNetParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    norm: Literal["batch", "group"] = Field(default="batch", description="BatchNorm2d or GroupNorm")
    groups: int = Field(default=2, ge=1, description="GroupNorm groups (FedMIM/FedDyn: 2)")

    @model_validator(mode="after")
    def _groups_divide_channels(self) -> "ResNetParams":
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
    """Stem conv3×3(C,64) → norm → ReLU; stages 64-128-256-512 of 2 BasicBlocks (strides 1,2,2,2);
    global average pool → Linear(512, K)."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, norm: Norm):
        super().__init__()
        self.image_shape = image_shape("resnet18", input_shape)
        self.conv1 = nn.Conv2d(self.image_shape[0], 64, 3, stride=1, padding=1, bias=False)
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
        x = F.relu(self.norm1(self.conv1(x)))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.pool(x), 1))


@MODELS.register(
    "resnet18",
    "CIFAR ResNet-18 (3×3 stem, no max-pool), norm: batch | group (GroupNorm(groups, C))",
    params=ResNetParams,
)
def resnet18(input_shape: tuple[int, ...], num_classes: int, params: ResNetParams) -> nn.Module:
    """11,173,962 parameters for 3×32×32 and 10 classes with either norm."""
    if params.norm == "batch":
        norm: Norm = nn.BatchNorm2d
    else:
        groups = params.groups
        norm = lambda ch: nn.GroupNorm(groups, ch)  # noqa: E731
    return ResNet18(input_shape, num_classes, norm)
