"""Trackers (fedbench.trackers, issue 28 item 4): what `--log` and `fedbench export` write to TensorBoard and MLflow,
read back with tbparse and MlflowClient and compared with the SQLite store, number by number; exporting twice and
resuming add no point; bad input exits 2 in one line and writes nothing."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import typer.main
import yaml
from typer.testing import CliRunner

import fedbench.api as fb
from fedbench.cli import app
from fedbench.store import ResultsStore
from fedbench.trackers import MARKER, LogTarget, parse_log, read_runs
from tests.factories import tiny_scenario

pytest.importorskip("tbparse")
pytest.importorskip("mlflow")
from mlflow.tracking import MlflowClient  # noqa: E402
from tbparse import SummaryReader  # noqa: E402

runner = CliRunner()
TWO = tiny_scenario(name="trackers", rounds=2, algorithms=[{"name": "fedavg"}, {"name": "scaffold"}])


def cli(*args: str | Path) -> str:
    result = runner.invoke(app, [str(a) for a in args], terminal_width=300)
    assert result.exit_code == 0, (args, result.output, result.exception)
    return result.output


@pytest.fixture(scope="module")
def logged(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """TWO run by ``fedbench run --log tensorboard --log mlflow`` (both defaults: under --out); its --out."""
    root = tmp_path_factory.mktemp("trackers")
    scenario = root / "two.yaml"
    scenario.write_text(yaml.safe_dump(TWO))
    out = root / "results"
    output = cli("run", scenario, "--out", out, "--device", "cpu", "--quiet", "--log", "tensorboard", "--log", "mlflow")
    assert f"logged to tensorboard {out / 'tensorboard'}: 2 run(s) written, 0 up to date" in output
    return out


def uri(out: Path) -> str:
    return "sqlite:///" + str((out / "mlflow.db").absolute())


def stored(out: Path) -> dict[str, dict[int, dict[str, float]]]:
    """run id → round → every number the store holds for it (metric columns and extra logs), read independently
    of fedbench.trackers: the metric columns from SQL, the extras' numbers walked here."""
    frame = ResultsStore(out, read_only=True).metrics()
    result: dict[str, dict[int, dict[str, float]]] = {}
    for row in frame.to_dict("records"):
        values = {k: float(v) for k, v in row.items() if k not in ("run_id", "round", "extra") and v == v}
        todo = [("", json.loads(row["extra"] or "{}"))]
        while todo:
            path, node = todo.pop()
            if isinstance(node, dict):
                todo += [(f"{path}.{key}" if path else key, item) for key, item in node.items()]
            elif isinstance(node, (int, float)) and not isinstance(node, bool):
                values[path] = float(node)
        result.setdefault(row["run_id"], {})[int(row["round"])] = values
    return result


def tensorboard_scalars(logdir: Path) -> dict[str, dict[int, dict[str, float]]]:
    """run id (the run folder's name) → step → tag → value, as tbparse reads the event files."""
    frame = SummaryReader(str(logdir), extra_columns={"dir_name"}).scalars
    result: dict[str, dict[int, dict[str, float]]] = {}
    for row in frame.to_dict("records"):
        steps = result.setdefault(Path(row["dir_name"]).name, {}).setdefault(int(row["step"]), {})
        assert row["tag"] not in steps, f"point {row['tag']} step {row['step']} written twice"
        steps[row["tag"]] = float(row["value"])
    return result


def mlflow_runs(tracking: str, experiment: str) -> dict[str, object]:
    client = MlflowClient(tracking)
    found = client.get_experiment_by_name(experiment)
    assert found is not None
    runs = client.search_runs([found.experiment_id])
    return {r.data.tags["fedbench.run_id"]: r for r in runs}


