"""FedQVR Table I's communication-cost columns (#C-XX) recomputed from the models' sizes and the
printed round counts (#R-XX), without training (FedQVR Sec. VI-A; notes §7 and §9).

Only the uplink is counted. Bits each sampled device sends per round:

* full precision (FedAvg, FedDyn, FedAdam): ``32·d``
* SCAFFOLD (Δy and Δc): ``2·32·d``
* quantized with B = 2 bits (FedPAQ, FedCOMGATE, FedCAMS, FedQVR): ``d(B+1) + μ`` with
  ``μ = 2·32·(#parameter tensors)`` (fp32 min and max per tensor); FedQVR's 32-bit scalar
  a/(ηẼ_i) is not counted (the paper does not count it).

A round costs m times that (m = 10 sampled devices) and ``#C-XX = #R-XX × per-round / unit``
(unit 1e9 for CIFAR-10, 1e8 for MNIST); a ``">500"`` round count prints the bound 500 × per-round
as ``">X"``; crashed rows (``"—"``) are skipped.

d and the tensor count come from the models (``mlp`` 784-200-200-10: d = 199,210, 6 tensors;
``cnn_fedqvr``: d = 2,511,690, 18 tensors). The paper's CIFAR-10 model has d = 2,513,418 and layer
sizes it does not state, so the check uses the **paper's d** (:data:`PAPER_D`, the ``paper_d``
override of :func:`cost_check`) with our tensor count (9 layers × (W, b), as the paper's μ = 1152);
the values with our model's d are shown beside it.

Agreement: ours and the printed value, both at 4 significant figures, differ by at most one unit
in the 4th digit. The paper's rounding is loose by that much in three cells (81.596 → 81.59,
5.8605 → 5.860, 3.3489 → 3.350), reported as ``last digit``; five cells are typos (notes §9,
:data:`KNOWN_TYPOS`), each explained by the round count its printed value implies.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from rich.table import Table

from fedbench.compress import BITS_PER_FLOAT, bound_bits, quantized_payload_bits
from fedbench.models import build_model, count_parameters
from fedbench.report.reference import column_specs, reference_table
from fedbench.report.tables import markdown_grid, write_formats

CLIENTS_PER_ROUND = 10  # m
QUANT_BITS = 2  # B of every quantized method in Table I
ROUNDS = 500  # R: a ">500" round count is charged 500 rounds

# Row label of Table I → registered algorithm name.
TABLE_I_ALGORITHMS = {
    "FedAvg": "fedavg",
    "SCAFFOLD": "scaffold",
    "FedDyn": "feddyn",
    "FedAdam": "fedadam",
    "FedPAQ": "fedpaq",
    "FedCOMGATE": "fedcomgate",
    "FedCAMS": "fedcams",
    "FedQVR": "fedqvr",
}
# How many fp32 vectors of size d each full-precision method uploads (SCAFFOLD: Δy and Δc).
FULL_PRECISION_VECTORS = {"fedavg": 1, "feddyn": 1, "fedadam": 1, "scaffold": 2}
QUANTIZED = ("fedpaq", "fedcomgate", "fedcams", "fedqvr")


def payload_formula(algorithm: str) -> str:
    """The uplink formula per device and round of a registered algorithm name."""
    if algorithm in QUANTIZED:
        return "d(B+1) + μ"
    n = _vectors(algorithm)
    return "32d" if n == 1 else f"{n}·32d"


def uplink_bits(algorithm: str, d: int, tensors: int, bits: int = QUANT_BITS) -> int:
    """Bits one sampled device uploads in one round (FedQVR Sec. VI-A): 32·d per fp32 vector, or
    d(B+1) + μ with μ = 2·32·``tensors`` for the quantized methods."""
    if algorithm in QUANTIZED:
        return quantized_payload_bits(d, bits, tensors)
    return _vectors(algorithm) * BITS_PER_FLOAT * d


def _vectors(algorithm: str) -> int:
    if algorithm not in FULL_PRECISION_VECTORS:
        known = ", ".join([*FULL_PRECISION_VECTORS, *QUANTIZED])
        raise ValueError(f"no Table I uplink formula for algorithm {algorithm!r}; known: {known}")
    return FULL_PRECISION_VECTORS[algorithm]


@dataclass(frozen=True)
class CostSetting:
    """One block of Table I: its reference table, our model for it and the paper's d."""

    table: str
    dataset: str
    model: str
    input_shape: tuple[int, ...]
    num_classes: int
    paper_d: int
    model_params: dict[str, Any] = field(default_factory=dict, hash=False)


