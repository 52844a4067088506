"""The results database: one SQLite file per output folder, plus the checkpoint folder.

``<out>/fedbench.sqlite`` holds a ``runs`` table (one row per (run spec, seed)) and a ``metrics``
table (one row per recorded round). SQLite runs in WAL mode with ``synchronous=NORMAL`` and every
write commits at once, so a run killed at any moment keeps every round it recorded (an OS crash
or power loss may still drop the last few commits; a killed process never does). Several
processes may write the same file: each call opens its own short-lived connection (safe across
``fork``) and waits up to :data:`BUSY_TIMEOUT_S` for a competing writer. ``ResultsStore(out, read_only=True)``
reads an existing store (SQLite ``mode=ro``) without creating, migrating or writing anything. A file
that is not a fedbench store (another program's SQLite file, an empty file) is refused, by reader
and writer alike, before anything is written to it (:class:`NotAStore`).

Each run row also carries the columns reports select by: ``scale`` (``paper``, ``small``, ``tiny``)
and the paper cell it fills (``paper``, ``paper_table``, ``paper_column``: the spec's ``paper``
block, NULL for a run outside any paper table). A store written before these columns existed is
migrated when opened (columns added, then filled from each run's spec and scenario name).

``versions`` holds the version sets a run trained with (:func:`fedbench.versions.versions`, a JSON
list, oldest first: a run resumed under other versions gains a second entry); NULL for a run that
never trained, or one written before the column existed (a writer adds it, and the lease table's
``token``, to an older store when it opens it; readers do without).

Non-finite metrics: SQLite stores ±inf as they are, and stores NaN as NULL, so a NaN reads back
as NaN from :meth:`ResultsStore.metrics` (indistinguishable there from "not recorded").
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import astuple, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

RUN_STATUSES = ("running", "finished", "diverged", "failed")
DONE = ("finished", "diverged")  # statuses a run is never trained again from
# A finite train loss above this × ln C (C classes) makes a run diverged (fedbench.engine.runner), not a
# blow-up: twelve orders of magnitude above an untrained model's loss (ln C, a uniform guess), its logits
# exceed float32's 24-bit mantissa (2^24 ≈ 1.7e7) by about 1e5, so every softmax is exactly 0 or 1 and
# training has no signal left (a first-round 4.6e29 at chance accuracy, issue 24). Runs that blow up yet
# keep learning stay far below it: the committed tiny tables' largest flagged loss is a test loss of
# 7.25e7 (FedAMS), and none of their train losses exceeds 1e3× its first value (the blow-up flag's rule).
DIVERGED_LOSS_FACTOR = 1e12
METRIC_COLUMNS = (
    "test_acc",
    "test_loss",
    "train_loss",
    "bits_up",
    "bits_down",
    "wall_s",
    "consistency",
    "client_acc_std",
)
DB_NAME = "fedbench.sqlite"
BUSY_TIMEOUT_S = 30.0

if TYPE_CHECKING:
    import pandas as pd

_RUN_FIELDS = ("run_id", "scenario", "scenario_hash", "spec_hash", "algorithm", "seed", "spec_json")
REPORT_COLUMNS = ("scale", "paper", "paper_table", "paper_column")  # added by the migration to older stores
ADDED_COLUMNS = (*REPORT_COLUMNS, "asked")  # ``asked``: when a command last asked for the run (NULL: created)
# added by a writer to older stores, never needed by a reader: (table, column)
WRITER_COLUMNS = (("runs", "versions"), ("leases", "token"))
PAPER_SCALE = "paper"
NAMED_SCALES = ("small", "tiny")  # the scales a scenario name may end in (``name.tiny``)
_STATUS_SQL = ", ".join(f"'{s}'" for s in RUN_STATUSES)
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS runs (
    run_id        TEXT PRIMARY KEY,
    scenario      TEXT NOT NULL,
    scenario_hash TEXT NOT NULL,
    spec_hash     TEXT NOT NULL,
    algorithm     TEXT NOT NULL,
    seed          INTEGER NOT NULL,
    status        TEXT NOT NULL CHECK (status IN ({_STATUS_SQL})),
    error         TEXT,
    spec_json     TEXT NOT NULL,
    created       TEXT NOT NULL,
    updated       TEXT NOT NULL,
    scale         TEXT,
    paper         TEXT,
    paper_table   TEXT,
    paper_column  TEXT,
    asked         TEXT,
    versions      TEXT
);
CREATE INDEX IF NOT EXISTS runs_by_scenario ON runs (scenario);
CREATE TABLE IF NOT EXISTS metrics (
    run_id     TEXT NOT NULL REFERENCES runs (run_id),
    round      INTEGER NOT NULL CHECK (round >= 1),
    {", ".join(f"{c} REAL" for c in METRIC_COLUMNS)},
    extra      TEXT,
    PRIMARY KEY (run_id, round)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS leases (
    run_id     TEXT PRIMARY KEY,
    holder     TEXT NOT NULL,
    heartbeat  REAL NOT NULL,
    token      TEXT
);
"""
LEASE_TTL_S = 120.0  # a lease not renewed for this long belongs to a killed process and is taken over


