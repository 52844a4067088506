"""GradMA's QP projection (Eqs. 2–4): KKT conditions checked from the outside, and the primal QP
solved independently: cvxpy, NNLS on the dual (Eq. 4) with the columns themselves, and an exact
rational-arithmetic active-set enumeration for the degenerate sets."""

import itertools
from fractions import Fraction

import cvxpy as cp
import numpy as np
import pytest
import scipy.optimize
import torch
from scipy.optimize import nnls

from fedbench.algorithms import projection
from fedbench.algorithms.projection import _solve_enumerate, _solve_nnls, project


def project1(p: np.ndarray, M: np.ndarray, blocks=None) -> tuple[np.ndarray, int]:
    """One vector p [d] against columns M [C, d]."""
    out, failed = project(torch.tensor(p)[None], torch.tensor(M)[None], blocks or (len(p),))
    return out[0].numpy(), int(failed[0])


def assert_kkt(p: np.ndarray, M: np.ndarray, pt: np.ndarray, tol: float = 1e-9) -> None:
    """KKT of min ½‖p − p~‖² s.t. ⟨p~, M_j⟩ ≥ 0, in normalized units: feasibility, and
    p~ = p + Σ_j z_j M_j with z ≥ 0 supported on the active constraints (stationarity, dual
    feasibility and complementarity at once; the z come from scipy's NNLS on the active set)."""
    scale = np.linalg.norm(p) or 1.0
    norms = np.linalg.norm(M, axis=1)
    Mu = M[norms > 0] / norms[norms > 0, None]
    slack = Mu @ pt / scale
    assert slack.min(initial=0) >= -tol, f"infeasible: {slack.min()}"
    active = slack <= 1e-6
    if active.any():
        z, res = nnls(Mu[active].T, (pt - p) / scale)
        assert np.all(z >= 0) and res <= tol, f"stationarity residual {res}"
        assert np.abs(z * slack[active]).max() <= tol
    else:
        np.testing.assert_array_equal(pt, p)


def cvxpy_projection(p: np.ndarray, M: np.ndarray) -> np.ndarray:
    """The primal QP (Eq. 2) with an interior-point solver."""
    v = cp.Variable(len(p))
    problem = cp.Problem(cp.Minimize(0.5 * cp.sum_squares(v - p)), [M @ v >= 0])
    try:
        problem.solve(solver="CLARABEL", tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12)
    except cp.error.SolverError:  # degenerate sets (C > d): the default tolerances
        problem.solve(solver="CLARABEL")
    return v.value


CASES = [(1, 10), (2, 10), (3, 10), (3, 2), (5, 30), (12, 8), (40, 200)]


@pytest.mark.parametrize("C,d", CASES)
def test_random_instances_satisfy_kkt_and_match_cvxpy(C, d):
    rng = np.random.default_rng(C * 100 + d)
    for trial in range(3):
        p, M = rng.normal(size=d), rng.normal(size=(C, d))
        M[0] -= 2 * (M[0] @ p) / (p @ p) * p * (M[0] @ p > 0)  # make sure one constraint is violated
        pt, failed = project1(p, M)
        assert failed == 0
        assert (M @ p).min() < 0 and not np.allclose(pt, p)
        assert_kkt(p, M, pt)
        if trial == 0:
            np.testing.assert_allclose(pt, cvxpy_projection(p, M), atol=1e-7 * np.linalg.norm(p))


def test_degenerate_duplicate_zero_and_more_constraints_than_dimensions():
    rng = np.random.default_rng(1)
    p = rng.normal(size=4)
    base = rng.normal(size=(6, 4))
    M = np.concatenate(
        [base, base[:2], 3.0 * base[2:3], np.zeros((2, 4))]
    )  # duplicates, a scaled copy, zeros; C = 11 > d
    pt, failed = project1(p, M)
    assert failed == 0
    assert_kkt(p, M, pt)
    np.testing.assert_allclose(pt, cvxpy_projection(p, M), atol=1e-7)
    # the same with C = 3 (active-set enumeration): duplicate and zero columns
    M3 = np.stack([base[0], base[0], np.zeros(4)])
    p3 = -base[0] + 0.1 * rng.normal(size=4)
    pt3, failed = project1(p3, M3)
    assert failed == 0
    assert_kkt(p3, M3, pt3)
    np.testing.assert_allclose(pt3, cvxpy_projection(p3, M3[:1]), atol=1e-9)


