"""Communication-bit tables computed from a model's size and the compressors' payload formulas,
without training (FedCAMS Tables 1 and 2, per client that takes part in all T rounds).

For a compressor with upload size b(d) bits and an uncompressed 32·d-bit broadcast:

* uncompressed: 32·d·2T (FedAMS: full model both ways)
* one-way compression: b(d)·T + 32·d·T (compressed uplink, full downlink: the FedCAMS setting)
* two-way compression: b(d)·2T (both directions compressed; analysed, never run, in the paper)

:func:`bits_report` bundles both tables for ``fedbench bits`` and, for a paper, its printed
tables (the reference tables whose metric is ``formula`` and ``bits``) with a cell-by-cell check
that ours and the paper's agree to 3 significant figures (``3.58e11``).
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import ValidationError
from rich.table import Table

from fedbench.compress import COMPRESSORS, build_compressor
from fedbench.models import build_model, count_parameters
from fedbench.registry import UnknownNameError
from fedbench.report.reference import load_reference, reference_frame
from fedbench.report.tables import markdown_grid, write_formats
from fedbench.scenario.errors import format_errors
from fedbench.scenario.files import parse_yaml
from fedbench.strict import strict_params

# The payload b(d) of each compressor kind as a formula (FedCAMS prints them as its Table 1; the
# paper's rows and model live in its room, fedbench/papers/fedcams/room.py).
PAYLOAD_FORMULAS = {"none": "32d", "sign": "(32 + d)", "topk": "32 × 2k", "stochastic": "(d(B+1) + 64L)"}


def parse_compressor(text: str) -> tuple[str, dict[str, float]]:
    """``sign`` or ``topk:ratio=1/64`` or ``stochastic:bits=2`` → (kind, params); fractions allowed.
    The parameters are checked like a scenario's (strict, :mod:`fedbench.strict`): a ValueError of
    one line names the parameter and what it allows, e.g. ``--compressor topk:ratio=7: ratio: Input
    should be less than or equal to 1, got 7``."""
    kind, _, rest = text.partition(":")
    entry = COMPRESSORS.get(kind)  # unknown kinds fail here with the list of known ones
    params: dict[str, Any] = {}
    for item in filter(None, rest.split(",")):
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise ValueError(f"--compressor {text}: expected KIND:KEY=VALUE,..., e.g. topk:ratio=1/64, got {item!r}")
        num, slash, den = value.partition("/")
        try:
            params[key.strip()] = float(num) / float(den) if slash else parse_yaml(value, f"--compressor {text}")
        except (ValueError, ZeroDivisionError):
            raise ValueError(
                f"--compressor {text}: {key.strip()}: expected a number or a fraction like 1/64, got {value!r}"
            ) from None
    try:
        strict_params(entry.params, params)
    except ValidationError as exc:
        raise ValueError(f"--compressor {text}: {'; '.join(format_errors(exc))}") from None
    return kind, params


def label_of(kind: str, params: dict[str, float]) -> str:
    if kind == "topk":
        return f"Top-k with r = 1/{round(1 / params['ratio'])}"
    if kind == "sign":
        return "Scaled sign"
    if kind == "stochastic":
        return f"Stochastic {int(params['bits'])}-bit"
    return "Uncompressed"


def bits_table(
    model: str,
    input_shape: tuple[int, ...],
    num_classes: int,
    rounds: int,
    compressors: list[tuple[str, dict[str, float]]],
    model_params: dict | None = None,
) -> tuple[int, pd.DataFrame]:
    """(d, table): per-client bits over ``rounds`` rounds for each compressor (FedCAMS Table 2 layout)."""
    module = build_model(model, model_params or {}, input_shape, num_classes)
    d = count_parameters(module)
    layout = tuple(p.numel() for p in module.parameters() if p.requires_grad)
    rows = []
    for kind, params in compressors:
        up = build_compressor(kind, params, layout).payload_bits(d)
        rows.append(
            {
                "Method": label_of(kind, params),
                "Uncompressed": 32 * d * 2 * rounds,
                "One-way Compression": (up + 32 * d) * rounds,
                "Two-way Compression": up * 2 * rounds,
            }
        )
    return d, pd.DataFrame(rows).set_index("Method")


def formula_table(compressors: list[tuple[str, dict[str, float]]]) -> pd.DataFrame:
    """FedCAMS Table 1: the closed forms behind :func:`bits_table`."""
    rows = []
    for kind, params in compressors:
        b = PAYLOAD_FORMULAS[kind]
        rows.append(
            {
                "Method": label_of(kind, params).split(" with")[0],
                "Uncompressed": "32d × 2T",
                "One-way Compression": f"{b} × T + 32d × T",
                "Two-way Compression": f"{b} × 2T",
            }
        )
    return pd.DataFrame(rows).drop_duplicates().set_index("Method")


def parse_shape(text: str) -> tuple[int, ...]:
    """``3x32x32`` (or ``3×32×32``, ``40``) → (3, 32, 32)."""
    try:
        shape = tuple(int(p) for p in text.replace("×", "x").split("x"))
    except ValueError:
        shape = ()
    if not shape or min(shape) < 1:
        raise ValueError(f"--input: expected positive sizes like 3x32x32, got {text!r}")
    return shape


def sig3(x: float) -> str:
    """``x`` to 3 significant figures as the paper prints it: 357566784000 → ``3.58e11``."""
    mantissa, exponent = f"{x:.2e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def _paper_table(paper: str, metric: str) -> tuple[str, pd.DataFrame]:
    """(table id, frame) of the paper's first reference table with this metric."""
    for tid, t in load_reference(paper)["tables"].items():
        if t["metric"] == metric:
            return tid, reference_frame(paper, tid, (metric,))
    raise ValueError(f"paper {paper!r} has no table of {metric} in its reference numbers")


