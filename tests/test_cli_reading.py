"""Read-only commands find the store and never create one; help text shows flags as flags (issue 16 items 1–2)."""

import shutil
from pathlib import Path

import yaml
from typer.testing import CliRunner

from fedbench.cli import app
from tests.factories import tiny_scenario

runner = CliRunner()


def files_under(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*")}


def test_read_only_commands_leave_no_files_where_there_is_no_store(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for args in (
        ["table"],
        ["plot"],
        ["continual"],
        ["compare", "--paper", "fedmim", "--table", "I"],
        ["claims", "--paper", "fedmim"],
        ["table", "--out", "elsewhere"],
    ):
        result = runner.invoke(app, args, terminal_width=300)
        assert result.exit_code == 2 and "Traceback" not in result.output, (args, result.output)
        assert "no results store" in result.output, (args, result.output)
        assert files_under(tmp_path) == set(), (args, files_under(tmp_path))


def test_without_out_the_single_store_under_results_is_found(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("s.yaml").write_text(yaml.safe_dump(tiny_scenario({"rounds": 1}, name="mine")))
    assert runner.invoke(app, ["run", "s.yaml", "--out", "results/mine", "--quiet"]).exit_code == 0
    result = runner.invoke(app, ["table", "--tables-dir", "t", "--no-show"], terminal_width=300)
    assert result.exit_code == 0 and "store: results/mine/" in result.output and Path("t/mine.md").exists()
    assert not Path("results/fedbench.sqlite").exists()
    shutil.copytree("results/mine", "results/other")
    several = runner.invoke(app, ["table", "--no-show"], terminal_width=300)
    assert several.exit_code == 2 and "several under it" in several.output and "results/mine/ (mine)" in several.output
    missing = runner.invoke(app, ["table", "--scenario", "nope"], terminal_width=300)
    assert missing.exit_code == 2 and "with scenario 'nope'" in missing.output


def test_flags_show_no_value_type_and_usage_names_arguments_in_capitals():
    for command, usage in (
        ("run", "SCENARIO"),
        ("sweep", "FILES..."),
        ("reproduce", "[PAPER] [TARGET...]"),
        ("list", "[WHAT]"),
    ):
        text = runner.invoke(app, [command, "--help"], terminal_width=200).output
        assert (
            f"{command} [OPTIONS] {usage}" in text
            and "<bool>" not in text
            and "{" not in text.split("Usage:")[1].splitlines()[0]
        )
    assert "compressors" in runner.invoke(app, ["list", "--help"], terminal_width=200).output
    assert "fedqvr" in runner.invoke(app, ["costs", "--help"], terminal_width=200).output


def test_output_that_is_not_a_terminal_gets_plain_lines_with_a_heartbeat(tmp_path, monkeypatch):
    import fedbench.runs

    monkeypatch.setattr(fedbench.runs, "HEARTBEAT_S", 0.0)  # a line after every round
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(tiny_scenario({"rounds": 3}, name="hb")))
    result = runner.invoke(app, ["run", str(path), "--out", str(tmp_path / "o")], terminal_width=80)
    lines = result.output.splitlines()
    assert result.exit_code == 0 and any(ln.startswith("hb: FedAvg seed 0 round 2/3, acc") for ln in lines)
    assert "hb: FedAvg seed 0 finished" in lines and any(ln.startswith("device: cpu; results in /") for ln in lines)
    assert not any("━" in ln for ln in lines)  # no progress bars
    table = [ln for ln in lines if ln.startswith("| FedAvg")]
    assert table and all("…" not in ln for ln in lines)  # the summary is a Markdown table, never cut at 80 columns