def test_already_feasible_vector_comes_back_bit_identical():
    rng = np.random.default_rng(2)
    M = rng.normal(size=(3, 7))
    p = np.linalg.lstsq(M, np.ones(3), rcond=None)[0]  # ⟨p, M_j⟩ = 1 > 0
    for C in (1, 2, 3):
        pt, failed = project1(p, M[:C])
        assert failed == 0 and np.array_equal(pt, p)
    big = np.concatenate([M, M * 2, M * 5])  # C = 9: the NNLS path
    pt, failed = project1(p, big)
    assert failed == 0 and np.array_equal(pt, p)
    p32 = torch.tensor(p, dtype=torch.float32)[None]
    out, _ = project(p32, torch.tensor(M, dtype=torch.float32)[None], (7,))
    assert torch.equal(out, p32)


@pytest.mark.parametrize("C", [3, 8])
def test_scale_invariance_tiny_and_huge_constraint_norms(C):
    """A positive rescaling of a column (β2^k-decayed memories, 1e-30·v) leaves p~ unchanged."""
    rng = np.random.default_rng(3)
    p, M = rng.normal(size=12), rng.normal(size=(C, 12))
    reference, _ = project1(p, M)
    scaled = M * np.array([1e-30, 1e20] + [1.0] * (C - 2))[:, None]
    pt, failed = project1(p, scaled)
    assert failed == 0
    np.testing.assert_allclose(pt, reference, rtol=1e-9, atol=1e-12)
    assert_kkt(p, scaled, pt)


def test_float32_inputs_are_solved_in_float64_and_returned_in_float32():
    rng = np.random.default_rng(4)
    p, M = rng.normal(size=(2, 50)), rng.normal(size=(2, 3, 50))
    out, failed = project(torch.tensor(p, dtype=torch.float32), torch.tensor(M, dtype=torch.float32), (50,))
    assert out.dtype == torch.float32 and failed.tolist() == [0, 0]
    for s in range(2):
        np.testing.assert_allclose(out[s].numpy(), cvxpy_projection(p[s], M[s]), atol=1e-5)


@pytest.mark.parametrize("C", [3, 7])
def test_per_tensor_equals_separate_projections_and_rows_are_independent(C):
    rng = np.random.default_rng(5)
    blocks = (4, 9)
    p, M = rng.normal(size=(2, 13)), rng.normal(size=(2, C, 13))
    out, failed = project(torch.tensor(p), torch.tensor(M), blocks)
    assert failed.tolist() == [0, 0]
    for s in range(2):
        first, _ = project1(p[s, :4], M[s, :, :4])
        second, _ = project1(p[s, 4:], M[s, :, 4:])
        np.testing.assert_allclose(out[s].numpy(), np.concatenate([first, second]), rtol=1e-12, atol=1e-13)
        whole, _ = project1(p[s], M[s])
        assert not np.allclose(whole, out[s].numpy())  # the two granularities differ


def test_chunked_gram_matches_one_piece(monkeypatch):
    rng = np.random.default_rng(6)
    p, M = rng.normal(size=(3, 40)), rng.normal(size=(3, 5, 40))
    expected, _ = project(torch.tensor(p), torch.tensor(M), (15, 25))
    monkeypatch.setattr(projection, "CHUNK", 7 * 3 * 6)  # pieces of 7 columns (S·(C+1) = 18 rows)
    chunked, _ = project(torch.tensor(p), torch.tensor(M), (15, 25))
    torch.testing.assert_close(chunked, expected, rtol=1e-12, atol=1e-13)


def r_form(Ms: np.ndarray, ps: np.ndarray) -> tuple[torch.Tensor, ...]:
    """The solvers' input, computed here with NumPy: unit columns U and r of R from QR([Mᵀ p]), all kept."""
    Rs = [np.linalg.qr(np.column_stack([M.T, p]), mode="r") for M, p in zip(Ms, ps)]
    k = Ms[0].shape[0] + 1
    Rs = np.stack([np.vstack([R, np.zeros((k - len(R), k))]) for R in Rs])  # block size < C + 1: zero rows
    Rs = Rs / np.linalg.norm(Rs, axis=1, keepdims=True)
    U, r = torch.tensor(Rs[..., :-1]), torch.tensor(Rs[..., -1])
    return U, r, torch.ones(U.shape[0], U.shape[2], dtype=torch.bool)


# -- independent references for the degenerate and near-degenerate sets ------------------------------
def exact_projection(p: np.ndarray, M: np.ndarray) -> np.ndarray:
    """Eq. 2 in exact rational arithmetic on the float64 inputs as given: the first active set A
    (smallest first) whose linearly independent columns give z_A ≥ 0 and a feasible p~ (notes §2.2;
    an optimal set with independent columns exists by Carathéodory), rounded once at the end."""
    P = [Fraction(x) for x in p.tolist()]
    cols = [[Fraction(x) for x in row] for row in M.tolist() if any(row)]
    dot = lambda a, b: sum(x * y for x, y in zip(a, b))  # noqa: E731
    for size in range(min(len(cols), len(P)) + 1):
        for A in itertools.combinations(range(len(cols)), size):
            z = _solve_exact([[dot(cols[i], cols[j]) for j in A] for i in A], [-dot(cols[i], P) for i in A])
            if z is None or any(x < 0 for x in z):
                continue
            v = [x + sum(zi * cols[i][n] for zi, i in zip(z, A)) for n, x in enumerate(P)]
            if all(dot(v, c) >= 0 for c in cols):
                return np.array([float(x) for x in v])
    raise AssertionError("no active set is optimal")


