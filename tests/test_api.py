"""The Python API (fedbench.api): its documented example runs, it runs a scenario exactly as ``fedbench run``
does, and it reads a store without writing one."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

import fedbench.api as fb
from fedbench.cli import app
from fedbench.scenario import ScenarioError
from fedbench.store import DB_NAME
from tests.factories import tiny_scenario

ROOT = Path(__file__).parents[1]
TWO = tiny_scenario(rounds=2, seeds=[0, 1], targets=[0.2], algorithms=[{"name": "fedavg"}, {"name": "scaffold"}])
TIMING = ["wall_s"]  # the only column that differs between two runs of the same scenario


@pytest.fixture(scope="module")
def api_run(tmp_path_factory: pytest.TempPathFactory) -> fb.Results:
    """TWO run once through the API into a fresh store."""
    return fb.run(fb.scenario(TWO), out=tmp_path_factory.mktemp("api") / "results", device="cpu")


def test_docs_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """docs/python-api.md's example, run as written in an empty folder, on the tests' tiny digits scenario."""
    text = ROOT.joinpath("docs", "python-api.md").read_text()
    (block,) = re.findall(r"```python\n(.*?)```", text, re.S)
    monkeypatch.chdir(tmp_path)
    ns: dict = {}
    exec(compile(block, "docs/python-api.md", "exec"), ns)
    example = tiny_scenario(seeds=[0, 1], targets=[0.2], algorithms=[{"name": "fedavg"}, {"name": "scaffold"}])
    assert ns["sc"].model_dump() == fb.scenario(example).model_dump()
    out = capsys.readouterr().out
    assert "['FedAvg', 'SCAFFOLD']" in out and "4 run(s), 4 finished" in out and "['tiny']" in out
    assert [p.name for p in ns["paths"]] == ["tiny_acc_vs_rounds.png"] and (tmp_path / ns["paths"][0]).is_file()
    assert len(ns["rounds"]) == 4 * 3 and set(ns["curves"]["algorithm"]) == {"FedAvg", "SCAFFOLD"}
    for name in re.findall(r"\bfb\.(\w+)", text):
        assert name in fb.__all__, name


def test_run_again_skips_finished_runs_and_gives_identical_frames(api_run: fb.Results, capsys) -> None:
    runs, rounds, summary = api_run.runs, api_run.rounds(), api_run.summary()
    capsys.readouterr()
    again = fb.run(fb.scenario(TWO), out=api_run.out, device="cpu")
    assert "finished" not in capsys.readouterr().out  # quiet prints a line per run it trained: none
    pd.testing.assert_frame_equal(again.runs, runs)  # `updated` too: no run was touched
    pd.testing.assert_frame_equal(again.rounds(), rounds)
    pd.testing.assert_frame_equal(again.summary(), summary)


def test_numbers_equal_a_cli_run(api_run: fb.Results, tmp_path: Path) -> None:
    """`fedbench run` of the same scenario file: the same run ids and the same metrics, round by round."""
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(TWO))
    out = tmp_path / "cli"
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(out), "--device", "cpu", "--quiet"])
    assert result.exit_code == 0, result.output
    cli = fb.open_store(out)
    columns = ["run_id", "scenario", "algorithm", "seed", "status", "spec_hash", "scale"]
    pd.testing.assert_frame_equal(cli.runs[columns], api_run.runs[columns])
    pd.testing.assert_frame_equal(
        cli.rounds(extra=True).drop(columns=TIMING), api_run.rounds(extra=True).drop(columns=TIMING)
    )
    pd.testing.assert_frame_equal(cli.summary(), api_run.summary())


def test_an_interrupted_run_resumes_with_the_same_numbers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C in round 3 (checkpoint after round 2) raises RunInterrupted; the same call resumes the run and
    gives the rows of an uninterrupted one."""
    from fedbench.runs import RunInterrupted
    from fedbench.store import ResultsStore

    sc = fb.scenario(tiny_scenario(checkpoint_every=1))
    record = ResultsStore.record_rounds

    def ctrl_c_in_round_3(self, rows):  # checkpoint_every=1: each round is read and recorded alone
        if any(round == 3 for _, round, _, _ in rows):
            raise KeyboardInterrupt
        return record(self, rows)

    monkeypatch.setattr(ResultsStore, "record_rounds", ctrl_c_in_round_3)
    with pytest.raises(RunInterrupted, match="interrupted tiny / FedAvg seed 0 in round 3"):
        fb.run(sc, out=tmp_path / "a", device="cpu")
    stopped = fb.open_store(tmp_path / "a")
    assert stopped.runs["status"].tolist() == ["running"] and stopped.rounds()["round"].tolist() == [1, 2]
    monkeypatch.setattr(ResultsStore, "record_rounds", record)
    resumed = fb.run(sc, out=tmp_path / "a", device="cpu")
    clean = fb.run(sc, out=tmp_path / "b", device="cpu")
    assert resumed.runs["status"].tolist() == ["finished"]
    pd.testing.assert_frame_equal(
        resumed.rounds(extra=True).drop(columns=TIMING), clean.rounds(extra=True).drop(columns=TIMING)
    )


