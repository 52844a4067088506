"""LEAF's reference models: the FEMNIST CNN and Shakespeare's 2-layer character LSTM (Caldas et al. 2018,
``models/femnist/cnn.py`` and ``models/shakespeare/stacked_lstm.py``)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field
from torch import nn

from fedbench.models.registry import MODELS, Stage, image_shape
from fedbench.registry import NoParams


class LeafCNN(nn.Module):
    """Conv(C,32,5,same) → ReLU → MaxPool2 → Conv(32,64,5,same) → ReLU → MaxPool2 → FC 2048 → ReLU → FC K.

    6,603,710 parameters on 1×28×28 with 62 classes (LEAF's FEMNIST CNN; the flatten size follows the input).
    """

    def __init__(self, input_shape: tuple[int, ...], num_classes: int):
        super().__init__()
        self.image_shape = image_shape("leaf_cnn", input_shape)
        c, h, w = self.image_shape
        if h < 4 or w < 4:
            raise ValueError(f"model 'leaf_cnn' needs images of at least 4×4, got input_shape {input_shape}")
        self.conv1 = nn.Conv2d(c, 32, 5, padding=2)
        self.conv2 = nn.Conv2d(32, 64, 5, padding=2)
        self.fc1 = nn.Linear(64 * (h // 4) * (w // 4), 2048)
        self.fc2 = nn.Linear(2048, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x
        for stage in self.stages():
            h = stage(h)
        return h

    def stages(self) -> list[Stage]:
        """Blocks conv1 → ReLU → pool | conv2 → ReLU → pool | flatten → fc1 → ReLU, then fc2."""
        return [
            lambda x: F.max_pool2d(F.relu(self.conv1(x.reshape(x.shape[0], *self.image_shape))), 2),
            lambda h: F.max_pool2d(F.relu(self.conv2(h)), 2),
            lambda h: F.relu(self.fc1(torch.flatten(h, 1))),
            self.fc2,
        ]


class CharLSTMParams(BaseModel):
    """Parameters of ``char_lstm`` (LEAF's defaults)."""

    model_config = ConfigDict(extra="forbid")

    vocab: int = Field(81, ge=2, description="embedding rows: LEAF's 80 characters and one for any other")
    embed: int = Field(8, ge=1, description="embedding size")
    hidden: int = Field(256, ge=1, description="LSTM units per layer")
    layers: int = Field(2, ge=1, description="stacked LSTM layers")


class CharLSTM(nn.Module):
    """Embedding(V, E) → ``layers`` stacked LSTMs of H units → FC K on the last step's output.

    Inputs are ``[B, L]`` character indices held as floats (exact), rounded to int64 for the embedding. Each layer
    is written out as ``gates = W_x x_t + b + W_h h_{t−1}`` with gates (i, f, g, o) in ``nn.LSTM``'s order,
    ``c_t = σ(f) c_{t−1} + σ(i) tanh(g)``, ``h_t = σ(o) tanh(c_t)`` (Hochreiter and Schmidhuber 1997), so that
    ``torch.func.functional_call`` swaps its weights and ``vmap`` batches it over clients (``nn.LSTM``'s fused
    kernel does neither). One bias per gate, initialised with TF's ``forget_bias = 1`` on f (LEAF's
    ``BasicLSTMCell``); weights uniform in ±1/√H like ``nn.LSTM``.
    """

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, params: CharLSTMParams):
        super().__init__()
        if len(input_shape) != 1:
            raise ValueError(f"model 'char_lstm' needs sequences of indices (L,), got input_shape {input_shape}")
        self.vocab, self.hidden_size = params.vocab, params.hidden
        self.embedding = nn.Embedding(params.vocab, params.embed)
        sizes = [params.embed] + [params.hidden] * (params.layers - 1)
        self.inputs = nn.ModuleList(nn.Linear(n, 4 * params.hidden) for n in sizes)
        self.recurrent = nn.ModuleList(nn.Linear(params.hidden, 4 * params.hidden, bias=False) for _ in sizes)
        self.fc = nn.Linear(params.hidden, num_classes)
        bound = 1.0 / math.sqrt(params.hidden)
        with torch.no_grad():
            for layer in (*self.inputs, *self.recurrent):
                nn.init.uniform_(layer.weight, -bound, bound)
            for layer in self.inputs:
                layer.bias.zero_()
                layer.bias[params.hidden : 2 * params.hidden] = 1.0  # forget gate

    def _lstm(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, L]`` indices → the last layer's output at the last step ``[B, H]``."""
        tokens = x.round().long().clamp(0, self.vocab - 1)
        h_seq = self.embedding(tokens)  # [B, L, E]
        for w_x, w_h in zip(self.inputs, self.recurrent):
            projected = w_x(h_seq)  # [B, L, 4H]: the input part of every step at once
            h = c = projected.new_zeros(projected.shape[0], self.hidden_size)
            outputs = []
            for t in range(projected.shape[1]):
                i, f, g, o = (projected[:, t] + w_h(h)).chunk(4, dim=-1)
                c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
                h = torch.sigmoid(o) * torch.tanh(c)
                outputs.append(h)
            h_seq = torch.stack(outputs, dim=1)
        return h_seq[:, -1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self._lstm(x))

    def stages(self) -> list[Stage]:
        """Block embedding → LSTMs → last step, then fc."""
        return [self._lstm, self.fc]


@MODELS.register(
    "leaf_cnn", "LEAF FEMNIST CNN: 2×(conv5 same 32/64 → ReLU → pool2) → FC 2048 (6,603,710 params on FEMNIST)"
)
def leaf_cnn(input_shape: tuple[int, ...], num_classes: int, params: NoParams) -> nn.Module:
    return LeafCNN(input_shape, num_classes)


@MODELS.register(
    "char_lstm",
    "LEAF Shakespeare LSTM: embedding 8 → 2 LSTM layers of 256 → FC on the last step (817,880 params)",
    params=CharLSTMParams,
)
def char_lstm(input_shape: tuple[int, ...], num_classes: int, params: CharLSTMParams) -> nn.Module:
    return CharLSTM(input_shape, num_classes, params)
