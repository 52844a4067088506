"""Fully connected models: the MNIST MLP (McMahan's "2NN", FedDyn, FedQVR) and logistic regression."""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field
from torch import nn

from fedbench.models.registry import MODELS
from fedbench.registry import NoParams


class MLPParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    hidden: list[Annotated[int, Field(ge=1)]] = Field(
        default_factory=lambda: [200, 200], description="hidden layer widths, input to output"
    )


def _mlp(input_shape: tuple[int, ...], num_classes: int, hidden: list[int]) -> nn.Sequential:
    layers: OrderedDict[str, nn.Module] = OrderedDict(flatten=nn.Flatten())
    width = math.prod(input_shape)
    for i, h in enumerate(hidden, start=1):
        layers[f"fc{i}"] = nn.Linear(width, h)
        layers[f"relu{i}"] = nn.ReLU()
        width = h
    layers["out"] = nn.Linear(width, num_classes)
    return nn.Sequential(layers)


@MODELS.register("mlp", "flatten → [Linear → ReLU]×len(hidden) → Linear; 784-200-200-10 = MNIST 2NN", params=MLPParams)
def mlp(input_shape: tuple[int, ...], num_classes: int, params: MLPParams) -> nn.Module:
    """McMahan et al.'s 2NN with the default ``hidden: [200, 200]`` (199,210 parameters on MNIST)."""
    return _mlp(input_shape, num_classes, params.hidden)


@MODELS.register("logreg", "multinomial logistic regression: flatten → Linear (Synthetic(α,β): 60→10)")
def logreg(input_shape: tuple[int, ...], num_classes: int, params: NoParams) -> nn.Module:
    """Softmax regression, the convex model of the Synthetic(α,β) experiments (610 parameters)."""
    return _mlp(input_shape, num_classes, [])
