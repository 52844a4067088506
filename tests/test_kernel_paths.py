"""The committed tiny outputs do not depend on the CPU's kernels (issue 24: three committed tables did not
regenerate on an AMD machine).

A committed table is regenerated in a subprocess whose every numeric library is held to its most basic x86-64
code path: ATen's scalar kernels (``ATEN_CPU_CAPABILITY=default``: no AVX2, no fused multiply-adds), oneDNN
capped at SSE4.1, MKL's BLAS at SSE4.2, NumPy's dispatch below x86-64-v3 and OpenBLAS as on a Nehalem. The
bytes must equal the committed file, which :mod:`tests.test_committed_outputs` regenerates on the path fedbench
pins (ATen's AVX2 kernels, fedbench/kernels.py; the machine's best BLAS): two kernel paths, one table. It holds because the tiny scale trains in float64
(``local.precision: fp64``, fedbench/engine/precision.py); in float32 these two paths give other tables.

Not every table is this robust: FedCAMS Figs. 4-5's ConvMixer column (GELU, and the sign and top-k compressors,
which turn a last-bit difference into another coordinate or sign) moved in its four compressed rows, by up to
2 points, under ATen's scalar kernels alone, and not at all with only MKL, oneDNN, NumPy and OpenBLAS capped
(2026-11-26). Hence fedbench pins ATen's AVX2 kernels (fedbench/kernels.py);
docs/scenarios.md#precision-and-the-same-numbers-on-every-machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_committed_outputs import CASES, ROOT, Case

BASIC_KERNELS = {
    "ATEN_CPU_CAPABILITY": "default",
    "ONEDNN_MAX_CPU_ISA": "SSE41",
    "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
    "NPY_DISABLE_CPU_FEATURES": "X86_V3 X86_V4 AVX512_ICL AVX512_SPR",
    "OPENBLAS_CORETYPE": "Nehalem",
}
# FedQVR Fig. 5 (MLP, stochastic quantizer, wireless uplink): one of the tables that moved on another CPU.
KERNEL_CASES = [c for c in CASES if c.name == "fedqvr"]


def fedbench(*args: str, cwd: Path = ROOT) -> str:
    env = {**os.environ, **BASIC_KERNELS, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-m", "fedbench", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=1800
    )
    assert result.returncode == 0, f"fedbench {' '.join(args)}: {result.stdout}\n{result.stderr}"
    return result.stdout


def test_the_capped_environment_reaches_the_libraries():
    """The subprocess really runs ATen's default kernels (the variable is read once, at the first dispatch)."""
    code = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    env = {**os.environ, **BASIC_KERNELS}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "DEFAULT"


@pytest.mark.outputs
@pytest.mark.parametrize("case", KERNEL_CASES, ids=[c.name for c in KERNEL_CASES])
def test_a_committed_table_regenerates_byte_identical_on_the_basic_kernel_path(case: Case, tmp_path: Path):
    out, tables = tmp_path / "results", tmp_path / "tables"
    scale = ("--scale", case.scale) if case.scale else ()
    for f in case.files:
        fedbench("run", f, *scale, "--out", str(out), "--quiet", *case.run_options)
    fedbench(*case.report, "--out", str(out), "--tables-dir", str(tables))
    for name in case.outputs:
        fresh, committed = (tables / name).read_text(), (ROOT / "tables" / name).read_text()
        assert fresh == committed, f"tables/{name} differs on ATen's default kernels from the committed file"
