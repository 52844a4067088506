"""Run a whole scenario: every (algorithm, seed) through the engine, with a live progress bar."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from fedbench.engine.runner import RunOutcome, execute_run
from fedbench.engine.setup import DataCache, resolve_device
from fedbench.engine.threads import DEFAULT_THREADS
from fedbench.scenario import Scenario, scenario_hash
from fedbench.store import ResultsStore


class RunInterrupted(Exception):
    """Ctrl-C during a run: which run, in which round (its rows and last checkpoint stay for resume)."""

    def __init__(self, run: str, round_: int):
        self.run, self.round = run, round_
        super().__init__(f"interrupted {run} in round {round_}; run the same command to resume it from its last checkpoint")


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
    specs = list(scenario.runs)
    if only:
        specs = [s for s in specs if s.label in only or s.algorithm["name"] in only]
        if not specs:
            raise ValueError(f"--only {only} matches no algorithm label or name of {scenario.name}")
    store = ResultsStore(out)
    cache = DataCache(data_dir, download, resolve_device(device))
    shash = scenario_hash(scenario)
    outcomes = []
    columns = [
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("acc {task.fields[acc]}"), TimeElapsedColumn(),
    ]
    with Progress(*columns, console=console, transient=False, disable=quiet) as progress:
        for spec in specs:
            for seed in scenario.seeds:
                task = progress.add_task(f"{spec.label:<12} seed {seed}", total=spec.rounds, acc="—")

                done = [0]

                def on_round(t: int, metrics: dict, task=task, done=done) -> None:
                    done[0] = t
                    acc = metrics.get("test_acc")
                    fields = {"acc": f"{100 * acc:.2f}%"} if acc is not None else {}
                    progress.update(task, completed=t, **fields)

                try:
                    outcome = execute_run(spec, seed, store, cache, shash, on_round, executor, client_state, threads)
                except KeyboardInterrupt:
                    raise RunInterrupted(f"{scenario.name} / {spec.label} seed {seed}", done[0] + 1) from None
                if outcome.status == "skipped":
                    progress.update(task, completed=spec.rounds, acc="(done before)")
                elif outcome.status != "finished":
                    progress.update(task, acc=f"[red]{outcome.status}[/red]")
                    if outcome.error:
                        console.print(f"[red]{spec.label} seed {seed} {outcome.status}: {outcome.error}[/red]")
                if quiet and outcome.status != "skipped":
                    console.print(f"{scenario.name}: {spec.label} seed {seed} {outcome.status}")
                outcomes.append(outcome)
    console.print(f"device: {cache.device}; results in {out}/")
    return outcomes
