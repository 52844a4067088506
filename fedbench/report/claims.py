"""A paper's claims as checkable statements, judged on the reproduced numbers and on the paper's own.

Each claim is a function of a :class:`Numbers` source (the paper's reference tables, or one
scale of the store) that returns a :class:`Verdict`: a list of elementary checks (``a > b`` with
the two numbers), and ``holds`` (every check that has its numbers passes), ``fails`` (one does
not), ``not run`` (no check has its numbers: the runs are missing) or ``not reported`` (the
paper publishes no numbers for it). Claims register per paper with :func:`claim`; a new paper
adds its own functions the same way (its tables in ``reference/<paper>.yaml``).

FedMIM's claims follow §5 of the notes (C1, C2, C3, C4a/b, C5, C6a/b, C7a); accuracies are the
tables' metric in percent (ours: mean over the usable seeds, as in :mod:`fedbench.report.paper`).
Local consistency and client spread are a run's mean over its recorded rounds (client_acc_std
only exists at evaluated rounds), then the mean over its usable seeds. FedCAMS's claims (B1,
C1–C8) follow §8 of its notes; their section below states the tolerances.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from rich.table import Table

from fedbench.report.paper import PAPER_SCALE, compare, paper_runs, paper_scales
from fedbench.report.reference import load_reference, reference_frame
from fedbench.report.tables import BAD_STATUSES

VERDICTS = ("holds", "fails", "not run", "not reported")


@dataclass(frozen=True)
class Check:
    """One elementary comparison; ``ok`` is None when a number it needs is missing."""

    text: str
    ok: bool | None


@dataclass(frozen=True)
class Verdict:
    verdict: str  # one of VERDICTS
    checks: tuple[Check, ...] = ()
    note: str = ""

    @property
    def checked(self) -> list[Check]:
        return [c for c in self.checks if c.ok is not None]

    @property
    def evidence(self) -> str:
        """The checked comparisons with their numbers (and the note), one line."""
        return "; ".join([*(c.text for c in self.checked), *([self.note] if self.note else [])])

    def short(self) -> str:
        """E.g. ``holds (9/9 hold)``, ``fails (41/42 hold)``, ``holds (3/3 hold; 3 of 9 checked)``,
        ``not run (0 of 9 checked)``."""
        n, total = len(self.checked), len(self.checks)
        if not total:
            return self.verdict
        if not n:
            return f"{self.verdict} (0 of {total} checked)"
        hold = sum(bool(c.ok) for c in self.checked)
        return f"{self.verdict} ({hold}/{n} hold" + (f"; {n} of {total} checked)" if n < total else ")")


def judge(checks: list[Check], note: str = "") -> Verdict:
    """``fails`` if a check fails, ``holds`` if every checked one passes, ``not run`` if none is checked."""
    checked = [c for c in checks if c.ok is not None]
    verdict = "not run" if not checked else ("fails" if any(not c.ok for c in checked) else "holds")
    return Verdict(verdict, tuple(checks), note)


def greater(context: str, left: str, a: float, right: str, b: float, fmt: str = ".2f") -> Check:
    """The check ``a > b`` written with its numbers, e.g. ``CIFAR-10 IID.: FedMIM 86.39 > FedAvg 82.16``."""
    if pd.isna(a) or pd.isna(b):
        return Check(f"{context}: {left} vs {right} missing", None)
    ok = bool(a > b)
    return Check(f"{context}: {left} {a:{fmt}} {'>' if ok else '≤'} {right} {b:{fmt}}", ok)


class Numbers:
    """What a claim reads. ``acc(table)``: the reference table's rows × columns (percent, NaN if
    missing); ``run_mean(table, column, metric)``: per row label, the mean over usable seeds of each
    run's mean of a store metric, or None when the source has no such numbers (the paper)."""

    name = "paper"

    def __init__(self, paper: str) -> None:
        self.paper = paper

    def acc(self, table: str) -> pd.DataFrame:
        return reference_frame(self.paper, table)

    def run_mean(self, table: str, column: str, metric: str) -> pd.Series | None:
        return None