def mlflow_scalars(tracking: str, experiment: str) -> dict[str, dict[int, dict[str, float]]]:
    """run id (its fedbench.run_id tag) → step → key → value, from every metric's full history."""
    client = MlflowClient(tracking)
    result: dict[str, dict[int, dict[str, float]]] = {}
    for run_id, run in mlflow_runs(tracking, experiment).items():
        steps = result.setdefault(run_id, {})
        for key in run.data.metrics:
            for point in client.get_metric_history(run.info.run_id, key):
                assert key not in steps.get(point.step, {}), f"point {key} step {point.step} written twice"
                steps.setdefault(point.step, {})[key] = point.value
    return result


def assert_same(got: dict, want: dict, rel: float) -> None:
    assert got.keys() == want.keys()
    for run_id, rounds in want.items():
        assert got[run_id].keys() == rounds.keys(), run_id
        for round_, values in rounds.items():
            assert got[run_id][round_].keys() == values.keys(), (run_id, round_)
            assert got[run_id][round_] == pytest.approx(values, rel=rel), (run_id, round_)


def test_tensorboard_holds_every_number_of_the_store(logged: Path) -> None:
    want = stored(logged)
    assert len(want) == 2 and all(len(r) == 2 for r in want.values())
    assert "test_acc" in want[next(iter(want))][1] and "partition.label_skew_tv" in want[next(iter(want))][1]
    assert_same(tensorboard_scalars(logged / "tensorboard"), want, rel=1e-6)  # event files keep float32
    runs = ResultsStore(logged, read_only=True).runs()
    hparams = SummaryReader(str(logged / "tensorboard"), extra_columns={"dir_name"}).hparams
    for run in runs.to_dict("records"):
        assert (logged / "tensorboard" / "trackers" / run["algorithm"] / run["run_id"]).is_dir()
        mine = hparams[hparams["dir_name"].str.endswith(run["run_id"])].set_index("tag")["value"]
        assert mine["scenario_hash"] == run["scenario_hash"] and mine["spec_hash"] == run["spec_hash"]
        assert (
            mine["seed"] == run["seed"] and mine["algorithm.name"] == json.loads(run["spec_json"])["algorithm"]["name"]
        )
        assert mine["local.lr"] == pytest.approx(0.1) and mine["model.hidden"] == "[16]"


def test_mlflow_holds_every_number_of_the_store(logged: Path) -> None:
    assert_same(mlflow_scalars(uri(logged), "trackers"), stored(logged), rel=0)  # float64 both: equal
    found = mlflow_runs(uri(logged), "trackers")
    for run in ResultsStore(logged, read_only=True).runs().to_dict("records"):
        mlrun = found[run["run_id"]]
        params, tags = mlrun.data.params, mlrun.data.tags
        assert params["scenario_hash"] == tags["fedbench.scenario_hash"] == run["scenario_hash"]
        assert params["seed"] == str(run["seed"]) and params["algorithm.label"] == run["algorithm"]
        assert params["server.optimizer"] == "sgd" and params["paper"] == "null"
        assert tags["fedbench.last_round"] == "2" and tags["fedbench.status"] == "finished"
        assert mlrun.info.status == "FINISHED" and mlrun.info.run_name == f"{run['algorithm']} seed 0"


def test_exporting_again_writes_nothing_and_no_point_twice(logged: Path) -> None:
    events = sorted(p.name for p in (logged / "tensorboard").rglob("events.out.tfevents.*"))
    output = cli("export", "--to", "tensorboard,mlflow", "--out", logged)
    assert "tensorboard" in output and output.count("0 run(s) written, 2 up to date") == 2, output
    assert sorted(p.name for p in (logged / "tensorboard").rglob("events.out.tfevents.*")) == events  # untouched
    assert_same(mlflow_scalars(uri(logged), "trackers"), stored(logged), rel=0)


