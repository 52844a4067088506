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

import hashlib
import importlib.util
import json
import math
import os
import re
import shutil
import sys
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedbench.store import METRIC_COLUMNS

if TYPE_CHECKING:
    from rich.console import Console

    from fedbench.store import ResultsStore

TRACKERS: dict[str, tuple[str, ...]] = {  # target → the modules it needs (its pip extra has the same name)
    "tensorboard": ("tensorboard",),
    "mlflow": ("mlflow",),
}
SQLITE_MODULES = ("sqlalchemy", "alembic")  # MLflow's SQLite store (the default URI) needs these too
FORMS = "tensorboard[:DIR] or mlflow[:URI]"
MARKER = ".fedbench-export.json"  # in a TensorBoard run folder: what it was written from
Param = str | int | float | bool


@dataclass(frozen=True)
class LogTarget:
    """One tracker to write to: ``kind`` (tensorboard, mlflow) and its ``dest`` (a folder, a tracking
    URI; None: the default under the store's folder, :meth:`where`)."""

    kind: str
    dest: str | None = None

    def __str__(self) -> str:
        return self.kind if self.dest is None else f"{self.kind}:{self.dest}"

    def where(self, out: Path) -> str:
        """The folder (tensorboard) or tracking URI (mlflow) for the store in ``out``."""
        if self.kind == "tensorboard":
            return self.dest if self.dest is not None else str(out / "tensorboard")
        dest = self.dest if self.dest is not None else str(out / "mlflow.db")
        return dest if _has_scheme(dest) else "sqlite:///" + str(Path(dest).absolute())


def _has_scheme(uri: str) -> bool:
    """``http://...``, ``sqlite:///...``, ``databricks``: a tracking URI as MLflow reads it, not a path."""
    return bool(re.match(r"^[A-Za-z][A-Za-z0-9+.-]+://", uri)) or uri.split(":")[0] in ("databricks", "uc")


def _installed(module: str) -> bool:
    """Whether ``module`` can be imported (found without importing it; None in sys.modules: absent)."""
    if module in sys.modules:
        return sys.modules[module] is not None
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def check_installed(target: LogTarget, option: str = "--log") -> None:
    """ValueError (one line naming ``option`` and the pip extra) unless the target's library is installed."""
    needs = TRACKERS[target.kind]
    if target.kind == "mlflow" and target.where(Path(".")).startswith("sqlite:"):
        needs = (*needs, *SQLITE_MODULES)
    absent = [m for m in needs if not _installed(m)]
    if absent:
        raise ValueError(f"{option} {target}: {', '.join(absent)} not installed; pip install 'fedbench[{target.kind}]'")


def make_target(kind: str, dest: str | None = None, option: str = "--log") -> LogTarget:
    """A checked :class:`LogTarget` (known kind, non-empty dest, library installed); else ValueError
    with one line naming ``option``."""
    shown = kind if dest is None else f"{kind}:{dest}"
    if kind not in TRACKERS:
        raise ValueError(f"{option} {shown}: expected {FORMS}")
    if dest is not None and not dest.strip():
        raise ValueError(f"{option} {shown}: empty {'DIR' if kind == 'tensorboard' else 'URI'} after the colon")
    target = LogTarget(kind, dest)
    check_installed(target, option)
    return target


def parse_log(
    values: str | LogTarget | Iterable[str | LogTarget] | None, option: str = "--log"
) -> tuple[LogTarget, ...]:
    """``--log`` as given (repeated, or comma-separated: ``tensorboard,mlflow:http://host:5000``) as
    checked targets, duplicates dropped; ValueError with one line naming the option and the value."""
    if values is None:
        return ()
    items = [values] if isinstance(values, (str, LogTarget)) else list(values)
    targets: list[LogTarget] = []
    for item in items:
        if isinstance(item, LogTarget):
            parts = [make_target(item.kind, item.dest, option)]
        elif isinstance(item, str):
            parts = [_target(p.strip(), option) for p in item.split(",")]
        else:
            raise ValueError(f"{option}: expected {FORMS}, got {item!r}")
        targets += [t for t in parts if t not in targets]
    return tuple(targets)


