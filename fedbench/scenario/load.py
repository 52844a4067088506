"""Loading: raw YAML → validated :class:`Scenario` with its runs resolved, once."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from fedbench.scenario.errors import ScenarioError, format_errors
from fedbench.scenario.files import apply_scale, read_yaml, set_override
from fedbench.scenario.resolve import resolve_runs
from fedbench.scenario.schema import Scenario


def parse_scenario(
    raw: Any,
    source: str = "scenario",
    overrides: Sequence[str] = (),
    scale: str | None = None,
    *,
    at_scale: str | None = None,
) -> Scenario:
    """Validate a raw mapping (as read from YAML) at ``scale`` into a :class:`Scenario` whose
    ``runs`` are resolved; raise :class:`ScenarioError` listing every problem. ``at_scale`` names
    the scale of a raw mapping whose ``scales`` overrides were already applied (sweep grid points)."""
    if not isinstance(raw, dict):
        raise ScenarioError([f"(top level): expected a mapping of keys, got {type(raw).__name__}"], source)
    raw = apply_scale(raw, scale, source)
    for name in ("dataset", "model"):  # `dataset: digits` shorthand
        if isinstance(raw.get(name), str):
            raw[name] = {"name": raw[name]}
    try:
        for assignment in overrides:
            set_override(raw, assignment)
    except ScenarioError as exc:
        raise ScenarioError(exc.problems, source) from None
    try:
        scenario = Scenario.model_validate(raw)
    except ValidationError as exc:
        raise ScenarioError(format_errors(exc), source) from None
    scenario._runs = resolve_runs(scenario, at_scale or scale or "paper", source)
    return scenario


def load_scenario(path: str | Path, overrides: Sequence[str] = (), scale: str | None = None) -> Scenario:
    """Read and validate a scenario YAML file, at ``scale`` (default: as written)."""
    return parse_scenario(read_yaml(path), str(path), overrides, scale)


def scenario_hash(scenario: Scenario) -> str:
    """Hash of the whole resolved scenario (all its runs' hashes and its seeds)."""
    parts = [spec.spec_hash() for spec in scenario.runs] + [str(s) for s in scenario.seeds]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()
