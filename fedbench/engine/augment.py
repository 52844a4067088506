"""Minibatch augmentation on the training device: random horizontal flips and padded random
crops, drawn per batch from the stream ``("augment", client, position)`` — no per-sample Python.

Under ``local.shuffle: device`` the draws are hashed instead (:func:`~fedbench.engine.device_plan.hashed_augment`), so
that a round plan drawn on the device draws them there too.

The convention of the papers that augment (docs/scenarios.md): flip with probability ½ and take a random
H×W crop of the image zero-padded by ``crop_padding`` pixels on every side. The draws
(:func:`augment_draws`) and their application (:func:`apply_augment`) are apart so that the
batched executor can draw a whole round up front and augment all S clients' batches at once.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from fedbench.engine.device_plan import hashed_augment, key_of, stream_base
from fedbench.seeding import torch_seed


def augment_draws(
    size: int, flip: bool, crop_padding: int, seed: int, client: int, position: int, shuffle: str = "host"
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-sample crop offsets ``dy``, ``dx`` and flips ``[size]`` (CPU) of the batch of ``size``
    samples at the client's ``position``: the stream's draws in the order :func:`augment_batch` uses; under
    ``local.shuffle: device`` hashed (:func:`~fedbench.engine.device_plan.hashed_augment`, as a device plan
    draws them)."""
    if shuffle == "device":
        key = torch.tensor(key_of(augment_base(seed), client, position))
        return hashed_augment(key, torch.arange(size, dtype=torch.int64), flip, crop_padding)
    gen = torch.Generator(device="cpu")
    gen.manual_seed(torch_seed(seed, "augment", client, position))
    zero = torch.zeros(size, dtype=torch.int64)
    dy = torch.randint(0, 2 * crop_padding + 1, (size,), generator=gen) if crop_padding else zero
    dx = torch.randint(0, 2 * crop_padding + 1, (size,), generator=gen) if crop_padding else zero
    flips = torch.rand(size, generator=gen) < 0.5 if flip else torch.zeros(size, dtype=torch.bool)
    return dy, dx, flips


def apply_augment(
    x: torch.Tensor, dy: torch.Tensor, dx: torch.Tensor, flips: torch.Tensor, crop_padding: int
) -> torch.Tensor:
    """Images ``x`` ``[B, C, H, W]`` cropped at (dy, dx) of their zero-padded copy, then flipped where
    ``flips`` (all ``[B]``, on x's device); pure indexing, so exact."""
    b, c, h, w = x.shape
    if crop_padding:
        p = crop_padding
        padded = F.pad(x, (p, p, p, p))
        rows = (dy[:, None] + torch.arange(h, device=x.device))[:, None, :, None]  # [B, 1, H, 1]
        cols = (dx[:, None] + torch.arange(w, device=x.device))[:, None, None, :]  # [B, 1, 1, W]
        batch = torch.arange(b, device=x.device)[:, None, None, None]
        chans = torch.arange(c, device=x.device)[None, :, None, None]
        x = padded[batch, chans, rows, cols]
    return torch.where(flips[:, None, None, None], x.flip(-1), x)


@functools.cache
def augment_base(seed: int) -> int:
    """The 32-bit base key of the run's ``("augment",)`` stream under ``local.shuffle: device`` (once a seed: each
    batch's draws and each round's device plan key from it)."""
    return stream_base(seed, ("augment",))


def augment_batch(
    x: torch.Tensor, flip: bool, crop_padding: int, seed: int, client: int, position: int, shuffle: str = "host"
) -> torch.Tensor:
    """Augmented copy of the image batch ``x`` ``[B, C, H, W]``; deterministic given its keys."""
    if not flip and crop_padding == 0:
        return x
    if x.dim() != 4:
        raise ValueError(f"local.augment needs image batches [B, C, H, W], got shape {tuple(x.shape)}")
    dy, dx, flips = augment_draws(x.shape[0], flip, crop_padding, seed, client, position, shuffle)
    return apply_augment(x, dy.to(x.device), dx.to(x.device), flips.to(x.device), crop_padding)
