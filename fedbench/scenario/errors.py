"""Scenario errors: every problem is one ``YAML.path: message`` line."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError


class ScenarioError(ValueError):
    """A scenario that cannot run; ``problems`` lists ``path: message`` lines."""

    def __init__(self, problems: list[str], source: str = "scenario"):
        self.problems = problems
        super().__init__(f"{source} is invalid:\n" + "\n".join(f"  {p}" for p in problems))


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, str) and part.startswith("tune "):  # a union's tag (fedbench.scenario.tuning)
            continue
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def format_errors(err: ValidationError, prefix: str = "") -> list[str]:
    """pydantic's errors as ``prefix.path: message, got value`` lines."""
    lines = []
    for e in err.errors():
        path = _loc(tuple(e["loc"]))
        path = f"{prefix}.{path}" if prefix and path else (prefix or path or "(top level)")
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = "unknown key"
        elif e["type"] != "missing" and "input" in e and not isinstance(e["input"], dict):
            msg = f"{msg}, got {e['input']!r}"
        lines.append(f"{path}: {msg}")
    return lines