@dataclass
class BitsReport:
    """Tables 1–2 for one model, T and list of compressors; with ``paper``, its printed tables."""

    model: str
    d: int
    rounds: int
    formulas: pd.DataFrame  # Table 1, ours
    table: pd.DataFrame  # Table 2 layout, exact integers
    paper: str | None = None
    paper_table_id: str | None = None
    paper_formulas: pd.DataFrame | None = None
    paper_table: pd.DataFrame | None = None

    def agreement(self) -> pd.DataFrame:
        """One row per cell of ours: ``Method``, ``column``, ``ours`` (exact), ``paper`` (as printed,
        NaN where the paper has no such row), both to 3 s.f., and ``agree`` (None: not checked)."""
        rows = []
        for method, values in self.table.iterrows():
            for col, ours in values.items():
                paper = float("nan")
                if (
                    self.paper_table is not None
                    and method in self.paper_table.index
                    and col in self.paper_table.columns
                ):
                    paper = float(self.paper_table.loc[method, col])
                checked = paper == paper  # not NaN
                rows.append(
                    {
                        "Method": method,
                        "column": col,
                        "ours": int(ours),
                        "paper": paper,
                        "ours_3sf": sig3(ours),
                        "paper_3sf": sig3(paper) if checked else "",
                        "agree": (sig3(ours) == sig3(paper)) if checked else None,
                    }
                )
        return pd.DataFrame(rows)

    @property
    def agrees(self) -> bool:
        """Every cell the paper prints agrees with ours to 3 s.f. (and at least one was checked)."""
        checked = self.agreement()["agree"].dropna()
        return bool(len(checked)) and bool(checked.all())


def bits_report(
    model: str,
    input_shape: str | tuple[int, ...],
    num_classes: int,
    rounds: int,
    compressors: list[str],
    paper: str | None = None,
    model_params: dict | None = None,
) -> BitsReport:
    """Tables 1–2 for ``compressors`` (``sign``, ``topk:ratio=1/64``, ...); unknown names, bad
    shapes and a paper without printed bit tables are ValueErrors."""
    shape = parse_shape(input_shape) if isinstance(input_shape, str) else tuple(input_shape)
    try:
        parsed = [parse_compressor(c) for c in compressors]
        d, table = bits_table(model, shape, num_classes, rounds, parsed, model_params)
    except UnknownNameError as exc:
        raise ValueError(str(exc)) from None
    report = BitsReport(model, d, rounds, formula_table(parsed), table)
    if paper is not None:
        report.paper = paper
        report.paper_table_id, report.paper_table = _paper_table(paper, "bits")
        if any(t["metric"] == "formula" for t in load_reference(paper)["tables"].values()):
            report.paper_formulas = _paper_table(paper, "formula")[1]
    return report


def _formula_rows(report: BitsReport) -> tuple[list[str], list[list[str]]]:
    """Table 1 cells: ours, or ``paper / ours`` where the paper prints that row (not checked: the
    paper writes some forms differently, e.g. ≈ 32(2k + d) × T; Table 2 checks the numbers)."""
    f, p = report.formulas, report.paper_formulas
    rows = []
    for method, values in f.iterrows():
        cells = [str(method)]
        for col, ours in values.items():
            printed = p.loc[method, col] if p is not None and method in p.index and col in p.columns else None
            cells.append(ours if printed is None else f"{printed} / {ours}")
        rows.append(cells)
    return ["Method", *f.columns], rows


