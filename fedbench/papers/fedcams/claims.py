"""FedCAMS's claims (notes §8): C1–C8, and the accounting identity B1."""

from __future__ import annotations

import re

import numpy as np

from fedbench.report.claims.base import (
    NOISE_K,
    Check,
    Numbers,
    StoreNumbers,
    Verdict,
    claim,
    close,
    greater,
    judge,
    within,
)
from fedbench.report.reference import reference_frame

# ---------------------------------------------------------------------------------------------
# FedCAMS (notes §8). The paper's main results are curves (Figs. 1–7, reference tables `fig*`
# with every cell null), so those claims are "not reported" on the paper's side; Tables 2 and 3
# are checked on its printed numbers. Ours: final-round accuracy (%) of the figure and Table 3
# runs; "converges faster" = a higher mean test accuracy over the evaluated rounds (the area
# under the accuracy curve, a speed measure at equal rounds); uplink bits = the mean over rounds
# of bits_up (rounds and S are equal across the compared runs, so this is the ratio of the
# cumulative uplink per client). B1 is an identity of the bit accounting (kind "accounting"),
# unit-tested from the compressors in tests/test_accounting.py. The point tolerances below are
# floors: with seeds, a difference may also be as large as NOISE_K σ of it (base.close).

FEDCAMS_SIGN_TOL = 2.0  # points: "FedCAMS-sign ≈ FedAMS"
FEDCAMS_EPS_SPREAD = 1.0  # points: Table 3 spans 0.64 points
FEDCAMS_BEST_TOL = 1.0  # points: "FedAMS within noise of the best" (notes §8.7)
FEDCAMS_RATIO_TOL = 0.05  # relative: uplink ratios vs the nominal 1/32, 1/64, 1/128
_UPLINK_RATIO = {"FedCAMS-sign": 32, "FedCAMS-top1/64": 32, "FedCAMS-top1/128": 64, "FedCAMS-top1/256": 128}
_TABLE2_ROW = {
    "FedCAMS-sign": "Scaled sign",
    "FedCAMS-top1/64": "Top-k with r = 1/64",
    "FedCAMS-top1/128": "Top-k with r = 1/128",
    "FedCAMS-top1/256": "Top-k with r = 1/256",
}
_CURVES_ONLY = "the paper shows curves only, without numbers"


def _published(nums: Numbers) -> bool:
    """True for the paper's own numbers (not a store scale)."""
    return not isinstance(nums, StoreNumbers)


def _rises_along(nums: Numbers, table: str, pattern: str, name: str) -> Verdict:
    """Per column and per method, the mean test accuracy over rounds rises with the number in
    ``pattern`` (e.g. ``S=(\\d+)``) of the row labels."""
    if _published(nums):
        return Verdict("not reported", note=_CURVES_ONLY)
    checks = []
    for col in nums.acc(table).columns:
        means = nums.run_mean(table, col, "test_acc") * 100
        groups: dict[str, list[tuple[int, str]]] = {}
        for row in means.index:
            m = re.search(pattern, row)
            if m:
                groups.setdefault(row[: m.start()].strip(), []).append((int(m.group(1)), row))
        for method, rows in groups.items():
            rows.sort()
            checks += [
                greater(f"{col} {method} mean acc.", f"{name}={b}", means[rb], f"{name}={a}", means[ra])
                for (a, ra), (b, rb) in zip(rows, rows[1:])
            ]
        if not groups:
            checks.append(Check(f"{col}: missing", None))
    return judge(checks)


@claim(
    "fedcams",
    "B1",
    "Cumulative uplink bits per client vs FedAMS: FedCAMS-sign ≈ 1/32, top-k r = 1/64, 1/128, "
    "1/256 ≈ 1/32, 1/64, 1/128 (×ratio within 5%; Figs. 4/5 bit axes, Table 2)",
    kind="accounting",
)
def _fedcams_b1(nums: Numbers) -> Verdict:
    checks = []
    if _published(nums):  # Table 2: the uplink is half the two-way traffic, FedAMS's half the uncompressed
        bits = reference_frame(nums.paper, "2", ("bits",))
        for label, row in _TABLE2_ROW.items():
            ratio = bits.loc[row, "Two-way Compression"] / bits.loc[row, "Uncompressed"]
            n = _UPLINK_RATIO[label]
            checks.append(
                within(
                    f"Table 2 {row}",
                    f"uplink / FedAMS's × {n} =",
                    ratio * n,
                    1 - FEDCAMS_RATIO_TOL,
                    1 + FEDCAMS_RATIO_TOL,
                    ".4f",
                )
            )
        return judge(checks)
    for col in nums.acc("fig4_5").columns:
        up = nums.run_mean("fig4_5", col, "bits_up")
        for label, n in _UPLINK_RATIO.items():
            ratio = up.get(label, np.nan) / up.get("FedAMS", np.nan)
            checks.append(
                within(
                    col,
                    f"{label} uplink / FedAMS's × {n} =",
                    ratio * n,
                    1 - FEDCAMS_RATIO_TOL,
                    1 + FEDCAMS_RATIO_TOL,
                    ".4f",
                )
            )
    return judge(checks, "bits_up includes BatchNorm running statistics sent uncompressed (the paper leaves them out)")


