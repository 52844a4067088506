"""Each run trained once: a process claims a run's lease in the store before training it and
renews it from a heartbeat thread, so concurrent ``fedbench run`` / ``sweep`` processes on one
``--out`` split the runs instead of each training all of them.

A lease names its holder (``host:pid``) and, on Linux, the holder's process identity
(:func:`process_token`: boot id, PID namespace and the process's start time, field 22 of
``/proc/<pid>/stat``). A lease whose holder ran on this machine and whose process is gone (no such
pid, a zombie, or the pid reused by a process started at another time) is taken over at once:
a killed run resumes from its last checkpoint as soon as the same command runs again. Any other
lease — held on another machine, in another PID namespace, written by an older fedbench without
a token, or on a system without ``/proc`` — is taken over only after it has not been renewed for
:data:`~fedbench.store.LEASE_TTL_S` seconds.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

from fedbench.store import LEASE_TTL_S

PROC = Path("/proc")
GONE_STATES = ("Z", "X")  # zombie (killed, not yet reaped) and dead: the process no longer runs


class Leases(Protocol):
    """What :func:`leased` asks of a store."""

    def claim(
        self,
        run_id: str,
        holder: str,
        ttl: float = LEASE_TTL_S,
        token: str | None = None,
        gone: Callable[[str, str | None], bool] | None = None,
    ) -> str | None: ...

    def renew(self, run_id: str, holder: str) -> None: ...

    def release(self, run_id: str, holder: str) -> None: ...


def holder() -> str:
    """This process's name in the lease table (host and pid, read when called: forked workers differ)."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def machine() -> str | None:
    """Which kernel and PID namespace pids are read in: ``<boot id>/<pid namespace>``; None without
    ``/proc`` (not Linux). Two processes compare pids only when this is equal."""
    boot, ns = _read(PROC / "sys/kernel/random/boot_id"), None
    try:
        ns = os.readlink(PROC / "self/ns/pid")
    except OSError:
        pass
    return None if boot is None or ns is None else f"{boot}/{ns}"


def _stat(pid: int) -> tuple[str, str] | None:
    """(state, start time in clock ticks since boot) of ``pid`` from ``/proc/<pid>/stat`` (fields 3
    and 22), None when there is no such process."""
    text = _read(PROC / str(pid) / "stat")
    if text is None:
        return None
    fields = text.rpartition(")")[2].split()  # the command name (field 2) may hold spaces and parentheses
    return fields[0], fields[19]


def process_token(pid: int | None = None) -> str | None:
    """The identity of process ``pid`` (default: this one): ``<machine>:<start ticks>``; None where
    it cannot be read (not Linux), which leaves the holder's lease to the TTL rule."""
    pid = os.getpid() if pid is None else pid
    where, stat = machine(), _stat(pid)
    return None if where is None or stat is None else f"{where}:{stat[1]}"


def holder_gone(other: str, token: str | None) -> bool:
    """Whether the lease holder ``other`` (``host:pid``, with its :func:`process_token`) is a process
    of this machine that no longer runs: no such pid, a zombie, or a pid now used by a process that
    started at another time. False whenever that cannot be known here (then the TTL rule applies)."""
    host, _, pid = other.rpartition(":")
    if token is None or host != socket.gethostname() or not pid.isdigit():
        return False
    where, _, started = token.rpartition(":")
    if where != machine():
        return False
    stat = _stat(int(pid))
    return stat is None or stat[0] in GONE_STATES or stat[1] != started


def _beat(store: Leases, run_id: str, me: str, stop: threading.Event, every: float) -> None:
    while not stop.wait(every):
        try:
            store.renew(run_id, me)
        except Exception:  # a busy store misses one beat; the next one renews
            pass


@contextmanager
def leased(store: Leases, run_id: str, every: float = LEASE_TTL_S / 4) -> Iterator[str | None]:
    """Hold the run's lease while the block runs (yields None), renewing it every ``every``
    seconds; yields the other holder, and holds nothing, when a live process has it."""
    me = holder()
    other = store.claim(run_id, me, token=process_token(), gone=holder_gone)
    if other is not None:
        yield other
        return
    stop = threading.Event()
    thread = threading.Thread(target=_beat, args=(store, run_id, me, stop, every), daemon=True)
    thread.start()
    try:
        yield None
    finally:
        stop.set()
        thread.join()
        store.release(run_id, me)
