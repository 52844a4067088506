"""Named, seeded random streams.

Every random draw in fedbench comes from a stream keyed by ``(seed, name, *keys)`` — e.g.
``("sampling", round)`` or ``("batches", client, epoch)`` — so that two algorithms run on the
same scenario and seed see identical partitions, client samples and minibatch orders, and a
resumed run draws exactly what an uninterrupted one would have drawn. Nothing reseeds a
global generator.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

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


# numpy's SeedSequence (numpy/random/bit_generator.pyx), which torch_seed uses, restated over arrays of entropies
_MASK32 = 0xFFFFFFFF
_INIT_A, _MULT_A, _INIT_B, _MULT_B = 0x43B0D7E5, 0x931E8875, 0x8B51F9DD, 0x58F38DED
_MIX_L, _MIX_R, _POOL = 0xCA01F9DD, 0x4973F715, 4


def torch_seeds(name: str, rows: Sequence[Sequence[int]]) -> list[int]:
    """:func:`torch_seed` of each row ``(seed, *keys)`` (all of one length), computed together: numpy's
    SeedSequence mixing (pool of 4 words, two output words) over an array of entropies, the same integers
    (tests/test_seeding.py); a row with a value of 2³² or more (an entropy of several words) goes through
    :func:`torch_seed`."""
    if not rows:
        return []
    try:
        given = np.array(rows, dtype=np.int64)
    except OverflowError:  # a value past 2⁶³
        given = None
    if given is None or given.ndim != 2 or given.min() < 0 or given.max() > _MASK32:
        return [torch_seed(row[0], name, *row[1:]) for row in rows]
    entropy = np.insert(given.astype(np.uint64), 1, np.uint64(zlib.crc32(name.encode())), axis=1)
    hash_const = [_INIT_A]

    def hashmix(value: np.ndarray) -> np.ndarray:
        value = (value ^ hash_const[0]) & _MASK32
        hash_const[0] = (hash_const[0] * _MULT_A) & _MASK32
        value = (value * hash_const[0]) & _MASK32
        return value ^ (value >> 16)

    def mix(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        result = (_MIX_L * x - _MIX_R * y) & _MASK32
        return result ^ (result >> 16)

    zero = np.zeros(len(rows), dtype=np.uint64)
    width = entropy.shape[1]
    pool = [hashmix(entropy[:, i] if i < width else zero) for i in range(_POOL)]
    for i_src in range(_POOL):
        for i_dst in range(_POOL):
            if i_src != i_dst:
                pool[i_dst] = mix(pool[i_dst], hashmix(pool[i_src]))
    for i_src in range(_POOL, width):
        for i_dst in range(_POOL):
            pool[i_dst] = mix(pool[i_dst], hashmix(entropy[:, i_src]))
    words, const = [], _INIT_B
    for i in range(2):
        value = pool[i] ^ const
        const = (const * _MULT_B) & _MASK32
        value = (value * const) & _MASK32
        words.append(value ^ (value >> 16))
    return [(int(a) << 31) ^ int(b) for a, b in zip(words[0].tolist(), words[1].tolist())]


def torch_stream(seed: int, name: str, *keys: int, device: str | torch.device = "cpu") -> torch.Generator:
    """A torch generator for stream ``name`` on ``device``."""
    gen = torch.Generator(device=device)
    gen.manual_seed(torch_seed(seed, name, *keys))
    return gen
