"""Paper-style tables from the store: accuracy, rounds-to-target and bits-to-target per algorithm.

Conventions (also written under every Markdown table):
- top accuracy of a seed = max test accuracy over its evaluated rounds; final = last evaluated round;
- mean ± std over seeds, std = sample std (ddof=1) for ≥ 2 seeds and 0 for a single seed;
- a diverged or failed seed has no top/final accuracy: the other seeds are averaged and the cell
  says how many were left out, "81.20 ± 0.30 (1 div.)"; '—' when no seed is left;
- a seed not finished (still training elsewhere, or interrupted) is never pooled: it is left out
  of every mean and of the (k/n) counts, the cell says so, "81.20 ± 0.30 (1 unfin.)", and a note
  under the table names it with the round it reached;
- rounds/bits to target τ: first evaluated round with test_acc ≥ τ, and the cumulative
  bits_up + bits_down through that round, averaged over the seeds that reached τ (a seed that
  reached τ before diverging counts); "(k/n)" when only k of n done seeds did, '—' when none did.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Callable
from pathlib import Path

import pandas as pd
from rich.table import Table
from tabulate import tabulate

from fedbench.report.health import blowup_notes, blowups, is_flagged
from fedbench.report.tuned import MARK, tuned_labels, tuning_notes

FORMATS = ("markdown", "latex", "csv")
BAD_STATUSES = {"diverged": "div.", "failed": "failed"}
LEFT_OUT = {**BAD_STATUSES, "running": "unfin."}  # the seeds a cell's mean leaves out, as the cell names them
DASH = "—"
_COUNTS = ("seeds", "finished", "diverged", "failed", "running")
_ACC_TOL = 1e-9  # test_acc ≥ τ − tol, so 0.1·8 counts as reaching 0.8


def _targets(spec_json: str) -> list[float]:
    return [float(t) for t in json.loads(spec_json).get("targets", [])]


def _tag(tau: float) -> str:
    return f"{tau:g}"


def _std(values: pd.Series) -> float:
    if len(values) == 0:
        return math.nan
    return float(values.std(ddof=1)) if len(values) > 1 else 0.0


def _run_stats(status: str, m: pd.DataFrame, targets: list[float]) -> dict[str, float]:
    """Top/final accuracy and (round, cumulative bits) at which each target is first reached; all NaN
    for a run that is not finished."""
    if status == "running":
        m = m.iloc[0:0]
    m = m.sort_values("round")
    cum_bits = (m["bits_up"].fillna(0) + m["bits_down"].fillna(0)).cumsum()
    ev = m[m["test_acc"].notna()]
    usable = status not in BAD_STATUSES and not ev.empty
    out = {
        "top": float(ev["test_acc"].max()) if usable else math.nan,
        "final": float(ev["test_acc"].iloc[-1]) if usable else math.nan,
    }
    for tau in targets:
        hit = ev.index[ev["test_acc"] >= tau - _ACC_TOL]
        out[f"round_{_tag(tau)}"] = float(m.loc[hit[0], "round"]) if len(hit) else math.nan
        out[f"bits_{_tag(tau)}"] = float(cum_bits.loc[hit[0]]) if len(hit) else math.nan
    return out


def _server_mb(m: pd.DataFrame) -> float:
    """The server state's size in MB that a run logged at its first round (NaN if it did not)."""
    if "extra" not in m.columns or m.empty:
        return math.nan
    first = m.sort_values("round")["extra"].iloc[0]
    value = json.loads(first).get("server_state_mb") if isinstance(first, str) else None
    return math.nan if value is None else float(value)


def _participation(m: pd.DataFrame) -> float:
    """The mean number of clients a round trained, from the round logs of a run under client availability or
    stragglers (``participants``, else ``sampled``: fedbench/engine/availability.py); NaN without them."""
    if "extra" not in m.columns or m.empty:
        return math.nan
    logged = [e for e in m["extra"] if isinstance(e, str) and ('"sampled"' in e or '"participants"' in e)]
    if not logged:
        return math.nan
    counts = []
    for extra in logged:
        entry = json.loads(extra)
        counts.append(entry.get("participants", entry.get("sampled")))
    return float(pd.Series(counts, dtype="float64").mean())


