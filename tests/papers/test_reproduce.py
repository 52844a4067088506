"""`fedbench reproduce`: the paper rooms' targets, --list / --dry-run / bad input, a small end-to-end run on a
fake room, and the make wrappers."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from fedbench.cli import app
from fedbench.papers import paper_names, paper_part, reproduce as rp
from fedbench.papers.targets import SCALES, Continual, PaperRoom, Plot, ScenarioTable, Target, Tuning
from fedbench.sweeps.grid import expand_file

ROOT = Path(__file__).resolve().parents[2]
PAPERS = paper_names()  # the rooms, found by their reference.yaml (fedbench/rooms.py)
KNOWN = ["cflag", "fedcams", "fedmim", "fedqvr", "gradma"]


def invoke(*args: str):
    return CliRunner().invoke(app, ["reproduce", *args])


def tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def test_the_five_papers_have_rooms() -> None:
    assert set(KNOWN) <= set(PAPERS)
    assert {p: rp.room(p).first_table for p in KNOWN} == {
        "cflag": "table2",
        "fedcams": "table1",
        "fedmim": "table1",
        "fedqvr": "table1",
        "gradma": "table1",
    }


def test_every_paper_has_a_room() -> None:
    for paper in PAPERS:
        room = rp.room(paper)
        assert room.name == paper and room.targets
        assert len({t.name for t in room.targets}) == len(room.targets)
        for t in room.targets:
            assert all(n in {x.name for x in room.targets} for n in t.needs), (paper, t.name, t.needs)
        assert paper_part(paper, "claims")  # its claims register


def _files(target: Target) -> list[str]:
    """Every scenario file the target runs or its steps read."""
    named = [s.file for s in target.steps if isinstance(s, (Plot, ScenarioTable, Continual)) and s.file]
    return [*target.runs, *named]


@pytest.mark.parametrize("paper", PAPERS)
def test_every_target_file_exists_and_loads_at_every_scale(paper: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    for target in rp.room(paper).targets:
        for file in _files(target):
            assert Path(file).is_file(), f"{paper} {target.name}: {file} does not exist"
            for scale in SCALES:
                names = [p.scenario.name for p in expand_file(file, scale)]
                assert names and all(n.endswith(f".{scale}") == (scale != "paper") for n in names), (file, scale)


def test_list_names_every_target_and_creates_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    out = tmp_path / "absent" / "store"
    result = invoke("--list", "--scale", "tiny", "--out", str(out))
    assert result.exit_code == 0, result.output
    for paper in PAPERS:
        assert f"\n{paper}: " in result.output
        for t in rp.room(paper).targets:
            assert f"  {t.name} " in result.output
    assert "  fig5_mnist_tau0.08   4 runs, 0 done" in result.output
    assert "  table1               no runs" in result.output  # FedCAMS Table 1 is analytic
    assert not (tmp_path / "absent").exists()


def test_dry_run_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    dirs = ["--out", str(tmp_path / "out"), "--tables-dir", str(tmp_path / "t"), "--figures-dir", str(tmp_path / "f")]
    result = invoke("fedqvr", "fig5_mnist_tau0.08", "--scale", "tiny", "--dry-run", *dirs)
    assert result.exit_code == 0, result.output
    assert "fedqvr fig5_mnist_tau0.08: 4 run(s), 4 to run" in result.output
    assert result.output.count("\n  run  fedqvr_fig5_mnist_tau0.08.tiny") == 4
    assert "then fedbench table --scenario fedqvr_fig5_mnist_tau0.08.tiny" in result.output
    assert tree(tmp_path) == []


def test_dry_run_lists_needed_targets_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    chosen = rp.check("cflag", ["figures"], rp.Options(scale="tiny", out=tmp_path))
    assert [t.name for t in chosen] == ["table2", "table3", "table7", "figures"]
    assert [t.name for t in rp.check("gradma", ["table2", "table1"], rp.Options())] == ["runs", "table2", "table1"]


@pytest.mark.parametrize(
    "args, bad, known",
    [
        (["nope"], "'nope'", ", ".join(PAPERS)),
        (["gradma", "table9"], "'table9'", "runs, table1, table2"),
        (["gradma", "table1", "--scale", "huge"], "'huge'", "paper, small, tiny"),
        (["gradma", "--backend", "slurm"], "'slurm'", "local, ray"),
        (["--list", "--scale", "huge"], "'huge'", "paper, small, tiny"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    args: list[str], bad: str, known: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = invoke(*args, "--out", str(tmp_path / "out"))
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and bad in lines[0] and known in lines[0], result.stderr
    assert tree(tmp_path) == []


def _tiny_scenario(path: Path) -> Path:
    """The quick start cut to two algorithms, one seed and two rounds (a tiny scale of one round)."""
    raw = yaml.safe_load((ROOT / "configs" / "quickstart.yaml").read_text())
    raw.update(
        name="roomtest",
        rounds=2,
        seeds=[0],
        algorithms=[{"name": "fedavg"}, {"name": "fedprox", "mu": 0.1}],
        eval={"every": 1},
        scales={"tiny": {"rounds": 1}},
    )
    path.write_text(yaml.safe_dump(raw))
    return path


def test_reproduce_runs_then_writes_a_fake_rooms_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    file = str(_tiny_scenario(tmp_path / "roomtest.yaml"))
    room = PaperRoom("fake", "a fake paper", (Target("t1", "one table", runs=(file,), steps=(ScenarioTable(file),)),))
    monkeypatch.setattr(rp, "room", lambda paper: room)
    opts = rp.Options(scale="tiny", out=tmp_path / "out", jobs=1, tables_dir=tmp_path / "tables")
    chosen = rp.check("fake", ["t1"], opts)
    assert rp.reproduce("fake", chosen, opts, rp.Console(quiet=True)) == 0
    assert sorted(p.name for p in (tmp_path / "tables").iterdir()) == [
        "roomtest.tiny.csv",
        "roomtest.tiny.md",
        "roomtest.tiny.tex",
    ]
    runs = rp.ResultsStore(opts.out_dir).runs()
    assert runs["algorithm"].tolist() == ["FedAvg", "FedProx"] and set(runs["status"]) == {"finished"}
    assert set(runs["scale"]) == {"tiny"}
    plan = rp.plan_lines("fake", chosen, opts)
    assert plan[0].startswith("fake t1: 2 run(s), 0 to run")  # a second call has nothing left to run


def test_reproduce_tunes_a_tuned_scenario_then_marks_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Trials first, then the chosen settings on the scenario's seeds; the table marks the tuned row,
    the paper's tuning table lists the choice; a second call has nothing left to run."""
    file = _tiny_scenario(tmp_path / "tuned.yaml")
    raw = yaml.safe_load(file.read_text())
    raw["algorithms"][1]["tune"] = {"space": {"local.lr": [0.05, 0.2]}, "protocol": "paper", "trials": {"rounds": 1}}
    file.write_text(yaml.safe_dump(raw))
    room = PaperRoom(
        "fake",
        "a fake paper",
        (Target("t1", "one table", runs=(str(file),), steps=(Tuning(), ScenarioTable(str(file)))),),
    )
    monkeypatch.setattr(rp, "room", lambda paper: room)
    opts = rp.Options(scale="tiny", out=tmp_path / "out", jobs=1, tables_dir=tmp_path / "tables")
    chosen = rp.check("fake", ["t1"], opts)
    assert rp.reproduce("fake", chosen, opts, rp.Console(quiet=True)) == 0
    runs = rp.ResultsStore(opts.out_dir).runs()
    final = runs[runs["scenario"] == "roomtest.tiny"]
    assert final["algorithm"].tolist() == ["FedAvg", "FedProx"] and set(runs["status"]) == {"finished"}
    assert len(runs) == 2 + 2  # two trials of FedProx, then FedAvg as written and FedProx at its chosen lr
    table = (tmp_path / "tables" / "roomtest.tiny.md").read_text()
    assert "| FedProx †" in table and "| FedAvg  " in table and "† tuned (FedProx)" in table
    tuning = (tmp_path / "tables" / "fake_tuning_tiny.md").read_text()
    assert "FedProx" in tuning and "FedAvg" not in tuning and "paper" in tuning
    assert rp.plan_lines("fake", chosen, opts)[-3].startswith("  then 2 run(s) of the chosen settings, 0 to run")


