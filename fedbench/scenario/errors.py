"""Scenario errors: every problem is one ``YAML.path: message`` line."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

MAX_SHOWN = 20  # problems printed; the rest are counted


class ScenarioError(ValueError):
    """A scenario that cannot run; ``problems`` lists ``path: message`` lines. Its message is one
    line for one problem (``s.yaml: rounds: …``), else the first :data:`MAX_SHOWN` and a count of the rest."""

    def __init__(self, problems: list[str], source: str = "scenario"):
        self.problems, self.source = problems, source
        if len(problems) == 1:
            super().__init__(f"{source}: {problems[0]}")
            return
        more = len(problems) - MAX_SHOWN
        lines = [f"  {p}" for p in problems[:MAX_SHOWN]] + ([f"  … and {more} more"] if more > 0 else [])
        super().__init__(f"{source} is invalid ({len(problems)} problems):\n" + "\n".join(lines))


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, str) and part.startswith("tune "):  # a union's tag (fedbench.scenario.tunespec)
            continue
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


STRICT_TYPES = ("int_type", "float_type", "bool_type", "string_type")  # strict mode's type errors (fedbench.strict)


def _kind(value: Any) -> str:
    return {str: "a string", float: "a float", int: "an integer", bool: "a boolean"}.get(
        type(value), type(value).__name__
    )


def format_errors(err: ValidationError, prefix: str = "") -> list[str]:
    """pydantic's errors as ``prefix.path: message, got value`` lines; a strict type error says what
    the key takes: ``rounds: Input should be a valid integer, got '3' (a string; values are strict)``."""
    lines = []
    for e in err.errors():
        path = _loc(tuple(e["loc"]))
        path = f"{prefix}.{path}" if prefix and path else (prefix or path or "(top level)")
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = "unknown key"
        elif e["type"] in STRICT_TYPES and not isinstance(e.get("input"), (dict, list, tuple)):
            msg = f"{msg}, got {e['input']!r} ({_kind(e['input'])}; values are strict)"
        elif e["type"] != "missing" and "input" in e and not isinstance(e["input"], dict):
            msg = f"{msg}, got {e['input']!r}"
        lines.append(f"{path}: {msg}")
    return lines
