"""Each run trained once (issue 15 item 6): a run's lease in the store keeps concurrent processes from
training it twice; a killed holder's stale lease is taken over, at once when it ran on this machine
(issue 24 item 4)."""

import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml

from fedbench.engine.lease import holder, holder_gone, leased, process_token
from fedbench.engine.runner import execute_run
from fedbench.engine.setup import DataCache
from fedbench.scenario import parse_scenario
from fedbench.store import DB_NAME, ResultsStore
from tests.factories import tiny_scenario

ROOT = Path(__file__).parents[2]


def test_a_live_lease_is_kept_and_a_stale_one_taken_over(tmp_path):
    store = ResultsStore(tmp_path)
    assert store.claim("r", "a") is None and store.claim("r", "b") == "a" and store.claim("r", "a") is None
    assert store.claim("r", "b", ttl=0.0) is None  # a's heartbeat is older than a zero TTL: b takes over
    store.release("r", "a")  # only the holder's own lease is released
    assert store.claim("r", "c") == "b"
    store.release("r", "b")
    assert store.claim("r", "c") is None


def test_the_heartbeat_renews_the_lease_while_the_block_runs(tmp_path):
    store = ResultsStore(tmp_path)
    with leased(store, "r", every=0.05) as other:
        assert other is None
        time.sleep(0.3)
        assert store.claim("r", "intruder", ttl=0.2) == holder()  # renewed within the last 0.2 s
    assert store.claim("r", "intruder") is None  # released on exit


def test_a_run_held_by_a_live_process_is_left_to_it_and_a_dead_ones_is_taken_over(tmp_path):
    spec = parse_scenario(tiny_scenario({"rounds": 2})).runs[0]
    store, cache = ResultsStore(tmp_path / "out"), DataCache(tmp_path / "data", False, torch.device("cpu"))
    rid = f"{spec.spec_hash()[:16]}-s0"
    store.claim(rid, "otherhost:1")
    busy = execute_run(spec, 0, store, cache, "h")
    assert busy.status == "busy" and "otherhost:1" in busy.error and store.status(rid) is None
    with store._connect() as conn:  # the other process died 10 minutes ago
        conn.execute("UPDATE leases SET heartbeat = heartbeat - 600 WHERE run_id = ?", (rid,))
    assert execute_run(spec, 0, store, cache, "h").status == "finished"
    assert store.claim(rid, "otherhost:2") is None  # released after training


@pytest.mark.slow
def test_concurrent_processes_on_one_out_train_each_run_once(tmp_path):
    raw = tiny_scenario(
        {"rounds": 12}, algorithms=[{"name": "fedavg"}, {"name": "fedprox", "mu": 0.01}], seeds=[0, 1, 2]
    )
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    cmd = [sys.executable, "-m", "fedbench", "run", str(path), "--out", str(tmp_path / "out"), "--quiet"]
    procs = [
        subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for _ in range(2)
    ]
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outputs
    finished = sum(o.count(" finished") for o in outputs)
    assert finished == 6, outputs  # six runs, each trained by exactly one process
    runs = ResultsStore(tmp_path / "out").runs()
    metrics = ResultsStore(tmp_path / "out").metrics(runs["run_id"])
    assert (
        set(runs["status"]) == {"finished"}
        and len(metrics) == 6 * 12
        and not metrics.duplicated(["run_id", "round"]).any()
    )


# -- issue 24 item 4: a dead holder on this machine is taken over at once; a reused pid does not fool it --

linux_only = pytest.mark.skipif(process_token() is None, reason="process identity needs Linux /proc")
HOST = socket.gethostname()


def sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


@linux_only
@pytest.mark.parametrize("reaped", [True, False], ids=["reaped", "zombie"])
def test_a_dead_holder_on_this_machine_is_taken_over_at_once(tmp_path, reaped):
    store, proc = ResultsStore(tmp_path), sleeper()
    try:
        other, token = f"{HOST}:{proc.pid}", process_token(proc.pid)
        assert store.claim("r", other, token=token) is None
        assert store.claim("r", holder(), token=process_token(), gone=holder_gone) == other  # alive: left to it
    finally:
        proc.kill()
    if reaped:
        proc.wait()
    else:  # killed, not yet waited for: its /proc entry says Z
        deadline = time.monotonic() + 10
        while (Path("/proc") / str(proc.pid) / "stat").read_text().rpartition(")")[2].split()[0] != "Z":
            assert time.monotonic() < deadline
            time.sleep(0.05)
    assert store.claim("r", holder(), token=process_token(), gone=holder_gone) is None  # within the 120 s TTL
    proc.wait()


@linux_only
def test_a_reused_pid_does_not_fool_the_lease(tmp_path):
    store, proc = ResultsStore(tmp_path), sleeper()
    try:
        where, _, started = process_token(proc.pid).rpartition(":")
        earlier = f"{where}:{int(started) - 1}"  # the lease's holder started before the live process with its pid
        assert holder_gone(f"{HOST}:{proc.pid}", earlier) and not holder_gone(
            f"{HOST}:{proc.pid}", process_token(proc.pid)
        )
        store.claim("r", f"{HOST}:{proc.pid}", token=earlier)
        assert store.claim("r", holder(), token=process_token(), gone=holder_gone) is None
    finally:
        proc.kill()
        proc.wait()


