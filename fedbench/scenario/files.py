"""Scenario files on disk: YAML with ``extends:``, ``scales:`` and dotted-key overrides (``--set``).

Everything here works on the raw mapping, before validation (:mod:`.load`)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from fedbench.scenario.errors import ScenarioError


def read_yaml(path: str | Path, _seen: tuple[Path, ...] = ()) -> Any:
    """The raw content of a scenario file, with file and YAML errors as :class:`ScenarioError`.

    ``extends: other.yaml`` (relative to the file) starts from that file's content: mappings merge
    key by key (``scales`` too), the extending file's values win, lists and scalars are replaced.
    A table's columns share their algorithm list and common settings this way."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ScenarioError([f"file not found: {path}"], str(path)) from None
    except yaml.YAMLError as exc:
        raise ScenarioError([f"not valid YAML: {exc}"], str(path)) from None
    if not isinstance(raw, dict) or "extends" not in raw:
        return raw
    base_path = (path.parent / str(raw.pop("extends"))).resolve()
    if base_path in _seen:
        raise ScenarioError([f"extends: {base_path} extends itself (cycle)"], str(path))
    base = read_yaml(base_path, (*_seen, path.resolve()))
    if not isinstance(base, dict):
        raise ScenarioError([f"extends: {base_path} is not a mapping of scenario keys"], str(path))
    return deep_merge(base, raw)


def deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """``base`` updated by ``top``: nested mappings merge recursively, anything else is replaced."""
    out = copy.deepcopy(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def apply_override(raw: dict[str, Any], key: str, value: Any, origin: str = "--set") -> None:
    """Set the dotted ``key`` of a raw scenario dict to ``value`` (replacing whole blocks)."""
    node = raw
    parts = key.strip().split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ScenarioError([f"{origin} {key}: {part!r} is not a mapping"])
    node[parts[-1]] = copy.deepcopy(value)


def set_override(raw: dict[str, Any], assignment: str) -> None:
    """Apply one ``dotted.key=value`` override (value parsed as YAML) to a raw scenario dict."""
    if "=" not in assignment:
        raise ScenarioError([f"--set {assignment!r}: expected KEY=VALUE, e.g. rounds=5"])
    key, value = assignment.split("=", 1)
    apply_override(raw, key, yaml.safe_load(value))


def apply_scale(raw: dict[str, Any], scale: str | None, source: str = "scenario") -> dict[str, Any]:
    """The raw scenario at ``scale``: its ``scales[scale]`` overrides applied, ``.scale`` appended
    to the name, and the ``scales`` block removed. ``None`` or ``paper`` is the file as written."""
    raw = copy.deepcopy(raw)
    scales = raw.pop("scales", None) or {}
    if not isinstance(scales, dict) or not all(isinstance(v, dict) for v in scales.values()):
        raise ScenarioError(["scales: expected a mapping of scale name → {dotted.key: value}"], source)
    if scale in (None, "paper"):
        return raw
    if scale not in scales:
        known = ", ".join(["paper", *scales]) if scales else "paper (this file defines no other scale)"
        raise ScenarioError([f"--scale {scale!r}: unknown scale; this file has: {known}"], source)
    for key, value in scales[scale].items():
        apply_override(raw, key, value, origin=f"scales.{scale}")
    raw["name"] = f"{raw.get('name')}.{scale}"
    return raw


def scale_names(raw: dict[str, Any]) -> list[str]:
    """``paper`` plus the scales a raw scenario defines."""
    return ["paper", *((raw.get("scales") or {}).keys())]
