"""The uplink of one run, as the wireless round plug-in uses it (FedQVR Sec. V-A, VI-C; Alg. 2 lines 3–6).

:class:`Uplink` holds the cell (device distances, placed once per seed) and, per round, draws the
sampled devices' fading and returns a :class:`RoundRadio`: for an ``adaptive_bits`` algorithm the
allocation of Eq. (30) (bandwidth, integer bit widths, devices removed before training), for
the others W_total/m each. After local training :meth:`RoundRadio.deliver` tells which uploads
met the deadline τ: an upload of B̂_i bits arrives iff B̂_i ≤ τ·W_i·log₂(1 + a_i/W_i) (Eq. 28).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fedbench.scenario import WirelessSpec
from fedbench.wireless.allocation import Allocation, allocate_bits
from fedbench.wireless.channel import channel_gain, dbm_to_watts, on_time, place_devices, rayleigh_fading


@dataclass
class RoundRadio:
    """The channel of one round's m sampled devices (rows in ``clients`` order).

    ``kept`` [m]: devices that train and upload (all, unless the allocation removed some);
    ``bits`` [m]: the allocated bit widths (``None`` for fixed-bit algorithms);
    ``bandwidth`` [m] Hz; ``log`` collects what the plug-in records under ``extra["wireless"]``."""

    clients: np.ndarray
    snr_bw_hz: np.ndarray
    bandwidth: np.ndarray
    kept: np.ndarray
    tau_s: float
    bits: np.ndarray | None = None
    log: dict = field(default_factory=dict)

    def deliver(self, payload_bits: np.ndarray) -> np.ndarray:
        """Which of the kept devices' uploads (``payload_bits`` [k], in kept order) meet τ; logged."""
        ok = on_time(self.snr_bw_hz[self.kept], self.bandwidth[self.kept], payload_bits, self.tau_s)
        sent = self.clients[self.kept]
        self.log.update(
            payload_bits=np.asarray(payload_bits).tolist(), lost=sent[~ok].tolist(), received=sent[ok].tolist()
        )
        return ok


class Uplink:
    """The FDMA uplink of one run: cell geometry, per-round fading, allocation or equal split."""

    def __init__(self, spec: WirelessSpec, num_clients: int, seed: int, dim: int, overhead_bits: float):
        self.spec, self.seed, self.dim, self.overhead_bits = spec, seed, dim, overhead_bits
        self.num_clients = num_clients
        self.distance_m = place_devices(num_clients, spec.cell_radius_m, seed)
        self.power_w = dbm_to_watts(spec.tx_power_dbm)
        self.noise_w_hz = dbm_to_watts(spec.noise_psd_dbm_hz)

    def snr_bandwidth(self, round_: int, clients: np.ndarray) -> np.ndarray:
        """a_i = P|h_i|²/σ² (Hz) of the listed devices at round t."""
        fading = rayleigh_fading(self.num_clients, self.seed, round_)[clients]
        gain = channel_gain(self.distance_m[clients], fading, self.spec.pathloss_const, self.spec.pathloss_exp)
        return self.power_w * gain / self.noise_w_hz

    def round(self, round_: int, clients: np.ndarray, adaptive: bool) -> RoundRadio:
        """The round's channel for the sampled ``clients``: Eq. (30) when ``adaptive``, else W_total/m each."""
        spec = self.spec
        a = self.snr_bandwidth(round_, clients)
        log: dict = {"distance_m": self.distance_m[clients].round(1).tolist(), "snr_bw_hz": a.tolist()}
        if not adaptive:
            bandwidth = np.full(len(clients), spec.bandwidth_hz / len(clients))
            log["bandwidth_hz"] = bandwidth.tolist()
            return RoundRadio(clients, a, bandwidth, np.ones(len(clients), bool), spec.tau_s, log=log)
        alloc = self.allocate(a)
        log.update(
            bandwidth_hz=alloc.bandwidth.tolist(),
            bits=alloc.bits.tolist(),
            relaxed_bits=[None if np.isnan(b) else b for b in alloc.relaxed.tolist()],
            infeasible=clients[alloc.infeasible].tolist(),
            dropped=clients[alloc.dropped].tolist(),
            solver=alloc.solver,
            solver_status=alloc.status,
            solve_s=alloc.solve_s,
        )
        return RoundRadio(clients, a, alloc.bandwidth, alloc.kept, spec.tau_s, alloc.bits, log)

    def allocate(self, snr_bw_hz: np.ndarray) -> Allocation:
        spec = self.spec
        return allocate_bits(
            snr_bw_hz,
            tau_s=spec.tau_s,
            total_hz=spec.bandwidth_hz,
            dim=self.dim,
            overhead_bits=self.overhead_bits,
            fairness_alpha=spec.fairness_alpha,
            b_min=spec.b_min,
            b_max=spec.b_max,
            resolve_after_drop=spec.resolve_after_drop,
        )
