"""Tuning tables: per entry of a scenario (``<tables>/<scenario>_tuning.md`` and ``.csv``, written by
``fedbench tune``), or per method and column of a paper's tuned scenarios at a scale
(``<tables>/<paper>_tuning_<scale>.md``, written by ``fedbench reproduce``): the chosen values, the
trial count, the search budget (``searched``: the settings run of the method's own grid, or drawn from its
ranges, and the scheduler), the best and runner-up scores and the protocol."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from fedbench.report.tables import file_stem, markdown_grid, write_formats
from fedbench.scenario import Scenario
from fedbench.store import ResultsStore
from fedbench.sweeps.tuning import Choice, TuningError, plan, select, written

HEADERS = ["method", "chosen", "trials", "searched", "metric", "best", "runner-up", "protocol"]
ALIGN = ["left", "left", "right", "left", "left", "right", "right", "left"]
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


def searched(c: Choice) -> str:
    """An entry's search budget: the settings run of its own grid and their share (``4 / 54 (7 %)``) or
    the settings drawn from its ranges (``8 drawn``), then the scheduler (halving: its candidates per
    rung, ``54 / 54 (100 %) halving 54→18→6→2``)."""
    tune, n = c.entry.tune, len(c.entry.trials)
    if tune is None:
        return "—"
    grid = tune.grid_size()
    rungs = " " + "→".join(str(k) for _, k in c.entry.rungs) if tune.halving is not None else ""
    share = f"{n} / {grid} ({100 * n / grid:.0f} %)" if grid is not None else f"{n} drawn"
    return f"{share} {tune.search}{rungs}"


def is_written(c: Choice) -> bool:
    """True when the chosen setting is the entry's own, as the scenario writes it."""
    return c.best is not None and written(c.entry.base, list(c.best.values)) == c.best.values


def tuning_rows(choices: list[Choice]) -> list[list[str]]:
    """One row per entry (an entry without a tune block: ``untuned``)."""
    rows = []
    for c in choices:
        tune = c.entry.tune
        if tune is None or c.best is None:
            rows.append([c.entry.label, "untuned", "0", "—", "—", "—", "—", "—"])
            continue
        metric = tune.select.describe()
        chosen = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in c.best.values.items())
        if is_written(c):
            chosen += " (as written)"
        best = c.scores[c.best.index]
        rows.append(
            [
                c.entry.label,
                chosen,
                str(len(c.scores)),
                searched(c),
                metric,
                _score(best, tune.select.metric),
                _score(c.runner_up, tune.select.metric),
                tune.protocol,
            ]
        )
    return rows


def _counts(ns: list[int]) -> str:
    """``[2]`` → "2 setting(s)"; ``[2, 6, 18]`` → "2, 6 or 18 settings (the trials column)"."""
    if len(ns) == 1:
        return f"{ns[0]} setting(s)"
    return f"{', '.join(map(str, ns[:-1]))} or {ns[-1]} settings (the trials column)"


def _trials_note(choices: list[Choice]) -> str:
    """What each trial ran (rounds × seeds), once per distinct way; halving's rungs, once per way."""
    ways: dict[tuple[int, tuple[int, ...]], set[int]] = {}
    for c in choices:
        if c.best is not None:
            ways.setdefault((c.best.spec.rounds, tuple(c.best.seeds)), set()).add(len(c.entry.trials))
    rungs = dict.fromkeys(
        (tuple(r for r, _ in c.entry.rungs), c.entry.tune.halving.eta)
        for c in choices
        if c.best is not None and c.entry.tune is not None and c.entry.tune.halving is not None
    )
    return "".join(
        f"_trials: {_counts(sorted(ns))} per method, each {r} rounds × seed(s) {', '.join(map(str, s))}_\n\n"
        for (r, s), ns in ways.items()
    ) + "".join(
        f"_halving: rungs of {', '.join(map(str, rs))} rounds, each keeping the top 1/{eta} of its candidates "
        "by the metric (ties: the earlier); best and runner-up are scores at the last rung_\n\n"
        for rs, eta in rungs
    )


