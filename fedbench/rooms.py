"""Where the paper rooms are, found by name: the lookup every layer may use, below the report and the rooms.

A room is a folder ``<paper>/`` with a ``reference.yaml``, imported as the package
``fedbench.papers.<paper>`` (its parts: ``room``, ``claims``, ``costs``; :mod:`fedbench.papers`).
Rooms are found in two places, in this order:

- ``fedbench/papers/<paper>/``: the rooms shipped with fedbench;
- every folder of the environment variable ``FEDBENCH_ROOMS`` (``os.pathsep``-separated): rooms kept
  outside the repository (a new paper tried before it moves in, or one a test writes). Its scenario
  files are named from the folder ``fedbench reproduce`` runs in, as the shipped rooms' are.

A shipped room wins over an outside room of the same name. This module imports nothing of fedbench:
the report (claims, reference numbers) reaches a room through it by name, never by importing
:mod:`fedbench.papers`, which sits above the report.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from types import ModuleType

PACKAGE = "fedbench.papers"  # the package every room is a sub-package of
SHIPPED = Path(__file__).parent / "papers"
ENV = "FEDBENCH_ROOMS"


class UnknownPaper(ValueError):
    """A paper name with no room; the message lists the known ones."""


def room_dirs() -> list[Path]:
    """The folders rooms are found in: ``fedbench/papers/``, then each folder of ``FEDBENCH_ROOMS``."""
    extra = [Path(p) for p in os.environ.get(ENV, "").split(os.pathsep) if p]
    return [SHIPPED, *extra]


def _rooms() -> dict[str, Path]:
    """Each room's name → its folder (the first folder of :func:`room_dirs` holding it)."""
    found: dict[str, Path] = {}
    for folder in room_dirs():
        if folder.is_dir():
            for ref in sorted(folder.glob("*/reference.yaml")):
                if ref.parent.name.isidentifier():
                    found.setdefault(ref.parent.name, ref.parent)
    return found


def paper_names() -> list[str]:
    """The rooms (folders with a ``reference.yaml``), sorted."""
    return sorted(_rooms())


def room_dir(paper: str) -> Path:
    """The room's folder."""
    return _rooms()[check_paper(paper)]


def check_paper(paper: str, what: str = "paper") -> str:
    """``paper`` if it has a room, else :class:`UnknownPaper` naming it and the known ones."""
    if paper not in paper_names():
        raise UnknownPaper(f"unknown {what} {paper!r}; known: {', '.join(paper_names())}")
    return paper


def reference_text(paper: str) -> str:
    """The room's ``reference.yaml`` as text."""
    check_paper(paper, "paper (no reference numbers)")
    return (_rooms()[paper] / "reference.yaml").read_text(encoding="utf-8")


def paper_part(paper: str, part: str) -> ModuleType:
    """The room's module ``part`` (``claims``, ``room``, ``costs``); importing ``claims`` registers them."""
    folder = room_dir(paper)
    _with_outside_rooms()
    name = f"{PACKAGE}.{paper}.{part}"
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name != name:
            raise
        raise UnknownPaper(f"paper {paper!r} has no {part} ({folder}/{part}.py)") from None


def _with_outside_rooms() -> None:
    """Make the ``FEDBENCH_ROOMS`` folders part of the package's search path (a room there imports as
    ``fedbench.papers.<paper>``, as a shipped one)."""
    package = sys.modules.get(PACKAGE) or importlib.import_module(PACKAGE)
    path = package.__path__
    new = [str(d) for d in room_dirs()[1:] if str(d) not in path]
    if new:
        path.extend(new)
        importlib.invalidate_caches()
