"""Warnings on the command line: one line each, ``warning: <message>`` on stderr, without Python's
``file:line: RuntimeWarning:`` prefix and source echo (a corrupt checkpoint set aside, a GradMA QP
fallback, a library's deprecation). Installed once, when :mod:`fedbench.cli` loads; the code that
warns keeps calling :func:`warnings.warn`."""

from __future__ import annotations

import sys
import warnings
from typing import Any, TextIO


def one_line(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    """:func:`warnings.showwarning` of the command line (the signature is Python's)."""
    text = " ".join(str(message).split())
    stream: Any = file if file is not None else sys.stderr
    if stream is None:  # no stderr (pythonw): nowhere to show it
        return
    try:
        stream.write(f"warning: {text}\n")
    except OSError:  # a closed stream: as Python's own, never fail for a warning
        pass


def install() -> None:
    """Show every warning as one line (idempotent)."""
    warnings.showwarning = one_line
