"""The local executor's workers end with their driver (issue 24 item 8): after ``kill -9`` of the
driver they get SIGTERM and exit, releasing their runs' leases; a SIGTERM to the driver stops them
and exits 143, as Ctrl-C does."""

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from fedbench.engine.lease import process_token
from fedbench.store import DB_NAME
from tests.factories import tiny_scenario

ROOT = Path(__file__).parents[2]
linux_only = pytest.mark.skipif(process_token() is None, reason="reads children from Linux /proc")


def _stat(pid: int) -> list[str] | None:
    """Fields 3.. of /proc/<pid>/stat (state first, parent pid second), None if there is no such process."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None


def _children(parent: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        fields = _stat(int(entry.name)) if entry.name.isdigit() else None
        if fields is not None and fields[1] == str(parent):
            found.append(int(entry.name))
    return found


def _running(pid: int) -> bool:
    fields = _stat(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def _query(out: Path, sql: str) -> int:
    try:
        with sqlite3.connect(f"{(out / DB_NAME).resolve().as_uri()}?mode=ro", uri=True) as conn:
            return conn.execute(sql).fetchone()[0]
    except sqlite3.OperationalError:  # no store, or no schema yet
        return 0


def _until(check, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


@linux_only
@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["kill-9", "sigterm"])
def test_pool_workers_end_with_their_driver(tmp_path, sig):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(tiny_scenario(rounds=5000, seeds=[0, 1])))
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "fedbench", "sweep", str(path), "--jobs", "2", "--device", "cpu", "--out", str(out)]
    driver = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    workers: list[int] = []
    try:
        # both runs are training (each holds its lease and has recorded rounds) in the two workers
        _until(
            lambda: _query(out, "SELECT COUNT(DISTINCT run_id) FROM metrics") == 2 or driver.poll() is not None,
            300,
            "two runs training",
        )
        assert driver.poll() is None, driver.communicate()[0]
        workers = [pid for pid in _children(driver.pid) if _running(pid)]
        assert len(workers) >= 2 and _query(out, "SELECT COUNT(*) FROM leases") == 2
        driver.send_signal(sig)
        output = driver.communicate(timeout=60)[0]
        assert driver.returncode == (-9 if sig == signal.SIGKILL else 143), output
        _until(lambda: not any(_running(pid) for pid in workers), 10, "the workers to exit")
        _until(lambda: _query(out, "SELECT COUNT(*) FROM leases") == 0, 10, "the leases to be released")
        assert _query(out, "SELECT COUNT(*) FROM runs WHERE status = 'running'") == 2  # resumable, not failed
    finally:
        for pid in [driver.pid, *workers]:
            if _running(pid):
                os.kill(pid, signal.SIGKILL)
        driver.wait()
