"""The command line end to end on a tiny offline scenario."""

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from fedbench.cli import app
from fedbench.scenario import load_scenario, read_yaml, scale_names
from tests.factories import tiny_scenario

runner = CliRunner()
# Files named _*.yaml are shared bases that column files `extends:`, not scenarios of their own; configs/sweeps/
# holds grid files (checked by tests/test_sweep.py).
_CONFIG_DIR = Path(__file__).parents[1].joinpath("configs")
CONFIGS = sorted(
    p
    for p in _CONFIG_DIR.rglob("*.yaml")
    if not p.name.startswith("_") and p.relative_to(_CONFIG_DIR).parts[0] != "sweeps"
)

TINY = tiny_scenario(
    {"clients.num": 6, "clients.per_round": 2, "local.iterations": 2},
    dataset="digits",
    partition={"kind": "iid"},
    algorithms=[{"name": "fedavg"}, {"name": "scaffold"}],
    targets=[0.2],
)


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: str(p.relative_to(p.parents[1])))
def test_every_shipped_config_validates_at_every_scale(path):
    for scale in scale_names(read_yaml(path)):
        assert load_scenario(path, scale=scale).name


def test_help_documents_every_command():
    out = runner.invoke(app, ["--help"]).output
    for command in ("run", "validate", "list", "table", "plot", "compare", "claims", "bits", "costs"):
        assert command in out
    assert "--seeds" in runner.invoke(app, ["run", "--help"]).output


def test_list_shows_registries_with_parameter_counts():
    result = runner.invoke(app, ["list"], terminal_width=250)
    assert result.exit_code == 0
    for name in ("scaffold", "feddyn", "fedyogi", "digits", "cifar10", "resnet18", "dirichlet_balanced"):
        assert name in result.output
    assert "199,210" in result.output  # the MNIST MLP
    assert runner.invoke(app, ["list", "nonsense"]).exit_code == 2


def test_validate_reports_yaml_path(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(TINY))
    assert runner.invoke(app, ["validate", str(good)], terminal_width=250).exit_code == 0
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**TINY, "partition": {"kind": "dirichlet", "omega": -1}}))
    result = runner.invoke(app, ["validate", str(bad)], terminal_width=250)
    assert result.exit_code == 2 and "partition.omega: Input should be greater than 0, got -1" in result.output


def test_run_table_plot(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(TINY))
    out = tmp_path / "results"
    args = ["run", str(path), "--out", str(out), "--device", "cpu", "--seeds", "0,1", "--data-dir", str(tmp_path)]
    result = runner.invoke(app, args, terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "FedAvg" in result.output and "SCAFFOLD" in result.output
    again = runner.invoke(app, args, terminal_width=200)
    assert "(done before)" in again.output
    tables = tmp_path / "tables"
    result = runner.invoke(app, ["table", "--out", str(out), "--tables-dir", str(tables)], terminal_width=200)
    assert result.exit_code == 0 and (tables / "tiny.md").exists() and (tables / "tiny.tex").exists()
    figures = tmp_path / "figures"
    result = runner.invoke(app, ["plot", "--out", str(out), "--figures-dir", str(figures)])
    assert result.exit_code == 0
    assert sorted(p.name for p in figures.iterdir()) == [
        "tiny_acc_vs_bits.pdf",
        "tiny_acc_vs_bits.png",
        "tiny_acc_vs_rounds.pdf",
        "tiny_acc_vs_rounds.png",
    ]


def test_run_quiet_prints_one_line_per_run(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump({**TINY, "rounds": 1}))
    result = runner.invoke(app, ["run", str(path), "--out", str(tmp_path / "o"), "--quiet"], terminal_width=200)
    assert result.exit_code == 0, result.output
    lines = [ln for ln in result.output.splitlines() if ln.startswith("tiny: ")]
    assert lines == ["tiny: FedAvg seed 0 finished", "tiny: SCAFFOLD seed 0 finished"]
    assert "Top acc." not in result.output


def test_run_rejects_bad_seeds_and_overrides(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(TINY))
    assert runner.invoke(app, ["run", str(path), "--seeds", "a,b"]).exit_code == 2
    for bad in ("", "0,,1", "-1", "0,0", "1,²"):  # empty, an empty entry, negative, duplicate, non-ASCII digit
        result = runner.invoke(
            app, ["run", str(path), "--seeds", bad, "--out", str(tmp_path / "out")], terminal_width=200
        )
        assert result.exit_code == 2 and "--seeds" in result.output and result.exception.__class__ is SystemExit, bad
        assert not (tmp_path / "out").exists(), bad  # nothing written
    negative = tmp_path / "negative.yaml"
    negative.write_text(yaml.safe_dump({**TINY, "seeds": [0, -1]}))
    for command in ("run", "validate"):
        result = runner.invoke(app, [command, str(negative)], terminal_width=200)
        assert result.exit_code == 2 and "seeds" in result.output, command
    result = runner.invoke(app, ["run", str(path), "--set", "rounds=-1"], terminal_width=200)
    assert result.exit_code == 2 and "rounds:" in result.output
