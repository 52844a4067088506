"""The Python API for notebooks: what the command line does, as functions that return data frames.

    import fedbench.api as fb

    sc = fb.load("configs/quickstart.yaml", overrides=["rounds=10"])  # or fb.scenario(dict_or_yaml_text)
    res = fb.run(sc, out="results")      # as `fedbench run`: same store, same run ids
    res.summary()                        # the table `fedbench table` prints
    res.curves()                         # mean ± std over seeds per algorithm and round
    fb.open_store("results").rounds()    # one row per (run, round), read only

Nothing is implemented twice: scenarios come from :mod:`fedbench.scenario`, runs from
:func:`fedbench.runs.run_scenario` (after the CLI's own option checks), rows from
:class:`fedbench.store.ResultsStore` (opened read-only), tables from
:func:`fedbench.report.tables.summarize`, curves and figures from :mod:`fedbench.report.plots`.
Importing this module does not import torch; :func:`load`, :func:`scenario` and :func:`run` do.
See docs/python-api.md.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from fedbench.engine.threads import DEFAULT_THREADS
from fedbench.report.tables import scenario_names, summarize
from fedbench.store import ResultsStore
from fedbench.strict import MAX_SEED

if TYPE_CHECKING:
    from rich.console import Console

    from fedbench.scenario import Scenario

__all__ = ["Results", "load", "open_store", "run", "scenario"]
RUN_COLUMNS = ["run_id", "scenario", "algorithm", "seed", "status"]  # joined into rounds()


def load(path: str | Path, scale: str | None = None, overrides: Sequence[str] = ()) -> Scenario:
    """A scenario file validated at ``scale`` with ``overrides`` (``"rounds=5"``, as ``--set``);
    :class:`~fedbench.scenario.ScenarioError` lists every problem with its YAML path."""
    from fedbench.scenario import load_scenario

    return load_scenario(path, list(overrides), scale)


def scenario(source: Mapping[str, Any] | str, scale: str | None = None, overrides: Sequence[str] = ()) -> Scenario:
    """A scenario from a mapping (as YAML would read) or from YAML text, validated like a file
    (``extends:`` needs a file: use :func:`load`); ``source`` itself is not modified."""
    from fedbench.scenario import ScenarioError, parse_scenario
    from fedbench.scenario.files import parse_yaml

    raw = parse_yaml(source, "scenario") if isinstance(source, str) else dict(source)  # parsing copies it
    if isinstance(raw, str):
        raise ScenarioError(
            [
                f"(top level): expected YAML text of a mapping, got the string {raw!r}; to read a "
                "scenario file, use fedbench.api.load(path)"
            ],
            "scenario",
        )
    return parse_scenario(raw, "scenario", list(overrides), scale)


def run(
    scenario: Scenario | str | Path,
    out: str | Path = "results",
    seeds: Sequence[int] | None = None,
    only: str | Sequence[str] | None = None,
    device: str = "auto",
    quiet: bool = True,
    *,
    scale: str | None = None,
    overrides: Sequence[str] = (),
    data_dir: str | Path = "data",
    download: bool = False,
    executor: str = "auto",
    client_state: str = "device",
    threads: int = DEFAULT_THREADS,
    chunk: int | None = None,
    compile_step: str = "auto",
    population: str | int = "auto",
    log: str | Sequence[str] = (),
    console: Console | None = None,
) -> Results:
    """Run every (algorithm, seed) of ``scenario`` (a :class:`Scenario` or a file, read at ``scale`` with
    ``overrides``) into the store at ``out``, exactly as ``fedbench run`` does with the same options:
    same run ids, finished runs skipped, interrupted ones resumed from their checkpoint. ``seeds``
    replaces the scenario's seeds; ``only`` keeps these algorithm labels or names (a list or
    ``"a,b"``). The run options (``device`` ... ``population``) are those of
    :class:`~fedbench.options.RunOptions`, checked as the CLI checks them (ValueError naming the
    option); a dataset not under ``data_dir`` (that ``download`` would not fetch) raises
    FileNotFoundError before the store is touched. A failed or diverged run is recorded with its
    status and error, as by the CLI. ``log``: trackers each run is copied to when it ends, as ``--log``
    (``"tensorboard"``, ``["tensorboard:tb", "mlflow"]``; :mod:`fedbench.trackers`). Returns the
    :class:`Results` of this scenario in that store."""
    from fedbench.data import missing, missing_line
    from fedbench.engine.preflight import preflight
    from fedbench.options import RunOptions
    from fedbench.runs import check_out, run_scenario, selected  # the CLI's own checks: both refuse the same input
    from fedbench.trackers import parse_log

    options = RunOptions(
        device,
        Path(data_dir),
        download,
        executor,
        chunk,
        compile_step,
        client_state,
        threads,
        str(population),
        parse_log(log),
    )
    sc = _as_scenario(scenario, scale, overrides)
    seed_list = None if seeds is None else _seed_list(seeds)
    labels = only.split(",") if isinstance(only, str) else (list(only) if only is not None else None)
    absent = missing([s.dataset for s in selected(sc, labels)], options.data_dir, options.download)
    if absent:
        raise FileNotFoundError(missing_line(absent))
    preflight(sc.runs, device, Path(data_dir))
    check_out(Path(out))
    run_scenario(sc, Path(out), options, seed_list, labels, console, quiet)
    return Results(out, sc.name)


def open_store(out: str | Path = "results", scenario: str | None = None) -> Results:
    """The :class:`Results` of an existing store (all its scenarios, or ``scenario``), read-only:
    FileNotFoundError naming the file when ``out`` holds no store (nothing is created)."""
    return Results(out, scenario)


def _as_scenario(source: Scenario | str | Path, scale: str | None, overrides: Sequence[str]) -> Scenario:
    """A :class:`Scenario` as given, or the file ``source`` read at ``scale`` with ``overrides``."""
    if isinstance(source, (str, Path)):
        return load(source, scale, overrides)
    if scale is not None or overrides:
        raise ValueError(
            "scale and overrides apply to a scenario file; for a Scenario object, build it with "
            "fedbench.api.load(path, scale, overrides) or scenario(raw, scale, overrides)"
        )
    return source


def _seed_list(seeds: Sequence[int]) -> list[int]:
    """``seeds`` as distinct non-negative integers (as ``--seeds`` takes them), else ValueError."""
    values = list(seeds)
    valid = all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s <= MAX_SEED for s in values)
    if not values or not valid or len(set(values)) != len(values):
        raise ValueError(f"seeds: expected distinct integers from 0 to 2⁶³ − 1, like [0, 1, 2]; got {seeds!r}")
    return values


class Results:
    """The runs of one results store (``<out>/fedbench.sqlite``), all its scenarios or one; every
    method reads the store again, so a store that another process is filling shows its progress."""

    def __init__(self, out: str | Path = "results", scenario: str | None = None) -> None:
        """Open the store read-only; FileNotFoundError if ``out`` holds none, ValueError if ``scenario``
        has no runs there (the message lists the scenarios it has)."""
        self.out = Path(out)
        self.store = ResultsStore(self.out, read_only=True)
        self.scenario = scenario
        if scenario is not None:
            scenario_names(self.store, scenario)

    def __repr__(self) -> str:
        runs = self.runs
        counts = ", ".join(f"{n} {s}" for s, n in runs["status"].value_counts().items())
        where = "" if self.scenario is None else f", scenario={self.scenario!r}"
        return f"Results({str(self.out)!r}{where}: {len(runs)} run(s){', ' + counts if counts else ''})"

    @property
    def runs(self) -> pd.DataFrame:
        """One row per run in creation order: run_id, scenario, algorithm (its label), seed, status,
        error, scale, the spec, the paper cell and the versions it trained with (as :meth:`ResultsStore.runs`;
        stale specs left out)."""
        return self.store.runs(self.scenario)

    def scenarios(self) -> list[str]:
        """The scenario names these results cover, in creation order."""
        return scenario_names(self.store, self.scenario)

    def rounds(self, scenario: str | None = None, extra: bool | Sequence[str] = False) -> pd.DataFrame:
        """One row per (run, round): run_id, scenario, algorithm, seed, status, round and the metric
        columns (NaN where not recorded). ``extra=True`` adds the round's extra logs as dicts; a list
        of dotted paths (``["cflag.Gamma"]``) adds one number column each instead."""
        runs = self._runs(scenario)
        rows = runs[RUN_COLUMNS].merge(self.store.metrics(runs["run_id"]), on="run_id")
        if extra is True:
            rows["extra"] = [None if e is None else json.loads(e) for e in rows["extra"]]
            return rows
        if extra:
            from fedbench.report.plots import extra_values

            for path in extra:
                rows[path] = extra_values(rows["extra"], path)
        return rows.drop(columns="extra")

    def summary(self, scenario: str | None = None) -> pd.DataFrame:
        """The table ``fedbench table`` prints, one row per (scenario, algorithm): top and final
        accuracy (fractions, mean and std over seeds), status counts, rounds and bits to each target
        (:func:`fedbench.report.tables.summarize`; empty when there are no runs)."""
        runs = self._runs(scenario)
        return pd.DataFrame() if runs.empty else summarize(runs, self.store.metrics(runs["run_id"]))

    def curves(self, metric: str = "test_acc", x: str = "round", scenario: str | None = None) -> pd.DataFrame:
        """The curves ``fedbench plot`` draws, as a table: per scenario, algorithm and round, the mean x
        on each axis (round, bits, uplink), the mean and std (ddof=1, NaN for one seed) of ``metric`` over
        the seeds present and how many, in the stored units (test_acc as a fraction). ``metric``: a stored
        metric or a dotted extra-log path; ``x`` (round, bits, uplink) keeps the rows the axis has."""
        from fedbench.report.plots import UnknownMetric, curves

        runs, parts, missing = self._runs(scenario), [], []
        for name, part in runs.groupby("scenario", sort=False):
            try:
                table = curves(part, self.store.metrics(part["run_id"]), x, metric, as_plotted=False)
            except UnknownMetric as exc:  # a scenario that does not log this extra path, as plot_curves skips it
                missing.append(exc)
                continue
            parts.append(table.assign(scenario=name))
        if missing and not parts:
            raise missing[0]
        columns = ["scenario", "algorithm", "round", "bits", "uplink", "mean", "std", "seeds"]
        return pd.concat(parts, ignore_index=True)[columns] if parts else pd.DataFrame(columns=columns)

    def plot(
        self,
        x: str = "round",
        metric: str = "test_acc",
        algorithms: Sequence[str] | None = None,
        name: str | None = None,
        figures_dir: str | Path = "figures",
        scenario: str | None = None,
    ) -> list[Path]:
        """Write the PNG figures ``fedbench plot --x X --metric M`` writes (one per scenario) and return
        their paths (:func:`fedbench.report.plots.plot_curves`)."""
        from fedbench.report.plots import plot_curves

        which = scenario if scenario is not None else self.scenario
        return plot_curves(self.store, Path(figures_dir), which, x, metric, list(algorithms or []) or None, name)

    def export(self, to: str, dest: str | None = None, scenario: str | None = None) -> list[str]:
        """Copy these runs to trackers, as ``fedbench export --to TO [--dest DEST]`` (``to``: tensorboard,
        mlflow, ``tensorboard:DIR``, or several comma-separated); one line per tracker of what it wrote."""
        from fedbench.trackers import export, export_targets

        which = scenario if scenario is not None else self.scenario
        targets = export_targets(to, dest)
        self._runs(which)
        return [r.line() for r in export(self.store, targets, None, which)]

    def _runs(self, scenario: str | None) -> pd.DataFrame:
        """The runs of ``scenario`` (default: these results'); ValueError naming the store's scenarios
        if it has none there."""
        which = scenario if scenario is not None else self.scenario
        if which is not None:
            scenario_names(self.store, which)
        return self.store.runs(which)
