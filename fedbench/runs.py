"""Run a whole scenario: every (algorithm, seed) through the engine, with a live progress bar."""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from fedbench.engine.population import PopulationRun, execute_population, group_runs, groups_line, population_size
from fedbench.engine.runner import RunOutcome, execute_run
from fedbench.engine.setup import DataCache, check_device, resolve_device  # noqa: F401 (check_device: the CLI's)
from fedbench.options import RunOptions
from fedbench.scenario import RunSpec, Scenario, run_id_of, scenario_hash
from fedbench.signals import INTERRUPTED_EXIT, TERMINATED_EXIT, exit_code
from fedbench.store import DB_NAME, ResultsStore
from fedbench.trackers import RunLogger

# -- the run options' checks, shared by the command line and fedbench.api: ValueError with one line each --


def check_only(sc: Scenario, only: list[str] | None) -> None:
    """``--only`` must name at least one algorithm label or name of the scenario."""
    if only and not any(s.label in only or s.algorithm["name"] in only for s in sc.runs):
        labels = ", ".join(s.label for s in sc.runs)
        raise ValueError(
            f"--only {','.join(only)}: matches no algorithm label or name of {sc.name} (its labels: {labels})"
        )


def selected(sc: Scenario, only: list[str] | None) -> list[RunSpec]:
    """The scenario's entries that ``--only`` keeps (all without it), in order."""
    return [s for s in sc.runs if not only or s.label in only or s.algorithm["name"] in only]