def _solve_exact(K: list[list[Fraction]], b: list[Fraction]) -> list[Fraction] | None:
    """K z = b by Gauss–Jordan elimination on Fractions; None when K is singular."""
    n = len(K)
    A = [row + [x] for row, x in zip(K, b)]
    for c in range(n):
        pivot = next((r for r in range(c, n) if A[r][c] != 0), None)
        if pivot is None:
            return None
        A[c], A[pivot] = A[pivot], A[c]
        for r in range(n):
            if r != c and A[r][c] != 0:
                f = A[r][c] / A[c][c]
                A[r] = [x - f * y for x, y in zip(A[r], A[c])]
    return [A[i][n] / A[i][i] for i in range(n)]


def kkt_residual(p: np.ndarray, M: np.ndarray, pt: np.ndarray) -> float:
    """How far p~ is from optimal for Eq. 2, relative to ‖p‖, without thresholds or multipliers:
    p~ = Π_K(p) for the cone K = {v : ⟨v, M_j⟩ ≥ 0} iff p~ ∈ K, p~ − p ∈ cone(M) (the dual cone
    side: p~ = p + Mz, z ≥ 0) and ⟨p~, p~ − p⟩ = 0 (complementarity, Σ_j z_j⟨p~, M_j⟩ = 0). The
    largest violation of the three: max_j −⟨p~, M̂_j⟩, min_{z≥0} ‖p~ − p − M̂ᵀz‖, |⟨p~, p~ − p⟩|/‖p‖."""
    scale = np.linalg.norm(p) or 1.0
    norms = np.linalg.norm(M, axis=1)
    Mu = M[norms > 0] / norms[norms > 0, None]
    infeasible = -(Mu @ pt).min(initial=0.0) / scale
    stationary = (
        nnls(Mu.T, (pt - p) / scale, maxiter=100 * len(Mu) + 100)[1] if len(Mu) else np.linalg.norm(pt - p) / scale
    )
    return max(infeasible, stationary, abs(pt @ (pt - p)) / scale**2)


