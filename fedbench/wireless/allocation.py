"""FedQVR-E's per-round joint bandwidth and bit-width allocation (Wang et al., Sec. V-B, Eq. 30).

Over the round's sampled devices, with payload B̂_i = d(B_i + 1) + μ bits (Eq. 27)::

    maximize_{B, W}  Σ_i B_i^(1−α)/(1−α)                                     (30a; α = 0.5)
    subject to       Σ_i W_i ≤ W_total,  W_i ≥ 0                              (30b)
                     d(B_i + 1) + μ ≤ τ·W_i·log₂(1 + a_i/W_i),  a_i = P|h_i|²/σ²   (30c, d)
                     B_i ≥ 0   (relaxation of B_i ∈ Z⁺, 30e)

The right side of (30c) is the perspective of log(1 + ·), concave in W_i, written for DCP as
W·log(1 + a/W) = −rel_entr(W, W + a). The problem is solved in normalised units (w = W/W_total,
bits in units of d), with CLARABEL (twice, two scalings of 30c) and SCS as fallbacks; a failure of all raises
:class:`AllocationError`. Then (Sec. V-B) B_i ← ⌊B_i⌋ — taken from the rate that the returned
bandwidth really gives, so (30c) holds exactly — and devices with ⌊B_i⌋ < B̲ are removed; the
paper does not re-solve after removal (their bandwidth is wasted), ``resolve_after_drop`` does.

Devices for which even B = 0 cannot meet τ (a deep fade: τ·a_i/ln 2 ≤ d + μ even with W → ∞),
or which do not fit together in W_total at B = 0 (the worst channels are removed first), make
(30) infeasible; they are removed before solving and reported as ``infeasible``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import cvxpy as cp
import numpy as np
from scipy.optimize import brentq

# (solver, scaling of (30c)) tried in turn: "bits" is (B + c₀) ≤ κ·w·log₂(1 + s/w); "nats" is the
# same constraint divided by κ/ln 2, on which CLARABEL converged in the rare cases it stalled on "bits"
# (a little less accurate: ~2e-3 bits instead of ~7e-4 against the scipy oracle)
ATTEMPTS = (("CLARABEL", "bits"), ("CLARABEL", "nats"), ("SCS", "bits"))
# tighter than the defaults: the optimum is flat in B, so 1e-8 gaps still move B by ~1e-3 bits
SOLVER_OPTIONS = {
    "CLARABEL": {"tol_gap_abs": 1e-9, "tol_gap_rel": 1e-9, "tol_feas": 1e-9},
    "SCS": {"eps_abs": 1e-9, "eps_rel": 1e-9, "max_iters": 200_000},
}
_SOLVED = (cp.OPTIMAL, cp.OPTIMAL_INACCURATE)


class AllocationError(RuntimeError):
    """The convex allocation (30) could not be solved by any solver."""


@dataclass(frozen=True)
class BitProblem:
    """Eq. (30) in normalised units: share w_i = W_i/W_total, bits B_i(w) = κ·w·log₂(1 + s_i/w) − c₀
    with s_i = a_i/W_total, κ = τ·W_total/d and c₀ = 1 + μ/d."""

    snr: np.ndarray
    kappa: float
    offset: float
    alpha: float
    b_max: float | None = None

    @classmethod
    def of(
        cls,
        snr_bw_hz: np.ndarray,
        tau_s: float,
        total_hz: float,
        dim: int,
        overhead_bits: float,
        fairness_alpha: float,
        b_max: float | None = None,
    ) -> BitProblem:
        snr = np.asarray(snr_bw_hz, dtype=np.float64) / total_hz
        return cls(snr, tau_s * total_hz / dim, 1.0 + overhead_bits / dim, fairness_alpha, b_max)

    def select(self, rows: np.ndarray) -> BitProblem:
        return BitProblem(self.snr[rows], self.kappa, self.offset, self.alpha, self.b_max)

    def bits_at(self, share: np.ndarray) -> np.ndarray:
        """The largest relaxed B_i that share w_i can carry within τ (−inf at w = 0)."""
        w = np.asarray(share, dtype=np.float64)
        out = np.full(w.shape, -np.inf)
        on = w > 0
        out[on] = self.kappa * w[on] * np.log1p(self.snr[on] / w[on]) / math.log(2) - self.offset
        return out

    def min_share(self, bits: float = 0.0) -> np.ndarray:
        """Smallest share w_i that carries ``bits`` within τ (inf when even w → ∞ cannot)."""
        out = np.full(len(self.snr), np.inf)
        need = (bits + self.offset) / self.kappa  # required w·log₂(1 + s/w), increasing in w
        for i, s in enumerate(self.snr):
            if need >= s / math.log(2) * (1 - 1e-12):
                continue
            f = lambda w: w * math.log1p(s / w) / math.log(2) - need  # noqa: E731, B023  (solved within this iteration)
            hi = 1.0
            while f(hi) < 0:
                hi *= 2
            out[i] = brentq(f, 1e-300, hi, xtol=1e-300, rtol=1e-14)
        return out


@dataclass(frozen=True)
class Relaxed:
    """The relaxed solution of (30) on the active devices, with the solver that produced it."""

    bits: np.ndarray
    share: np.ndarray
    status: str
    solver: str
    seconds: float


@dataclass(frozen=True)
class Allocation:
    """One round's allocation over the m sampled devices (rows in the order given).

    ``bits`` [m] int: ⌊B_i⌋ for kept devices, 0 for the others; ``relaxed`` [m]: the solver's B_i
    (nan for infeasible devices); ``bandwidth`` [m] Hz (removed devices keep theirs, unused,
    unless ``resolve_after_drop``); ``kept``, ``infeasible`` [m] bool; ``dropped`` = below B̲."""

    bits: np.ndarray
    relaxed: np.ndarray
    bandwidth: np.ndarray
    kept: np.ndarray
    infeasible: np.ndarray
    status: str
    solver: str
    solve_s: float

    @property
    def dropped(self) -> np.ndarray:
        return ~self.kept & ~self.infeasible


def utility(bits: cp.Variable, alpha: float) -> cp.Expression:
    """Σ_i B_i^(1−α)/(1−α) (30a); Σ log B_i at α = 1."""
    if alpha == 1:
        return cp.sum(cp.log(bits))
    if alpha == 0:
        return cp.sum(bits)
    return cp.sum(cp.power(bits, 1 - alpha)) / (1 - alpha)


def relaxed_program(problem: BitProblem, scaling: str) -> tuple[cp.Problem, cp.Variable, cp.Variable]:
    """The relaxation of (30) as a DCP program: (problem, B, w)."""
    m = len(problem.snr)
    share, bits = cp.Variable(m, nonneg=True), cp.Variable(m, nonneg=True)
    nats = -cp.rel_entr(share, share + problem.snr)  # w·ln(1 + s/w), concave (perspective of ln(1 + ·))
    if scaling == "bits":
        delay = bits + problem.offset <= (problem.kappa / math.log(2)) * nats
    else:
        delay = (bits + problem.offset) * (math.log(2) / problem.kappa) <= nats
    constraints = [cp.sum(share) <= 1, delay]
    if problem.b_max is not None:
        constraints.append(bits <= problem.b_max)
    return cp.Problem(cp.Maximize(utility(bits, problem.alpha)), constraints), bits, share


def solve_relaxed(problem: BitProblem) -> Relaxed:
    """The relaxation of (30) by cvxpy (:data:`ATTEMPTS` in turn); :class:`AllocationError` if none solves it."""
    failures = []
    for solver, scaling in ATTEMPTS:
        prob, bits, share = relaxed_program(problem, scaling)
        start = time.perf_counter()
        try:
            prob.solve(solver=solver, **SOLVER_OPTIONS[solver])
        except cp.SolverError as exc:
            failures.append(f"{solver}/{scaling}: {exc}")
            continue
        if prob.status in _SOLVED and bits.value is not None and share.value is not None:
            name = solver if scaling == "bits" else f"{solver}/{scaling}"
            return Relaxed(
                np.asarray(bits.value, float),
                np.asarray(share.value, float),
                prob.status,
                name,
                time.perf_counter() - start,
            )
        failures.append(f"{solver}/{scaling}: status {prob.status}")
    raise AllocationError(
        f"the bandwidth/bit allocation (FedQVR-E Eq. 30) over {len(problem.snr)} devices was not solved "
        f"(κ={problem.kappa:.4g}, c0={problem.offset:.4g}, s={problem.snr.tolist()}): " + "; ".join(failures)
    )


def prefilter(problem: BitProblem) -> np.ndarray:
    """Devices that make (30) infeasible at B = 0: those that cannot meet τ alone with any bandwidth,
    then, while the minimum shares do not fit in W_total, those needing the largest share."""
    need = problem.min_share(0.0)
    infeasible = ~np.isfinite(need)
    order = np.argsort(np.where(infeasible, np.inf, need), kind="stable")
    used = 0.0
    for i in order:
        if infeasible[i]:
            continue
        if used + need[i] >= 1 - 1e-6:  # keep the feasible set strictly inside Σ w ≤ 1
            infeasible[i] = True
        else:
            used += need[i]
    return infeasible


def allocate_bits(
    snr_bw_hz: np.ndarray,
    *,
    tau_s: float,
    total_hz: float,
    dim: int,
    overhead_bits: float,
    fairness_alpha: float = 0.5,
    b_min: int = 2,
    b_max: int | None = None,
    resolve_after_drop: bool = False,
) -> Allocation:
    """Solve (30) for the sampled devices with SNR-bandwidths ``a_i`` (Hz), floor, and remove
    devices below ``b_min`` (FedQVR-E Alg. 2, lines 4–6)."""
    problem = BitProblem.of(snr_bw_hz, tau_s, total_hz, dim, overhead_bits, fairness_alpha, b_max)
    m = len(problem.snr)
    infeasible = prefilter(problem)
    kept = ~infeasible
    ints = np.zeros(m, dtype=np.int64)
    relaxed = np.full(m, np.nan)
    share = np.zeros(m)
    status, solver, seconds = "no feasible device", "", 0.0
    while kept.any():
        sol = solve_relaxed(problem.select(kept))
        status, solver, seconds = sol.status, sol.solver, seconds + sol.seconds
        w = np.clip(sol.share, 0.0, None)
        w = w / max(1.0, w.sum())
        share = np.zeros(m)
        share[kept] = w
        relaxed[kept] = sol.bits
        carry = problem.select(kept).bits_at(w)  # what the returned bandwidth really carries
        if b_max is not None:
            carry = np.minimum(carry, b_max)
        ints = np.zeros(m, dtype=np.int64)
        ints[kept] = np.floor(np.maximum(carry, 0.0)).astype(np.int64)
        low = kept & (ints < b_min)
        kept = kept & ~low
        if not (low.any() and resolve_after_drop):
            break
    return Allocation(np.where(kept, ints, 0), relaxed, share * total_hz, kept, infeasible, status, solver, seconds)
