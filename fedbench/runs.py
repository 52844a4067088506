"""Run a whole scenario: every (algorithm, seed) through the engine, with a live progress bar."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from fedbench.engine.runner import RunOutcome, execute_run
from fedbench.engine.setup import DataCache, resolve_device
from fedbench.engine.threads import DEFAULT_THREADS
from fedbench.scenario import RunSpec, Scenario, scenario_hash
from fedbench.store import ResultsStore


class RunInterrupted(Exception):
    """Ctrl-C during a run: which run, in which round (its rows and last checkpoint stay for resume)."""

    def __init__(self, run: str, round_: int):
        self.run, self.round = run, round_
        super().__init__(f"interrupted {run} in round {round_}; run the same command to resume it from its last checkpoint")


@dataclass
class RunSettings:
    """How :func:`run_scenario` executes each run (the ``fedbench run`` options)."""

    executor: str = "auto"
    client_state: str = "device"
    threads: int = DEFAULT_THREADS
    quiet: bool = False


def run_scenario(
    scenario: Scenario,
    out: Path,
    device: str = "auto",
    data_dir: Path = Path("data"),
    download: bool = False,
    seeds: list[int] | None = None,
    only: list[str] | None = None,
    console: Console | None = None,
    executor: str = "auto",
    quiet: bool = False,
    client_state: str = "device",
    threads: int = DEFAULT_THREADS,
) -> list[RunOutcome]:
    """Execute the scenario's runs in order (algorithm-major), recording everything in ``out``.
    ``quiet`` prints one line per finished run instead of live progress bars (for parallel jobs)."""
    console = console or Console()
    if seeds is not None:
        scenario = scenario.model_copy(update={"seeds": seeds})
    specs = [s for s in scenario.runs if not only or s.label in only or s.algorithm["name"] in only]
    if not specs:
        raise ValueError(f"--only {only} matches no algorithm label or name of {scenario.name}")
    store, cache = ResultsStore(out), DataCache(data_dir, download, resolve_device(device))
    settings, shash = RunSettings(executor, client_state, threads, quiet), scenario_hash(scenario)
    columns = [
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("acc {task.fields[acc]}"), TimeElapsedColumn(),
    ]
    with Progress(*columns, console=console, transient=False, disable=quiet) as progress:
        outcomes = [
            _one_run(scenario.name, spec, seed, (store, cache, shash), settings, progress, console)
            for spec in specs for seed in scenario.seeds
        ]
    console.print(f"device: {cache.device}; results in {out}/")
    return outcomes


def _one_run(
    name: str, spec: RunSpec, seed: int, where: tuple[ResultsStore, DataCache, str], settings: RunSettings,
    progress: Progress, console: Console,
) -> RunOutcome:
    """Execute (or skip) one run with its progress bar; Ctrl-C becomes :class:`RunInterrupted`."""
    store, cache, shash = where
    task = progress.add_task(f"{spec.label:<12} seed {seed}", total=spec.rounds, acc="—")
    done = [0]

    def on_round(t: int, metrics: dict) -> None:
        done[0] = t
        acc = metrics.get("test_acc")
        progress.update(task, completed=t, **({"acc": f"{100 * acc:.2f}%"} if acc is not None else {}))

    try:
        outcome = execute_run(
            spec, seed, store, cache, shash, on_round, settings.executor, settings.client_state, settings.threads
        )
    except KeyboardInterrupt:
        raise RunInterrupted(f"{name} / {spec.label} seed {seed}", done[0] + 1) from None
    if outcome.status == "skipped":
        progress.update(task, completed=spec.rounds, acc="(done before)")
    elif outcome.status == "busy":
        progress.update(task, acc=f"(running elsewhere: {outcome.error})")
    elif outcome.status != "finished":
        progress.update(task, acc=f"[red]{outcome.status}[/red]")
        if outcome.error:
            console.print(f"[red]{spec.label} seed {seed} {outcome.status}: {outcome.error}[/red]")
    if settings.quiet and outcome.status != "skipped":
        console.print(f"{name}: {spec.label} seed {seed} {outcome.status}" + (f" ({outcome.error})" if outcome.status == "busy" else ""))
    return outcome