def _epsilon(m: pd.DataFrame) -> float:
    """The ε a DP-FedAvg run had spent after its last recorded round (``epsilon`` in the round logs,
    fedbench/privacy.py; ∞ for z = 0); NaN without the logs."""
    if "extra" not in m.columns or m.empty:
        return math.nan
    logged = [e for e in m.sort_values("round")["extra"] if isinstance(e, str) and '"epsilon"' in e]
    return float(json.loads(logged[-1])["epsilon"]) if logged else math.nan


def fallback_notes(runs: pd.DataFrame, metrics: pd.DataFrame) -> list[str]:
    """One line per algorithm whose stored round logs count QP projections that fell back (GradMA's
    ``qp_fallbacks``: blocks left unprojected), for under its table; none when every one solved."""
    if metrics.empty or "extra" not in metrics.columns:
        return []
    logged = metrics[metrics["extra"].map(lambda e: isinstance(e, str) and '"qp_fallbacks"' in e).astype(bool)]
    per_run: dict[str, int] = {}
    for run_id, extra in zip(logged["run_id"], logged["extra"]):
        per_run[run_id] = per_run.get(run_id, 0) + int(json.loads(extra)["qp_fallbacks"] or 0)
    counts = (
        pd.Series([per_run.get(r, 0) for r in runs["run_id"]], dtype="int64")
        .groupby(runs["algorithm"].to_numpy(), sort=False)
        .sum()
    )
    return [f"{algo}: {int(n):,} QP projections fell back (left unprojected)" for algo, n in counts.items() if n > 0]


def footnotes(notes: list[str]) -> tuple[str, str]:
    """``notes`` as lines under a table: Markdown (one italic paragraph each) and LaTeX comments."""
    return "".join(f"\n_{n}_\n" for n in notes), "".join(f"% {n}\n" for n in notes)


def summarize(runs: pd.DataFrame, metrics: pd.DataFrame) -> pd.DataFrame:
    """One row per (scenario, algorithm), in the runs' creation order (see the module docstring)."""
    scen_targets: dict[str, list[float]] = {}
    for scen, spec_json in zip(runs["scenario"], runs["spec_json"]):
        scen_targets.setdefault(scen, [])
        scen_targets[scen] = sorted(set(scen_targets[scen]) | set(_targets(spec_json)))
    all_targets = sorted({t for ts in scen_targets.values() for t in ts})
    by_run = {rid: part for rid, part in metrics.groupby("run_id", sort=False)}
    empty = metrics.iloc[0:0]
    flagged = blowups(runs, metrics)
    tuned = tuned_labels(runs)  # the column appears only in tables with a tuned run

    rows = []
    for (scen, algo), group in runs.groupby(["scenario", "algorithm"], sort=False):
        stats = pd.DataFrame(
            [
                _run_stats(st, by_run.get(rid, empty), scen_targets[scen])
                for rid, st in zip(group["run_id"], group["status"])
            ]
        )
        status = group["status"].value_counts()
        row: dict[str, object] = {"scenario": scen, "algorithm": algo, "seeds": len(group)}
        if tuned:
            row["tuned"] = algo in tuned
        row["server_mb"] = float(pd.Series([_server_mb(by_run.get(rid, empty)) for rid in group["run_id"]]).mean())
        participation = pd.Series([_participation(by_run.get(rid, empty)) for rid in group["run_id"]]).mean()
        if not pd.isna(participation):  # the column exists only where clients come and go (availability, stragglers)
            row["participation"] = float(participation)
        epsilon = pd.Series([_epsilon(by_run.get(rid, empty)) for rid in group["run_id"]]).mean()
        if not pd.isna(epsilon):  # the column exists only in tables with a DP-FedAvg run (privacy)
            row["epsilon"] = float(epsilon)
        row.update({s: int(status.get(s, 0)) for s in _COUNTS[1:]})
        row["blowup"] = int(group["run_id"].isin(list(flagged)).sum())
        for name in ("top", "final"):
            valid = stats[name].dropna()
            row[f"{name}_acc_mean"] = float(valid.mean()) if len(valid) else math.nan
            row[f"{name}_acc_std"] = _std(valid)
        for tau in all_targets:
            t = _tag(tau)
            if tau not in scen_targets[scen]:
                row.update({f"rounds_to_{t}": math.nan, f"reached_{t}": pd.NA, f"bits_to_{t}": math.nan})
                continue
            reached = stats[f"round_{t}"].notna()
            row[f"rounds_to_{t}"] = float(stats.loc[reached, f"round_{t}"].mean()) if reached.any() else math.nan
            row[f"reached_{t}"] = int(reached.sum())
            row[f"bits_to_{t}"] = float(stats.loc[reached, f"bits_{t}"].mean()) if reached.any() else math.nan
        rows.append(row)
    summary = pd.DataFrame(rows)
    if summary.empty:
        return summary
    counts = [c for c in summary.columns if c in (*_COUNTS, "blowup") or c.startswith("reached_")]
    return summary.astype({c: "Int64" for c in counts})