def check_out(out: Path) -> None:
    """``--out`` is (or can become) a writable folder, and its store, if any, is writable. Checked by
    doing it, not by permission bits (``os.access`` says yes to root, even under /proc): the missing
    folders are created and a probe file written and removed, then those folders are removed again,
    so nothing is left behind either way."""
    existing = next(p for p in (out, *out.absolute().parents) if p.exists())
    if not existing.is_dir():
        where = "is a file" if existing == out else f"lies under {existing}, which is a file"
        raise ValueError(f"--out {out}: {where}, not a folder")
    missing = [p for p in (out.absolute(), *out.absolute().parents) if not p.exists()]
    created: list[Path] = []
    try:
        for folder in reversed(missing):
            folder.mkdir()
            created.append(folder)
        fd, probe = tempfile.mkstemp(dir=out, prefix=".fedbench-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ValueError(f"--out {out}: {existing} is not writable ({exc.strerror or exc})") from None
    finally:
        for folder in reversed(created):
            try:
                folder.rmdir()
            except OSError:  # another process put something there meanwhile: it is theirs
                pass
    db = out / DB_NAME
    if db.exists():
        try:
            with open(db, "r+b"):  # opened for writing, nothing written
                pass
        except OSError as exc:
            raise ValueError(f"--out {out}: its results store {db} is read-only ({exc.strerror or exc})") from None


HEARTBEAT_S = 60.0  # seconds between progress lines of a long run when the output is not a terminal


class RunInterrupted(Exception):
    """Ctrl-C or SIGTERM during a run: which run, in which round (its rows and last checkpoint stay for
    resume), and the exit code (:func:`fedbench.signals.exit_code`: 130 for Ctrl-C, 143 for SIGTERM)."""

    def __init__(self, run: str, round_: int, code: int = INTERRUPTED_EXIT):
        self.run, self.round, self.code = run, round_, code
        how = "terminated (SIGTERM)" if code == TERMINATED_EXIT else "interrupted"
        super().__init__(f"{how} {run} in round {round_}; run the same command to resume it from its last checkpoint")


@dataclass
class RunSettings:
    """How :func:`run_scenario` executes each run and shows its progress."""

    options: RunOptions = RunOptions()
    lines: bool = False  # plain lines (quiet, or stdout is not a terminal) instead of progress bars
    heartbeat_s: float = HEARTBEAT_S


def run_scenario(
    scenario: Scenario,
    out: Path,
    options: RunOptions = RunOptions(),
    seeds: list[int] | None = None,
    only: list[str] | None = None,
    console: Console | None = None,
    quiet: bool = False,
) -> list[RunOutcome]:
    """Execute the scenario's runs in order (algorithm-major), recording everything in ``out``, as
    ``options`` say (:class:`~fedbench.options.RunOptions`: device, data, client executor, ...).
    ``quiet`` (or an output that is not a terminal, e.g. a log file) prints one plain line per finished
    run, and one every :data:`HEARTBEAT_S` seconds while a run trains, instead of live progress bars.
    ``options.log``: each run is copied from the store to those trackers once it ends (:mod:`fedbench.trackers`)."""
    console = console or Console()
    if seeds is not None:
        scenario = scenario.model_copy(update={"seeds": seeds})
    check_only(scenario, only)
    specs = selected(scenario, only)
    store, cache = ResultsStore(out), DataCache(options.data_dir, options.download, resolve_device(options.device))
    store.ask([run_id_of(spec, seed) for spec in specs for seed in scenario.seeds])
    lines = quiet or not console.is_terminal
    settings = RunSettings(options, lines, HEARTBEAT_S)
    shash = scenario_hash(scenario)
    columns = [
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("acc {task.fields[acc]}"),
        TimeElapsedColumn(),
    ]
    pairs = [(spec, seed) for spec in specs for seed in scenario.seeds]
    size, why = population_size(options, cache.device)
    groups = group_runs([spec for spec, _ in pairs], size, [seed for _, seed in pairs])
    line = groups_line(groups, why)
    if line:
        console.print(f"{scenario.name}: {line}", soft_wrap=True, highlight=False)
    outcomes: list[RunOutcome | None] = [None] * len(pairs)
    log = RunLogger(out, options.log, console)
    with Progress(*columns, console=console, transient=False, disable=lines) as progress:
        for group in groups:
            members = [pairs[i] for i in group]
            if len(group) == 1:
                spec, seed = members[0]
                done = [_one_run(scenario.name, spec, seed, (store, cache, shash), settings, progress, console)]
            else:
                done = _population(scenario.name, members, (store, cache, shash), settings, progress, console)
            for i, outcome in zip(group, done):
                outcomes[i] = outcome
            log(o.run_id for o in done if o.status != "busy")  # another process trains a busy one
    console.print(f"device: {cache.device}; results in {out}/", soft_wrap=True)
    for text in log.lines():
        console.print(text, soft_wrap=True, highlight=False)
    return [o for o in outcomes if o is not None]


def _one_run(
    name: str,
    spec: RunSpec,
    seed: int,
    where: tuple[ResultsStore, DataCache, str],
    settings: RunSettings,
    progress: Progress,
    console: Console,
) -> RunOutcome:
    """Execute (or skip) one run with its progress bar; Ctrl-C becomes :class:`RunInterrupted`."""
    store, cache, shash = where
    task = progress.add_task(f"{spec.label:<12} seed {seed}", total=spec.rounds, acc="—")
    done, last_line = [0], [time.monotonic()]

    shown = ["—"]  # the last accuracy

    def on_round(t: int, metrics: dict) -> None:
        done[0] = t
        acc = metrics.get("test_acc")
        progress.update(task, completed=t, acc=_progress_text(metrics, shown))
        if settings.lines and time.monotonic() - last_line[0] >= settings.heartbeat_s:
            last_line[0] = time.monotonic()
            acc_text = "" if acc is None else f", acc {100 * acc:.2f}%"
            console.print(
                f"{name}: {spec.label} seed {seed} round {t}/{spec.rounds}{acc_text}{_epsilon_text(metrics)}",
                soft_wrap=True,
                highlight=False,
            )

    try:
        outcome = execute_run(spec, seed, store, cache, shash, on_round, settings.options)
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM as fedbench.signals.Terminated
        raise RunInterrupted(f"{name} / {spec.label} seed {seed}", done[0] + 1, exit_code(exc)) from None
    _report(name, spec, seed, outcome, settings, progress, task, console)
    return outcome


def _epsilon_text(metrics: dict) -> str:
    """``, ε 2.96`` for a round of a DP-FedAvg run (its ε so far; runner.SHOWN_LOGS), else nothing."""
    eps = metrics.get("epsilon")
    return "" if eps is None else f", ε {eps:.3g}"


def _progress_text(metrics: dict, shown: list[str]) -> str:
    """A progress bar's ``acc`` field after a round: the last accuracy (kept in ``shown``), and ε when logged."""
    acc = metrics.get("test_acc")
    if acc is not None:
        shown[0] = f"{100 * acc:.2f}%"
    return shown[0] + _epsilon_text(metrics)


def _population(
    name: str,
    members: list[tuple[RunSpec, int]],
    where: tuple[ResultsStore, DataCache, str],
    settings: RunSettings,
    progress: Progress,
    console: Console,
) -> list[RunOutcome]:
    """Execute (or skip) ``members`` as one population (:mod:`fedbench.engine.population`), a
    progress bar each; Ctrl-C becomes :class:`RunInterrupted` (every member keeps its rows and checkpoint)."""
    store, cache, shash = where
    tasks = [progress.add_task(f"{spec.label:<12} seed {seed}", total=spec.rounds, acc="—") for spec, seed in members]
    last = [0]
    last_line = [time.monotonic()]

    shown = [["—"] for _ in members]  # each member's last accuracy

    def on_round(i: int, t: int, metrics: dict) -> None:
        last[0] = max(last[0], t)
        progress.update(tasks[i], completed=t, acc=_progress_text(metrics, shown[i]))
        if settings.lines and time.monotonic() - last_line[0] >= settings.heartbeat_s:
            last_line[0] = time.monotonic()
            console.print(f"{name}: population of {len(members)} runs, round {t}", soft_wrap=True, highlight=False)

    runs = [PopulationRun(spec, seed, shash) for spec, seed in members]
    try:
        outcomes = execute_population(runs, store, cache, settings.options, on_round)
    except KeyboardInterrupt as exc:
        labels = ", ".join(f"{spec.label} seed {seed}" for spec, seed in members)
        raise RunInterrupted(f"{name} / population ({labels})", last[0] + 1, exit_code(exc)) from None
    for (spec, seed), task, outcome in zip(members, tasks, outcomes):
        _report(name, spec, seed, outcome, settings, progress, task, console)
    return outcomes


def _report(
    name: str,
    spec: RunSpec,
    seed: int,
    outcome: RunOutcome,
    settings: RunSettings,
    progress: Progress,
    task: Any,
    console: Console,
) -> None:
    """A finished run's progress bar and line."""
    if outcome.status == "skipped":
        progress.update(task, completed=spec.rounds, acc="(done before)")
    elif outcome.status == "busy":
        progress.update(task, acc=f"(running elsewhere: {outcome.error})")
    elif outcome.status != "finished":
        progress.update(task, acc=f"[red]{outcome.status}[/red]")
        if outcome.error:
            console.print(f"[red]{spec.label} seed {seed} {outcome.status}: {outcome.error}[/red]")
    if settings.lines:
        note = f" ({outcome.error})" if outcome.status == "busy" else ""
        status = "(done before)" if outcome.status == "skipped" else outcome.status
        console.print(f"{name}: {spec.label} seed {seed} {status}{note}", soft_wrap=True, highlight=False)
