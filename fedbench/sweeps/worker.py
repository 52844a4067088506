"""One sweep run in a worker process, recorded into the results store or returned to the driver.

The local executor's workers call :func:`execute` on the output folder's store itself (SQLite in
WAL mode, safe across processes), so an interrupted run resumes from its checkpoint next time.
Ray's workers may sit on other machines: :func:`compute` runs into a :class:`RecordingStore` in
memory and returns a :class:`RunResult`, which the driver — the only writer — :func:`commit`\\ s.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from fedbench.engine.population import PopulationRun, execute_population, group_runs, population_size
from fedbench.engine.runner import RunOutcome, execute_run
from fedbench.engine.setup import DataCache, resolve_device
from fedbench.options import RunOptions
from fedbench.scenario import run_record
from fedbench.store import ResultsStore, RunRecord, extra_to_json
from fedbench.sweeps.grid import SweepRun

_CACHES: dict[tuple[str, bool, str], DataCache] = {}  # per process: datasets stay loaded between runs


def data_cache(options: RunOptions, device: str) -> DataCache:
    key = (str(options.data_dir), options.download, device)
    if key not in _CACHES:
        _CACHES[key] = DataCache(options.data_dir, options.download, resolve_device(device))
    return _CACHES[key]


def execute(run: SweepRun, store: Any, options: RunOptions, device: str | None = None) -> RunOutcome:
    """:func:`~fedbench.engine.runner.execute_run` on ``store`` (a :class:`ResultsStore` or a
    :class:`RecordingStore`) as ``options`` say, on ``device`` (default ``options.device``; a worker
    holding one GPU passes its own); never raises for a failing run."""
    cache = data_cache(options, device or options.device)
    return execute_run(run.spec, run.seed, store, cache, run.scenario_hash, None, options)


def execute_group(runs: list[SweepRun], store: Any, options: RunOptions, device: str | None = None) -> list[RunOutcome]:
    """:func:`execute` for each of ``runs``, trained together as one population when there are several
    (:func:`~fedbench.engine.population.execute_population`); the outcomes in order."""
    if len(runs) == 1:
        return [execute(runs[0], store, options, device)]
    cache = data_cache(options, device or options.device)
    members = [PopulationRun(r.spec, r.seed, r.scenario_hash) for r in runs]
    return execute_population(members, store, cache, options)


def population_groups(
    runs: list[SweepRun], options: RunOptions, device: torch.device
) -> tuple[list[list[SweepRun]], str]:
    """``runs`` in the populations ``--population`` forms on ``device`` (:func:`~fedbench.engine.population.group_runs`;
    a run alone is a group of one), and why."""
    size, why = population_size(options, device)
    return [[runs[i] for i in group] for group in group_runs([r.spec for r in runs], size, [r.seed for r in runs])], why


@dataclass
class RunResult:
    """What a remote worker returns: the run's record, its rounds (metrics, extra logs as JSON), final status."""

    record: RunRecord
    outcome: RunOutcome
    error: str | None = None  # the store's error text (a failed run's traceback)
    rounds: dict[int, tuple[dict[str, float | None], str | None]] = field(default_factory=dict)


class RoundRows:
    """``record_rounds`` as one ``record_round`` per row (the in-memory stores keep no transactions)."""

    def record_round(
        self, run_id: str, round: int, metrics: Mapping[str, Any], extra: Mapping[str, Any] | None = None
    ) -> None:
        raise NotImplementedError

    def record_rounds(self, rows: list[tuple[str, int, Mapping[str, Any], Mapping[str, Any] | None]]) -> None:
        for run_id, round, metrics, extra in rows:
            self.record_round(run_id, round, metrics, extra)


class RecordingStore(RoundRows):
    """The part of :class:`ResultsStore` that ``execute_run`` uses, kept in memory; checkpoints go to
    a private folder (a run retried elsewhere starts over)."""

    def __init__(self, checkpoint_dir: Path):
        self.checkpoint_dir = checkpoint_dir
        self.record: RunRecord | None = None
        self.error: str | None = None
        self.rounds: dict[int, tuple[dict[str, float | None], str | None]] = {}

    def status(self, run_id: str) -> None:
        return None  # the driver submits only runs that are not done

    def claim(self, run_id: str, holder: str, **_: Any) -> None:
        return None  # one in-memory record per task: the driver holds the only copy

    def renew(self, run_id: str, holder: str) -> None:
        pass

    def release(self, run_id: str, holder: str) -> None:
        pass

    def start_run(self, record: RunRecord) -> None:
        self.record = record

    def checkpoint_path(self, run_id: str) -> Path:
        return self.checkpoint_dir / f"{run_id}.pt"

    def last_round(self, run_id: str) -> int | None:
        return max(self.rounds, default=None)

    def truncate_after(self, run_id: str, round: int) -> None:
        self.rounds = {t: r for t, r in self.rounds.items() if t <= round}

    def record_round(
        self, run_id: str, round: int, metrics: Mapping[str, Any], extra: Mapping[str, Any] | None = None
    ) -> None:
        values = {k: None if v is None else float(v) for k, v in metrics.items()}
        self.rounds[round] = (values, extra_to_json(extra))

    def finish_run(self, run_id: str, status: str, error: str | None = None) -> None:
        self.error = error