def _target_tags(summary: pd.DataFrame) -> list[str]:
    """Targets that apply to at least one row (a scenario without τ has reached_τ = NA)."""
    tags = [c.removeprefix("reached_") for c in summary.columns if c.startswith("reached_")]
    return [t for t in sorted(tags, key=float) if summary[f"reached_{t}"].notna().any()]


def _status_text(row: pd.Series) -> str:
    labels = {"finished": "fin.", "diverged": "div.", "failed": "failed", "running": "run."}
    parts = [f"{row[k]} {v}" for k, v in labels.items() if row[k]]
    if "blowup" in row.index and is_flagged(row["blowup"]):
        parts.append(f"{row['blowup']} blow-up")
    return ", ".join(parts)


def acc_cell(row: pd.Series, name: str, pm: str) -> str:
    mean, std = row[f"{name}_acc_mean"], row[f"{name}_acc_std"]
    if pd.isna(mean):
        return DASH
    cell = f"{100 * mean:.2f} {pm} {100 * std:.2f}"
    bad = [f"{row[s]} {short}" for s, short in LEFT_OUT.items() if row.get(s, 0)]
    if "blowup" in row.index and is_flagged(row["blowup"]):
        bad.append(f"{row['blowup']} blow-up")
    return cell + (f" ({', '.join(bad)})" if bad else "")


def _reach_cell(row: pd.Series, tag: str, kind: str) -> str:
    k = row[f"reached_{tag}"]
    if pd.isna(k):
        return ""  # τ is not a target of this row's scenario
    if k == 0:
        return DASH
    v = row[f"{kind}_to_{tag}"]
    cell = f"{math.floor(v + 0.5)}" if kind == "rounds" else f"{v:.2e}"
    done = row["seeds"] - row["running"]
    return cell + (f" ({k}/{done})" if k < done else "")


def _cells(summary: pd.DataFrame, pm: str, pct: str) -> tuple[list[str], list[list[str]]]:
    """Headers and display rows shared by the Markdown, LaTeX and rich renderings."""
    multi = summary["scenario"].nunique() > 1
    tags = _target_tags(summary)
    headers = (["Scenario"] if multi else []) + [
        "Algorithm",
        "Seeds",
        "Status",
        f"Top acc. ({pct})",
        f"Final acc. ({pct})",
    ]
    for t in tags:
        headers += [f"Rounds to {100 * float(t):g}{pct}", f"Bits to {100 * float(t):g}{pct}"]
    memory = "server_mb" in summary.columns and summary["server_mb"].notna().any()
    if memory:
        headers.append("Server state (MB)")  # the server's algorithm state (GradMA's memory D, SCAFFOLD's c_i, ...)
    joined = "participation" in summary.columns and summary["participation"].notna().any()
    if joined:
        headers.append("Clients / round")  # the realised participation under client availability or stragglers
    private = "epsilon" in summary.columns and summary["epsilon"].notna().any()
    if private:
        headers.append("ε")  # DP-FedAvg's ε spent by the last round, at the run's δ (privacy)
    rows = []
    for _, r in summary.iterrows():
        label = f"{r['algorithm']} {MARK}" if bool(r.get("tuned", False)) else str(r["algorithm"])
        cells = ([str(r["scenario"])] if multi else []) + [label, str(r["seeds"]), _status_text(r)]
        cells += [acc_cell(r, "top", pm), acc_cell(r, "final", pm)]
        for t in tags:
            cells += [_reach_cell(r, t, "rounds"), _reach_cell(r, t, "bits")]
        if memory:
            cells.append("" if pd.isna(r["server_mb"]) else f"{r['server_mb']:.3g}")
        if joined:
            cells.append("" if pd.isna(r["participation"]) else f"{r['participation']:.2f}")
        if private:
            cells.append(_epsilon_cell(r["epsilon"]))
        rows.append(cells)
    return headers, rows