@dataclass(frozen=True)
class RunRecord:
    """Identity and resolved spec of one run (one algorithm entry of a scenario, one seed)."""

    run_id: str  # f"{spec_hash[:16]}-s{seed}"
    scenario: str  # scenario name (from the YAML)
    scenario_hash: str  # hash of the whole resolved scenario file
    spec_hash: str  # hash of the resolved single-algorithm run spec
    algorithm: str  # display label of the algorithm entry, e.g. "FedAvg"
    seed: int
    spec_json: str  # the fully resolved run spec as JSON (with a "targets" list in [0, 1])
    scale: str = PAPER_SCALE  # the scale the scenario was resolved at
    paper: str | None = None  # the paper cell (name, table, column); None: read from spec_json's `paper` block
    paper_table: str | None = None
    paper_column: str | None = None
    versions: str | None = None  # JSON of the versions it trains with (fedbench.versions); None: not training

    def report_columns(self) -> tuple[str, str | None, str | None, str | None]:
        """``scale`` and the paper cell as stored (see :func:`report_columns`)."""
        return report_columns(self.spec_json, self.scale, (self.paper, self.paper_table, self.paper_column))


def scale_from_name(scenario: str) -> str:
    """``tiny`` for ``fedmim_table3.tiny``, ``small`` for ``x.small``, else ``paper``: how scenario
    resolution names a scale (used to fill stores and records that do not carry the scale)."""
    suffix = scenario.rsplit(".", 1)[-1] if "." in scenario else ""
    return suffix if suffix in NAMED_SCALES else PAPER_SCALE


def paper_cell(spec_json: str) -> tuple[str | None, str | None, str | None]:
    """(paper, table, column) of the spec's ``paper`` block, as text; Nones without one."""
    ref = json.loads(spec_json).get("paper") or {}
    name, table, column = (None if ref.get(k) is None else str(ref[k]) for k in ("name", "table", "column"))
    return name, table, column


def report_columns(
    spec_json: str, scale: str, cell: tuple[str | None, str | None, str | None]
) -> tuple[str, str | None, str | None, str | None]:
    """The stored ``scale`` (as the record gives it) and paper cell: ``cell`` when it names a paper,
    else the spec's ``paper`` block."""
    cell = cell if cell[0] is not None else paper_cell(spec_json)
    return scale, *cell


def stored_scenarios(out_dir: Path) -> list[str]:
    """The scenario names of the store in ``out_dir``, read without writing anything ([] if none)."""
    db = Path(out_dir) / DB_NAME
    if not db.is_file():
        return []
    try:
        check_store_file(db)
        conn = _open(db, read_only=True)
    except sqlite3.DatabaseError:  # not a store, or not readable: it holds no scenario
        return []
    try:
        return [row[0] for row in conn.execute("SELECT scenario FROM runs GROUP BY scenario ORDER BY MIN(created)")]
    finally:
        conn.close()


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def _jsonable(value: Any) -> Any:
    """``json.dumps`` fallback for tensors, numpy arrays and numpy scalars."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"extra log value of type {type(value).__name__} is not JSON-serialisable")


def extra_to_json(extra: Mapping[str, Any] | None) -> str | None:
    """A round's extra logs as the store keeps them (sorted keys; tensors and NumPy values as numbers)."""
    return None if extra is None else json.dumps(dict(extra), default=_jsonable, sort_keys=True)


