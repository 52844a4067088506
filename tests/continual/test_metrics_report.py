"""Acc / Forgetting on hand-made matrices, and the report built from a hand-filled store."""

import math

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from fedbench.cli import app
from fedbench.continual.metrics import average_accuracy, average_accuracy_curve, forgetting
from fedbench.report.forgetting import accuracy_matrix, continual_summary, curve_summary, write_continual
from fedbench.store import ResultsStore, RunRecord

A = np.array([[0.9, 0.1, 0.2], [0.7, 0.8, 0.3], [0.6, 0.5, 0.95]])


def test_acc_is_the_final_rows_mean_and_forgetting_the_mean_drop_on_earlier_tasks():
    assert average_accuracy(A) == pytest.approx((0.6 + 0.5 + 0.95) / 3)
    assert forgetting(A) == pytest.approx(((0.9 - 0.6) + (0.8 - 0.5)) / 2)
    improved = np.array([[0.5, 0.0], [0.7, 0.9]])  # a later task helped task 0
    assert forgetting(improved) == pytest.approx(-0.2)
    assert math.isnan(forgetting(np.array([[0.4]])))
    with pytest.raises(ValueError, match="complete S × S"):
        average_accuracy(A[:2])


def fill(store: ResultsStore, label: str, seed: int, rows: list[list[float]], status: str = "finished") -> None:
    rid = f"{label}-s{seed}"
    store.start_run(RunRecord(rid, "cl", "h", label, label, seed, "{}"))
    for i, row in enumerate(rows):
        store.record_round(rid, 2 * i + 1, {"test_acc": 0.5}, {"task": i})
        store.record_round(rid, 2 * i + 2, {"test_acc": 0.5}, {"task": i, "task_acc": row})
    store.finish_run(rid, status)


def test_summary_means_and_std_over_complete_seeds_only(tmp_path):
    store = ResultsStore(tmp_path / "out")
    second = A + np.array([[0.02, 0, 0], [0, 0.04, 0], [0.1, -0.1, 0.05]])
    fill(store, "Fine-FL", 0, A.tolist())
    fill(store, "Fine-FL", 1, second.tolist())
    fill(store, "Fine-FL", 2, A[:2].tolist(), status="diverged")  # stopped in task 1: left out
    assert accuracy_matrix(store.metrics(["Fine-FL-s0"])).tolist() == A.tolist()
    s = continual_summary(store, "cl").iloc[0]
    accs = [average_accuracy(A), average_accuracy(second)]
    fgts = [forgetting(A), forgetting(second)]
    assert (s["seeds"], s["complete"], s["tasks"]) == (3, 2, 3)
    assert s["acc_mean"] == pytest.approx(np.mean(accs)) and s["acc_std"] == pytest.approx(np.std(accs, ddof=1))
    assert s["forget_mean"] == pytest.approx(np.mean(fgts)) and s["forget_std"] == pytest.approx(np.std(fgts, ddof=1))
    paths = write_continual(store, tmp_path / "tables", tmp_path / "figures")
    assert [p.name for p in paths] == [
        "cl_continual.md",
        "cl_continual.csv",
        "cl_continual_matrix.png",
        "cl_continual_curve.png",
    ]
    md = paths[0].read_text()
    assert f"{100 * np.mean(accs):.2f} ± {100 * np.std(accs, ddof=1):.2f}" in md and " 2/3 |" in md
    assert pd.read_csv(paths[1])["complete"].tolist() == [2]


def test_the_cli_command_writes_the_tables_or_says_there_is_nothing(tmp_path):
    store = ResultsStore(tmp_path / "out")
    runner = CliRunner()
    args = [
        "continual",
        "--out",
        str(tmp_path / "out"),
        "--tables-dir",
        str(tmp_path / "t"),
        "--figures-dir",
        str(tmp_path / "f"),
    ]
    assert "nothing written" in runner.invoke(app, args).output
    fill(store, "Ering", 0, A.tolist())
    result = runner.invoke(app, args, terminal_width=200)
    assert result.exit_code == 0 and "Ering" in result.output and (tmp_path / "f" / "cl_continual_matrix.png").exists()


def test_average_accuracy_curve_is_the_mean_over_the_tasks_seen_after_each_task():
    # A_1 = a_11; A_2 = (a_21 + a_22)/2; A_3 = (a_31 + a_32 + a_33)/3 (notes §6, Fig. 2)
    assert average_accuracy_curve(A) == pytest.approx([0.9, 0.75, 2.05 / 3])
    assert average_accuracy_curve(A[:2]) == pytest.approx([0.9, 0.75])  # a run stopped after task 2
    assert average_accuracy_curve(A)[-1] == pytest.approx(average_accuracy(A))
    with pytest.raises(ValueError, match="n ≤ S"):
        average_accuracy_curve(A[:, :2])


def test_curve_summary_and_png_over_complete_seeds(tmp_path):
    import matplotlib.image as mpimg

    store = ResultsStore(tmp_path / "out")
    second = [[0.92, 0.1, 0.2], [0.7, 0.84, 0.3], [0.7, 0.4, 1.0]]  # curve 0.92, 0.77, 2.1/3
    fill(store, "C-FLAG", 0, A.tolist())
    fill(store, "C-FLAG", 1, second)
    fill(store, "C-FLAG", 2, [[0.0, 0.0, 0.0]], status="diverged")  # incomplete: left out
    fill(store, "Ering", 0, A.tolist())
    c = curve_summary(store, "cl")
    flag, ering = c[c["algorithm"] == "C-FLAG"], c[c["algorithm"] == "Ering"]
    assert flag["task"].tolist() == [1, 2, 3] and flag["seeds"].tolist() == [2, 2, 2]
    assert flag["mean"].tolist() == pytest.approx([0.91, 0.76, (2.05 + 2.1) / 6])
    assert flag["std"].tolist() == pytest.approx([0.02 / math.sqrt(2), 0.02 / math.sqrt(2), 0.05 / 3 / math.sqrt(2)])
    assert ering["mean"].tolist() == pytest.approx([0.9, 0.75, 2.05 / 3]) and ering["std"].isna().all()
    paths = write_continual(store, tmp_path / "tables", tmp_path / "figures", "cl")
    assert paths[-1].name == "cl_continual_curve.png" and mpimg.imread(paths[-1]).shape[0] > 100
