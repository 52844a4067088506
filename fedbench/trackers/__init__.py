"""Experiment trackers: the runs of a results store, copied to TensorBoard or MLflow (issue 28 item 4).

The store is the source of truth; a tracker only ever receives what the store holds, written from it
by :func:`export` (``fedbench export --to ...``), or by ``--log`` on run, sweep, tune and reproduce,
which exports each run from the store once it ends (in the command's own process: a sweep's worker
processes never write to a tracker, so no run is written twice). Nothing is added to a round.

    --log tensorboard[:DIR]   DIR default <out>/tensorboard; one folder per run, <scenario>/<label>/<run id>
    --log mlflow[:URI]        URI default sqlite:///<out>/mlflow.db (a plain path is a SQLite file);
                              one experiment per scenario, one MLflow run per fedbench run

Each run gets, per round (step = round), every number the store has for it: the metric columns
(:data:`fedbench.store.METRIC_COLUMNS`, NULL left out) and every number of the round's extra logs
under its dotted path (``partition.label_skew_tv``); and once, its hyper-parameters: the resolved run
spec flattened to dotted keys (lists and nulls as JSON), the seed, run id, spec hash and scenario hash
(TensorBoard: the HParams plugin, and the spec as text; MLflow: params, with the hashes, status and
run id also as ``fedbench.*`` tags).

Exports are idempotent. TensorBoard: a run's folder is rewritten whole (written beside it, then
swapped in) unless its ``.fedbench-export.json`` says it holds the store's rows already. MLflow: the
run is found by its ``fedbench.run_id`` tag and receives only the rounds after its
``fedbench.last_round`` tag (a resumed run's rounds are the same numbers; they are not logged twice).

Both libraries are optional (``pip install 'fedbench[tensorboard]'``, ``'fedbench[mlflow]'``) and
imported only when a run is written; :func:`parse_log` refuses a target whose library is absent.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fedbench.store import ResultsStore
from fedbench.trackers.mlflow_writer import MlflowWriter
from fedbench.trackers.rows import RunExport, read_runs
from fedbench.trackers.targets import LogTarget, export_targets, make_target, parse_log, tracker_rows
from fedbench.trackers.tensorboard_writer import MARKER, TensorBoardWriter

if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "MARKER",
    "Exported",
    "LogTarget",
    "RunExport",
    "RunLogger",
    "export",
    "export_targets",
    "make_target",
    "parse_log",
    "read_runs",
    "tracker_rows",
]


def open_writer(target: LogTarget, out: Path) -> TensorBoardWriter | MlflowWriter:
    """The writer of ``target`` for the store in ``out``."""
    where = target.where(out)
    return TensorBoardWriter(where) if target.kind == "tensorboard" else MlflowWriter(where)


@dataclass
class Exported:
    """What an export did for one target."""

    target: LogTarget
    where: str
    written: int = 0  # runs written or updated
    current: int = 0  # runs the tracker held up to date already

    def line(self) -> str:
        return f"{self.target.kind} {self.where}: {self.written} run(s) written, {self.current} up to date"

    def add(self, writer: TensorBoardWriter | MlflowWriter, runs: Sequence[RunExport]) -> None:
        """Write ``runs`` with ``writer``, counting those written and those it held up to date."""
        for run in runs:
            if writer.write(run):
                self.written += 1
            else:
                self.current += 1


def export(
    store: ResultsStore, targets: Sequence[LogTarget], run_ids: Sequence[str] | None = None, scenario: str | None = None
) -> list[Exported]:
    """Write the runs ``run_ids`` (default: the store's current runs, of ``scenario`` if given) to each
    target; runs a target holds up to date are left as they are."""
    runs = read_runs(store, run_ids, scenario)
    results = [Exported(t, t.where(store.out_dir)) for t in targets]
    for result in results:
        result.add(open_writer(result.target, store.out_dir), runs)
    return results


class RunLogger:
    """``--log``: exports runs from the store as they end, in the command's own process. A tracker that
    fails (a server down) costs one yellow line and never the runs: ``fedbench export`` redoes it."""

    def __init__(self, out: Path, targets: Sequence[LogTarget], console: Console | None = None) -> None:
        self.out, self.targets, self.console = Path(out), tuple(targets), console
        self._writers: dict[LogTarget, TensorBoardWriter | MlflowWriter] = {}
        self.results = {t: Exported(t, t.where(self.out)) for t in self.targets}

    def __call__(self, run_ids: Iterable[str]) -> None:
        """Export the runs ``run_ids`` (those the store holds) to every target."""
        wanted = list(run_ids)
        if not self.targets or not wanted:
            return
        runs = read_runs(ResultsStore(self.out, read_only=True), wanted)
        for target in self.targets:
            try:
                if target not in self._writers:
                    self._writers[target] = open_writer(target, self.out)
                self.results[target].add(self._writers[target], runs)
            except Exception as exc:  # any tracker failure (a server down): the store holds the runs
                if self.console is not None:
                    self.console.print(
                        f"--log {target}: could not write ({type(exc).__name__}: {exc}); the runs are in the store: "
                        f"fedbench export --to {target.kind} --out {self.out} writes them later",
                        style="yellow",
                        soft_wrap=True,
                        highlight=False,
                        markup=False,
                    )

    def lines(self) -> list[str]:
        """One line per target: where it logged and how many runs."""
        return [f"logged to {r.line()}" for r in self.results.values()]
