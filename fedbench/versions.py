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


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def lock_pins(path: Path = LOCK_FILE) -> dict[str, str]:
    """The lock's ``name==version`` lines as {canonical name: version} (empty without a lock)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return {}
    pins = (line.split("#")[0].strip().split("==") for line in text.splitlines())
    return {_canonical(p[0]): p[1].strip() for p in pins if len(p) == 2}


def lock_differences(path: Path = LOCK_FILE) -> list[str]:
    """``name installed (lock pinned)`` for each installed package whose version is not the lock's; a local
    build label does not count (torch ``2.14.1+cpu`` is the lock's ``2.14.1``), nor a package the lock pins
    that is not installed (the CPU build of torch needs none of the CUDA wheels)."""
    found = []
    for name, pinned in sorted(lock_pins(path).items()):
        try:
            have = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
        if have.split("+")[0] != pinned.split("+")[0]:
            found.append(f"{name} {have} (lock {pinned})")
    return found


def version_text() -> str:
    """What ``fedbench --version`` prints: fedbench's, torch's and Python's versions, and the lock's id and
    whether the installed packages are the lock's."""
    v = versions()
    lines = [f"fedbench {v['fedbench']}", f"torch {v['torch']}, numpy {v['numpy']}, python {v['python']}"]
    if v["lock"] == "none":
        lines.append("lock: none (not a checkout with requirements.lock)")
    else:
        differ = lock_differences()
        lines.append(
            f"lock {v['lock']}: "
            + (
                "every installed package is at the lock's version"
                if not differ
                else f"{len(differ)} installed package(s) differ from it: " + ", ".join(differ)
            )
        )
    return "\n".join(lines)


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