class StoreNumbers(Numbers):
    """The reproduced numbers of one scale of the store."""

    def __init__(self, store, paper: str, scale: str) -> None:
        super().__init__(paper)
        self.store, self.scale, self.name = store, scale, f"ours ({scale})"
        self._acc: dict[str, pd.DataFrame] = {}

    def acc(self, table: str) -> pd.DataFrame:
        if table not in self._acc:
            ref = reference_frame(self.paper, table)
            frame = compare(self.store, self.paper, table, self.scale)
            mean = next(c for c in frame.columns if c.endswith("_mean"))
            ours = frame.pivot(index="row", columns="column", values=mean) * 100
            self._acc[table] = ours.reindex(index=ref.index, columns=ref.columns)
        return self._acc[table]

    def run_mean(self, table: str, column: str, metric: str) -> pd.Series:
        runs = paper_runs(self.store, self.paper, table)
        runs = runs[(runs["scale"] == self.scale) & (runs["column"] == column) & ~runs["status"].isin(list(BAD_STATUSES))]
        m = self.store.metrics(runs["run_id"])
        m = m[np.isfinite(m[metric])].merge(runs[["run_id", "row"]], on="run_id")
        return m.groupby(["row", "run_id"])[metric].mean().groupby(level="row").mean()


@dataclass(frozen=True)
class Claim:
    id: str
    statement: str
    check: Callable[[Numbers], Verdict] = field(repr=False)


@dataclass(frozen=True)
class ClaimResult:
    id: str
    statement: str
    ours: Verdict
    paper: Verdict


CLAIMS: dict[str, list[Claim]] = {}


def claim(paper: str, id: str, statement: str) -> Callable:
    """Register ``fn(numbers) -> Verdict`` as claim ``id`` of ``paper`` (in registration order)."""

    def register(fn: Callable[[Numbers], Verdict]) -> Callable[[Numbers], Verdict]:
        CLAIMS.setdefault(paper, []).append(Claim(id, statement, fn))
        return fn

    return register


def resolve_scale(store, paper: str, scale: str | None) -> str:
    """``scale``, else the one scale of ``paper`` in the store (``paper`` when it has none)."""
    if scale is not None:
        return scale
    scales = paper_scales(store, paper)
    if len(scales) > 1:
        raise ValueError(f"the store holds {paper} runs at scales {', '.join(scales)}; choose one (--scale)")
    return scales[0] if scales else PAPER_SCALE


def check_claims(store, paper: str, scale: str | None = None) -> list[ClaimResult]:
    """Every registered claim of ``paper``, judged on the store's ``scale`` and on the paper's numbers."""
    if paper not in CLAIMS:
        raise ValueError(f"no claims registered for paper {paper!r}; papers with claims: {', '.join(CLAIMS)}")
    ours, theirs = StoreNumbers(store, paper, resolve_scale(store, paper, scale)), Numbers(paper)
    return [ClaimResult(c.id, c.statement, c.check(ours), c.check(theirs)) for c in CLAIMS[paper]]


def rich_claims(results: list[ClaimResult], title: str) -> Table:
    """Verdicts for the terminal: id, statement, ours, paper."""
    colors = {"holds": "green", "fails": "red", "not run": "yellow", "not reported": "dim"}
    table = Table(title=title)
    for col in ("id", "claim", "ours", "paper"):
        table.add_column(col, no_wrap=col != "claim")
    for r in results:
        table.add_row(r.id, r.statement, *(f"[{colors[v.verdict]}]{v.short()}[/]" for v in (r.ours, r.paper)))
    return table


