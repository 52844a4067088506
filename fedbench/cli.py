"""The ``fedbench`` command line (Typer): each command is a few lines calling into the package."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from fedbench import cli_style, cli_warnings
from fedbench.cli_options import BACKEND, DECLARED, run_options
from fedbench.options import RunOptions

cli_style.apply()
cli_warnings.install()

app = typer.Typer(
    help="fedbench: run federated-learning scenarios from YAML, then build paper-style tables and curves.",
    no_args_is_help=True,
    add_completion=False,
)
console = Console()


def _print_version(value: bool) -> None:
    if value:
        from fedbench.versions import version_text

        typer.echo(version_text())
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(
        False,
        "--version",
        callback=_print_version,
        is_eager=True,
        help="fedbench's, torch's and Python's versions and the dependency lock's; then exit",
    ),
) -> None:
    """fedbench: run federated-learning scenarios from YAML, then build paper-style tables and curves."""


OUT = typer.Option(Path("results"), "--out", help="results folder: SQLite index + checkpoints")
SETS = typer.Option(None, "--set", help="override a scenario key, e.g. --set rounds=5 --set partition.omega=0.5")


SCALE = typer.Option(
    None, "--scale", help="paper (the file as written) or a scale the file defines under `scales:`, e.g. small, tiny"
)


def _red(text: object) -> str:
    """``text`` as one red line with rich markup escaped (``[low, high]`` is printed, not eaten)."""
    return f"[red]{escape(str(text))}[/red]"


def _load(scenario: Path, overrides: list[str] | None, scale: str | None = None, raw=None):
    """The scenario file (or its already read ``raw`` content) at ``scale``; a bad one exits 2."""
    from fedbench.scenario import ScenarioError, load_scenario, parse_scenario

    try:
        if raw is not None:
            return parse_scenario(raw, str(scenario), overrides or [], scale)
        return load_scenario(scenario, overrides or [], scale)
    except ScenarioError as exc:
        console.print(_red(exc), soft_wrap=True)
        raise typer.Exit(2) from None


def _kv(values: dict) -> str:
    """``{"name": "mlp", "hidden": [16]}`` → ``mlp hidden=[16]``; ``—`` when empty."""
    parts = [str(v) if k in ("name", "kind") else f"{k}={v}" for k, v in values.items()]
    return " ".join(parts) or "—"


def _choice(option: str, value: str, allowed: tuple[str, ...]) -> None:
    """Exit 2 with one line unless ``value`` is one of ``allowed``."""
    if value not in allowed:
        console.print(_red(f"{option}: expected one of {', '.join(allowed)}, got {value!r}"), soft_wrap=True)
        raise typer.Exit(2)


@contextmanager
def _store_errors(out: Path) -> Iterator[None]:
    """A results store SQLite cannot read or write (corrupt, truncated, read-only), or a file that is
    not a store, exits 2 with one line naming it and the way out, instead of a traceback."""
    import sqlite3

    from fedbench.store import DB_NAME, NotAStore

    try:
        yield
    except NotAStore as exc:  # another program's file: left as it was
        console.print(_red(f"{exc}; choose another --out, or move that file aside"), soft_wrap=True)
        raise typer.Exit(2) from None
    except sqlite3.DatabaseError as exc:
        console.print(
            _red(
                f"results store {out / DB_NAME} cannot be used ({exc}); move it aside (finished runs are "
                "then recomputed) or choose another --out"
            ),
            soft_wrap=True,
        )
        raise typer.Exit(2) from None


@contextmanager
def _interrupts() -> Iterator[None]:
    """Ctrl-C, or SIGTERM (handled as Ctrl-C: fedbench.signals): one line saying what was interrupted
    and that the same command resumes it; exit 130 (Ctrl-C) or 143 (SIGTERM)."""
    from fedbench.runs import RunInterrupted
    from fedbench.signals import exit_code, sigterm_as_interrupt

    try:
        with sigterm_as_interrupt():
            yield
    except RunInterrupted as exc:
        console.print(f"[yellow]{escape(str(exc))}[/yellow]", soft_wrap=True)
        raise typer.Exit(exc.code) from None
    except KeyboardInterrupt as exc:
        console.print(
            "[yellow]interrupted; run the same command to resume (finished runs are skipped, interrupted ones "
            "resume from their last checkpoint)[/yellow]",
            soft_wrap=True,
        )
        raise typer.Exit(exit_code(exc)) from None


READ_OUT = typer.Option(
    None, "--out", help="results folder (default: results/, or the one store under results/ holding the scenario)"
)
RESULTS = Path("results")


def _read_store(out: Path | None, scenario: str | None = None):
    """The existing store a read-only command reads: ``--out``, else results/, else the single store
    under results/ (holding ``scenario`` when given). Never creates one; exits 2 saying where it looked."""
    from fedbench.store import DB_NAME, ResultsStore, stored_scenarios

    def fail(message: str) -> None:
        console.print(_red(message), soft_wrap=True)
        raise typer.Exit(2)

    if out is None and not (RESULTS / DB_NAME).is_file():
        held = {p.parent: stored_scenarios(p.parent) for p in sorted(RESULTS.glob(f"*/{DB_NAME}"))}
        found = [f for f, names in held.items() if scenario is None or scenario in names]
        if len(found) != 1:
            listing = "; ".join(f"{f}/ ({', '.join(held[f][:3])}{', …' if len(held[f]) > 3 else ''})" for f in found)
            fail(
                f"no results store at {RESULTS}/ and {'none' if not found else 'several'} under it"
                + (f" with scenario {scenario!r}" if scenario else "")
                + (f": {listing}" if listing else "")
                + "; pass --out, or run a scenario first (fedbench run configs/quickstart.yaml)"
            )
        out = found[0]
        console.print(f"store: {out}/")
    out = out if out is not None else RESULTS
    if not (out / DB_NAME).is_file():
        fail(f"--out {out}: no results store there ({out / DB_NAME} does not exist)")
    with _store_errors(out):
        return ResultsStore(out, read_only=True)


def _has_runs(store) -> bool:
    """False, after one line saying so, for a store without runs: a reading command then writes nothing."""
    from fedbench.report import empty_store_line

    if store.is_empty():
        console.print(f"[yellow]{escape(empty_store_line(store.out_dir))}[/yellow]", soft_wrap=True)
        return False
    return True


def _parse_seeds(seeds: str | None) -> list[int] | None:
    """``--seeds 0,1,2`` → [0, 1, 2]; anything but distinct integers in [0, 2⁶³ − 1] exits 2 before a run starts."""
    from fedbench.strict import MAX_SEED

    if seeds is None:
        return None
    parts = [s.strip() for s in seeds.split(",")]
    if not all(p.isascii() and p.isdigit() and int(p) <= MAX_SEED for p in parts) or len(set(map(int, parts))) != len(
        parts
    ):
        console.print(
            _red(
                f"--seeds: expected distinct integers from 0 to {MAX_SEED} (2⁶³ − 1) separated by commas, "
                f"like 0,1,2; got {seeds!r}"
            ),
            soft_wrap=True,
        )
        raise typer.Exit(2)
    return [int(p) for p in parts]


@app.command()
@run_options()
def run(
    scenario: Path = typer.Argument(..., metavar="SCENARIO", help="scenario YAML file"),
    seeds: str | None = typer.Option(None, help="comma-separated seeds, replacing the scenario's `seeds`"),
    out: Path = OUT,
    only: str | None = typer.Option(None, help="comma-separated algorithm labels or names to run"),
    scale: str | None = SCALE,
    overrides: list[str] | None = SETS,
    quiet: bool = typer.Option(
        False,
        "--quiet",
        help="one line per finished run, no progress bars or summary "
        "(for several `fedbench run` processes sharing a terminal)",
    ),
    *,
    options: RunOptions,
) -> None:
    """Run every (algorithm, seed) of a scenario; finished runs are skipped, interrupted ones resume."""
    from fedbench.runs import check_only, run_scenario, selected
    from fedbench.store import ResultsStore

    sc = _load(scenario, overrides, scale)
    seed_list, labels = _parse_seeds(seeds), only.split(",") if only else None
    _or_exit(check_only, sc, labels)
    _before_runs(selected(sc, labels), options, out)
    with _store_errors(out), _interrupts():
        outcomes = run_scenario(sc, out, options, seed_list, labels, console, quiet)
        if not quiet:
            _print_summary(ResultsStore(out), sc.name)
    if any(o.status == "failed" for o in outcomes):
        raise typer.Exit(1)


def _before_runs(specs, options: RunOptions, out: Path, check_data: bool = True) -> None:
    """What every command that trains checks before it touches a results store, each failure one line and
    exit 2: the datasets are under ``--data-dir``, the device exists, the datasets hold the runs' clients,
    partitions and tasks (:mod:`fedbench.engine.preflight`), and ``out`` can be written. ``check_data``
    False (a Ray cluster, whose workers read their own disks): the device and ``out`` only."""
    from fedbench.engine.preflight import preflight
    from fedbench.runs import check_device, check_out

    if check_data:
        _data_present([spec.dataset for spec in specs], options)
        _or_exit(preflight, specs, options.device, options.data_dir)
    else:
        _or_exit(check_device, options.device)
    _or_exit(check_out, out)


def _data_present(datasets, options: RunOptions) -> None:
    """A dataset not under ``--data-dir`` (that ``--download`` would not fetch) exits 2 with one line
    naming it, the folder and how to get it, before any results store is touched."""
    from fedbench.data import missing, missing_line

    found = missing(datasets, options.data_dir, options.download)
    if found:
        console.print(missing_line(found), style="red", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(2)


ESTIMATE = typer.Option(
    False,
    "--estimate/--no-estimate",
    help="time a few rounds of each kind of run on this "
    "device and print the hours of the runs to do (off by default: it trains, up to --probe-budget s)",
)
PROBE_BUDGET = typer.Option(
    60.0,
    "--probe-budget",
    min=1.0,
    help="--estimate: seconds of probing at most "
    "(a probe begun is finished; kinds of run left out are scaled from a similar one)",
)
RATES = typer.Option(
    None,
    "--rates",
    help="--estimate: price with the seconds per round of this YAML file instead "
    "of probing (docs/datasets.md#gpu-hours)",
)


STAND_IN = typer.Option(
    False,
    "--stand-in-data",
    help="--estimate: probe a real dataset not on disk on generated data of its shape, size and classes "
    "(a round costs the same on any pixels; nothing is downloaded or trained for real)",
)


def _estimator(on: bool, options: RunOptions, budget: float, rates: Path | None = None, stand_in: bool = False):
    """The probe of ``--estimate`` (None without it); a bad ``--device`` or ``--rates`` file exits 2."""
    if not on:
        for flag, given in (("--rates", rates is not None), ("--stand-in-data", stand_in)):
            if given:
                console.print(f"[red]{flag} goes with --estimate[/red]")
                raise typer.Exit(2)
        return None
    from fedbench.estimate import Estimator, load_rates
    from fedbench.runs import check_device

    _or_exit(check_device, options.device)
    return Estimator(options, budget, rates=None if rates is None else _or_exit(load_rates, rates), stand_in=stand_in)


@app.command()
@run_options(leave_out=("download", "log"))
def validate(
    scenario: Path = typer.Argument(..., metavar="SCENARIO", help="scenario YAML file"),
    scale: str | None = typer.Option(None, "--scale", help="check only this scale (default: every scale of the file)"),
    overrides: list[str] | None = SETS,
    estimate: bool = ESTIMATE,
    out: Path = typer.Option(
        Path("results"), "--out", help="--estimate: runs this store holds done count zero (read only)"
    ),
    probe_budget: float = PROBE_BUDGET,
    rates: Path | None = RATES,
    stand_in_data: bool = STAND_IN,
    *,
    options: RunOptions,
) -> None:
    """Check a scenario (at every scale it defines) without training; show the resolved runs (and, with
    --estimate, their hours on this device from a short timed probe run as the run options say; datasets
    are never downloaded)."""
    from fedbench.engine.preflight import preflight
    from fedbench.scenario import ScenarioError, read_yaml, scale_names

    estimator = _estimator(estimate, options, probe_budget, rates, stand_in_data)
    try:
        raw = read_yaml(scenario)
        scales = [scale] if scale else scale_names(raw) if isinstance(raw, dict) else ["paper"]
    except ScenarioError as exc:
        console.print(_red(exc), soft_wrap=True)
        raise typer.Exit(2) from None
    for name in scales:
        sc = _load(scenario, overrides, name, raw)
        _or_exit(preflight, sc.runs, options.device, options.data_dir)
        runs = len(sc.runs) * len(sc.seeds)
        first = sc.runs[0]
        console.print(
            f"[bold]{sc.name}[/bold]: {_kv(first.dataset)} · {_kv(first.model)} · {sc.clients.per_round} of "
            f"{sc.clients.num} clients per round · {_kv(first.partition)} · {len(sc.runs)} algorithm(s) × seeds "
            f"{sc.seeds} = {runs} run(s) of {sc.rounds} rounds ({runs * sc.rounds} rounds in all)",
            soft_wrap=True,
        )
        table = Table()
        for col in ("label", "algorithm", "params", "server (non-default)", "spec hash"):
            table.add_column(col, overflow="fold")
        for spec in sc.runs:
            params = {k: v for k, v in spec.algorithm.items() if k not in ("name", "label")}
            server = spec.server.model_dump(exclude_defaults=True)
            table.add_row(spec.label, spec.algorithm["name"], _kv(params), _kv(server), spec.spec_hash()[:16])
        console.print(table)
        if sc.tuned:
            from fedbench.sweeps.tuning import plan, plan_lines

            console.print("\n".join(plan_lines(plan(sc))), highlight=False, markup=False, soft_wrap=True)
        if estimator is not None:
            from fedbench import estimate as est

            lines = est.lines(estimator.estimate(est.scenario_runs(sc), out), estimator)
            console.print("\n".join(lines), highlight=False, markup=False, soft_wrap=True)
    if estimator is not None:
        from fedbench.estimate import probe_note

        for line in probe_note(estimator):
            console.print(line, highlight=False, markup=False, soft_wrap=True)
    console.print(f"[green]{scenario} is valid at scale(s): {', '.join(scales)}[/green]")


@app.command()
@run_options()
def tune(
    scenario: Path = typer.Argument(..., metavar="SCENARIO", help="scenario YAML file with a `tune:` block"),
    scale: str | None = SCALE,
    out: Path = OUT,
    jobs: int | None = typer.Option(None, "--jobs", help="worker processes (default: CPUs, at most 16; one per GPU)"),
    backend: str = BACKEND,
    dry_run: bool = typer.Option(
        False, "--dry-run", help="print the trials, their runs and whether each is done; run nothing"
    ),
    tables_dir: Path = typer.Option(Path("tables"), help="where <scenario>_tuning.md and .csv are written"),
    overrides: list[str] | None = SETS,
    *,
    options: RunOptions,
) -> None:
    """Tune a scenario's entries (docs/tuning.md): run the missing trials, select, run the chosen settings."""
    from fedbench.options import BACKENDS
    from fedbench.report.tuning_table import write_tuning_tables
    from fedbench.sweeps import driver, tuning

    _choice("--backend", backend, BACKENDS)
    sc = _load(scenario, overrides, scale)
    if not sc.tuned:
        console.print(
            f"[red]{scenario}: no `tune:` block, on the scenario or on an entry (docs/tuning.md)[/red]", soft_wrap=True
        )
        raise typer.Exit(2)
    plan = tuning.plan(sc)
    with _store_errors(out):
        if dry_run:
            from fedbench.store import existing_store

            store = existing_store(out)
            lines = tuning.plan_lines(plan, store) + _trial_status(plan.trial_runs(store), out)
            console.print("\n".join(lines), highlight=False, markup=False, soft_wrap=True)
            return
        _before_runs(sc.runs, options, out)
        with _interrupts():
            try:
                choices, trials, final = driver.run_tuning(plan, out, jobs, options, console, backend)
            except tuning.TuningError as exc:  # a trial failed: the same command retries it
                console.print(_red(exc), soft_wrap=True)
                raise typer.Exit(1) from None
            except ValueError as exc:  # a bad option (--jobs 0)
                console.print(_red(exc), soft_wrap=True)
                raise typer.Exit(2) from None
    for path in write_tuning_tables(choices, tables_dir, sc.name):
        console.print(f"wrote {path}")
    if final.failed:
        raise typer.Exit(1)