@claim("fedcams", "C1", "Top-k's final accuracy falls as r shrinks: r = 1/64 > 1/128 > 1/256 (Figs. 4/5)")
def _fedcams_c1(nums: Numbers) -> Verdict:
    if _published(nums):
        return Verdict("not reported", note=_CURVES_ONLY)
    acc, rows = nums.acc("fig4_5"), ["FedCAMS-top1/64", "FedCAMS-top1/128", "FedCAMS-top1/256"]
    return judge(
        [
            greater(col, a.removeprefix("FedCAMS-"), acc.loc[a, col], b.removeprefix("FedCAMS-"), acc.loc[b, col])
            for col in acc.columns
            for a, b in zip(rows, rows[1:])
        ]
    )


@claim(
    "fedcams",
    "C2",
    f"FedCAMS-sign ≈ FedAMS: final accuracies within max({FEDCAMS_SIGN_TOL:g} points, {NOISE_K:g}σ) (Figs. 4/5)",
)
def _fedcams_c2(nums: Numbers) -> Verdict:
    if _published(nums):
        return Verdict("not reported", note=_CURVES_ONLY)
    acc, std = nums.acc("fig4_5"), nums.acc_std("fig4_5")
    return judge(
        [
            close(
                col,
                "FedCAMS-sign",
                acc.loc["FedCAMS-sign", col],
                "FedAMS",
                acc.loc["FedAMS", col],
                FEDCAMS_SIGN_TOL,
                (std.loc["FedCAMS-sign", col], std.loc["FedAMS", col]),
            )
            for col in acc.columns
        ]
    )


@claim(
    "fedcams",
    "C3",
    f"FedAMS is insensitive to ε: final accuracies over Table 3's grid span ≤ "
    f"max({FEDCAMS_EPS_SPREAD:g} point, {NOISE_K:g}σ)",
)
def _fedcams_c3(nums: Numbers) -> Verdict:
    checks, std = [], nums.acc_std("3")
    for col, values in nums.acc("3").items():
        v = values.dropna()
        if len(v) < 2:
            checks.append(Check(f"{col}: missing", None))
            continue
        hi, lo = v.idxmax(), v.idxmin()
        checks.append(
            close(
                f"{col} ({len(v)} of {len(values)} ε)",
                f"max {hi}",
                v[hi],
                f"min {lo}",
                v[lo],
                FEDCAMS_EPS_SPREAD,
                (std.loc[hi, col], std.loc[lo, col]),
                "below",
            )
        )
    return judge(checks)


@claim("fedcams", "C4", "ε = 1e-3 (the value used everywhere) gives FedAMS's best accuracy in Table 3")
def _fedcams_c4(nums: Numbers) -> Verdict:
    acc, best = nums.acc("3"), "FedAMS ε=1e-3"
    return judge(
        [
            greater(col, "ε=1e-3", acc.loc[best, col], r.removeprefix("FedAMS "), acc.loc[r, col])
            for col in acc.columns
            for r in acc.index
            if r != best
        ]
    )


@claim(
    "fedcams",
    "C5",
    "More clients per round converge faster: mean accuracy over rounds rises with S = 5, 10, 20, "
    "for FedAMS (Fig. 2) and FedCAMS-sign (Fig. 6)",
)
def _fedcams_c5(nums: Numbers) -> Verdict:
    return _rises_along(nums, "fig2_6", r"S=(\d+)", "S")


@claim("fedcams", "C6", "More local epochs converge faster per round: mean accuracy over rounds rises with E (Fig. 3)")
def _fedcams_c6(nums: Numbers) -> Verdict:
    return _rises_along(nums, "fig3", r"E=(\d+)", "E")


@claim(
    "fedcams",
    "C7",
    f"FedAMS's final accuracy is within max({FEDCAMS_BEST_TOL:g} point, {NOISE_K:g}σ) of the best of "
    "the five methods (Figs. 1 and 7, each model)",
)
def _fedcams_c7(nums: Numbers) -> Verdict:
    if _published(nums):
        return Verdict("not reported", note=_CURVES_ONLY)
    checks = []
    for fig in ("fig1", "fig7"):
        acc, std = nums.acc(fig), nums.acc_std(fig)
        for col in acc.columns:
            others = acc[col].drop("FedAMS").dropna()
            if others.empty:
                checks.append(Check(f"{col}: missing", None))
                continue
            best = others.idxmax()
            checks.append(
                close(
                    col,
                    "FedAMS",
                    acc.loc["FedAMS", col],
                    f"best other {best}",
                    others[best],
                    FEDCAMS_BEST_TOL,
                    (std.loc["FedAMS", col], std.loc[best, col]),
                    "above",
                )
            )
    return judge(checks)


@claim(
    "fedcams",
    "C8",
    "On ConvMixer every adaptive server method beats FedAvg: FedAdam, FedYogi, FedAMSGrad, FedAMS > "
    "FedAvg (Figs. 1c/d and 7c/d)",
)
def _fedcams_c8(nums: Numbers) -> Verdict:
    if _published(nums):
        return Verdict("not reported", note=_CURVES_ONLY)
    checks = []
    for fig in ("fig1", "fig7"):
        acc = nums.acc(fig)
        for col in (c for c in acc.columns if "ConvMixer" in c):
            checks += [
                greater(col, m, acc.loc[m, col], "FedAvg", acc.loc["FedAvg", col])
                for m in ("FedAdam", "FedYogi", "FedAMSGrad", "FedAMS")
            ]
    return judge(checks)
