"""The results store: persistence, resume truncation, status rules, concurrent writers."""

from __future__ import annotations

import json
import math
import multiprocessing as mp
import sqlite3
import time
from pathlib import Path

import pandas as pd
import pytest

import fedbench.store as store_module
from fedbench.store import DB_NAME, RUN_STATUSES, ResultsStore, RunRecord, read_statuses, scale_from_name


def record(seed: int = 0, algorithm: str = "FedAvg", scenario: str = "toy") -> RunRecord:
    spec_hash = f"{algorithm.lower():0<64}"[:64]
    spec = {"algorithm": {"name": algorithm}, "targets": [0.5, 0.8]}
    return RunRecord(f"{spec_hash[:16]}-s{seed}", scenario, "h" * 64, spec_hash, algorithm, seed, json.dumps(spec))


def metrics_at(t: int) -> dict[str, float | None]:
    evaluated = t % 2 == 0
    return {
        "test_acc": 0.1 * t if evaluated else None,
        "test_loss": 1.0 / t if evaluated else None,
        "train_loss": 2.0 / t,
        "bits_up": 1000 * t,
        "bits_down": 2000,
        "wall_s": 0.01,
    }


def test_create_insert_read(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path)
    assert (tmp_path / DB_NAME).is_file() and (tmp_path / "checkpoints").is_dir()
    rec = record()
    assert store.status(rec.run_id) is None and store.last_round(rec.run_id) is None
    store.start_run(rec)
    for t in (1, 2, 3):
        store.record_round(rec.run_id, t, metrics_at(t), {"lr": 0.1, "norms": [1.0, 2.0]})
    store.record_round(rec.run_id, 3, {**metrics_at(3), "train_loss": 9.0})  # replaces round 3

    runs = store.runs()
    assert list(runs.columns) == [
        "run_id",
        "scenario",
        "scenario_hash",
        "spec_hash",
        "algorithm",
        "seed",
        "status",
        "error",
        "spec_json",
        "created",
        "updated",
        "scale",
        "paper",
        "paper_table",
        "paper_column",
        "versions",
    ]
    row = runs.iloc[0]
    assert (row.run_id, row.scenario, row.algorithm, row.seed, row.status) == (
        rec.run_id,
        "toy",
        "FedAvg",
        0,
        "running",
    )
    assert json.loads(row.spec_json)["targets"] == [0.5, 0.8]

    m = store.metrics()
    assert m["round"].tolist() == [1, 2, 3]
    assert math.isnan(m.loc[0, "test_acc"]) and m.loc[1, "test_acc"] == pytest.approx(0.2)
    assert m.loc[2, "train_loss"] == 9.0 and pd.isna(m.loc[2, "extra"])
    assert json.loads(m.loc[0, "extra"]) == {"lr": 0.1, "norms": [1.0, 2.0]}
    assert m.loc[2, "bits_up"] == 3000.0
    assert store.last_round(rec.run_id) == 3
    assert store.checkpoint_path(rec.run_id) == tmp_path / "checkpoints" / f"{rec.run_id}.pt"


def test_reopen_sees_data_and_filters(tmp_path: Path) -> None:
    first = ResultsStore(tmp_path)
    a, b = record(0), record(1, "SCAFFOLD", scenario="other")
    for rec in (a, b):
        first.start_run(rec)
        first.record_round(rec.run_id, 1, metrics_at(1))
    first.finish_run(a.run_id, "finished")

    again = ResultsStore(tmp_path)  # schema creation is idempotent
    assert again.status(a.run_id) == "finished" and again.status(b.run_id) == "running"
    assert again.runs()["run_id"].tolist() == [a.run_id, b.run_id]  # creation order
    assert again.runs("other")["run_id"].tolist() == [b.run_id]
    assert again.metrics([b.run_id])["run_id"].tolist() == [b.run_id]
    assert again.metrics([]).empty


def test_non_finite_round_trip(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path)
    rec = record()
    store.start_run(rec)
    store.record_round(
        rec.run_id,
        1,
        {"train_loss": float("nan"), "test_loss": float("inf"), "test_acc": 0.1},
        {"grad_norm": float("nan")},
    )
    m = store.metrics()
    assert math.isnan(m.loc[0, "train_loss"]) and m.loc[0, "test_loss"] == math.inf
    assert math.isnan(json.loads(m.loc[0, "extra"])["grad_norm"])


def test_truncate_after(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path)
    a, b = record(0), record(1)
    for rec in (a, b):
        store.start_run(rec)
        for t in range(1, 6):
            store.record_round(rec.run_id, t, metrics_at(t))
    store.truncate_after(a.run_id, 2)
    assert store.last_round(a.run_id) == 2 and store.last_round(b.run_id) == 5
    store.truncate_after(a.run_id, 0)
    assert store.last_round(a.run_id) is None