def _trial_status(runs, out: Path) -> list[str]:
    """Each trial run with its run id and whether ``out`` holds it done."""
    from fedbench.store import read_statuses

    status = read_statuses(out, [r.run_id for r in runs])
    return [
        f"  {r.spec.scenario}  {r.spec.label:<12} seed {r.seed:<3} {r.run_id}  {status.get(r.run_id) or 'to run'}"
        for r in runs
    ]


@app.command()
@run_options()
def sweep(
    files: list[Path] = typer.Argument(
        ..., metavar="FILES", help="grid files (base + grid of dotted keys) or scenario files (one point each)"
    ),
    backend: str = BACKEND,
    jobs: int | None = typer.Option(
        None,
        "--jobs",
        help="local: worker processes (default: CPUs / cpus-per-run, "
        "at most 16; one per GPU with CUDA); ray: CPUs of the local instance it starts",
    ),
    address: str | None = typer.Option(None, "--address", help="ray: cluster to join, e.g. auto or ray://head:10001"),
    cpus_per_run: float | None = typer.Option(
        None,
        "--cpus-per-run",
        help="CPUs reserved per run (default: --threads, the torch threads each run trains with)",
    ),
    gpus_per_run: float = typer.Option(
        0.0, "--gpus-per-run", help="ray: GPUs per run, fractional for small models (0.25)"
    ),
    max_retries: int = typer.Option(2, "--max-retries", help="ray: resubmissions of a run whose worker died"),
    out: Path = OUT,
    scale: str | None = typer.Option(None, "--scale", help="scale of every file, replacing grid files' `scale:`"),
    seeds: str | None = typer.Option(None, help="comma-separated seeds, replacing every point's seeds"),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="print the expanded runs and whether each is done; run nothing"
    ),
    strict: bool = typer.Option(
        False,
        "--strict",
        help="refuse the whole sweep when a grid point is invalid (default: "
        "report and skip it, run the valid points, exit 1 at the end)",
    ),
    *,
    options: RunOptions,
) -> None:
    """Run grids of scenarios (or several scenario files) locally or on Ray; runs already finished are skipped."""
    from fedbench.options import BACKENDS
    from fedbench.sweeps import driver, grid

    _choice("--backend", backend, BACKENDS)
    skipped: list[str] | None = None if strict else []
    points = _or_exit(grid.expand, files, scale, _parse_seeds(seeds), skipped)
    for line in skipped or []:
        console.print(f"[yellow]skipped invalid grid point: {line}[/yellow]", soft_wrap=True)
    runs = grid.sweep_runs(points)
    with _store_errors(out):
        if dry_run:
            console.print(
                "\n".join(driver.plan_lines(points, runs, out)), highlight=False, markup=False, soft_wrap=True
            )
            raise typer.Exit(1 if skipped else 0)
        _before_runs([r.spec for r in runs], options, out, check_data=address is None)
        with _interrupts():
            summary = _or_exit(
                lambda: driver.run_sweep(
                    runs, out, backend, jobs, options, cpus_per_run, gpus_per_run, address, max_retries, console
                )
            )
    if skipped:
        console.print(f"[red]{len(skipped)} invalid grid point(s) were skipped (listed above)[/red]")
    if summary.failed or skipped:
        raise typer.Exit(1)