SETTINGS = (
    CostSetting("I-CIFAR-10", "CIFAR-10", "cnn_fedqvr", (3, 32, 32), 10, 2_513_418),
    CostSetting("I-MNIST", "MNIST", "mlp", (1, 28, 28), 10, 199_210, {"hidden": [200, 200]}),
)
# The paper's d per table (Sec. VI-A), used for the check; pass ``paper_d=None`` for our models' d.
PAPER_D = {s.table: s.paper_d for s in SETTINGS}

# (table, row, column) of the five #C cells that contradict #R × per-round (notes §9).
KNOWN_TYPOS = frozenset(
    {
        ("I-CIFAR-10", "FedAvg", "CIFAR-10 + HLU #C-70 (10^9)"),
        ("I-CIFAR-10", "SCAFFOLD", "CIFAR-10 + HLU #C-70 (10^9)"),
        ("I-CIFAR-10", "FedQVR", "CIFAR-10 + HLU #C-70 (10^9)"),
        ("I-MNIST", "FedDyn", "MNIST + HLU #C-97 (10^8)"),
        ("I-MNIST", "FedAdam", "MNIST + HLU #C-97 (10^8)"),
    }
)


@dataclass(frozen=True)
class ModelSize:
    """Trainable parameters d and parameter tensors of a model; μ = 2·32 bits per tensor."""

    d: int
    tensors: int

    @property
    def mu(self) -> int:
        return bound_bits(self.tensors)


def model_size(setting: CostSetting) -> ModelSize:
    """d and the tensor count of the setting's model, built with the model registry."""
    module = build_model(setting.model, setting.model_params, setting.input_shape, setting.num_classes)
    return ModelSize(count_parameters(module), sum(1 for p in module.parameters() if p.requires_grad))


def per_round_bits(algorithm: str, size: ModelSize, m: int = CLIENTS_PER_ROUND) -> int:
    """Uplink bits the server receives in one round: m × :func:`uplink_bits`."""
    return m * uplink_bits(algorithm, size.d, size.tensors)


def sig4(x: float) -> str:
    """``x`` to 4 significant figures, trailing zeros kept as the paper prints them: 304 → ``304.0``."""
    return f"{x:#.4g}".rstrip(".")


def cell_text(cell: Any) -> str | None:
    """A reference cell as printed: text as it is, round counts (ints) whole, bits to 4 s.f. (``5.860``)."""
    if cell is None or isinstance(cell, str):
        return cell
    return str(cell) if isinstance(cell, int) else sig4(cell)


def last_digit_units(ours: float, printed: float) -> int:
    """ours − printed in units of the printed value's 4th significant digit, ours rounded to it."""
    unit = 10.0 ** (math.floor(math.log10(abs(printed))) - 3)
    return math.floor(ours / unit + 0.5) - round(printed / unit)


def status_of(ours: float, printed: float) -> str:
    """``exact`` (same at 4 s.f.), ``last digit`` (one unit apart in the 4th digit) or ``disagree``."""
    diff = abs(last_digit_units(ours, printed))
    return "exact" if diff == 0 else "last digit" if diff == 1 else "disagree"


