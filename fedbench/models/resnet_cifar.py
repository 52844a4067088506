"""ResNet-20 (He et al. 2016, §4.2 CIFAR-10 network), GradMA's Tiny-ImageNet model.

GradMA's released code cannot build it (notes §5.1: ``ResNet(BasicBlock, [3,3,3])`` against a
4-stage class), so fedbench takes the recommendation of notes §9 item 8: the standard CIFAR
ResNet-20 — 3×3 stem with 16 channels, 3 stages × 3 BasicBlocks with widths 16/32/64 (strides
1, 2, 2), BatchNorm, a 1×1-conv + norm shortcut where the shape changes (He et al.'s option B;
their CIFAR net used zero-padding option A, which has no parameters), global average pooling
and one FC layer. 284,824 parameters for 200 classes (the count does not depend on the input
size); 272,474 for 10 classes.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field, model_validator
from torch import nn

from fedbench.models.registry import MODELS, Stage, image_shape
from fedbench.models.resnet import BasicBlock, Norm

RESNET20_WIDTHS = (16, 32, 64)


class ResNet20Params(BaseModel):
    model_config = ConfigDict(extra="forbid")

    norm: Literal["batch", "group"] = Field(default="batch", description="BatchNorm2d or GroupNorm")
    groups: int = Field(default=2, ge=1, description="GroupNorm groups")

    @model_validator(mode="after")
    def _groups_divide_channels(self) -> ResNet20Params:
        if self.norm == "group" and RESNET20_WIDTHS[0] % self.groups:
            raise ValueError(f"groups must divide 16 (the narrowest stage's channels), got {self.groups}")
        return self


class ResNet20(nn.Module):
    """Conv3×3(C,16) → norm → ReLU; stages 16-32-64 of 3 BasicBlocks (strides 1,2,2); global
    average pool → Linear(64, K). Any image of at least 1×1 works (GAP after two stride-2 stages)."""

    fedmlb_branches = (1, 2)  # FedMLB branch points per GradMA notes §9.14

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, norm: Norm):
        super().__init__()
        self.image_shape = image_shape("resnet20", input_shape)
        self.conv1 = nn.Conv2d(self.image_shape[0], 16, 3, stride=1, padding=1, bias=False)
        self.norm1 = norm(16)
        stages, in_ch = [], 16
        for out_ch, stride in zip(RESNET20_WIDTHS, (1, 2, 2)):
            blocks = [BasicBlock(in_ch, out_ch, stride, norm)]
            blocks += [BasicBlock(out_ch, out_ch, 1, norm) for _ in range(2)]
            stages.append(nn.Sequential(*blocks))
            in_ch = out_ch
        self.layer1, self.layer2, self.layer3 = stages
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(in_ch, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.norm1(self.conv1(x.reshape(x.shape[0], *self.image_shape))))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(torch.flatten(self.pool(x), 1))

    def stages(self) -> list[Stage]:
        """Blocks stem → layer1 | layer2 | layer3 → pool → flatten, then fc: FedMLB branches after
        each stage but the last (GradMA notes §9 item 14)."""
        return [
            lambda x: self.layer1(F.relu(self.norm1(self.conv1(x.reshape(x.shape[0], *self.image_shape))))),
            self.layer2,
            lambda h: torch.flatten(self.pool(self.layer3(h)), 1),
            self.fc,
        ]


@MODELS.register(
    "resnet20",
    "CIFAR ResNet-20 (3×3 BasicBlocks 16/32/64, 1×1-conv shortcuts, GAP), norm: batch | group; "
    "GradMA Tiny-ImageNet (284,824 params for 200 classes)",
    params=ResNet20Params,
)
def resnet20(input_shape: tuple[int, ...], num_classes: int, params: ResNet20Params) -> nn.Module:
    if params.norm == "batch":
        norm: Norm = nn.BatchNorm2d
    else:
        groups = params.groups
        norm = lambda ch: nn.GroupNorm(groups, ch)  # noqa: E731
    return ResNet20(input_shape, num_classes, norm)
