"""Bad input ends in one line naming the key or option and its value: exit 2, no traceback, nothing written
(issue 15 items 1–3)."""

import os
from pathlib import Path

import pytest
import torch
import yaml
from typer.testing import CliRunner

from fedbench.cli import app
from fedbench.scenario import ScenarioError, load_scenario, parse_scenario
from tests.factories import interrupted_at, tiny_scenario

runner = CliRunner()
TINY = tiny_scenario({"rounds": 1}, algorithms=[{"name": "fedavg"}])


def write(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def fails_cleanly(tmp_path: Path, args: list[str], needle: str) -> str:
    """Run the CLI; assert exit 2, ``needle`` in the output, no traceback and no results folder."""
    out = tmp_path / "out"
    result = runner.invoke(
        app,
        [*args, "--out", str(out)] if args[0] in ("run", "sweep") and "--out" not in args else args,
        terminal_width=300,
    )
    assert result.exit_code == 2, (args, result.output, result.exception)
    assert isinstance(result.exception, SystemExit) and "Traceback" not in result.output
    assert needle in result.output, (needle, result.output)
    assert not out.exists()
    return result.output


def test_a_key_given_twice_is_an_error_naming_its_path(tmp_path):
    text = yaml.safe_dump(TINY) + "local: {iterations: 2}\n"
    with pytest.raises(ScenarioError, match=r"local: key given twice \(lines \d+ and \d+\)"):
        load_scenario(write(tmp_path, text))
    nested = yaml.safe_dump({**TINY, "algorithms": []}).replace(
        "algorithms: []", "algorithms:\n- {name: fedavg, name: fedprox}"
    )
    with pytest.raises(ScenarioError, match=r"algorithms\[0\]\.name: key given twice"):
        load_scenario(write(tmp_path, nested))


@pytest.mark.parametrize(
    "key, value, needle",
    [
        ("rounds", True, "rounds: expected a number, not a boolean"),
        ("local.iterations", False, "local.iterations: expected a number, not a boolean"),
        ("local.lr", float("inf"), "local.lr: Input should be a finite number"),
        ("local.lr", float("nan"), "local.lr: Input should be a finite number"),
        ("server.lr", float("inf"), "server.lr: Input should be a finite number"),
        ("partition", {"kind": "dirichlet", "omega": True}, "partition.omega: expected a number, not a boolean"),
        ("partition", {"kind": "dirichlet", "omega": float("inf")}, "partition.omega: Input should be a finite number"),
    ],
)
def test_booleans_are_not_numbers_and_floats_are_finite(key, value, needle):
    with pytest.raises(ScenarioError) as err:
        parse_scenario(tiny_scenario({key: value}))
    assert any(p.startswith(needle) for p in err.value.problems), err.value.problems


def test_boolean_fields_still_take_booleans():
    sc = parse_scenario(tiny_scenario({"eval.client_spread": False, "local.augment.flip": True}))
    assert sc.eval.client_spread is False and sc.local.augment.flip is True


def test_validate_prints_the_rounds_a_file_implies(tmp_path):
    path = write(tmp_path, yaml.safe_dump({**TINY, "rounds": 7, "seeds": [0, 1]}))
    result = runner.invoke(app, ["validate", str(path)], terminal_width=300)
    assert result.exit_code == 0 and "2 run(s) of 7 rounds (14 rounds in all)" in result.output


def test_files_that_are_not_scenarios(tmp_path):
    fails_cleanly(tmp_path, ["run", str(tmp_path)], "is a directory, not a scenario file")
    binary = tmp_path / "b.yaml"
    binary.write_bytes(bytes(range(256)) * 4)
    fails_cleanly(tmp_path, ["run", str(binary)], "is not a text file")
    fails_cleanly(tmp_path, ["validate", str(tmp_path / "missing.yaml")], "file not found")


def test_bad_options_are_refused_before_anything_runs(tmp_path):
    path = write(tmp_path, yaml.safe_dump(TINY))
    fails_cleanly(tmp_path, ["run", str(path), "--set", "local={lr: 0.1"], "not valid YAML at line 1")
    fails_cleanly(
        tmp_path, ["run", str(path), "--executor", "fast"], "--executor: expected one of auto, sequential, batched"
    )
    fails_cleanly(
        tmp_path, ["run", str(path), "--client-state", "disk"], "--client-state: expected one of device, host"
    )
    fails_cleanly(tmp_path, ["run", str(path), "--only", "Nope"], "--only Nope: matches no algorithm label")
    fails_cleanly(
        tmp_path, ["run", str(path), "--device", "gpu0"], "--device gpu0: expected auto, cpu, cuda, cuda:N or mps"
    )
    if not torch.cuda.is_available():
        fails_cleanly(tmp_path, ["run", str(path), "--device", "cuda"], "torch sees no CUDA device")
    fails_cleanly(tmp_path, ["sweep", str(path), "--client-executor", "batched"], "--client-executor is now --executor")
    fails_cleanly(
        tmp_path, ["sweep", str(path), "--executor", "slurm"], "--executor: expected one of auto, sequential, batched"
    )
    fails_cleanly(tmp_path, ["sweep", str(path), "--backend", "slurm"], "--backend: expected one of local, ray")


@pytest.mark.parametrize("command", ["sweep", "tune", "reproduce"])
def test_the_old_executor_word_for_process_placement_points_to_backend(tmp_path, command):
    """`--executor` is the client executor everywhere; `--executor ray` says where placement went."""
    path = write(tmp_path, yaml.safe_dump(TINY))
    args = [command, "gradma" if command == "reproduce" else str(path), "--executor", "ray"]
    output = fails_cleanly(tmp_path, args, "--executor ray: process placement is --backend ray")
    assert len(output.strip().splitlines()) == 1


def test_an_out_folder_that_cannot_hold_a_store(tmp_path):
    path = write(tmp_path, yaml.safe_dump(TINY))
    afile = write(tmp_path, "", "afile")
    fails_cleanly(tmp_path, ["run", str(path), "--out", str(afile)], "is a file, not a folder")
    fails_cleanly(tmp_path, ["run", str(path), "--out", str(afile / "sub")], "which is a file, not a folder")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through permission bits")
def test_an_unwritable_out_folder_or_read_only_store(tmp_path):
    path = write(tmp_path, yaml.safe_dump(TINY))
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    fails_cleanly(tmp_path, ["run", str(path), "--out", str(locked / "out")], "is not writable")
    store = tmp_path / "ro"
    store.mkdir()
    (store / "fedbench.sqlite").write_bytes(b"")
    (store / "fedbench.sqlite").chmod(0o400)
    fails_cleanly(tmp_path, ["run", str(path), "--out", str(store)], "is read-only")


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_a_corrupt_store_names_the_file_and_the_way_out(tmp_path, damage):
    path = write(tmp_path, yaml.safe_dump(TINY))
    out = tmp_path / "store"
    assert runner.invoke(app, ["run", str(path), "--out", str(out), "--quiet"]).exit_code == 0
    db = out / "fedbench.sqlite"
    (db.parent / "fedbench.sqlite-wal").unlink(missing_ok=True)
    data = db.read_bytes()
    db.write_bytes(os.urandom(len(data)) if damage == "garbage" else data[:700])
    for args in (["run", str(path)], ["table", "--no-show"], ["plot"], ["sweep", str(path)]):
        result = runner.invoke(app, [*args, "--out", str(out)], terminal_width=300)
        assert result.exit_code == 2 and "Traceback" not in result.output, (args, result.output)
        assert f"results store {db} cannot be used" in result.output and "move it aside" in result.output, args


def test_ctrl_c_says_which_run_and_round_and_exits_130_then_the_same_command_resumes(tmp_path, monkeypatch):
    import fedbench.runs

    path = write(tmp_path, yaml.safe_dump({**TINY, "rounds": 4, "checkpoint_every": 1}))
    out = tmp_path / "out"
    real = fedbench.runs.execute_run

    monkeypatch.setattr(fedbench.runs, "execute_run", interrupted_at(real, 2))
    result = runner.invoke(app, ["run", str(path), "--out", str(out)], terminal_width=300)
    assert result.exit_code == 130 and "Traceback" not in result.output
    assert "interrupted tiny / FedAvg seed 0 in round 3; run the same command to resume it" in result.output
    monkeypatch.setattr(fedbench.runs, "execute_run", real)
    again = runner.invoke(app, ["run", str(path), "--out", str(out), "--quiet"], terminal_width=300)
    assert again.exit_code == 0 and "finished" in again.output


@pytest.mark.parametrize("command", ["run", "sweep", "tune"])
def test_a_missing_dataset_stops_the_command_before_any_run_is_recorded(tmp_path, command):
    """One line naming the dataset, the folder and how to get it; exit 2; no store, no data folder."""
    raw = tiny_scenario({"rounds": 1}, dataset={"name": "cifar10"}, model={"name": "mlp", "hidden": [8]})
    if command == "tune":
        raw["algorithms"] = [{"name": "fedavg", "tune": {"space": {"local.lr": [0.1, 0.2]}}}]
    path = write(tmp_path, yaml.safe_dump(raw))
    data = tmp_path / "d"
    args = [command, str(path), "--data-dir", str(data), "--out", str(tmp_path / "out"), "--device", "cpu"]
    output = fails_cleanly(tmp_path, args, f"dataset cifar10: not in {data}/cifar-10-batches-py/ (pass --download")
    assert len(output.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]


def test_download_lets_a_torchvision_dataset_through_but_not_tiny_imagenet(tmp_path):
    raw = tiny_scenario({"rounds": 1}, dataset={"name": "tiny_imagenet"}, model={"name": "mlp", "hidden": [8]})
    path = write(tmp_path, yaml.safe_dump(raw))
    output = fails_cleanly(
        tmp_path, ["run", str(path), "--download", "--data-dir", str(tmp_path / "d")], "dataset tiny_imagenet: not in"
    )
    assert "no downloader: fetch http://cs231n.stanford.edu/tiny-imagenet-200.zip" in output
