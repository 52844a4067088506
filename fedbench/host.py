"""Code that works on host copies by design: what it reads of its tensors is not a wait for a device.

A function decorated :func:`host_side` is handed tensors already on the host (it checks so) and may read them
as it likes: GradMA's QP solves its small reduced problems there (:mod:`fedbench.algorithms.projection`), after
one copy of their inputs. :class:`~fedbench.engine.pending.HostReads`, which counts the reads a GPU run would
wait for, leaves out the reads made inside such a function. This module imports nothing of fedbench, so that
every layer may use it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import CodeType
from typing import TypeVar

F = TypeVar("F", bound=Callable)

HOST_SIDE: set[CodeType] = set()  # the code objects of the functions decorated host_side


def host_side(fn: F) -> F:
    """Register ``fn`` as working on host tensors only (its reads are not device synchronisations)."""
    HOST_SIDE.add(fn.__code__)
    return fn


def in_host_side() -> bool:
    """Whether the caller runs inside a :func:`host_side` function (any frame of the stack)."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code in HOST_SIDE:
            return True
        frame = frame.f_back
    return False
