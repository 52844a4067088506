"""A new paper is its room plus its configs (docs/reproduce.md#adding-a-paper): a fake paper written into a
temporary folder, found through FEDBENCH_ROOMS, reproduced through the CLI, and reached by make without a
new make file. Nothing here edits a file of the repository."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from fedbench import rooms
from fedbench.cli import app
from tests.papers.test_docs_papers import mismatches

ROOT = Path(__file__).resolve().parents[2]

REFERENCE = {
    "name": "fakepaper",
    "short": "Fake",
    "title": "A Fake Paper",
    "authors": "Nobody",
    "tables": {
        "1": {
            "caption": "Test accuracy (%) on digits.",
            "metric": "final_acc",
            "columns": ["digits"],
            "rows": {"FedAvg": [90.0], "FedProx": [91.0]},
        }
    },
}
ROOM = '''"""Fake paper: one table."""
from fedbench.papers.targets import Compare, PaperRoom, Target

ROOM = PaperRoom("fakepaper", "A Fake Paper", (
    Target("table1", "Fake Table 1: paper / ours", runs=("configs/fakepaper/table1.yaml",), steps=(Compare("1"),)),
))
'''


def scenario() -> dict:
    """The quick start cut to two algorithms, one seed, two rounds (one at tiny), in the paper's table."""
    raw = yaml.safe_load((ROOT / "configs" / "quickstart.yaml").read_text())
    raw.update(
        name="fakepaper_table1",
        rounds=2,
        seeds=[0],
        eval={"every": 1},
        scales={"tiny": {"rounds": 1}},
        algorithms=[{"name": "fedavg"}, {"name": "fedprox", "mu": 0.1}],
        paper={"name": "fakepaper", "table": "1", "column": "digits"},
    )
    return raw


def write_paper(where: Path) -> list[Path]:
    """The files of a new paper (its room and its configs), written under ``where``; returns them."""
    files = {
        "rooms/fakepaper/reference.yaml": yaml.safe_dump(REFERENCE, sort_keys=False),
        "rooms/fakepaper/room.py": ROOM,
        "configs/fakepaper/table1.yaml": yaml.safe_dump(scenario(), sort_keys=False),
        "configs/fakepaper/README.md": "# Fake paper\n\nEvery choice the paper leaves open.\n",
    }
    for name, text in files.items():
        (where / name).parent.mkdir(parents=True, exist_ok=True)
        (where / name).write_text(text)
    return [where / name for name in files]


@pytest.fixture
def fake_paper(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The fake paper's folder, its rooms folder on FEDBENCH_ROOMS, run from there; afterwards the room's
    modules and search path are gone again."""
    write_paper(tmp_path)
    monkeypatch.setenv(rooms.ENV, str(tmp_path / "rooms"))
    monkeypatch.chdir(tmp_path)
    from fedbench import papers

    path = list(papers.__path__)
    yield tmp_path
    papers.__path__[:] = path
    for name in [m for m in sys.modules if m.startswith("fedbench.papers.fakepaper")]:
        del sys.modules[name]


def test_a_new_paper_is_four_files_and_reproduces(fake_paper: Path) -> None:
    assert sorted(str(p.relative_to(fake_paper)) for p in fake_paper.rglob("*") if p.is_file()) == [
        "configs/fakepaper/README.md",
        "configs/fakepaper/table1.yaml",
        "rooms/fakepaper/reference.yaml",
        "rooms/fakepaper/room.py",
    ]
    assert "fakepaper" in rooms.paper_names()
    result = CliRunner().invoke(
        app,
        [
            "reproduce",
            "fakepaper",
            "table1",
            "--scale",
            "tiny",
            "--out",
            "out",
            "--jobs",
            "1",
            "--tables-dir",
            "tables",
            "--figures-dir",
            "figures",
        ],
    )
    assert result.exit_code == 0, result.output
    table = (fake_paper / "tables" / "fakepaper_table1_tiny.md").read_text()
    assert "FedAvg" in table and "FedProx" in table and "90.0" in table
    assert mismatches((ROOT / "docs" / "papers.md").read_text()) == []  # an outside room needs no docs row
    again = CliRunner().invoke(app, ["reproduce", "fakepaper", "--dry-run", "--scale", "tiny", "--out", "out"])
    assert again.output.startswith("fakepaper table1: 2 run(s), 0 to run"), again.output


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_reaches_a_new_paper_without_a_new_make_file(tmp_path: Path) -> None:
    write_paper(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES")}

    def make_n(target: str, **extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["make", "--no-print-directory", "-n", target, "SCALE=tiny"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            env={**env, **extra},
            check=False,
        )

    assert make_n("reproduce-fakepaper-table1").returncode != 0  # no such room without FEDBENCH_ROOMS
    found = make_n("reproduce-fakepaper-table1", FEDBENCH_ROOMS=str(tmp_path / "rooms"))
    assert found.returncode == 0, found.stderr
    assert [x.rstrip() for x in found.stdout.splitlines() if " reproduce " in x] == [
        ".venv/bin/fedbench reproduce fakepaper table1 --scale tiny --out results/tiny"
    ]
    every = make_n("reproduce-all", FEDBENCH_ROOMS=str(tmp_path / "rooms"))
    assert ".venv/bin/fedbench reproduce fakepaper --scale tiny" in every.stdout
