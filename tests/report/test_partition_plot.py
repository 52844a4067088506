"""fedbench partitions / the Partitions step (GradMA's Fig. 8): the partition drawn is the one the runs use, for
every partition kind; a continual scenario and a missing dataset end in one line (exit 2); the files are
byte-reproducible."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from fedbench.cli import app
from fedbench.data import load_dataset
from fedbench.engine.setup import partition_clients
from fedbench.report.partition_plot import panel, write_partitions
from fedbench.scenario import load_scenario
from tests.factories import tiny_scenario

ROOT = Path(__file__).resolve().parents[2]


def _file(tmp_path: Path, name: str, **changes) -> Path:
    raw = tiny_scenario()
    raw.update(name=name, **changes)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


KINDS = [
    ("iid", {"partition": {"kind": "iid"}}),
    ("dirichlet", {"partition": {"kind": "dirichlet", "omega": 0.1}}),
    ("balanced", {"partition": {"kind": "dirichlet_balanced", "omega": 0.5}}),
    ("shards", {"partition": {"kind": "classes_per_client", "k": 2}}),
    (
        "natural",
        {
            "dataset": {"name": "synthetic", "num_users": 6},
            "model": {"name": "logreg"},
            "clients": {"num": 6, "per_round": 3},
            "partition": {"kind": "natural"},
        },
    ),
]


@pytest.mark.parametrize("name, changes", KINDS, ids=[k for k, _ in KINDS])
def test_the_panel_is_the_partition_the_runs_use_for_every_kind(tmp_path: Path, name: str, changes: dict):
    spec = load_scenario(_file(tmp_path, name, **changes)).runs[0]
    got = panel(spec, 3, tmp_path)
    data = load_dataset(spec.dataset["name"], spec.components.dataset, tmp_path, False)
    parts = partition_clients(spec, data, 3)
    labels = data.train.y.numpy()
    expected = np.stack([np.bincount(labels[p.numpy()], minlength=data.num_classes) for p in parts])
    np.testing.assert_array_equal(got.hist, expected)
    assert got.hist.shape == (spec.clients.num, data.num_classes)
    assert (
        got.hist.sum() == sum(len(p) for p in parts) == (len(labels) if name != "balanced" else 8 * (len(labels) // 8))
    )
    if name == "iid":
        assert got.skew < 0.35  # a few samples per client: IID still has sampling noise
    assert name in got.title


def test_heterogeneity_shows_in_the_skew(tmp_path: Path):
    skews = [
        panel(
            load_scenario(_file(tmp_path, f"w{w}", partition={"kind": "dirichlet", "omega": w})).runs[0], 0, tmp_path
        ).skew
        for w in (100.0, 1.0, 0.01)
    ]
    assert skews[0] < skews[1] < skews[2]


def test_the_command_writes_one_figure_byte_reproducible(tmp_path: Path):
    files = [str(_file(tmp_path, n, **c)) for n, c in KINDS[:3]]
    args = ["partitions", *files, "--figures-dir", str(tmp_path / "a"), "--name", "kinds"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    again = write_partitions([load_scenario(f).runs[0] for f in files], tmp_path / "b", "kinds", data_dir=Path("data"))
    assert (tmp_path / "a" / "kinds_partitions.png").read_bytes() == again.read_bytes()
    assert (tmp_path / "a" / "kinds_partitions.pdf").read_bytes() == again.with_suffix(".pdf").read_bytes()


def test_a_continual_scenario_or_missing_data_is_one_line_and_nothing_written(tmp_path: Path):
    continual = ROOT / "configs" / "cflag" / "ti_cifar10_noniid.yaml"
    result = CliRunner().invoke(app, ["partitions", str(continual), "--scale", "tiny", "--figures-dir", str(tmp_path)])
    assert result.exit_code == 2 and "is continual: each task is partitioned on its own" in result.output
    mnist = ROOT / "configs" / "gradma" / "mnist_s10_w1.0.yaml"
    result = CliRunner().invoke(
        app, ["partitions", str(mnist), "--data-dir", str(tmp_path / "none"), "--figures-dir", str(tmp_path)]
    )
    assert result.exit_code == 2 and result.output.startswith("dataset mnist: not in")
    assert list(tmp_path.iterdir()) == []


def test_gradma_fig8_is_a_target_without_runs(tmp_path: Path):
    from fedbench.papers.gradma.room import COLUMNS, ROOM
    from fedbench.papers.targets import Context

    target = ROOM.target("fig8")
    assert target.runs == ()
    [step] = target.steps
    assert len(step.files) == len({(c.rsplit("_s", 1)[0], c.rsplit("_w", 1)[1]) for c in COLUMNS})  # every (dataset, ω)
    ctx = Context("gradma", "tiny", tmp_path, tmp_path, tmp_path / "fig", None)  # type: ignore[arg-type]
    assert step.report_files(ctx) == [tmp_path / "fig" / "gradma_fig8_tiny_partitions.png"]
    assert step.describe(ctx).startswith("partitions configs/gradma/mnist_s10_w1.0.yaml")