@app.command("list")
def list_(
    what: str = typer.Argument(
        "all",
        metavar="WHAT",
        help="all | algorithms | datasets | models | partitions | compressors | clients | trackers | privacy",
    ),
) -> None:
    """List the registered algorithms, datasets, models (with parameter counts), partitions, compressors,
    client availability models, experiment trackers (--log) and the DP-FedAvg keys."""
    from fedbench.catalog import catalog

    sections = catalog()
    if what != "all" and what not in sections:
        console.print(f"[red]unknown section {what!r}; choose from all, {', '.join(sections)}[/red]")
        raise typer.Exit(2)
    for name, rows in sections.items():
        if what in ("all", name):
            table = Table(title=name)
            for col in rows[0]:
                table.add_column(col, overflow="fold")
            for row in rows[1:]:
                table.add_row(*row)
            console.print(table)


@app.command()
def table(
    out: Path | None = READ_OUT,
    scenario: str | None = typer.Option(None, help="scenario name (default: every scenario in the store)"),
    tables_dir: Path = typer.Option(Path("tables"), help="where the .md/.tex/.csv tables are written"),
    show: bool = typer.Option(True, "--show/--no-show", help="also print the table in the terminal"),
) -> None:
    """Build accuracy / rounds-to-target / bits-to-target tables (Markdown, LaTeX, CSV) from the store."""
    from fedbench.report.tables import write_tables

    store = _read_store(out, scenario)
    with _store_errors(store.out_dir):
        if not _has_runs(store):
            return
        paths = _or_exit(write_tables, store, tables_dir, scenario)
        if show:
            _print_summary(store, scenario)
    for p in paths:
        console.print(f"wrote {p}")


