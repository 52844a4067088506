"""Accuracy curves from the store: test accuracy vs communication round or vs communicated bits.

Per algorithm, the line is the mean over seeds at each evaluated round and the band is ± one
std (sample std, ddof=1; no band where a single seed is left). A run that diverged, failed or is
still running simply ends where its rows end (the mean is over the seeds present at each round);
the last point of a diverged or failed run is marked with an ×. On the bits axis, a point's x is
the mean over seeds of the cumulative bits_up + bits_down through that round (log scale).
Figures are drawn on matplotlib's Agg canvas, without pyplot, so nothing is ever displayed.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from fedbench.report.tables import BAD_STATUSES, file_stem, scenario_names

AXES = {
    "round": ("acc_vs_rounds", "communication round"),
    "bits": ("acc_vs_bits", "cumulative communicated bits (up + down)"),
}


def _evaluated(runs: pd.DataFrame, metrics: pd.DataFrame) -> pd.DataFrame:
    """Evaluated rows with algorithm, status, accuracy in percent and cumulative bits."""
    m = metrics.sort_values(["run_id", "round"]).copy()
    m["bits"] = (m["bits_up"].fillna(0) + m["bits_down"].fillna(0)).groupby(m["run_id"]).cumsum()
    m = m[m["test_acc"].notna()].merge(runs[["run_id", "algorithm", "status"]], on="run_id")
    m["acc"] = 100 * m["test_acc"]
    return m


def _curve(rows: pd.DataFrame) -> pd.DataFrame:
    """Per round: mean x (round, bits), mean and std accuracy over the seeds present."""
    g = rows.groupby("round")
    out = pd.DataFrame({"bits": g["bits"].mean(), "mean": g["acc"].mean(), "std": g["acc"].std(ddof=1)})
    return out.reset_index()


def _draw(fig: Figure, runs: pd.DataFrame, metrics: pd.DataFrame, x: str, title: str) -> None:
    ax = fig.add_subplot()
    ev = _evaluated(runs, metrics)
    for i, algo in enumerate(dict.fromkeys(runs["algorithm"])):
        rows = ev[ev["algorithm"] == algo]
        if x == "bits":
            rows = rows[rows["bits"] > 0]
        if rows.empty:
            continue
        color = f"C{i % 10}"  # same colour per algorithm position in both figures
        c = _curve(rows)
        marker = "o" if len(c) <= 10 else None  # a short curve (even a single point) stays visible
        ax.plot(c[x], c["mean"], color=color, label=str(algo), linewidth=1.6, marker=marker, markersize=3)
        band = c["std"].notna()
        ax.fill_between(c.loc[band, x], (c["mean"] - c["std"])[band], (c["mean"] + c["std"])[band],
                        color=color, alpha=0.2, linewidth=0)
        for _, run in rows[rows["status"].isin(list(BAD_STATUSES))].groupby("run_id"):
            last = run.iloc[-1]
            ax.plot([last[x]], [last["acc"]], marker="x", color=color, markersize=8, linestyle="none")
    if x == "bits":
        ax.set_xscale("log")
    ax.set_xlabel(AXES[x][1])
    ax.set_ylabel("test accuracy (%)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(title="mean ± 1 std over seeds; × = diverged/failed", fontsize="small", title_fontsize="small")


def plot_curves(store, out_dir: Path, scenario: str | None, x: str = "round") -> list[Path]:
    """Write ``<out_dir>/<scenario>_acc_vs_rounds.png`` (x="round") or ``_acc_vs_bits.png``
    (x="bits") for each selected scenario (default: every scenario in the store)."""
    if x not in AXES:
        raise ValueError(f"unknown x axis {x!r}; allowed: {', '.join(AXES)}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in scenario_names(store, scenario):
        runs = store.runs(name)
        fig = Figure(figsize=(6.4, 4.4), layout="constrained")
        FigureCanvasAgg(fig)
        _draw(fig, runs, store.metrics(runs["run_id"]), x, name)
        path = out_dir / f"{file_stem(name)}_{AXES[x][0]}.png"
        fig.savefig(path, dpi=150)
        paths.append(path)
    return paths


def plot_both(store, out_dir: Path, scenario: str | None) -> list[Path]:
    """Both figures (vs rounds and vs bits) for each selected scenario."""
    return plot_curves(store, out_dir, scenario, x="round") + plot_curves(store, out_dir, scenario, x="bits")