class RecordingStores(RoundRows):
    """One :class:`RecordingStore` per run, behind the store interface a population uses (every call
    names its run); checkpoints go to one private folder."""

    def __init__(self, checkpoint_dir: Path):
        self.checkpoint_dir = checkpoint_dir
        self.stores: dict[str, RecordingStore] = {}

    def of(self, run_id: str) -> RecordingStore:
        return self.stores.setdefault(run_id, RecordingStore(self.checkpoint_dir))

    def status(self, run_id: str) -> None:
        return None

    def claim(self, run_id: str, holder: str, **_: Any) -> None:
        return None

    def renew(self, run_id: str, holder: str) -> None:
        pass

    def release(self, run_id: str, holder: str) -> None:
        pass

    def start_run(self, record: RunRecord) -> None:
        self.of(record.run_id).start_run(record)

    def checkpoint_path(self, run_id: str) -> Path:
        return self.checkpoint_dir / f"{run_id}.pt"

    def last_round(self, run_id: str) -> int | None:
        return self.of(run_id).last_round(run_id)

    def truncate_after(self, run_id: str, round: int) -> None:
        self.of(run_id).truncate_after(run_id, round)

    def record_round(
        self, run_id: str, round: int, metrics: Mapping[str, Any], extra: Mapping[str, Any] | None = None
    ) -> None:
        self.of(run_id).record_round(run_id, round, metrics, extra)

    def finish_run(self, run_id: str, status: str, error: str | None = None) -> None:
        self.of(run_id).finish_run(run_id, status, error)


def compute_group(runs: list[SweepRun], options: RunOptions, device: str | None = None) -> list[RunResult]:
    """:func:`compute` for each of ``runs``, trained together as one population (the Ray task of a
    population, :func:`execute_group`); the results in order."""
    if len(runs) == 1:
        return [compute(runs[0], options, device)]
    with tempfile.TemporaryDirectory(prefix="fedbench-population-") as tmp:
        stores = RecordingStores(Path(tmp))
        outcomes = execute_group(runs, stores, options, device)
    results = []
    for run, outcome in zip(runs, outcomes):
        own = stores.of(run.run_id)
        results.append(RunResult(own.record or record_of(run), outcome, own.error, own.rounds))
    return results


def compute(run: SweepRun, options: RunOptions, device: str | None = None) -> RunResult:
    """Execute a run in memory and return everything the driver records (the Ray task)."""
    with tempfile.TemporaryDirectory(prefix="fedbench-run-") as tmp:
        store = RecordingStore(Path(tmp))
        outcome = execute(run, store, options, device)
    return RunResult(store.record or record_of(run), outcome, store.error, store.rounds)


def record_of(run: SweepRun) -> RunRecord:
    return run_record(run.spec, run.seed, run.scenario_hash)


def failed_result(run: SweepRun, error: str) -> RunResult:
    """The result of a run whose task never returned (its worker died and the retries are spent)."""
    return RunResult(record_of(run), RunOutcome(run.run_id, "failed", error), error)


def commit(store: ResultsStore, result: RunResult) -> RunOutcome:
    """Write a returned run into the store. Returned rounds replace the run's rows, and its
    checkpoint (left by an earlier, interrupted local attempt) is removed; a result without
    rounds only sets the status, keeping rows and checkpoint for a later resume."""
    run_id = result.record.run_id
    store.start_run(result.record)
    if result.rounds:
        store.truncate_after(run_id, 0)
        for t in sorted(result.rounds):
            metrics, extra = result.rounds[t]
            store.record_round(run_id, t, metrics, None if extra is None else json.loads(extra))
        store.checkpoint_path(run_id).unlink(missing_ok=True)
    store.finish_run(run_id, result.outcome.status, result.error)
    return result.outcome


def record_failure(store: ResultsStore, run: SweepRun, error: str) -> RunOutcome:
    """Mark a run failed whose worker never reported back (its rows and checkpoint stay)."""
    return commit(store, failed_result(run, error))