def test_rounds_summary_and_curves_agree_with_the_rows(api_run: fb.Results) -> None:
    rounds = api_run.rounds()
    assert list(rounds.columns[:6]) == ["run_id", "scenario", "algorithm", "seed", "status", "round"]
    assert len(rounds) == 2 * 2 * 2 and rounds["test_acc"].between(0, 1).all()
    by = rounds.groupby(["algorithm", "round"], sort=False)["test_acc"]
    curves = api_run.curves()
    assert curves["mean"].tolist() == pytest.approx(by.mean().tolist())
    assert curves["std"].tolist() == pytest.approx(by.std(ddof=1).tolist())
    assert curves["seeds"].tolist() == [2] * 4 and curves["algorithm"].tolist() == ["FedAvg"] * 2 + ["SCAFFOLD"] * 2
    top = rounds.groupby(["algorithm", "seed"], sort=False)["test_acc"].max().groupby(level=0, sort=False)
    assert api_run.summary()["top_acc_mean"].tolist() == pytest.approx(top.mean().tolist())
    with_lr = api_run.rounds(extra=["lr"])
    assert "extra" not in with_lr.columns and with_lr["lr"].tolist() == [0.1] * len(rounds)
    assert api_run.scenarios() == ["tiny"]


def test_open_store_on_a_missing_store_raises_and_creates_nothing(tmp_path: Path, api_run: fb.Results) -> None:
    missing = tmp_path / "nowhere" / "results"
    with pytest.raises(FileNotFoundError, match=re.escape(str(missing / DB_NAME))):
        fb.open_store(missing)
    assert not (tmp_path / "nowhere").exists()
    with pytest.raises(FileNotFoundError):
        fb.open_store(tmp_path)  # an existing folder without a store
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match="no runs of scenario 'other'.*scenarios there: tiny"):
        fb.open_store(api_run.out, "other")


def test_bad_input_raises_before_anything_is_written(tmp_path: Path) -> None:
    sc, out = fb.scenario(TWO), tmp_path / "out"
    for kwargs, message in (
        ({"seeds": [0, 0]}, "seeds: expected distinct"),
        ({"seeds": [-1]}, "seeds"),
        ({"device": "gpu"}, "--device gpu"),
        ({"only": "nope"}, "matches no algorithm"),
        ({"executor": "fast"}, "executor: expected one of"),
        ({"scale": "tiny"}, "scenario file"),
        ({"chunk": 0}, "chunk: expected a positive"),
        ({"executor": "ray"}, "process placement is --backend ray"),
        ({"client_state": "disk"}, "client-state: expected one of device, host"),
    ):
        with pytest.raises(ValueError, match=message):
            fb.run(sc, out=out, **kwargs)
        assert not out.exists(), kwargs
    with pytest.raises(FileNotFoundError, match=f"dataset mnist: not in {tmp_path}/d/MNIST/raw/"):
        fb.run(fb.scenario({**TWO, "dataset": {"name": "mnist"}}), out=out, data_dir=tmp_path / "d")
    assert not out.exists() and not (tmp_path / "d").exists()
    with pytest.raises(ScenarioError, match=r"partition.omega: Input should be greater than 0"):
        fb.scenario({**TWO, "partition": {"kind": "dirichlet", "omega": -1}})
    with pytest.raises(ScenarioError, match="use fedbench.api.load"):
        fb.scenario("configs/quickstart.yaml")
    raw = tiny_scenario(dataset="digits")
    fb.scenario(raw, overrides=["rounds=1"])
    assert raw == tiny_scenario(dataset="digits")  # the caller's mapping is not modified


def test_load_reads_a_file_at_a_scale_with_overrides() -> None:
    sc = fb.load(ROOT / "configs" / "quickstart.yaml", overrides=["rounds=4", "seeds=[3]"])
    assert (sc.name, sc.rounds, sc.seeds) == ("quickstart", 4, [3])
    with pytest.raises(ScenarioError, match="unknown scale"):
        fb.load(ROOT / "configs" / "quickstart.yaml", scale="huge")


@pytest.mark.parametrize("module", ["fedbench", "fedbench.api"])
def test_import_does_not_import_torch(module: str) -> None:
    code = f"import sys, {module}; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert out.strip() == "False"


def test_the_readme_example_runs(tmp_path, monkeypatch):
    import re
    import shutil

    root = Path(__file__).parents[1]
    block = re.findall(r"```python\n(.*?)```", (root / "README.md").read_text(), re.S)[0]
    (tmp_path / "configs").mkdir()
    shutil.copy(root / "configs/quickstart.yaml", tmp_path / "configs/quickstart.yaml")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(block, "README.md", "exec"), namespace)
    summary = namespace["res"].summary()
    assert len(summary) == 5 and set(summary["finished"]) == {1}
