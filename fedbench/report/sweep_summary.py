"""A continual sweep in one figure (C-FLAG Figs. 5–6): Acc and Forgetting of every algorithm against the value the
grid varies (clients, memory per task, local epochs), instead of one table per grid point.

Each point of the grid file is one scenario; its runs' Acc (the average accuracy over all tasks after the last)
and Forgetting come from :func:`~fedbench.report.forgetting.continual_summary` (mean ± std over the complete
seeds). The x axis names the keys the points differ in, each tick their values (``clients.num, clients.per_round``:
``3, 3``); the points keep the grid's order.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from fedbench.report.figures import legend, save, style
from fedbench.report.forgetting import continual_summary
from fedbench.report.tables import file_stem, write_formats
from fedbench.sweeps.grid import SweepPoint, expand_file


def _leaves(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, Mapping):
            out.update(_leaves(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def varied(points: list[SweepPoint]) -> tuple[str, list[str]]:
    """The keys the points' overrides differ in (the x label) and each point's values (its tick)."""
    leaves = [_leaves(p.overrides) for p in points]
    keys = [k for k in dict.fromkeys(k for leaf in leaves for k in leaf) if len({repr(x.get(k)) for x in leaves}) > 1]
    return ", ".join(keys), [", ".join(f"{x.get(k)}" for k in keys) for x in leaves]


def sweep_summary(store, points: list[SweepPoint], ticks: list[str]) -> pd.DataFrame:
    """One row per (point, algorithm): the point's tick (:func:`varied`), then the continual summary's columns."""
    frames = []
    for tick, point in zip(ticks, points):
        summary = continual_summary(store, point.scenario.name)
        if not summary.empty:
            frames.append(summary.assign(value=tick))
    if not frames:
        raise ValueError("no continual runs of the sweep's points in the store: run it first (fedbench sweep FILE)")
    table = pd.concat(frames, ignore_index=True)
    return table[["value", *[c for c in table.columns if c != "value"]]]


def draw(summary: pd.DataFrame, xlabel: str, title: str, path: Path) -> Path:
    """Acc and Forgetting (%) against the points, a line per algorithm with ±1 std bars; PNG and PDF."""
    fig = Figure(figsize=(9.6, 3.8), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 2)
    ticks = list(dict.fromkeys(summary["value"]))
    for ax, (column, name) in zip(axes, (("acc", "Acc (%)"), ("forget", "Forgetting (%)"))):
        for i, (algo, rows) in enumerate(summary.groupby("algorithm", sort=False)):
            x = np.array([ticks.index(v) for v in rows["value"]])
            kw = style(i, len(x))
            mean, std = 100 * rows[f"{column}_mean"].to_numpy(), 100 * rows[f"{column}_std"].fillna(0).to_numpy()
            ax.errorbar(x, mean, yerr=std, label=str(algo), capsize=3, **kw)
        ax.set_xticks(range(len(ticks)), ticks)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(name)
        ax.grid(True, alpha=0.3)
    legend(axes[1], title="mean ± 1 std over seeds")
    fig.suptitle(title, fontsize="medium")
    path.parent.mkdir(parents=True, exist_ok=True)
    return save(fig, path)


def sweep_stem(grid_file: str | Path, scale: str | None) -> str:
    """``<grid file's stem>[_<scale>]_sweep``: the stem of its table and figure."""
    return file_stem(Path(grid_file).stem) + (f"_{scale}" if scale and scale != "paper" else "") + "_sweep"


def write_sweep(store, grid_file: str | Path, scale: str | None, tables_dir: Path, figures_dir: Path) -> list[Path]:
    """``<stem>.md``/``.csv`` (the summary) in ``tables_dir`` and ``<stem>.png``/``.pdf`` in ``figures_dir``."""
    points = expand_file(grid_file, scale)
    xlabel, ticks = varied(points)
    xlabel = xlabel or "point"
    summary = sweep_summary(store, points, ticks)
    stem = sweep_stem(grid_file, scale)

    def render(fmt: str) -> str:
        if fmt == "csv":
            return summary.to_csv(index=False, na_rep="", lineterminator="\n")
        percent = {c: (100 * summary[c]).round(2) for c in ("acc_mean", "acc_std", "forget_mean", "forget_std")}
        shown = summary.assign(**percent).drop(columns=["scenario"])
        return f"## {stem}\n\n{xlabel} against Acc and Forgetting (%)\n\n{shown.to_markdown(index=False)}\n"

    title = f"{Path(grid_file).stem} ({scale or 'paper'}): Acc and Forgetting"
    return [*write_formats(tables_dir, stem, render), draw(summary, xlabel, title, figures_dir / f"{stem}.png")]
