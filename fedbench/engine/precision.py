"""A run's numeric precision: ``local.precision`` (float64 training) and, on a GPU, ``local.tf32``.

``precision: fp64`` trains in float64: the datasets' inputs, the model's parameters and buffers, every
algorithm's state and every computation. It is what the tiny scale uses, so that its committed tables
are the same on every CPU: in float32 the CPU's kernel choices (AVX2 or AVX-512 reductions, the BLAS
vendor's blocking) differ in the last bits, and training amplifies that into a flipped test prediction
or a blow-up one round later; in float64 the same differences start ~10⁹ times smaller and never reach
the printed digits (``tests/test_kernel_paths.py`` regenerates a table under two kernel paths).
:func:`run_precision` makes float64 torch's default dtype while the run builds and trains, so every
tensor an algorithm creates follows without a dtype argument; ``fp32`` and ``bf16`` keep float32.

TensorFloat-32 on a GPU (the scenario's ``local.tf32``, on by default):

TF32 rounds the inputs of float32 matmuls and convolutions to a 10-bit mantissa on tensor cores
(NVIDIA Ampere and later): several times the float32 throughput, float32 range and accumulation.
``local.tf32: false`` keeps full IEEE float32; it enters the run's hash, the default does not
(so specs written before the setting keep their hash). CPU runs are untouched. torch ≥ 2.9 sets
this through ``fp32_precision`` and refuses a mix with the older ``allow_tf32`` flags, so the
newer interface is used where it exists; the previous settings are restored afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from fedbench.scenario.schema import LocalSpec


def _targets() -> list[tuple[object, str, object, object]]:
    """(settings object, attribute, value for TF32, value for IEEE float32) of matmuls and convolutions."""
    matmul = torch.backends.cuda.matmul
    if hasattr(matmul, "fp32_precision"):
        return [
            (matmul, "fp32_precision", "tf32", "ieee"),
            (torch.backends.cudnn.conv, "fp32_precision", "tf32", "ieee"),
        ]
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


def train_dtype(precision: str) -> torch.dtype:
    """The dtype of a run's data, parameters and state for ``local.precision``."""
    return torch.float64 if precision == "fp64" else torch.float32


@contextmanager
def default_dtype(dtype: torch.dtype) -> Iterator[None]:
    """``dtype`` as torch's default floating dtype while the block runs."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


@contextmanager
def run_precision(local: LocalSpec, device: torch.device) -> Iterator[None]:
    """``local.precision``'s dtype as torch's default dtype, and ``local.tf32`` on a CUDA ``device``,
    while the block runs; both restored afterwards."""
    with default_dtype(train_dtype(local.precision)), gpu_precision(local.tf32, device):
        yield