def export_targets(to: str, dest: str | None = None) -> tuple[LogTarget, ...]:
    """``fedbench export --to TO [--dest DEST]`` as checked targets (``--dest`` goes with one bare kind)."""
    if dest is None:
        return parse_log(to, "--to")
    if "," in to or ":" in to:
        raise ValueError(f"--dest {dest}: goes with one tracker named without a destination, got --to {to}")
    return (make_target(to, dest, "--to"),)


def _target(text: str, option: str) -> LogTarget:
    kind, colon, dest = text.partition(":")
    if kind in ("tensorboard", "mlflow") and colon:
        return make_target(kind, dest, option)
    return make_target(text, None, option)


DESCRIPTIONS = {
    "tensorboard": ("<out>/tensorboard", "event files, a folder per run <scenario>/<label>/<run id>; HParams"),
    "mlflow": ("sqlite:///<out>/mlflow.db", "an experiment per scenario, a run per run (tag fedbench.run_id)"),
}


def tracker_rows() -> list[tuple[str, ...]]:
    """``fedbench list trackers``: each target, its default destination, what it holds, and whether it is installed."""
    rows: list[tuple[str, ...]] = [("--log / --to", "default destination", "what it holds", "installed")]
    for kind, (where, what) in DESCRIPTIONS.items():
        needs = (*TRACKERS[kind], *(SQLITE_MODULES if kind == "mlflow" else ()))
        absent = [m for m in needs if not _installed(m)]
        state = "yes" if not absent else f"no: pip install 'fedbench[{kind}]'"
        rows.append((f"{kind}[:{'DIR' if kind == 'tensorboard' else 'URI'}]", where, what, state))
    return rows


# -- what the store holds for a run, as trackers receive it --


@dataclass(frozen=True)
class RunExport:
    """One run of the store, ready for a tracker: identity, hyper-parameters and the scalars per round."""

    run_id: str
    scenario: str
    algorithm: str
    seed: int
    status: str
    scenario_hash: str
    spec_hash: str
    spec_json: str
    params: dict[str, Param]
    rounds: list[tuple[int, dict[str, float]]] = field(default_factory=list)

    def digest(self) -> str:
        """A hash of everything a tracker receives: equal digests, nothing to rewrite."""
        body = json.dumps([self.status, self.scenario_hash, self.params, self.rounds], sort_keys=True)
        return hashlib.sha256(body.encode()).hexdigest()

    @property
    def last_round(self) -> int:
        return self.rounds[-1][0] if self.rounds else 0

    def tags(self) -> dict[str, str]:
        """The ``fedbench.*`` identity of the run (MLflow tags)."""
        return {
            "fedbench.run_id": self.run_id,
            "fedbench.scenario": self.scenario,
            "fedbench.algorithm": self.algorithm,
            "fedbench.seed": str(self.seed),
            "fedbench.spec_hash": self.spec_hash,
            "fedbench.scenario_hash": self.scenario_hash,
            "fedbench.status": self.status,
        }


