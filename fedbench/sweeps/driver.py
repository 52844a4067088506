"""The sweep driver: skip finished runs, hand the rest to a backend (local or Ray), print progress and a summary."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

import torch
from rich.console import Console
from rich.markup import escape

from fedbench.engine.population import groups_line
from fedbench.engine.runner import RunOutcome
from fedbench.engine.setup import resolve_device
from fedbench.options import BACKENDS, RunOptions
from fedbench.store import DB_NAME, DONE, ResultsStore
from fedbench.sweeps.grid import SweepError, SweepPoint, SweepRun
from fedbench.sweeps.pool import default_jobs, run_local
from fedbench.sweeps.tuning import Choice, TuningPlan, final_runs, rung_batches, select
from fedbench.sweeps.worker import population_groups
from fedbench.trackers import RunLogger


@dataclass(frozen=True)
class SweepSummary:
    """How a sweep's runs ended (``skipped``: done before this sweep started)."""

    total: int
    skipped: int
    finished: int
    diverged: int
    failed: int

    def line(self) -> str:
        return (
            f"{self.total} run(s): {self.finished} finished, {self.skipped} skipped (done before), "
            f"{self.diverged} diverged, {self.failed} failed"
        )


def _check(
    backend: str, jobs: int | None, cpus_per_run: float, gpus_per_run: float, max_retries: int, options: RunOptions
) -> None:
    """The placement options (the run options are checked when built); one SweepError listing every problem."""
    problems, device = [], options.device
    if backend == "ray" and device.startswith("cuda") and gpus_per_run == 0:
        problems.append(f"--device {device} with --backend ray needs --gpus-per-run > 0 (tasks without GPUs see none)")
    if backend not in BACKENDS:
        problems.append(f"--backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if jobs is not None and jobs < 1:
        problems.append(f"--jobs must be ≥ 1, got {jobs}")
    if not cpus_per_run > 0:
        problems.append(f"--cpus-per-run must be > 0, got {cpus_per_run}")
    if gpus_per_run < 0 or (gpus_per_run > 0 and backend != "ray"):
        problems.append(
            f"--gpus-per-run must be ≥ 0 and is for --backend ray (local: one worker per GPU), got {gpus_per_run}"
        )
    if max_retries < 0:
        problems.append(f"--max-retries must be ≥ 0, got {max_retries}")
    if problems:
        raise SweepError("; ".join(problems))


def _progress(store: ResultsStore, total: int, console: Console, log: RunLogger):
    """A callback printing one line per run that ends: count, status, scenario, run, accuracy, and the
    run's own training time (the sum of its rounds' wall times, resumed parts included); then ``log``
    copies the run to the ``--log`` trackers (here, in the driver: never twice by two workers)."""
    count = [0]

    def on_done(run: SweepRun, outcome: RunOutcome) -> None:
        count[0] += 1
        rows = store.metrics([run.run_id])
        acc = rows["test_acc"].dropna()
        acc_text = f"acc {100 * acc.iloc[-1]:.2f}%" if len(acc) else "acc —"
        color = {"finished": "green", "diverged": "yellow"}.get(outcome.status, "red")
        line = f"\\[{count[0]}/{total}] [{color}]{outcome.status:<8}[/] {escape(run.describe())}  {acc_text}"
        console.print(f"{line}  ({rows['wall_s'].sum():.0f} s)", highlight=False, soft_wrap=True)
        if outcome.status == "failed" and outcome.error:
            console.print(f"    [red]{escape(outcome.error[:500])}[/]", highlight=False)
        if outcome.status != "busy":  # another process trains a busy run
            log([run.run_id])

    return on_done


def run_sweep(
    runs: list[SweepRun],
    out: Path,
    backend: str = "local",
    jobs: int | None = None,
    options: RunOptions = RunOptions(),
    cpus_per_run: float | None = None,
    gpus_per_run: float = 0.0,
    address: str | None = None,
    max_retries: int = 2,
    console: Console | None = None,
) -> SweepSummary:
    """Execute the runs not yet finished (or diverged) in ``out`` on the ``local`` or ``ray``
    backend, each as ``options`` say (:class:`~fedbench.options.RunOptions`) with ``options.threads``
    torch threads on ``cpus_per_run`` CPUs (default: as many as threads). ``jobs``: local worker
    processes (default :func:`~fedbench.sweeps.pool.default_jobs`) or the CPUs of a local Ray instance."""
    cpus_per_run = float(options.threads) if cpus_per_run is None else cpus_per_run
    _check(backend, jobs, cpus_per_run, gpus_per_run, max_retries, options)
    console = console or Console()
    store = ResultsStore(out)
    store.ask([r.run_id for r in runs])  # these specs are now the current ones of their labels
    todo = [r for r in runs if store.status(r.run_id) not in DONE]
    log = RunLogger(out, options.log, console)
    training = {r.run_id for r in todo}
    log(
        r.run_id for r in runs if r.run_id not in training
    )  # done before: copied too, unless a tracker has them already
    on_done = _progress(store, len(todo), console, log)
    line = populations_line(todo, options, backend, gpus_per_run)
    if line:
        console.print(line, soft_wrap=True, highlight=False)
    if not todo:
        outcomes = []
    elif backend == "local":
        outcomes = run_local(todo, out, options, jobs or default_jobs(options.device, cpus_per_run), on_done)
    else:
        from fedbench.sweeps.ray_executor import run_ray

        outcomes = run_ray(todo, out, options, on_done, address, jobs, cpus_per_run, gpus_per_run, max_retries)
    statuses = [o.status for o in outcomes]
    summary = SweepSummary(
        len(runs),
        len(runs) - len(todo),
        statuses.count("finished"),
        statuses.count("diverged"),
        statuses.count("failed"),
    )
    console.print(summary.line() + f"; results in {out}/")
    for text in log.lines():
        console.print(text, soft_wrap=True, highlight=False)
    return summary


def populations_line(runs: list[SweepRun], options: RunOptions, backend: str, gpus_per_run: float = 0.0) -> str:
    """One line saying how many populations ``runs`` train in, and why (:mod:`fedbench.engine.population`);
    empty when every run trains alone."""
    if backend == "local":
        device = resolve_device(options.device)
    else:
        from fedbench.sweeps.ray_executor import ray_device

        device = torch.device(ray_device(options, gpus_per_run))
    groups, why = population_groups(runs, options, device)
    return groups_line(groups, why)


def run_trials(
    tuning: TuningPlan, out: Path, backend: str, jobs: int | None, options: RunOptions, console: Console
) -> SweepSummary:
    """Every trial run of ``tuning``, rung by rung: the runs the store makes known
    (:meth:`~fedbench.sweeps.tuning.TuningPlan.trial_runs`) through :func:`run_sweep`, again while a rung
    done makes the next one known (successive halving); one summary of them all. A rung with a failed run
    makes nothing new known: :func:`~fedbench.sweeps.tuning.select` then names it."""
    parts = []
    for k, runs in enumerate(rung_batches(lambda: tuning.trial_runs(ResultsStore(out)))):
        if k:
            console.print(f"trials of {tuning.scenario.name}, the next rung (successive halving):")
        parts.append(run_sweep(runs, out, backend, jobs, options, console=console))
    return SweepSummary(*(sum(getattr(p, f.name) for p in parts) for f in fields(SweepSummary)))


def run_tuning(
    tuning: TuningPlan,
    out: Path,
    jobs: int | None = None,
    options: RunOptions = RunOptions(),
    console: Console | None = None,
    backend: str = "local",
) -> tuple[list[Choice], SweepSummary, SweepSummary]:
    """Run the trials not yet done, select each entry's setting from the store, then run the chosen
    settings on the scenario's seeds (docs/tuning.md), both with :func:`run_sweep` (``local`` or
    ``ray``). Returns the choices and both sweeps' summaries; raises
    :class:`~fedbench.sweeps.tuning.TuningError` when a trial failed (the next call retries it)."""
    console = console or Console()
    console.print(f"trials of {tuning.scenario.name}:")
    trials = run_trials(tuning, out, backend, jobs, options, console)
    choices = select(ResultsStore(out), tuning)
    console.print(f"final runs of {tuning.scenario.name} (chosen settings):")
    final = run_sweep(final_runs(tuning, choices), out, backend, jobs, options, console=console)
    return choices, trials, final


def plan_lines(points: list[SweepPoint], runs: list[SweepRun], out: Path) -> list[str]:
    """The expanded sweep (``--dry-run``): each scenario with its grid point, then its runs with
    their run ids and whether ``out`` already holds them finished."""
    db = Path(out) / DB_NAME
    status = ResultsStore(out, read_only=True).status if db.exists() else (lambda run_id: None)
    lines = [f"{len(points)} scenario(s), {len(runs)} run(s)"]
    for p in _first_by_name(points):
        point = ", ".join(f"{k}={v!r}" for k, v in p.overrides.items())
        lines.append(f"{p.scenario.name}" + (f"  ({point})" if point else "") + f"  from {p.source}")
        for run in runs:
            if run.spec.scenario == p.scenario.name:
                lines.append(
                    f"  {run.spec.label:<16} seed {run.seed:<3} {run.run_id}  {status(run.run_id) or 'to run'}"
                )
    return lines


def _first_by_name(points: list[SweepPoint]) -> list[SweepPoint]:
    """Each scenario once (a file listed twice expands to the same points)."""
    first: dict[str, SweepPoint] = {}
    for p in points:
        first.setdefault(p.scenario.name, p)
    return list(first.values())
