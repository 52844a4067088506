"""Curves are written as readable PNGs for each scenario, axis and metric, with hand-checked points."""

from __future__ import annotations

import math
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
        "toy_acc_vs_rounds.png",
        "other_acc_vs_rounds.png",
        "toy_acc_vs_bits.png",
        "other_acc_vs_bits.png",
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


def test_plot_algorithm_subset_in_order(tmp_path: Path, monkeypatch) -> None:
    store = build_store(tmp_path / "out")
    drawn = []
    monkeypatch.setattr(
        "fedbench.report.plots._draw", lambda fig, runs, *a: drawn.append(list(dict.fromkeys(runs["algorithm"])))
    )
    (path,) = plot_curves(store, tmp_path / "figs", "toy", algorithms=["FedProx", "FedAvg"], name="fig1")
    assert path.name == "toy_fig1_acc_vs_rounds.png" and drawn == [["FedProx", "FedAvg"]]
    with pytest.raises(ValueError, match="no runs labelled MOON; it has: FedAvg, SCAFFOLD, FedProx"):
        plot_curves(store, tmp_path / "figs", "toy", algorithms=["MOON"])


DIR3 = "fedmim_table1_cifar10_dir0.3.tiny"


def _lines(fig) -> dict[str, tuple[list[float], list[float]]]:
    return {
        ln.get_label(): (list(ln.get_xdata()), list(ln.get_ydata()))
        for ln in fig.axes[0].lines
        if not ln.get_label().startswith("_")
    }


def test_metric_curves_numbers(paper_store) -> None:
    from matplotlib.figure import Figure

    from fedbench.report.plots import _draw

    runs = paper_store.runs(DIR3)
    fig = Figure()
    _draw(fig, runs, paper_store.metrics(runs["run_id"]), "round", DIR3, "consistency")
    lines, ax = _lines(fig), fig.axes[0]
    assert ax.get_yscale() == "log" and "consistency" in ax.get_ylabel()
    # FedAvg seeds (2,4,2,4) and (2,2,2,2); round 5 has no consistency.
    assert lines["FedAvg"] == ([1, 2, 3, 4], [2.0, 3.0, 2.0, 3.0])
    # FedMIM: seed 0 all 1; seed 1 diverged after (0.1, inf, 0.1): the inf is dropped, the × marks round 3.
    assert lines["FedMIM"][1] == pytest.approx([0.55, 1.0, 0.55, 1.0])
    crosses = [(list(ln.get_xdata()), list(ln.get_ydata())) for ln in ax.lines if ln.get_marker() == "x"]
    assert crosses == [([3], [0.1])]

    fig = Figure()
    _draw(fig, runs, paper_store.metrics(runs["run_id"]), "round", DIR3, "client_acc_std")
    assert fig.axes[0].get_yscale() == "linear"
    assert _lines(fig)["FedAvg"][0] == [2, 4] and _lines(fig)["FedAvg"][1] == pytest.approx([10.0, 20.0])  # points


def test_metric_file_names(paper_store, tmp_path: Path) -> None:
    assert [p.name for p in plot_both(paper_store, tmp_path, DIR3, metric="consistency")] == [
        f"{DIR3}_consistency_vs_rounds.png",
        f"{DIR3}_consistency_vs_bits.png",
    ]
    path = plot_curves(paper_store, tmp_path, DIR3, "bits", "train_loss")[0]  # test_acc keeps acc_vs_*: test above
    assert path.name == f"{DIR3}_train_loss_vs_bits.png" and mpimg.imread(path).shape[0] > 100
    with pytest.raises(ValueError, match="allowed: test_acc, consistency, client_acc_std, train_loss"):
        plot_curves(paper_store, tmp_path, DIR3, metric="wall_s")