def test_reproduce_runs_a_halving_search_rung_by_rung(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``scheduler: halving``: 4 candidates for 1 round, the top 2 for 2, then the chosen setting; the
    tuning table states the rungs; a second call finds every rung done and runs nothing."""
    file = _tiny_scenario(tmp_path / "halving.yaml")  # 2 rounds at the paper scale
    raw = yaml.safe_load(file.read_text())
    raw["algorithms"][1]["tune"] = {
        "space": {"local.lr": [0.01, 0.05, 0.2, 0.4]},
        "scheduler": "halving",
        "halving": {"min_rounds": 1, "eta": 2},
        "protocol": "paper",
    }
    file.write_text(yaml.safe_dump(raw))
    room = PaperRoom("fake", "a fake paper", (Target("t1", "one table", runs=(str(file),), steps=(Tuning(),)),))
    monkeypatch.setattr(rp, "room", lambda paper: room)
    opts = rp.Options(scale="paper", out=tmp_path / "out", jobs=1, tables_dir=tmp_path / "tables")
    chosen = rp.check("fake", ["t1"], opts)
    assert rp.reproduce("fake", chosen, opts, rp.Console(quiet=True)) == 0
    runs = rp.ResultsStore(opts.out_dir).runs()
    rung0 = runs[runs["scenario"].str.startswith("roomtest--tune-1rounds--")]
    rung1 = runs[runs["scenario"].str.startswith("roomtest--tune--")]
    assert (len(rung0), len(rung1), len(runs)) == (4, 2, 4 + 2 + 2)
    assert "| 4 / 4 (100 %) halving 4→2 |" in (tmp_path / "tables" / "fake_tuning_paper.md").read_text()
    assert rp.plan_lines("fake", chosen, opts)[0].startswith("fake t1: 6 run(s), 0 to run")  # the trials: 4 + 2


def test_reproduce_gives_the_run_options_to_every_run_trials_included(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`fedbench reproduce` takes the shared run options and every run it makes, the tuning trials
    first, trains with them (the round-1 log says how)."""
    import json

    from fedbench.sweeps import worker

    file = _tiny_scenario(tmp_path / "tuned.yaml")
    raw = yaml.safe_load(file.read_text())
    raw["algorithms"][1]["tune"] = {"space": {"local.lr": [0.05, 0.2]}, "protocol": "paper", "trials": {"rounds": 1}}
    file.write_text(yaml.safe_dump(raw))
    room = PaperRoom("fake", "a fake paper", (Target("t1", "one table", runs=(str(file),), steps=()),))
    monkeypatch.setattr(rp, "room", lambda paper: room)
    seen, real = [], worker.execute_run
    monkeypatch.setattr(worker, "execute_run", lambda *a: seen.append(a[-1]) or real(*a))
    out = tmp_path / "out"
    result = invoke(
        "fake",
        "--scale",
        "tiny",
        "--out",
        str(out),
        "--jobs",
        "1",
        "--device",
        "cpu",
        "--data-dir",
        str(tmp_path / "d"),
        "--executor",
        "batched",
        "--chunk",
        "1",
        "--compile",
        "off",
        "--client-state",
        "host",
        "--threads",
        "2",
    )
    assert result.exit_code == 0, result.output
    expected = rp.RunOptions("cpu", tmp_path / "d", False, "batched", 1, "off", "host", 2)
    assert seen == [expected] * 4  # two trials, then the two final runs
    store = rp.ResultsStore(out)
    logs = [json.loads(e) for e in store.metrics(store.runs()["run_id"]).query("round == 1")["extra"]]
    assert [(x["executor"], x["threads"]) for x in logs] == [
        ("batched, chunks of 1 clients (asked for; --chunk); step eager (--compile off)", 2)
    ] * 4


def test_a_missing_dataset_stops_reproduce_before_anything_is_written(tmp_path: Path) -> None:
    result = invoke(
        "fedqvr",
        "fig5_mnist_tau0.08",
        "--scale",
        "small",
        "--data-dir",
        str(tmp_path / "d"),
        "--out",
        str(tmp_path / "out"),
        "--tables-dir",
        str(tmp_path / "t"),
        "--figures-dir",
        str(tmp_path / "f"),
    )
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [
        f"dataset mnist: not in {tmp_path}/d/MNIST/raw/ (pass --download to fetch it into {tmp_path}/d/, or "
        "--data-dir to the folder that holds MNIST/raw/)"
    ]
    assert tree(tmp_path) == []


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
@pytest.mark.parametrize(
    "target, line",
    [
        ("reproduce-gradma-table1", "fedbench reproduce gradma table1 --scale tiny --out results/tiny"),
        ("reproduce-fedqvr-fig5", "fedbench reproduce fedqvr fig5 --scale tiny --out results/tiny"),
        ("reproduce-cflag", "fedbench reproduce cflag --scale tiny --out results/tiny"),
    ],
)
def test_make_targets_wrap_fedbench_reproduce(target: str, line: str) -> None:
    lines = [x.rstrip() for x in make_dry_run(target) if " reproduce " in x]
    assert len(lines) == 1 and lines[0].endswith(line), lines


def make_dry_run(target: str) -> list[str]:
    """The commands ``make -n target SCALE=tiny`` would run, as a top-level make prints them: a make
    that runs the suite (``make test``, or any make above it) passes MAKELEVEL and MAKEFLAGS down,
    and a nested make then prints "make[1]: Entering directory '…/fedbench'" lines (issue 24)."""
    clean = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES")}
    result = subprocess.run(
        ["make", "--no-print-directory", "-n", target, "SCALE=tiny"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env=clean,
    )
    return result.stdout.splitlines()


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
@pytest.mark.parametrize("inherited", [{}, {"MAKELEVEL": "1", "MAKEFLAGS": "w -- "}], ids=["top", "under-make"])
def test_a_make_above_the_suite_changes_nothing(inherited: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Run as ``make test`` from another make (MAKELEVEL=1, -w in MAKEFLAGS), the dry run still lists one command."""
    for key, value in inherited.items():
        monkeypatch.setenv(key, value)
    lines = make_dry_run("reproduce-cflag")
    assert not [x for x in lines if "directory" in x], lines
    assert [x.rstrip() for x in lines if "fedbench" in x] == [
        ".venv/bin/fedbench reproduce cflag --scale tiny --out results/tiny"
    ]


def test_make_aggregates_compose_the_paper_targets() -> None:
    if shutil.which("make") is None:
        pytest.skip("needs make")
    assert [x.rstrip() for x in make_dry_run("reproduce-table1") if "reproduce " in x] == [
        ".venv/bin/fedbench reproduce --first-tables --scale tiny --out results/tiny"
    ]
    runs = [
        x.split("fedbench reproduce ")[1].split(" --")[0] for x in make_dry_run("reproduce-all") if "reproduce " in x
    ]
    assert runs == PAPERS


def test_first_tables_dry_run_names_each_rooms_first_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    result = invoke("--first-tables", "--dry-run", "--scale", "tiny", "--out", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    heads = [line.split(":")[0] for line in result.output.splitlines() if not line.startswith(" ")]
    assert heads == ["cflag table2", "fedcams table1", "fedmim table1", "fedqvr table1", "gradma runs", "gradma table1"]
    assert tree(tmp_path) == []


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_names_no_paper_and_refuses_an_unknown_one() -> None:
    assert not (ROOT / "mk").exists() and "fedmim" not in (ROOT / "Makefile").read_text()
    clean = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES")}
    result = subprocess.run(
        ["make", "--no-print-directory", "-n", "reproduce-nope-table1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=clean,
    )
    assert result.returncode != 0 and "no paper room for reproduce-nope-table1; rooms: cflag" in result.stderr