@app.command()
def export(
    to: str = typer.Option(
        ..., "--to", help="the tracker: tensorboard[:DIR] or mlflow[:URI] (comma-separated for both)"
    ),
    dest: str | None = typer.Option(
        None,
        "--dest",
        help="tensorboard: the log folder (default <out>/tensorboard); mlflow: the tracking URI, e.g. "
        "http://host:5000 or a SQLite file (default <out>/mlflow.db)",
    ),
    out: Path | None = READ_OUT,
    scenario: str | None = typer.Option(None, help="scenario name (default: every scenario in the store)"),
) -> None:
    """Copy a store's runs to TensorBoard or MLflow: every round's numbers, each run's hyper-parameters and
    scenario hash (docs/store-and-sweeps.md#trackers); runs the tracker holds already are not written again."""
    from fedbench.report.tables import scenario_names
    from fedbench.trackers import export as export_runs, export_targets

    targets = _or_exit(export_targets, to, dest)
    store = _read_store(out, scenario)
    if not _has_runs(store):
        return
    _or_exit(scenario_names, store, scenario)
    with _store_errors(store.out_dir):
        for result in export_runs(store, targets, None, scenario):
            console.print(f"exported to {result.line()}", soft_wrap=True, highlight=False)


@app.command()
def plot(
    out: Path | None = READ_OUT,
    scenario: str | None = typer.Option(None, help="scenario name (default: every scenario in the store)"),
    figures_dir: Path = typer.Option(Path("figures"), help="where the PNG curves are written"),
    x: str = typer.Option(
        "both",
        help="x axis: round, bits (all traffic), uplink (per-client uplink bits, "
        "FedCAMS's bit axes) or both (round and bits)",
    ),
    metric: str = typer.Option(
        "test_acc",
        help="y axis: test_acc, consistency, client_acc_std, train_loss, or a "
        "dotted path to a number in the rounds' extra logs, e.g. cflag.Gamma",
    ),
    algorithm: list[str] | None = typer.Option(
        None, "--algorithm", help="only these labels, in this order (repeatable)"
    ),
    name: str | None = typer.Option(None, help="figure name inserted in the file name, e.g. fig1"),
) -> None:
    """Draw a metric (test accuracy by default) vs rounds, communicated bits or uplink bits (mean over seeds with a band)."""
    from fedbench.report.plots import METRICS, UnknownMetric, plot_curves

    allowed = ("round", "bits", "uplink", "both")
    if x not in allowed:
        console.print(f"[red]--x must be one of {', '.join(allowed)}, got {x!r}[/red]")
        raise typer.Exit(2)
    store = _read_store(out, scenario)
    if not _has_runs(store):
        return
    axes = ["round", "bits"] if x == "both" else [x]
    for axis in axes:
        try:
            with _store_errors(store.out_dir):
                paths = plot_curves(store, figures_dir, scenario, axis, metric, algorithm, name)
        except UnknownMetric as exc:
            console.print(
                f"[red]--metric must be one of {', '.join(METRICS)} or a dotted path to a number in the "
                f"extra logs: {exc}[/red]"
            )
            raise typer.Exit(2) from None
        except ValueError as exc:
            console.print(_red(exc), soft_wrap=True)
            raise typer.Exit(2) from None
        for p in paths:
            console.print(f"wrote {p}")


