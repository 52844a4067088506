"""``fedbench reproduce``: a paper's targets, their missing runs through the sweep engine, then their
report steps (tables, claims, figures), exactly as the per-paper make targets did.

Targets run in the order asked, each after the targets it ``needs`` (each once). A target's runs go
through :func:`fedbench.sweeps.driver.run_sweep` (local process pool or Ray, finished runs skipped,
interrupted ones resumed, one torch thread per run); runs new to the store are registered first,
in the target's file order, so the store lists a scenario's runs in that order whichever worker
starts first (reports keep the order of :func:`fedbench.store.ResultsStore.runs`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from fedbench import estimate
from fedbench.estimate import Estimator
from fedbench.options import BACKENDS, RunOptions
from fedbench.papers import check_paper, paper_names, paper_part
from fedbench.papers.targets import SCALES, Context, PaperRoom, StepFailed, Target
from fedbench.scenario import RunSpec
from fedbench.store import DONE, ResultsStore, existing_store, read_statuses
from fedbench.sweeps import tuning
from fedbench.sweeps.driver import run_sweep
from fedbench.sweeps.grid import SweepPoint, SweepRun, expand, sweep_runs
from fedbench.sweeps.pool import default_jobs
from fedbench.sweeps.worker import record_of


@dataclass(frozen=True)
class Options:
    """Where and how ``fedbench reproduce`` runs and writes (its command-line options): the
    placement (``backend``, ``jobs``, ``address``), the folders, and ``run``, the shared
    :class:`~fedbench.options.RunOptions` every run and probe gets."""

    scale: str = "paper"
    out: Path | None = None  # default results/<scale>, as the Makefile's PAPER_OUT
    backend: str = "local"
    jobs: int | None = None  # local: default every CPU at tiny (one thread per run), one process otherwise
    address: str | None = None
    tables_dir: Path = Path("tables")
    figures_dir: Path = Path("figures")
    run: RunOptions = RunOptions()

    @property
    def out_dir(self) -> Path:
        return self.out if self.out is not None else Path("results") / self.scale

    def run_options(self, target: Target) -> RunOptions:
        """The run options of ``target``'s runs: ``--executor auto`` (the default) is the client
        executor the target's room names at this scale (GradMA at tiny: batched), else auto's rule."""
        if self.run.executor != "auto":
            return self.run
        return replace(self.run, executor=target.executor_at(self.scale))


def room(paper: str) -> PaperRoom:
    """The paper's room (``fedbench/papers/<paper>/room.py``)."""
    return paper_part(check_paper(paper), "room").ROOM


def check(paper: str, names: Iterable[str], opts: Options) -> list[Target]:
    """The targets to do, in order (needs first, each once); a ValueError names a bad paper, target,
    scale, backend or job count and the allowed values."""
    if opts.scale not in SCALES:
        raise ValueError(f"unknown scale {opts.scale!r}; known: {', '.join(SCALES)}")
    if opts.backend not in BACKENDS:
        raise ValueError(f"--backend: expected one of {', '.join(BACKENDS)}, got {opts.backend!r}")
    if opts.jobs is not None and opts.jobs < 1:
        raise ValueError(f"--jobs must be ≥ 1, got {opts.jobs}")
    r = room(paper)
    wanted = [r.target(n) for n in names] or list(r.targets)
    return list(_with_needs(r, wanted, set()))


def first_tables(opts: Options) -> list[tuple[str, list[Target]]]:
    """Each room's first table (``PaperRoom.first_table``) with its needs, paper by paper in name order
    (``fedbench reproduce --first-tables``, ``make reproduce-table1``)."""
    return [(paper, check(paper, [room(paper).first_table], opts)) for paper in paper_names()]


def _with_needs(r: PaperRoom, targets: list[Target], seen: set[str]) -> Iterator[Target]:
    for t in targets:
        if t.name not in seen:
            seen.add(t.name)
            yield from _with_needs(r, [r.target(n) for n in t.needs], seen)
            yield t


def target_points(target: Target, scale: str) -> list[SweepPoint]:
    """The target's scenarios at ``scale``, in file order."""
    return expand(list(target.runs), scale) if target.runs else []


def specs(targets: list[Target], opts: Options) -> list[RunSpec]:
    """The run specs of the targets' scenarios at ``opts.scale`` (checked before anything runs: their
    datasets are on disk and hold their clients)."""
    return [spec for t in targets for p in target_points(t, opts.scale) for spec in p.scenario.runs]


def _unique_runs(points: list[SweepPoint], listed: Callable[[SweepPoint], list[SweepRun]]) -> list[SweepRun]:
    """Each point's ``listed`` runs in file order, a run listed twice kept once."""
    runs: dict[str, SweepRun] = {}
    for p in points:
        for run in listed(p):
            runs.setdefault(run.run_id, run)
    return list(runs.values())


