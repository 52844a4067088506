"""Paper vs reproduced: a paper table's layout with each cell ``paper / ours``.

A run belongs to the cell (its label, ``paper.column``) of the table its spec names
(``spec_json["paper"] == {name, table, column}``). Ours is the table's metric (final-round test
accuracy for every FedMIM table) as :func:`fedbench.report.tables.summarize` computes it: mean
± sample std over the seeds that did not diverge or fail, ``(1 div.)`` when some did, ``—`` when
all did or no run exists. Runs of several scenarios that land in the same cell are pooled.

The scale of a run is read from its scenario name: ``fedmim_table1_cifar10_dir0.3.tiny`` is
``tiny`` (the last dot-separated part, when it starts with a letter); a name without such a
suffix is at the ``paper`` scale. Each scale is compared, formatted and written separately.
"""

from __future__ import annotations

import io
import json
import math
import re
from pathlib import Path

import pandas as pd
from rich.table import Table
from tabulate import tabulate

from fedbench.report.reference import load_reference, reference_frame, reference_table
from fedbench.report.tables import DASH, FORMATS, acc_cell, latex_escape, summarize

PAPER_SCALE = "paper"
_SCALE_SUFFIX = re.compile(r"\.([A-Za-z][A-Za-z0-9_-]*)$")
_COUNTS = ("seeds", "finished", "diverged", "failed", "running")
_LATEX_GREEK = {"α": r"$\alpha$", "β": r"$\beta$", "±": r"$\pm$"}


def scale_of(scenario: str) -> str:
    """``tiny`` for ``fedmim_table1_cifar10_dir0.3.tiny``; ``paper`` for ``fedmim_table1_cifar10_dir0.3``."""
    m = _SCALE_SUFFIX.search(scenario)
    return m.group(1) if m else PAPER_SCALE


def paper_runs(store, paper: str, table: str | None = None) -> pd.DataFrame:
    """The store's runs whose spec names ``paper`` (and ``table``), with ``row``, ``column``, ``scale``."""
    runs = store.runs()
    refs = [json.loads(s).get("paper") or {} for s in runs["spec_json"]]
    keep = [r.get("name") == paper and (table is None or str(r.get("table")) == table) for r in refs]
    runs = runs.assign(
        table=[str(r.get("table")) for r in refs],
        row=runs["algorithm"],
        column=[str(r.get("column")) for r in refs],
        scale=[scale_of(s) for s in runs["scenario"]],
    )
    return runs[pd.Series(keep, index=runs.index, dtype=bool)].reset_index(drop=True)


def paper_scales(store, paper: str) -> list[str]:
    """The scales with runs of ``paper`` in the store, in the order they first appear."""
    return list(dict.fromkeys(paper_runs(store, paper)["scale"]))


def compare(store, paper: str, table: str, scale: str | None = None) -> pd.DataFrame:
    """One row per (scale, row, column) cell: every paper cell plus any extra row/column that has runs.

    Columns: ``scale`` (None when no run matches), ``row``, ``column``, ``paper_pct`` (the paper's
    number as printed, NaN if the paper has none), ``<metric>_mean`` / ``<metric>_std`` (fractions,
    as in :func:`~fedbench.report.tables.summarize`; NaN without a usable seed), the seed counts
    ``seeds``, ``finished``, ``diverged``, ``failed``, ``running``, and ``scenarios`` (comma-joined).
    Rows follow the paper's order then extra rows in run order; columns likewise. ``scale`` keeps
    only that scale.
    """
    ref = reference_frame(paper, table)
    metric = reference_table(paper, table)["metric"]
    runs = paper_runs(store, paper, table)
    if scale is not None:
        runs = runs[runs["scale"] == scale]
    cells = {}
    if not runs.empty:
        keyed = runs.assign(scenario=runs["scale"] + "\x1f" + runs["column"])  # summarize pools by "scenario"
        summary = summarize(keyed, store.metrics(runs["run_id"]))
        for _, s in summary.iterrows():
            sc, col = s["scenario"].split("\x1f")
            cells[(sc, s["algorithm"], col)] = s
    rows = list(dict.fromkeys([*ref.index, *runs["row"]]))
    columns = list(dict.fromkeys([*ref.columns, *runs["column"]]))
    out = []
    for sc in list(dict.fromkeys(runs["scale"])) or [None]:
        part = runs[runs["scale"] == sc]
        for r in rows:
            for c in columns:
                s = cells.get((sc, r, c))
                in_cell = part[(part["row"] == r) & (part["column"] == c)]
                out.append({
                    "scale": sc, "row": r, "column": c,
                    "paper_pct": float(ref.loc[r, c]) if r in ref.index and c in ref.columns else math.nan,
                    f"{metric}_mean": math.nan if s is None else s[f"{metric}_mean"],
                    f"{metric}_std": math.nan if s is None else s[f"{metric}_std"],
                    **{k: 0 if s is None else int(s[k]) for k in _COUNTS},
                    "scenarios": ", ".join(dict.fromkeys(in_cell["scenario"])),
                })
    return pd.DataFrame(out)