@linux_only
def test_other_machines_and_tokenless_leases_keep_the_ttl_rule(tmp_path):
    store, dead = ResultsStore(tmp_path), sleeper()
    dead.kill()
    dead.wait()
    mine = process_token()
    cases = {
        "other host": ("otherhost:1", mine.rpartition(":")[0] + ":1"),
        "other boot or pid namespace": (f"{HOST}:{dead.pid}", "another-boot/pid:[1]:1"),
        "written by an older fedbench": (f"{HOST}:{dead.pid}", None),
    }
    for why, (other, token) in cases.items():
        assert not holder_gone(other, token), why
        store.claim(why, other, token=token)
        assert store.claim(why, holder(), token=mine, gone=holder_gone) == other, why


def test_an_older_lease_table_gains_the_token_column(tmp_path):
    ResultsStore(tmp_path)  # a store whose lease table is then put back as it was before the token column
    with sqlite3.connect(tmp_path / DB_NAME) as conn:
        conn.execute("DROP TABLE leases")
        conn.execute("CREATE TABLE leases (run_id TEXT PRIMARY KEY, holder TEXT NOT NULL, heartbeat REAL NOT NULL)")
        conn.execute("INSERT INTO leases VALUES ('r', 'elsewhere:1', ?)", (time.time(),))
    store = ResultsStore(tmp_path)
    assert store.claim("r", holder(), token=process_token(), gone=holder_gone) == "elsewhere:1"  # kept by the TTL
    assert store.claim("s", holder(), token="t") is None
    with store._connect() as conn:
        assert conn.execute("SELECT token FROM leases WHERE run_id = 's'").fetchone() == ("t",)


# -- end to end: kill -9, then the same command --


def _until(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
    return value


def _rounds(out: Path) -> int:
    """The rounds the store in ``out`` holds (0 while there is none yet)."""
    if not (out / DB_NAME).is_file():
        return 0
    try:
        with sqlite3.connect(f"{(out / DB_NAME).resolve().as_uri()}?mode=ro", uri=True) as conn:
            return conn.execute("SELECT COUNT(*) FROM metrics").fetchone()[0]
    except sqlite3.OperationalError:  # the schema is not written yet
        return 0


KILL_ROUNDS = 40
KILL_COLS = ["round", "test_acc", "test_loss", "train_loss", "bits_up", "bits_down", "consistency"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> tuple[list[str], ResultsStore]:
    """The command of a 40-round tiny run (``--out`` last) and the store of its uninterrupted run."""
    tmp = tmp_path_factory.mktemp("kill")
    path = tmp / "s.yaml"
    path.write_text(yaml.safe_dump(tiny_scenario(rounds=KILL_ROUNDS, checkpoint_every=2)))
    cmd = [sys.executable, "-m", "fedbench", "run", str(path), "--quiet", "--out"]
    full = subprocess.run([*cmd, str(tmp / "full")], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert full.returncode == 0, full.stdout + full.stderr
    return cmd, ResultsStore(tmp / "full")


@pytest.mark.slow
@linux_only
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["kill-9", "sigterm"])
def test_a_killed_run_resumes_at_once_with_the_same_command(tmp_path, sig, uninterrupted):
    """kill -9 (or SIGTERM, which is Ctrl-C: exit 143, lease released) mid-run, then the same command:
    no busy message, exit 0, the run finished with an uninterrupted run's numbers."""
    (cmd, ref), out = uninterrupted, tmp_path / "cut"
    proc = subprocess.Popen([*cmd, str(out)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    _until(lambda: _rounds(out) >= 3 or proc.poll() is not None, 300, "a recorded round")
    proc.send_signal(sig)
    first = proc.communicate(timeout=120)[0]
    assert proc.returncode == (-9 if sig == signal.SIGKILL else 143), first
    assert _rounds(out) < KILL_ROUNDS, "the run ended before it was killed: raise KILL_ROUNDS"
    with ResultsStore(out)._connect() as conn:
        leases = conn.execute("SELECT COUNT(*) FROM leases").fetchone()[0]
    if sig == signal.SIGTERM:
        assert "terminated (SIGTERM)" in first and leases == 0, first
        assert list((out / "checkpoints").glob("*.pt")), "the checkpoint is kept"
    again = subprocess.run([*cmd, str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and "busy" not in again.stdout and " finished" in again.stdout, (
        again.stdout + again.stderr
    )
    cut = ResultsStore(out)
    assert set(cut.runs()["status"]) == {"finished"}
    pd.testing.assert_frame_equal(cut.metrics()[KILL_COLS], ref.metrics()[KILL_COLS], check_exact=True)  # bit-identical
