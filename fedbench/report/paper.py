"""Paper vs reproduced: a paper table's layout with each cell ``paper / ours``.

A run belongs to the cell (its label, ``paper.column``) of the table its spec names
(``spec_json["paper"] == {name, table, column}``, kept by the store as the columns ``paper``,
``paper_table`` and ``paper_column``). Ours is the table's metric (final-round test
accuracy for every FedMIM table) as :func:`fedbench.report.tables.summarize` computes it: mean
± sample std over the seeds that finished, ``(1 div.)`` / ``(1 unfin.)`` when some diverged or are
not finished (still training, or interrupted), ``—`` when none finished or no run exists. Runs of several scenarios that land in the same cell are pooled.

The scale of a run is the store's ``scale`` column (``paper``, ``small``, ``tiny``). Each scale is
compared, formatted and written separately.
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import pandas as pd
from rich.table import Table

from fedbench.report.reference import (
    ACCURACY_METRICS,
    CONTINUAL_METRICS,
    ColumnSpec,
    column_specs,
    load_reference,
    reference_frame,
    reference_table,
    reference_text,
)
from fedbench.report.tables import (
    _ACC_TOL,
    DASH,
    FORMATS,
    acc_cell,
    footnotes,
    latex_escape,
    markdown_grid,
    summarize,
    summary_notes,
)
from fedbench.report.tuned import tuned_labels, with_marks
from fedbench.store import PAPER_SCALE

_COUNTS = ("seeds", "finished", "diverged", "failed", "running")
_LATEX_GREEK = {"α": r"$\alpha$", "β": r"$\beta$", "±": r"$\pm$"}


def paper_runs(store, paper: str, table: str | None = None) -> pd.DataFrame:
    """The store's runs in a cell of ``paper`` (and ``table``), with ``table``, ``row``, ``column``."""
    runs = store.runs()
    keep = (runs["paper"] == paper) & (True if table is None else runs["paper_table"] == table)
    runs = runs[keep].reset_index(drop=True)
    return runs.assign(table=runs["paper_table"], row=runs["algorithm"], column=runs["paper_column"])


def paper_scales(store, paper: str) -> list[str]:
    """The scales with runs of ``paper`` in the store, in the order they first appear."""
    return list(dict.fromkeys(paper_runs(store, paper)["scale"]))


def compare(store, paper: str, table: str, scale: str | None = None) -> pd.DataFrame:
    """One row per (scale, row, column) cell: every paper cell plus any extra row/column that has runs.

    Columns: ``scale`` (None when no run matches), ``row``, ``column``, ``metric``, ``target``,
    ``paper_pct`` (the paper's number as printed — percent, rounds or bits/unit; NaN if the paper
    has none, +inf for "never reached"), ``paper_text`` (the cell as printed), ``value_mean`` /
    ``value_std`` (ours: accuracies as fractions, mean ± std over the usable seeds as in
    :func:`~fedbench.report.tables.summarize`; rounds/bits from the seed-mean curve, +inf when it
    never reaches the target, with ``value_limit`` the budget it did not reach it within), the seed
    counts ``seeds``, ``finished``, ``diverged``, ``failed``, ``running``, and ``scenarios``.
    Rows follow the paper's order then extra rows in run order; columns likewise (extra columns
    only for accuracy tables). ``scale`` keeps only that scale.
    """
    t = reference_table(paper, table)
    specs = column_specs(paper, table)
    ref, printed = reference_frame(paper, table), reference_text(paper, table)
    runs = paper_runs(store, paper, str(t.get("runs_from", table)))
    if scale is not None:
        runs = runs[runs["scale"] == scale]
    if t["metric"] in ACCURACY_METRICS:
        known = {c.setting for c in specs}
        specs += [ColumnSpec(c, c, t["metric"]) for c in dict.fromkeys(runs["column"]) if c not in known]
    metrics = store.metrics(runs["run_id"]) if not runs.empty else None
    acc = {}
    if not runs.empty:
        keyed = runs.assign(scenario=runs["scale"] + "\x1f" + runs["column"])  # summarize pools by "scenario"
        for _, s in summarize(keyed, metrics).iterrows():
            sc, col = s["scenario"].split("\x1f")
            acc[(sc, s["algorithm"], col)] = s
    rows = list(dict.fromkeys([*ref.index, *runs["row"]]))
    out = []
    for sc in list(dict.fromkeys(runs["scale"])) or [None]:
        part = runs[runs["scale"] == sc]
        for r in rows:
            for c in specs:
                in_cell = part[(part["row"] == r) & (part["column"] == c.setting)]
                s = acc.get((sc, r, c.setting))
                value = {"value_mean": math.nan, "value_std": math.nan, "value_limit": math.nan}
                if s is not None and c.metric in ACCURACY_METRICS:
                    name = c.metric.removesuffix("_acc")
                    value.update(value_mean=s[f"{name}_acc_mean"], value_std=s[f"{name}_acc_std"])
                elif s is not None and c.metric in CONTINUAL_METRICS:
                    value.update(continual_value(in_cell, metrics, c.metric))
                elif s is not None:
                    value.update(reach_on_mean_curve(in_cell, metrics, c))
                out.append(
                    {
                        "scale": sc,
                        "row": r,
                        "column": c.name,
                        "metric": c.metric,
                        "target": c.target,
                        "paper_pct": float(ref.loc[r, c.name])
                        if r in ref.index and c.name in ref.columns
                        else math.nan,
                        "paper_text": printed.loc[r, c.name]
                        if r in printed.index and c.name in printed.columns
                        else None,
                        **value,
                        **{k: 0 if s is None else int(s[k]) for k in _COUNTS},
                        "blowup": 0 if s is None or "blowup" not in s.index else int(s["blowup"]),
                        "scenarios": ", ".join(dict.fromkeys(in_cell["scenario"])),
                    }
                )
    return pd.DataFrame(out)


