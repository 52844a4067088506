"""``fedbench tune`` end to end on digits, its --dry-run, and the trial count in ``fedbench validate``."""

import yaml
from typer.testing import CliRunner

from fedbench.cli import app
from tests.factories import tiny_scenario

runner = CliRunner()
TUNE = {"space": {"local.lr": [1e-4, 0.3]}, "trials": {"seeds": [0], "rounds": 3}}


def write(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(tiny_scenario({"partition": {"kind": "iid"}}, tune=TUNE, seeds=[0, 1])))
    return path


def test_validate_prints_the_trial_count(tmp_path):
    result = runner.invoke(app, ["validate", str(write(tmp_path))], terminal_width=250)
    assert result.exit_code == 0, result.output
    assert "tuning: 2 trial(s), 2 trial run(s), then 2 final run(s)" in result.output
    assert (
        "FedAvg: 2 trial(s) (2 of 2 settings, 100 %) × seeds [0] of 3 rounds, validation protocol, top_acc"
        in result.output
    )


def test_tune_runs_selects_and_writes_its_table(tmp_path):
    path, out, tables = write(tmp_path), tmp_path / "out", tmp_path / "tables"
    dry = runner.invoke(app, ["tune", str(path), "--out", str(out), "--dry-run"], terminal_width=250)
    assert dry.exit_code == 0 and dry.output.count("to run") == 2 and not out.exists()
    args = ["tune", str(path), "--out", str(out), "--jobs", "1", "--device", "cpu", "--tables-dir", str(tables)]
    result = runner.invoke(app, args, terminal_width=250)
    assert result.exit_code == 0, result.output
    csv = (tables / "tiny_tuning.csv").read_text().splitlines()
    assert csv[0] == "method,chosen,trials,searched,metric,best,runner-up,protocol"
    assert csv[1].startswith("FedAvg,local.lr=0.3,2,2 / 2 (100 %) grid,top_acc,") and csv[1].endswith(",validation")
    assert "held-out 0.1 of each client's training data" in (tables / "tiny_tuning.md").read_text()
    again = runner.invoke(app, args, terminal_width=250)
    assert "2 run(s): 0 finished, 2 skipped" in again.output
    assert (tables / "tiny_tuning.csv").read_text().splitlines() == csv


def test_tune_without_a_block_exits_2(tmp_path):
    path = tmp_path / "plain.yaml"
    path.write_text(yaml.safe_dump(tiny_scenario()))
    result = runner.invoke(app, ["tune", str(path), "--out", str(tmp_path / "out")], terminal_width=250)
    assert result.exit_code == 2 and "no `tune:` block" in result.output
