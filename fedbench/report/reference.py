"""Published numbers as data: each paper room's ``fedbench/papers/<paper>/reference.yaml`` (found
through :mod:`fedbench.rooms`).

A file holds the paper's ``name``, a ``short`` name for reports, its ``title`` and its ``tables``.
Each table, keyed by the id the paper gives it (``"I"``), has a ``caption``, the ``metric`` its
numbers are (``final_acc``: test accuracy after T rounds; ``top_acc``: best over rounds), its
``columns`` in the paper's order and its ``rows`` (label → one number per column, in percent as
printed; ``null`` where the paper has no number). Row labels are the algorithm labels the
scenarios use, so a run whose spec says ``paper: {name, table, column}`` lands in the cell
(its label, column).

A table may mix metrics and reuse another table's runs (GradMA Table 2 gives rounds-to-accuracy
for the runs of Table 1; FedQVR Table I gives accuracy, rounds and uplink bits per setting):
``runs_from`` names the table whose runs feed it, and ``column_specs`` maps a column to its
``setting`` (the runs' ``paper.column``; default the column's own name), ``metric`` (default the
table's), ``target`` (an accuracy fraction, for ``rounds_to``/``uplink_bits_to``) and ``unit``
(bits are printed divided by it, e.g. 1e9). ``rounds_to`` is the first round at which the
seed-mean accuracy curve reaches the target; ``uplink_bits_to`` the cumulative uplink bits through
that round. ``cl_acc`` / ``cl_forget`` are a continual run's average accuracy and forgetting
from its accuracy matrix (:mod:`fedbench.continual.metrics`), mean ± std over seeds. ``row_marks`` adds a printed mark to a row label (``"(2×)"``). A cell may hold the
printed text instead of a number: ``"54.10±5.78"`` (reads as 54.10), ``"-"`` (never reached) and ``">500"`` (not within the budget)
read as +inf, any other text as missing. ``notes`` holds caveats printed under the table.

Two metrics are not accuracies and have no runs to compare with: ``bits`` (communication bits
as printed, e.g. FedCAMS Table 2; :mod:`fedbench.report.bits` computes ours) and ``formula``
(cells are the printed formulas as strings, FedCAMS Table 1). :func:`reference_frame` returns
them only when asked for by ``metrics``, so ``fedbench compare`` on such a table fails with a
clear message instead of comparing bits with accuracies.
"""

from __future__ import annotations

import copy
import functools
import math
from dataclasses import dataclass
from typing import Any

import pandas as pd
import yaml

from fedbench.rooms import paper_names, reference_text as _reference_yaml

ACCURACY_METRICS = ("final_acc", "top_acc")
REACH_METRICS = ("rounds_to", "uplink_bits_to")
CONTINUAL_METRICS = ("cl_acc", "cl_forget")  # C-FLAG's Acc and Forgetting from each run's accuracy matrix
COMPARABLE_METRICS = (*ACCURACY_METRICS, *REACH_METRICS, *CONTINUAL_METRICS)
METRICS = (*COMPARABLE_METRICS, "bits", "formula")


@dataclass(frozen=True)
class ColumnSpec:
    """How one column of a reference table is computed from runs (see the module docstring)."""

    name: str
    setting: str
    metric: str
    target: float | None = None
    unit: float = 1.0


def papers() -> list[str]:
    """The papers with reference numbers (the paper rooms, :mod:`fedbench.rooms`)."""
    return paper_names()


@functools.cache
def _read(paper: str) -> dict[str, Any]:
    if paper not in papers():
        raise ValueError(f"no reference numbers for paper {paper!r}; available: {', '.join(papers()) or 'none'}")
    source = f"fedbench/papers/{paper}/reference.yaml"
    data = yaml.safe_load(_reference_yaml(paper))
    for tid, t in data.get("tables", {}).items():
        where = f"{source}: tables.{tid}"
        if t.get("metric") not in METRICS:
            raise ValueError(f"{where}.metric: {t.get('metric')!r} is not one of {', '.join(METRICS)}")
        for label, values in t["rows"].items():
            if len(values) != len(t["columns"]):
                raise ValueError(f"{where}.rows.{label}: {len(values)} numbers for {len(t['columns'])} columns")
        for col, spec in (t.get("column_specs") or {}).items():
            if col not in t["columns"]:
                raise ValueError(f"{where}.column_specs.{col}: not one of the table's columns")
            if spec.get("metric", t["metric"]) not in METRICS:
                raise ValueError(
                    f"{where}.column_specs.{col}.metric: {spec.get('metric')!r} is not one of {', '.join(METRICS)}"
                )
            if spec.get("metric", t["metric"]) in REACH_METRICS and spec.get("target") is None:
                raise ValueError(f"{where}.column_specs.{col}.target: {spec.get('metric', t['metric'])} needs a target")
    return data