def worker_constraints(seed: int, d: int, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """GradMA's QP_l late in a local epoch on one small tensor: g and the constraints G = [∇f(x_{τ−1}),
    ∇f(x_t), x_τ − x_t] at cosines 1 − ε, 0.9998 and −(1 − 2ε) with g, at different norms."""
    rng = np.random.default_rng(seed)
    g = rng.normal(size=d)
    e = g / np.linalg.norm(g)

    def at(cos: float) -> np.ndarray:
        u = rng.normal(size=d)
        u -= (u @ e) * e
        return cos * e + np.sqrt(1 - cos**2) * u / np.linalg.norm(u)

    return g, np.stack([at(1 - eps), at(0.9998), -at(1 - 2 * eps)]) * rng.uniform(0.5, 2, size=(3, 1))


# -- (a) GradMA-S with β2 = 0: a memory of m = 100 slots, 10 of them non-zero --------------------
@pytest.mark.parametrize("blocks", [(50,), (8, 30, 12)])
def test_memory_with_90_zero_columns_never_falls_back(blocks):
    """The β ablation (Fig. 5, β2 = 0, m = 100, S = 10): the 90 buffered workers that were not
    sampled have D_j = 0. Zero columns are dropped before solving (before the fix the square-root
    factor's ~1e-17 residues on them drew multipliers ~1e15 from NNLS: 98–100 of 100 fell back,
    p~ off by up to 1.8·‖p‖). Checked against NNLS on the non-zero columns themselves and cvxpy."""
    rng = np.random.default_rng(11)
    d = sum(blocks)
    cuts = np.cumsum((0, *blocks))
    before = projection.fallback_total()
    for trial in range(100):
        M = np.zeros((100, d))
        M[rng.choice(100, 10, replace=False)] = rng.normal(size=(10, d))
        p = rng.normal(size=d)
        pt, failed = project1(p, M, blocks)
        assert failed == 0
        for lo, hi in zip(cuts[:-1], cuts[1:]):
            live = M[:, lo:hi][np.abs(M[:, lo:hi]).sum(1) > 0]
            unit = live / np.linalg.norm(live, axis=1, keepdims=True)
            z, _ = nnls(unit.T, -p[lo:hi])  # Eq. 4 on the columns, no Gram matrix
            np.testing.assert_allclose(pt[lo:hi], p[lo:hi] + unit.T @ z, rtol=0, atol=1e-12 * np.linalg.norm(p[lo:hi]))
            assert kkt_residual(p[lo:hi], M[:, lo:hi], pt[lo:hi]) <= 1e-10
            if trial < 3 and len(blocks) == 1:  # (Clarabel fails on the 8-coordinate block with 10 constraints)
                np.testing.assert_allclose(pt[lo:hi], cvxpy_projection(p[lo:hi], live), atol=1e-7 * np.linalg.norm(p))
    assert projection.fallback_total() == before


# -- (b) GradMA's per-tensor worker QP on near-degenerate constraints ------------------------------
def test_near_degenerate_worker_constraints_per_tensor():
    """Cosines [1, 0.9998, −1] with g on a 3-coordinate tensor (normalized Gram condition 4e11):
    least squares on the R factor of [G g] gives p~ to 1e-15; the Gram pseudo-inverse before the
    fix accepted a neighbouring active set 6.6e-6·‖g‖ away. A regular tensor rides along."""
    g3, G3 = worker_constraints(81, 3, 1e-10)
    unit = G3 / np.linalg.norm(G3, axis=1, keepdims=True)
    assert np.allclose(unit @ g3 / np.linalg.norm(g3), [1, 0.9998, -1], atol=1e-9)
    assert 1e11 < np.linalg.cond(unit @ unit.T) < 1e13
    rng = np.random.default_rng(12)
    g5, G5 = rng.normal(size=5), rng.normal(size=(3, 5))
    g, G = np.concatenate([g3, g5]), np.concatenate([G3, G5], axis=1)
    out, failed = project(torch.tensor(g)[None], torch.tensor(G)[None], (3, 5))
    assert failed.tolist() == [0]
    pt = out[0].numpy()
    for sl, gb, Gb in ((slice(0, 3), g3, G3), (slice(3, 8), g5, G5)):
        assert np.linalg.norm(pt[sl] - exact_projection(gb, Gb)) <= 1e-10 * np.linalg.norm(gb)
        assert kkt_residual(gb, Gb, pt[sl]) <= 1e-10
    assert not np.allclose(pt[:3], g3)  # the constraints are active


@pytest.mark.parametrize("d,eps", [(3, 3e-11), (3, 1e-10), (3, 3e-10), (6, 1e-10)])
def test_near_degenerate_worker_constraints_sweep(d, eps):
    """60 such instances per setting (normalized Gram conditions 1e10–1e13) within 1e-10 of the
    exact solution (before the fix: up to 2e-5, 1 in 12 worse than 1e-6)."""
    for seed in range(60):
        g, G = worker_constraints(seed, d, eps)
        pt, failed = project1(g, G)
        assert failed == 0
        assert np.linalg.norm(pt - exact_projection(g, G)) <= 1e-10 * np.linalg.norm(g), seed
        assert kkt_residual(g, G, pt) <= 1e-10, seed


# -- (c) zero, duplicate, antiparallel and rank-deficient constraint sets --------------------------
def _integer_sets() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Exactly representable sets (small integers: sums and multiples are exact), each with a p
    that violates them."""
    rng = np.random.default_rng(13)
    c1, c2, c3 = rng.integers(-5, 6, size=(3, 5)).astype(float)
    p = -c1 - 0.5 * c2 + 0.3 * rng.normal(size=5)
    zero = np.zeros(5)
    return {
        "zero": (p, np.stack([zero, c1, zero, c2])),
        "duplicate": (p, np.stack([c1, c2, c1, 3 * c1])),
        "antiparallel": (p, np.stack([c1, -c1, c2])),
        "antiparallel_pairs": (p, np.stack([c1, -c1, c2, -c2])),
        "dependent": (p, np.stack([c1, c2, c1 + c2, c1 - c2])),
        "more_than_dimensions": (p[:2], np.stack([c1[:2], c2[:2], c3[:2], -c1[:2]])),
        "all_zero": (p, np.zeros((3, 5))),
    }


@pytest.mark.parametrize("name", list(_integer_sets()))
@pytest.mark.parametrize("path", ["enumerate", "here", "nnls"])
def test_degenerate_sets_match_the_exact_solution(monkeypatch, name, path):
    """Every solver path (C ≤ 4: active-set enumeration, on the host or on the device; padded with zero and
    repeated columns to C = 9: NNLS) against the exact solution, no fallback."""
    p, M = _integer_sets()[name]
    if path == "nnls":
        M = np.concatenate([M, np.zeros((2, M.shape[1])), M[::-1], 2 * M[:1]])
    monkeypatch.setattr(projection, "HERE", path == "here")
    assert (len(M) <= projection.ENUMERATE_MAX_C) == (path != "nnls")
    pt, failed = project1(p, M)
    assert failed == 0
    np.testing.assert_allclose(pt, exact_projection(p, M), rtol=0, atol=1e-12 * np.linalg.norm(p))
    assert kkt_residual(p, M, pt) <= 1e-12


def _near_pairs(C: int, delta: float, sign: int):
    """Sets (20, or 8 for C > 4: the exact reference is slow) whose first two columns are δ from
    parallel (sign 1) or antiparallel (sign −1)."""
    rng = np.random.default_rng(14)
    for _ in range(20 if C <= 4 else 8):
        c, u = rng.normal(size=(2, 6))
        p = -c + 0.5 * rng.normal(size=6)
        yield p, np.concatenate([np.stack([c, sign * c + delta * u]), rng.normal(size=(C - 2, 6))])


@pytest.mark.parametrize("C,here", [(3, False), (3, True), (8, False)])
@pytest.mark.parametrize("delta,sign", [(1e-5, -1), (1e-7, 1), (1e-10, 1)])
def test_near_duplicate_and_near_antiparallel_columns_are_exact(monkeypatch, C, here, delta, sign):
    """Columns 1e-7 or 1e-10 from parallel and 1e-5 from antiparallel (normalized Gram condition
    4e10) are distinct constraints, solved to 1e-10 of the exact solution (C = 3 on the host and on the device)."""
    monkeypatch.setattr(projection, "HERE", here)
    for p, M in _near_pairs(C, delta, sign):
        pt, failed = project1(p, M)
        assert failed == 0
        assert np.linalg.norm(pt - exact_projection(p, M)) <= 1e-10 * np.linalg.norm(p)
        assert kkt_residual(p, M, pt) <= 1e-10


@pytest.mark.parametrize("C,here", [(3, False), (3, True), (8, False)])
@pytest.mark.parametrize("delta,sign", [(1e-13, 1), (1e-7, -1), (1e-9, -1), (1e-11, -1)])
def test_columns_closer_than_float64_resolves(monkeypatch, C, here, delta, sign):
    """Columns 1e-13 from parallel are one constraint. Columns δ ≤ 1e-7 from antiparallel need
    multipliers ~1/δ at the optimum, which float64 turns back into p~ only to ~1e-15/δ (or, solved
    as an exact pair, p~ is off by ~δ): the KKT residual stays below 3e-8 (the worst, near δ = 1e-8)
    and nothing falls back; the exact solution itself is not resolvable (it moves by O(1) with δ)."""
    monkeypatch.setattr(projection, "HERE", here)
    for p, M in _near_pairs(C, delta, sign):
        pt, failed = project1(p, M)
        assert failed == 0
        assert kkt_residual(p, M, pt) <= (1e-12 if sign > 0 else 3e-8)


def _enumerate_here(U, r, keep, tol):
    return _solve_enumerate(U, r, keep, tol, here=True)


@pytest.mark.parametrize("solver,C", [(_solve_enumerate, 3), (_enumerate_here, 3), (_solve_nnls, 3), (_solve_nnls, 10)])
def test_dual_solvers_satisfy_kkt_on_r_form(solver, C):
    """z ≥ 0, Uᵀw ≥ 0 (= Mᵀp~ normalized, w = Uz + r), z_j (Uᵀw)_j = 0, on random and rank-deficient sets."""
    rng = np.random.default_rng(7)
    Ms = [rng.normal(size=(C, 6)) for _ in range(5)] + [rng.normal(size=(C, 2))]  # the last: rank 2 < C
    ps = [rng.normal(size=M.shape[1]) for M in Ms]
    for U, r, keep in (r_form(Ms[:5], ps[:5]), r_form(Ms[5:], ps[5:])):
        z, ok = solver(U, r, keep, 1e-12)
        assert ok.all()
        s = (U.transpose(1, 2) @ (U @ z.unsqueeze(-1) + r.unsqueeze(-1))).squeeze(-1)
        assert (z >= 0).all() and (s >= -1e-12).all() and (z * s).abs().max() <= 1e-12


def test_enumeration_and_nnls_agree_on_the_primal():
    rng = np.random.default_rng(8)
    Ms = rng.normal(size=(20, 3, 5))
    ps = rng.normal(size=(20, 5))
    U, r, keep = r_form(Ms, ps)
    z1, ok1 = _solve_enumerate(U, r, keep, 1e-12)
    z2, ok2 = _solve_nnls(U, r, keep, 1e-12)
    assert ok1.all() and ok2.all()
    torch.testing.assert_close(U @ z1.unsqueeze(-1), U @ z2.unsqueeze(-1), rtol=0, atol=1e-13)


def test_a_rank_deficient_block_the_first_attempt_misses_is_solved_with_the_ridge(monkeypatch):
    """(d) GradMA-S's server memory holds up to m = 100 decayed, nearly dependent vectors. On a block of fewer
    coordinates the plain dual has many optima, and whether Lawson–Hanson's answer passed ACCEPT_TOL depended on
    the BLAS kernels' rounding (the committed tables' fallback counts moved between CPUs). A block the first
    attempt leaves above ACCEPT_TOL is solved again with the ridge δ = RIDGE: feasible and optimal (KKT), not
    counted; both agree with cvxpy. The first attempt is made to miss here, so the retry runs on every machine."""
    rng = np.random.default_rng(3)
    d, C = 10, 60
    M = rng.normal(size=(C, d)) * 0.9 ** np.arange(C)[:, None]  # norms 1 … 2e-3, 60 in 10 dimensions
    p = rng.normal(size=d)
    x = cp.Variable(d)  # the projection itself is unique (its multipliers are not): an independent solve
    cp.Problem(cp.Minimize(cp.sum_squares(x - p)), [M @ x >= 0]).solve()
    unit = M / np.linalg.norm(M, axis=1, keepdims=True)
    start = projection.fallback_total()
    out, failed = project1(p, M)
    assert failed == 0 and projection.fallback_total() == start
    assert (unit @ out).min() >= -1e-6 * np.linalg.norm(p)
    np.testing.assert_allclose(out, x.value, rtol=0, atol=1e-5 * np.linalg.norm(p))  # cvxpy: ~1e-6
    plain, ridges = projection._solve_nnls, []

    def first_attempt_misses(U, r, keep, tol, ridge=0.0):
        ridges.append(ridge)
        z, residual = plain(U, r, keep, tol, ridge)
        return (z, torch.full_like(residual, torch.inf)) if ridge == 0 else (z, residual)

    monkeypatch.setattr(projection, "_solve_nnls", first_attempt_misses)
    again, failed = project1(p, M)
    assert ridges == [0.0, projection.RIDGE] and failed == 0 and projection.fallback_total() == start
    assert (unit @ again).min() >= -1e-6 * np.linalg.norm(p)
    np.testing.assert_allclose(again, out, rtol=0, atol=1e-6 * np.linalg.norm(p))


@pytest.mark.allow_qp_fallback
def test_failures_leave_the_block_unprojected_and_are_counted(monkeypatch):
    """(d) A block that cannot be solved is left as it was, counted per row and in the module's
    tally (:func:`~fedbench.algorithms.projection.fallback_total`, which tests/conftest.py watches: this test is
    marked as exercising it)."""
    start = projection.fallback_total()
    rng = np.random.default_rng(9)
    p, M = rng.normal(size=(1, 10)), rng.normal(size=(1, 3, 10))
    p[0, 0] = np.nan  # block 1 cannot be solved; block 2 still is
    out, failed = project(torch.tensor(p), torch.tensor(M), (5, 5))
    assert failed.tolist() == [1]
    np.testing.assert_array_equal(out[0, :5].numpy(), p[0, :5])
    expected, _ = project1(p[0, 5:], M[0, :, 5:])
    np.testing.assert_allclose(out[0, 5:].numpy(), expected, rtol=1e-12)

    def broken(*args, **kwargs):
        raise RuntimeError("Maximum number of iterations reached")

    monkeypatch.setattr(scipy.optimize, "nnls", broken)  # projection imports it when it first solves
    q, N = rng.normal(size=(1, 6)), rng.normal(size=(1, 8, 6))
    N[0, 0] = -q[0]  # violated, so the solver is needed
    out, failed = project(torch.tensor(q), torch.tensor(N), (6,))
    assert failed.tolist() == [1] and torch.equal(out, torch.tensor(q))
    assert projection.fallback_total() == start + 2


@pytest.mark.allow_qp_fallback
def test_an_unsolvable_instance_is_counted_not_hidden(monkeypatch):
    """(d) A KKT tolerance no rounding can meet: every block falls back, in both paths."""
    monkeypatch.setattr(projection, "ACCEPT_TOL", -1.0)
    rng = np.random.default_rng(15)
    start = projection.fallback_total()
    for C in (3, 8):
        p, M = rng.normal(size=(2, 20)), rng.normal(size=(2, C, 20))
        M[:, 0] = -p  # violated
        out, failed = project(torch.tensor(p), torch.tensor(M), (10, 10))
        assert failed.tolist() == [2, 2] and torch.equal(out, torch.tensor(p))
    assert projection.fallback_total() == start + 8


def test_bad_shapes_are_rejected_with_a_message():
    with pytest.raises(ValueError, match="summing to P=4"):
        project(torch.zeros(1, 4), torch.zeros(1, 2, 4), (3,))
    with pytest.raises(ValueError, match=r"p must have shape \[S, P\]"):
        project(torch.zeros(4), torch.zeros(1, 2, 4), (4,))


def test_float32_with_a_subnormal_constraint_recovers_in_float64():
    """A float32 column of norm ~1e-39 needs a multiplier beyond float32's range: still exact."""
    rng = np.random.default_rng(10)
    p, M = rng.normal(size=6), rng.normal(size=(3, 6))
    M[0] = -p / np.linalg.norm(p)  # violated
    expected, _ = project1(p, M)
    tiny = M.copy()
    tiny[0] *= 1e-39
    out, failed = project(
        torch.tensor(p, dtype=torch.float32)[None], torch.tensor(tiny, dtype=torch.float32)[None], (6,)
    )
    assert failed.tolist() == [0] and torch.isfinite(out).all()
    np.testing.assert_allclose(out[0].numpy(), expected, rtol=1e-4, atol=1e-5)


