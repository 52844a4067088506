"""An independent solver of the relaxed allocation (30), for tests: dual bisection with scipy.

For a price λ on bandwidth, (30) decouples per device into the 1-D concave problem
max_{W ≥ W_i⁰} U(B_i(W)) − λW with B_i(W) = (τ·W·log₂(1 + a_i/W) − μ)/d − 1, U(B) = B^(1−α)/(1−α)
(capped at B_i ≤ b_max when given); its maximiser solves U'(B)·B'(W) = λ, found by ``brentq``.
Σ_i W_i(λ) decreases in λ, and λ is bisected (in log space) until Σ_i W_i = W_total. Works in Hz
and bits, not in the normalised units of :mod:`fedbench.wireless.allocation`.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import brentq

LN2 = math.log(2)


def _bits(w: float, a: float, tau: float, d: float, mu: float) -> float:
    return (tau * w * math.log1p(a / w) / LN2 - mu) / d - 1


def _dbits(w: float, a: float, tau: float, d: float) -> float:
    """dB/dW = (τ/d)·(log₂(1 + a/W) − a/((W + a)·ln 2))."""
    return tau / d * (math.log1p(a / w) - a / (w + a)) / LN2


def _width_for(bits: float, a: float, tau: float, d: float, mu: float) -> float:
    """The bandwidth at which B_i(W) = bits (inf if unreachable)."""
    if (bits + 1) * d + mu >= tau * a / LN2:
        return math.inf
    f = lambda w: _bits(w, a, tau, d, mu) - bits  # noqa: E731
    hi = a
    while f(hi) < 0:
        hi *= 2
    lo = hi
    while f(lo) > 0:
        lo /= 2
    return brentq(f, lo, hi, xtol=1e-12 * hi, rtol=1e-15)


def _demand(lam: float, a: float, tau: float, d: float, mu: float, alpha: float, b_max: float | None) -> float:
    """argmax_W U(B(W)) − λW for one device."""
    w0 = _width_for(0.0, a, tau, d, mu)
    w_cap = math.inf if b_max is None else _width_for(b_max, a, tau, d, mu)

    def g(w: float) -> float:  # U'(B(W))·B'(W) − λ, decreasing in W
        b = max(_bits(w, a, tau, d, mu), 1e-30)
        return b ** (-alpha) * _dbits(w, a, tau, d) - lam

    lo = w0 * (1 + 1e-12)
    if g(lo) <= 0:
        return w0
    if math.isfinite(w_cap) and g(w_cap) >= 0:
        return w_cap
    hi = w_cap if math.isfinite(w_cap) else 2 * lo
    while g(hi) > 0:
        hi *= 2
    return brentq(g, lo, hi, xtol=1e-13 * hi, rtol=1e-15)


def scipy_allocation(
    snr_bw_hz: np.ndarray,
    tau_s: float,
    total_hz: float,
    dim: int,
    overhead_bits: float,
    fairness_alpha: float = 0.5,
    b_max: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Relaxed optimum (B [m], W [m] Hz) of (30) for devices that are jointly feasible at B = 0."""
    args = [(float(a), tau_s, float(dim), float(overhead_bits), fairness_alpha, b_max) for a in snr_bw_hz]
    if not args:
        return np.zeros(0), np.zeros(0)

    def total(lam: float) -> float:
        return sum(_demand(lam, *x) for x in args)

    if b_max is not None and total(0.0) <= total_hz:  # the caps bind before the bandwidth does
        lam = 0.0
    else:
        lo, hi = 1e-30, 1.0
        while total(hi) > total_hz:
            hi *= 10
        while total(lo) < total_hz:
            lo /= 10
        for _ in range(200):  # bisection on log λ
            mid = math.sqrt(lo * hi)
            lo, hi = (mid, hi) if total(mid) > total_hz else (lo, mid)
            if hi / lo < 1 + 1e-13:
                break
        lam = math.sqrt(lo * hi)
    widths = np.array([_demand(lam, *x) for x in args])
    bits = np.array([_bits(w, *x[:4]) for w, x in zip(widths, args)])
    return bits, widths
