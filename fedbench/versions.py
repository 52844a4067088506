"""The versions a run trains with: fedbench, torch, numpy, Python and the dependency lock.

Each run's record stores them (:meth:`fedbench.store.ResultsStore.start_run`), and ``fedbench
--version`` prints them. The lock is the first line of ``requirements.lock`` beside the package
(``# lock: <id>``), read from the source tree the package was imported from; "none" when there is
no such file or no such line (an installed wheel, or a checkout without a lock).
"""

from __future__ import annotations

import platform
import re
from importlib import metadata
from pathlib import Path

import fedbench

LOCK_FILE = Path(fedbench.__file__).resolve().parents[1] / "requirements.lock"
_LOCK_LINE = re.compile(r"#\s*lock:\s*(\S+)")


def lock_id(path: Path = LOCK_FILE) -> str:
    """The ``<id>`` of the lock file's first line ``# lock: <id>``, or "none"."""
    try:
        with open(path, encoding="utf-8") as f:
            first = f.readline()
    except (OSError, UnicodeDecodeError):
        return "none"
    found = _LOCK_LINE.fullmatch(first.strip())
    return found.group(1) if found else "none"


def _installed(name: str) -> str:
    """``name``'s version as imported if it already is, else as installed (no import: torch is slow to load)."""
    import sys

    module = sys.modules.get(name)
    if module is not None and isinstance(getattr(module, "__version__", None), str):
        return str(module.__version__)
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "none"


def versions() -> dict[str, str]:
    """``{"fedbench", "torch", "numpy", "python", "lock"}`` → version strings ("none" for a missing one)."""
    return {
        "fedbench": fedbench.__version__,
        "torch": _installed("torch"),
        "numpy": _installed("numpy"),
        "python": platform.python_version(),
        "lock": lock_id(),
    }
