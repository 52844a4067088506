"""Curves from the store: a metric (test accuracy by default) vs communication round or vs bits.

Metrics (``METRICS``): ``test_acc`` (%), ``consistency`` ((1/S)Σ‖x_i,K − x̄‖², log y),
``client_acc_std`` (std over clients of the global model's accuracy, in points) and ``train_loss``;
any other name is a dotted path to a number in a round's ``extra`` logs, e.g. ``cflag.Gamma`` (C-FLAG's
Γ(t) of eq. (15), Fig. 4; linear y, labelled with the path, file stem ``cflag_Gamma``): rounds and runs
that do not log it are skipped, a list or mapping there is an error.
Per algorithm, the line is the mean over seeds at each round where the metric was recorded and
the band is ± one std (sample std, ddof=1; no band where a single seed is left). A run that
diverged, failed or is still running simply ends where its rows end (the mean is over the seeds
present at each round); the last point of a diverged or failed run is marked with an × (listed in the
legend only when the figure has one). Style per curve, y range, title and files (a PNG and a PDF beside
it, same stem): :mod:`fedbench.report.figures`. x axes
(``AXES``; the two bit axes are log scale, a point's x is the mean over seeds):

* ``round``: the communication round;
* ``bits``: cumulative bits_up + bits_down through that round, all clients together;
* ``uplink``: cumulative Σ_t bits_up_t / S_t, the uplink bits of one client that took part in
  every round (FedCAMS footnote 6: "we only count the client-to-server one-way communications";
  S_t = the spec's ``clients.per_round``). bits_up includes the BatchNorm running statistics
  that the clients send uncompressed, which the paper's bit axes leave out.
Figures are drawn on matplotlib's Agg canvas, without pyplot, so nothing is ever displayed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from fedbench.report import figures
from fedbench.report.tables import BAD_STATUSES, file_stem, scenario_names

AXES = {
    "round": ("rounds", "communication round"),
    "bits": ("bits", "cumulative communicated bits (up + down)"),
    "uplink": ("uplink", "cumulative uplink bits per client (Σ_t bits_up_t / S_t)"),
}
# metric -> (file-name stem, multiplier, y label, log y)
METRICS = {
    "test_acc": ("acc", 100.0, "test accuracy (%)", False),
    "consistency": ("consistency", 1.0, "local consistency (1/S)Σ‖x_i,K − x̄‖²", True),
    "client_acc_std": ("client_acc_std", 100.0, "std over clients of the global model's accuracy (points)", False),
    "train_loss": ("train_loss", 1.0, "mean local training loss", False),
}


class UnknownMetric(ValueError):
    """Neither a stored metric nor a number that any run of the scenario logs in ``extra``."""


def _spec(metric: str) -> tuple[str, float, str, bool]:
    """(file-name stem, multiplier, y label, log y) of a stored metric or of an extra-log path."""
    return METRICS.get(metric) or (file_stem(metric.replace(".", "_")), 1.0, metric, False)


def _lookup(logs: Any, path: str) -> Any:
    for key in path.split("."):
        if not isinstance(logs, dict) or key not in logs:
            return None
        logs = logs[key]
    return logs


def scalar_paths(logs: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Dotted paths of the numbers (not lists, strings or booleans) in one round's extra logs."""
    out = []
    for key, value in logs.items():
        if isinstance(value, dict):
            out += scalar_paths(value, f"{prefix}{key}.")
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out.append(f"{prefix}{key}")
    return out


def extra_values(extras: pd.Series, path: str) -> pd.Series:
    """The number at dotted ``path`` in each row's ``extra`` JSON; NaN where it is absent or null."""
    values = []
    for extra in extras:
        v = None if not isinstance(extra, str) else _lookup(json.loads(extra), path)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            kind = "mapping" if isinstance(v, dict) else type(v).__name__
            hint = f"; its numbers: {', '.join(scalar_paths(v, path + '.')) or 'none'}" if isinstance(v, dict) else ""
            raise ValueError(f"extra log {path!r} is a {kind}, not a number: only numbers can be plotted{hint}")
        values.append(np.nan if v is None else float(v))
    return pd.Series(values, index=extras.index, dtype="float64")


