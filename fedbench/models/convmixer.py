"""ConvMixer (Trockman & Kolter 2022), the FedCAMS paper's second model (ConvMixer-256-8)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field
from torch import nn

from fedbench.models.registry import MODELS, image_shape


class ConvMixerParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    dim: int = Field(default=256, ge=1, description="channels h")
    depth: int = Field(default=8, ge=1, description="number of ConvMixer blocks")
    kernel_size: int = Field(default=5, ge=1, description="depthwise kernel size")
    patch_size: int = Field(default=2, ge=1, description="patch-embedding stride p")


class _Residual(nn.Module):
    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return self.inner(x) + x


@MODELS.register(
    "convmixer",
    "ConvMixer-h-d (patch embed → d × [depthwise conv + pointwise conv], GELU + BatchNorm)",
    params=ConvMixerParams,
)
def convmixer(input_shape: tuple[int, ...], num_classes: int, params: ConvMixerParams) -> nn.Module:
    """ConvMixer-256-8 with kernel 5 and patch 2 by default, as in the FedCAMS code (594,186
    parameters for CIFAR-10)."""
    channels, _, _ = image_shape("convmixer", input_shape)
    h, k = params.dim, params.kernel_size
    blocks = []
    for _ in range(params.depth):
        blocks += [
            _Residual(nn.Sequential(nn.Conv2d(h, h, k, groups=h, padding="same"), nn.GELU(), nn.BatchNorm2d(h))),
            nn.Conv2d(h, h, 1),
            nn.GELU(),
            nn.BatchNorm2d(h),
        ]
    return nn.Sequential(
        nn.Conv2d(channels, h, params.patch_size, stride=params.patch_size),
        nn.GELU(),
        nn.BatchNorm2d(h),
        *blocks,
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(h, num_classes),
    )