def _epsilon_cell(value: float) -> str:
    """ε to three digits, ∞ for a run without noise, empty for a run without privacy."""
    if pd.isna(value):
        return ""
    return "∞" if math.isinf(value) else f"{value:.3g}"


def _right(header: str) -> bool:
    """Numeric columns are right-aligned."""
    return header.split()[0] in ("Seeds", "Top", "Final", "Rounds", "Bits", "Server", "Clients", "ε")


_LATEX_SPECIAL = re.compile(r"([&%$#_{}])")


def latex_escape(text: str) -> str:
    return _LATEX_SPECIAL.sub(r"\\\1", text).replace("~", r"\textasciitilde{}").replace("^", r"\^{}")


def _latex(summary: pd.DataFrame) -> str:
    headers, rows = _cells(summary, pm="±", pct="%")
    esc = [
        [latex_escape(c).replace("±", r"$\pm$").replace("ε", r"$\varepsilon$").replace("∞", r"$\infty$") for c in row]
        for row in [headers, *rows]
    ]
    lines = [
        r"% requires \usepackage{booktabs}",
        r"\begin{tabular}{" + "".join("r" if _right(h) else "l" for h in headers) + "}",
        r"\toprule",
        " & ".join(esc[0]) + r" \\",
        r"\midrule",
        *[" & ".join(r) + r" \\" for r in esc[1:]],
        r"\bottomrule",
        r"\end{tabular}",
    ]
    return "\n".join(lines) + "\n"


def _csv(summary: pd.DataFrame) -> str:
    keep = set(_target_tags(summary))
    dropped = [
        c for c in summary.columns if re.match(r"(rounds_to|reached|bits_to)_", c) and c.split("_")[-1] not in keep
    ]
    if "blowup" in summary.columns and not summary["blowup"].fillna(0).astype(int).any():
        dropped.append("blowup")  # the column appears only in tables with a flagged run
    buf = io.StringIO()
    summary.drop(columns=dropped).to_csv(buf, index=False, na_rep="", quoting=csv.QUOTE_MINIMAL, lineterminator="\n")
    return buf.getvalue()


def markdown_grid(headers: list[str], rows: list[list[str]], align: list[str] | None = None) -> str:
    """A GitHub Markdown table of already formatted cells (first column left, the others right,
    unless ``align`` says otherwise), ending in a newline."""
    align = align or ["left", *["right"] * (len(headers) - 1)]
    return tabulate(rows, headers, tablefmt="github", disable_numparse=True, colalign=align) + "\n"


def format_table(summary: pd.DataFrame, fmt: str) -> str:
    """The summary as a Markdown, LaTeX (booktabs tabular) or CSV (raw numbers, NaN empty) table."""
    if fmt == "markdown":
        headers, rows = _cells(summary, pm="±", pct="%")
        return markdown_grid(headers, rows, ["right" if _right(h) else "left" for h in headers])
    if fmt == "latex":
        return _latex(summary)
    if fmt == "csv":
        return _csv(summary)
    raise ValueError(f"unknown table format {fmt!r}; allowed: {', '.join(FORMATS)}")


