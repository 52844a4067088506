"""Importing fedbench pins ATen's CPU kernels to AVX2 where the CPU has it, and keeps a value the user set."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fedbench.kernels import PINNED, VARIABLE, cpu_flags, pin_aten_kernels

ROOT = Path(__file__).resolve().parents[1]
CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
flags\t\t: fpu sse sse2 avx fma avx2 avx512f
processor\t: 1
flags\t\t: fpu sse
"""


def test_cpu_flags_reads_the_first_processor(tmp_path: Path):
    (tmp_path / "cpuinfo").write_text(CPUINFO)
    assert cpu_flags(tmp_path / "cpuinfo") == {"fpu", "sse", "sse2", "avx", "fma", "avx2", "avx512f"}
    assert cpu_flags(tmp_path / "absent") == set()


@pytest.mark.parametrize(
    "flags, preset, expected",
    [
        ({"avx2", "fma", "avx512f"}, None, PINNED),  # an AVX-512 CPU runs the AVX2 kernels
        ({"avx2", "fma"}, None, PINNED),
        ({"avx", "sse4_2"}, None, None),  # no AVX2: ATen's own (scalar) choice
        ({"avx2"}, None, None),  # AVX2 without FMA: ATen's AVX2 kernels need both
        ({"avx2", "fma"}, "default", "default"),  # the user's value is kept
    ],
)
def test_pin_aten_kernels(flags: set[str], preset: str | None, expected: str | None):
    environ = {} if preset is None else {VARIABLE: preset}
    assert pin_aten_kernels(environ, flags) == expected
    assert environ.get(VARIABLE) == expected


def test_importing_fedbench_sets_the_variable_before_torch_dispatches():
    code = "import os, fedbench, torch; print(os.environ.get('ATEN_CPU_CAPABILITY'), torch.backends.cpu.get_cpu_capability())"
    env = {k: v for k, v in os.environ.items() if k != VARIABLE}
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    variable, capability = out.stdout.split()
    if {"avx2", "fma"} <= cpu_flags():
        assert (variable, capability) == ("avx2", "AVX2")
    else:
        assert variable == "None"
