"""fedbench continual --sweep / the ContinualSweep step (C-FLAG Figs. 5–6): each grid point's Acc and Forgetting,
from hand-made accuracy matrices recorded under the scenario names of the real grid file, against the varied value."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fedbench.cli import app
from fedbench.report.sweep_summary import sweep_stem, varied, write_sweep
from fedbench.store import ResultsStore, RunRecord
from fedbench.sweeps.grid import expand_file

ROOT = Path(__file__).resolve().parents[2]
GRID = str(ROOT / "configs" / "sweeps" / "cflag_fig6_epochs.yaml")
# per point (local.epochs 1, 2, 4): two seeds' 2-task accuracy matrices
MATRICES = {
    0: [[[0.8, 0.0], [0.6, 0.9]], [[0.7, 0.0], [0.7, 0.8]]],  # Acc (0.75, 0.75), Fgt (0.2, 0.0)
    1: [[[0.9, 0.0], [0.9, 0.9]], [[0.9, 0.0], [0.8, 0.9]]],  # Acc (0.9, 0.85), Fgt (0.0, 0.1)
    2: [[[0.9, 0.0], [0.5, 1.0]], [[0.9, 0.0], [0.5, 1.0]]],  # Acc (0.75, 0.75), Fgt (0.4, 0.4)
}


@pytest.fixture()
def store(tmp_path: Path) -> ResultsStore:
    store = ResultsStore(tmp_path / "out")
    for k, point in enumerate(expand_file(GRID, "tiny")):
        for seed, rows in enumerate(MATRICES[k]):
            spec_hash = hashlib.sha256(f"{k}".encode()).hexdigest()
            rec = RunRecord(
                f"{spec_hash[:16]}-s{seed}",
                point.scenario.name,
                "h" * 64,
                spec_hash,
                "C-FLAG",
                seed,
                "{}",
                scale="tiny",
            )
            store.start_run(rec)
            for task, row in enumerate(rows):
                store.record_round(rec.run_id, task + 1, {"test_acc": row[task]}, {"task": task, "task_acc": row})
            store.finish_run(rec.run_id, "finished")
    return store


def test_the_varied_key_is_the_axis():
    assert varied(expand_file(GRID, "tiny")) == ("local.epochs", ["1", "2", "4"])


def test_each_point_s_acc_and_forgetting(store: ResultsStore, tmp_path: Path):
    md, csv, png = write_sweep(store, GRID, "tiny", tmp_path / "t", tmp_path / "f")
    assert md.name == "cflag_fig6_epochs_tiny_sweep.md" == f"{sweep_stem(GRID, 'tiny')}.md"
    import pandas as pd

    table = pd.read_csv(csv)
    assert table["value"].tolist() == [1, 2, 4]
    assert table["acc_mean"].round(6).tolist() == [0.75, 0.875, 0.75]
    assert table["forget_mean"].round(6).tolist() == [0.1, 0.05, 0.4]
    assert table["forget_std"].round(6).tolist() == [round(0.2 / 2**0.5, 6), round(0.1 / 2**0.5, 6), 0.0]
    assert png.exists() and png.with_suffix(".pdf").exists()


def test_the_command_writes_the_same_files(store: ResultsStore, tmp_path: Path):
    args = ["continual", "--out", str(store.out_dir), "--sweep", GRID, "--scale", "tiny"]
    result = CliRunner().invoke(app, [*args, "--tables-dir", str(tmp_path / "a"), "--figures-dir", str(tmp_path / "a")])
    assert result.exit_code == 0, result.output
    write_sweep(store, GRID, "tiny", tmp_path / "b", tmp_path / "b")
    for name in ("cflag_fig6_epochs_tiny_sweep.md", "cflag_fig6_epochs_tiny_sweep.png"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_a_sweep_without_runs_is_one_line_exit_2(tmp_path: Path):
    ResultsStore(tmp_path / "empty")
    result = CliRunner().invoke(
        app, ["continual", "--out", str(tmp_path / "empty"), "--sweep", GRID, "--scale", "tiny"]
    )
    assert result.exit_code == 2 and "no continual runs of the sweep's points in the store" in result.output


def test_cflag_ablations_and_fig4_at_zeta_1_are_steps():
    from fedbench.papers.cflag.room import ROOM, SWEEPS
    from fedbench.papers.targets import ContinualSweep, Plot

    assert [s.file for s in ROOM.target("ablations").steps if isinstance(s, ContinualSweep)] == list(SWEEPS)
    plots = [s for s in ROOM.target("figures").steps if isinstance(s, Plot)]
    assert any(p.file.endswith("fig3_cifar10_zeta1.yaml") and p.metric == "cflag.Gamma" for p in plots)
    assert json.dumps(sorted(p.name or "" for p in plots)) == json.dumps(["fig4"] * 3)