REPORT_SCALE = typer.Option(
    None, "--scale", help="runs at this scale only, e.g. tiny (default: one table per scale in the store)"
)


@app.command()
def continual(
    out: Path | None = READ_OUT,
    scenario: str | None = typer.Option(None, help="scenario name (default: every continual scenario in the store)"),
    tables_dir: Path = typer.Option(Path("tables"), help="where <scenario>_continual.md/.csv are written"),
    figures_dir: Path = typer.Option(
        Path("figures"), help="where the accuracy-matrix heat map and the average-accuracy-per-task curve are written"
    ),
    sweep: Path | None = typer.Option(
        None, "--sweep", help="a grid file: its points' Acc and Forgetting against the varied value, in one figure"
    ),
    scale: str | None = REPORT_SCALE,
) -> None:
    """Continual scenarios: Acc and Forgetting per algorithm (mean ± std over seeds), accuracy-matrix heat maps and
    the average accuracy over the tasks seen after each task (C-FLAG Fig. 2); with --sweep, a grid's points
    summarised against the value it varies (C-FLAG Figs. 5–6)."""
    from fedbench.report import forgetting as report

    if sweep is not None:
        from fedbench.report.sweep_summary import write_sweep

        paths = _or_exit(write_sweep, _read_store(out, None), sweep, scale, tables_dir, figures_dir)
        console.print(paths[0].read_text() + "\n".join(f"wrote {p}" for p in paths))
        return
    store = _read_store(out, scenario)
    paths = _or_exit(report.write_continual, store, tables_dir, figures_dir, scenario)
    for p in paths:
        if p.suffix == ".md":
            console.print(p.read_text())
    console.print(
        "\n".join(f"wrote {p}" for p in paths) or "[yellow]no continual runs in the store: nothing written[/]"
    )