def render(choices: list[Choice], scenario: str, fmt: str, columns: list[str] | None = None) -> str:
    """The table as ``markdown`` (with the protocols' notes) or ``csv``; ``columns`` (one per choice)
    adds a first column naming the paper column (or scenario) of each row."""
    rows = tuning_rows(choices)
    headers, align = HEADERS, ALIGN
    if columns is not None:
        rows = [[col, *row] for col, row in zip(columns, rows)]
        headers, align = ["column", *HEADERS], ["left", *ALIGN]
    if fmt == "csv":
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows([headers, *rows])
        return buf.getvalue()
    notes = {
        c.entry.tune.protocol: PROTOCOL_NOTE[c.entry.tune.protocol].format(f=c.entry.tune.validation_fraction)
        for c in choices
        if c.entry.tune is not None
    }
    lines = "".join(f"_{p}: {text}_\n\n" for p, text in notes.items()) + _trials_note(choices)
    scores = (
        "_searched: the settings run of the method's own grid and their share (or the settings drawn from its "
        "ranges), and the scheduler "
        "(grid: every point; random: seeded draws; halving: candidates per rung)_\n\n"
        f"{_written_note(choices)}"
        "_accuracy in %, mean over the trial seeds; rounds_to: the first round reaching the target_\n"
    )
    return f"## {scenario}: tuning\n\n{markdown_grid(headers, rows, align)}\n{lines}{scores}"


def _written_note(choices: list[Choice]) -> str:
    """How often the search kept the setting as written, and that a drawn search always ran it."""
    tuned = [c for c in choices if c.best is not None]
    if not tuned:
        return ""
    kept = sum(is_written(c) for c in tuned)
    drawn = any(c.entry.drawn and c.entry.tune is not None and c.entry.tune.include_written for c in tuned)
    always = (
        "; a drawn search always ran the written setting where its grid holds it (include_written)" if drawn else ""
    )
    return f"_as written: the entry's own setting was chosen in {kept} of {len(tuned)} searches{always}_\n\n"


def write_tuning_tables(choices: list[Choice], out_dir: Path, scenario: str) -> list[Path]:
    """``<out_dir>/<scenario>_tuning.md`` and ``.csv``."""
    return write_formats(out_dir, f"{file_stem(scenario)}_tuning", lambda fmt: render(choices, scenario, fmt))


def paper_tuning_stem(paper: str, scale: str) -> str:
    """``<paper>_tuning_<scale>``: the stem of a paper's tuning table."""
    return f"{paper}_tuning_{scale}"


def write_paper_tuning(
    store: ResultsStore, paper: str, scale: str, scenarios: list[Scenario], out_dir: Path
) -> list[Path]:
    """``<out_dir>/<paper>_tuning_<scale>.md`` and ``.csv``: each tuned entry of ``scenarios`` (the
    paper's tuned scenarios at ``scale``) whose trials are done, by paper column (or scenario name);
    scenarios with trials still to run are named under the table. Nothing when none is tuned."""
    choices: list[Choice] = []
    columns: list[str] = []
    pending = []
    for sc in scenarios:
        try:
            chosen = [c for c in select(store, plan(sc)) if c.best is not None]
        except TuningError:
            pending.append(sc.name)
            continue
        choices += chosen
        columns += [sc.paper.column if sc.paper is not None else sc.name] * len(chosen)
    if not choices and not pending:
        return []
    title = f"{paper}, {scale} scale"
    tail = f"_not tuned yet (trials to run): {', '.join(pending)}_\n" if pending else ""
    return write_formats(
        out_dir,
        paper_tuning_stem(paper, scale),
        lambda fmt: render(choices, title, fmt, columns) + ("" if fmt == "csv" else tail),
    )