def _missing(metric: str, metrics: pd.DataFrame, run_id: str) -> UnknownMetric:
    """The error for an unknown metric, listing the numbers that ``run_id`` (the first run) logs in ``extra``."""
    extras = metrics.loc[metrics["run_id"] == run_id, "extra"].dropna()
    paths = dict.fromkeys(p for e in extras for p in scalar_paths(json.loads(e)))
    return UnknownMetric(
        f"{metric!r} is neither a stored metric (allowed: {', '.join(METRICS)}) nor a number "
        f"logged in any run's extra logs; numbers in run {run_id}'s extra logs: "
        f"{', '.join(paths) or 'none'}"
    )


def _evaluated(
    runs: pd.DataFrame, metrics: pd.DataFrame, metric: str = "test_acc", as_plotted: bool = True
) -> pd.DataFrame:
    """Rows where ``metric`` is finite, with algorithm, status, the metric (``y``: as plotted, test_acc in %,
    or as stored), cumulative bits and cumulative uplink bits per client (NaN for a run whose spec has no
    ``clients.per_round``). ``metric`` not in ``METRICS`` is a dotted extra-log path (:func:`extra_values`);
    UnknownMetric if no row logs it."""
    m = metrics.sort_values(["run_id", "round"]).copy()
    raw = m[metric] if metric in METRICS else extra_values(m["extra"], metric)
    if metric not in METRICS and not raw.notna().any():
        raise _missing(metric, m, str(runs["run_id"].iloc[0]))
    m["y"] = _spec(metric)[1] * raw if as_plotted else raw
    m["bits"] = (m["bits_up"].fillna(0) + m["bits_down"].fillna(0)).groupby(m["run_id"]).cumsum()
    per_round = {
        rid: float((json.loads(spec).get("clients") or {}).get("per_round") or np.nan)
        for rid, spec in zip(runs["run_id"], runs["spec_json"])
    }
    m["uplink"] = (m["bits_up"].fillna(0) / m["run_id"].map(per_round)).groupby(m["run_id"]).cumsum()
    return m[np.isfinite(m["y"])].merge(runs[["run_id", "algorithm", "status"]], on="run_id")


def _on_axis(ev: pd.DataFrame, algorithm: str, x: str) -> pd.DataFrame:
    """The algorithm's rows that have a point on the ``x`` axis (a bit axis is log: x > 0, NaN dropped)."""
    rows = ev[ev["algorithm"] == algorithm]
    return rows if x == "round" else rows[rows[x] > 0]


def _curve(rows: pd.DataFrame) -> pd.DataFrame:
    """Per round: mean x (round, bits, uplink), mean and std of the plotted metric over the seeds present
    (how many: ``seeds``)."""
    g = rows.groupby("round")
    out = pd.DataFrame(
        {
            "bits": g["bits"].mean(),
            "uplink": g["uplink"].mean(),
            "mean": g["y"].mean(),
            "std": g["y"].std(ddof=1),
            "seeds": g["y"].count(),
        }
    )
    return out.reset_index()


def curves(
    runs: pd.DataFrame, metrics: pd.DataFrame, x: str = "round", metric: str = "test_acc", as_plotted: bool = True
) -> pd.DataFrame:
    """The figure's lines as a table: per algorithm (in the runs' order) and round, the mean x on every
    axis, the mean and std of ``metric`` over the seeds present, and how many seeds; the rows of the
    ``x`` axis only (a bit axis drops points at 0 bits). ``as_plotted=False``: the metric as stored
    (test_acc as a fraction, not in %)."""
    if x not in AXES:
        raise ValueError(f"unknown x axis {x!r}; allowed: {', '.join(AXES)}")
    ev = _evaluated(runs, metrics, metric, as_plotted)
    rows = {algo: _on_axis(ev, algo, x) for algo in dict.fromkeys(runs["algorithm"])}
    parts = [_curve(r).assign(algorithm=algo) for algo, r in rows.items() if not r.empty]
    columns = ["algorithm", "round", "bits", "uplink", "mean", "std", "seeds"]
    return pd.concat(parts, ignore_index=True)[columns] if parts else pd.DataFrame(columns=columns)


