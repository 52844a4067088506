"""GradMA's QP projection (Luo et al., CVPR 2023, Eqs. 2–4): the vector closest to p whose inner
product with every constraint vector M_j is non-negative,

    p~ = argmin ½‖p − p~‖²  s.t.  ⟨p~, M_j⟩ ≥ 0 ∀j          (Eq. 2)

solved through its dual (Eq. 4) ``min_{z≥0} ½ zᵀMᵀMz + pᵀMz`` = ``min_{z≥0} ½‖Mz + p‖²`` − ½‖p‖²
(a non-negative least-squares problem in C = #constraints unknowns) and recovered as
``p~ = p + Mz``. The problem is reduced exactly to C + 1 dimensions by a float64 Householder QR of
the d × (C+1) matrix [M₁ … M_C p] (R: its triangular factor): ‖Mz + p‖ = ‖R_M z + r_p‖ and
⟨p~, M_j⟩ = R_jᵀ(R_M z + r_p). Least squares on R has the condition number of M, where the Gram
matrix MᵀM has its square (near-parallel constraints, a normalized Gram condition of 1e12, are
still solved to ~1e-15). The primal is invariant to a positive rescaling of any M_j, so columns
are normalized (decayed memories of norm β2^k stay exact); zero columns (⟨p~, 0⟩ ≥ 0 always
holds) and duplicate, positively parallel ones (one constraint) are dropped before solving, and
columns within 1e-8 of antiparallel are solved as an exact pair (see :func:`_distinct`); p is
normalized too (the problem is homogeneous in p), so the tolerances below are relative.

The factorization (the d-sized work) runs on p's device; the reduced problems are read to the host in one
transfer a call and solved there (:func:`_dual`: active sets, the ridge retry and the fallbacks are control
flow), and their coefficients cross back once for p + Mz. On a GPU a projection of C ≤ ENUMERATE_MAX_C constraints
(GradMA's worker side, at every local step) stays on the device instead, without a host read
(:func:`_dual_here`): every column is checked for duplicates, each active set's least squares is Gram–Schmidt
in batched kernels (torch's SVD calls cuSOLVER per matrix and reads its convergence flags), the ridge retry is
the enumeration of the ridged problem, every block is recovered and masked, and the fallback counts stay tensors
(:func:`fallback_total` reads them). It agrees with the host path to float64 rounding, by other solvers, so the
CPU keeps the host path, whose numbers the committed tables hold (``HERE``).

Each row of ``p`` (a client, or the server's single vector) is projected separately, and within a
row each *block* of coordinates (a parameter tensor with ``per_tensor`` granularity, as in the
authors' code; the whole model with ``whole_model``, as in the paper) is its own QP. C ≤ 4
(GradMA's worker side, C = 3) is solved exactly by enumerating the 2^C active sets, batched in
torch over rows and blocks; larger C (the server side) by ``scipy.optimize.nnls`` on R. Each
candidate's KKT residual is estimated (violations in R's coordinates plus the rounding of forming
p + Mz); the optimum is taken when within KKT_TOL = 1e-10. A block whose best estimate exceeds
ACCEPT_TOL (or whose solver raised) is solved again with a ridge, min_{z≥0} ‖Mz + p‖² + δ²‖z‖² (δ =
RIDGE): a block of more constraints than coordinates, or of nearly dependent ones (GradMA-S's decayed
server memory of up to m = 100 vectors), has a dual with many optima, and whether Lawson–Hanson's answer
passed ACCEPT_TOL depended on the BLAS kernels' rounding (so did the committed tables' fallback counts,
from one CPU to another); the ridge's z is unique and bounded, and its p~ violates a constraint by at most
δ²z. A block that fails that too (or with non-finite input) is left unprojected and counted: the count is
returned (GradMA logs it as ``qp_fallbacks``, the runner warns, the tables footnote it) and added to the
module's fallback tally (:func:`fallback_total`; the test suite fails if a test makes it grow).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import torch

from fedbench.host import host_side

KKT_TOL = 1e-10  # relative (‖p‖ = 1, ‖M_j‖ = 1) estimated KKT residual within which the dual optimum is taken
ACCEPT_TOL = 1e-6  # the best estimated KKT residual above which a block is left unprojected (a fallback)
ROUNDING = 1e-15  # float64 rounding of p + Mz per unit of Σ_j z_j (normalized), added to each estimate
DUPLICATE_TOL = 1e-12  # unit columns closer than this are one constraint (p~ moves by at most about this)
ANTIPARALLEL_TOL = 1e-8  # unit columns this close to antiparallel are solved as exactly antiparallel (see _distinct)
PINV_RTOL = 1e-13  # singular values of an active set's R_A below this × its largest count as zero (dependence)
ENUMERATE_MAX_C = 4  # active-set enumeration (2^C subsets) up to this many constraints
RIDGE = 1e-7  # δ of the second attempt, min ‖Uz + r‖² + δ²‖z‖²: a violation ≤ δ²z ≤ δ, a rounding ≤ 1e-15·Σz ≲ 1e-14/δ
CHUNK = 1 << 24  # float64 elements converted at once when factoring

HERE: bool | None = None  # C ≤ ENUMERATE_MAX_C solved on p's device (_dual_here); None: where p is not on the CPU

fallbacks = 0  # blocks left unprojected by the host path's calls in this process (see fallback_total)
_owed: dict[torch.device, torch.Tensor] = {}  # the device path's counts, per device, not yet read


def fallback_total() -> int:
    """The blocks left unprojected by every call in this process (tests/conftest.py checks it): the host path's
    ``fallbacks`` and the device path's counts, read here (one read a device)."""
    global fallbacks
    while _owed:
        fallbacks += int(_owed.popitem()[1])
    return fallbacks


