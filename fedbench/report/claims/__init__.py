"""Papers' claims as checkable statements: the framework in :mod:`.base`; each paper's claims live in
its room (``fedbench/papers/<paper>/claims.py``). Importing this package registers every room's claims."""

from fedbench.papers import paper_names, paper_part
from fedbench.report.claims.base import (
    CLAIMS,
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

for _paper in paper_names():
    paper_part(_paper, "claims")

__all__ = [
    "CLAIMS", "KINDS", "NOISE_K", "VERDICTS", "Check", "Claim", "ClaimResult", "Numbers", "StoreNumbers", "Verdict",
    "check_claims", "claim", "close", "fewer", "format_claims", "greater", "judge", "resolve_scale", "rich_claims",
    "tally", "tolerance", "within", "write_claims",
]
