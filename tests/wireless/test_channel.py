"""The uplink channel (FedQVR Sec. V-A, VI-C): units, placement, fading, rates, deadline outage."""

import math

import numpy as np
from scipy import integrate

from fedbench.wireless.channel import (
    channel_gain,
    dbm_to_watts,
    equal_bandwidth_delivery,
    on_time,
    place_devices,
    rate_bps,
    rayleigh_fading,
)


def test_paper_units():
    assert dbm_to_watts(30) == 1.0  # P = 30 dBm = 1 W
    assert math.isclose(dbm_to_watts(-143), 10**-17.3, rel_tol=1e-12)  # σ² = −143 dBm/Hz ≈ 5.012e−18 W/Hz
    assert math.isclose(dbm_to_watts(-143), 5.011872336e-18, rel_tol=1e-9)


def test_devices_are_uniform_over_the_disk_and_fixed_per_seed():
    r = place_devices(40_000, 3000.0, seed=3)
    assert (r >= 1.0).all() and (r <= 3000.0).all()
    # uniform in area: P(r ≤ ρR) = ρ²
    for rho in (0.25, 0.5, 0.9):
        assert abs((r <= rho * 3000).mean() - rho**2) < 0.01
    assert np.array_equal(r, place_devices(40_000, 3000.0, seed=3))
    assert not np.array_equal(r, place_devices(40_000, 3000.0, seed=4))


def test_rayleigh_fading_is_unit_exponential_and_redrawn_each_round():
    g = rayleigh_fading(200_000, seed=0, round_=1)
    assert abs(g.mean() - 1) < 0.01 and abs(g.var() - 1) < 0.02  # |g|² ~ Exp(1)
    assert abs((g > 1).mean() - math.exp(-1)) < 0.005
    assert np.array_equal(g, rayleigh_fading(200_000, 0, 1))
    assert not np.array_equal(g[:10], rayleigh_fading(200_000, 0, 2)[:10])


def test_gain_and_rate_by_hand():
    # |h|² = 1e-3 · 100^-2 · 0.5 = 5e-8
    assert math.isclose(channel_gain(np.array([100.0]), np.array([0.5]), 1e-3, 2)[0], 5e-8, rel_tol=1e-12)
    # W log2(1 + a/W): a = W → W bits/s; a = 3W → 2W
    assert np.allclose(rate_bps(np.array([1e6, 1e6]), np.array([1e6, 3e6])), [1e6, 2e6], rtol=1e-12)
    assert rate_bps(0.0, 1e6) == 0  # no bandwidth, no rate
    # W → ∞: rate → a / ln 2
    assert math.isclose(float(rate_bps(1e15, 1e6)), 1e6 / math.log(2), rel_tol=1e-6)


def test_deadline_at_the_boundary():
    # R = 1e6 bit/s each (a = W = 1e6); τ = 0.5 s carries 5e5 bits
    a = np.array([1e6, 1e6, 1e6])
    assert on_time(a, np.full(3, 1e6), np.array([4.9e5, 5e5, 5.1e5]), 0.5).tolist() == [True, True, False]
    # equal split of 3 MHz among 3 devices is the same channel
    bw, ok = equal_bandwidth_delivery(a, np.array([4.9e5, 5e5, 5.1e5]), 0.5, 3e6)
    assert bw.tolist() == [1e6] * 3 and ok.tolist() == [True, True, False]


def test_equal_bandwidth_outage_matches_the_analytic_probability():
    """P(T > τ) for a device uniform in the disk with Rayleigh fading and W_total/m (notes §5.6:
    R = 3000 m, τ = 1 s, CIFAR B = 2 payload 7.54 Mbit, 10 MHz each → ≈ 0.14), Monte Carlo
    through the module vs the integral ∫ (1 − exp(−a_min·d²/k))·2d/R² dd with k = P·c/σ²."""
    R, tau, W, payload = 3000.0, 1.0, 1e7, 2_513_418 * 3 + 1152
    k = 1.0 * 1e-3 / dbm_to_watts(-143)
    a_min = W * (2 ** (payload / (tau * W)) - 1)  # the smallest a that carries the payload
    exact, _ = integrate.quad(lambda d: (1 - math.exp(-a_min * max(d, 1.0) ** 2 / k)) * 2 * d / R**2, 0, R)
    n = 200_000
    a = k * channel_gain(place_devices(n, R, 0), rayleigh_fading(n, 0, 1), 1.0, 2)
    _, ok = equal_bandwidth_delivery(a, np.full(n, payload), tau, W * n)
    assert abs((~ok).mean() - exact) < 0.004
    assert abs(exact - 0.14) < 0.01  # the notes' table
