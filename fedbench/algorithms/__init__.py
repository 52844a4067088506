"""Algorithm registry: importing this package registers every algorithm."""

from fedbench.algorithms import fedavg, fedcams, fedcm, feddyn, fedmim, fedprox, fedsam, scaffold  # noqa: F401
from fedbench.algorithms.base import ALGORITHMS, Algorithm, AlgorithmContext, RoundContext, State

__all__ = ["ALGORITHMS", "Algorithm", "AlgorithmContext", "RoundContext", "State"]
