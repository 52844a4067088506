"""Algorithm registry: importing this package registers every algorithm."""

from fedbench.algorithms import (  # noqa: F401
    cflag,
    ewc,
    fedavg,
    fedcams,
    fedcm,
    fedcomgate,
    feddyn,
    fedmim,
    fedmlb,
    fedpaq,
    fedprox,
    fedqvr,
    fedsam,
    fedtrack,
    finefl,
    gradma,
    icarl,
    lwf,
    mifa,
    mimelite,
    moon,
    nccl,
    scaffold,
    target,
)
from fedbench.algorithms.base import ALGORITHMS, Algorithm, AlgorithmContext, RoundContext, Upload
from fedbench.algorithms.state import ServerState

__all__ = ["ALGORITHMS", "Algorithm", "AlgorithmContext", "RoundContext", "ServerState", "Upload"]
