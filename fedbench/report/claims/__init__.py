"""Papers' claims as checkable statements (framework in :mod:`.base`, one module per paper);
importing this package registers every paper's claims."""

from fedbench.report.claims import cflag, fedcams, fedmim, fedqvr, gradma  # noqa: F401  (registration)
from fedbench.report.claims.base import (
    CLAIMS, KINDS, NOISE_K, VERDICTS, Check, Claim, ClaimResult, Numbers, StoreNumbers, Verdict,
    check_claims, claim, close, fewer, format_claims, greater, judge, resolve_scale, rich_claims, tally, tolerance,
    within, write_claims,
)

__all__ = [
    "CLAIMS", "KINDS", "NOISE_K", "VERDICTS", "Check", "Claim", "ClaimResult", "Numbers", "StoreNumbers", "Verdict",
    "check_claims", "claim", "close", "fewer", "format_claims", "greater", "judge", "resolve_scale", "rich_claims",
    "tally", "tolerance", "within", "write_claims",
]