def typo_note(printed_text: str, rounds: int, per_round: int, unit: float) -> str:
    """Why a printed #C contradicts #R: the whole number of rounds its value implies, if any."""
    printed = float(printed_text)
    ours = rounds * per_round / unit
    implied = printed * unit / per_round
    n = round(implied)
    if n >= 1 and status_of(n * per_round / unit, printed) != "disagree":
        beyond = f", more than the {ROUNDS} rounds run" if n > ROUNDS else ""
        return f"paper typo: {printed_text} implies {n} rounds{beyond}; #R = {rounds} gives {sig4(ours)}"
    return (
        f"paper typo: {printed_text} matches no whole number of rounds ({implied:.1f}); "
        f"#R = {rounds} gives {sig4(ours)}"
    )


def _reach_columns(paper: str, table: str) -> list[tuple[str, str, str, float]]:
    """(setting, #R column, #C column, unit) for each #C column of the table."""
    specs = column_specs(paper, table)
    rounds = {(s.setting, s.target): s.name for s in specs if s.metric == "rounds_to"}
    return [(s.setting, rounds[(s.setting, s.target)], s.name, s.unit) for s in specs if s.metric == "uplink_bits_to"]


def cost_check(paper: str = "fedqvr", paper_d: Mapping[str, int] | None = PAPER_D) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per_round, cells) for Table I.

    ``per_round``: one row per method with its formula and bits per round for each setting, with
    the paper's d and with our model's. ``cells``: one row per #C cell of a non-crashed row, with
    the printed #R and #C, ours (with ``paper_d``, or our models' d where ``paper_d`` is None) and
    ours with our model's d, the ``status``, ``agree``, ``known_typo`` and a ``note``."""
    if paper != "fedqvr":
        raise ValueError(f"no communication-cost accounting for paper {paper!r}; available: fedqvr")
    per_round_rows: dict[str, dict[str, Any]] = {
        label: {"Method": label, "uplink per device": payload_formula(name)}
        for label, name in TABLE_I_ALGORITHMS.items()
    }
    cells = []
    for setting in SETTINGS:
        ours = model_size(setting)
        checked = ModelSize((paper_d or {}).get(setting.table, ours.d), ours.tensors)
        for label, name in TABLE_I_ALGORITHMS.items():
            per_round_rows[label][f"{setting.dataset} (d = {checked.d:,})"] = per_round_bits(name, checked)
            if checked.d != ours.d:
                per_round_rows[label][f"{setting.dataset} ({setting.model}, d = {ours.d:,})"] = per_round_bits(
                    name, ours
                )
        ref = reference_table(paper, setting.table)
        printed = {label: dict(zip(ref["columns"], map(cell_text, values))) for label, values in ref["rows"].items()}
        for case, r_col, c_col, unit in _reach_columns(paper, setting.table):
            for label, name in TABLE_I_ALGORITHMS.items():
                cell = _check_cell(
                    printed[label][r_col],
                    printed[label][c_col],
                    per_round_bits(name, checked),
                    per_round_bits(name, ours),
                    unit,
                    (setting.table, label, c_col) in KNOWN_TYPOS,
                )
                if cell is not None:
                    cells.append({"table": setting.table, "case": case, "Method": label, "column": c_col, **cell})
    return pd.DataFrame(list(per_round_rows.values())).set_index("Method"), pd.DataFrame(cells)


