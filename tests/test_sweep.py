"""Sweeps: grid expansion (names, overrides, errors), the local executor and the Ray executor."""

import json
import os
import time
import warnings
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from fedbench.cli import app
from fedbench.options import RunOptions
from fedbench.scenario import ScenarioError, load_scenario, resolve_runs, run_id_of
from fedbench.store import ResultsStore, scale_from_name
from fedbench.sweeps.driver import run_sweep
from fedbench.sweeps.grid import expand, sweep_runs
from tests.factories import tiny_scenario

BASE = tiny_scenario(
    {"clients.num": 4, "clients.per_round": 2, "partition.omega": 1.0, "local.iterations": 2},
    name="tinysweep",
    dataset="digits",
    rounds=2,
    algorithms=[{"name": "fedavg"}, {"name": "scaffold"}],
    seeds=[0],
    paper={"name": "fedmim", "table": "I", "column": "x"},
    scales={"tiny": {"rounds": 1, "clients.num": 3}},
)
SWEEPS = sorted(Path(__file__).parents[1].joinpath("configs", "sweeps").glob("*.yaml"))


def write(folder: Path, name: str, content: dict) -> Path:
    path = folder / name
    path.write_text(yaml.safe_dump(content, sort_keys=False))
    return path


@pytest.fixture
def base(tmp_path) -> Path:
    return write(tmp_path, "base.yaml", BASE)


def test_grid_is_the_cartesian_product_with_readable_valid_names(base):
    grid = {"base": "base.yaml", "grid": {"partition.omega": [0.5, 5.0], "clients.per_round": [1, 2]}, "seeds": [0, 1]}
    points = expand([write(base.parent, "g.yaml", grid)])
    assert [p.scenario.name for p in points] == [
        "tinysweep--omega-0.5--per_round-1",
        "tinysweep--omega-0.5--per_round-2",
        "tinysweep--omega-5.0--per_round-1",
        "tinysweep--omega-5.0--per_round-2",
    ]
    for p in points:
        sc = p.scenario
        assert (sc.partition.params()["omega"], sc.clients.per_round) == (
            p.overrides["partition.omega"],
            p.overrides["clients.per_round"],
        )
        assert sc.seeds == [0, 1] and sc.clients.num == 4 and sc.paper is None  # a variant is no paper cell
        assert scale_from_name(sc.name) == "paper"
    runs = sweep_runs(points)
    assert len(runs) == 4 * 2 * 2 and len({r.run_id for r in runs}) == 16


def test_scale_stays_the_name_suffix_and_applies_before_the_grid(base):
    grid = {"base": "base.yaml", "scale": "tiny", "grid": {"model.hidden": [[16], [8, 4]], "clients.num": [5]}}
    points = expand([write(base.parent, "g.yaml", grid)])
    assert [p.scenario.name for p in points] == [
        "tinysweep--hidden-16--num-5.tiny",
        "tinysweep--hidden-8_4--num-5.tiny",
    ]
    assert all(scale_from_name(p.scenario.name) == "tiny" and p.scenario.rounds == 1 for p in points)
    assert (
        points[1].scenario.model.params()["hidden"] == [8, 4] and points[0].scenario.clients.num == 5
    )  # grid wins over scale
    again = expand([write(base.parent, "g2.yaml", {**grid, "scale": None})], scale="tiny")  # --scale
    assert [p.scenario.name for p in again] == [p.scenario.name for p in points]


def test_plain_scenario_file_is_one_point_with_the_run_ids_of_fedbench_run(base):
    (point,) = expand([base], scale="tiny")
    expected = {run_id_of(s, seed) for s in resolve_runs(load_scenario(base, scale="tiny")) for seed in [0]}
    assert point.scenario.name == "tinysweep.tiny" and point.scenario.paper is not None
    assert {r.run_id for r in sweep_runs([point])} == expected
    assert len(sweep_runs(expand([base, base]))) == 2  # listed twice, run once


@pytest.mark.parametrize(
    "grid, message",
    [
        ({"partition.omega": [0.5, -1]}, "grid point partition.omega=-1"),
        ({"partition.omega": [0.5, -1]}, "partition.omega: Input should be greater than 0, got -1"),
        ({"partiton.omega": [0.5]}, "partiton: unknown key"),
        ({"partition.omega": []}, "grid.partition.omega: expected a non-empty list of values"),
        ({"partition.omega": 0.5}, "grid.partition.omega: Input should be a valid list"),
        ({"clients.per_round": [2, 9]}, "clients.per_round=9"),
    ],
)
def test_invalid_grid_points_name_their_key_and_value(base, grid, message):
    with pytest.raises(ScenarioError) as err:
        expand([write(base.parent, "g.yaml", {"base": "base.yaml", "grid": grid})])
    assert message in str(err.value)