def _bits_rows(report: BitsReport) -> tuple[list[str], list[list[str]]]:
    """Table 2 cells: ours to 3 s.f., or ``paper / ours`` (✗ where they differ at 3 s.f.)."""
    cells: dict[tuple[str, str], str] = {}
    for _, r in report.agreement().iterrows():
        if r["agree"] is None:
            cells[(r["Method"], r["column"])] = r["ours_3sf"] if report.paper is None else f"— / {r['ours_3sf']}"
        else:
            cells[(r["Method"], r["column"])] = f"{r['paper_3sf']} / {r['ours_3sf']}" + ("" if r["agree"] else " ✗")
    columns = list(report.table.columns)
    return ["Method", *columns], [[str(m), *(cells[(m, c)] for c in columns)] for m in report.table.index]


def _titles(report: BitsReport) -> tuple[str, str]:
    setting = f"{report.model}, d = {report.d:,}, T = {report.rounds}"
    if report.paper is None:
        return f"Table 1: bit formulas ({setting})", f"Table 2 layout: bits per client over T rounds ({setting})"
    short = load_reference(report.paper).get("short", report.paper)
    return (
        f"{short} Table 1: bit formulas, paper / ours",
        f"{short} Table {report.paper_table_id}: bits per client over T rounds, paper / ours ({setting})",
    )


def verdict(report: BitsReport) -> str:
    """One line: how many printed cells agree with ours to 3 significant figures."""
    a = report.agreement()["agree"].dropna()
    return f"{int(a.sum())}/{len(a)} printed cells agree with ours to 3 significant figures"


def rich_bits(report: BitsReport) -> list[Table]:
    """Both tables for the terminal."""
    out = []
    caption = None if report.paper is None else "each cell: the paper's (top) and ours (bottom)"
    for title, (headers, rows) in zip(_titles(report), (_formula_rows(report), _bits_rows(report))):
        t = Table(title=title, caption=caption)
        for i, h in enumerate(headers):
            t.add_column(h, justify="left" if i == 0 else "right", no_wrap=i == 0)
        for r in rows:
            t.add_row(*(c.replace(" / ", "\n") for c in r))
        out.append(t)
    return out


def format_bits(report: BitsReport, fmt: str) -> str:
    """Markdown (Table 1, Table 2 with 3-s.f. cells, then the exact numbers) or CSV (one row per
    Table 2 cell with the exact and 3-s.f. values and the agreement)."""
    if fmt == "csv":
        buf = io.StringIO()
        report.agreement().to_csv(buf, index=False, na_rep="", lineterminator="\n")
        return buf.getvalue()
    if fmt != "markdown":
        raise ValueError(f"unknown bits table format {fmt!r}; allowed: markdown, csv")
    t1, t2 = _titles(report)
    exact = [[str(m), *(f"{int(v):,}" for v in row)] for m, row in report.table.iterrows()]
    parts = [
        f"## {t1}",
        "",
        markdown_grid(*_formula_rows(report)),
        f"## {t2}",
        "",
        markdown_grid(*_bits_rows(report)),
        "Exact values (ours):",
        "",
        markdown_grid(["Method", *report.table.columns], exact),
        "_Per client that takes part in every round: uncompressed 32d up and down; one-way: the compressed "
        "upload b(d) plus the uncompressed 32d broadcast; two-way: b(d) both ways. b(d) = d + 32 for scaled "
        "sign, 64·k with k = max(⌊r·d⌋, 1) for top-k; d counts trainable parameters only._",
    ]
    if report.paper is not None:
        parts += ["", f"**{verdict(report)}.**"]
    return "\n".join(parts) + "\n"


def bits_stem(paper: str | None, model: str, rounds: int) -> str:
    """``<paper>_table<id>`` (the paper's bits table) with a paper, else ``bits_<model>_T<rounds>``."""
    return f"{paper}_table{_paper_table(paper, 'bits')[0]}" if paper else f"bits_{model}_T{rounds}"


def write_bits(report: BitsReport, out_dir: Path) -> list[Path]:
    """``<out_dir>/<paper>_table<id>.{md,csv}`` with a paper, else ``bits_<model>_T<rounds>.{md,csv}``."""
    return write_formats(
        out_dir, bits_stem(report.paper, report.model, report.rounds), lambda fmt: format_bits(report, fmt)
    )