def known_runs(points: list[SweepPoint], store: ResultsStore | None = None, project: bool = False) -> list[SweepRun]:
    """The runs known before the final runs, in file order: an untuned scenario's runs, a tuned one's
    trial runs known from ``store`` (the first rung's without one; under successive halving each later
    rung's once the rung below is done; ``project``: stand-ins for those not known yet, for a cost
    estimate). A tuned scenario's final runs follow from its trials (:func:`final_runs_of`)."""

    def listed(p: SweepPoint) -> list[SweepRun]:
        if not p.scenario.tuned:
            return sweep_runs([p])
        plan = tuning.plan(p.scenario)
        return plan.projected_trial_runs(store) if project else plan.trial_runs(store)

    return _unique_runs(points, listed)


def final_runs_of(points: list[SweepPoint], store: ResultsStore) -> list[SweepRun]:
    """Every scenario's runs in file order, a tuned scenario's being its chosen settings' (raises
    :class:`~fedbench.sweeps.tuning.TuningError` while a trial is not done)."""

    def listed(p: SweepPoint) -> list[SweepRun]:
        if not p.scenario.tuned:
            return sweep_runs([p])
        plan = tuning.plan(p.scenario)
        return tuning.final_runs(plan, tuning.select(store, plan))

    return _unique_runs(points, listed)


def list_lines(opts: Options) -> list[str]:
    """Every paper's targets with their run counts and how many ``opts.out_dir`` holds done
    (read-only: an absent store counts none and is not created)."""
    lines = [f"targets at the {opts.scale} scale; done = finished or diverged in {opts.out_dir}/"]
    store = existing_store(opts.out_dir)
    for paper in paper_names():
        r = room(paper)
        lines.append(f"{paper}: {r.title}")
        for t in r.targets:
            points = target_points(t, opts.scale)
            runs = known_runs(points, store)
            status = read_statuses(opts.out_dir, [x.run_id for x in runs])
            done = sum(s in DONE for s in status.values())
            count = f"{len(runs)} runs, {done} done" if runs else "no runs"
            if any(p.scenario.tuned for p in points):
                count += " (trials; + the chosen settings' runs)"
            needs = f" (needs {', '.join(t.needs)})" if t.needs else ""
            lines.append(f"  {t.name:<20} {count:<22} {t.help}{needs}")
    return lines


def _context(paper: str, target: Target, opts: Options, console: Console) -> Context:
    return Context(
        paper,
        opts.scale,
        opts.out_dir,
        opts.tables_dir,
        opts.figures_dir,
        console,
        target.runs,
        room(paper).run_files,
        opts.run.data_dir,
    )


def plan_lines(paper: str, targets: list[Target], opts: Options) -> list[str]:
    """What :func:`reproduce` would run and write (``--dry-run``); reads the store, writes nothing."""
    lines = []
    store = existing_store(opts.out_dir)
    for t in targets:
        points = target_points(t, opts.scale)
        runs = known_runs(points, store)
        status = read_statuses(opts.out_dir, [x.run_id for x in runs])
        todo = [x for x in runs if status.get(x.run_id) not in DONE]
        lines.append(
            f"{paper} {t.name}: {len(runs)} run(s), {len(todo)} to run "
            f"(client executor {opts.run_options(t).executor}) into {opts.out_dir}/"
        )
        lines += [f"  run  {x.describe()}  {x.run_id}  {status.get(x.run_id, 'new')}" for x in todo]
        lines += _tuning_lines([p for p in points if p.scenario.tuned], opts)
        ctx = _context(paper, t, opts, Console())
        lines += [
            f"  then fedbench {s.describe(ctx)}  (tables: {opts.tables_dir}/, figures: {opts.figures_dir}/)"
            for s in t.steps
        ]
    return lines


def _tuning_lines(points: list[SweepPoint], opts: Options) -> list[str]:
    """The tuned scenarios' trial plans and, once their trials are done, the chosen settings' runs to do."""
    if not points:
        return []
    lines = [f"  {p.scenario.name}: {line}" for p in points for line in tuning.plan_lines(tuning.plan(p.scenario))[:1]]
    try:
        finals = final_runs_of(points, ResultsStore(opts.out_dir, read_only=True))
    except (tuning.TuningError, FileNotFoundError):
        return lines + ["  then the chosen settings' runs (known once the trials are done)"]
    status = read_statuses(opts.out_dir, [x.run_id for x in finals])
    todo = [x for x in finals if status.get(x.run_id) not in DONE]
    return (
        lines
        + [f"  then {len(finals)} run(s) of the chosen settings, {len(todo)} to run"]
        + [f"  run  {x.describe()}  {x.run_id}  {status.get(x.run_id, 'new')}" for x in todo]
    )


