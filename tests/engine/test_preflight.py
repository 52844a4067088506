"""Pre-flight (fedbench/engine/preflight.py, issue 24 item 8): what `validate` passed and `run` then failed on,
leaving a failed run in a new store, is refused by both before anything is written, in one line (exit 2)."""

from pathlib import Path

import pytest
import torch
import yaml
from typer.testing import CliRunner

from fedbench.cli import app
from fedbench.data.sizes import known_sizes
from fedbench.engine.preflight import PreflightError, preflight
from fedbench.scenario import parse_scenario
from tests.factories import tiny_scenario

runner = CliRunner()

CASES = [  # (changes, the line's start): digits has 1,347 training samples and 10 classes
    (
        {"clients": {"num": 5000, "per_round": 10}},
        "clients.num: 5000 clients but dataset digits has 1347 training samples",
    ),
    (
        {"partition.min_samples": 1000},
        "partition 'dirichlet': min_samples=1000 × clients.num=8 = 8000 exceeds the 1347 "
        "training samples (dataset digits)",
    ),
    (
        {"rounds": 2, "continual": {"tasks": 2, "classes_per_task": 8, "rounds_per_task": 1}},
        "continual.tasks × continual.classes_per_task = 2 × 8 exceeds the dataset's 10 classes (dataset digits)",
    ),
    ({"partition": {"kind": "natural"}}, "partition 'natural' needs a dataset with per-sample client ids"),
]


@pytest.mark.parametrize("changes, line", CASES)
@pytest.mark.parametrize("command", ["validate", "run"])
def test_validate_and_run_refuse_what_the_run_would_fail_on(tmp_path: Path, command, changes, line):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(tiny_scenario(changes)))
    out = tmp_path / "out"
    args = [command, str(path)] + (["--out", str(out)] if command == "run" else [])
    result = runner.invoke(app, args, terminal_width=400)
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert result.output.strip().splitlines() == [result.output.strip()] and result.output.startswith(line), (
        result.output
    )
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]


@pytest.mark.skipif(torch.backends.mps.is_available(), reason="this machine has MPS")
def test_mps_without_mps_is_refused_by_run_and_validate(tmp_path: Path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(tiny_scenario()))
    for args in (["run", str(path), "--out", str(tmp_path / "out")], ["validate", str(path)]):
        result = runner.invoke(app, [*args, "--device", "mps"], terminal_width=300)
        assert result.exit_code == 2 and result.output.strip() == (
            "--device mps was asked for, but torch sees no MPS device (Apple silicon); use --device cpu"
        ), result.output
    assert not (tmp_path / "out").exists()


def test_real_datasets_are_checked_from_their_declared_sizes_without_their_files(tmp_path: Path):
    """CIFAR-10 is not on disk here: its 50,000 samples stand in, nothing is read or downloaded."""
    fits = parse_scenario(
        tiny_scenario(
            {
                "dataset": {"name": "cifar10"},
                "clients": {"num": 1000, "per_round": 10},
                "partition": {"kind": "classes_per_client", "k": 2},
            }
        )
    )
    preflight(fits.runs, "cpu", tmp_path / "data")
    too_many = parse_scenario(
        tiny_scenario(
            {
                "dataset": {"name": "cifar10"},
                "clients": {"num": 1000, "per_round": 10},
                "partition": {"kind": "classes_per_client", "k": 60},
            }
        )
    )
    with pytest.raises(
        PreflightError,
        match=r"k=60 × clients.num=1000 = 60000 shards exceeds the 50000 training "
        r"samples \(dataset cifar10\)",
    ):
        preflight(too_many.runs, "cpu", tmp_path / "data")
    assert not (tmp_path / "data").exists()
    assert known_sizes({"name": "emnist", "split": "letters"}).classes == 26
    assert known_sizes({"name": "mnist1d", "num_samples": 4000, "train_split": 0.75}).train == 3000


def test_a_scenario_that_fits_passes(tmp_path: Path):
    sc = parse_scenario(tiny_scenario({"clients": {"num": 1347, "per_round": 10}, "partition": {"kind": "iid"}}))
    preflight(sc.runs, "cpu", tmp_path)