def test_float32_with_nearly_antiparallel_constraints_recovers_in_float64():
    """GradMA's float32 drift x_τ − x_t ≈ −η·g is antiparallel to ∇f(x_{τ−1}) up to float32
    rounding: multipliers ~1e5, whose terms float32 cannot sum to p~ (they are summed in float64)."""
    rng = np.random.default_rng(16)
    for _ in range(10):
        c, u, p = rng.normal(size=(3, 8))
        M = np.stack([c, -c + 1e-5 * u, rng.normal(size=8)]).astype(np.float32).astype(np.float64)
        p = (p - 2 * (p @ u) * u / (u @ u)).astype(np.float32).astype(np.float64)
        expected, _ = project1(p, M)
        out, failed = project(
            torch.tensor(p, dtype=torch.float32)[None], torch.tensor(M, dtype=torch.float32)[None], (8,)
        )
        assert failed.tolist() == [0]
        np.testing.assert_allclose(out[0].numpy(), expected, rtol=0, atol=1e-6 * np.linalg.norm(p))


# -- the device path (a GPU's, HERE): C ≤ 4 without a host read ------------------------------------------
def _instances(seed: int, count: int):
    """Random instances of C ≤ 4 with their degenerate kinds (duplicate, antiparallel, zero and violated
    constraints, a zero p), unequal blocks, several rows, float64 and float32."""
    rng = np.random.default_rng(seed)
    for trial in range(count):
        S, C = int(rng.integers(1, 6)), int(rng.integers(1, 5))
        blocks = tuple(int(b) for b in rng.integers(1, 9, size=rng.integers(1, 4)))
        p, M = rng.normal(size=(S, sum(blocks))), rng.normal(size=(S, C, sum(blocks)))
        kind = trial % 6
        if C >= 2 and kind == 1:
            M[:, 1] = M[:, 0]
        if C >= 2 and kind == 2:
            M[:, 1] = -M[:, 0]
        if kind == 3:
            M[:, 0] = 0
        if kind == 4:
            M[:, 0] = -p
        if kind == 5:
            p[0] = 0
        dtype = torch.float32 if trial % 2 else torch.float64
        yield torch.tensor(p, dtype=dtype), torch.tensor(M, dtype=dtype), blocks


