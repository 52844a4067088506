"""Minibatch augmentation on the training device: random horizontal flips and padded random
crops, drawn per batch from the stream ``("augment", client, position)`` — no per-sample Python.

The papers that augment (FedMIM, FedDyn, FL-Simulator) flip with probability ½ and take a random
H×W crop of the image zero-padded by ``crop_padding`` pixels on every side.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from fedbench.seeding import torch_seed


def augment_batch(
    x: torch.Tensor, flip: bool, crop_padding: int, seed: int, client: int, position: int
) -> torch.Tensor:
    """Augmented copy of the image batch ``x`` ``[B, C, H, W]``; deterministic given its keys."""
    if not flip and crop_padding == 0:
        return x
    if x.dim() != 4:
        raise ValueError(f"local.augment needs image batches [B, C, H, W], got shape {tuple(x.shape)}")
    gen = torch.Generator(device="cpu")
    gen.manual_seed(torch_seed(seed, "augment", client, position))
    b, _, h, w = x.shape
    if crop_padding:
        p = crop_padding
        padded = F.pad(x, (p, p, p, p))
        dy = torch.randint(0, 2 * p + 1, (b,), generator=gen).to(x.device)
        dx = torch.randint(0, 2 * p + 1, (b,), generator=gen).to(x.device)
        rows = (dy[:, None] + torch.arange(h, device=x.device))[:, None, :, None]  # [B, 1, H, 1]
        cols = (dx[:, None] + torch.arange(w, device=x.device))[:, None, None, :]  # [B, 1, 1, W]
        batch = torch.arange(b, device=x.device)[:, None, None, None]
        chans = torch.arange(x.shape[1], device=x.device)[None, :, None, None]
        x = padded[batch, chans, rows, cols]
    if flip:
        mask = (torch.rand(b, generator=gen) < 0.5).to(x.device)[:, None, None, None]
        x = torch.where(mask, x.flip(-1), x)
    return x
