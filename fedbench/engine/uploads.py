"""What the round's clients send and how the server weighs it: decoding, bit counts, weights.

Shared by the round loop and the plug-ins that decide which uploads reach the server
(:mod:`fedbench.engine.plugins`); the bit-counting rule of :mod:`fedbench.compress` applies.
"""

from __future__ import annotations

import torch

from fedbench.algorithms.base import Upload, map_rows
from fedbench.compress import BITS_PER_FLOAT, Compressed
from fedbench.scenario import RunSpec


def decoded(upload: Upload) -> Upload:
    """What the server reconstructs from the clients' messages (``kept`` as it is)."""
    return Upload({k: v.value if isinstance(v, Compressed) else v for k, v in upload.sent.items()}, upload.kept)


def merged(parts: list[Upload]) -> Upload:
    """The uploads of consecutive groups of clients as one, rows in order."""
    sent = {name: [p.sent[name] for p in parts] for name in parts[0].sent}
    cat = {k: Compressed.cat(v) if isinstance(v[0], Compressed) else torch.cat(v) for k, v in sent.items()}
    kept = map_rows(lambda *rows: torch.cat(rows), *[p.kept for p in parts])
    return Upload(cat, kept)


def upload_bits(upload: Upload) -> float:
    """Bits the round's clients sent: compressed entries at their reported size, others at 32
    bits per float; ``kept`` rows stay on the client and cost nothing."""
    return float(sent_bits(upload))


def sent_bits(upload: Upload) -> torch.Tensor:
    """:func:`upload_bits` as a 0-d float64 tensor (the round reads it with its other metrics,
    :mod:`fedbench.engine.pending`)."""
    return client_upload_bits(upload).sum()


def client_upload_bits(upload: Upload) -> torch.Tensor:
    """Bits each of the round's clients sent ``[S]`` (float64, on the host, where the compressors report their
    sizes; :func:`upload_bits` is their sum)."""
    first = next(iter(decoded(upload).sent.values()))
    total = torch.zeros(len(first), dtype=torch.float64)
    for value in upload.sent.values():
        total += value.bits.double() if isinstance(value, Compressed) else value[0].numel() * BITS_PER_FLOAT
    return total


def aggregation_weights(spec: RunSpec, sizes: torch.Tensor) -> torch.Tensor:
    """n_i/Σn over the sampled clients (``samples``) or 1/S (``uniform``)."""
    if spec.server.weighting == "uniform":
        return torch.full_like(sizes, 1.0 / len(sizes))
    return sizes / sizes.sum()
