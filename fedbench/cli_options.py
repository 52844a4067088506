"""The run options on the command line, each declared once (:data:`DECLARED`) and added to a command
by the :func:`run_options` decorator, which hands the command one checked
:class:`~fedbench.options.RunOptions` instead of eight loose values (issue 25 item 3).

    @app.command()
    @run_options()
    def run(scenario: Path = ..., *, options: RunOptions) -> None: ...

A value :class:`RunOptions` refuses (``--executor ray``, ``--chunk 0``) exits 2 with its one line
before the command body runs. ``--backend`` (process placement) is declared here too; old
spellings (``--client-executor``) exit 2 naming the new one.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape

from fedbench.engine.threads import DEFAULT_THREADS
from fedbench.options import RunOptions

PANEL = "Run options"
console = Console(stderr=True)  # errors go to stderr

DECLARED: dict[str, tuple[Any, Any]] = {  # RunOptions field → (type, its one Typer declaration)
    "device": (
        str,
        typer.Option(
            "auto", "--device", rich_help_panel=PANEL, help="auto (CUDA if present), cpu, cuda, cuda:N or mps"
        ),
    ),
    "data_dir": (
        Path,
        typer.Option(
            Path("data"),
            "--data-dir",
            rich_help_panel=PANEL,
            help="where real datasets are, or are downloaded to (docs/datasets.md)",
        ),
    ),
    "download": (
        bool,
        typer.Option(
            False,
            "--download",
            rich_help_panel=PANEL,
            help="fetch a missing torchvision dataset into --data-dir (needs a network)",
        ),
    ),
    "executor": (
        str,
        typer.Option(
            "auto",
            "--executor",
            rich_help_panel=PANEL,
            help=(
                "client training: batched (the S clients in vmapped chunks), sequential (reference), or auto (batched on "
                "a GPU, chunks sized to its free memory; sequential on a CPU; reproduce: each target's own choice)"
            ),
        ),
    ),
    "chunk": (
        int | None,
        typer.Option(
            None,
            "--chunk",
            min=1,
            rich_help_panel=PANEL,
            help=(
                "batched: clients per vmapped chunk (default: sized to free GPU memory, 16 on a CPU); same numbers "
                "for every size"
            ),
        ),
    ),
    "compile_step": (
        str,
        typer.Option(
            "auto",
            "--compile",
            rich_help_panel=PANEL,
            help=(
                "batched: run the vmapped step through torch.compile (on; equal to float tolerance), eager (off), "
                "replayed from CUDA graphs (graphs: CUDA only, populations too), or auto: compiled where its measured "
                "saving repays compiling over the run (runs of ≥ 400 local steps; prices kept under OUT/compile-cache)"
            ),
        ),
    ),
    "client_state": (
        str,
        typer.Option(
            "device",
            "--client-state",
            rich_help_panel=PANEL,
            help=(
                "device | host: keep per-client [N, P] tables (SCAFFOLD's c_i, error feedback, GradMA's last "
                "models, ...) in pinned host memory; same numbers"
            ),
        ),
    ),
    "threads": (
        int,
        typer.Option(
            DEFAULT_THREADS,
            "--threads",
            min=1,
            rich_help_panel=PANEL,
            help=(
                "torch CPU threads per run; CPU numbers are identical only for the same count (the committed "
                "outputs use the default)"
            ),
        ),
    ),
    "population": (
        str,
        typer.Option(
            "auto",
            "--population",
            rich_help_panel=PANEL,
            help=(
                "train compatible runs (seeds, trials, server settings) together as one batched computation: N runs "
                "at most, off, or auto (on a GPU; one run at a time on a CPU, where it measured no faster); same "
                "numbers as each run on the batched executor"
            ),
        ),
    ),
    "log": (
        list[str] | None,
        typer.Option(
            None,
            "--log",
            rich_help_panel=PANEL,
            help=(
                "also copy each run, when it ends, from the store to a tracker: tensorboard[:DIR] (default "
                "<out>/tensorboard) or mlflow[:URI] (default sqlite <out>/mlflow.db); repeatable or comma-separated "
                "(docs/store-and-sweeps.md#trackers)"
            ),
        ),
    ),
}
RENAMED = {"client_executor": ("--client-executor", "--executor")}  # old spelling → the option it became
BACKEND = typer.Option(
    "local", "--backend", help="process placement: local (worker processes here) or ray (tasks on a Ray cluster)"
)


def fail(message: str) -> None:
    """One red line, exit 2."""
    console.print(f"[red]{escape(message)}[/red]", soft_wrap=True, highlight=False)  # `[mlflow]` printed as written
    raise typer.Exit(2)


def build(**values: Any) -> RunOptions:
    """The :class:`RunOptions` of the command line's values; a refused value exits 2 with one line."""
    try:
        return RunOptions(**values)
    except ValueError as exc:
        fail(str(exc))
        raise  # unreachable: fail exits


def run_options(leave_out: tuple[str, ...] = ()) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give the decorated command the run options (less ``leave_out``) as keyword-only command-line
    options, and call it with ``options=RunOptions(...)`` built from them."""
    names = [n for n in DECLARED if n not in leave_out]

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        sig = inspect.signature(command, eval_str=True)
        own = [p for p in sig.parameters.values() if p.name != "options"]
        keyword = inspect.Parameter.KEYWORD_ONLY
        added = [inspect.Parameter(n, keyword, default=DECLARED[n][1], annotation=DECLARED[n][0]) for n in names]
        added += [
            inspect.Parameter(n, keyword, default=typer.Option(None, old, hidden=True), annotation=str | None)
            for n, (old, _) in RENAMED.items()
        ]

        @functools.wraps(command)
        def wrapper(**kwargs: Any) -> Any:
            for name, (old, new) in RENAMED.items():
                if kwargs.pop(name, None) is not None:
                    fail(f"{old} is now {new} (the client executor: auto, sequential or batched)")
            options = build(**{n: kwargs.pop(n) for n in names})
            return command(**kwargs, options=options)

        params = [*own, *added]
        wrapper.__signature__ = sig.replace(parameters=params)  # what Typer reads
        wrapper.__annotations__ = {p.name: p.annotation for p in params}
        return wrapper

    return decorate