def continual_value(runs: pd.DataFrame, metrics: pd.DataFrame, metric: str) -> dict[str, float]:
    """Acc (``cl_acc``) or Forgetting (``cl_forget``) as fractions, mean ± std (ddof=1) over the
    seeds that finished with a complete accuracy matrix (C-FLAG Tables 2, 3, 7, 8)."""
    from fedbench.continual.metrics import average_accuracy, forgetting
    from fedbench.report.forgetting import accuracy_matrix

    fn = average_accuracy if metric == "cl_acc" else forgetting
    values = []
    for rid, status in zip(runs["run_id"], runs["status"]):
        a = accuracy_matrix(metrics[metrics["run_id"] == rid])
        if status == "finished" and a.size and a.shape[0] == a.shape[1]:
            values.append(fn(a))
    mean = float(pd.Series(values).mean()) if values else math.nan
    std = (float(pd.Series(values).std(ddof=1)) if len(values) > 1 else 0.0) if values else math.nan
    return {"value_mean": mean, "value_std": std, "value_limit": math.nan}


def reach_on_mean_curve(runs: pd.DataFrame, metrics: pd.DataFrame, spec: ColumnSpec) -> dict[str, float]:
    """Rounds (or cumulative uplink bits / unit) until the seed-mean test-accuracy curve first
    reaches ``spec.target`` (GradMA Table 2, FedQVR Table I: the mean over the usable seeds at each
    round evaluated by all of them, 1-based rounds). +inf when it never does; ``value_limit`` is
    then the budget (last round, or the bits through it)."""
    usable = runs[runs["status"] == "finished"]  # a run still training (or interrupted) is never pooled
    m = metrics[metrics["run_id"].isin(usable["run_id"])]
    if usable.empty or m.empty:
        return {"value_mean": math.nan, "value_std": math.nan, "value_limit": math.nan}
    curve = m.pivot_table(index="round", columns="run_id", values="test_acc").dropna().mean(axis=1)
    cum_up = m.pivot_table(index="round", columns="run_id", values="bits_up").fillna(0).cumsum().mean(axis=1)
    hit = curve.index[curve >= spec.target - _ACC_TOL]
    last = int(m["round"].max())
    if spec.metric == "rounds_to":
        value, limit = (float(hit[0]) if len(hit) else math.inf), float(last)
    else:
        value = float(cum_up.loc[hit[0]]) / spec.unit if len(hit) else math.inf
        limit = float(cum_up.loc[last]) / spec.unit
    return {"value_mean": value, "value_std": math.nan, "value_limit": limit}


def _one_scale(frame: pd.DataFrame) -> str | None:
    scales = list(dict.fromkeys(frame["scale"]))
    if len(scales) > 1:
        raise ValueError(
            f"the comparison holds scales {', '.join(map(str, scales))}; format one at a time, "
            "e.g. frame[frame['scale'] == 'tiny'], or pass scale= to compare()"
        )
    return scales[0] if scales else None