def project(
    p: torch.Tensor, M: torch.Tensor, blocks: Sequence[int], tol: float = KKT_TOL
) -> tuple[torch.Tensor, torch.Tensor]:
    """Project each row of ``p`` [S, P] onto {v : ⟨v_b, M[s, j]_b⟩ ≥ 0 ∀j} block by block (Eqs. 2–4).

    ``M`` [S, C, P] holds each row's C constraint vectors; ``blocks`` are consecutive block sizes
    summing to P. ``tol``: the estimated KKT residual within which the least dual objective
    (Eq. 4) decides between active sets. Returns p~ [S, P] (``p``'s dtype; a row block that
    already satisfies every constraint comes back bit-identical) and the number of blocks of each
    row [S] that were left unprojected because the solver failed (also added to the tally,
    :func:`fallback_total`). C ≤ ENUMERATE_MAX_C constraints on a GPU (``HERE``) are solved without a host read.
    """
    here = p.device.type != "cpu" if HERE is None else HERE
    if here and M.shape[1] <= ENUMERATE_MAX_C:
        return _project_here(p, M, blocks, tol)
    projected, dual = solve(p, M, blocks, tol)
    return projected, torch.tensor(dual.counts, dtype=torch.int64, device=p.device)


def _check(p: torch.Tensor, M: torch.Tensor, blocks: Sequence[int]) -> None:
    """A one-line error for shapes that do not fit: p [S, P], M [S, C, P], blocks summing to P."""
    S, C, P = M.shape
    if p.shape != (S, P):
        raise ValueError(f"p must have shape [S, P] = {(S, P)} to match M {tuple(M.shape)}, got {tuple(p.shape)}")
    if sum(blocks) != P or any(b <= 0 for b in blocks):
        raise ValueError(f"blocks must be positive sizes summing to P={P}, got {tuple(blocks)}")


