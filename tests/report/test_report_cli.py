"""``fedbench compare``, ``claims`` and ``plot --metric`` on the synthetic store of test_paper.py."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from fedbench.cli import app

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args), terminal_width=250)


def test_compare(paper_store, tmp_path: Path) -> None:
    out, tables = str(paper_store.out_dir), tmp_path / "tables"
    result = invoke(
        "compare", "--paper", "fedmim", "--table", "III", "--out", out, "--tables-dir", str(tables), "--scale", "tiny"
    )
    assert result.exit_code == 0, result.output
    assert "FedMIM Table III, tiny scale" in result.output and "81.61 / 71.00 ± 1.41" in result.output
    assert sorted(p.name for p in tables.iterdir()) == [f"fedmim_tableIII_tiny.{e}" for e in ("csv", "md", "tex")]

    result = invoke(
        "compare", "--paper", "fedmim", "--table", "III", "--out", out, "--tables-dir", str(tmp_path / "t2")
    )
    assert result.exit_code == 0 and "81.61 / 80.00 ± 0.00" in result.output  # the paper-scale run too
    assert len(list((tmp_path / "t2").iterdir())) == 6

    result = invoke("compare", "--paper", "fedmim", "--table", "II", "--out", out, "--tables-dir", str(tmp_path / "t3"))
    assert result.exit_code == 0 and "no runs of this table in the store: nothing written" in result.output

    result = invoke("compare", "--paper", "fedmim", "--table", "IV", "--out", out)
    assert result.exit_code == 2 and "tables: I, II, III" in result.output
    assert invoke("compare", "--paper", "nope", "--table", "I", "--out", out).exit_code == 2


def test_claims(paper_store, tmp_path: Path) -> None:
    out, tables = str(paper_store.out_dir), tmp_path / "tables"
    result = invoke("claims", "--paper", "fedmim", "--out", out, "--tables-dir", str(tables), "--scale", "tiny")
    assert result.exit_code == 0, result.output
    assert "C4a" in result.output and "fails (5/6 hold; 6 of 27 checked)" in result.output
    assert "holds (42/42 hold)" in result.output  # C5 on the paper's own numbers
    assert (tables / "fedmim_claims_tiny.md").read_text().startswith("# FedMIM claims, tiny scale")

    result = invoke("claims", "--paper", "fedmim", "--out", out, "--tables-dir", str(tables))
    assert result.exit_code == 2 and "choose one (--scale)" in result.output


def test_plot_metric(paper_store, tmp_path: Path) -> None:
    out, figs = str(paper_store.out_dir), tmp_path / "figs"
    name = "fedmim_table1_cifar10_dir0.3.tiny"
    result = invoke(
        "plot", "--out", out, "--scenario", name, "--figures-dir", str(figs), "--x", "round", "--metric", "consistency"
    )
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in figs.iterdir()) == [
        f"{name}_consistency_vs_rounds.pdf",
        f"{name}_consistency_vs_rounds.png",
    ]
    result = invoke("plot", "--out", out, "--metric", "accuracy")
    assert result.exit_code == 2 and "--metric must be one of test_acc, consistency" in result.output
    assert "--metric" in invoke("plot", "--help").output
