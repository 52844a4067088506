"""Named, seeded random streams.

Every random draw in fedbench comes from a stream keyed by ``(seed, name, *keys)`` — e.g.
``("sampling", round)`` or ``("batches", client, epoch)`` — so that two algorithms run on the
same scenario and seed see identical partitions, client samples and minibatch orders, and a
resumed run draws exactly what an uninterrupted one would have drawn. Nothing reseeds a
global generator.
"""

from __future__ import annotations

import zlib

import numpy as np
import torch


def _entropy(seed: int, name: str, keys: tuple[int, ...]) -> list[int]:
    return [int(seed), zlib.crc32(name.encode()), *(int(k) for k in keys)]


def numpy_stream(seed: int, name: str, *keys: int) -> np.random.Generator:
    """A NumPy generator for stream ``name`` under ``seed`` and integer ``keys``."""
    return np.random.default_rng(np.random.SeedSequence(_entropy(seed, name, keys)))


def torch_seed(seed: int, name: str, *keys: int) -> int:
    """A 63-bit integer seed for stream ``name``, for ``torch.Generator.manual_seed``."""
    state = np.random.SeedSequence(_entropy(seed, name, keys)).generate_state(2, np.uint32)
    return (int(state[0]) << 31) ^ int(state[1])


def torch_stream(seed: int, name: str, *keys: int, device: str | torch.device = "cpu") -> torch.Generator:
    """A torch generator for stream ``name`` on ``device``."""
    gen = torch.Generator(device=device)
    gen.manual_seed(torch_seed(seed, name, *keys))
    return gen