PAPER = typer.Option(..., "--paper", help="paper key, e.g. fedmim (its room: fedbench/papers/<paper>/)")
TABLES_DIR = typer.Option(Path("tables"), help="where the report files are written")


def _or_exit(fn, *args):
    """Call a check or report function; its ValueError (bad option, unknown paper or table, ambiguous scale)
    exits with code 2 and one line."""
    try:
        return fn(*args)
    except ValueError as exc:
        console.print(_red(exc), soft_wrap=True)
        raise typer.Exit(2) from None


@app.command()
def compare(
    paper: str = PAPER,
    table: str = typer.Option(..., "--table", help="table id as the paper numbers it, e.g. I, II, III"),
    out: Path | None = READ_OUT,
    tables_dir: Path = TABLES_DIR,
    scale: str | None = REPORT_SCALE,
) -> None:
    """Paper vs reproduced: the paper's table with `paper / ours` cells, per scale (.md, .tex, .csv)."""
    from fedbench.report import paper as report

    store = _read_store(out)
    for t in report.rich_comparison(_or_exit(report.compare, store, paper, table, scale), paper, table, store):
        console.print(t)
    paths = report.write_comparison(store, paper, table, tables_dir, scale)
    console.print(
        "\n".join(f"wrote {p}" for p in paths) or "[yellow]no runs of this table in the store: nothing written[/]"
    )


@app.command()
def claims(
    paper: str = PAPER,
    out: Path | None = READ_OUT,
    tables_dir: Path = TABLES_DIR,
    scale: str | None = typer.Option(
        None, "--scale", help="the scale whose runs are checked, e.g. tiny (needed when the store holds several)"
    ),
) -> None:
    """Check a paper's claims on one scale's reproduced numbers and on the paper's; writes <paper>_claims_<scale>.md."""
    from fedbench.report import claims as report

    store = _read_store(out)
    if not _has_runs(store):
        return
    scale = _or_exit(report.resolve_scale, store, paper, scale)
    console.print(
        report.rich_claims(_or_exit(report.check_claims, store, paper, scale), f"{paper} claims, {scale} scale")
    )
    console.print(f"wrote {report.write_claims(store, paper, tables_dir, scale)}")


@app.command()
def tuning(
    paper: str = PAPER,
    out: Path | None = READ_OUT,
    tables_dir: Path = TABLES_DIR,
    scale: str = typer.Option("paper", "--scale", help="the scale of the tuned scenarios: tiny, small or paper"),
) -> None:
    """Write a paper's tuning table at a scale (<paper>_tuning_<scale>.md): per method and column, the chosen
    values, the trial count and the best and runner-up scores (the trials as `fedbench reproduce` ran them)."""
    from fedbench.papers import check_paper
    from fedbench.papers.reproduce import room
    from fedbench.papers.targets import SCALES, tuned_scenarios
    from fedbench.report.tuning_table import write_paper_tuning

    paper = _or_exit(check_paper, paper)
    _choice("--scale", scale, SCALES)
    store = _read_store(out)
    paths = write_paper_tuning(store, paper, scale, tuned_scenarios(room(paper).run_files, scale), tables_dir)
    console.print("\n".join(f"wrote {p}" for p in paths) or f"{paper}: no scenario is tuned at the {scale} scale")


@app.command("report")
def report_(
    out: Path | None = typer.Option(None, "--out", help="results store to show (default: results, unless --paper)"),
    paper: str | None = typer.Option(None, "--paper", help="show this paper's tables, claims and figures instead"),
    scale: str | None = typer.Option(None, "--scale", help="with --paper: tiny, small or paper"),
    tables_dir: Path = typer.Option(Path("tables"), help="where a paper's tables and claims are read"),
    figures_dir: Path = typer.Option(Path("figures"), help="where the PNG figures are read"),
    html: Path | None = typer.Option(
        None, "--html", help="the page to write (default: <out>/report.html, or reports/<paper>_<scale>.html)"
    ),
) -> None:
    """One self-contained HTML page (tables, notes, figures embedded) of a results store, or of a paper's
    tables and figures at one scale; it opens offline, and the same inputs give the same bytes."""
    from fedbench.papers import page
    from fedbench.report import NothingToWrite

    with _store_errors(out or Path("results")):
        try:
            console.print(f"wrote {_or_exit(page.write_report, out, paper, scale, tables_dir, figures_dir, html)}")
        except NothingToWrite as exc:
            console.print(f"[yellow]{escape(str(exc))}[/yellow]", soft_wrap=True)


