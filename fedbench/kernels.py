"""ATen's CPU kernel path, pinned to AVX2 where the CPU has it, so that a run computes the same bits on every
x86-64 CPU of the last decade (issue 24).

ATen picks its vectorised kernels at the first operator it dispatches: AVX-512 where the CPU has it, else AVX2,
else scalar code. The paths differ in the last bits of reductions and of vectorised functions (GELU's erf,
exp, ...), and a sign or top-k compressor turns such a bit into another decision: FedCAMS Figs. 4-5's ConvMixer
column moved by up to 2 points on the scalar path in float64, while capping MKL, oneDNN, NumPy and OpenBLAS
left it identical (docs/scenarios.md#precision-and-the-same-numbers-on-every-machine). Importing fedbench
therefore sets ``ATEN_CPU_CAPABILITY=avx2`` when the variable is unset and the CPU has AVX2 and FMA; a value
the user set is kept, and where ATen already dispatched an operator the variable has no effect.
"""

from __future__ import annotations

import os
from pathlib import Path

VARIABLE = "ATEN_CPU_CAPABILITY"
PINNED = "avx2"


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str]:
    """The first processor's flags in ``cpuinfo`` (Linux); empty where the file is absent or has none."""
    try:
        with cpuinfo.open(errors="ignore") as lines:  # stops at the first processor: not the whole file
            for line in lines:
                key, _, value = line.partition(":")
                if key.strip() == "flags":
                    return set(value.split())
    except OSError:
        pass
    return set()


def pin_aten_kernels(environ: dict[str, str] | None = None, flags: set[str] | None = None) -> str | None:
    """Set ``ATEN_CPU_CAPABILITY=avx2`` in ``environ`` (default: this process's) unless it is set or the CPU
    lacks AVX2 or FMA; returns the value in force (None: ATen's own choice)."""
    environ = os.environ if environ is None else environ
    if VARIABLE in environ:
        return environ[VARIABLE]
    if {"avx2", "fma"} <= (cpu_flags() if flags is None else flags):
        environ[VARIABLE] = PINNED
        return PINNED
    return None