def _cell(r: pd.Series, never: str) -> str:
    """``paper / ours`` in the column's own units."""
    paper = DASH if r["paper_text"] is None or pd.isna(r["paper_text"]) else str(r["paper_text"])
    if r["metric"] in ACCURACY_METRICS or r["metric"] in CONTINUAL_METRICS:
        ours = acc_cell(
            pd.Series(
                {
                    "v_acc_mean": r["value_mean"],
                    "v_acc_std": r["value_std"],
                    "diverged": int(r["diverged"]),
                    "failed": int(r["failed"]),
                    "running": int(r["running"]),
                    "blowup": int(r.get("blowup", 0) or 0),
                },
                dtype=object,
            ),
            "v",
            "±",
        )
    elif pd.isna(r["value_mean"]):
        ours = DASH
    elif math.isinf(r["value_mean"]) and never != ">":
        ours = never
    elif math.isinf(r["value_mean"]):
        ours = f">{r['value_limit']:,.0f}" if r["metric"] == "rounds_to" else f">{r['value_limit']:.4g}"
    else:
        ours = f"{r['value_mean']:,.0f}" if r["metric"] == "rounds_to" else f"{r['value_mean']:.4g}"
    return f"{paper} / {ours}"


def _grid(
    frame: pd.DataFrame, marks: dict[str, str] | None = None, never: str = "-"
) -> tuple[list[str], list[list[str]]]:
    """Headers and display rows in the paper's layout (one scale); ``marks`` suffix row labels."""
    _one_scale(frame)
    marks = marks or {}
    columns = list(dict.fromkeys(frame["column"]))
    cells = {(r["row"], r["column"]): _cell(r, never) for _, r in frame.iterrows()}
    rows = [
        [f"{row} {marks[row]}" if row in marks else row, *(cells[(row, c)] for c in columns)]
        for row in dict.fromkeys(frame["row"])
    ]
    return ["Method", *columns], rows


def format_comparison(frame: pd.DataFrame, fmt: str, marks: dict[str, str] | None = None, never: str = "-") -> str:
    """One scale of :func:`compare` as Markdown or LaTeX (``paper / ours`` cells) or CSV (raw
    numbers); ``marks`` suffix row labels (``"(2×)"``), ``never`` is how an unreached target
    prints (``-``, or ``>`` for ``>budget``)."""
    if fmt == "csv":
        if "blowup" in frame.columns and not frame["blowup"].fillna(0).astype(int).any():
            frame = frame.drop(columns=["blowup"])  # the column appears only in tables with a flagged run
        buf = io.StringIO()
        frame.to_csv(buf, index=False, na_rep="", lineterminator="\n")
        return buf.getvalue()
    headers, rows = _grid(frame, marks, never)
    if fmt == "markdown":
        return markdown_grid(headers, rows)
    if fmt == "latex":

        def esc(text: str) -> str:
            text = latex_escape(text)
            for ch, tex in _LATEX_GREEK.items():
                text = text.replace(ch, tex)
            return text

        lines = [
            r"% requires \usepackage{booktabs}",
            r"\begin{tabular}{l" + "r" * (len(headers) - 1) + "}",
            r"\toprule",
            " & ".join(map(esc, headers)) + r" \\",
            r"\midrule",
            *[" & ".join(map(esc, r)) + r" \\" for r in rows],
            r"\bottomrule",
            r"\end{tabular}",
        ]
        return "\n".join(lines) + "\n"
    raise ValueError(f"unknown table format {fmt!r}; allowed: {', '.join(FORMATS)}")


def comparison_title(paper: str, table: str, scale: str | None) -> str:
    """E.g. ``FedMIM Table III, tiny scale: paper / ours``."""
    where = "no runs yet" if scale is None else f"{scale} scale"
    return f"{load_reference(paper).get('short', paper)} Table {table}, {where}: paper / ours"


_WHAT = {
    "final_acc": "final-round test accuracy in %, mean ± std over seeds (sample std, ddof=1; 0 for one seed)",
    "top_acc": "best test accuracy over rounds in %, mean ± std over seeds (sample std, ddof=1; 0 for one seed)",
    "rounds_to": "rounds until the seed-mean accuracy curve first reaches the column's target",
    "uplink_bits_to": "cumulative uplink bits (in the column's unit) through the round the seed-mean curve first reaches the target",
    "cl_acc": "average accuracy (%) over all tasks of the final model, mean ± std over seeds",
    "cl_forget": "forgetting (%), (1/(S−1))Σ_{i<S}(a_ii − a_Si), mean ± std over seeds",
}