def test_the_device_path_agrees_with_the_host_path(monkeypatch):
    """GradMA's worker QP_l kept on the device (``HERE``, a GPU's path) solves the host path's problems: the same
    p~ to float64's rounding (float32's for float32 inputs) and the same counts, over 200 random and degenerate
    instances."""
    for p, M, blocks in _instances(21, 200):
        monkeypatch.setattr(projection, "HERE", False)
        host, host_failed = project(p, M, blocks)
        monkeypatch.setattr(projection, "HERE", True)
        here, failed = project(p, M, blocks)
        assert torch.equal(failed, host_failed) and failed.sum() == 0
        tol = 1e-12 if p.dtype == torch.float64 else 1e-5
        torch.testing.assert_close(here, host, rtol=0, atol=tol * (1 + p.abs().max().item()))


def test_least_squares_matches_lstsq_and_drops_dependent_columns():
    """The device path's least squares (CGS2 in batched kernels) against LAPACK's; a zero or a repeated column gets
    z_j = 0 and the residual of the independent columns."""
    rng = np.random.default_rng(22)
    A, b = torch.tensor(rng.normal(size=(6, 7, 4))), torch.tensor(rng.normal(size=(6, 7)))
    z = projection._least_squares(A, b, projection.PINV_RTOL)
    torch.testing.assert_close(z, torch.linalg.lstsq(A, b.unsqueeze(-1)).solution.squeeze(-1), rtol=1e-12, atol=1e-12)
    deficient = A.clone()
    deficient[:, :, 1] = 0.0
    deficient[:, :, 3] = deficient[:, :, 0]
    z = projection._least_squares(deficient, b, projection.PINV_RTOL)
    assert (z[:, 1] == 0).all() and (z[:, 3] == 0).all()
    independent = torch.linalg.lstsq(A[:, :, [0, 2]], b.unsqueeze(-1)).solution.squeeze(-1)
    torch.testing.assert_close(z[:, [0, 2]], independent, rtol=1e-12, atol=1e-12)


