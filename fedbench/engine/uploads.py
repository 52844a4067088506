"""What the round's clients send and how the server weighs it: decoding, bit counts, weights.

Shared by the round loop and the plug-ins that decide which uploads reach the server
(:mod:`fedbench.engine.plugins`); the bit-counting rule of :mod:`fedbench.compress` applies.
"""

from __future__ import annotations

import torch

from fedbench.compress import BITS_PER_FLOAT, Compressed
from fedbench.scenario import RunSpec


def decoded(uploads: dict[str, torch.Tensor | Compressed]) -> dict[str, torch.Tensor]:
    """What the server reconstructs from the clients' messages."""
    return {k: v.value if isinstance(v, Compressed) else v for k, v in uploads.items()}


def upload_bits(uploads: dict[str, torch.Tensor | Compressed]) -> float:
    """Bits the round's clients sent: compressed entries at their reported size, others at 32
    bits per float; entries named ``_…`` stay on the client and cost nothing."""
    return float(client_upload_bits(uploads).sum())


def client_upload_bits(uploads: dict[str, torch.Tensor | Compressed]) -> torch.Tensor:
    """Bits each of the round's clients sent ``[S]`` (float64; :func:`upload_bits` is their sum)."""
    rows = len(decoded(uploads)[next(iter(uploads))])
    total = torch.zeros(rows, dtype=torch.float64)
    for name, value in uploads.items():
        if not name.startswith("_"):
            total += value.bits.double().cpu() if isinstance(value, Compressed) else value[0].numel() * BITS_PER_FLOAT
    return total


def aggregation_weights(spec: RunSpec, sizes: torch.Tensor) -> torch.Tensor:
    """n_i/Σn over the sampled clients (``samples``) or 1/S (``uniform``)."""
    if spec.server.weighting == "uniform":
        return torch.full_like(sizes, 1.0 / len(sizes))
    return sizes / sizes.sum()
