"""The run options (issue 25 item 3): one model with its checks, declared once on the command line and
shared by run, validate --estimate, tune, sweep and reproduce, with one word per meaning."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer.main

from fedbench.cli import app
from fedbench.options import RunOptions

SHARED = ["--device", "--data-dir", "--download", "--executor", "--chunk", "--compile", "--client-state", "--threads"]


def test_defaults_are_the_commands_defaults() -> None:
    assert RunOptions() == RunOptions("auto", Path("data"), False, "auto", None, "auto", "device", 1)
    assert RunOptions(data_dir="d").data_dir == Path("d")  # a str folder becomes a Path
    with pytest.raises(AttributeError):
        RunOptions().device = "cpu"  # frozen: passed down as one value


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"executor": "fast"}, "--executor: expected one of auto, sequential, batched, got 'fast'"),
        ({"executor": "local"}, "--executor local: process placement is --backend local (sweep, tune, reproduce)"),
        ({"compile_step": "yes"}, "--compile: expected one of auto, on, off, graphs, got 'yes'"),
        ({"client_state": "disk"}, "--client-state: expected one of device, host, got 'disk'"),
        ({"device": "gpu"}, "--device gpu: expected auto, cpu, cuda, cuda:N or mps"),
        ({"chunk": 0}, "--chunk: expected a positive integer, got 0"),
        ({"threads": None}, "--threads: expected a positive integer, got None"),
        ({"threads": True}, "--threads: expected a positive integer, got True"),
    ],
)
def test_a_bad_value_is_refused_in_one_line_naming_the_option(changes: dict, message: str) -> None:
    with pytest.raises(ValueError) as err:
        RunOptions(**changes)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def _options(command: str) -> dict[str, object]:
    click = typer.main.get_command(app)
    return {opt: p for p in click.commands[command].params for opt in p.opts}


@pytest.mark.parametrize("command", ["run", "tune", "sweep", "reproduce", "validate"])
def test_every_command_that_runs_or_probes_takes_the_same_declared_options(command: str) -> None:
    params = _options(command)
    expected = [o for o in SHARED if not (command == "validate" and o == "--download")]
    assert all(o in params for o in expected), [o for o in expected if o not in params]
    reference = _options("run")
    for o in expected:  # one declaration: the same default and help everywhere
        assert (params[o].default, params[o].help) == (reference[o].default, reference[o].help), (command, o)
    assert params["--client-executor"].hidden
    assert ("--backend" in params) == (command in ("tune", "sweep", "reproduce"))