def load_reference(paper: str) -> dict[str, Any]:
    """The paper's reference file as a dict (a fresh copy; see the module docstring for its keys)."""
    return copy.deepcopy(_read(paper))


def reference_table(paper: str, table: str) -> dict[str, Any]:
    """One table's entry (``caption``, ``metric``, ``columns``, ``rows``, ...); errors list the known tables."""
    tables = _read(paper)["tables"]
    if table not in tables:
        raise ValueError(
            f"paper {paper!r} has no table {table!r} in its reference numbers; tables: {', '.join(tables)}"
        )
    return copy.deepcopy(tables[table])


def column_specs(paper: str, table: str) -> list[ColumnSpec]:
    """Each column's setting, metric, target and unit, in the table's order."""
    t = reference_table(paper, table)
    specs = t.get("column_specs") or {}
    out = []
    for name in t["columns"]:
        s = specs.get(name, {})
        target = s.get("target")
        out.append(
            ColumnSpec(
                name,
                str(s.get("setting", name)),
                s.get("metric", t["metric"]),
                None if target is None else float(target),
                float(s.get("unit", 1.0)),
            )
        )
    return out


def printed_value(cell: Any) -> float:
    """A printed cell as a number: numbers as they are, ``"-"``/``">…"`` (never reached) as +inf,
    ``null`` and other text as NaN."""
    if cell is None:
        return math.nan
    if isinstance(cell, str):
        if "±" in cell:  # "54.10±5.78": the mean (the printed text, std included, is kept for display)
            return float(cell.split("±")[0])
        return math.inf if cell.strip() == "-" or cell.strip().startswith(">") else math.nan
    return float(cell)


def reference_frame(paper: str, table: str, metrics: tuple[str, ...] = COMPARABLE_METRICS) -> pd.DataFrame:
    """The table as rows × columns of floats (as printed: percent, rounds, bits/unit; NaN where the
    paper has no number, +inf for "never reached"), or of strings for a ``formula`` table; a table
    with a column whose metric is not in ``metrics`` is a ValueError."""
    t = reference_table(paper, table)
    used = {c.metric for c in column_specs(paper, table)}
    if not used <= set(metrics):
        other = ", ".join(sorted(used - set(metrics)))
        raise ValueError(
            f"table {table} of {paper} holds {other}, not {' or '.join(metrics)}"
            + ("; see `fedbench bits --paper`" if t["metric"] in ("bits", "formula") else "")
        )
    if t["metric"] == "formula":
        frame = pd.DataFrame.from_dict(t["rows"], orient="index", columns=t["columns"], dtype="object")
    else:
        rows = {k: [printed_value(v) for v in vals] for k, vals in t["rows"].items()}
        frame = pd.DataFrame.from_dict(rows, orient="index", columns=t["columns"], dtype="float64")
    frame.index.name = "row"
    return frame


def reference_text(paper: str, table: str) -> pd.DataFrame:
    """The table's cells as printed in the paper (strings; None where it has no number)."""
    t = reference_table(paper, table)
    metrics = {c.name: c.metric for c in column_specs(paper, table)}

    def text(cell: Any, column: str) -> str | None:
        if cell is None or isinstance(cell, str):
            return cell
        if metrics[column] == "rounds_to":
            return f"{cell:,.0f}"
        if metrics[column] == "uplink_bits_to":
            return f"{cell:.4g}"
        return f"{cell:.2f}"

    rows = {k: [text(v, c) for v, c in zip(vals, t["columns"])] for k, vals in t["rows"].items()}
    frame = pd.DataFrame.from_dict(rows, orient="index", columns=t["columns"], dtype="object")
    frame.index.name = "row"
    return frame