def format_claims(results: list[ClaimResult], paper: str, scale: str) -> str:
    """Markdown: a verdict table, then each claim's checks with their numbers for ours and the paper."""
    short = load_reference(paper).get("short", paper)
    lines = [
        f"# {short} claims, {scale} scale",
        "",
        f"ours: the reproduced numbers at the {scale} scale; paper: the published numbers. Verdicts: holds (every "
        "check with its numbers passes), fails, not run (the runs it needs are missing), not reported (the paper "
        "gives no numbers); (h/k hold; k of n checked): h of the k checks that had their numbers pass, out of n.",
        "",
        "| id | claim | ours | paper |",
        "|---|---|---|---|",
        *[f"| {r.id} | {r.statement} | {r.ours.short()} | {r.paper.short()} |" for r in results],
    ]
    if scale != PAPER_SCALE:
        lines += ["", f"_The {scale} scale uses substitute datasets/models and fewer rounds: "
                      "only orderings are comparable with the paper._"]
    for r in results:
        lines += ["", f"## {r.id}: {r.statement}"]
        for who, v in (("ours", r.ours), ("paper", r.paper)):
            lines += ["", f"**{who}: {v.short()}**" + (f" — {v.note}" if v.note else "")]
            lines += [f"- {c.text}" for c in v.checked]
    return "\n".join(lines) + "\n"