def test_the_device_path_reads_nothing_to_the_host(monkeypatch):
    """No read of a tensor to the host (each would wait for a GPU): the host path reads the factors once."""
    from fedbench.engine.pending import HostReads

    p, M, blocks = next(_instances(23, 1))
    for here, reads_expected in ((True, 0), (False, 1)):
        monkeypatch.setattr(projection, "HERE", here)
        with HostReads() as reads:
            project(p, M, blocks)
        assert reads.count == reads_expected, dict(reads.where)


def test_the_device_paths_ridge_retry_agrees_with_the_host_paths(monkeypatch):
    """(d) A block the first attempt leaves above ACCEPT_TOL (made to miss here, so the retry runs on every
    machine; 4 constraints in 2 coordinates): the device path's ridge (the ridged problem's active sets
    enumerated) agrees with the host path's (scipy's NNLS of it) and with cvxpy, and nothing is counted."""
    rng = np.random.default_rng(24)
    p, M = rng.normal(size=2), rng.normal(size=(4, 2))
    M[0] = -p
    x = cp.Variable(2)
    cp.Problem(cp.Minimize(cp.sum_squares(x - p)), [M @ x >= 0]).solve()
    plain, calls = projection._solve_enumerate, []

    def first_attempt_misses(U, r, keep, tol, here=False):
        ridged = U.shape[-2] > U.shape[-1] + 1
        calls.append(ridged)
        z, residual = plain(U, r, keep, tol, here)
        return (z, residual) if ridged else (z, torch.full_like(residual, torch.inf))

    monkeypatch.setattr(projection, "_solve_enumerate", first_attempt_misses)
    start = projection.fallback_total()
    outs = []
    for here in (False, True):
        monkeypatch.setattr(projection, "HERE", here)
        out, failed = project1(p, M)
        assert failed == 0
        outs.append(out)
    assert calls == [False, False, True] and projection.fallback_total() == start
    np.testing.assert_allclose(outs[1], outs[0], rtol=0, atol=1e-12)
    np.testing.assert_allclose(outs[1], x.value, rtol=0, atol=1e-6)
    assert (M @ outs[1]).min() >= -1e-6