def _project_here(
    p: torch.Tensor, M: torch.Tensor, blocks: Sequence[int], tol: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`project` of C ≤ ENUMERATE_MAX_C constraints on p's device, without a host read: p~ and the counts [S]
    (added to the tally without reading them)."""
    _check(p, M, blocks)
    C = M.shape[1]
    if C == 0:
        return p.clone(), torch.zeros(len(p), dtype=torch.int64, device=p.device)
    dual = _dual_here(_factor(p, M, blocks), C, tol, p.dtype)
    counts = dual.counts
    assert isinstance(counts, torch.Tensor)
    owed = _owed.get(counts.device)
    _owed[counts.device] = counts.sum() if owed is None else owed + counts.sum()
    return _recover(p, M, blocks, dual), counts


def solve(p: torch.Tensor, M: torch.Tensor, blocks: Sequence[int], tol: float = KKT_TOL) -> tuple[torch.Tensor, Dual]:
    """:func:`project` on the host path (any C), returning the :class:`Dual` on the host with p~ (its ``counts``
    read without waiting for ``p``'s device)."""
    global fallbacks
    _check(p, M, blocks)
    S, C, P = M.shape
    if C == 0:
        none = torch.zeros((S, len(blocks)), dtype=torch.bool)
        nothing = torch.zeros((S, len(blocks), 0), dtype=torch.float64)
        return p.clone(), Dual(nothing, [0] * S, none, none, [], [])
    R = _factor(p, M, blocks)  # [S, B, C+1, C+1]: columns M_1 … M_C, p (the d-sized work, on p's device)
    dual = _dual(R.cpu(), C, tol, p.dtype)  # the small problems, on the host (one read of R)
    fallbacks += sum(dual.counts)
    return _recover(p, M, blocks, dual), dual  # p~ = p + Σ_j coef_j M_j


class Dual(NamedTuple):
    """The dual solution of every row and block: p~ = p + Σ_j coef_j M_j (``coef`` [S, B, C]), how many blocks
    of each row are left unprojected (``counts``), and per block the rows it moves (``moved`` [S, B]) and those
    it recovers in float64 (``wide`` [S, B]), with whether any row may do so (``moves``, ``widens``: Python bools
    per block). From the host (:func:`_dual`) ``counts`` are Python ints and the flags are read; from the device
    (:func:`_dual_here`) ``counts`` is an [S] tensor and the flags are what is known without a read: every block
    may move, and widen unless p is float64 (every block is recovered, and masked)."""

    coef: torch.Tensor
    counts: list[int] | torch.Tensor
    moved: torch.Tensor
    wide: torch.Tensor
    moves: list[bool]
    widens: list[bool]


@host_side
def _dual(R: torch.Tensor, C: int, tol: float, dtype: torch.dtype) -> Dual:
    """The dual (Eq. 4) of every row and block from its factor R [S, B, C+1, C+1], on the host (its active
    sets, ridge retries and fallbacks are control flow); ``dtype``: p's, whose rounding decides ``wide``."""
    if R.device.type != "cpu":
        raise ValueError(f"the dual is solved on the host, got R on {R.device}")
    reduced = _reduce(R, C, every=False)
    Uf, rf, kf = reduced.flat()
    z, residual = (_solve_enumerate if C <= ENUMERATE_MAX_C else _solve_nnls)(Uf, rf, kf, tol)
    again = (~(residual <= ACCEPT_TOL) & reduced.finite.reshape(-1)).nonzero().flatten()
    if len(again):  # a rank-deficient block: its dual is not unique; the ridge's is, and as good a projection
        z2, residual2 = _solve_nnls(Uf[again], rf[again], kf[again], tol, RIDGE)
        better = residual2 < residual[again]
        z[again] = torch.where(better.unsqueeze(-1), z2, z[again])
        residual[again] = torch.where(better, residual2, residual[again])
    dual = reduced.dual(z, residual, dtype)
    assert isinstance(dual.counts, torch.Tensor)
    return dual._replace(
        counts=dual.counts.tolist(), moves=dual.moved.any(0).tolist(), widens=dual.wide.any(0).tolist()
    )


def _dual_here(R: torch.Tensor, C: int, tol: float, dtype: torch.dtype) -> Dual:
    """:func:`_dual` of C ≤ ENUMERATE_MAX_C constraints on R's device, without a host read: every column checked
    for duplicates, the active sets' least squares by :func:`_least_squares` (the host path's by SVD), and a block
    the first attempt leaves above ACCEPT_TOL takes the ridge's solution from :func:`_solve_ridge` (the host
    path's is from ``scipy.optimize.nnls``: the same problem, whose solution is unique, to another solver's
    rounding)."""
    reduced = _reduce(R, C, every=True)
    Uf, rf, kf = reduced.flat()
    z, residual = _solve_enumerate(Uf, rf, kf, tol, here=True)
    z2, residual2 = _solve_ridge(Uf, rf, kf, tol)
    again = ~(residual <= ACCEPT_TOL) & reduced.finite.reshape(-1) & (residual2 < residual)
    z = torch.where(again.unsqueeze(-1), z2, z)
    return reduced.dual(z, torch.where(again, residual2, residual), dtype)


class Reduced(NamedTuple):
    """The reduced problems of every row and block (:func:`_reduce`): unit columns U [S, B, C+1, C] and r
    [S, B, C+1] (R's columns normalized), the constraints kept (``keep`` [S, B, C]: neither zero nor a duplicate),
    the norms ‖M_j‖, ‖p‖ [S, B, C+1] and their inverses (0 for a zero column), and the finite blocks [S, B]."""

    U: torch.Tensor
    r: torch.Tensor
    keep: torch.Tensor
    norms: torch.Tensor
    inv: torch.Tensor
    finite: torch.Tensor

    def flat(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """U, r and keep with the rows and blocks as one leading axis."""
        C = self.U.shape[-1]
        return self.U.reshape(-1, C + 1, C), self.r.reshape(-1, C + 1), self.keep.reshape(-1, C)

    def dual(self, z: torch.Tensor, residual: torch.Tensor, dtype: torch.dtype) -> Dual:
        """The :class:`Dual` of the flat solution z and its estimated residual, on their device (``counts`` a
        tensor, the block flags those known without a read): a block above ACCEPT_TOL, or not finite, is left
        unprojected and counted. ``dtype``: p's, whose rounding decides ``wide``."""
        C = self.U.shape[-1]
        ok = (residual.reshape(self.finite.shape) <= ACCEPT_TOL) & self.finite
        z = torch.where(ok.unsqueeze(-1), z.reshape(self.keep.shape), 0.0)
        coef, z_sum, failed = z * self.inv[..., :C] * self.norms[..., C:], z.sum(-1), (~ok).sum(-1)
        moved = (coef != 0).any(-1)  # [S, B]: blocks that actually change
        # float64 where p's dtype's rounding of the terms (Σ_j z_j·‖p‖ in all) would exceed its rounding of p~
        # (z_sum > 1: nearly antiparallel constraints), or a coefficient of a tiny column does not fit it
        wide = (~torch.isfinite(coef.to(dtype)).all(-1) | (z_sum > 1)) & (dtype != torch.float64)
        blocks = self.finite.shape[-1]
        return Dual(coef, failed, moved, wide, [True] * blocks, [dtype != torch.float64] * blocks)


def _reduce(R: torch.Tensor, C: int, every: bool) -> Reduced:
    """The :class:`Reduced` problems of the factors R [S, B, C+1, C+1]: a non-finite block zeroed (left
    unprojected), R's columns normalized, zero and duplicate constraints dropped (:func:`_distinct`; ``every``:
    every column checked, without reading which to check)."""
    finite = torch.isfinite(R).flatten(-2).all(-1)  # [S, B]
    R = torch.where(finite[..., None, None], R, 0.0)
    norms = R.norm(dim=-2)  # [S, B, C+1]: ‖M_j‖ and ‖p‖ of each block
    inv = torch.where(norms > 0, 1.0 / torch.where(norms > 0, norms, 1.0), 0.0)
    U, r = (R * inv.unsqueeze(-2)).split((C, 1), dim=-1)  # unit columns (a zero column stays zero)
    U, keep = _distinct(U, norms[..., :C] > 0, every)
    return Reduced(U, r.squeeze(-1), keep, norms, inv, finite)


def _pieces(blocks: Sequence[int], rows: int):
    """(block index, column slice) pieces of at most ~CHUNK float64 elements for ``rows`` rows."""
    width = max(1, CHUNK // max(rows, 1))
    start = 0
    for b, size in enumerate(blocks):
        for lo in range(start, start + size, width):
            yield b, slice(lo, min(lo + width, start + size))
        start += size


def _factor(p: torch.Tensor, M: torch.Tensor, blocks: Sequence[int]) -> torch.Tensor:
    """Per row and block, in float64: the (C+1) × (C+1) triangular factor R of [M_1 … M_C p] (the
    block's coordinates as rows), piece by piece as TSQR: R ← R-factor of [R; next piece]."""
    S, C, _ = M.shape
    k = C + 1
    R = M.new_zeros((S, len(blocks), k, k), dtype=torch.float64)
    for b, cols in _pieces(blocks, S * k):
        X = M.new_empty((S, k, k + cols.stop - cols.start), dtype=torch.float64)  # X[s, j] = column j
        X[:, :, :k] = R[:, b].transpose(1, 2)
        X[:, :C, k:] = M[:, :, cols]
        X[:, C, k:] = p[:, cols]
        R[:, b] = _householder(X) if C <= ENUMERATE_MAX_C else torch.linalg.qr(X.transpose(1, 2), mode="r").R
    return R


def _householder(X: torch.Tensor) -> torch.Tensor:
    """R [S, k, k] of the QR factorization of the matrices whose k columns are the rows of X
    [S, k, n ≥ k] (float64, overwritten): Householder reflections as batched torch ops, one pass
    over the data each, for small k (LAPACK's QR is faster for large k; on GPUs it loops over S)."""
    S, k, _ = X.shape
    R = X.new_zeros((S, k, k))
    for j in range(k):
        x = X[:, j, j:]
        norm = torch.linalg.vector_norm(x, dim=-1)
        alpha = x[:, 0]
        R[:, j, j] = torch.where(alpha < 0, norm, -norm)  # β: the sign opposite to α, no cancellation in v
        if j + 1 == k:
            break
        half = norm * (norm + alpha.abs())  # ‖v‖²/2 for v = x − β·e_1
        f = torch.where(half > 0, 1.0 / torch.where(half > 0, half, 1.0), 0.0)  # 0: a zero column
        rest = X[:, j + 1 :, j:]
        fw = f.unsqueeze(-1) * ((rest @ x.unsqueeze(-1)).squeeze(-1) - rest[:, :, 0] * R[:, j, j, None])  # f·vᵀrest
        rest.baddbmm_(-fw.unsqueeze(-1), x.unsqueeze(1))  # rest − f·v(vᵀrest), with v = x …
        rest[:, :, 0] += fw * R[:, j, j, None]  # … − β·e_1
        R[:, j, j + 1 :] = rest[:, :, 0]
    return R


def _distinct(U: torch.Tensor, live: torch.Tensor, every: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """The unit columns U [..., k, C] to solve with, and which to keep: the live (non-zero) ones,
    less any within DUPLICATE_TOL of a kept earlier one (positively parallel constraints are one).
    A kept column within ANTIPARALLEL_TOL = δ of −(a kept earlier one) is replaced by exactly that:
    the optimum of such a pair needs multipliers ~1/δ, which float64 turns back into p~ only to
    ~1e-15/δ; as an exact pair (⟨p~, M_j⟩ = 0) p~ violates the original by at most about δ. Only the columns with
    a candidate (|cos| ≥ 1 − 1e-6 with an earlier one in some row) can change: they are found with a host read,
    or, with ``every``, every column after the first is checked instead (the same result)."""
    U, keep = U.clone(), live.clone()
    if every:
        columns = list(range(1, U.shape[-1]))
    else:
        cos = (U.transpose(-1, -2) @ U).abs().triu(1)  # [..., C, C]: |cos| of each pair i < j (accurate to ~eps)
        columns = (cos >= 1 - 1e-6).flatten(0, -3).any(0).any(0).nonzero().flatten().tolist()
    for j in columns:
        before, col = U[..., :j], U[..., j : j + 1]
        keep[..., j] &= ~(((before - col).norm(dim=-2) <= DUPLICATE_TOL) & keep[..., :j]).any(-1)
        anti = ((before + col).norm(dim=-2) <= ANTIPARALLEL_TOL) & keep[..., :j] & keep[..., j : j + 1]  # [..., j]
        partner = before.gather(-1, anti.int().argmax(-1)[..., None, None].expand(*col.shape))
        U[..., j : j + 1] = torch.where(anti.any(-1)[..., None, None], -partner, col)
    return U, keep


def _recover(p: torch.Tensor, M: torch.Tensor, blocks: Sequence[int], dual: Dual) -> torch.Tensor:
    """p~ = p + Σ_j coef_j M_j block by block in ``p``'s dtype, or in float64 where ``dual.wide`` says; unmoved
    rows stay as they are. From the host (:func:`_dual`) the coefficients and masks cross to ``p``'s device once;
    the blocks no row moves (or widens) are skipped, as ``dual.moves`` and ``dual.widens`` say."""
    out = p.clone()
    S, C, _ = M.shape
    if not any(dual.moves):
        return out
    coef, moved, wide = (v.to(p.device) for v in (dual.coef, dual.moved, dual.wide))
    native = coef.to(p.dtype)
    for b, cols in _pieces(blocks, S * (C + 1)):
        if not dual.moves[b]:
            continue
        shifted = torch.baddbmm(p[:, cols].unsqueeze(1), native[:, b].unsqueeze(1), M[:, :, cols]).squeeze(1)
        if dual.widens[b]:
            exact = (p[:, cols].double() + (coef[:, b].unsqueeze(1) @ M[:, :, cols].double()).squeeze(1)).to(p.dtype)
            shifted = torch.where(wide[:, b, None], exact, shifted)
        out[:, cols] = torch.where(moved[:, b, None], shifted, p[:, cols])
    return out


@functools.cache
def _subsets(C: int, device: torch.device) -> torch.Tensor:
    """All 2^C active sets as a [2^C, C] float64 0/1 mask, smallest first (made once a device: a copy to a GPU
    from pageable memory waits for it)."""
    masks = sorted(itertools.product((0.0, 1.0), repeat=C), key=sum)
    return torch.tensor(masks, dtype=torch.float64, device=device)


def _least_squares(A: torch.Tensor, b: torch.Tensor, rtol: float) -> torch.Tensor:
    """z minimizing ‖Az − b‖ for A [..., k, n] and b [..., k], by Gram–Schmidt orthogonalized twice (CGS2: its Q is
    orthonormal to rounding) written as batched elementwise kernels: a GPU's tiny systems by the thousand, where
    torch's SVD calls cuSOLVER per matrix and reads its convergence flags to the host. A column left with less
    than ``rtol`` × its norm once the earlier ones are taken out (a zero column, a masked one, a dependent one) gets
    z_j = 0, which leaves the least-squares residual as it is."""
    n = A.shape[-1]
    Q, R = torch.zeros_like(A), A.new_zeros((*A.shape[:-2], n, n))
    for j in range(n):
        a = A[..., j]
        v = a
        for _ in range(2 if j else 0):
            c = (Q[..., :j] * v.unsqueeze(-1)).sum(-2)  # [..., j]
            v = v - (Q[..., :j] * c.unsqueeze(-2)).sum(-1)
            R[..., :j, j] += c
        norm = torch.linalg.vector_norm(v, dim=-1)
        live = norm > rtol * torch.linalg.vector_norm(a, dim=-1)
        R[..., j, j] = torch.where(live, norm, 0.0)
        Q[..., j] = torch.where(live.unsqueeze(-1), v / torch.where(live, norm, 1.0).unsqueeze(-1), 0.0)
    c = (Q * b.unsqueeze(-1)).sum(-2)  # Qᵀb [..., n]
    diag = R.diagonal(dim1=-2, dim2=-1)
    z = torch.zeros_like(c)
    for j in reversed(range(n)):
        s = c[..., j] - (R[..., j, j + 1 :] * z[..., j + 1 :]).sum(-1)
        z[..., j] = torch.where(diag[..., j] > 0, s / torch.where(diag[..., j] > 0, diag[..., j], 1.0), 0.0)
    return z


def _kkt(U: torch.Tensor, r: torch.Tensor, keep: torch.Tensor, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For z [..., C] (zero off its active set): the estimated KKT residual of p~ = p + Mz for Eq. 2
    on the kept columns (the worst of −z_j, −⟨p~, M_j⟩ and |⟨p~, M_j⟩| where z_j ≠ 0, plus the
    rounding ROUNDING·(1 + Σ_j |z_j|) of forming p~) and ½‖p~‖², the dual objective (Eq. 4) up to a
    constant. In R's coordinates: p~ ↦ w = Uz + r, ⟨p~, M_j⟩ = U_jᵀw."""
    w = r + (U @ z.unsqueeze(-1)).squeeze(-1)
    s = (U.transpose(-1, -2) @ w.unsqueeze(-1)).squeeze(-1)
    on = z != 0
    worst = torch.maximum(-z, torch.where(on, s.abs(), -s)).clamp(min=0)
    worst = torch.where(keep, worst, torch.where(on, torch.inf, 0.0)).amax(-1)
    return worst + ROUNDING * (1 + z.abs().sum(-1)), 0.5 * (w * w).sum(-1)


def _solve_enumerate(
    U: torch.Tensor, r: torch.Tensor, keep: torch.Tensor, tol: float, here: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact dual solution for small C (notes §2.2): for each active set A of kept columns solve
    min ‖U_A z_A + r‖ (least squares on R's columns, SVD pseudo-inverse, or with ``here`` Gram–Schmidt in
    batched kernels, :func:`_least_squares`: exactly dependent columns, C > block size, are fine), then take the
    set of least dual objective among those whose estimated KKT residual is within ``tol`` (the optimum, whenever
    float64 resolves it), or else the one of least residual (two constraints nearly antiparallel: the optimum needs
    multipliers ~1/angle, which float64 cannot turn back into p~ to ``tol``; a neighbouring set is closer).
    U [B, k, C] unit columns, r [B, k], keep [B, C] → z [B, C] ≥ 0 and its estimated residual [B]."""
    C = U.shape[-1]
    masks = _subsets(C, U.device)  # [A, C]
    UA = U.unsqueeze(0) * masks[:, None, None, :]  # [A, B, k, C]
    if here:
        z = _least_squares(UA, -r.expand(len(masks), *r.shape), PINV_RTOL) * masks.unsqueeze(1)  # [A, B, C]
    else:
        z = (torch.linalg.pinv(UA, rtol=PINV_RTOL) @ -r.unsqueeze(-1)).squeeze(-1) * masks.unsqueeze(1)
    residual, objective = _kkt(U, r, keep, z)
    least = residual.min(0).values  # [B]
    admissible = residual <= least.clamp(min=tol)
    best = torch.where(admissible, objective, torch.inf).argmin(0)  # [B]
    chosen = z.gather(0, best.view(1, -1, 1).expand(1, -1, C)).squeeze(0)
    return chosen.clamp(min=0), residual.gather(0, best.view(1, -1)).squeeze(0)


def _solve_ridge(U: torch.Tensor, r: torch.Tensor, keep: torch.Tensor, tol: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The ridge's second attempt (see :func:`_solve_nnls`), min_{z≥0} ‖U_keep z + r‖² + δ²‖z‖² with δ = RIDGE, by
    enumerating its active sets (:func:`_solve_enumerate` of the kept columns stacked on δI: the ridged problem is
    strictly convex, so its solution is unique and exact) on U's device, for C ≤ ENUMERATE_MAX_C; with its estimated
    KKT residual for the plain problem (:func:`_kkt`). U [B, k, C], r [B, k], keep [B, C] → z [B, C], residual [B]."""
    C = U.shape[-1]
    ridged = torch.cat([U, torch.diag_embed(keep.to(U.dtype)) * RIDGE], dim=-2)  # a dropped column: no δ row
    z, _ = _solve_enumerate(ridged, torch.cat([r, r.new_zeros((len(r), C))], dim=-1), keep, tol, here=True)
    residual, _ = _kkt(U, r, keep, z)
    return z, residual


def _solve_nnls(
    U: torch.Tensor, r: torch.Tensor, keep: torch.Tensor, tol: float, ridge: float = 0.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Dual solution for any C with ``scipy.optimize.nnls`` (Lawson–Hanson) on R's kept columns:
    min_{z≥0} ‖U_keep z + r‖ (Eq. 4), and its estimated KKT residual (:func:`_kkt`; inf where
    scipy raised). ``tol`` is unused (one candidate). With ``ridge`` δ > 0, min_{z≥0} ‖U_keep z + r‖² + δ²‖z‖²
    (the columns stacked on δI): the unique, bounded z of a rank-deficient block (more constraints than
    coordinates, or nearly dependent ones), where the plain dual's many optima make Lawson–Hanson's answer, and
    whether it passes ACCEPT_TOL, depend on the BLAS kernels' rounding; its p~ violates a constraint by at most
    δ²z. scipy loads here, on the server's first large projection, so that scenario validation and the CLI start
    without it."""
    from scipy.optimize import nnls

    Un, rn, kn = U.cpu().numpy(), r.cpu().numpy(), keep.cpu().numpy()
    z_np = np.zeros(kn.shape)
    failed = np.zeros(len(kn), dtype=bool)
    for i, (Ui, ri, ki) in enumerate(zip(Un, rn, kn)):
        if not ki.any():
            continue
        c = int(ki.sum())
        A, b = Ui[:, ki], -ri
        if ridge > 0:
            A, b = np.vstack([A, ridge * np.eye(c)]), np.concatenate([b, np.zeros(c)])
        try:
            z_np[i, ki], _ = nnls(A, b, maxiter=50 * c)
        except (RuntimeError, ValueError, np.linalg.LinAlgError):
            failed[i] = True
    z = torch.as_tensor(np.where(failed[:, None], 0.0, z_np), device=U.device)
    residual, _ = _kkt(U, r, keep, z)
    return z, torch.where(torch.as_tensor(failed, device=U.device), torch.inf, residual)