def write_claims(store, paper: str, out_dir: Path, scale: str | None = None) -> Path:
    """Write ``<out_dir>/<paper>_claims_<scale>.md`` (scale: see :func:`resolve_scale`)."""
    scale = resolve_scale(store, paper, scale)
    text = format_claims(check_claims(store, paper, scale), paper, scale)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{paper}_claims_{scale}.md"
    path.write_text(text, encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------------------
# FedMIM (notes §5)

_SETTING = re.compile(r"^(?P<dataset>.+) (?P<setting>IID\.|DIR\.\d+|E = \d+)$")


def _by_dataset(columns) -> dict[str, list[str]]:
    """``{"CIFAR-10": ["CIFAR-10 IID.", "CIFAR-10 DIR.3", ...], ...}`` in the paper's column order."""
    groups: dict[str, list[str]] = {}
    for col in columns:
        groups.setdefault(_SETTING.match(col)["dataset"], []).append(col)
    return groups


def _setting(col: str) -> str:
    return _SETTING.match(col)["setting"]


def _beats_in_every_column(nums: Numbers, winners: list[str], loser: str) -> Verdict:
    acc = nums.acc("I")
    return judge([greater(col, w, acc.loc[w, col], loser, acc.loc[loser, col]) for w in winners for col in acc.columns])


def _falls_along_columns(nums: Numbers, table: str) -> Verdict:
    acc = nums.acc(table)
    checks = []
    for row in acc.index:
        for cols in _by_dataset(acc.columns).values():
            dataset = _SETTING.match(cols[0])["dataset"]
            for a, b in zip(cols, cols[1:]):
                checks.append(greater(f"{row} {dataset}", _setting(a), acc.loc[row, a], _setting(b), acc.loc[row, b]))
    return judge(checks)


@claim("fedmim", "C1", "FedMIM > FedAvg in every Table I column")
def _c1(nums: Numbers) -> Verdict:
    return _beats_in_every_column(nums, ["FedMIM"], "FedAvg")


@claim("fedmim", "C2", "IID > DIR.3 > DIR.1 for every method on every dataset (Table I)")
def _c2(nums: Numbers) -> Verdict:
    return _falls_along_columns(nums, "I")


@claim("fedmim", "C3", "FedAdam has the largest IID → DIR.1 drop on every dataset (Table I)")
def _c3(nums: Numbers) -> Verdict:
    acc = nums.acc("I")
    checks = []
    for dataset, cols in _by_dataset(acc.columns).items():
        iid, dir1 = (next(c for c in cols if _setting(c) == s) for s in ("IID.", "DIR.1"))
        drop = acc[iid] - acc[dir1]
        checks += [greater(f"{dataset} drop", "FedAdam", drop["FedAdam"], m, drop[m]) for m in acc.index if m != "FedAdam"]
    return judge(checks)


@claim("fedmim", "C4a", "FedMIM, SCAFFOLD and FedCM > FedAvg in every Table I column")
def _c4a(nums: Numbers) -> Verdict:
    return _beats_in_every_column(nums, ["FedMIM", "SCAFFOLD", "FedCM"], "FedAvg")


@claim("fedmim", "C4b", "At DIR.1, FedMIM is 1st and SCAFFOLD 2nd on every dataset (Table I)")
def _c4b(nums: Numbers) -> Verdict:
    acc = nums.acc("I")
    checks = []
    for col in (c for c in acc.columns if _setting(c) == "DIR.1"):
        checks += [greater(col, "FedMIM", acc.loc["FedMIM", col], m, acc.loc[m, col]) for m in acc.index if m != "FedMIM"]
        checks += [greater(col, "SCAFFOLD", acc.loc["SCAFFOLD", col], m, acc.loc[m, col])
                   for m in acc.index if m not in ("FedMIM", "SCAFFOLD")]
    return judge(checks)


@claim("fedmim", "C5", "Larger E → lower accuracy: every E = 1 → 5 → 10 step falls (Table II; count of falling steps)")
def _c5(nums: Numbers) -> Verdict:
    return _falls_along_columns(nums, "II")


def _lowest_in_dir3(nums: Numbers, metric: str, scale: float, unit: str, figure: str) -> Verdict:
    """FedMIM has the lowest run mean of ``metric`` among the table's methods in each DIR.3 column."""
    cols = [c for c in nums.acc("I").columns if _setting(c) == "DIR.3"]
    methods = list(nums.acc("I").index)
    checks = []
    for col in cols:
        means = nums.run_mean("I", col, metric)
        if means is None:
            return Verdict("not reported", note=figure)
        means = (means.reindex(methods).dropna() * scale).sort_values()
        if "FedMIM" not in means.index or len(means) < 2:
            checks.append(Check(f"{col}: missing", None))
            continue
        listing = ", ".join(f"{m} {v:.3g}{unit}" for m, v in means.items())
        ok = bool(means["FedMIM"] < means.drop("FedMIM").min())
        checks.append(Check(f"{col}: {listing} → FedMIM {'lowest' if ok else 'not lowest'}", ok))
    return judge(checks)


@claim("fedmim", "C6a", "FedMIM has the lowest mean local consistency (1/S)Σ‖x_i,K − x̄‖² in Table I's DIR.3 runs")
def _c6a(nums: Numbers) -> Verdict:
    return _lowest_in_dir3(nums, "consistency", 1.0, "",
                           "Fig. 2b shows FedMIM lowest on CIFAR-10/100 as curves, without numbers")


@claim("fedmim", "C6b", "FedMIM has the lowest client spread (mean std over clients of the global model's accuracy) "
                        "in Table I's DIR.3 runs")
def _c6b(nums: Numbers) -> Verdict:
    return _lowest_in_dir3(nums, "client_acc_std", 100.0, " pp", "not in the paper (a fedbench check)")


@claim("fedmim", "C7a", "Every momentum row of Table III > the α=() β=() row (FedAvg)")
def _c7a(nums: Numbers) -> Verdict:
    acc, base = nums.acc("III"), "α=() β=()"
    rows = [r for r in acc.index if r != base]
    return judge([greater(col, r, acc.loc[r, col], base, acc.loc[base, col]) for col in acc.columns for r in rows])


# ---------------------------------------------------------------------------------------------
# FedCAMS (notes §8). The paper's main results are curves (Figs. 1–7, reference tables `fig*`
# with every cell null), so those claims are "not reported" on the paper's side; Tables 2 and 3
# are checked on its printed numbers. Ours: final-round accuracy (%) of the figure and Table 3
# runs; "converges faster" = a higher mean test accuracy over the evaluated rounds (the area
# under the accuracy curve, a speed measure at equal rounds); uplink bits = the mean over rounds
# of bits_up (rounds and S are equal across the compared runs, so this is the ratio of the
# cumulative uplink per client).

FEDCAMS_SIGN_TOL = 2.0    # points: "FedCAMS-sign ≈ FedAMS"
FEDCAMS_EPS_SPREAD = 1.0  # points: Table 3 spans 0.64 points
FEDCAMS_BEST_TOL = 1.0    # points: "FedAMS within noise of the best" (notes §8.7)
FEDCAMS_RATIO_TOL = 0.05  # relative: uplink ratios vs the nominal 1/32, 1/64, 1/128
_UPLINK_RATIO = {"FedCAMS-sign": 32, "FedCAMS-top1/64": 32, "FedCAMS-top1/128": 64, "FedCAMS-top1/256": 128}
_TABLE2_ROW = {"FedCAMS-sign": "Scaled sign", "FedCAMS-top1/64": "Top-k with r = 1/64",
               "FedCAMS-top1/128": "Top-k with r = 1/128", "FedCAMS-top1/256": "Top-k with r = 1/256"}
_CURVES_ONLY = "the paper shows curves only, without numbers"


def _published(nums: Numbers) -> bool:
    """True for the paper's own numbers (not a store scale)."""
    return not isinstance(nums, StoreNumbers)


def within(context: str, what: str, value: float, lo: float, hi: float, fmt: str = ".2f") -> Check:
    """The check ``lo ≤ value ≤ hi`` (up to 1e-9, so 57.10 − 58.10 is ≥ −1) written with its numbers."""
    if pd.isna(value):
        return Check(f"{context}: {what} missing", None)
    ok = bool(lo - 1e-9 <= value <= hi + 1e-9)
    if hi == math.inf:
        return Check(f"{context}: {what} {value:{fmt}} {'≥' if ok else '<'} {lo:{fmt}}", ok)
    return Check(f"{context}: {what} {value:{fmt}} {'within' if ok else 'outside'} [{lo:{fmt}}, {hi:{fmt}}]", ok)


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
            checks += [greater(f"{col} {method} mean acc.", f"{name}={b}", means[rb], f"{name}={a}", means[ra])
                       for (a, ra), (b, rb) in zip(rows, rows[1:])]
        if not groups:
            checks.append(Check(f"{col}: missing", None))
    return judge(checks)


@claim("fedcams", "B1", "Cumulative uplink bits per client vs FedAMS: FedCAMS-sign ≈ 1/32, top-k r = 1/64, 1/128, "
                        "1/256 ≈ 1/32, 1/64, 1/128 (×ratio within 5%; Figs. 4/5 bit axes, Table 2)")
def _fedcams_b1(nums: Numbers) -> Verdict:
    checks = []
    if _published(nums):  # Table 2: the uplink is half the two-way traffic, FedAMS's half the uncompressed
        bits = reference_frame(nums.paper, "2", ("bits",))
        for label, row in _TABLE2_ROW.items():
            ratio = bits.loc[row, "Two-way Compression"] / bits.loc[row, "Uncompressed"]
            n = _UPLINK_RATIO[label]
            checks.append(within(f"Table 2 {row}", f"uplink / FedAMS's × {n} =", ratio * n,
                                 1 - FEDCAMS_RATIO_TOL, 1 + FEDCAMS_RATIO_TOL, ".4f"))
        return judge(checks)
    for col in nums.acc("fig4_5").columns:
        up = nums.run_mean("fig4_5", col, "bits_up")
        for label, n in _UPLINK_RATIO.items():
            ratio = up.get(label, np.nan) / up.get("FedAMS", np.nan)
            checks.append(within(col, f"{label} uplink / FedAMS's × {n} =", ratio * n,
                                 1 - FEDCAMS_RATIO_TOL, 1 + FEDCAMS_RATIO_TOL, ".4f"))
    return judge(checks, "bits_up includes BatchNorm running statistics sent uncompressed (the paper leaves them out)")


@claim("fedcams", "C1", "Top-k's final accuracy falls as r shrinks: r = 1/64 > 1/128 > 1/256 (Figs. 4/5)")
def _fedcams_c1(nums: Numbers) -> Verdict:
    if _published(nums):
        return Verdict("not reported", note=_CURVES_ONLY)
    acc, rows = nums.acc("fig4_5"), ["FedCAMS-top1/64", "FedCAMS-top1/128", "FedCAMS-top1/256"]
    return judge([greater(col, a.removeprefix("FedCAMS-"), acc.loc[a, col], b.removeprefix("FedCAMS-"), acc.loc[b, col])
                  for col in acc.columns for a, b in zip(rows, rows[1:])])


@claim("fedcams", "C2", f"FedCAMS-sign ≈ FedAMS: final accuracies within {FEDCAMS_SIGN_TOL:g} points (Figs. 4/5)")
def _fedcams_c2(nums: Numbers) -> Verdict:
    if _published(nums):
        return Verdict("not reported", note=_CURVES_ONLY)
    acc = nums.acc("fig4_5")
    return judge([within(col, f"FedCAMS-sign {acc.loc['FedCAMS-sign', col]:.2f} − FedAMS {acc.loc['FedAMS', col]:.2f} =",
                         acc.loc["FedCAMS-sign", col] - acc.loc["FedAMS", col], -FEDCAMS_SIGN_TOL, FEDCAMS_SIGN_TOL)
                  for col in acc.columns])


@claim("fedcams", "C3", f"FedAMS is insensitive to ε: final accuracies over Table 3's grid span ≤ {FEDCAMS_EPS_SPREAD:g} point")
def _fedcams_c3(nums: Numbers) -> Verdict:
    checks = []
    for col, values in nums.acc("3").items():
        v = values.dropna()
        if len(v) < 2:
            checks.append(Check(f"{col}: missing", None))
            continue
        spread = f"max {v.idxmax()} {v.max():.2f} − min {v.idxmin()} {v.min():.2f} ({len(v)} of {len(values)} ε) ="
        checks.append(within(col, spread, v.max() - v.min(), 0.0, FEDCAMS_EPS_SPREAD))
    return judge(checks)


@claim("fedcams", "C4", "ε = 1e-3 (the value used everywhere) gives FedAMS's best accuracy in Table 3")
def _fedcams_c4(nums: Numbers) -> Verdict:
    acc, best = nums.acc("3"), "FedAMS ε=1e-3"
    return judge([greater(col, "ε=1e-3", acc.loc[best, col], r.removeprefix("FedAMS "), acc.loc[r, col])
                  for col in acc.columns for r in acc.index if r != best])


@claim("fedcams", "C5", "More clients per round converge faster: mean accuracy over rounds rises with S = 5, 10, 20, "
                        "for FedAMS (Fig. 2) and FedCAMS-sign (Fig. 6)")
def _fedcams_c5(nums: Numbers) -> Verdict:
    return _rises_along(nums, "fig2_6", r"S=(\d+)", "S")


@claim("fedcams", "C6", "More local epochs converge faster per round: mean accuracy over rounds rises with E (Fig. 3)")
def _fedcams_c6(nums: Numbers) -> Verdict:
    return _rises_along(nums, "fig3", r"E=(\d+)", "E")


@claim("fedcams", "C7", f"FedAMS's final accuracy is within {FEDCAMS_BEST_TOL:g} point of the best of the five methods "
                        "(Figs. 1 and 7, each model)")
def _fedcams_c7(nums: Numbers) -> Verdict:
    if _published(nums):
        return Verdict("not reported", note=_CURVES_ONLY)
    checks = []
    for fig in ("fig1", "fig7"):
        acc = nums.acc(fig)
        for col in acc.columns:
            others = acc[col].drop("FedAMS").dropna()
            if others.empty:
                checks.append(Check(f"{col}: missing", None))
                continue
            best = others.idxmax()
            checks.append(within(col, f"FedAMS {acc.loc['FedAMS', col]:.2f} − best other ({best} {others.max():.2f}) =",
                                 acc.loc["FedAMS", col] - others.max(), -FEDCAMS_BEST_TOL, math.inf))
    return judge(checks)


@claim("fedcams", "C8", "On ConvMixer every adaptive server method beats FedAvg: FedAdam, FedYogi, FedAMSGrad, FedAMS > "
                        "FedAvg (Figs. 1c/d and 7c/d)")
def _fedcams_c8(nums: Numbers) -> Verdict:
    if _published(nums):
        return Verdict("not reported", note=_CURVES_ONLY)
    checks = []
    for fig in ("fig1", "fig7"):
        acc = nums.acc(fig)
        for col in (c for c in acc.columns if "ConvMixer" in c):
            checks += [greater(col, m, acc.loc[m, col], "FedAvg", acc.loc["FedAvg", col])
                       for m in ("FedAdam", "FedYogi", "FedAMSGrad", "FedAMS")]
    return judge(checks)
