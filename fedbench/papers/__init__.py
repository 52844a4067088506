"""Paper rooms: one package per reproduced paper, found by name.

A room ``fedbench/papers/<paper>/`` holds everything of one paper::

    reference.yaml   the published numbers (schema: fedbench.report.reference)
    claims.py        its claims, registered with fedbench.report.claims.base.claim
    room.py          ROOM: a fedbench.papers.targets.PaperRoom, its tables and figures as typed targets
    *.py             analytic tables of that paper only (FedQVR's costs.py)

The generic report room (:mod:`fedbench.report`) reaches a paper only through this lookup, so a
new paper is a new folder here. This module imports nothing of the report or the engine.
"""

from __future__ import annotations

import importlib
import pkgutil
from importlib import resources
from pathlib import Path
from types import ModuleType


class UnknownPaper(ValueError):
    """A paper name with no room; the message lists the known ones."""


def paper_names() -> list[str]:
    """The rooms (sub-packages with a ``reference.yaml``), sorted."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if m.ispkg and _has_reference(m.name))


def _has_reference(name: str) -> bool:
    return (Path(__path__[0]) / name / "reference.yaml").is_file()


def check_paper(paper: str, what: str = "paper") -> str:
    """``paper`` if it has a room, else :class:`UnknownPaper` naming it and the known ones."""
    if paper not in paper_names():
        raise UnknownPaper(f"unknown {what} {paper!r}; known: {', '.join(paper_names())}")
    return paper


def reference_text(paper: str) -> str:
    """The room's ``reference.yaml`` as text."""
    check_paper(paper, "paper (no reference numbers)")
    return resources.files(f"{__name__}.{paper}").joinpath("reference.yaml").read_text(encoding="utf-8")


def paper_part(paper: str, part: str) -> ModuleType:
    """The room's module ``part`` (``claims``, ``room``, ``costs``); importing ``claims`` registers them."""
    check_paper(paper)
    try:
        return importlib.import_module(f"{__name__}.{paper}.{part}")
    except ModuleNotFoundError as exc:
        if exc.name != f"{__name__}.{paper}.{part}":
            raise
        raise UnknownPaper(f"paper {paper!r} has no {part} (fedbench/papers/{paper}/{part}.py)") from None