def test_a_negative_seed_in_a_grid_file_is_refused(base):
    with pytest.raises(ScenarioError) as err:
        expand([write(base.parent, "g.yaml", {"base": "base.yaml", "seeds": [0, -2]})])
    assert "seeds.1: Input should be greater than or equal to 0" in str(err.value)


def test_two_files_giving_one_name_different_settings_is_an_error(base):
    a = write(base.parent, "a.yaml", {"base": "base.yaml", "set": {"rounds": 3}})
    with pytest.raises(ScenarioError, match="give one of the grid files its own `name:`"):
        expand([base, a])
    b = write(base.parent, "b.yaml", {"base": "base.yaml", "set": {"rounds": 3}, "name": "longer"})
    assert [p.scenario.name for p in expand([base, b])] == ["tinysweep", "longer"]


@pytest.mark.parametrize("path", SWEEPS, ids=lambda p: p.name)
def test_shipped_grid_files_expand(path):
    assert sweep_runs(expand([path]))


# --- executors ------------------------------------------------------------------------------

GRID = {"base": "base.yaml", "grid": {"partition.omega": [0.5, 5.0]}, "seeds": [0]}  # 2 points × 2 algorithms
FAILING = {
    "base": "base.yaml",
    "name": "broken",
    "set": {"partition.min_samples": 5000, "algorithms": [{"name": "fedavg"}]},
}


def comparable(store: ResultsStore):
    """The store's runs (id → status) and metrics without the wall-clock column."""
    runs = store.runs().set_index("run_id")["status"].to_dict()
    return runs, store.metrics().drop(columns="wall_s")


@pytest.fixture(scope="module")
def local_sweep(tmp_path_factory):
    """The 4-run grid through the local executor (2 spawned worker processes), twice."""
    folder = tmp_path_factory.mktemp("sweep")
    write(folder, "base.yaml", BASE)
    grid = write(folder, "grid.yaml", GRID)
    runs = sweep_runs(expand([grid]))
    first = run_sweep(runs, folder / "out", "local", jobs=2)
    updated = ResultsStore(folder / "out").runs()["updated"].tolist()
    second = run_sweep(runs, folder / "out", "local", jobs=2)
    return folder, runs, first, second, updated


def test_local_executor_writes_every_run_and_skips_them_next_time(local_sweep):
    folder, runs, first, second, updated = local_sweep
    assert (first.finished, first.skipped, first.failed) == (4, 0, 0)
    assert (second.finished, second.skipped, second.failed) == (0, 4, 0)
    store = ResultsStore(folder / "out")
    assert store.runs()["updated"].tolist() == updated  # the second sweep wrote nothing
    statuses, metrics = comparable(store)
    assert statuses == {r.run_id: "finished" for r in runs}
    assert metrics.groupby("run_id")["round"].apply(list).tolist() == [[1, 2]] * 4
    assert metrics.loc[metrics["round"] == 2, "test_acc"].between(0, 1).all()


