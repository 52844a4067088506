"""Published numbers as data: one ``<paper>.yaml`` per paper, shipped with the package.

A file holds the paper's ``name``, a ``short`` name for reports, its ``title`` and its ``tables``.
Each table, keyed by the id the paper gives it (``"I"``), has a ``caption``, the ``metric`` its
numbers are (``final_acc``: test accuracy after T rounds; ``top_acc``: best over rounds), its
``columns`` in the paper's order and its ``rows`` (label → one number per column, in percent as
printed; ``null`` where the paper has no number). Row labels are the algorithm labels the
scenarios use, so a run whose spec says ``paper: {name, table, column}`` lands in the cell
(its label, column).

Two metrics are not accuracies and have no runs to compare with: ``bits`` (communication bits
as printed, e.g. FedCAMS Table 2; :mod:`fedbench.report.bits` computes ours) and ``formula``
(cells are the printed formulas as strings, FedCAMS Table 1). :func:`reference_frame` returns
them only when asked for by ``metrics``, so ``fedbench compare`` on such a table fails with a
clear message instead of comparing bits with accuracies.
"""

from __future__ import annotations

import copy
import functools
from importlib import resources
from typing import Any

import pandas as pd
import yaml

ACCURACY_METRICS = ("final_acc", "top_acc")
METRICS = (*ACCURACY_METRICS, "bits", "formula")


def papers() -> list[str]:
    """The papers with reference numbers (the ``*.yaml`` files next to this module)."""
    files = resources.files(__name__).iterdir()
    return sorted(f.name.removesuffix(".yaml") for f in files if f.name.endswith(".yaml"))


@functools.lru_cache(maxsize=None)
def _read(paper: str) -> dict[str, Any]:
    if paper not in papers():
        raise ValueError(f"no reference numbers for paper {paper!r}; available: {', '.join(papers()) or 'none'}")
    source = f"fedbench/report/reference/{paper}.yaml"
    data = yaml.safe_load(resources.files(__name__).joinpath(f"{paper}.yaml").read_text(encoding="utf-8"))
    for tid, t in data.get("tables", {}).items():
        where = f"{source}: tables.{tid}"
        if t.get("metric") not in METRICS:
            raise ValueError(f"{where}.metric: {t.get('metric')!r} is not one of {', '.join(METRICS)}")
        for label, values in t["rows"].items():
            if len(values) != len(t["columns"]):
                raise ValueError(f"{where}.rows.{label}: {len(values)} numbers for {len(t['columns'])} columns")
    return data


def load_reference(paper: str) -> dict[str, Any]:
    """The paper's reference file as a dict (a fresh copy; see the module docstring for its keys)."""
    return copy.deepcopy(_read(paper))


def reference_table(paper: str, table: str) -> dict[str, Any]:
    """One table's entry (``caption``, ``metric``, ``columns``, ``rows``, ...); errors list the known tables."""
    tables = _read(paper)["tables"]
    if table not in tables:
        raise ValueError(f"paper {paper!r} has no table {table!r} in its reference numbers; tables: {', '.join(tables)}")
    return copy.deepcopy(tables[table])


def reference_frame(paper: str, table: str, metrics: tuple[str, ...] = ACCURACY_METRICS) -> pd.DataFrame:
    """The table as rows × columns of floats (percent as printed; NaN where the paper has no number),
    or of strings for a ``formula`` table; a table whose metric is not in ``metrics`` is a ValueError."""
    t = reference_table(paper, table)
    if t["metric"] not in metrics:
        raise ValueError(f"table {table} of {paper} holds {t['metric']}, not {' or '.join(metrics)}"
                         + ("; see `fedbench bits --paper`" if t["metric"] in ("bits", "formula") else ""))
    dtype = "object" if t["metric"] == "formula" else "float64"
    frame = pd.DataFrame.from_dict(t["rows"], orient="index", columns=t["columns"], dtype=dtype)
    frame.index.name = "row"
    return frame
