"""TensorFloat-32 on a GPU for the duration of a run (the scenario's ``local.tf32``, on by default).

TF32 rounds the inputs of float32 matmuls and convolutions to a 10-bit mantissa on tensor cores
(NVIDIA Ampere and later): several times the float32 throughput, float32 range and accumulation.
``local.tf32: false`` keeps full IEEE float32; it enters the run's hash, the default does not
(so specs written before the setting keep their hash). CPU runs are untouched. torch ≥ 2.9 sets
this through ``fp32_precision`` and refuses a mix with the older ``allow_tf32`` flags, so the
newer interface is used where it exists; the previous settings are restored afterwards.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch


def _targets() -> list[tuple[object, str, object, object]]:
    """(settings object, attribute, value for TF32, value for IEEE float32) of matmuls and convolutions."""
    matmul = torch.backends.cuda.matmul
    if hasattr(matmul, "fp32_precision"):
        return [(matmul, "fp32_precision", "tf32", "ieee"), (torch.backends.cudnn.conv, "fp32_precision", "tf32", "ieee")]
    return [(matmul, "allow_tf32", True, False), (torch.backends.cudnn, "allow_tf32", True, False)]


@contextmanager
def gpu_precision(tf32: bool, device: torch.device) -> Iterator[None]:
    """TF32 matmuls and convolutions on (``tf32``) or off while the block runs on a CUDA ``device``."""
    if device.type != "cuda":
        yield
        return
    targets = _targets()
    before = [getattr(obj, name) for obj, name, _, _ in targets]
    for obj, name, on, off in targets:
        setattr(obj, name, on if tf32 else off)
    try:
        yield
    finally:
        for (obj, name, _, _), value in zip(targets, before):
            setattr(obj, name, value)