def _check_cell(
    r_text: str | None, c_text: str | None, per_round: int, per_round_model: int, unit: float, known: bool
) -> dict[str, Any] | None:
    """One #C cell against #R × per-round; None for a crashed ("—") row."""
    if r_text is None or r_text.strip() in ("—", "-"):
        return None
    bound = r_text.startswith(">")
    rounds = ROUNDS if bound else int(r_text.replace(",", ""))
    ours, ours_model = rounds * per_round / unit, rounds * per_round_model / unit
    c_text = c_text or ""
    if c_text.startswith(">") != bound or c_text.strip() in ("", "—", "-"):
        status, note = "disagree", f"#R is {r_text} but #C is printed {c_text or 'empty'!r}"
        printed = math.nan
    else:
        printed = float(c_text.lstrip(">"))
        status = status_of(ours, printed)
        note = {"exact": "", "last digit": f"paper's rounding: {ours:.6g} printed {c_text}"}.get(status, "")
        if status == "disagree":
            note = (
                typo_note(c_text.lstrip(">"), rounds, per_round, unit)
                if known
                else f"not a known typo: #R × per-round = {sig4(ours)}"
            )
    if known and status != "disagree":
        note = "listed as a paper typo (notes §9) but agrees"
    return {
        "rounds_printed": r_text,
        "rounds": rounds,
        "per_round_bits": per_round,
        "bits": rounds * per_round,
        "ours": ours,
        "ours_4sf": f"{'>' if bound else ''}{sig4(ours)}",
        "printed": printed,
        "printed_text": c_text,
        "status": status,
        "agree": status != "disagree",
        "known_typo": known,
        "note": note,
        "ours_model_d": ours_model,
        "ours_model_d_4sf": f"{'>' if bound else ''}{sig4(ours_model)}",
        "agree_model_d": printed == printed and status_of(ours_model, printed) != "disagree",
    }


@dataclass
class CostReport:
    """The per-round table and the cell-by-cell check of Table I's #C columns."""

    paper: str
    per_round: pd.DataFrame
    cells: pd.DataFrame

    @property
    def unexplained(self) -> pd.DataFrame:
        """Disagreements that are not known typos, and known typos that do not disagree."""
        c = self.cells
        return c[(~c["agree"] & ~c["known_typo"]) | (c["agree"] & c["known_typo"])]

    @property
    def passes(self) -> bool:
        """Every disagreement is a known paper typo and every known typo disagrees."""
        return self.unexplained.empty

    def rows_agreeing(self) -> tuple[int, int]:
        """(rows whose #C cells all agree, rows checked), a row being (table, case, method)."""
        rows = self.cells.groupby(["table", "case", "Method"], sort=False)["agree"].all()
        return int(rows.sum()), len(rows)


def costs_report(paper: str = "fedqvr", paper_d: Mapping[str, int] | None = PAPER_D) -> CostReport:
    """:func:`cost_check` bundled for ``fedbench costs``; an unknown paper is a ValueError."""
    return CostReport(paper, *cost_check(paper, paper_d))


def verdict(report: CostReport) -> str:
    """One line: how many cells and rows agree, and whether the disagreements are the known typos."""
    c = report.cells
    exact, last = int((c["status"] == "exact").sum()), int((c["status"] == "last digit").sum())
    ok_rows, rows = report.rows_agreeing()
    head = (
        f"{exact + last}/{len(c)} #C cells agree with #R × per-round to 4 significant figures "
        f"({exact} exactly, {last} one unit apart in the 4th digit); {ok_rows}/{rows} rows agree"
    )
    typos = int((~c["agree"] & c["known_typo"]).sum())
    if report.passes:
        return f"{head}; the {typos} disagreements are the known paper typos"
    return f"{head}; {len(report.unexplained)} cell(s) not explained by the known typos"


def _grid(report: CostReport, table: str, column: str) -> tuple[list[str], list[list[str]]]:
    """Table I's #C columns with ``paper / ours`` cells (✗ disagree, † one unit apart)."""
    c = report.cells[report.cells["table"] == table]
    columns = list(dict.fromkeys(c["column"]))
    mark = {"exact": "", "last digit": " †", "disagree": " ✗"}
    cells = {
        (r["Method"], r["column"]): f"{r['printed_text']} / {r[column]}"
        + (mark[r["status"]] if column == "ours_4sf" else ("" if r["agree_model_d"] else " ✗"))
        for _, r in c.iterrows()
    }
    rows = [[m, *(cells.get((m, col), "—") for col in columns)] for m in TABLE_I_ALGORITHMS]
    return ["Method", *columns], rows