def table_display(paper: str, table: str) -> tuple[dict[str, str], str]:
    """The table's row marks (e.g. ``{"SCAFFOLD": "(2×)"}``) and how it prints an unreached target."""
    t = reference_table(paper, table)
    return dict(t.get("row_marks") or {}), str(t.get("never", "-"))


def comparison_note(paper: str, table: str, scale: str | None) -> str:
    """What the cells are, and how far the scale allows comparing them."""
    t = reference_table(paper, table)
    used = list(dict.fromkeys(c.metric for c in column_specs(paper, table)))
    what = "; ".join(_WHAT[m] for m in used)
    never = table_display(paper, table)[1]
    note = (
        f"Cells: paper / ours. Ours: {what}. (k div.), (k failed): k seeds diverged or failed and are left out; "
        "—: no usable run"
        + (f"; {never}: never reached" if never != ">" else "; >X: not reached within the budget X")
        + "."
    )
    for caveat in t.get("notes") or []:
        note += f" {caveat}"
    if scale not in (None, PAPER_SCALE):
        note += (
            f" The {scale} scale uses substitute datasets/models and fewer rounds, "
            "so only the orderings are comparable with the paper, not the numbers."
        )
    return note


def rich_comparison(frame: pd.DataFrame, paper: str, table: str, store=None) -> list[Table]:
    """One ``rich`` table per scale in the frame, for the terminal: only the columns with runs
    (every column when none has any); the written files keep the paper's whole layout. With the
    ``store``, tuned rows are marked † as in the files."""
    runs = paper_runs(store, paper, str(reference_table(paper, table).get("runs_from", table))) if store else None
    tables = []
    for scale in dict.fromkeys(frame["scale"]):
        part = frame[frame["scale"].isna()] if scale is None else frame[frame["scale"] == scale]
        run = part.groupby("column", sort=False)["seeds"].sum()
        if (run > 0).any():
            part = part[part["column"].isin(run.index[run > 0])]
        marks, never = table_display(paper, table)
        if runs is not None:
            marks = with_marks(marks, tuned_labels(runs[runs["scale"] == scale]))
        headers, rows = _grid(part, marks, never)
        caption = "paper / ours" + ("" if scale in (None, PAPER_SCALE) else f"; {scale} scale: compare orderings only")
        t = Table(title=comparison_title(paper, table, scale), caption=caption)
        for i, h in enumerate(headers):
            t.add_column(h, justify="left" if i == 0 else "right", no_wrap=i == 0)
        for r in rows:
            t.add_row(*r)
        tables.append(t)
    return tables


def comparison_stem(paper: str, table: str, scale: str) -> str:
    """``<paper>_table<table>_<scale>``: the stem of a comparison table's files."""
    return f"{paper}_table{table}_{scale}"


def write_comparison(store, paper: str, table: str, out_dir: Path, scale: str | None = None) -> list[Path]:
    """Write ``<out_dir>/<paper>_table<table>_<scale>.{md,tex,csv}`` per scale with runs (none if no run)."""
    frame = compare(store, paper, table, scale)
    out_dir = Path(out_dir)
    paths = []
    ref = reference_table(paper, table)
    caption = ref["caption"]
    title = load_reference(paper)["title"]
    table_marks, never = table_display(paper, table)
    runs = paper_runs(store, paper, str(ref.get("runs_from", table)))
    metrics = store.metrics(runs["run_id"])  # read once; summary_notes counts only the runs it is given
    for sc in dict.fromkeys(frame["scale"].dropna()):
        part = frame[frame["scale"] == sc]
        heading, note = comparison_title(paper, table, sc), comparison_note(paper, table, sc)
        at_scale = runs[runs["scale"] == sc]
        marks = with_marks(table_marks, tuned_labels(at_scale))
        md_notes, tex_notes = footnotes(
            summary_notes(at_scale, metrics)
        )  # "GradMA-S: 3 QP … fell back", "FedQVR seed 0: blow-up flagged, …"
        texts = {
            ".md": f"## {heading}\n\n{title}, Table {table}: _{caption}_\n\n"
            f"{format_comparison(part, 'markdown', marks, never)}\n_{note}_\n{md_notes}",
            ".tex": f"% {heading}\n% {note}\n{tex_notes}{format_comparison(part, 'latex', marks, never)}",
            ".csv": format_comparison(part, "csv"),
        }
        out_dir.mkdir(parents=True, exist_ok=True)
        for suffix, text in texts.items():
            path = out_dir / f"{comparison_stem(paper, table, sc)}{suffix}"
            path.write_text(text, encoding="utf-8")
            paths.append(path)
    return paths
