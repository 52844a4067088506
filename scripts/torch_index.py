"""Prints the pip options that choose torch's build for `make install` (stdout) and why (stderr).

Where no NVIDIA GPU is present and PyTorch's CPU wheel index answers, torch and torchvision come from
that index: `2.14.1+cpu` satisfies the lock's `torch==2.14.1` and needs none of the CUDA wheels
(about 6 GB less on disk). Otherwise PyPI's default build is installed (the CUDA one on Linux x86-64).
TORCH_INDEX=cpu or TORCH_INDEX=pypi forces the choice. Standard library only: runs before the venv exists.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def has_nvidia_gpu() -> bool:
    """An NVIDIA device node, or `nvidia-smi -L` listing a GPU."""
    if any(Path("/dev").glob("nvidia[0-9]*")):
        return True
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    try:
        listed = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return "GPU" in listed


def answers(url: str, timeout: float = 5.0) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/torch/", timeout=timeout) as response:
            return response.status == 200
    except OSError:
        return False


def main() -> None:
    choice = os.environ.get("TORCH_INDEX", "auto")
    if choice not in ("auto", "cpu", "pypi"):
        sys.exit(f"TORCH_INDEX={choice!r}: expected auto, cpu or pypi")
    if choice == "auto":
        if has_nvidia_gpu():
            print("torch: an NVIDIA GPU is present: PyPI's CUDA build", file=sys.stderr)
            return
        if not answers(CPU_INDEX):
            print(
                f"torch: no NVIDIA GPU, but {CPU_INDEX} does not answer: PyPI's default build (with CUDA "
                "libraries on Linux x86-64, about 6 GB); TORCH_INDEX=cpu forces the CPU index",
                file=sys.stderr,
            )
            return
        choice = "cpu"
    if choice == "cpu":
        print(f"torch: the CPU-only build from {CPU_INDEX}", file=sys.stderr)
        print(f"--extra-index-url {CPU_INDEX}")
    else:
        print("torch: PyPI's default build (TORCH_INDEX=pypi)", file=sys.stderr)


if __name__ == "__main__":
    main()