@app.command()
def bits(
    model: str = typer.Argument(
        ..., metavar="MODEL", help="model name, e.g. resnet18 or convmixer (see `fedbench list models`)"
    ),
    input: str = typer.Option("3x32x32", "--input", help="input shape C×H×W, e.g. 3x32x32"),
    classes: int = typer.Option(10, "--classes", help="number of classes"),
    rounds: int = typer.Option(500, "--rounds", help="rounds T"),
    compressor: list[str] | None = typer.Option(
        None,
        "--compressor",
        help="one row per use: sign, topk:ratio=1/64, stochastic:bits=2 "
        "(default: FedCAMS Table 2's sign and top-k 1/64, 1/128, 1/256)",
    ),
    paper: str | None = typer.Option(
        None,
        "--paper",
        help="show this paper's printed values beside ours; "
        "exit code 1 unless every one agrees to 3 significant figures",
    ),
    tables_dir: Path = TABLES_DIR,
) -> None:
    """Communication bits per client over T rounds from the model's size (FedCAMS Tables 1–2), without training."""
    from fedbench.papers import paper_part
    from fedbench.report import bits as report

    compressors = compressor or list(paper_part("fedcams", "room").TABLE2_COMPRESSORS)
    result = _or_exit(report.bits_report, model, input, classes, rounds, compressors, paper)
    for t in report.rich_bits(result):
        console.print(t)
    console.print("\n".join(f"wrote {p}" for p in report.write_bits(result, tables_dir)))
    if paper:
        console.print(("[green]" if result.agrees else "[red]") + report.verdict(result) + "[/]")
        if not result.agrees:
            raise typer.Exit(1)


@app.command()
def costs(
    paper: str = typer.Option(..., "--paper", help="paper with analytic cost columns: fedqvr (Table I's #C)"),
    tables_dir: Path = TABLES_DIR,
) -> None:
    """Uplink cost columns (#C = #R × per-round bits) of the paper's table from model sizes, without training;
    exit code 1 unless every disagreement with the printed values is a known paper typo."""
    from fedbench.papers import paper_part

    report = _or_exit(paper_part, paper, "costs")
    result = _or_exit(report.costs_report, paper)
    for t in report.rich_costs(result):
        console.print(t)
    console.print("\n".join(f"wrote {p}" for p in report.write_costs(result, tables_dir)))
    console.print(("[green]" if result.passes else "[red]") + report.verdict(result) + "[/]")
    if not result.passes:
        raise typer.Exit(1)


@app.command()
def partitions(
    scenarios: list[Path] = typer.Argument(..., metavar="SCENARIO.yaml...", help="scenario files, one panel each"),
    scale: str | None = SCALE,
    overrides: list[str] | None = SETS,
    seed: int = typer.Option(0, "--seed", min=0, help="the seed whose partition stream is drawn"),
    name: str | None = typer.Option(
        None, "--name", help="file stem (default: the first file's): <name>_partitions.png"
    ),
    figures_dir: Path = typer.Option(Path("figures"), help="where the PNG (and its PDF) is written"),
    data_dir: Path = DECLARED["data_dir"][1],
) -> None:
    """Which classes each client holds, as GradMA's Fig. 8: one scatter panel per scenario (client × class, sized
    by the count), the partition the runs use at that seed; no training."""
    from fedbench.data import missing, missing_line
    from fedbench.report.partition_plot import write_partitions

    loaded = [_load(f, overrides, scale) for f in scenarios]
    absent = missing([s.runs[0].dataset for s in loaded], data_dir)
    if absent:
        console.print(_red(missing_line(absent)), soft_wrap=True)
        raise typer.Exit(2)
    stem = name or scenarios[0].stem + (f"_{scale}" if scale else "")
    path = _or_exit(write_partitions, [s.runs[0] for s in loaded], figures_dir, stem, seed, data_dir)
    console.print(f"wrote {path}")