def rich_costs(report: CostReport) -> list[Table]:
    """The per-round table and the disagreements, for the terminal."""
    t = Table(title=f"FedQVR Table I: uplink bits per round (m = {CLIENTS_PER_ROUND}, B = {QUANT_BITS})")
    for i, h in enumerate(["Method", *report.per_round.columns]):
        t.add_column(h, justify="left" if i == 0 else "right")
    for method, row in report.per_round.iterrows():
        t.add_row(str(method), *(v if isinstance(v, str) else f"{int(v):,}" for v in row))
    out = [t]
    bad = report.cells[(~report.cells["agree"]) | report.cells["known_typo"]]
    if not bad.empty:
        d = Table(title="#C cells that disagree with #R × per-round")
        for h in ("table", "Method", "column", "#R", "paper", "ours", "note"):
            d.add_column(h)
        for _, r in bad.iterrows():
            d.add_row(
                r["table"], r["Method"], r["column"], r["rounds_printed"], r["printed_text"], r["ours_4sf"], r["note"]
            )
        out.append(d)
    return out


def format_costs(report: CostReport, fmt: str) -> str:
    """Markdown (per-round bits, Table I's #C grids, the disagreements, the verdict) or CSV (one row per cell)."""
    if fmt == "csv":
        buf = io.StringIO()
        report.cells.to_csv(buf, index=False, na_rep="", lineterminator="\n", float_format="%.10g")
        return buf.getvalue()
    if fmt != "markdown":
        raise ValueError(f"unknown costs table format {fmt!r}; allowed: markdown, csv")
    pr = report.per_round
    per_round = [[str(m), *(v if isinstance(v, str) else f"{int(v):,}" for v in row)] for m, row in pr.iterrows()]
    parts = [
        f"## FedQVR Table I: uplink bits per round (m = {CLIENTS_PER_ROUND}, B = {QUANT_BITS})",
        "",
        markdown_grid(["Method", *pr.columns], per_round),
        "_μ = 2·32·(parameter tensors): 1152 for the CIFAR-10 CNN (18 tensors), 384 for the MLP (6). "
        "FedQVR's 32-bit scalar and the downlink are not counted, as in the paper._",
        "",
    ]
    for s in SETTINGS:
        c = report.cells[report.cells["table"] == s.table]
        unit = round(math.log10(_reach_columns(report.paper, s.table)[0][3]))
        parts += [
            f"## FedQVR Table {s.table}: #C (10^{unit} bits), paper / #R × per-round",
            "",
            markdown_grid(*_grid(report, s.table, "ours_4sf")),
            "_✗: disagrees; †: one unit apart in the 4th significant digit (the paper's rounding)._",
            "",
        ]
        if not c["ours_model_d"].equals(c["ours"]):
            n_ok = int(c["agree_model_d"].sum())
            parts += [
                f"With our `{s.model}`'s d (not the paper's), {n_ok}/{len(c)} cells agree:",
                "",
                markdown_grid(*_grid(report, s.table, "ours_model_d_4sf")),
                "",
            ]
    bad = report.cells[(~report.cells["agree"]) | report.cells["known_typo"]]
    if not bad.empty:
        rows = [
            [r["table"], r["Method"], r["column"], r["rounds_printed"], r["printed_text"], r["ours_4sf"], r["note"]]
            for _, r in bad.iterrows()
        ]
        parts += [
            "## Disagreements",
            "",
            markdown_grid(["table", "Method", "column", "#R", "paper", "ours", "note"], rows),
        ]
    parts += [f"**{verdict(report)}.**"]
    return "\n".join(parts) + "\n"


def write_costs(report: CostReport, out_dir: Path) -> list[Path]:
    """``<out_dir>/<paper>_costs.{md,csv}``."""
    return write_formats(out_dir, f"{report.paper}_costs", lambda fmt: format_costs(report, fmt))
