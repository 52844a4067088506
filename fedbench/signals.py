"""How a fedbench process ends on a signal: SIGTERM as Ctrl-C, and pool workers that die with their parent.

- :func:`sigterm_as_interrupt`: while a command trains, SIGTERM raises :class:`Terminated`, a
  ``KeyboardInterrupt``, so it unwinds exactly as Ctrl-C does (the run's lease is released, its
  rounds and last checkpoint stay, the same command resumes it). The command then exits
  :data:`TERMINATED_EXIT` (143 = 128 + SIGTERM, the shell's code for a process SIGTERM ended),
  Ctrl-C :data:`INTERRUPTED_EXIT` (130 = 128 + SIGINT).
- :func:`die_with_parent`: a pool worker gets SIGTERM when the process that started it exits,
  even by ``kill -9`` (Linux ``prctl(PR_SET_PDEATHSIG)``, plus a watch of the parent pid every
  :data:`PARENT_POLL_S` seconds that works everywhere).
"""

from __future__ import annotations

import ctypes
import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

INTERRUPTED_EXIT = 130
TERMINATED_EXIT = 143
PARENT_POLL_S = 1.0
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived: raised where Ctrl-C raises ``KeyboardInterrupt`` (and caught with it)."""


def exit_code(exc: BaseException) -> int:
    """143 for a SIGTERM (:class:`Terminated`), 130 for Ctrl-C."""
    return TERMINATED_EXIT if isinstance(exc, Terminated) else INTERRUPTED_EXIT


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, the first SIGTERM raises :class:`Terminated` in the main thread (later ones,
    while it unwinds, are ignored); the previous handler is restored on exit. A no-op outside the
    main thread, where Python cannot install handlers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    raised = [False]

    def handler(signum: int, frame: object) -> None:
        if not raised[0]:
            raised[0] = True
            raise Terminated()

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _watch(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_S)
    os.kill(os.getpid(), signal.SIGTERM)


def die_with_parent(parent: int) -> None:
    """Send this process SIGTERM when its parent (pid ``parent``) exits: at once on Linux (the
    kernel's parent-death signal), within :data:`PARENT_POLL_S` elsewhere (a daemon thread sees the
    parent pid change), and now if the parent is already gone."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    except (OSError, AttributeError, TypeError):  # not Linux: the watch below does it
        pass
    threading.Thread(target=_watch, args=(parent,), daemon=True, name="fedbench-parent-watch").start()