@app.command()
@run_options()
def reproduce(
    paper: str | None = typer.Argument(None, metavar="PAPER", help="paper: cflag, fedcams, fedmim, fedqvr or gradma"),
    targets: list[str] | None = typer.Argument(
        None, metavar="TARGET", help="its targets, e.g. table1 fig5 (default: all; --list)"
    ),
    scale: str = typer.Option("paper", "--scale", help="paper, small or tiny"),
    out: Path | None = typer.Option(None, "--out", help="results folder (default: results/<scale>)"),
    backend: str = BACKEND,
    jobs: int | None = typer.Option(
        None,
        "--jobs",
        help="local worker processes (default: every CPU at tiny, one "
        "otherwise; one torch thread per run); ray: CPUs of the instance it starts",
    ),
    address: str | None = typer.Option(None, "--address", help="ray: cluster to join, e.g. auto"),
    tables_dir: Path = typer.Option(Path("tables"), help="where the tables and claims are written"),
    figures_dir: Path = typer.Option(Path("figures"), help="where the figures are written"),
    dry_run: bool = typer.Option(False, "--dry-run", help="print what would run and be written; run and write nothing"),
    list_: bool = typer.Option(False, "--list", help="every paper's targets with run counts and how many are done"),
    first_tables: bool = typer.Option(
        False, "--first-tables", help="every paper's first table (its room's first_table), paper by paper; no PAPER"
    ),
    estimate: bool = ESTIMATE,
    probe_budget: float = PROBE_BUDGET,
    rates: Path | None = RATES,
    stand_in_data: bool = STAND_IN,
    *,
    options: RunOptions,
) -> None:
    """Reproduce a paper's tables and figures: run what is missing (sweep engine), then write its
    paper / ours tables, claims and figures. The paper rooms are in fedbench/papers/. Every run and
    probe gets the run options."""
    from fedbench.papers import reproduce as rp
    from fedbench.scenario import ScenarioError

    opts = rp.Options(scale, out, backend, jobs, address, tables_dir, figures_dir, options)
    try:
        if list_:
            rp.check("gradma" if paper is None else paper, [], opts)  # the scale and options
            console.print("\n".join(rp.list_lines(opts)), highlight=False, markup=False, soft_wrap=True)
            return
        if first_tables and paper is not None:
            raise ValueError(f"--first-tables does every paper's first table; got PAPER {paper!r} too")
        if paper is None and not first_tables:
            raise ValueError("missing PAPER; known: " + ", ".join(rp.paper_names()) + " (or --list, --first-tables)")
        jobs = rp.first_tables(opts) if first_tables else [(paper, rp.check(paper, targets or [], opts))]
    except ValueError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None
    if (estimate or rates is not None or stand_in_data) and not dry_run:
        typer.echo("--estimate goes with --dry-run (it prints what would run and its hours; runs nothing)", err=True)
        raise typer.Exit(2)
    if dry_run:
        estimator = _estimator(estimate, options, probe_budget, rates, stand_in_data)
        for paper, chosen in jobs:
            lines = rp.plan_lines(paper, chosen, opts)
            if estimator is not None:
                lines += rp.estimate_lines(paper, chosen, opts, estimator)
            console.print("\n".join(lines), highlight=False, markup=False, soft_wrap=True)
        return
    try:
        specs = [spec for _, chosen in jobs for spec in rp.specs(chosen, opts)]
    except ScenarioError as exc:  # a room names a file this folder lacks (run from the repository root)
        console.print(_red(exc), soft_wrap=True)
        raise typer.Exit(2) from None
    _before_runs(specs, options, opts.out_dir, check_data=address is None)
    code = 0
    with _interrupts():
        for paper, chosen in jobs:
            code = code or rp.reproduce(paper, chosen, opts, console)
    raise typer.Exit(code)


@app.command()
@run_options()
def regime(
    scenarios: list[Path] = typer.Argument(..., metavar="SCENARIO", help="scenario files, one table column each"),
    scale: str | None = SCALE,
    out: Path = OUT,
    run_twins: bool = typer.Option(
        False,
        "--run-twins",
        help="first train FedAvg on each scenario as written and on its IID twin (own scenario names; "
        "finished runs are skipped)",
    ),
    *,
    options: RunOptions,
) -> None:
    """Regime indicators per table column, the paper's beside ours: N, S, S/N, local steps K, FedAvg's IID and
    non-IID accuracy and their gap, the best accuracy and its headroom, Fine-FL's forgetting (issue 27)."""
    from fedbench.report import regime as report
    from fedbench.runs import run_scenario
    from fedbench.store import existing_store

    columns = [_or_exit(report.load_column, path, scale) for path in scenarios]
    if run_twins:
        twins = [t for c in columns for t in c.twins.values()]
        _before_runs([spec for t in twins for spec in t.runs], options, out)
        with _store_errors(out), _interrupts():
            for twin in twins:
                run_scenario(twin, out, options, console=console, quiet=True)
    with _store_errors(out):
        rows = _or_exit(report.regime_rows, columns, existing_store(out), options.data_dir)
    console.print(report.markdown(rows), markup=False, highlight=False, soft_wrap=True)


def _print_summary(store, scenario: str | None) -> None:
    from fedbench.report.tables import format_table, rich_table, summarize

    runs = store.runs(scenario)
    if runs.empty:
        console.print(f"[yellow]no runs in the store at {store.out_dir}/ yet[/yellow]")
        return
    summary = summarize(runs, store.metrics(runs["run_id"]))
    for name, part in summary.groupby("scenario", sort=False):
        if console.is_terminal:
            console.print(rich_table(part, str(name)))
        else:  # a log: the Markdown table, never cut at the console's width
            console.print(f"{name}\n{format_table(part, 'markdown')}", soft_wrap=True, markup=False, highlight=False)


if __name__ == "__main__":
    app()
