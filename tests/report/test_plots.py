"""Accuracy curves are written as readable PNGs for each scenario and axis."""

from __future__ import annotations

from pathlib import Path

import matplotlib.image as mpimg
import pytest

from fedbench.report.plots import plot_both, plot_curves
from tests.report.test_tables import build_store


def test_plot_curves_writes_pngs(tmp_path: Path) -> None:
    store = build_store(tmp_path / "out")
    build_store(tmp_path / "out", targets=(0.5,), scenario="other")
    paths = plot_both(store, tmp_path / "figs", None)
    assert [p.name for p in paths] == [
        "toy_acc_vs_rounds.png", "other_acc_vs_rounds.png", "toy_acc_vs_bits.png", "other_acc_vs_bits.png",
    ]
    for p in paths:
        assert p.stat().st_size > 0
        image = mpimg.imread(p)
        assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100


def test_plot_selection_and_errors(tmp_path: Path) -> None:
    store = build_store(tmp_path / "out")
    assert [p.name for p in plot_curves(store, tmp_path / "figs", "toy", x="bits")] == ["toy_acc_vs_bits.png"]
    with pytest.raises(ValueError, match="allowed: round, bits"):
        plot_curves(store, tmp_path / "figs", "toy", x="time")
    with pytest.raises(ValueError, match="no runs of scenario 'nope'"):
        plot_curves(store, tmp_path / "figs", "nope")