def _uplink_store(out: Path):
    """FedAMS (S = 10) and FedCAMS-sign (S = 5) with known bits_up; NoS has no clients.per_round in its spec."""
    import json

    from fedbench.store import ResultsStore, RunRecord

    store = ResultsStore(out)
    for i, (label, spec, ups) in enumerate(
        [
            ("FedAMS", {"clients": {"num": 100, "per_round": 10}}, (100, 200, 300)),
            ("FedCAMS-sign", {"clients": {"num": 100, "per_round": 5}}, (50, 50, 50)),
            ("NoS", {}, (10, 10, 10)),
        ]
    ):
        rec = RunRecord(f"{i:016x}-s0", "up", "h" * 64, f"{i:016x}".ljust(64, "0"), label, 0, json.dumps(spec))
        store.start_run(rec)
        for t, up in enumerate(ups, start=1):
            store.record_round(
                rec.run_id, t, {"test_acc": 0.1 * t, "train_loss": 1.0 / t, "bits_up": up, "bits_down": 1000}
            )
        store.finish_run(rec.run_id, "finished")
    return store


def test_uplink_axis_numbers(tmp_path: Path) -> None:
    from matplotlib.figure import Figure

    from fedbench.report.plots import _draw

    store = _uplink_store(tmp_path / "out")
    runs = store.runs("up")
    fig = Figure()
    _draw(fig, runs, store.metrics(runs["run_id"]), "uplink", "up", "train_loss")
    lines, ax = _lines(fig), fig.axes[0]
    # Σ_t bits_up_t / S: FedAMS 100/10, +200/10, +300/10; FedCAMS-sign 50/5 per round; NoS has no S: not drawn.
    assert lines["FedAMS"][0] == pytest.approx([10, 30, 60]) and lines["FedCAMS-sign"][0] == pytest.approx([10, 20, 30])
    assert lines["FedAMS"][1] == pytest.approx([1.0, 0.5, 1 / 3]) and "NoS" not in lines
    assert ax.get_xscale() == "log" and ax.get_xlabel() == "cumulative uplink bits per client (Σ_t bits_up_t / S_t)"
    fig = Figure()
    _draw(fig, runs, store.metrics(runs["run_id"]), "round", "up")
    assert set(_lines(fig)) == {"FedAMS", "FedCAMS-sign", "NoS"}  # the round axis needs no S
    path = plot_curves(store, tmp_path / "figs", "up", x="uplink")[0]
    assert path.name == "up_acc_vs_uplink.png" and mpimg.imread(path).shape[0] > 100


def test_plot_command_uplink(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from fedbench.cli import app

    _uplink_store(tmp_path / "out")
    args = ["plot", "--out", str(tmp_path / "out"), "--figures-dir", str(tmp_path / "figs"), "--x", "uplink"]
    result = CliRunner().invoke(app, [*args, "--metric", "train_loss"])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "figs").iterdir()) == [
        "up_train_loss_vs_uplink.pdf",
        "up_train_loss_vs_uplink.png",
    ]
    result = CliRunner().invoke(app, [*args[:-1], "downlink"], terminal_width=200)
    assert result.exit_code == 2 and "--x must be one of round, bits, uplink, both" in result.output


def _extra_store(out: Path):
    """Scenario "cl": two C-FLAG seeds logging Γ(t) in extra["cflag"] (seed 1 skips round 2) and a Fine-FL run
    without it; scenario "plain" logs no cflag at all."""
    import json

    from fedbench.store import ResultsStore, RunRecord

    store = ResultsStore(out)
    gammas = {("C-FLAG", 0): {1: 1.0, 2: -2.0, 3: 4.0}, ("C-FLAG", 1): {1: 3.0, 3: 0.5}, ("Fine-FL", 0): {}}
    for (label, seed), gamma in gammas.items():
        spec_hash = label.lower().ljust(64, "0")  # one spec per label, shared by its seeds
        rec = RunRecord(f"{spec_hash[:16]}-s{seed}", "cl", "h" * 64, spec_hash, label, seed, json.dumps({}))
        store.start_run(rec)
        for t in (1, 2, 3):
            extra = {"lr": 0.1, "task": 0}
            if t in gamma:
                extra["cflag"] = {"Gamma": gamma[t], "Gamma_ad": 2 * gamma[t], "Lambda": [0.1, -0.2], "interfering": 1}
            store.record_round(rec.run_id, t, {"test_acc": 0.5, "bits_up": 10, "bits_down": 10}, extra)
        store.finish_run(rec.run_id, "finished")
    rec = RunRecord("p" * 16 + "-s0", "plain", "h" * 64, "p" * 64, "FedAvg", 0, json.dumps({}))
    store.start_run(rec)
    store.record_round(rec.run_id, 1, {"test_acc": 0.5}, {"lr": 0.1})
    store.finish_run(rec.run_id, "finished")
    return store