def default_jobs_at(opts: Options) -> int:
    """The worker processes :func:`reproduce` runs a target's runs with (local backend; Ray: one counted)."""
    if opts.backend != "local":
        return 1
    return opts.jobs if opts.jobs is not None else default_jobs("auto") if opts.scale == "tiny" else 1


def estimate_lines(paper: str, targets: list[Target], opts: Options, estimator: Estimator) -> list[str]:
    """Each target's runs still to do timed on this device (:mod:`fedbench.estimate`; a tuned target's
    also without its trials), then what was probed."""
    lines = []
    store = existing_store(opts.out_dir)
    for t in targets:
        points = target_points(t, opts.scale)
        tuned = [tuning.plan(p.scenario) for p in points if p.scenario.tuned]
        runs = known_runs(points, store, project=True)
        runs += [r for plan in tuned for r in tuning.projected_final_runs(plan, store)]
        if runs:
            est = estimator.estimate(runs, opts.out_dir, opts.run_options(t))
            lines += [
                f"{paper} {t.name}: {line}" if i == 0 else line
                for i, line in enumerate(estimate.lines(est, estimator, default_jobs_at(opts)))
            ]
            trials = {r.run_id for plan in tuned for r in plan.projected_trial_runs(store)}
            if trials and est.todo and any(c.cost is not None for c in est.classes):
                final = estimator.estimate(
                    [r for r in runs if r.run_id not in trials], opts.out_dir, opts.run_options(t)
                )
                several = len({r.spec.dataset["name"] for r in final.todo}) > 1
                lines.append(
                    f"  without the tuning trials (the final runs alone): {len(final.todo):,} run(s) "
                    f"{estimate.total(final)}" + (f"; {estimate.per_dataset(final)}" if several else "")
                )
    return lines + estimate.probe_note(estimator)


def _register_in_order(store: ResultsStore, runs: list) -> None:
    """Insert the runs the store has never seen, in order, before any worker starts one."""
    for run in runs:
        if store.status(run.run_id) is None:
            store.start_run(record_of(run))


def _sweep(runs: list[SweepRun], target: Target, opts: Options, console: Console) -> bool:
    """``runs`` (registered first, in order) through the sweep engine; False when one failed."""
    if not runs:
        return True
    _register_in_order(ResultsStore(opts.out_dir), runs)
    jobs = opts.jobs if opts.jobs is not None or opts.scale == "tiny" else 1
    summary = run_sweep(
        runs, opts.out_dir, opts.backend, jobs, opts.run_options(target), address=opts.address, console=console
    )
    return not summary.failed


def _run(target: Target, opts: Options, console: Console) -> bool:
    """The target's missing runs: a tuned scenario's trials first (docs/tuning.md), then every
    scenario's runs (a tuned one's chosen settings); False when one failed."""
    points = target_points(target, opts.scale)
    if any(p.scenario.tuned for p in points):
        console.print(f"the trials of {sum(p.scenario.tuned for p in points)} tuned scenario(s) (docs/tuning.md):")
        for k, runs in enumerate(tuning.rung_batches(lambda: known_runs(points, ResultsStore(opts.out_dir)))):
            if k:
                console.print("the next rung of the trials (successive halving):")
            if not _sweep(runs, target, opts, console):
                return False
        console.print("the chosen settings:")
    try:
        finals = final_runs_of(points, ResultsStore(opts.out_dir))
    except tuning.TuningError as exc:
        console.print(f"[red]{escape(str(exc))}[/]")
        return False
    return _sweep(finals, target, opts, console)


def reproduce(paper: str, targets: list[Target], opts: Options, console: Console) -> int:
    """Do each target (runs, then its report steps); the exit code: 0, or 1 when a run failed or
    a step's check did not pass (what is done so far stays)."""
    for t in targets:
        console.print(f"[bold]{paper} {t.name}[/]: {escape(t.help)}")
        if not _run(t, opts, console):
            console.print(f"[red]{paper} {t.name}: some runs failed; rerun to resume them[/]")
            return 1
        ctx = _context(paper, t, opts, console)
        for step in t.steps:
            try:
                paths = step.run(ctx)
            except (StepFailed, ValueError) as exc:
                console.print(f"[red]{paper} {t.name}: fedbench {escape(step.describe(ctx))}: {escape(str(exc))}[/]")
                return 1
            console.print("\n".join(f"wrote {p}" for p in paths), highlight=False, soft_wrap=True)
    return 0
