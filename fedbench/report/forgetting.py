"""Continual-learning reports: accuracy matrices, Acc and Forgetting per algorithm, heat maps.

A continual run records, in the ``extra`` of each task's last round, ``task`` (i) and ``task_acc``
(the global model's accuracy on every task's test set): row i of the run's accuracy matrix A.
Acc and Forgetting (:mod:`fedbench.continual.metrics`, C-FLAG notes §6) need all S rows, so only
runs that recorded every task count; the others are reported as left out. Cells are
mean ± std over seeds in percent (std: ddof=1 for ≥ 2 seeds, 0 for one), as in C-FLAG Tables 2/3.
The heat map shows each algorithm's mean matrix over its complete seeds (rows: after task i;
columns: task j; tasks are numbered from 1, "task 1", …, in both figures); the curve (C-FLAG Fig. 2) shows, after each task i, the average accuracy over the
tasks seen so far A_i = (1/i) Σ_{j≤i} a_{i,j}, mean ± std over the complete seeds (matplotlib Agg,
nothing is displayed; style, y range, title and the PDF beside each PNG: :mod:`fedbench.report.figures`).
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from fedbench.continual.metrics import average_accuracy, average_accuracy_curve, forgetting
from fedbench.report.figures import band, legend, save, setting, style, titles, y_limits
from fedbench.report.tables import DASH, file_stem, markdown_grid, scenario_names


def accuracy_matrix(metrics: pd.DataFrame) -> np.ndarray:
    """One run's recorded rows ``[i, S]`` (i = tasks finished so far), ordered by task."""
    rows = {}
    for extra in metrics["extra"].dropna():
        logs = json.loads(extra)
        if "task_acc" in logs:
            rows[int(logs["task"])] = logs["task_acc"]
    if not rows:
        return np.zeros((0, 0))
    return np.array([rows[i] for i in sorted(rows)], dtype=float)


def run_matrices(store, scenario: str) -> dict[str, list[np.ndarray | None]]:
    """Per algorithm label, each seed's complete S × S matrix, or None for an incomplete run."""
    runs = store.runs(scenario)
    metrics = store.metrics(runs["run_id"])
    by_run = {rid: part for rid, part in metrics.groupby("run_id", sort=False)}
    out: dict[str, list[np.ndarray | None]] = {}
    for algo, rid, status in zip(runs["algorithm"], runs["run_id"], runs["status"]):
        a = accuracy_matrix(by_run[rid]) if rid in by_run else np.zeros((0, 0))
        complete = status == "finished" and a.size and a.shape[0] == a.shape[1]
        out.setdefault(algo, []).append(a if complete else None)
    return out


def _mean_std(values: list[float]) -> tuple[float, float]:
    v = [x for x in values if not math.isnan(x)]
    if not v:
        return math.nan, math.nan
    return float(np.mean(v)), float(np.std(v, ddof=1)) if len(v) > 1 else 0.0


def continual_summary(store, scenario: str) -> pd.DataFrame:
    """One row per algorithm: seeds, complete seeds, Acc and Forgetting mean/std (fractions)."""
    rows = []
    for algo, mats in run_matrices(store, scenario).items():
        done = [m for m in mats if m is not None]
        acc = _mean_std([average_accuracy(m) for m in done])
        fgt = _mean_std([forgetting(m) for m in done])
        rows.append(
            {
                "scenario": scenario,
                "algorithm": algo,
                "seeds": len(mats),
                "complete": len(done),
                "tasks": done[0].shape[0] if done else 0,
                "acc_mean": acc[0],
                "acc_std": acc[1],
                "forget_mean": fgt[0],
                "forget_std": fgt[1],
            }
        )
    return pd.DataFrame(rows)


def _cell(mean: float, std: float) -> str:
    return DASH if math.isnan(mean) else f"{100 * mean:.2f} ± {100 * std:.2f}"


