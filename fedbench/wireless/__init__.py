"""The wireless uplink of FedQVR-E (Wang et al., Sec. V): channel, allocation (Eq. 30), deadlines.

- :mod:`~fedbench.wireless.channel`: device placement, path loss, Rayleigh fading, FDMA rates.
- :mod:`~fedbench.wireless.allocation`: the cvxpy bandwidth/bit allocation, floor and removal.
- :mod:`~fedbench.wireless.oracle`: an independent scipy solver of the same problem (tests).
- :mod:`~fedbench.wireless.uplink`: the cell and each round's channel, allocation and deadline check.
- :mod:`~fedbench.wireless.plugin`: the round plug-in that puts them around the round loop.
"""

from fedbench.wireless.allocation import Allocation, AllocationError, allocate_bits
from fedbench.wireless.channel import equal_bandwidth_delivery, on_time, rate_bps
from fedbench.wireless.uplink import RoundRadio, Uplink

__all__ = [
    "Allocation",
    "AllocationError",
    "RoundRadio",
    "Uplink",
    "allocate_bits",
    "equal_bandwidth_delivery",
    "on_time",
    "rate_bps",
]
