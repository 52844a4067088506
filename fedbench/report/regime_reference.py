"""The paper's regime as data: each room's ``fedbench/papers/<paper>/regime.yaml`` (found through
:mod:`fedbench.rooms`), read by ``fedbench regime`` (:mod:`fedbench.report.regime`).

The file gives, per table of the room's ``reference.yaml`` and per column (a column's name, or the ``setting``
its runs fill: FedQVR's "MNIST"), the values the paper states about its regime, each cited in a comment:
``N`` clients, ``S`` sampled per round, ``K`` local steps per round, ``fedavg_noniid`` / ``fedavg_iid``
FedAvg's accuracy (%) on the column's partition / on an IID split of the same data (on a task stream: Fine-FL's
Acc), ``forgetting`` Fine-FL's (%). ``all`` holds what every column of the table shares. A value the paper does
not state is left out. The paper's best accuracy is not restated: :func:`paper_best` reads it from the column of
the reference table.
"""

from __future__ import annotations

import math
from typing import Any

import yaml

from fedbench.report.reference import ACCURACY_METRICS, column_specs, printed_value, reference_table
from fedbench.rooms import room_dir

PAPER_KEYS = ("N", "S", "K", "fedavg_noniid", "fedavg_iid", "forgetting")
REGIME_FILE = "regime.yaml"
BEST_METRICS = (*ACCURACY_METRICS, "cl_acc")  # the reference metrics a column's best is read from


def _settings(paper: str, table: str) -> set[str]:
    """The column names a scenario's ``paper.column`` may give for the table: its columns' settings."""
    return {c.setting for c in column_specs(paper, table)}


def read_regime(paper: str) -> dict[str, Any]:
    """The room's regime.yaml, checked: known tables and columns (settings), known keys, numbers; {} without it."""
    path = room_dir(paper) / REGIME_FILE
    if not path.is_file():
        return {}
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    where = f"fedbench/papers/{paper}/{REGIME_FILE}"
    for tid, table in (data.get("tables") or {}).items():
        settings = _settings(paper, str(tid))
        for col, values in {"all": table.get("all") or {}, **(table.get("columns") or {})}.items():
            if col != "all" and col not in settings:
                raise ValueError(f"{where}: tables.{tid}.columns.{col}: not a column of its reference table")
            for key, value in values.items():
                if key not in PAPER_KEYS or isinstance(value, bool) or not isinstance(value, int | float):
                    raise ValueError(
                        f"{where}: tables.{tid}.{col}.{key}: expected a number under one of {', '.join(PAPER_KEYS)}"
                    )
    return data


def paper_values(paper: str, table: str, column: str) -> dict[str, float]:
    """What the paper states about the column's regime (``PAPER_KEYS``); {} when nothing."""
    entry = (read_regime(paper).get("tables") or {}).get(table) or {}
    return {**(entry.get("all") or {}), **((entry.get("columns") or {}).get(column) or {})}


def paper_best(paper: str, table: str, column: str) -> float | None:
    """The best printed accuracy of the column (the table's accuracy column of that setting); None without one."""
    t = reference_table(paper, table)
    found = [i for i, c in enumerate(column_specs(paper, table)) if c.setting == column and c.metric in BEST_METRICS]
    if not found:
        return None
    values = [printed_value(row[found[0]]) for row in t["rows"].values()]
    finite = [v for v in values if math.isfinite(v)]
    return max(finite) if finite else None
