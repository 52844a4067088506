"""The committed outputs are what today's code produces.

For one committed table per paper (and the quick start and the availability example) the scenario runs into a fresh store and the
report command writes the table again; the new files must equal the committed ones byte for byte (a case
with ``rows`` runs only the files behind those rows, or with ``only`` only those algorithms of them, and
compares those rows' lines of its CSV outputs, in ``columns`` only where it names some).
A change that moves a number therefore fails here until its outputs are regenerated in the same
submission (`make check-outputs` regenerates and diffs every committed tiny table).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fedbench.cli import app

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Case:
    """Scenario files to run (at ``scale``), the report command that writes ``outputs`` into tables/."""

    name: str
    files: tuple[str, ...]
    report: tuple[str, ...]
    outputs: tuple[str, ...]
    scale: str | None = "tiny"
    run_options: tuple[str, ...] = ()
    rows: tuple[str, ...] = ()  # only these rows (the CSV's ``row`` field) are compared
    columns: tuple[str, ...] = ()  # ... and of them only these columns (the ``column`` field), where given
    only: tuple[str, ...] = ()  # run only these algorithm labels of the files (``fedbench run --only``)
    marks: tuple[pytest.MarkDecorator, ...] = ()


def csv_rows(text: str, rows: tuple[str, ...], columns: tuple[str, ...] = ()) -> list[str]:
    """The lines of a table's CSV whose ``row`` field (the second) is one of ``rows`` and, where ``columns``
    names some, whose ``column`` field (the third) is one of them."""
    fields = [(line, line.split(",")) for line in text.splitlines()]
    return [line for line, f in fields if f[1] in rows and (not columns or f[2] in columns)]


CASES = [
    Case(
        "quickstart",
        ("configs/quickstart.yaml",),
        ("table", "--scenario", "quickstart", "--no-show"),
        ("quickstart.md", "quickstart.csv", "quickstart.tex"),
        scale=None,
    ),
    Case(
        "fedcams",
        (
            "configs/fedcams/fig2_6_participation/resnet18_s5.yaml",
            "configs/fedcams/fig2_6_participation/convmixer_s5.yaml",
        ),
        ("compare", "--paper", "fedcams", "--table", "fig2_6", "--scale", "tiny"),
        ("fedcams_tablefig2_6_tiny.csv",),
        rows=("FedAMS S=5", "FedCAMS-sign S=5"),
    ),  # the S = 5 rows of Figs. 2/6 (untuned, 12 runs); the tuned figure tables need their trials
    Case(
        "fedqvr",
        ("configs/fedqvr/fig4_m5_cifar10.yaml",),
        ("table", "--scenario", "fedqvr_fig4_m5_cifar10.tiny", "--no-show"),
        ("fedqvr_fig4_m5_cifar10.tiny.md", "fedqvr_fig4_m5_cifar10.tiny.csv"),
    ),  # the cheapest FedQVR table: 2 runs of FedQVR with m = 5
    Case(
        "cflag",
        ("configs/cflag/ti_cifar10_noniid.yaml",),
        ("continual", "--scenario", "cflag_ti_cifar10_noniid.tiny"),
        ("cflag_ti_cifar10_noniid.tiny_continual.md", "cflag_ti_cifar10_noniid.tiny_continual.csv"),
    ),
    Case(
        "cflag-ci",
        ("configs/cflag/ci_cifar10_iid.yaml",),
        ("continual", "--scenario", "cflag_ci_cifar10_iid.tiny"),
        ("cflag_ci_cifar10_iid.tiny_continual.csv",),
        rows=("LwF-FL", "iCaRL-FL"),
        only=("LwF-FL", "iCaRL-FL"),
    ),  # the class-incremental table's own-loss rows (old model, old heads or classes, herding): 10 s
    Case(
        "gradma",
        ("configs/gradma/fig6_memory_cifar10_w1.0.yaml",),
        ("table", "--scenario", "gradma_fig6_memory_cifar10_w1.0.tiny", "--no-show"),
        ("gradma_fig6_memory_cifar10_w1.0.tiny.md", "gradma_fig6_memory_cifar10_w1.0.tiny.csv"),
        run_options=("--executor", "batched"),
        # the CIFAR-10 stand-in (MNIST-1D, BN) leaves 28 server QP blocks unprojected; the table notes each count
        marks=(pytest.mark.allow_qp_fallback,),
    ),  # as gradma's room runs it at the tiny scale; MNIST-1D (the MNIST ablations' mnist5k costs 3× as much)
    Case(
        "gradma-table1",
        ("configs/gradma/mnist_s10_w0.01.yaml",),
        ("compare", "--paper", "gradma", "--table", "1", "--scale", "tiny"),
        ("gradma_table1_tiny.csv",),
        run_options=("--executor", "batched"),
        rows=("FedAvg", "MOON"),
        columns=("MNIST S=10 ω=0.01",),
        only=("FedAvg", "MOON"),
    ),  # Table 1's cells of two rows whose tuning chose the written setting (the run's own), trained on the batched
    # executor as the room trains the tiny scale: MOON's own loss on the rows (its cells once stayed behind a change)
    Case(
        "fedmim",
        ("configs/fedmim/table2_cifar10_e1.yaml",),
        ("compare", "--paper", "fedmim", "--table", "II", "--scale", "tiny"),
        ("fedmim_tableII_tiny.csv",),
        rows=("FedAvg", "FedMIM"),
        columns=("CIFAR-10 E = 1",),
        only=("FedAvg", "FedMIM"),
    ),  # Table II's cheapest column (K = 10 local steps; 6 runs); every other tiny column trains K = 50 or 100
    Case(
        "availability",
        ("configs/examples/availability.yaml",),
        ("table", "--scenario", "availability_bernoulli", "--no-show"),
        ("availability_bernoulli.md", "availability_bernoulli.csv", "availability_bernoulli.tex"),
        scale=None,
    ),  # make examples: MIFA, GradMA-S and FedAvg under Bernoulli availability
]


def invoke(*args: str) -> None:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, (
        f"fedbench {' '.join(args)} exited {result.exit_code}:\n{result.output}\n{result.exception!r}"
    )


@pytest.mark.outputs
@pytest.mark.parametrize("case", [pytest.param(c, marks=c.marks, id=c.name) for c in CASES])
def test_a_committed_table_regenerates_byte_identical(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(ROOT)  # scenario files name bases and data relative to the repository
    out, tables = tmp_path / "results", tmp_path / "tables"
    scale = ("--scale", case.scale) if case.scale else ()
    only = ("--only", ",".join(case.only)) if case.only else ()
    for f in case.files:
        invoke("run", f, *scale, "--out", str(out), "--quiet", *only, *case.run_options)
    figures = ("--figures-dir", str(tmp_path / "figures")) if case.report[0] == "continual" else ()
    invoke(*case.report, "--out", str(out), "--tables-dir", str(tables), *figures)
    for name in case.outputs:
        fresh, committed = (tables / name).read_text(), (ROOT / "tables" / name).read_text()
        if case.rows:
            fresh, committed = csv_rows(fresh, case.rows, case.columns), csv_rows(committed, case.rows, case.columns)
            assert {line.split(",")[1] for line in committed} == set(case.rows), f"tables/{name}: rows missing"
        assert fresh == committed, (
            f"tables/{name} is not what today's code produces: regenerate it (make check-outputs)"
        )