def test_status_transitions(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path)
    rec = record()
    store.start_run(rec)
    store.record_round(rec.run_id, 1, metrics_at(1))
    store.finish_run(rec.run_id, "failed", "Traceback: boom")
    row = store.runs().iloc[0]
    assert (row.status, row.error) == ("failed", "Traceback: boom")

    store.start_run(rec)  # retry: back to running, rows and creation time kept, error cleared
    row2 = store.runs().iloc[0]
    assert (row2.status, row2.created) == ("running", row.created) and pd.isna(row2.error)
    assert row2.updated >= row.updated and store.last_round(rec.run_id) == 1

    store.finish_run(rec.run_id, "diverged", "non-finite loss at round 1")
    assert store.status(rec.run_id) == "diverged"
    store.finish_run(rec.run_id, "finished")
    assert store.status(rec.run_id) == "finished" and pd.isna(store.runs().iloc[0].error)


def test_rejects_bad_input(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path)
    rec = record()
    store.start_run(rec)
    with pytest.raises(ValueError, match="allowed: " + ", ".join(RUN_STATUSES)):
        store.finish_run(rec.run_id, "done")
    with pytest.raises(ValueError, match="unknown metric"):
        store.record_round(rec.run_id, 1, {"acc": 0.5})
    with pytest.raises(ValueError, match="1-based"):
        store.record_round(rec.run_id, 0, metrics_at(1))
    with pytest.raises(KeyError, match="not in the store"):
        store.record_round("nope-s0", 1, metrics_at(1))
    with pytest.raises(KeyError, match="not in the store"):
        store.finish_run("nope-s0", "finished")
    clash = RunRecord(rec.run_id, "toy", "h" * 64, "f" * 64, "FedAvg", 0, "{}")
    with pytest.raises(ValueError, match="already exists"):
        store.start_run(clash)


def test_wal_mode_and_sync(tmp_path: Path) -> None:
    ResultsStore(tmp_path)
    conn = sqlite3.connect(tmp_path / DB_NAME)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        conn.close()


def test_two_stores_interleaved(tmp_path: Path) -> None:
    one, two = ResultsStore(tmp_path), ResultsStore(tmp_path)
    a, b = record(0), record(1)
    one.start_run(a)
    two.start_run(b)
    for t in range(1, 21):
        one.record_round(a.run_id, t, metrics_at(t))
        two.record_round(b.run_id, t, metrics_at(t))
        assert two.last_round(a.run_id) == t  # each write is visible to the other store at once
    m = ResultsStore(tmp_path).metrics()
    assert m.groupby("run_id")["round"].count().to_dict() == {a.run_id: 20, b.run_id: 20}


def _writer(out_dir: str, seed: int, rounds: int) -> None:
    store = ResultsStore(Path(out_dir))
    rec = record(seed)
    store.start_run(rec)
    for t in range(1, rounds + 1):
        store.record_round(rec.run_id, t, metrics_at(t))
    store.finish_run(rec.run_id, "finished")


class LockedAtFirst:
    """A connection whose first ``locked`` statements fail as SQLite fails a contended WAL switch."""

    def __init__(self, locked: int, error: str = "database is locked") -> None:
        self.locked, self.error, self.calls = locked, error, 0

    def execute(self, sql: str) -> None:
        self.calls += 1
        if self.calls <= self.locked:
            raise sqlite3.OperationalError(self.error)


def test_a_contended_wal_switch_is_tried_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Several processes opening a new store at once: SQLite may refuse the WAL switch at once ("database is
    locked", no busy wait); it is tried again until the busy timeout, and another error is raised at once."""
    conn = LockedAtFirst(3)
    store_module._use_wal(conn)  # type: ignore[arg-type]
    assert conn.calls == 4
    with pytest.raises(sqlite3.OperationalError, match="disk I/O"):
        store_module._use_wal(LockedAtFirst(1, "disk I/O error"))  # type: ignore[arg-type]
    monkeypatch.setattr(store_module, "BUSY_TIMEOUT_S", 0.05)
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        store_module._use_wal(LockedAtFirst(10**9))  # type: ignore[arg-type]


def _opener(out_dir: str, start: float) -> None:
    while time.time() < start:  # every process opens the new store at the same moment
        pass
    ResultsStore(Path(out_dir))


def test_processes_creating_one_store_at_once(tmp_path: Path) -> None:
    ctx = mp.get_context("spawn")
    for trial in range(3):
        start = time.time() + 1.0
        procs = [ctx.Process(target=_opener, args=(str(tmp_path / str(trial)), start)) for _ in range(6)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout=120)
        assert [p.exitcode for p in procs] == [0] * 6


def test_concurrent_processes(tmp_path: Path) -> None:
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), seed, 100)) for seed in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    store = ResultsStore(tmp_path)
    assert set(store.runs()["status"]) == {"finished"}
    assert store.metrics().groupby("run_id")["round"].count().tolist() == [100, 100, 100]