def numbers(value: Any, prefix: str = "") -> Iterator[tuple[str, float]]:
    """The numbers of an extra log (nested mappings) under their dotted paths; text, lists, booleans
    and nulls are left out."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield from numbers(item, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield prefix, float(value)


def flatten(value: Any, prefix: str = "") -> Iterator[tuple[str, Param]]:
    """A resolved spec as dotted keys; lists and nulls as JSON text."""
    if isinstance(value, Mapping) and (value or not prefix):
        for key, item in value.items():
            yield from flatten(item, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(value, (str, int, float, bool)):
        yield prefix, value
    else:
        yield prefix, json.dumps(value, sort_keys=True)


def round_scalars(row: Mapping[str, Any]) -> dict[str, float]:
    """One stored round's scalars: the metric columns that are not NULL, then the extra logs' numbers."""
    values = {c: float(row[c]) for c in METRIC_COLUMNS if row[c] is not None and not math.isnan(row[c])}
    extra = json.loads(row["extra"]) if row["extra"] else {}
    values.update((k, v) for k, v in numbers(extra) if k not in values)
    return values


def read_runs(
    store: ResultsStore, run_ids: Sequence[str] | None = None, scenario: str | None = None
) -> list[RunExport]:
    """The runs ``run_ids`` (default: the store's current runs, of ``scenario`` if given), in store order,
    with their rounds."""
    runs = store.runs(scenario, include_stale=run_ids is not None)
    if run_ids is not None:
        runs = runs[runs["run_id"].isin(list(run_ids))]
    metrics = store.metrics(runs["run_id"])
    by_run: dict[str, list[tuple[int, dict[str, float]]]] = {}
    rows: list[dict[str, Any]] = metrics.to_dict("records")  # type: ignore[assignment]  # str column names
    for row in rows:
        by_run.setdefault(row["run_id"], []).append((int(row["round"]), round_scalars(row)))
    out = []
    for r in runs.to_dict("records"):
        params: dict[str, Param] = dict(flatten(json.loads(r["spec_json"])))
        params.update(
            seed=int(r["seed"]), run_id=r["run_id"], spec_hash=r["spec_hash"], scenario_hash=r["scenario_hash"]
        )
        out.append(
            RunExport(
                r["run_id"],
                r["scenario"],
                r["algorithm"],
                int(r["seed"]),
                r["status"],
                r["scenario_hash"],
                r["spec_hash"],
                r["spec_json"],
                params,
                by_run.get(r["run_id"], []),
            )
        )
    return out


# -- the writers: one per target, each write idempotent --


def _safe(name: str) -> str:
    """A folder name for a scenario or label (characters other than letters, digits, ``._+=-`` → ``_``)."""
    return re.sub(r"[^A-Za-z0-9._+=-]", "_", name) or "_"


class TensorBoardWriter:
    """Event files under ``logdir``, one folder per run: ``<scenario>/<label>/<run id>``."""

    def __init__(self, logdir: str | Path) -> None:
        self.logdir = Path(logdir)

    def run_dir(self, run: RunExport) -> Path:
        return self.logdir / _safe(run.scenario) / _safe(run.algorithm) / run.run_id

    def write(self, run: RunExport) -> bool:
        """Write the run's folder unless it holds these rows already (False then)."""
        folder, digest = self.run_dir(run), run.digest()
        marker = folder / MARKER
        if marker.is_file() and json.loads(marker.read_text()).get("digest") == digest:
            return False
        staging = folder.with_name(f".{folder.name}.{os.getpid()}.tmp")
        shutil.rmtree(staging, ignore_errors=True)
        self._events(run, staging)
        (staging / MARKER).write_text(json.dumps({"run_id": run.run_id, "rounds": run.last_round, "digest": digest}))
        shutil.rmtree(folder, ignore_errors=True)
        try:
            staging.rename(folder)
        except OSError:  # another process wrote the folder meanwhile, from the same store
            shutil.rmtree(staging, ignore_errors=True)
        return True

    @staticmethod
    def _events(run: RunExport, folder: Path) -> None:
        """One event file: the scalars per round, the hyper-parameters (HParams plugin) and the spec as text."""
        from torch.utils.tensorboard import SummaryWriter
        from torch.utils.tensorboard.summary import hparams

        writer = SummaryWriter(str(folder))
        try:
            for round_, values in run.rounds:
                for tag, value in values.items():
                    writer.add_scalar(tag, value, global_step=round_)
            last = run.rounds[-1][1] if run.rounds else {}
            final = {c: last[c] for c in ("test_acc", "test_loss", "train_loss") if c in last}
            events = writer._get_file_writer()  # add_hparams' own way: the summaries into this run's file
            for summary in hparams(run.params, final):
                events.add_summary(summary)
            writer.add_text("fedbench/spec", f"```json\n{json.dumps(json.loads(run.spec_json), indent=2)}\n```")
            writer.add_text("fedbench/scenario_hash", run.scenario_hash)
        finally:
            writer.close()


MLFLOW_STATUS = {"finished": "FINISHED", "diverged": "FAILED", "failed": "FAILED", "running": "KILLED"}
MLFLOW_BATCH = 1000  # metrics per log_batch call (MLflow's limit)
MLFLOW_PARAMS = 100  # params per log_batch call (MLflow's limit)


def mlflow_key(name: str) -> str:
    """A metric or param name as MLflow accepts it (letters, digits, ``_-. :/``; others → ``_``)."""
    return re.sub(r"[^A-Za-z0-9_\-. :/]", "_", name)


class MlflowWriter:
    """An MLflow tracking store: experiment = scenario name, one run per fedbench run (tag ``fedbench.run_id``)."""

    def __init__(self, uri: str) -> None:
        import logging

        from mlflow.tracking import MlflowClient

        for name in ("alembic", "mlflow"):  # the SQLite store's first use prints its migrations otherwise
            logging.getLogger(name).setLevel(logging.WARNING)
        self.uri = uri
        self.client = MlflowClient(tracking_uri=uri)
        self._experiments: dict[str, str] = {}

    def experiment(self, name: str) -> str:
        """The id of the experiment named ``name``, created if missing (another process may create it first)."""
        if name not in self._experiments:
            from mlflow.exceptions import MlflowException

            found = self.client.get_experiment_by_name(name)
            if found is None:
                try:
                    self._experiments[name] = self.client.create_experiment(name)
                except MlflowException:
                    found = self.client.get_experiment_by_name(name)
                    if found is None:
                        raise
            if found is not None:
                self._experiments[name] = found.experiment_id
        return self._experiments[name]

    def find(self, run: RunExport) -> Any:
        """The MLflow run of ``run`` (by its ``fedbench.run_id`` tag), or None."""
        found = self.client.search_runs(
            [self.experiment(run.scenario)], filter_string=f"tags.`fedbench.run_id` = '{run.run_id}'", max_results=1
        )
        return found[0] if found else None

    def write(self, run: RunExport) -> bool:
        """Log the rounds MLflow lacks, the params once and the tags; False when it was up to date."""
        from mlflow.entities import Metric, Param as MlflowParam, RunTag

        existing = self.find(run)
        if existing is None:
            mlrun = self.client.create_run(
                self.experiment(run.scenario), run_name=f"{run.algorithm} seed {run.seed}", tags=run.tags()
            )
            run_id, done = mlrun.info.run_id, 0
            params = [MlflowParam(mlflow_key(k), str(v)[:6000]) for k, v in run.params.items()]
            for i in range(0, len(params), MLFLOW_PARAMS):
                self.client.log_batch(run_id, params=params[i : i + MLFLOW_PARAMS])
        else:
            run_id, tags = existing.info.run_id, existing.data.tags
            done = int(tags.get("fedbench.last_round", 0))
            same = {k: tags.get(k) for k in run.tags()} == run.tags()
            if same and done >= run.last_round:
                return False
        now = int(time.time() * 1000)
        metrics = [
            Metric(mlflow_key(k), v, now, round_)
            for round_, values in run.rounds
            if round_ > done
            for k, v in values.items()
        ]
        for i in range(0, len(metrics), MLFLOW_BATCH):
            self.client.log_batch(run_id, metrics=metrics[i : i + MLFLOW_BATCH])
        tags = {**run.tags(), "fedbench.last_round": str(max(done, run.last_round))}
        self.client.log_batch(run_id, tags=[RunTag(k, v) for k, v in tags.items()])
        status = MLFLOW_STATUS[run.status]
        if status == "KILLED":
            self.client.update_run(run_id, status=status)
        else:
            self.client.set_terminated(run_id, status=status)
        return True


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


def export(
    store: ResultsStore, targets: Sequence[LogTarget], run_ids: Sequence[str] | None = None, scenario: str | None = None
) -> list[Exported]:
    """Write the runs ``run_ids`` (default: the store's current runs, of ``scenario`` if given) to each
    target; runs a target holds up to date are left as they are."""
    runs = read_runs(store, run_ids, scenario)
    done = []
    for target in targets:
        writer, result = open_writer(target, store.out_dir), Exported(target, target.where(store.out_dir))
        for run in runs:
            if writer.write(run):
                result.written += 1
            else:
                result.current += 1
        done.append(result)
    return done


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
        from fedbench.store import ResultsStore

        runs = read_runs(ResultsStore(self.out, read_only=True), wanted)
        for target in self.targets:
            try:
                if target not in self._writers:
                    self._writers[target] = open_writer(target, self.out)
                for run in runs:
                    if self._writers[target].write(run):
                        self.results[target].written += 1
                    else:
                        self.results[target].current += 1
            except Exception as exc:  # noqa: BLE001 (any tracker failure: the store holds the runs)
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
