"""The model registry: ``builder(input_shape, num_classes, params) -> nn.Module``.

Every model takes float input ``[B, *input_shape]`` and returns logits ``[B, num_classes]``.
Models contain no dropout and no other hidden randomness in ``forward``: the trainer computes
gradients functionally (``torch.func.functional_call``) and relies on a forward pass being a
deterministic function of the parameters, buffers and batch.

Blocks (for MOON's representation and FedMLB's hybrid paths): a model may define
``stages() -> list[Stage]``, callables B₁, …, B_B, C such that ``forward(x) ==
C(B_B(…B₁(x)))``: B sequential feature blocks followed by the classifier C, built from the
model's own submodules so that ``torch.func.functional_call`` swaps their parameters. The
representation (penultimate features) is B_B's output. mlp, lenet5, cnn1d, small_cnn and
resnet18 define it; :meth:`fedbench.models.flat.FlatModel.run_stages` evaluates a range of
stages on a flat parameter vector. An optional attribute ``fedmlb_branches`` (1-based block
numbers) sets FedMLB's default hybrid paths for the model (otherwise: after every block).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from pydantic import BaseModel
from torch import nn

from fedbench.registry import Registry

ModelBuilder = Callable[[tuple[int, ...], int, Any], nn.Module]
Stage = Callable[[torch.Tensor], torch.Tensor]

MODELS: Registry[ModelBuilder] = Registry("model")


def build_model(
    name: str, params: dict[str, Any] | BaseModel | None, input_shape: Sequence[int], num_classes: int
) -> nn.Module:
    """Build model ``name`` after validating ``params`` with its pydantic model.

    Raises :class:`~fedbench.registry.UnknownNameError` for an unknown name and
    :class:`pydantic.ValidationError` for bad parameters. Weights are initialised from torch's
    global generator; seed it (e.g. ``torch.manual_seed(torch_seed(seed, "init"))``) first.
    """
    entry = MODELS.get(name)
    if not isinstance(params, BaseModel):
        params = entry.params.model_validate(params or {})
    shape = tuple(int(d) for d in input_shape)
    if not shape or any(d < 1 for d in shape):
        raise ValueError(f"model {name!r}: input_shape must be non-empty positive sizes, got {shape}")
    if num_classes < 1:
        raise ValueError(f"model {name!r}: num_classes must be ≥ 1, got {num_classes}")
    module = entry.obj(shape, int(num_classes), params)
    module.registry_name = name  # for error messages that name the model (e.g. no stages())
    return module


def count_parameters(model: nn.Module) -> int:
    """Number of trainable scalars (the length of the flat parameter vector ``P``)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def conv_out(size: int, kernel: int, stride: int = 1, padding: int = 0) -> int:
    """Output length of a convolution or pooling along one spatial dimension."""
    return (size + 2 * padding - kernel) // stride + 1


def image_shape(name: str, input_shape: tuple[int, ...]) -> tuple[int, int, int]:
    """``(C, H, W)`` for an image model; a ``(H, W)`` input is one channel."""
    if len(input_shape) == 2:
        return (1, *input_shape)
    if len(input_shape) != 3:
        raise ValueError(f"model {name!r} needs image inputs (C, H, W) or (H, W), got input_shape {input_shape}")
    return input_shape  # type: ignore[return-value]