def _as_float(name: str, value: Any) -> float | None:
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"metric {name!r} must be a number or None, got {value!r}") from exc


class ResultsStore:
    """The results index of one output folder (``<out>/fedbench.sqlite`` + ``<out>/checkpoints/``)."""

    def __init__(self, out_dir: Path, read_only: bool = False) -> None:
        """Create the folders and the schema if missing (idempotent); switch the file to WAL.
        ``read_only``: open an existing store for reading only (nothing is created; FileNotFoundError
        naming the file if there is none; a store written before the report columns is migrated once)."""
        self.out_dir = Path(out_dir)
        self.db_path = self.out_dir / DB_NAME
        self.checkpoint_dir = self.out_dir / "checkpoints"
        self.read_only = read_only
        if read_only:
            _check_readable(self.db_path)
            return
        check_store_file(self.db_path, being_created=True)  # nothing written to a file that is not a store
        self.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        with self._connect() as conn:
            _use_wal(conn)
            conn.executescript(_SCHEMA)
            _migrate(conn)

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        """A fresh autocommit connection (every statement is its own committed transaction)."""
        conn = _open(self.db_path, self.read_only)
        try:
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
            yield conn
        finally:
            conn.close()

    def claim(
        self,
        run_id: str,
        holder: str,
        ttl: float = LEASE_TTL_S,
        token: str | None = None,
        gone: Callable[[str, str | None], bool] | None = None,
    ) -> str | None:
        """Take the run's lease for ``holder`` (None), unless another holder renewed it within
        ``ttl`` seconds and ``gone(other, its token)`` does not say its process is dead (that holder is
        returned); a stale lease (its process was killed) is taken over. ``token``: the holder's
        process identity, kept with the lease (:mod:`fedbench.engine.lease`)."""
        now = time.time()
        with self._connect() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                row = conn.execute("SELECT holder, heartbeat, token FROM leases WHERE run_id = ?", (run_id,)).fetchone()
                live = row is not None and row[0] != holder and now - row[1] < ttl
                if live and not (gone is not None and gone(str(row[0]), row[2])):
                    conn.execute("COMMIT")
                    return str(row[0])
                conn.execute(
                    "INSERT INTO leases (run_id, holder, heartbeat, token) VALUES (?, ?, ?, ?) ON CONFLICT (run_id) "
                    "DO UPDATE SET holder = excluded.holder, heartbeat = excluded.heartbeat, token = excluded.token",
                    (run_id, holder, now, token),
                )
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        return None

    def renew(self, run_id: str, holder: str) -> None:
        """Heartbeat: the holder still trains the run."""
        with self._connect() as conn:
            conn.execute(
                "UPDATE leases SET heartbeat = ? WHERE run_id = ? AND holder = ?", (time.time(), run_id, holder)
            )

    def release(self, run_id: str, holder: str) -> None:
        """Give the run's lease back (only the holder's own)."""
        with self._connect() as conn:
            conn.execute("DELETE FROM leases WHERE run_id = ? AND holder = ?", (run_id, holder))

    def status(self, run_id: str) -> str | None:
        """The run's status, or None if the store has never seen it."""
        with self._connect() as conn:
            row = conn.execute("SELECT status FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        return None if row is None else row[0]

    def start_run(self, rec: RunRecord) -> None:
        """Insert the run as 'running', or put an existing run back to 'running' (keeping its
        rounds and creation time; its descriptive fields are refreshed from ``rec``). ``rec.versions``,
        when given and new to the run, is appended to its ``versions`` list."""
        now = _now()
        with self._connect() as conn:
            row = conn.execute("SELECT spec_hash, seed, versions FROM runs WHERE run_id = ?", (rec.run_id,)).fetchone()
            if row is not None and (row[0], row[1]) != (rec.spec_hash, rec.seed):
                raise ValueError(
                    f"run {rec.run_id!r} already exists with spec_hash {row[0][:16]}… seed {row[1]}, "
                    f"not spec_hash {rec.spec_hash[:16]}… seed {rec.seed}"
                )
            used = _versions_used(None if row is None else row[2], rec.versions)
            fields = (*_RUN_FIELDS, *REPORT_COLUMNS)
            conn.execute(
                f"INSERT INTO runs ({', '.join(fields)}, status, error, created, updated, asked, versions) "
                f"VALUES ({', '.join('?' * len(fields))}, 'running', NULL, ?, ?, ?, ?) "
                "ON CONFLICT (run_id) DO UPDATE SET scenario = excluded.scenario, "
                "scenario_hash = excluded.scenario_hash, algorithm = excluded.algorithm, "
                "spec_json = excluded.spec_json, status = 'running', error = NULL, updated = excluded.updated, "
                "asked = excluded.asked, versions = excluded.versions, "
                + ", ".join(f"{c} = excluded.{c}" for c in REPORT_COLUMNS),
                (*astuple(rec)[: len(_RUN_FIELDS)], *rec.report_columns(), now, now, now, used),
            )

    def record_round(
        self, run_id: str, round: int, metrics: Mapping[str, float | None], extra: Mapping[str, Any] | None = None
    ) -> None:
        """Commit one round's metrics (missing ones are NULL); recording a round again replaces it."""
        self.record_rounds([(run_id, round, metrics, extra)])

    def record_rounds(
        self, rows: Sequence[tuple[str, int, Mapping[str, float | None], Mapping[str, Any] | None]]
    ) -> None:
        """:meth:`record_round` for each (run id, round, metrics, extra) of ``rows``, in one transaction
        (a population's round: one commit for all its runs)."""
        params = []
        for run_id, round, metrics, extra in rows:
            unknown = sorted(set(metrics) - set(METRIC_COLUMNS))
            if unknown:
                raise ValueError(
                    f"unknown metric(s) {unknown} for run {run_id!r}; allowed: {', '.join(METRIC_COLUMNS)}"
                )
            if round < 1:
                raise ValueError(f"round must be >= 1 (rounds are 1-based), got {round} for run {run_id!r}")
            values = [_as_float(c, metrics.get(c)) for c in METRIC_COLUMNS]
            params.append((run_id, int(round), *values, extra_to_json(extra)))
        with self._connect() as conn:
            try:
                conn.executemany(
                    f"INSERT OR REPLACE INTO metrics (run_id, round, {', '.join(METRIC_COLUMNS)}, extra) "
                    f"VALUES (?, ?, {', '.join('?' * len(METRIC_COLUMNS))}, ?)",
                    params,
                )
            except sqlite3.IntegrityError as exc:
                ids = sorted({r[0] for r in rows})
                who = f"run {ids[0]!r}" if len(ids) == 1 else f"a run of {ids}"
                raise KeyError(f"{who} is not in the store; call start_run first") from exc

    def truncate_after(self, run_id: str, round: int) -> None:
        """Delete the run's rows with round > ``round`` (before resuming from a checkpoint)."""
        with self._connect() as conn:
            conn.execute("DELETE FROM metrics WHERE run_id = ? AND round > ?", (run_id, int(round)))

    def finish_run(self, run_id: str, status: str, error: str | None = None) -> None:
        """Set the run's final (or any) status and error text."""
        if status not in RUN_STATUSES:
            raise ValueError(f"unknown run status {status!r} for run {run_id!r}; allowed: {', '.join(RUN_STATUSES)}")
        with self._connect() as conn:
            cur = conn.execute(
                "UPDATE runs SET status = ?, error = ?, updated = ? WHERE run_id = ?", (status, error, _now(), run_id)
            )
        if cur.rowcount == 0:
            raise KeyError(f"run {run_id!r} is not in the store; call start_run first")

    def checkpoint_path(self, run_id: str) -> Path:
        """Where the run's resumable checkpoint lives: ``<out>/checkpoints/<run_id>.pt``."""
        return self.checkpoint_dir / f"{run_id}.pt"

    def runs(self, scenario: str | None = None, include_stale: bool = False) -> pd.DataFrame:
        """One row per run, in creation order, optionally only those of ``scenario`` (its last
        column, ``versions``: the JSON list described in the module docstring, None where not recorded).

        A scenario's algorithm label names one run spec; when a changed scenario file (or a tuning)
        gave a label another spec (hash), the runs of the spec asked for last (:meth:`ask`, or created
        last) are current and the others *stale* and left out, so reports never pool two versions of an
        experiment (``include_stale`` keeps them)."""
        import pandas as pd  # loaded by the readers only: the trainer and the CLI start without it

        columns = (*_RUN_FIELDS[:6], "status", "error", "spec_json", "created", "updated", *REPORT_COLUMNS)
        params: tuple[Any, ...] = ()
        with self._connect() as conn:
            versions = "versions" if _has_column(conn, "runs", "versions") else "NULL"  # an older store, read only
            query = f"SELECT {', '.join(columns)}, {versions}, COALESCE(asked, created) FROM runs"
            if scenario is not None:
                query, params = query + " WHERE scenario = ?", (scenario,)
            rows = conn.execute(query + " ORDER BY rowid", params).fetchall()
        frame = pd.DataFrame(rows, columns=[*columns, "versions", "asked"]).astype({"seed": "int64"})
        asked = frame.pop("asked")
        if include_stale or frame.empty:
            return frame
        by_asked = frame.iloc[asked.argsort(kind="stable")]  # ties (one command's runs): store order
        newest = by_asked.groupby(["scenario", "algorithm"], sort=False)["spec_hash"].transform("last")
        return frame[frame["spec_hash"] == newest.reindex(frame.index)].reset_index(drop=True)

    def is_empty(self) -> bool:
        """True when the store holds no run."""
        with self._connect() as conn:
            return conn.execute("SELECT 1 FROM runs LIMIT 1").fetchone() is None

    def ask(self, run_ids: Iterable[str]) -> None:
        """Mark the runs as the ones a command asked for now: for each (scenario, label), the runs
        of the spec asked for last are the current ones (:meth:`runs`), whether they ran or were
        found done (a tuning's chosen setting, a scenario file changed back)."""
        wanted = json.dumps([str(r) for r in run_ids])
        with self._connect() as conn:
            conn.execute("UPDATE runs SET asked = ? WHERE run_id IN (SELECT value FROM json_each(?))", (_now(), wanted))

    def metrics(self, run_ids: Iterable[str] | None = None) -> pd.DataFrame:
        """Long (tidy) metric rows sorted by (run_id, round); NULL reads as NaN."""
        import pandas as pd  # loaded by the readers only: the trainer and the CLI start without it

        columns = ("run_id", "round", *METRIC_COLUMNS, "extra")
        query = f"SELECT {', '.join(columns)} FROM metrics"
        with self._connect() as conn:
            if run_ids is None:
                rows = conn.execute(query).fetchall()
            else:
                wanted = json.dumps([str(r) for r in run_ids])
                rows = conn.execute(query + " WHERE run_id IN (SELECT value FROM json_each(?))", (wanted,)).fetchall()
        frame = pd.DataFrame(rows, columns=list(columns))
        frame = frame.astype({"round": "int64", **{c: "float64" for c in METRIC_COLUMNS}})
        return frame.sort_values(["run_id", "round"], ignore_index=True)

    def last_round(self, run_id: str) -> int | None:
        """The highest recorded round of the run, or None if it has none."""
        with self._connect() as conn:
            row = conn.execute("SELECT MAX(round) FROM metrics WHERE run_id = ?", (run_id,)).fetchone()
        return None if row[0] is None else int(row[0])


def _use_wal(conn: sqlite3.Connection) -> None:
    """Switch the file to WAL (persistent: stored in the file itself). While several processes open a new store at
    once, SQLite may answer the switch "database is locked" at once, without waiting out the busy timeout (a lock
    upgrade that could deadlock): the switch is tried again until the timeout (tests/test_store.py)."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.01)


def _open(db: Path, read_only: bool) -> sqlite3.Connection:
    """An autocommit connection to ``db``; ``read_only`` opens it with SQLite's ``mode=ro``."""
    if read_only:
        return sqlite3.connect(
            f"{db.resolve().as_uri()}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None
        )
    return sqlite3.connect(db, timeout=BUSY_TIMEOUT_S, isolation_level=None)


class NotAStore(sqlite3.DatabaseError, ValueError):
    """The file at ``<out>/fedbench.sqlite`` is not a fedbench results store (another program's
    SQLite file, an empty file): found by reading it (SQLite ``mode=ro``), so it is left untouched."""


CORE_RUN_COLUMNS = frozenset((*_RUN_FIELDS, "status", "error", "created", "updated"))


def check_store_file(db: Path, being_created: bool = False) -> set[str]:
    """The run columns of the existing store ``db``, read without writing; :class:`NotAStore` unless
    it holds fedbench's ``runs`` table. ``being_created`` (a writer about to create
    the schema) also accepts an empty database (0 bytes or no table yet: another process may be
    creating it) and an absent file (empty set)."""
    if not db.exists() and being_created:
        return set()
    if db.stat().st_size == 0:
        if being_created:
            return set()
        raise NotAStore(f"{db} is an empty file, not a fedbench results store")
    conn = _open(db, read_only=True)
    try:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        have = {row[1] for row in conn.execute("PRAGMA table_info(runs)")}
    finally:
        conn.close()
    if not tables and being_created:
        return set()
    if not CORE_RUN_COLUMNS <= have:
        held = ", ".join(sorted(tables)[:5]) + (", …" if len(tables) > 5 else "")
        why = (
            "its runs table lacks " + ", ".join(sorted(CORE_RUN_COLUMNS - have))
            if have
            else f"it holds {'the tables ' + held if tables else 'no table'} and no runs table"
        )
        raise NotAStore(f"{db} is not a fedbench results store ({why})")
    return have


def _check_readable(db: Path) -> None:
    """A store opened read-only must exist, be a fedbench store (:func:`check_store_file`) and carry the
    current run columns (one written before them is migrated once)."""
    if not db.is_file():
        where = "is not a file" if db.exists() else "does not exist"
        raise FileNotFoundError(f"no results store at {db}: it {where} (a store is created by fedbench run or sweep)")
    if not set(ADDED_COLUMNS) <= check_store_file(db):  # written before the report columns: migrate it once, then read
        ResultsStore(db.parent)


def _has_column(conn: sqlite3.Connection, table: str, column: str) -> bool:
    return any(row[1] == column for row in conn.execute(f"PRAGMA table_info({table})"))


def _missing(conn: sqlite3.Connection) -> list[tuple[str, str]]:
    """The (table, column)s of :data:`ADDED_COLUMNS` and :data:`WRITER_COLUMNS` the store lacks."""
    wanted = [*(("runs", c) for c in ADDED_COLUMNS), *WRITER_COLUMNS]
    return [(t, c) for t, c in wanted if not _has_column(conn, t, c)]


def _migrate(conn: sqlite3.Connection) -> None:
    """Add :data:`ADDED_COLUMNS` and :data:`WRITER_COLUMNS` to a store written before them and fill the
    report columns from each run's spec and scenario name (one writer at a time; a no-op on a current store)."""
    if not _missing(conn):
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        missing = _missing(conn)  # another process may have migrated
        for table, column in missing:
            conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} TEXT")
        if any(column in ADDED_COLUMNS for _, column in missing):
            rows = conn.execute("SELECT run_id, scenario, spec_json FROM runs").fetchall()
            conn.executemany(
                f"UPDATE runs SET {', '.join(f'{c} = ?' for c in REPORT_COLUMNS)} WHERE run_id = ?",
                [(scale_from_name(scenario), *paper_cell(spec), run_id) for run_id, scenario, spec in rows],
            )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _versions_used(stored: str | None, new: str | None) -> str | None:
    """The run's ``versions`` list (JSON) with ``new`` (one version set as JSON) appended unless already there."""
    used = [] if stored is None else json.loads(stored)
    if new is not None and json.loads(new) not in used:
        used.append(json.loads(new))
    return json.dumps(used, sort_keys=True) if used else None


def existing_store(out_dir: Path) -> ResultsStore | None:
    """The store in ``out_dir`` opened for reading only, None where there is none (nothing is created)."""
    return ResultsStore(out_dir, read_only=True) if (Path(out_dir) / DB_NAME).is_file() else None


def read_statuses(out_dir: Path, run_ids: Iterable[str]) -> dict[str, str]:
    """The status of each of ``run_ids`` the store in ``out_dir`` holds (absent ones left out), read
    without opening the store for writing: nothing is created or migrated (an absent store holds none;
    SQLite may add its -wal/-shm companions beside an existing one)."""
    db = Path(out_dir) / DB_NAME
    if not db.is_file():
        return {}
    conn = _open(db, read_only=True)
    wanted = json.dumps([str(r) for r in run_ids])
    try:
        query = "SELECT run_id, status FROM runs WHERE run_id IN (SELECT value FROM json_each(?))"
        return dict(conn.execute(query, (wanted,)).fetchall())
    finally:
        conn.close()