@pytest.mark.allow_qp_fallback
def test_the_device_path_counts_a_failed_block_without_reading_it(monkeypatch):
    """(d) A non-finite block is left unprojected on the device too: its row's count is a tensor, added to the
    tally that :func:`~fedbench.algorithms.projection.fallback_total` reads."""
    monkeypatch.setattr(projection, "HERE", True)
    rng = np.random.default_rng(25)
    p, M = rng.normal(size=(2, 10)), rng.normal(size=(2, 3, 10))
    p[0, 0] = np.nan
    start = projection.fallback_total()
    out, failed = project(torch.tensor(p), torch.tensor(M), (5, 5))
    assert failed.tolist() == [1, 0] and projection.fallback_total() == start + 1
    np.testing.assert_array_equal(out[0, :5].numpy(), p[0, :5])
    monkeypatch.setattr(projection, "HERE", False)
    expected, _ = project(torch.tensor(p[1:]), torch.tensor(M[1:]), (5, 5))
    torch.testing.assert_close(out[1:], expected, rtol=0, atol=1e-12)


@pytest.mark.gpu
def test_on_a_gpu_the_worker_projection_does_not_synchronise():
    """On CUDA a projection of C ≤ 4 queues its work without one synchronising call (torch's sync debug mode
    raises on the first) and agrees with the host path on the CPU."""
    for p, M, blocks in _instances(26, 12):
        projection.project(p.cuda(), M.cuda(), blocks)  # the first call per C copies its active sets over
    torch.cuda.synchronize()
    for p, M, blocks in _instances(26, 12):
        host, host_failed = project(p, M, blocks)
        on_gpu = p.cuda(), M.cuda()  # copied before: a copy from pageable memory waits
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            here, failed = project(*on_gpu, blocks)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        assert torch.equal(failed.cpu(), host_failed)
        tol = 1e-12 if p.dtype == torch.float64 else 1e-5
        torch.testing.assert_close(here.cpu(), host, rtol=0, atol=tol * (1 + p.abs().max().item()))
