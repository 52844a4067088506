"""Which classes each client holds (GradMA's Fig. 8, for any scenario): a scatter of (client, class), each point
sized by the number of the client's training samples of that class.

The partition drawn is the one the runs use: the scenario's dataset loaded as a run loads it, split by
:func:`~fedbench.engine.setup.partition_clients` from the seed's ``("partition",)`` stream (before a validation
hold-out or ``local.data_fraction`` sub-sample). Each panel's title gives the dataset, N and the partition, and
its label skew (:func:`~fedbench.data.partition_stats.partition_summary`: the mean total-variation distance of a
client's label distribution from the global one).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from fedbench.data import load_dataset
from fedbench.data.partition_stats import label_histogram, partition_summary
from fedbench.report import figures
from fedbench.scenario import RunSpec

MAX_POINT = 60.0  # the area (points²) of the largest (client, class) count of a panel


@dataclass(frozen=True)
class Panel:
    """One scenario's partition: its label histogram ``[N, C]`` and its title."""

    hist: np.ndarray
    title: str

    @property
    def skew(self) -> float:
        """The partition's label skew: mean TV distance of a client's labels from the global ones."""
        return float(partition_summary(self.hist)["label_skew_tv"])


def panel(spec: RunSpec, seed: int, data_dir: Path, download: bool = False) -> Panel:
    """The partition of ``spec``'s clients at ``seed`` (a continual scenario partitions each task: ValueError)."""
    from fedbench.engine.setup import partition_clients

    if spec.continual is not None:
        raise ValueError(
            f"scenario {spec.scenario!r} is continual: each task is partitioned on its own; draw a plain one"
        )
    data = load_dataset(spec.dataset["name"], spec.components.dataset, data_dir, download)
    parts = partition_clients(spec, data, seed)
    hist = label_histogram(data.train.y.numpy(), [p.numpy() for p in parts], data.num_classes)
    setting = {"dataset": spec.dataset, "clients": spec.clients.model_dump(), "partition": spec.partition}
    return Panel(hist, f"{spec.scenario}\n{figures.setting([json.dumps(setting)])}")


def draw(panels: Sequence[Panel], path: Path, title: str, columns: int = 3) -> Path:
    """Write the panels (``columns`` per row) to ``path`` (PNG, with a PDF beside it); returns ``path``."""
    cols = min(columns, len(panels))
    rows = -(-len(panels) // cols)
    fig = Figure(figsize=(4.2 * cols, 3.6 * rows), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False)
    for ax, p in zip(axes.flat, panels):
        clients, classes = np.nonzero(p.hist)
        counts = p.hist[clients, classes]
        sizes = np.maximum(MAX_POINT * counts / counts.max(), 1.0)  # a single sample stays visible
        ax.scatter(clients, classes, s=sizes, color="C0", alpha=0.7, linewidths=0)
        ax.set_title(f"{p.title}\nlabel skew (TV) {p.skew:.2f}", fontsize="small")
        ax.set_xlim(-1, p.hist.shape[0])
        ax.set_ylim(-1, p.hist.shape[1])
        ax.set_xlabel("client", fontsize="small")
        ax.set_ylabel("class", fontsize="small")
        ax.tick_params(labelsize="x-small")
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    fig.suptitle(title, fontsize="medium")
    path.parent.mkdir(parents=True, exist_ok=True)
    return figures.save(fig, path)


def partition_name(stem: str) -> str:
    """The file name of a partition figure: ``<stem>_partitions.png``."""
    return f"{stem}_partitions.png"


def write_partitions(
    specs: Sequence[RunSpec],
    figures_dir: Path,
    stem: str,
    seed: int = 0,
    data_dir: Path = Path("data"),
    download: bool = False,
) -> Path:
    """One figure of the partitions of ``specs`` (each scenario's first run): ``<figures_dir>/<stem>_partitions.png``.
    Raises ValueError for a continual scenario."""
    panels = [panel(spec, seed, data_dir, download) for spec in specs]
    return draw(
        panels, Path(figures_dir) / partition_name(stem), f"{stem}: which classes each client holds (seed {seed})"
    )