def test_runs_leave_out_stale_specs_of_a_label(tmp_path):
    store = ResultsStore(tmp_path)
    for spec_hash, seed in (("a" * 64, 0), ("a" * 64, 1), ("b" * 64, 0)):  # the file changed: label X got spec b
        store.start_run(RunRecord(f"{spec_hash[:16]}-s{seed}", "scen", "h" * 64, spec_hash, "X", seed, "{}"))
    store.start_run(RunRecord("c" * 16 + "-s0", "scen", "h" * 64, "c" * 64, "Y", 0, "{}"))
    assert store.runs()["run_id"].tolist() == ["b" * 16 + "-s0", "c" * 16 + "-s0"]
    assert len(store.runs(include_stale=True)) == 4 and len(store.runs("scen")) == 2


def test_the_spec_asked_for_last_is_current(tmp_path):
    """A -> B -> A: asking for spec a again (a tuning choosing it back, a file changed back) makes
    its runs current although b's were created later; a store without the column migrates."""
    store = ResultsStore(tmp_path)
    for spec_hash in ("a" * 64, "b" * 64):
        store.start_run(RunRecord(f"{spec_hash[:16]}-s0", "scen", "h" * 64, spec_hash, "X", 0, "{}"))
    assert store.runs()["run_id"].tolist() == ["b" * 16 + "-s0"]
    store.ask(["a" * 16 + "-s0"])
    assert store.runs()["run_id"].tolist() == ["a" * 16 + "-s0"]
    with sqlite3.connect(tmp_path / DB_NAME) as conn:  # a store written before the column
        conn.execute("ALTER TABLE runs DROP COLUMN asked")
    assert ResultsStore(tmp_path, read_only=True).runs()["run_id"].tolist() == ["b" * 16 + "-s0"]


def cells(runs: pd.DataFrame) -> list[list]:
    """The report columns of each run, missing values as None."""
    return [
        [None if pd.isna(v) else v for v in row]
        for row in runs[["scale", "paper", "paper_table", "paper_column"]].values
    ]


def paper_record(scenario: str, block: dict | None, seed: int = 0, **fields) -> RunRecord:
    spec = {"algorithm": {"name": "FedAvg"}, "targets": [], **({"paper": block} if block else {})}
    return RunRecord(
        f"{scenario[:12]:x<16}-s{seed}", scenario, "h" * 64, "a" * 64, "FedAvg", seed, json.dumps(spec), **fields
    )


def test_scale_and_paper_cell_are_columns(tmp_path: Path) -> None:
    """start_run stores the scale and the paper cell: given fields win, else the spec's paper block."""
    store = ResultsStore(tmp_path)
    store.start_run(paper_record("fedmim_table3.tiny", {"name": "fedmim", "table": "III", "column": 0.5}, scale="tiny"))
    store.start_run(
        paper_record(
            "gradma_x",
            {"name": "gradma", "table": 1, "column": "c"},
            seed=1,
            paper="other",
            paper_table="2",
            paper_column="d",
        )
    )
    store.start_run(paper_record("quickstart", None, seed=2, scale="small"))
    rows = cells(store.runs())
    assert rows == [["tiny", "fedmim", "III", "0.5"], ["paper", "other", "2", "d"], ["small", None, None, None]]


def test_scale_from_name() -> None:
    assert [scale_from_name(n) for n in ("a.tiny", "a.small", "a", "fedmim_fig2a_p0.05", "a.big")] == [
        "tiny",
        "small",
        "paper",
        "paper",
        "paper",
    ]


def test_an_older_store_is_migrated_on_open(tmp_path: Path) -> None:
    """A runs table without the report columns gains them, filled from the spec and the name's scale."""
    old = (
        "CREATE TABLE runs (run_id TEXT PRIMARY KEY, scenario TEXT NOT NULL, scenario_hash TEXT NOT NULL, "
        "spec_hash TEXT NOT NULL, algorithm TEXT NOT NULL, seed INTEGER NOT NULL, status TEXT NOT NULL, "
        "error TEXT, spec_json TEXT NOT NULL, created TEXT NOT NULL, updated TEXT NOT NULL)"
    )
    with sqlite3.connect(tmp_path / DB_NAME) as conn:
        conn.execute(old)
        for rid, name, ref in (
            ("r1", "fedmim_table3.tiny", {"name": "fedmim", "table": "III", "column": "a"}),
            ("r2", "quickstart", None),
        ):
            spec = json.dumps({"targets": [], **({"paper": ref} if ref else {})})
            conn.execute(
                "INSERT INTO runs VALUES (?, ?, 'h', 's', 'FedAvg', 0, 'finished', NULL, ?, 't', 't')",
                (rid, name, spec),
            )
    assert read_statuses(tmp_path, ["r1", "r3"]) == {"r1": "finished"}  # read-only: no migration yet
    runs = ResultsStore(tmp_path, read_only=True).runs()  # a reader migrates an old store once, then reads it
    assert cells(runs) == [["tiny", "fedmim", "III", "a"], ["paper", None, None, None]]
    ResultsStore(tmp_path)  # opening again is a no-op