def _metric(frame: pd.DataFrame) -> str:
    return next(c.removesuffix("_mean") for c in frame.columns if c.endswith("_mean"))


def _one_scale(frame: pd.DataFrame) -> str | None:
    scales = list(dict.fromkeys(frame["scale"]))
    if len(scales) > 1:
        raise ValueError(f"the comparison holds scales {', '.join(map(str, scales))}; format one at a time, "
                         "e.g. frame[frame['scale'] == 'tiny'], or pass scale= to compare()")
    return scales[0] if scales else None


def _cell(r: pd.Series, metric: str) -> str:
    paper = DASH if pd.isna(r["paper_pct"]) else f"{r['paper_pct']:.2f}"
    return f"{paper} / {acc_cell(r, metric.removesuffix('_acc'), '±')}"


def _grid(frame: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Headers and display rows in the paper's layout (one scale)."""
    _one_scale(frame)
    metric = _metric(frame)
    columns = list(dict.fromkeys(frame["column"]))
    cells = {(r["row"], r["column"]): _cell(r, metric) for _, r in frame.iterrows()}
    rows = [[row, *(cells[(row, c)] for c in columns)] for row in dict.fromkeys(frame["row"])]
    return ["Method", *columns], rows


def format_comparison(frame: pd.DataFrame, fmt: str) -> str:
    """One scale of :func:`compare` as Markdown or LaTeX (``paper / ours`` cells) or CSV (raw numbers)."""
    if fmt == "csv":
        buf = io.StringIO()
        frame.to_csv(buf, index=False, na_rep="", lineterminator="\n")
        return buf.getvalue()
    headers, rows = _grid(frame)
    if fmt == "markdown":
        align = ["left", *["right"] * (len(headers) - 1)]
        return tabulate(rows, headers, tablefmt="github", disable_numparse=True, colalign=align) + "\n"
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


def comparison_note(paper: str, table: str, scale: str | None) -> str:
    """What the cells are, and how far the scale allows comparing them."""
    t = reference_table(paper, table)
    what = {"final_acc": "final-round test accuracy", "top_acc": "best test accuracy over rounds"}[t["metric"]]
    note = (f"Cells: paper / ours, in %. Ours: {what}, mean ± std over seeds (sample std, ddof=1; 0 for one seed); "
            "(k div.), (k failed): k seeds diverged or failed and are left out; —: no usable run.")
    if scale not in (None, PAPER_SCALE):
        note += (f" The {scale} scale uses substitute datasets/models and fewer rounds, "
                 "so only the orderings are comparable with the paper, not the numbers.")
    return note


def rich_comparison(frame: pd.DataFrame, paper: str, table: str) -> list[Table]:
    """One ``rich`` table per scale in the frame, for the terminal: only the columns with runs
    (every column when none has any); the written files keep the paper's whole layout."""
    tables = []
    for scale in dict.fromkeys(frame["scale"]):
        part = frame[frame["scale"].isna()] if scale is None else frame[frame["scale"] == scale]
        run = part.groupby("column", sort=False)["seeds"].sum()
        if (run > 0).any():
            part = part[part["column"].isin(run.index[run > 0])]
        headers, rows = _grid(part)
        caption = "paper / ours (%)" + ("" if scale in (None, PAPER_SCALE) else f"; {scale} scale: compare orderings only")
        t = Table(title=comparison_title(paper, table, scale), caption=caption)
        for i, h in enumerate(headers):
            t.add_column(h, justify="left" if i == 0 else "right", no_wrap=i == 0)
        for r in rows:
            t.add_row(*r)
        tables.append(t)
    return tables


def write_comparison(store, paper: str, table: str, out_dir: Path, scale: str | None = None) -> list[Path]:
    """Write ``<out_dir>/<paper>_table<table>_<scale>.{md,tex,csv}`` per scale with runs (none if no run)."""
    frame = compare(store, paper, table, scale)
    out_dir = Path(out_dir)
    paths = []
    caption = reference_table(paper, table)["caption"]
    title = load_reference(paper)["title"]
    for sc in dict.fromkeys(frame["scale"].dropna()):
        part = frame[frame["scale"] == sc]
        heading, note = comparison_title(paper, table, sc), comparison_note(paper, table, sc)
        texts = {
            ".md": f"## {heading}\n\n{title}, Table {table}: _{caption}_\n\n"
                   f"{format_comparison(part, 'markdown')}\n_{note}_\n",
            ".tex": f"% {heading}\n% {note}\n{format_comparison(part, 'latex')}",
            ".csv": format_comparison(part, "csv"),
        }
        out_dir.mkdir(parents=True, exist_ok=True)
        for suffix, text in texts.items():
            path = out_dir / f"{paper}_table{table}_{sc}{suffix}"
            path.write_text(text, encoding="utf-8")
            paths.append(path)
    return paths