def test_cli_sweep_dry_run_lists_points_and_done_runs(local_sweep):
    folder, runs, *_ = local_sweep
    result = CliRunner().invoke(app, ["sweep", str(folder / "grid.yaml"), "--out", str(folder / "out"), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "tinysweep--omega-0.5  (partition.omega=0.5)" in result.output
    assert all(f"{r.run_id}  finished" in result.output for r in runs)
    bad = write(folder, "bad.yaml", {"base": "base.yaml", "grid": {"partition.omega": [-1]}})
    result = CliRunner().invoke(app, ["sweep", str(bad), "--dry-run", "--strict"], terminal_width=250)
    assert result.exit_code == 2 and "partition.omega=-1" in result.output
    result = CliRunner().invoke(app, ["sweep", str(bad), "--dry-run"], terminal_width=250)
    assert (
        result.exit_code == 1
        and "skipped invalid grid point" in result.output
        and "partition.omega=-1" in result.output
    )


@pytest.fixture(scope="module")
def ray_local():
    ray = pytest.importorskip("ray")
    with warnings.catch_warnings():  # Ray's notice about a future CUDA_VISIBLE_DEVICES default
        warnings.simplefilter("ignore", FutureWarning)
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.mark.slow
def test_ray_executor_matches_local_and_records_failures(local_sweep, ray_local, tmp_path):
    """Ray's driver-written store equals the local workers' (ids, statuses, every metric but wall
    time, extra logs); a run that raises is recorded as failed and the others finish."""
    start = time.perf_counter()
    folder, runs, *_ = local_sweep
    broken = sweep_runs(expand([write(folder, "broken.yaml", FAILING)]))
    summary = run_sweep(runs + broken, tmp_path / "ray", "ray")
    assert (summary.finished, summary.failed) == (4, 1)
    store = ResultsStore(tmp_path / "ray")
    statuses, metrics = comparable(store)
    local_statuses, local_metrics = comparable(ResultsStore(folder / "out"))
    assert statuses == {**local_statuses, broken[0].run_id: "failed"}
    assert metrics.equals(local_metrics)
    error = store.runs().set_index("run_id").loc[broken[0].run_id, "error"]
    assert "min_samples=5000" in error and "Traceback" in error
    again = run_sweep(runs + broken, tmp_path / "ray", "ray")  # finished runs are not submitted; failed ones are
    assert (again.skipped, again.failed) == (4, 1)
    print(f"ray sweep test: {time.perf_counter() - start:.1f} s")


def test_ray_retries_a_run_whose_worker_died(local_sweep, ray_local, tmp_path):
    """A worker killed once is retried and its run finishes; one that always dies is failed after
    the retries, while the other runs finish."""
    from fedbench.sweeps.ray_executor import run_ray
    from fedbench.sweeps.worker import compute

    folder, runs, *_ = local_sweep
    once, always = runs[0].run_id, runs[1].run_id
    marker = tmp_path / "died-once"

    def dying(run, settings, device):
        if run.run_id == always or (run.run_id == once and not marker.exists()):
            marker.touch()
            os._exit(1)
        return compute(run, settings, device)

    done = []
    outcomes = run_ray(
        runs[:3], tmp_path / "out", RunOptions(threads=1), lambda r, o: done.append(o), max_retries=1, task=dying
    )
    status = {o.run_id: o.status for o in outcomes}
    assert status == {once: "finished", always: "failed", runs[2].run_id: "finished"} and len(done) == 3
    store = ResultsStore(tmp_path / "out")
    assert "task lost after 1 retries" in store.runs().set_index("run_id").loc[always, "error"]
    _, metrics = comparable(store)
    _, local_metrics = comparable(ResultsStore(folder / "out"))
    assert metrics.equals(local_metrics[local_metrics["run_id"].isin([once, runs[2].run_id])].reset_index(drop=True))


def test_ray_trains_populations_as_the_local_executor_does(local_sweep, ray_local, tmp_path):
    """--population 4: each algorithm's two grid points are one population, one Ray task; the driver's store
    equals the local pool's, and every run's log names its population."""
    folder, runs, *_ = local_sweep
    options = RunOptions(threads=1, population="4")
    local = run_sweep(runs, tmp_path / "local", "local", jobs=1, options=options)
    remote = run_sweep(runs, tmp_path / "ray", "ray", options=options)
    assert (local.finished, remote.finished) == (4, 4)
    (local_statuses, local_metrics), (statuses, metrics) = (
        comparable(ResultsStore(tmp_path / "local")),
        comparable(ResultsStore(tmp_path / "ray")),
    )
    assert statuses == local_statuses and metrics.equals(local_metrics)
    notes = ResultsStore(tmp_path / "ray").metrics()
    first = notes[notes["round"] == 1]["extra"].map(lambda e: json.loads(e)["executor"])
    assert first.str.startswith("population of 2 runs").all() and len(first) == 4


def test_invalid_points_are_skipped_and_reported_unless_strict(base, tmp_path):
    grid = write(
        base.parent, "g.yaml", {"base": "base.yaml", "grid": {"partition.omega": [0.5, -1]}, "set": {"rounds": 1}}
    )
    skipped: list[str] = []
    points = expand([grid], skipped=skipped)
    assert [p.overrides for p in points] == [{"partition.omega": 0.5}]
    assert len(skipped) == 1 and "grid point partition.omega=-1" in skipped[0] and "greater than 0" in skipped[0]
    out = tmp_path / "out"
    strict = CliRunner().invoke(app, ["sweep", str(grid), "--out", str(out), "--strict"], terminal_width=300)
    assert strict.exit_code == 2 and "partition.omega=-1" in strict.output and not out.exists()
    lenient = CliRunner().invoke(app, ["sweep", str(grid), "--out", str(out), "--jobs", "1"], terminal_width=300)
    assert lenient.exit_code == 1 and "skipped invalid grid point" in lenient.output, lenient.output
    assert "1 invalid grid point(s) were skipped" in lenient.output
    assert set(ResultsStore(out).runs()["status"]) == {"finished"} and len(ResultsStore(out).runs()) == len(
        sweep_runs(points)
    )


def test_the_sweep_says_how_its_runs_train_together(local_sweep):
    from fedbench.sweeps.driver import populations_line

    _, runs, *_ = local_sweep
    assert populations_line(runs, RunOptions(population="4"), "local") == (
        "4 run(s): 2 population(s) of 4, 0 alone; populations of up to 4 runs (--population 4)"
    )
    assert populations_line(runs, RunOptions(), "local") == ""  # auto on a CPU: one run at a time
    assert populations_line(runs[:3], RunOptions(population="2"), "ray").startswith(
        "3 run(s): 1 population(s) of 2, 1 alone"
    )