def rich_table(summary: pd.DataFrame, title: str) -> Table:
    """The summary as a ``rich`` table for the terminal."""
    headers, rows = _cells(summary, pm="±", pct="%")
    table = Table(title=title)
    for i, h in enumerate(headers):  # never break a name or a number; notes like "(1/2)" may wrap
        if _right(h):
            table.add_column(h, justify="right", min_width=max((len(r[i].split(" (")[0]) for r in rows), default=0))
        elif h in ("Scenario", "Algorithm"):
            table.add_column(h, min_width=max([len(h), *(len(r[i]) for r in rows)]))
        else:
            table.add_column(h)
    for row in rows:
        table.add_row(*row)
    return table


def scenario_names(store, scenario: str | None) -> list[str]:
    """``[scenario]`` if it has runs in the store, else every scenario in creation order."""
    names = list(dict.fromkeys(store.runs()["scenario"]))
    if scenario is None:
        return names
    if scenario not in names:
        raise ValueError(
            f"no runs of scenario {scenario!r} in {store.db_path}; scenarios there: {', '.join(names) or 'none'}"
        )
    return [scenario]


def file_stem(scenario: str) -> str:
    """The scenario name made safe for a file name."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", scenario)


def write_formats(
    out_dir: Path, stem: str, render: Callable[[str], str], formats: tuple[str, ...] = ("markdown", "csv")
) -> list[Path]:
    """``<out_dir>/<stem>.md`` / ``.csv`` (/ ``.tex``): ``render(fmt)`` for each format, written UTF-8."""
    suffixes = {"markdown": ".md", "csv": ".csv", "latex": ".tex"}
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for fmt in formats:
        path = out_dir / f"{stem}{suffixes[fmt]}"
        path.write_text(render(fmt), encoding="utf-8")
        paths.append(path)
    return paths


SUMMARY_NOTE = "mean ± std over seeds (std: sample, ddof=1; 0 for one seed); (k/n): k of n seeds reached the target"


def unfinished_notes(runs: pd.DataFrame, metrics: pd.DataFrame) -> list[str]:
    """One line per run not finished (algorithm, seed, the last round recorded of how many), left out
    of the means; none when every run is done."""
    open_runs = runs[runs["status"] == "running"]
    reached = metrics.groupby("run_id")["round"].max() if not metrics.empty else pd.Series(dtype="int64")
    lines = []
    for rid, algo, seed, spec_json in zip(
        open_runs["run_id"], open_runs["algorithm"], open_runs["seed"], open_runs["spec_json"]
    ):
        rounds = json.loads(spec_json).get("rounds")
        last = int(reached.get(rid, 0))
        lines.append(
            f"{algo} seed {seed}: not finished, round {last}"
            + (f" of {rounds}" if rounds else "")
            + " recorded; left out of the means"
        )
    return lines


def summary_notes(runs: pd.DataFrame, metrics: pd.DataFrame) -> list[str]:
    """The lines under a scenario's table after :data:`SUMMARY_NOTE`: runs not finished, QP fallbacks,
    flagged blow-ups and how the tuned (†) rows were tuned."""
    return (
        unfinished_notes(runs, metrics)
        + fallback_notes(runs, metrics)
        + blowup_notes(runs, blowups(runs, metrics))
        + tuning_notes(runs)
    )


def write_tables(store, out_dir: Path, scenario: str | None) -> list[Path]:
    """Write ``<out_dir>/<scenario>.md``, ``.tex`` and ``.csv`` for each selected scenario."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in scenario_names(store, scenario):
        runs = store.runs(name)
        metrics = store.metrics(runs["run_id"])
        summary = summarize(runs, metrics)
        note = SUMMARY_NOTE
        md_notes, tex_notes = footnotes(summary_notes(runs, metrics))
        texts = {
            ".md": f"## {name}\n\n{format_table(summary, 'markdown')}\n_{note}_\n{md_notes}",
            ".tex": f"% {name}: {note}\n{tex_notes}{format_table(summary, 'latex')}",
            ".csv": format_table(summary, "csv"),
        }
        for suffix, text in texts.items():
            path = out_dir / f"{file_stem(name)}{suffix}"
            path.write_text(text, encoding="utf-8")
            paths.append(path)
    return paths
