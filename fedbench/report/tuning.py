"""The tuning table of a scenario: per entry, the chosen values, the trial count, the best and
runner-up scores and the protocol (``<tables>/<scenario>_tuning.md`` and ``.csv``)."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from fedbench.report.tables import file_stem, markdown_grid, write_formats
from fedbench.sweeps.tuning import Choice

HEADERS = ["method", "chosen", "trials", "metric", "best", "runner-up", "protocol"]
ALIGN = ["left", "left", "right", "left", "right", "right", "left"]
PROTOCOL_NOTE = {
    "validation": "selected on the federated validation accuracy (a held-out {f:g} of each client's training data); "
                  "the tables report the chosen setting's test numbers",
    "paper": "selected on the test-set metric, as the papers did",
}


def _score(value: float | None, metric: str) -> str:
    if value is None:
        return "—"
    if math.isinf(value):
        return "never" if metric == "rounds_to" else "—"
    return f"{value:.0f}" if metric == "rounds_to" else f"{100 * value:.2f}"


def tuning_rows(choices: list[Choice]) -> list[list[str]]:
    """One row per entry (an entry without a tune block: ``untuned``)."""
    rows = []
    for c in choices:
        tune = c.entry.tune
        if tune is None or c.best is None:
            rows.append([c.entry.label, "untuned", "0", "—", "—", "—", "—"])
            continue
        metric = tune.select.metric + (f" {tune.select.target:g}" if tune.select.target is not None else "")
        chosen = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in c.best.values.items())
        best = c.scores[c.best.index]
        rows.append([c.entry.label, chosen, str(len(c.scores)), metric, _score(best, tune.select.metric),
                     _score(c.runner_up, tune.select.metric), tune.protocol])
    return rows


def render(choices: list[Choice], scenario: str, fmt: str) -> str:
    """The table as ``markdown`` (with the protocols' notes) or ``csv``."""
    rows = tuning_rows(choices)
    if fmt == "csv":
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows([HEADERS, *rows])
        return buf.getvalue()
    notes = {c.entry.tune.protocol: PROTOCOL_NOTE[c.entry.tune.protocol].format(f=c.entry.tune.validation_fraction)
             for c in choices if c.entry.tune is not None}
    lines = "".join(f"_{p}: {text}_\n\n" for p, text in notes.items())
    scores = "_accuracy in %, mean over the trial seeds; rounds_to: the first round reaching the target_\n"
    return f"## {scenario}: tuning\n\n{markdown_grid(HEADERS, rows, ALIGN)}\n{lines}{scores}"


def write_tuning_tables(choices: list[Choice], out_dir: Path, scenario: str) -> list[Path]:
    """``<out_dir>/<scenario>_tuning.md`` and ``.csv``."""
    return write_formats(out_dir, f"{file_stem(scenario)}_tuning", lambda fmt: render(choices, scenario, fmt))