def test_read_statuses_creates_nothing(tmp_path: Path) -> None:
    assert read_statuses(tmp_path / "absent", ["x"]) == {} and not (tmp_path / "absent").exists()


def test_read_only_store_reads_and_never_writes(tmp_path: Path) -> None:
    """read_only: the same rows as a writer sees; a missing store raises naming the file and creates nothing."""
    absent = tmp_path / "absent" / "out"
    with pytest.raises(FileNotFoundError, match=f"no results store at {absent / DB_NAME}: it does not exist"):
        ResultsStore(absent, read_only=True)
    assert not (tmp_path / "absent").exists()
    writer = ResultsStore(tmp_path / "out")
    writer.start_run(record())
    writer.record_round(record().run_id, 1, metrics_at(1), {"lr": 0.1})
    reader = ResultsStore(tmp_path / "out", read_only=True)
    pd.testing.assert_frame_equal(reader.runs(), writer.runs())
    pd.testing.assert_frame_equal(reader.metrics(), writer.metrics())
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        reader.finish_run(record().run_id, "finished")
    assert writer.status(record().run_id) == "running"
    (tmp_path / "empty").mkdir()
    sqlite3.connect(tmp_path / "empty" / DB_NAME).close()
    with pytest.raises(ValueError, match="not a fedbench results store"):
        ResultsStore(tmp_path / "empty", read_only=True)


def test_a_run_keeps_each_version_set_it_trained_with(tmp_path: Path) -> None:
    """Issue 24: ``versions`` lists the distinct version sets a run trained with, oldest first."""
    store = ResultsStore(tmp_path)
    a, b = json.dumps({"fedbench": "0.1.0", "torch": "2.5"}), json.dumps({"fedbench": "0.1.0", "torch": "2.6"})
    store.start_run(record())  # registered before training (reproduce does): nothing recorded yet
    assert store.runs()["versions"].item() is None
    for versions in (a, a, None, b, a):  # resumed under the same, unknown (a returned Ray result), other versions
        store.start_run(RunRecord(**{**record().__dict__, "versions": versions}))
    assert json.loads(store.runs()["versions"].item()) == [json.loads(a), json.loads(b)]


def test_an_older_store_gains_the_versions_and_lease_token_columns(tmp_path: Path) -> None:
    """A writer adds ``runs.versions`` and ``leases.token``; a reader of a store without them reads None."""
    store = ResultsStore(tmp_path)
    store.start_run(RunRecord(**{**record().__dict__, "versions": '{"torch": "2.5"}'}))
    with sqlite3.connect(tmp_path / DB_NAME) as conn:
        conn.execute("ALTER TABLE runs DROP COLUMN versions")
        conn.execute("ALTER TABLE leases DROP COLUMN token")
    assert ResultsStore(tmp_path, read_only=True).runs()["versions"].tolist() == [None]
    with sqlite3.connect(tmp_path / DB_NAME) as conn:  # the reader wrote nothing
        assert "versions" not in {row[1] for row in conn.execute("PRAGMA table_info(runs)")}
    ResultsStore(tmp_path)
    with sqlite3.connect(tmp_path / DB_NAME) as conn:
        assert "versions" in {row[1] for row in conn.execute("PRAGMA table_info(runs)")}
        assert "token" in {row[1] for row in conn.execute("PRAGMA table_info(leases)")}


def test_record_rounds_commits_several_runs_at_once(tmp_path):
    """A population's round: one transaction, the same rows as one record_round each; an unknown run raises."""
    from fedbench.scenario import run_id_of, run_record
    from tests.factories import tiny_spec

    spec = tiny_spec()
    together, alone = ResultsStore(tmp_path / "a"), ResultsStore(tmp_path / "b")
    for store in (together, alone):
        for seed in (0, 1):
            store.start_run(run_record(spec, seed, "h"))
    ids = [run_id_of(spec, seed) for seed in (0, 1)]
    rows = [(ids[0], 1, {"test_acc": 0.5}, {"lr": 0.1}), (ids[1], 1, {"test_acc": 0.25, "train_loss": 2.0}, None)]
    together.record_rounds(rows)
    for row in rows:
        alone.record_round(*row)
    assert together.metrics(ids).equals(alone.metrics(ids))
    with pytest.raises(KeyError, match="not in the store"):
        together.record_rounds([("nobody-s0", 1, {"test_acc": 0.1}, None)])