def display_rows(summary: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Headers and cells: Algorithm, Seeds ("k/n" when only k recorded every task), Acc, Forgetting (%)."""
    headers = ["Algorithm", "Seeds", "Acc (%)", "Forgetting (%)"]
    rows = []
    for _, r in summary.iterrows():
        seeds = str(r["seeds"]) if r["complete"] == r["seeds"] else f"{r['complete']}/{r['seeds']}"
        rows.append(
            [str(r["algorithm"]), seeds, _cell(r["acc_mean"], r["acc_std"]), _cell(r["forget_mean"], r["forget_std"])]
        )
    return headers, rows


def markdown(summary: pd.DataFrame, scenario: str) -> str:
    headers, rows = display_rows(summary)
    table = markdown_grid(headers, rows).rstrip("\n")
    note = (
        "Acc = mean over tasks of the final model's accuracy; Forgetting = (1/(S−1)) Σ_{i<S} (a_ii − a_Si); "
        "mean ± std over the seeds that recorded every task (k/n: only k of n did)."
    )
    return f"## {scenario}: continual metrics\n\n{table}\n\n{note}\n"


HEATMAP_COLUMNS = 4  # heat maps per row; more algorithms wrap onto further rows


def task_labels(s: int) -> list[str]:
    """Tick labels of S tasks, 1-based as in the papers: "task 1", …, "task S"."""
    return [f"task {k}" for k in range(1, s + 1)]


def _specs(store, scenario: str) -> list[str]:
    return list(store.runs(scenario)["spec_json"])


def heatmap(store, scenario: str, path: Path) -> Path | None:
    """Each algorithm's mean accuracy matrix (%) as a heat map, ``HEATMAP_COLUMNS`` to a row, tasks numbered from 1
    (row "task i": after training task i; column "task j": its test set); a PDF beside the PNG; None
    if none is complete."""
    mats = {a: [m for m in ms if m is not None] for a, ms in run_matrices(store, scenario).items()}
    mats = {a: np.mean(ms, axis=0) for a, ms in mats.items() if ms}
    if not mats:
        return None
    cols = min(len(mats), HEATMAP_COLUMNS)
    rows = -(-len(mats) // cols)
    fig = Figure(figsize=(3.0 * cols + 1.0, 3.0 * rows + 0.6), layout="constrained")
    FigureCanvasAgg(fig)
    grid = fig.subplots(rows, cols, squeeze=False)
    axes = list(grid.flat)[: len(mats)]
    for ax in list(grid.flat)[len(mats) :]:
        ax.set_axis_off()
    for k, (ax, (algo, m)) in enumerate(zip(axes, mats.items())):
        image = ax.imshow(100 * m, vmin=0, vmax=100, cmap="viridis")
        s = len(m)
        for i in range(s):
            for j in range(s):
                ax.text(
                    j,
                    i,
                    f"{100 * m[i, j]:.0f}",
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="white" if m[i, j] < 0.6 else "black",
                )
        ax.set_title(str(algo), fontsize="medium")
        if k + cols >= len(mats):  # nothing below it
            ax.set_xlabel("test set of task j")
        if k % cols == 0:
            ax.set_ylabel("after training task i")
        ax.set_xticks(range(s), task_labels(s), rotation=45, ha="right", fontsize="small")
        ax.set_yticks(range(s), task_labels(s), fontsize="small")
    fig.colorbar(image, ax=list(grid.flat), label="accuracy a_ij (%)", shrink=0.8)
    fig.suptitle(
        f"{setting(_specs(store, scenario))}\n{scenario}: accuracy matrix (mean over seeds)", fontsize="medium"
    )
    return save(fig, path)


def curve_summary(store, scenario: str) -> pd.DataFrame:
    """Per algorithm with a complete seed and task i = 1..S: mean and std (ddof=1; NaN for one seed)
    over the complete seeds of A_i = (1/i) Σ_{j≤i} a_{i,j} (fractions), and the number of seeds."""
    rows = []
    for algo, mats in run_matrices(store, scenario).items():
        curves = np.array([average_accuracy_curve(m) for m in mats if m is not None])
        if not len(curves):
            continue
        std = curves.std(axis=0, ddof=1) if len(curves) > 1 else np.full(curves.shape[1], np.nan)
        for i, (mean, sd) in enumerate(zip(curves.mean(axis=0), std), start=1):
            rows.append({"algorithm": algo, "task": i, "mean": float(mean), "std": float(sd), "seeds": len(curves)})
    return pd.DataFrame(rows, columns=["algorithm", "task", "mean", "std", "seeds"])


def curve(store, scenario: str, path: Path) -> Path | None:
    """Average accuracy over the tasks seen so far (%) vs task ("task 1", …), mean ± 1 std band per
    algorithm (C-FLAG Fig. 2), style and y range of :mod:`fedbench.report.figures`; a PDF beside the PNG;
    None if no run is complete."""
    summary = curve_summary(store, scenario)
    if summary.empty:
        return None
    fig = Figure(figsize=(7.6, 4.4), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    means = []
    for i, (algo, c) in enumerate(summary.groupby("algorithm", sort=False)):
        kw = style(i, len(c))
        ax.plot(c["task"], 100 * c["mean"], label=str(algo), **kw)
        means.append(100 * c["mean"].to_numpy())
        ok = c["std"].notna()
        if ok.any():
            band(ax, c.loc[ok, "task"], 100 * (c["mean"] - c["std"])[ok], 100 * (c["mean"] + c["std"])[ok], kw["color"])
    tasks = int(summary["task"].max())
    ax.set_xticks(range(1, tasks + 1), task_labels(tasks), rotation=45 if tasks > 6 else 0)
    limits = y_limits(means)
    if limits:
        ax.set_ylim(*limits)
    ax.set_xlabel("after training task i")
    ax.set_ylabel("average accuracy over tasks seen (%)")
    titles(fig, ax, _specs(store, scenario), f"{scenario}: A_i = (1/i) Σ_(j≤i) a_ij")
    ax.grid(True, alpha=0.3)
    legend(ax, title="mean ± 1 std over complete seeds")
    return save(fig, path)


def continual_stem(scenario: str) -> str:
    """``<scenario>_continual``: the stem of its table (``.md``, ``.csv``) and of its figures (``_matrix.png``, ``_curve.png``)."""
    return file_stem(scenario) + "_continual"


def write_continual(store, tables_dir: Path, figures_dir: Path, scenario: str | None = None) -> list[Path]:
    """``<tables_dir>/<scenario>_continual.md`` and ``.csv``, ``<figures_dir>/<scenario>_continual_matrix.png``
    and ``_continual_curve.png`` for each selected scenario that has continual runs (default: every scenario
    in the store)."""
    tables_dir, figures_dir = Path(tables_dir), Path(figures_dir)
    paths: list[Path] = []
    for scen in scenario_names(store, scenario):
        summary = continual_summary(store, scen)
        if summary.empty or not (summary["tasks"] > 0).any():
            continue  # not a continual scenario (or nothing recorded yet)
        tables_dir.mkdir(parents=True, exist_ok=True)
        figures_dir.mkdir(parents=True, exist_ok=True)
        stem = continual_stem(scen)
        md, csv = tables_dir / f"{stem}.md", tables_dir / f"{stem}.csv"
        md.write_text(markdown(summary, scen))
        buf = io.StringIO()
        summary.to_csv(buf, index=False, na_rep="", lineterminator="\n")
        csv.write_text(buf.getvalue())
        paths += [md, csv]
        png = heatmap(store, scen, figures_dir / f"{stem}_matrix.png")
        paths += [png] if png else []
        png = curve(store, scen, figures_dir / f"{stem}_curve.png")
        paths += [png] if png else []
    return paths
