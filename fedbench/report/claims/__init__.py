"""Papers' claims as checkable statements: the framework in :mod:`.base`; each paper's claims live in
its room (``fedbench/papers/<paper>/claims.py``), imported by name through :mod:`fedbench.rooms` when
first needed: :func:`check_claims` imports the paper's, reading ``CLAIMS`` from this package every room's.
Importing this package imports no room (the report sits below :mod:`fedbench.papers`)."""

from fedbench.report.claims import base
from fedbench.report.claims.base import (
    KINDS,
    NOISE_K,
    VERDICTS,
    Check,
    Claim,
    ClaimResult,
    Numbers,
    StoreNumbers,
    Verdict,
    check_claims,
    claim,
    close,
    fewer,
    format_claims,
    greater,
    judge,
    resolve_scale,
    rich_claims,
    tally,
    tolerance,
    within,
    write_claims,
)
from fedbench.rooms import paper_names, paper_part, room_dir


def __getattr__(name: str):
    """``CLAIMS``: the claims of every room, each room's registered on first use."""
    if name != "CLAIMS":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    for paper in paper_names():
        if paper not in base.CLAIMS and (room_dir(paper) / "claims.py").is_file():  # a room may have none
            paper_part(paper, "claims")
    return base.CLAIMS


__all__ = [
    "CLAIMS",
    "KINDS",
    "NOISE_K",
    "VERDICTS",
    "Check",
    "Claim",
    "ClaimResult",
    "Numbers",
    "StoreNumbers",
    "Verdict",
    "check_claims",
    "claim",
    "close",
    "fewer",
    "format_claims",
    "greater",
    "judge",
    "resolve_scale",
    "rich_claims",
    "tally",
    "tolerance",
    "within",
    "write_claims",
]
