"""fedbench: reproducible federated-learning benchmarks driven by YAML scenarios."""

from fedbench.kernels import pin_aten_kernels

__version__ = "0.1.0"

pin_aten_kernels()  # before torch dispatches anything: the same kernels on every x86-64 CPU (fedbench/kernels.py)
