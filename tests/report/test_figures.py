"""What a paper figure needs (fedbench/report/figures.py): curves apart without colour, a y range where they
differ, the setting in the title, the × legend entry only when needed, tasks numbered from 1, a PDF beside
each PNG with the same bytes on every write."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from matplotlib.figure import Figure

from fedbench.report.figures import setting, y_limits
from fedbench.report.forgetting import curve, heatmap, write_continual
from fedbench.report.plots import _draw, plot_curves
from fedbench.store import ResultsStore, RunRecord
from tests.report.test_tables import build_store

SPEC = {
    "dataset": {"name": "digits"},
    "model": {"name": "mlp", "hidden": [64]},
    "clients": {"num": 20, "per_round": 5},
    "partition": {"kind": "dirichlet", "omega": 0.1, "min_samples": 2},
}


def _store(out: Path, curves: dict[str, list[float]], status: dict[str, str] | None = None) -> ResultsStore:
    """Scenario "fig": one seed per label, test accuracy (fractions) per round, the spec SPEC."""
    store = ResultsStore(out)
    for k, (label, accs) in enumerate(curves.items()):
        rec = RunRecord(
            f"{k:016x}-s0", "fig", "h" * 64, f"{k:064x}", label, 0, json.dumps({**SPEC, "algorithm": label})
        )
        store.start_run(rec)
        for t, acc in enumerate(accs, start=1):
            store.record_round(rec.run_id, t, {"test_acc": acc, "bits_up": 10, "bits_down": 10})
        store.finish_run(rec.run_id, (status or {}).get(label, "finished"))
    return store


def _figure(store: ResultsStore, metric: str = "test_acc") -> Figure:
    runs = store.runs("fig")
    fig = Figure()
    _draw(fig, runs, store.metrics(runs["run_id"]), "round", "fig", metric)
    return fig


def _curves(fig: Figure) -> dict:
    return {ln.get_label(): ln for ln in fig.axes[0].lines if not ln.get_label().startswith("_")}


RISE = [0.2 + 0.76 * (1 - 0.5**t) for t in range(1, 21)]  # 20 rounds, from 58 % to ≈ 96 %


def test_overlapping_curves_differ_in_line_style_and_marker(tmp_path: Path) -> None:
    store = _store(tmp_path / "out", {"FedAvg": RISE, "FedProx": RISE, "SCAFFOLD": [a - 0.01 for a in RISE]})
    lines = _curves(_figure(store))
    assert list(lines) == ["FedAvg", "FedProx", "SCAFFOLD"]
    styles = [(ln.get_linestyle(), ln.get_marker()) for ln in lines.values()]
    assert len({s[0] for s in styles}) == 3 and len({s[1] for s in styles}) == 3
    assert all(m not in (None, "None", "") for _, m in styles)
    # the style is fixed by the position in the figure, not by the label
    swapped = _curves(_figure(_store(tmp_path / "b", {"FedProx": RISE, "FedAvg": RISE})))
    assert (swapped["FedProx"].get_linestyle(), swapped["FedProx"].get_marker()) == styles[0]


def test_y_range_is_where_the_curves_end_not_the_whole_climb(tmp_path: Path) -> None:
    a = [0.2 + 0.76 * (1 - 0.5**t) for t in range(1, 21)]
    b = [x - 0.02 for x in a]
    ax = _figure(_store(tmp_path / "out", {"FedAvg": a, "FedProx": b})).axes[0]
    lo, hi = ax.get_ylim()
    tails = [100 * v for c in (a, b) for v in c[10:]]  # the last half of each curve
    assert lo < min(tails) and hi > max(tails)  # every end is shown …
    assert lo > 90 and hi < 97  # … and not the climb from 58 %: the curves live in 92–96
    pad = max(0.08 * (max(tails) - min(tails)), 0.005 * max(tails))  # a span of ≈ 2 points: the 0.5 % floor
    assert (lo, hi) == pytest.approx((min(tails) - pad, max(tails) + pad))


def test_y_limits_rule() -> None:
    assert y_limits([np.arange(1.0, 21.0)]) == pytest.approx((11 - 0.72, 20 + 0.72))  # last half: 11..20, 8 % pad
    assert y_limits([np.array([1.0, 5.0, 3.0])]) == pytest.approx((1 - 0.32, 5 + 0.32))  # short: every point
    assert y_limits([np.arange(1.0, 21.0)], crosses=[2.0]) == pytest.approx((2 - 1.44, 20 + 1.44))  # an × counts
    assert y_limits([np.full(12, 50.0)]) == pytest.approx((49.75, 50.25))  # flat: 0.5 % of the value
    lo, hi = y_limits([np.array([1e-3, 1e-2, 1e-1])], log=True)  # log axis: the rule on log10
    assert (np.log10(lo), np.log10(hi)) == pytest.approx((-3 - 0.16, -1 + 0.16))
    assert y_limits([np.array([np.nan])]) is None


def test_title_names_dataset_model_clients_and_partition(tmp_path: Path) -> None:
    fig = _figure(_store(tmp_path / "out", {"FedAvg": RISE}))
    assert fig._suptitle.get_text() == "digits · mlp 64 · S/N = 5/20 · Dir ω = 0.1"
    assert fig.axes[0].get_title() == "fig"  # the scenario, as subtitle
    specs = [
        json.dumps(SPEC),
        json.dumps({**SPEC, "clients": {"num": 20, "per_round": 10}, "continual": {"tasks": 5, "mode": "class"}}),
    ]
    assert setting(specs) == "digits · mlp 64 · S/N = 5/20 | S/N = 10/20 · Dir ω = 0.1 · 5 tasks (class-incremental)"


def _legend(fig: Figure) -> list[str]:
    return [t.get_text() for t in fig.axes[0].get_legend().get_texts()]


def test_diverged_marker_in_legend_only_with_a_diverged_run(tmp_path: Path) -> None:
    clean = _figure(_store(tmp_path / "a", {"FedAvg": RISE, "FedProx": RISE}))
    assert _legend(clean) == ["FedAvg", "FedProx"]
    assert "diverged" not in clean.axes[0].get_legend().get_title().get_text()
    bad = _figure(_store(tmp_path / "b", {"FedAvg": RISE, "FedProx": RISE[:5]}, {"FedProx": "diverged"}))
    assert _legend(bad) == ["FedAvg", "FedProx", "diverged / failed (last point)"]
    failed = build_store(tmp_path / "c")  # SCAFFOLD's two seeds diverged
    runs = failed.runs("toy")
    fig = Figure()
    _draw(fig, runs, failed.metrics(runs["run_id"]), "round", "toy")
    assert _legend(fig)[-1] == "diverged / failed (last point)"


def _continual_store(out: Path) -> ResultsStore:
    store = ResultsStore(out)
    for label, rows in (
        ("Fine-FL", [[0.9, 0.1, 0.2], [0.7, 0.8, 0.3], [0.6, 0.5, 0.95]]),
        ("C-FLAG", [[0.9, 0.1, 0.2], [0.85, 0.8, 0.3], [0.8, 0.75, 0.9]]),
    ):
        rid = f"{label}-s0"
        spec = {**SPEC, "continual": {"tasks": 3, "mode": "task"}}
        store.start_run(RunRecord(rid, "cl", "h", label, label, 0, json.dumps(spec)))
        for i, row in enumerate(rows):
            store.record_round(rid, i + 1, {"test_acc": 0.5}, {"task": i, "task_acc": row})
        store.finish_run(rid, "finished")
    return store


def test_tasks_numbered_from_one_in_curve_and_heat_map(tmp_path: Path, monkeypatch) -> None:
    store = _continual_store(tmp_path / "out")
    figs = []
    monkeypatch.setattr("fedbench.report.forgetting.save", lambda fig, path: figs.append(fig) or path)
    curve(store, "cl", tmp_path / "c.png")
    heatmap(store, "cl", tmp_path / "m.png")
    c, m = figs
    labels = ["task 1", "task 2", "task 3"]
    assert [t.get_text() for t in c.axes[0].get_xticklabels()] == labels
    assert list(c.axes[0].get_xticks()) == [1, 2, 3]
    for ax in m.axes[:2]:  # the two heat maps (the third axes is the colour bar)
        assert [t.get_text() for t in ax.get_xticklabels()] == labels
        assert [t.get_text() for t in ax.get_yticklabels()] == labels
    assert "3 tasks (task-incremental)" in c._suptitle.get_text() and "digits" in m._suptitle.get_text()


def test_pdf_beside_every_png_and_byte_identical_on_a_second_write(tmp_path: Path) -> None:
    store = _store(tmp_path / "out", {"FedAvg": RISE, "FedProx": RISE[:5]}, {"FedProx": "diverged"})
    _continual_store(tmp_path / "out")
    pngs = plot_curves(store, tmp_path / "a", "fig", "round") + plot_curves(store, tmp_path / "a", "fig", "bits")
    pngs += [p for p in write_continual(store, tmp_path / "t", tmp_path / "a", "cl") if p.suffix == ".png"]
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == sorted(
        n for p in pngs for n in (p.name, p.with_suffix(".pdf").name)
    )
    first = {p.name: p.read_bytes() for p in (tmp_path / "a").iterdir()}
    assert all(first[p.with_suffix(".pdf").name].startswith(b"%PDF") for p in pngs)
    plot_curves(store, tmp_path / "b", "fig", "round")
    plot_curves(store, tmp_path / "b", "fig", "bits")
    write_continual(store, tmp_path / "t", tmp_path / "b", "cl")
    assert {p.name: p.read_bytes() for p in (tmp_path / "b").iterdir()} == first