def test_extra_log_path_curve_numbers(tmp_path: Path) -> None:
    from matplotlib.figure import Figure

    from fedbench.report.plots import _curve, _draw, _evaluated, curves

    store = _extra_store(tmp_path / "out")
    runs = store.runs("cl")
    fig = Figure()
    _draw(fig, runs, store.metrics(runs["run_id"]), "round", "cl", "cflag.Gamma")
    lines, ax = _lines(fig), fig.axes[0]
    # mean over the seeds present: round 1 (1+3)/2, round 2 only seed 0, round 3 (4+0.5)/2; Fine-FL has no log.
    assert lines == {"C-FLAG": ([1, 2, 3], [2.0, -2.0, 2.25])}
    assert ax.get_ylabel() == "cflag.Gamma" and ax.get_yscale() == "linear"
    c = _curve(_evaluated(runs, store.metrics(runs["run_id"]), "cflag.Gamma_ad"))
    assert c["mean"].tolist() == [4.0, -4.0, 4.5]
    assert c["std"].iloc[0] == pytest.approx(2 * 2**0.5) and math.isnan(c["std"].iloc[1])  # one seed: no band
    assert c["std"].iloc[2] == pytest.approx(7 / 2**0.5)
    table = curves(runs, store.metrics(runs["run_id"]), metric="cflag.Gamma_ad")  # the same lines, as a table
    assert table["algorithm"].tolist() == ["C-FLAG"] * 3 and table["mean"].tolist() == [4.0, -4.0, 4.5]
    assert table["seeds"].tolist() == [2, 1, 2]


def test_extra_log_path_files_and_errors(tmp_path: Path) -> None:
    from fedbench.report.plots import UnknownMetric

    store = _extra_store(tmp_path / "out")
    figs = tmp_path / "figs"
    (path,) = plot_curves(store, figs, None, "round", "cflag.Gamma")  # "plain" has no Γ: skipped
    assert path.name == "cl_cflag_Gamma_vs_rounds.png" and mpimg.imread(path).shape[0] > 100
    assert plot_curves(store, figs, "cl", "bits", "lr")[0].name == "cl_lr_vs_bits.png"
    with pytest.raises(ValueError, match=r"extra log 'cflag\.Lambda' is a list, not a number"):
        plot_curves(store, figs, "cl", metric="cflag.Lambda")
    with pytest.raises(
        ValueError, match=r"'cflag' is a mapping.*its numbers: cflag\.Gamma, cflag\.Gamma_ad, cflag\.interfering$"
    ):
        plot_curves(store, figs, "cl", metric="cflag")
    with pytest.raises(
        UnknownMetric,
        match=r"allowed: test_acc, .*numbers in run c-flag0{10}-s0's extra logs: "
        r"cflag\.Gamma, cflag\.Gamma_ad, cflag\.interfering, lr, task$",
    ):
        plot_curves(store, figs, "cl", metric="cflag.gamma")
    with pytest.raises(UnknownMetric, match="numbers in run p{16}-s0's extra logs: lr$"):
        plot_curves(store, figs, "plain", metric="cflag.Gamma")


def test_plot_command_extra_log_path(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from fedbench.cli import app

    _extra_store(tmp_path / "out")
    args = ["plot", "--out", str(tmp_path / "out"), "--figures-dir", str(tmp_path / "figs"), "--metric"]
    result = CliRunner().invoke(app, [*args, "cflag.Gamma"], terminal_width=250)
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "figs").iterdir()) == [
        "cl_cflag_Gamma_vs_bits.pdf",
        "cl_cflag_Gamma_vs_bits.png",
        "cl_cflag_Gamma_vs_rounds.pdf",
        "cl_cflag_Gamma_vs_rounds.png",
    ]
    result = CliRunner().invoke(app, [*args, "cflag.Lambda"], terminal_width=250)
    assert result.exit_code == 2 and "'cflag.Lambda' is a list" in result.output
    result = CliRunner().invoke(app, [*args, "Gamma"], terminal_width=250)
    assert (
        result.exit_code == 2 and "--metric must be one of test_acc" in result.output and "cflag.Gamma" in result.output
    )
