"""Each run trained once: a process claims a run's lease in the store before training it and
renews it from a heartbeat thread, so concurrent ``fedbench run`` / ``sweep`` processes on one
``--out`` split the runs instead of each training all of them. A killed holder stops renewing;
after :data:`~fedbench.store.LEASE_TTL_S` another process takes the run over (it resumes from
the run's last checkpoint)."""

from __future__ import annotations

import os
import socket
import threading
from contextlib import contextmanager
from typing import Iterator, Protocol

from fedbench.store import LEASE_TTL_S


class Leases(Protocol):
    """What :func:`leased` asks of a store."""

    def claim(self, run_id: str, holder: str) -> str | None: ...

    def renew(self, run_id: str, holder: str) -> None: ...

    def release(self, run_id: str, holder: str) -> None: ...


def holder() -> str:
    """This process's name in the lease table (host and pid, read when called: forked workers differ)."""
    return f"{socket.gethostname()}:{os.getpid()}"


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
    other = store.claim(run_id, me)
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
