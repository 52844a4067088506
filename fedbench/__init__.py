"""fedbench: reproducible federated-learning benchmarks driven by YAML scenarios."""

__version__ = "0.1.0"