def test_export_writes_the_same_numbers_to_another_destination(logged: Path, tmp_path: Path) -> None:
    output = cli("export", "--to", "tensorboard", "--dest", tmp_path / "tb", "--out", logged, "--scenario", "trackers")
    assert "2 run(s) written" in output
    assert_same(tensorboard_scalars(tmp_path / "tb"), stored(logged), rel=1e-6)
    rewritten = next((tmp_path / "tb").rglob(MARKER)).parent
    (rewritten / MARKER).write_text("{}")  # as if written from other rows: the folder is rewritten whole
    assert "1 run(s) written, 1 up to date" in cli("export", "--to", f"tensorboard:{tmp_path / 'tb'}", "--out", logged)
    assert len(list(rewritten.glob("events.out.tfevents.*"))) == 1
    assert_same(tensorboard_scalars(tmp_path / "tb"), stored(logged), rel=1e-6)


def test_a_resumed_run_adds_no_point_twice(logged: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C in round 3 of 4 (checkpoint every round); the stopped run is exported (rounds 1–2, KILLED), then the
    same fb.run(log=...) resumes it and copies it: every round once, in both trackers (the module's MLflow store)."""
    from fedbench.runs import RunInterrupted

    sc = fb.scenario(tiny_scenario(name="trackers_resume", rounds=4, checkpoint_every=1))
    record = ResultsStore.record_rounds

    def ctrl_c_in_round_3(self, rows):  # checkpoint_every=1: each round is read and recorded alone
        if any(round == 3 for _, round, _, _ in rows):
            raise KeyboardInterrupt
        return record(self, rows)

    out, tb, tracking = tmp_path / "results", tmp_path / "tb", uri(logged)
    log = [f"tensorboard:{tb}", f"mlflow:{tracking}"]
    monkeypatch.setattr(ResultsStore, "record_rounds", ctrl_c_in_round_3)
    with pytest.raises(RunInterrupted):
        fb.run(sc, out=out, device="cpu", log=log)
    monkeypatch.setattr(ResultsStore, "record_rounds", record)
    assert not tb.exists()  # an interrupted run is copied when it ends, or by export
    stopped = fb.open_store(out)
    assert all(" 1 run(s) written" in line for line in stopped.export(",".join(log)))
    assert mlflow_scalars(tracking, "trackers_resume")[stopped.runs["run_id"][0]].keys() == {1, 2}
    run = next(iter(mlflow_runs(tracking, "trackers_resume").values()))
    assert run.info.status == "KILLED"
    fb.run(sc, out=out, device="cpu", log=log)
    want = stored(out)
    assert [*want[stopped.runs["run_id"][0]]] == [1, 2, 3, 4]
    assert_same(tensorboard_scalars(tb), want, rel=1e-6)
    assert_same(mlflow_scalars(tracking, "trackers_resume"), want, rel=0)
    run = next(iter(mlflow_runs(tracking, "trackers_resume").values()))
    assert run.info.status == "FINISHED" and len(mlflow_runs(tracking, "trackers_resume")) == 1


def test_a_sweep_copies_its_runs_from_the_driver_and_skipped_runs_too(logged: Path, tmp_path: Path) -> None:
    scenario = tmp_path / "one.yaml"
    scenario.write_text(yaml.safe_dump(tiny_scenario(name="trackers_sweep", rounds=1)))
    out, tb = tmp_path / "results", tmp_path / "tb"
    args = ("sweep", scenario, "--out", out, "--jobs", "1", "--device", "cpu", "--log", f"tensorboard:{tb}")
    assert f"logged to tensorboard {tb}: 1 run(s) written, 0 up to date" in cli(*args)
    assert_same(tensorboard_scalars(tb), stored(out), rel=1e-6)
    again = cli(*args, "--log", f"mlflow:{uri(logged)}")  # done before: skipped, still copied where missing
    assert "1 run(s) written" in again and f"logged to tensorboard {tb}: 0 run(s) written, 1 up to date" in again
    assert_same(mlflow_scalars(uri(logged), "trackers_sweep"), stored(out), rel=0)


def test_read_runs_gives_the_trackers_every_stored_number(logged: Path) -> None:
    runs = read_runs(ResultsStore(logged, read_only=True))
    want = stored(logged)
    assert {r.run_id: dict(r.rounds) for r in runs} == want
    assert all(r.params["scenario_hash"] == r.scenario_hash and r.tags()["fedbench.run_id"] == r.run_id for r in runs)


# -- the option: declared once, parsed and checked --


def _params(command: str) -> dict[str, object]:
    click = typer.main.get_command(app)
    return {opt: p for p in click.commands[command].params for opt in p.opts}


def test_log_is_one_declaration_on_run_sweep_tune_and_reproduce() -> None:
    reference = _params("run")["--log"]
    for command in ("sweep", "tune", "reproduce"):
        option = _params(command)["--log"]
        assert (option.default, option.help, option.multiple) == (reference.default, reference.help, True)
    assert "--log" not in _params("validate")


def test_parse_log_takes_repeats_and_commas_and_drops_duplicates() -> None:
    assert parse_log(["tensorboard,mlflow:http://host:5000", "tensorboard"]) == (
        LogTarget("tensorboard"),
        LogTarget("mlflow", "http://host:5000"),
    )
    assert LogTarget("mlflow").where(Path("r")) == "sqlite:///" + str(Path("r/mlflow.db").absolute())
    assert LogTarget("mlflow", "x/m.db").where(Path("r")) == "sqlite:///" + str(Path("x/m.db").absolute())
    assert LogTarget("tensorboard").where(Path("r")) == str(Path("r/tensorboard"))


def fails_cleanly(tmp_path: Path, args: list[str], needle: str) -> None:
    """Exit 2, one line holding ``needle``, no traceback, and nothing written under tmp_path."""
    before = sorted(tmp_path.rglob("*"))
    result = runner.invoke(app, args, terminal_width=300)
    assert result.exit_code == 2, (args, result.output, result.exception)
    assert "Traceback" not in result.output and needle in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert sorted(tmp_path.rglob("*")) == before


@pytest.mark.parametrize("command", ["run", "sweep", "tune", "reproduce"])
def test_an_unknown_target_is_refused_naming_the_option(tmp_path: Path, command: str) -> None:
    first = "gradma" if command == "reproduce" else "configs/quickstart.yaml"
    args = [command, first, "--out", str(tmp_path / "out"), "--log", "tensorboard,wandb"]
    fails_cleanly(tmp_path, args, "--log wandb: expected tensorboard[:DIR] or mlflow[:URI]")


def test_a_target_whose_library_is_missing_is_refused_with_its_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, logged: Path
) -> None:
    monkeypatch.setitem(sys.modules, "mlflow", None)  # as if not installed: `import mlflow` fails
    out = str(tmp_path / "out")
    needle = "--log mlflow: mlflow not installed; pip install 'fedbench[mlflow]'"
    fails_cleanly(tmp_path, ["run", "configs/quickstart.yaml", "--out", out, "--log", "mlflow"], needle)
    fails_cleanly(
        tmp_path,
        ["export", "--to", "mlflow", "--out", str(logged), "--dest", str(tmp_path / "m.db")],
        "mlflow not installed; pip install 'fedbench[mlflow]'",
    )
    with pytest.raises(ValueError, match=r"^--log mlflow: mlflow not installed"):
        fb.run(fb.scenario(TWO), out=out, device="cpu", log="mlflow")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--to", "wandb"], "--to wandb: expected tensorboard[:DIR] or mlflow[:URI]"),
        (["--to", "tensorboard:"], "--to tensorboard:: empty DIR after the colon"),
        (["--to", "tensorboard,mlflow", "--dest", "x"], "--dest x: goes with one tracker"),
        (["--to", "tensorboard", "--scenario", "nope"], "no runs of scenario 'nope'"),
    ],
)
def test_export_refuses_bad_input_and_writes_nothing(
    logged: Path, tmp_path: Path, args: list[str], needle: str
) -> None:
    before = sorted(logged.rglob("*"))
    fails_cleanly(tmp_path, ["export", *args, "--out", str(logged)], needle)
    assert sorted(logged.rglob("*")) == before
