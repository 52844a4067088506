"""A paper's claims as checkable statements, judged on the reproduced numbers and on the paper's own.

Each claim is a function of a :class:`Numbers` source (the paper's reference tables, or one scale of
the store) that returns a :class:`Verdict`: a list of elementary checks (``a > b`` with the two
numbers), and ``holds`` (every decided check passes), ``fails`` (one does not), ``inconclusive``
(every check has its numbers but none can decide: e.g. neither side reached the target of a
rounds-to-target comparison), ``not run`` (no check has its numbers: the runs are missing) or ``not
reported`` (the paper publishes no numbers for it). With some checks inconclusive and others
decided, the verdict is judged on the decided ones and says how many were inconclusive. Claims
register per paper with :func:`claim`; a new paper adds its own functions the same way in its room
(``fedbench/papers/<paper>/claims.py``, its tables in ``reference.yaml`` there). A claim's ``kind``
is ``paper`` (a result the paper states) or ``accounting`` (an identity of fedbench's bookkeeping,
e.g. uplink bits per compressor: reported apart and not counted among the paper's claims;
unit-tested in ``tests/test_accounting.py``).

Each paper's claims live in its room, ``fedbench/papers/<paper>/claims.py``, imported through
:func:`fedbench.rooms.paper_part` when its claims are first checked. ``Numbers.acc(table)`` gives a
reference table's cells in the paper's units (accuracies in percent, ours the mean over the usable
seeds as in :mod:`fedbench.report.paper`; rounds for ``rounds_to`` columns, +inf when never reached)
and ``acc_std(table)`` their std over seeds (ours: sample std, 0 for one seed; the paper's: the
printed "mean±std", else NaN); ``run_mean`` / ``run_std`` a store metric's mean per run, then mean /
std over the usable seeds.

Tolerances ("within 2 points") are noise-aware: :func:`close` accepts a difference within
``max(stated, NOISE_K·sqrt(σa² + σb²))``, so seeds' spread widens the paper's stated tolerance and
never narrows it; on numbers without a std (most of the paper's) it is the stated tolerance.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from rich.table import Table

from fedbench.report.forgetting import continual_summary
from fedbench.report.paper import PAPER_SCALE, compare, paper_runs, paper_scales
from fedbench.report.reference import (
    ACCURACY_METRICS,
    CONTINUAL_METRICS,
    load_reference,
    reference_frame,
    reference_text,
)
from fedbench.report.tables import summarize
from fedbench.rooms import paper_names, paper_part

VERDICTS = ("holds", "fails", "inconclusive", "not run", "not reported")
KINDS = ("paper", "accounting")  # a result the paper states / an identity of fedbench's bookkeeping
NOISE_K = 2.0  # a tolerance covers NOISE_K standard deviations of the difference (see close)
PERCENT_METRICS = (*ACCURACY_METRICS, *CONTINUAL_METRICS)  # stored as fractions, compared in percent


@dataclass(frozen=True)
class Check:
    """One elementary comparison. ``ok`` is None when a number it needs is missing, or when its
    numbers cannot decide it (``inconclusive``, e.g. neither side reached the target)."""

    text: str
    ok: bool | None
    inconclusive: bool = False


@dataclass(frozen=True)
class Verdict:
    verdict: str  # one of VERDICTS
    checks: tuple[Check, ...] = ()
    note: str = ""

    @property
    def checked(self) -> list[Check]:
        """The decided checks (passed or failed)."""
        return [c for c in self.checks if c.ok is not None]

    @property
    def inconclusive(self) -> list[Check]:
        """The checks that had their numbers but could not decide."""
        return [c for c in self.checks if c.inconclusive]

    @property
    def evidence(self) -> str:
        """The decided and the inconclusive comparisons with their numbers (and the note), one line."""
        return "; ".join(
            [*(c.text for c in self.checked), *(c.text for c in self.inconclusive), *([self.note] if self.note else [])]
        )

    def short(self) -> str:
        """E.g. ``holds (9/9 hold)``, ``fails (41/42 hold)``, ``holds (3/3 hold; 3 of 9 checked)``,
        ``holds (2/2 hold; 1 inconclusive)``, ``inconclusive (2 inconclusive)``, ``not run (0 of 9 checked)``."""
        n, k, total = len(self.checked), len(self.inconclusive), len(self.checks)
        if not total:
            return self.verdict
        if not n + k:
            return f"{self.verdict} (0 of {total} checked)"
        parts = [f"{sum(bool(c.ok) for c in self.checked)}/{n} hold"] if n else []
        parts += [f"{k} inconclusive"] if k else []
        parts += [f"{n + k} of {total} checked"] if n + k < total else []
        return f"{self.verdict} ({'; '.join(parts)})"


def judge(checks: list[Check], note: str = "") -> Verdict:
    """``fails`` if a decided check fails, ``holds`` if every decided one passes (inconclusive ones
    aside: :meth:`Verdict.short` counts them), ``inconclusive`` if every check with its numbers is
    inconclusive, ``not run`` if no check has its numbers."""
    checked = [c for c in checks if c.ok is not None]
    if checked:
        verdict = "fails" if any(not c.ok for c in checked) else "holds"
    else:
        verdict = "inconclusive" if any(c.inconclusive for c in checks) else "not run"
    return Verdict(verdict, tuple(checks), note)


def greater(context: str, left: str, a: float, right: str, b: float, fmt: str = ".2f") -> Check:
    """The check ``a > b`` written with its numbers, e.g. ``CIFAR-10 IID.: FedMIM 86.39 > FedAvg 82.16``."""
    if pd.isna(a) or pd.isna(b):
        return Check(f"{context}: {left} vs {right} missing", None)
    ok = bool(a > b)
    return Check(f"{context}: {left} {a:{fmt}} {'>' if ok else '≤'} {right} {b:{fmt}}", ok)


def within(context: str, what: str, value: float, lo: float, hi: float, fmt: str = ".2f") -> Check:
    """The check ``lo ≤ value ≤ hi`` (up to 1e-9, so 57.10 − 58.10 is ≥ −1) written with its numbers."""
    if pd.isna(value):
        return Check(f"{context}: {what} missing", None)
    ok = bool(lo - 1e-9 <= value <= hi + 1e-9)
    if hi == math.inf:
        return Check(f"{context}: {what} {value:{fmt}} {'≥' if ok else '<'} {lo:{fmt}}", ok)
    return Check(f"{context}: {what} {value:{fmt}} {'within' if ok else 'outside'} [{lo:{fmt}}, {hi:{fmt}}]", ok)


def fewer(context: str, left: str, a: float, right: str, b: float, unit: str = "rounds") -> Check:
    """The check ``a < b`` for counts where +inf means "never reached" (rounds, bits to a target;
    the paper's ``-`` and ``>X``); inconclusive when neither side reached the target."""
    if pd.isna(a) or pd.isna(b):
        return Check(f"{context}: {left} vs {right} missing", None)
    show = lambda v: "never" if math.isinf(v) else f"{v:,.4g}"  # noqa: E731
    if math.isinf(a) and math.isinf(b) and a > 0 and b > 0:
        return Check(
            f"{context}: {left} never, {right} never ({unit}): neither reached the target, inconclusive",
            None,
            inconclusive=True,
        )
    ok = bool(a < b)
    return Check(f"{context}: {left} {show(a)} {'<' if ok else '≥'} {right} {show(b)} {unit}", ok)


def tolerance(stated: float, *stds: float, k: float = NOISE_K) -> tuple[float, str]:
    """``max(stated, k·sqrt(Σσ²))`` over the stds that exist (NaN ones are left out), and how it
    was set: ``"stated 2"`` or ``"2σ = 3.10 > stated 2"``."""
    known = [float(s) for s in stds if pd.notna(s)]
    noise = k * math.sqrt(sum(s * s for s in known)) if known else math.nan
    if pd.notna(noise) and noise > stated:
        return noise, f"{k:g}σ = {noise:.2f} > stated {stated:g}"
    return stated, f"stated {stated:g}" + (f" ≥ {k:g}σ = {noise:.2f}" if pd.notna(noise) else "")


def close(
    context: str,
    left: str,
    a: float,
    right: str,
    b: float,
    stated: float,
    stds: tuple[float, ...] = (),
    side: str = "both",
    fmt: str = ".2f",
) -> Check:
    """``a − b`` within the tolerance ``t`` of :func:`tolerance` (``stds``: σa, σb): ``|a − b| ≤ t``
    (``side="both"``), ``a − b ≥ −t`` (``"above"``: a not below b by more than t) or ``a − b ≤ t``
    (``"below"``), written with both numbers, the difference and how ``t`` was set."""
    if pd.isna(a) or pd.isna(b):
        return Check(f"{context}: {left} vs {right} missing", None)
    tol, why = tolerance(stated, *stds)
    d = a - b
    lo, hi = {"both": (-tol, tol), "above": (-tol, math.inf), "below": (-math.inf, tol)}[side]
    ok = bool(lo - 1e-9 <= d <= hi + 1e-9)
    rel = {"both": ("within ±", "outside ±"), "above": ("≥ -", "< -"), "below": ("≤ ", "> ")}[side][not ok]
    return Check(f"{context}: {left} {a:{fmt}} − {right} {b:{fmt}} = {d:{fmt}} {rel}{tol:{fmt}} ({why})", ok)


def _printed_std(cell) -> float:
    """The std of a printed ``"mean±std"`` cell (C-FLAG Tables 7, 8), else NaN."""
    if not isinstance(cell, str) or "±" not in cell:
        return math.nan
    try:
        return float(cell.split("±")[1])
    except ValueError:
        return math.nan


class Numbers:
    """What a claim reads. ``acc(table)``: the reference table's rows × columns (percent, NaN if
    missing); ``acc_std(table)``: their std over seeds, where the source has one (the paper: a
    printed "mean±std"; else NaN); ``run_mean(table, column, metric)`` / ``run_std``: per row label,
    the mean / std over usable seeds of each run's mean of a store metric, or None when the source
    has no such numbers (the paper)."""

    name = "paper"

    def __init__(self, paper: str) -> None:
        self.paper = paper

    def acc(self, table: str) -> pd.DataFrame:
        return reference_frame(self.paper, table)

    def acc_std(self, table: str) -> pd.DataFrame:
        ref = self.acc(table)
        return reference_text(self.paper, table).map(_printed_std).reindex(index=ref.index, columns=ref.columns)

    def run_mean(self, table: str, column: str, metric: str) -> pd.Series | None:
        return None

    def run_std(self, table: str, column: str, metric: str) -> pd.Series | None:
        return None


class StoreNumbers(Numbers):
    """The reproduced numbers of one scale of the store. Scenarios without a paper table (ablation
    figures) are read by name: ``scenario_acc`` / ``scenario_std`` (final or top accuracy, %, mean /
    std over the usable seeds) and ``continual_acc`` (a continual scenario's Acc, %)."""

    def __init__(self, store, paper: str, scale: str) -> None:
        super().__init__(paper)
        self.store, self.scale, self.name = store, scale, f"ours ({scale})"
        self._frames: dict[tuple[str, str], pd.DataFrame] = {}

    def _cells(self, table: str, value: str) -> pd.DataFrame:
        """``value_mean`` or ``value_std`` of :func:`compare` in the paper's units and layout."""
        if (table, value) not in self._frames:
            ref = reference_frame(self.paper, table)
            frame = compare(self.store, self.paper, table, self.scale)
            scale = frame["metric"].map(lambda m: 100.0 if m in PERCENT_METRICS else 1.0)
            ours = frame.assign(v=frame[value] * scale).pivot(index="row", columns="column", values="v")
            self._frames[(table, value)] = ours.reindex(index=ref.index, columns=ref.columns)
        return self._frames[(table, value)]

    def acc(self, table: str) -> pd.DataFrame:
        return self._cells(table, "value_mean")

    def acc_std(self, table: str) -> pd.DataFrame:
        """Sample std over the usable seeds (0 for one seed; NaN for rounds/bits to a target)."""
        return self._cells(table, "value_std")

    def _name(self, scenario: str) -> str:
        return scenario if self.scale == PAPER_SCALE else f"{scenario}.{self.scale}"

    def _summary(self, scenario: str) -> pd.DataFrame | None:
        runs = self.store.runs(self._name(scenario))
        return None if runs.empty else summarize(runs, self.store.metrics(runs["run_id"])).set_index("algorithm")

    def scenario_acc(self, scenario: str, which: str = "final") -> pd.Series:
        """``top``/``final`` accuracy (%) per label of a scenario without a paper table (an ablation
        figure), at this scale: ``<scenario>.<scale>`` (the bare name at the paper scale); empty if
        it has no runs."""
        summary = self._summary(scenario)
        return pd.Series(dtype=float) if summary is None else summary[f"{which}_acc_mean"] * 100

    def scenario_std(self, scenario: str, which: str = "final") -> pd.Series:
        """The std over seeds (%, 0 for one seed) beside :meth:`scenario_acc`."""
        summary = self._summary(scenario)
        return pd.Series(dtype=float) if summary is None else summary[f"{which}_acc_std"] * 100

    def continual_acc(self, scenario: str) -> pd.Series:
        """A continual scenario's Acc (%) per label, mean over the seeds with a complete accuracy
        matrix; empty if it has no runs."""
        name = self._name(scenario)
        if self.store.runs(name).empty:
            return pd.Series(dtype=float)
        return continual_summary(self.store, name).set_index("algorithm")["acc_mean"] * 100

    def _per_run(self, table: str, column: str, metric: str) -> pd.Series:
        """Each usable run's mean of ``metric`` over its rounds, indexed by (row, run_id)."""
        runs = paper_runs(self.store, self.paper, table)
        runs = runs[(runs["scale"] == self.scale) & (runs["column"] == column) & (runs["status"] == "finished")]
        m = self.store.metrics(runs["run_id"])
        m = m[np.isfinite(m[metric])].merge(runs[["run_id", "row"]], on="run_id")
        return m.groupby(["row", "run_id"])[metric].mean()

    def run_mean(self, table: str, column: str, metric: str) -> pd.Series:
        return self._per_run(table, column, metric).groupby(level="row").mean()

    def run_std(self, table: str, column: str, metric: str) -> pd.Series:
        """Sample std over seeds of the per-run means (0 for one seed)."""
        return self._per_run(table, column, metric).groupby(level="row").std(ddof=1).fillna(0.0)


@dataclass(frozen=True)
class Claim:
    id: str
    statement: str
    check: Callable[[Numbers], Verdict] = field(repr=False)
    kind: str = "paper"  # one of KINDS


@dataclass(frozen=True)
class ClaimResult:
    id: str
    statement: str
    ours: Verdict
    paper: Verdict
    kind: str = "paper"


CLAIMS: dict[str, list[Claim]] = {}


def claim(paper: str, id: str, statement: str, kind: str = "paper") -> Callable:
    """Register ``fn(numbers) -> Verdict`` as claim ``id`` of ``paper`` (in registration order);
    ``kind="accounting"`` for an identity of fedbench's bookkeeping rather than a paper result."""
    if kind not in KINDS:
        raise ValueError(f"claim {paper} {id}: kind {kind!r} is not one of {', '.join(KINDS)}")

    def register(fn: Callable[[Numbers], Verdict]) -> Callable[[Numbers], Verdict]:
        CLAIMS.setdefault(paper, []).append(Claim(id, statement, fn, kind))
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
    if paper not in CLAIMS and paper in paper_names():
        paper_part(paper, "claims")  # registers the room's claims
    if paper not in CLAIMS:
        raise ValueError(f"no claims registered for paper {paper!r}; papers with claims: {', '.join(CLAIMS)}")
    ours, theirs = StoreNumbers(store, paper, resolve_scale(store, paper, scale)), Numbers(paper)
    return [ClaimResult(c.id, c.statement, c.check(ours), c.check(theirs), c.kind) for c in CLAIMS[paper]]


def tally(verdicts: list[Verdict]) -> str:
    """E.g. ``5 hold, 3 fail, 1 inconclusive, 2 not reported`` (the states that occur, in VERDICTS order)."""
    words = {"holds": "hold", "fails": "fail"}
    counts = {v: sum(x.verdict == v for x in verdicts) for v in VERDICTS}
    return ", ".join(f"{n} {words.get(v, v)}" for v, n in counts.items() if n)


def rich_claims(results: list[ClaimResult], title: str) -> Table:
    """Verdicts for the terminal: id, statement, ours, paper; the accounting identities in a
    section of their own after the paper's claims."""
    colors = {"holds": "green", "fails": "red", "inconclusive": "magenta", "not run": "yellow", "not reported": "dim"}
    table = Table(title=title)
    for col in ("id", "claim", "ours", "paper"):
        table.add_column(col, no_wrap=col != "claim")
    for kind in KINDS:
        part = [r for r in results if r.kind == kind]
        if part and kind != KINDS[0]:
            table.add_section()
        for r in part:
            table.add_row(
                r.id + ("" if kind == "paper" else f" ({kind})"),
                r.statement,
                *(f"[{colors[v.verdict]}]{v.short()}[/]" for v in (r.ours, r.paper)),
            )
    return table


def format_claims(results: list[ClaimResult], paper: str, scale: str) -> str:
    """Markdown: the paper's claims as a verdict table with a tally, the accounting identities in a
    table of their own, then each claim's checks with their numbers for ours and the paper."""
    short = load_reference(paper).get("short", paper)
    claims = [r for r in results if r.kind == "paper"]
    accounting = [r for r in results if r.kind == "accounting"]
    head = ["| id | claim | ours | paper |", "|---|---|---|---|"]
    row = lambda r: f"| {r.id} | {r.statement} | {r.ours.short()} | {r.paper.short()} |"  # noqa: E731
    lines = [
        f"# {short} claims, {scale} scale",
        "",
        f"ours: the reproduced numbers at the {scale} scale; paper: the published numbers. Verdicts: holds (every "
        "decided check passes), fails (one does not), inconclusive (the checks have their numbers but cannot decide, "
        "e.g. neither method reached the target), not run (the runs it needs are missing), not reported (the paper "
        "gives no numbers); (h/k hold; i inconclusive; m of n checked): h of the k decided checks pass, i more could "
        f"not decide, m of the n checks had their numbers. Tolerances are max(the stated one, {NOISE_K:g}σ of the "
        "difference over seeds).",
        "",
        f"**{len(claims)} claims of the paper.** ours: {tally([r.ours for r in claims])}; "
        f"paper: {tally([r.paper for r in claims])}.",
        "",
        *head,
        *map(row, claims),
    ]
    if scale != PAPER_SCALE:
        lines += [
            "",
            f"_The {scale} scale uses substitute datasets/models and fewer rounds: "
            "only orderings are comparable with the paper._",
        ]
    if accounting:
        lines += [
            "",
            "## Accounting identities (not counted among the paper's claims)",
            "",
            "Identities of fedbench's bookkeeping (bits per compressor or per algorithm), checked on the "
            "runs' logged numbers and on the paper's printed ones; they test the accounting, not the paper's "
            "results (unit tests: tests/test_accounting.py).",
            "",
            *head,
            *map(row, accounting),
        ]
    for r in [*claims, *accounting]:
        lines += ["", f"## {r.id}: {r.statement}" + ("" if r.kind == "paper" else f" ({r.kind})")]
        for who, v in (("ours", r.ours), ("paper", r.paper)):
            lines += ["", f"**{who}: {v.short()}**" + (f" — {v.note}" if v.note else "")]
            lines += [f"- {c.text}" for c in v.checked]
            lines += [f"- {c.text}" for c in v.inconclusive]
    return "\n".join(lines) + "\n"


def claims_name(paper: str, scale: str) -> str:
    """``<paper>_claims_<scale>.md``: the claims report's file name."""
    return f"{paper}_claims_{scale}.md"


def write_claims(store, paper: str, out_dir: Path, scale: str | None = None) -> Path:
    """Write ``<out_dir>/<paper>_claims_<scale>.md`` (scale: see :func:`resolve_scale`)."""
    scale = resolve_scale(store, paper, scale)
    text = format_claims(check_claims(store, paper, scale), paper, scale)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / claims_name(paper, scale)
    path.write_text(text, encoding="utf-8")
    return path
