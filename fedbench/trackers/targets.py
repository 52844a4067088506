"""The trackers ``--log`` and ``fedbench export --to`` name: ``tensorboard[:DIR]``, ``mlflow[:URI]``, parsed and
checked (known kind, library installed) without importing either library."""

from __future__ import annotations

import importlib.util
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

TRACKERS: dict[str, tuple[str, ...]] = {  # target → the modules it needs (its pip extra has the same name)
    "tensorboard": ("tensorboard",),
    "mlflow": ("mlflow",),
}
SQLITE_MODULES = ("sqlalchemy", "alembic")  # MLflow's SQLite store (the default URI) needs these too
FORMS = "tensorboard[:DIR] or mlflow[:URI]"


@dataclass(frozen=True)
class LogTarget:
    """One tracker to write to: ``kind`` (tensorboard, mlflow) and its ``dest`` (a folder, a tracking
    URI; None: the default under the store's folder, :meth:`where`)."""

    kind: str
    dest: str | None = None

    def __str__(self) -> str:
        return self.kind if self.dest is None else f"{self.kind}:{self.dest}"

    def where(self, out: Path) -> str:
        """The folder (tensorboard) or tracking URI (mlflow) for the store in ``out``."""
        if self.kind == "tensorboard":
            return self.dest if self.dest is not None else str(out / "tensorboard")
        dest = self.dest if self.dest is not None else str(out / "mlflow.db")
        return dest if _has_scheme(dest) else "sqlite:///" + str(Path(dest).absolute())


def _has_scheme(uri: str) -> bool:
    """``http://...``, ``sqlite:///...``, ``databricks``: a tracking URI as MLflow reads it, not a path."""
    return bool(re.match(r"^[A-Za-z][A-Za-z0-9+.-]+://", uri)) or uri.split(":")[0] in ("databricks", "uc")


def _installed(module: str) -> bool:
    """Whether ``module`` can be imported (found without importing it; None in sys.modules: absent)."""
    if module in sys.modules:
        return sys.modules[module] is not None
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def check_installed(target: LogTarget, option: str = "--log") -> None:
    """ValueError (one line naming ``option`` and the pip extra) unless the target's library is installed."""
    needs = TRACKERS[target.kind]
    if target.kind == "mlflow" and target.where(Path(".")).startswith("sqlite:"):
        needs = (*needs, *SQLITE_MODULES)
    absent = [m for m in needs if not _installed(m)]
    if absent:
        raise ValueError(f"{option} {target}: {', '.join(absent)} not installed; pip install 'fedbench[{target.kind}]'")


def make_target(kind: str, dest: str | None = None, option: str = "--log") -> LogTarget:
    """A checked :class:`LogTarget` (known kind, non-empty dest, library installed); else ValueError
    with one line naming ``option``."""
    shown = kind if dest is None else f"{kind}:{dest}"
    if kind not in TRACKERS:
        raise ValueError(f"{option} {shown}: expected {FORMS}")
    if dest is not None and not dest.strip():
        raise ValueError(f"{option} {shown}: empty {'DIR' if kind == 'tensorboard' else 'URI'} after the colon")
    target = LogTarget(kind, dest)
    check_installed(target, option)
    return target


def parse_log(
    values: str | LogTarget | Iterable[str | LogTarget] | None, option: str = "--log"
) -> tuple[LogTarget, ...]:
    """``--log`` as given (repeated, or comma-separated: ``tensorboard,mlflow:http://host:5000``) as
    checked targets, duplicates dropped; ValueError with one line naming the option and the value."""
    if values is None:
        return ()
    items = [values] if isinstance(values, (str, LogTarget)) else list(values)
    targets: list[LogTarget] = []
    for item in items:
        if isinstance(item, LogTarget):
            parts = [make_target(item.kind, item.dest, option)]
        elif isinstance(item, str):
            parts = [_target(p.strip(), option) for p in item.split(",")]
        else:
            raise ValueError(f"{option}: expected {FORMS}, got {item!r}")
        targets += [t for t in parts if t not in targets]
    return tuple(targets)


def export_targets(to: str, dest: str | None = None) -> tuple[LogTarget, ...]:
    """``fedbench export --to TO [--dest DEST]`` as checked targets (``--dest`` goes with one bare kind)."""
    if dest is None:
        return parse_log(to, "--to")
    if "," in to or ":" in to:
        raise ValueError(f"--dest {dest}: goes with one tracker named without a destination, got --to {to}")
    return (make_target(to, dest, "--to"),)


def _target(text: str, option: str) -> LogTarget:
    kind, colon, dest = text.partition(":")
    if kind in ("tensorboard", "mlflow") and colon:
        return make_target(kind, dest, option)
    return make_target(text, None, option)


DESCRIPTIONS = {
    "tensorboard": ("<out>/tensorboard", "event files, a folder per run <scenario>/<label>/<run id>; HParams"),
    "mlflow": ("sqlite:///<out>/mlflow.db", "an experiment per scenario, a run per run (tag fedbench.run_id)"),
}


def tracker_rows() -> list[tuple[str, ...]]:
    """``fedbench list trackers``: each target, its default destination, what it holds, and whether it is installed."""
    rows: list[tuple[str, ...]] = [("--log / --to", "default destination", "what it holds", "installed")]
    for kind, (where, what) in DESCRIPTIONS.items():
        needs = (*TRACKERS[kind], *(SQLITE_MODULES if kind == "mlflow" else ()))
        absent = [m for m in needs if not _installed(m)]
        state = "yes" if not absent else f"no: pip install 'fedbench[{kind}]'"
        rows.append((f"{kind}[:{'DIR' if kind == 'tensorboard' else 'URI'}]", where, what, state))
    return rows