def _draw(fig: Figure, runs: pd.DataFrame, metrics: pd.DataFrame, x: str, title: str, metric: str = "test_acc") -> None:
    """The curves of ``runs`` on one axes: style per algorithm position, y range, setting title and legend
    as :mod:`fedbench.report.figures` states them; ``title`` (the scenario) is the subtitle."""
    ax = fig.add_subplot()
    ev = _evaluated(runs, metrics, metric)
    log_y = _spec(metric)[3] and bool((ev["y"] > 0).any())
    means, crosses = [], []
    for i, algo in enumerate(dict.fromkeys(runs["algorithm"])):
        rows = _on_axis(ev, algo, x)
        if rows.empty:
            continue
        c = _curve(rows)
        kw = figures.style(i, len(c))
        ax.plot(c[x], c["mean"], label=str(algo), **kw)
        means.append(c["mean"].to_numpy())
        ok = c["std"].notna()
        if ok.any():
            figures.band(ax, c.loc[ok, x], (c["mean"] - c["std"])[ok], (c["mean"] + c["std"])[ok], kw["color"], log_y)
        for _, run in rows[rows["status"].isin(list(BAD_STATUSES))].groupby("run_id"):
            last = run.iloc[-1]
            ax.plot([last[x]], [last["y"]], marker="x", color=kw["color"], markersize=8, linestyle="none")
            crosses.append(float(last["y"]))
    if x != "round":
        ax.set_xscale("log")
    if log_y:
        ax.set_yscale("log")
    limits = figures.y_limits(means, crosses, log_y)
    if limits:
        ax.set_ylim(*limits)
    ax.set_xlabel(AXES[x][1])
    ax.set_ylabel(_spec(metric)[2])
    figures.titles(fig, ax, runs["spec_json"], title)
    ax.grid(True, alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    if crosses:
        handles.append(Line2D([], [], marker="x", color="0.2", markersize=8, linestyle="none"))
        labels.append("diverged / failed (last point)")
    figures.legend(ax, handles, labels, "mean ± 1 std over seeds")


def figure_name(scenario: str, x: str, metric: str = "test_acc", name: str | None = None) -> str:
    """The file name :func:`plot_curves` gives one scenario's figure, e.g. ``toy_acc_vs_rounds.png``."""
    stem = file_stem(scenario) + (f"_{name}" if name else "")
    return f"{stem}_{_spec(metric)[0]}_vs_{AXES[x][0]}.png"


def plot_curves(
    store,
    out_dir: Path,
    scenario: str | None,
    x: str = "round",
    metric: str = "test_acc",
    algorithms: list[str] | None = None,
    name: str | None = None,
) -> list[Path]:
    """Write ``<out_dir>/<scenario>_<m>_vs_rounds.png`` (x="round"), ``_<m>_vs_bits.png`` (x="bits") or
    ``_<m>_vs_uplink.png`` (x="uplink") for each selected scenario (default: every scenario in the
    store); ``<m>`` is ``acc`` for test_acc, else the metric's name (``toy_consistency_vs_rounds.png``).
    ``algorithms`` keeps only those labels, in that order (a paper figure's curves, e.g. GradMA-W
    against the worker-side baselines); ``name`` is inserted in the file name (``<scenario>_<name>_acc…``).
    An extra-log ``metric`` (``cflag.Gamma`` → ``<scenario>_cflag_Gamma_vs_rounds.png``) skips the scenarios
    where no run logs it; UnknownMetric (a ValueError) if none does. Each PNG has a PDF beside it (same
    stem); only the PNG paths are returned."""
    if x not in AXES:
        raise ValueError(f"unknown x axis {x!r}; allowed: {', '.join(AXES)}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths, missing = [], []
    for scen in scenario_names(store, scenario):
        runs = store.runs(scen)
        if algorithms:
            missing = [a for a in algorithms if a not in set(runs["algorithm"])]
            if missing:
                raise ValueError(
                    f"scenario {scen!r} has no runs labelled {', '.join(missing)}; "
                    f"it has: {', '.join(dict.fromkeys(runs['algorithm']))}"
                )
            order = {a: i for i, a in enumerate(algorithms)}
            runs = runs[runs["algorithm"].isin(order)].sort_values(
                "algorithm", key=lambda c: c.map(order), kind="stable"
            )
        fig = Figure(figsize=(7.6, 4.4), layout="constrained")
        FigureCanvasAgg(fig)
        try:
            _draw(fig, runs, store.metrics(runs["run_id"]), x, scen + (f" ({name})" if name else ""), metric)
        except UnknownMetric as exc:
            missing.append(exc)
            continue
        paths.append(figures.save(fig, out_dir / figure_name(scen, x, metric, name)))
    if missing and not paths:
        raise missing[0]
    return paths


def plot_both(store, out_dir: Path, scenario: str | None, metric: str = "test_acc") -> list[Path]:
    """Both figures (vs rounds and vs bits) for each selected scenario."""
    return plot_curves(store, out_dir, scenario, "round", metric) + plot_curves(
        store, out_dir, scenario, "bits", metric
    )
