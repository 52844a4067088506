"""What every fedbench figure shares: a style per curve, the y-range rule, the setting in the title, the files.

* **Style.** The curve at position i of a figure (the order of its algorithms) gets colour ``C{i}``, line
  style ``LINESTYLES[i]`` and marker ``MARKERS[i]`` (cycled), so curves that overlap stay apart in
  grey print too; markers are drawn at about ``MARKS`` points per curve, offset by i so that two
  curves' markers do not sit on each other; the legend sits outside the axes, on the right. The ± std band is a light fill (alpha ``BAND_ALPHA``) whose
  edges are thin lines in the curve's colour, so overlapping bands never mix into one colour.
* **Y range** (:func:`y_limits`). Figures show where the algorithms differ, not the whole climb: the
  y axis spans the plotted means over the last half of each curve's points (a curve with at most
  ``SHORT`` points: all of them), together with every × (a diverged or failed run's last point), padded
  by ``PAD`` of that span on each side (at least ``MIN_PAD`` of the largest |value|, so a flat set of
  curves still gets a visible range). Each curve's last point is in its last half, so no curve's end
  is ever hidden; the early rounds may start below the axis. On a log axis the rule is applied to
  log10 of the values.
* **Title** (:func:`setting`). The figure's title is its setting read from the runs' stored specs:
  dataset, model, clients S/N per round, partition (and the task stream of a continual run); a
  field that differs between the runs lists its values. The scenario name is the subtitle.
* **Files** (:func:`save`). Every figure is written as a PNG (150 dpi) and, beside it with the same
  stem, a vector PDF whose bytes depend only on the figure (no creation date in its metadata).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

LINESTYLES = ("-", "--", "-.", ":", (0, (5, 1)), (0, (3, 1, 1, 1, 1, 1)), (0, (1, 1)), (0, (5, 2, 1, 2, 1, 2)))
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")
MARKS = 8
BAND_ALPHA = 0.08
SHORT = 10
PAD = 0.08
MIN_PAD = 0.005


def style(i: int, points: int) -> dict[str, Any]:
    """Line keyword arguments of the curve at position ``i`` with ``points`` points."""
    step = max(1, points // MARKS)
    return {
        "color": f"C{i % 10}",
        "linestyle": LINESTYLES[i % len(LINESTYLES)],
        "marker": MARKERS[i % len(MARKERS)],
        "markevery": (i % step, step),
        "markersize": 4,
        "linewidth": 1.5 if points <= 60 else 1.1,
    }


def band(ax, x, lo, hi, color: str, log: bool = False) -> None:
    """A light ± std fill with thin edges in the curve's colour; on a log axis only where mean − std > 0
    (elsewhere the band has no lower edge to draw)."""
    x, lo, hi = (np.asarray(v, dtype=float) for v in (x, lo, hi))
    if log:
        keep = lo > 0
        x, lo, hi = np.where(keep, x, np.nan), np.where(keep, lo, np.nan), np.where(keep, hi, np.nan)
    ax.fill_between(x, lo, hi, facecolor=color, alpha=BAND_ALPHA, linewidth=0)
    for edge in (lo, hi):
        ax.plot(x, edge, color=color, linewidth=0.4, alpha=0.5, label="_band")


def legend(ax, handles=None, labels=None, title: str = "") -> None:
    """The legend outside the axes, on the right, so it never covers a curve."""
    if handles is None:
        handles, labels = ax.get_legend_handles_labels()
    if handles:
        ax.legend(
            handles,
            labels,
            title=title,
            fontsize="small",
            title_fontsize="small",
            loc="upper left",
            bbox_to_anchor=(1.01, 1.0),
            borderaxespad=0.0,
        )


def tail(means: np.ndarray) -> np.ndarray:
    """The points of one curve that the y range must show: its last half (all of a short curve)."""
    means = np.asarray(means, dtype=float)
    return means if len(means) <= SHORT else means[len(means) // 2 :]


def y_limits(
    curves: Iterable[np.ndarray], crosses: Iterable[float] = (), log: bool = False
) -> tuple[float, float] | None:
    """The y range of the rule above from each curve's means (in plotting order) and the × points;
    None when nothing finite (positive, on a log axis) is left."""
    values = np.concatenate([tail(c) for c in curves] + [np.asarray(list(crosses), dtype=float)])
    values = values[np.isfinite(values) & ((values > 0) if log else True)]
    if not values.size:
        return None
    if log:
        values = np.log10(values)
    lo, hi = float(values.min()), float(values.max())
    pad = max(PAD * (hi - lo), MIN_PAD * max(abs(lo), abs(hi)), 1e-9 if not log else 0.01)
    lo, hi = lo - pad, hi + pad
    return (10**lo, 10**hi) if log else (lo, hi)


def _partition(p: dict[str, Any]) -> str:
    p = dict(p)
    kind = p.pop("kind", "?")
    p.pop("min_samples", None)
    if kind == "iid":
        return "IID"
    if kind in ("dirichlet", "dirichlet_balanced") and "omega" in p:
        return ("balanced " if kind == "dirichlet_balanced" else "") + f"Dir ω = {p['omega']:g}"
    if kind == "classes_per_client" and "k" in p:
        return f"{p['k']} classes per client"
    return kind + "".join(f" {k}={v}" for k, v in sorted(p.items()))


def _fields(spec: dict[str, Any]) -> dict[str, str]:
    """The setting of one run's spec, field by field; a field the spec lacks is left out."""
    out = {}
    if (spec.get("dataset") or {}).get("name"):
        out["dataset"] = str(spec["dataset"]["name"])
    model = spec.get("model") or {}
    if model.get("name"):
        hidden = model.get("hidden")
        out["model"] = str(model["name"]) + (f" {'-'.join(map(str, hidden))}" if hidden else "")
    clients = spec.get("clients") or {}
    if clients.get("num"):
        out["clients"] = f"S/N = {clients.get('per_round', clients['num'])}/{clients['num']}"
    if spec.get("partition"):
        out["partition"] = _partition(spec["partition"])
    cont = spec.get("continual")
    if cont:
        out["continual"] = f"{cont.get('tasks', '?')} tasks ({cont.get('mode', '?')}-incremental)"
    return out


def setting(spec_jsons: Iterable[str]) -> str:
    """One line naming the dataset, model, S/N, partition (and continual stream) of the runs; a field
    that differs between runs lists its values in first-seen order ("S/N = 3/3 | 5/5")."""
    rows = [_fields(json.loads(s) if isinstance(s, str) else {}) for s in spec_jsons]
    keys = dict.fromkeys(k for r in rows for k in r)
    return " · ".join(" | ".join(dict.fromkeys(r[k] for r in rows if k in r)) for k in keys)


def titles(fig: Figure, ax, spec_jsons: Iterable[str], subtitle: str) -> None:
    """The setting as the figure's title, the scenario (``subtitle``) small and grey under it."""
    fig.suptitle(setting(spec_jsons), fontsize="medium")
    ax.set_title(subtitle, fontsize="small", color="0.35")


def save(fig: Figure, png: Path) -> Path:
    """Write ``png`` and, beside it, ``png`` with suffix ``.pdf``; both byte-reproducible. Returns ``png``."""
    fig.savefig(png, dpi=150, metadata={"Software": None})
    fig.savefig(png.with_suffix(".pdf"), metadata={"CreationDate": None, "Producer": None, "Creator": None})
    return png
