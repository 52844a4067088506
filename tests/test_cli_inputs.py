"""Bad input and faults of issue 24 item 8 (and item 7's warnings): each ends in one line, exit 2 (an empty store:
exit 0, as `table`), no traceback, and nothing written; a file that is not a fedbench store is never modified."""

import hashlib
import os
import sqlite3
import time
import warnings
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from fedbench import cli_warnings
from fedbench.cli import app
from fedbench.runs import check_out
from fedbench.store import DB_NAME, ResultsStore
from tests.factories import interrupted_at, tiny_scenario

runner = CliRunner()


def scenario_file(tmp_path: Path, changes: dict | None = None, **top) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(tiny_scenario(changes, **{"rounds": 1, **top})))
    return path


def one_line(args: list[str], code: int = 2) -> str:
    """Run the CLI; assert the exit code, a single output line and no traceback; return that line."""
    result = runner.invoke(app, args, terminal_width=400)
    assert result.exit_code == code and "Traceback" not in result.output, (args, result.output, result.exception)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, (args, result.output)
    return lines[0]


def listing(folder: Path) -> list[str]:
    """Every path under ``folder``, but SQLite's own -wal/-shm companions (a reader of a WAL store may add them)."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if not p.name.endswith(("-wal", "-shm")))


# -- tracebacks that became one line --


def test_a_seed_beyond_the_store_is_refused_before_the_store_exists(tmp_path: Path):
    path, out = scenario_file(tmp_path), tmp_path / "out"
    line = one_line(["run", str(path), "--seeds", "99999999999999999999999", "--out", str(out)])
    assert line.startswith("--seeds: expected distinct integers from 0 to 9223372036854775807")
    assert "seeds[0]: Input should be less than or equal to 9223372036854775807" in one_line(
        ["run", str(path), "--set", "seeds=[9223372036854775808]", "--out", str(out)]
    )
    assert not out.exists()


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_an_out_folder_that_cannot_be_created_even_by_root(tmp_path: Path):
    """/proc takes no folder, whatever os.access says to root."""
    line = one_line(["run", str(scenario_file(tmp_path)), "--out", "/proc/fedbench-out-test"])
    assert line.startswith("--out /proc/fedbench-out-test: /proc is not writable")
    assert not Path("/proc/fedbench-out-test").exists()


def test_the_out_check_leaves_nothing_behind(tmp_path: Path):
    check_out(tmp_path / "new" / "a" / "b")
    assert listing(tmp_path) == []


def test_reproduce_checks_its_out_folder(tmp_path: Path):
    afile = tmp_path / "afile"
    afile.write_text("mine")
    line = one_line(["reproduce", "fedmim", "--scale", "tiny", "--out", str(afile)])
    assert line == f"--out {afile}: is a file, not a folder"
    assert listing(tmp_path) == ["afile"] and afile.read_text() == "mine"


def test_reproduce_away_from_the_configs_names_the_missing_file(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the paper rooms name their scenario files relative to the repository
    line = one_line(["reproduce", "fedmim", "table3", "--scale", "tiny", "--out", "o"])
    assert line == "configs/fedmim/table3.yaml: file not found: configs/fedmim/table3.yaml"
    assert listing(tmp_path) == []


# -- read-only means read-only --


def test_an_empty_file_is_not_a_store(tmp_path: Path):
    (tmp_path / DB_NAME).write_bytes(b"")
    line = one_line(["table", "--out", str(tmp_path), "--tables-dir", str(tmp_path / "t")])
    assert (
        line
        == f"{tmp_path / DB_NAME} is an empty file, not a fedbench results store; choose another --out, or move that file aside"
    )
    assert listing(tmp_path) == [DB_NAME] and (tmp_path / DB_NAME).stat().st_size == 0


@pytest.mark.parametrize("schema", ["CREATE TABLE notes (x)", "CREATE TABLE runs (x)"])
def test_a_foreign_sqlite_file_is_refused_untouched(tmp_path: Path, schema: str):
    out = tmp_path / "out"
    out.mkdir()
    with sqlite3.connect(out / DB_NAME) as conn:
        conn.execute(schema)
    conn.close()
    before = hashlib.sha256((out / DB_NAME).read_bytes()).hexdigest()
    for args in (
        ["table", "--tables-dir", str(tmp_path / "t")],
        ["plot", "--figures-dir", str(tmp_path / "f")],
        ["run", str(scenario_file(tmp_path))],
    ):
        line = one_line([*args, "--out", str(out)])
        assert line.startswith(f"{out / DB_NAME} is not a fedbench results store ("), line
    assert hashlib.sha256((out / DB_NAME).read_bytes()).hexdigest() == before
    assert listing(out) == [DB_NAME] and listing(tmp_path) == ["out", f"out/{DB_NAME}", "s.yaml"]
    with sqlite3.connect(out / DB_NAME) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("delete",)
    conn.close()


def test_reading_commands_on_an_empty_store_say_so_and_write_nothing(tmp_path: Path):
    ResultsStore(tmp_path / "out")
    before = listing(tmp_path)
    line = f"no runs in the store at {tmp_path / 'out'}/: nothing written"
    for args in (
        ["table", "--tables-dir", str(tmp_path / "t")],
        ["plot", "--figures-dir", str(tmp_path / "f")],
        ["report", "--html", str(tmp_path / "r" / "page.html")],
        ["claims", "--paper", "fedmim", "--tables-dir", str(tmp_path / "t")],
    ):
        assert one_line([*args, "--out", str(tmp_path / "out")], code=0) == line, args
    assert listing(tmp_path) == before


# -- accepted silently, messages --


def test_tune_refuses_trials_longer_than_the_scenario(tmp_path: Path):
    path = scenario_file(tmp_path, rounds=3, tune={"space": {"local.lr": [0.1, 0.2]}, "trials": {"rounds": 500}})
    line = one_line(["tune", str(path), "--out", str(tmp_path / "out")])
    assert line.startswith(f"{path}: tune.trials.rounds: 500 exceeds the scenario's rounds (3)")
    assert listing(tmp_path) == ["s.yaml"]


def test_messages_name_their_key_and_keep_their_brackets(tmp_path: Path):
    path = scenario_file(tmp_path)
    assert one_line(["validate", str(path), "--set", "=5"]) == (
        f"{path}: --set '=5': expected KEY=VALUE with a dotted key before '=', e.g. rounds=5 or partition.omega=0.5"
    )
    line = one_line(
        [
            "run",
            str(path),
            "--out",
            str(tmp_path / "out"),
            "--set",
            "local={random_epochs: [3, 1], batch_size: 8, lr: 0.1}",
        ]
    )
    assert line == f"{path}: local.random_epochs: expected [low, high] with 1 ≤ low ≤ high, got [3, 1]"
    assert listing(tmp_path) == ["s.yaml"]


# -- scale --


def test_a_file_of_many_unknown_keys_is_refused_quickly_with_a_bounded_list(tmp_path: Path):
    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump(tiny_scenario()) + "".join(f"unknown_{i}: {i}\n" for i in range(100_000)))
    start = time.perf_counter()
    result = runner.invoke(app, ["validate", str(path)], terminal_width=300)
    assert time.perf_counter() - start < 120  # ~5 s here; the error list was one line per key (14 min for 2.1 M keys)
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 22, lines[:3]
    assert lines[0] == f"{path} is invalid (100000 problems):" and lines[1] == "  unknown_0: unknown key"
    assert lines[-1] == "  … and 99980 more"


# -- warnings (item 7) --


def test_a_warning_prints_as_one_line_without_source(tmp_path: Path, monkeypatch):
    """A corrupt checkpoint, set aside when the run resumes, is reported in one line."""
    import fedbench.runs

    path = scenario_file(tmp_path, rounds=3, checkpoint_every=1)
    out, real = tmp_path / "out", fedbench.runs.execute_run

    monkeypatch.setattr(fedbench.runs, "execute_run", interrupted_at(real, 2))
    assert runner.invoke(app, ["run", str(path), "--out", str(out), "--quiet"]).exit_code == 130
    monkeypatch.setattr(fedbench.runs, "execute_run", real)
    (checkpoint,) = (out / "checkpoints").glob("*.pt")
    checkpoint.write_bytes(os.urandom(64))
    with warnings.catch_warnings():  # pytest records warnings; show them as the command line does
        warnings.simplefilter("always")
        cli_warnings.install()
        result = runner.invoke(app, ["run", str(path), "--out", str(out), "--quiet"], terminal_width=400)
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    shown = [line for line in lines if line.startswith("warning: ")]
    assert len(shown) == 1 and shown[0].startswith(f"warning: checkpoint {checkpoint} is corrupt"), result.output
    assert len(lines) == 3 and "RuntimeWarning" not in result.output and "warnings.warn(" not in result.output
