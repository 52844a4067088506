"""Scenario files on disk: YAML with ``extends:``, ``scales:`` and dotted-key overrides (``--set``).

Everything here works on the raw mapping, before validation (:mod:`.load`)."""

from __future__ import annotations

import copy
import re
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
    raw = parse_yaml(_read_text(path), str(path))
    if not isinstance(raw, dict) or "extends" not in raw:
        return raw
    base_path = (path.parent / str(raw.pop("extends"))).resolve()
    if base_path in _seen:
        raise ScenarioError([f"extends: {base_path} extends itself (cycle)"], str(path))
    base = read_yaml(base_path, (*_seen, path.resolve()))
    if not isinstance(base, dict):
        raise ScenarioError([f"extends: {base_path} is not a mapping of scenario keys"], str(path))
    return deep_merge(base, raw)


def _read_text(path: Path) -> str:
    """The file's text; a missing, unreadable, directory or binary file is a :class:`ScenarioError`."""
    if path.is_dir():
        raise ScenarioError([f"{path} is a directory, not a scenario file"], str(path))
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScenarioError([f"file not found: {path}"], str(path)) from None
    except UnicodeDecodeError:
        raise ScenarioError([f"{path} is not a text file (not UTF-8)"], str(path)) from None
    except OSError as exc:
        raise ScenarioError([f"cannot read {path}: {exc.strerror or exc}"], str(path)) from None


FLOAT_EXPONENT = re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9][0-9_]*)[eE][-+]?[0-9]+$")


class ScenarioLoader(yaml.SafeLoader):
    """PyYAML's safe loader, which follows YAML 1.1, plus YAML 1.2's exponent floats: ``1e-3`` and
    ``1.0e5`` are numbers, not strings (values are strict, :mod:`fedbench.strict`, so a learning rate
    written ``1e-3`` would otherwise be refused)."""


# The C loader (libyaml), when PyYAML has it, first: about 5× faster.
LOADERS: list[type[yaml.SafeLoader | yaml.CSafeLoader]] = [ScenarioLoader]
if hasattr(yaml, "CSafeLoader"):

    class CScenarioLoader(yaml.CSafeLoader):
        __doc__ = ScenarioLoader.__doc__

    LOADERS.insert(0, CScenarioLoader)
for _loader in LOADERS:
    _loader.add_implicit_resolver("tag:yaml.org,2002:float", FLOAT_EXPONENT, list("-+0123456789."))


def _compose(loader_class: type[yaml.SafeLoader | yaml.CSafeLoader], text: str, source: str) -> Any:
    """Parse with ``loader_class``; a key given twice is a :class:`ScenarioError`."""
    loader = loader_class(text)
    try:
        node = loader.get_single_node()
        problems = [] if node is None else duplicate_keys(node, "")
        if problems:
            raise ScenarioError(problems, source)
        return None if node is None else loader.construct_document(node)
    finally:
        loader.dispose()


def parse_yaml(text: str, source: str) -> Any:
    """YAML text → Python values (:class:`ScenarioLoader`), refusing a key given twice in one mapping
    (YAML would keep the last one silently): ``local.lr: key given twice (lines 4 and 9)``. A file
    that is not valid YAML is parsed again by the pure-Python loader, whose message is worded here."""
    if len(LOADERS) > 1:
        try:
            return _compose(LOADERS[0], text, source)
        except yaml.YAMLError:
            pass
    try:
        return _compose(ScenarioLoader, text, source)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = "" if mark is None else f" at line {mark.line + 1}, column {mark.column + 1}"
        raise ScenarioError([f"not valid YAML{where}: {exc.problem or exc.context}"], source) from None
    except yaml.YAMLError as exc:
        raise ScenarioError([f"not valid YAML: {' '.join(str(exc).split())}"], source) from None


def duplicate_keys(node: yaml.Node, path: str) -> list[str]:
    """``path: key given twice (lines a and b)`` for every mapping key repeated under ``node``."""
    problems: list[str] = []
    if isinstance(node, yaml.MappingNode):
        lines: dict[str, int] = {}
        for key_node, value_node in node.value:
            key = str(key_node.value)
            where = f"{path}.{key}" if path else key
            if key in lines:
                problems.append(f"{where}: key given twice (lines {lines[key]} and {key_node.start_mark.line + 1})")
            lines.setdefault(key, key_node.start_mark.line + 1)
            problems += duplicate_keys(value_node, where)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            problems += duplicate_keys(item, f"{path}[{i}]")
    return problems


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
    """Set the dotted ``key`` of a raw scenario dict to ``value`` (replacing whole blocks). A key
    inside a block switched off with ``false`` (``tune: false``) is left out: the block stays off."""
    node = raw
    parts = key.strip().split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if node is False:
            return
        if not isinstance(node, dict):
            raise ScenarioError([f"{origin} {key}: {part!r} is not a mapping"])
    node[parts[-1]] = copy.deepcopy(value)


def set_override(raw: dict[str, Any], assignment: str) -> None:
    """Apply one ``dotted.key=value`` override (value parsed as YAML) to a raw scenario dict."""
    if "=" not in assignment:
        raise ScenarioError([f"--set {assignment!r}: expected KEY=VALUE, e.g. rounds=5"])
    key, value = assignment.split("=", 1)
    if not all(part.strip() for part in key.split(".")):
        raise ScenarioError(
            [
                f"--set {assignment!r}: expected KEY=VALUE with a dotted key before '=', e.g. rounds=5 "
                "or partition.omega=0.5"
            ]
        )
    apply_override(raw, key, parse_yaml(value, f"--set {assignment}"))


# What a reduced scale sets unless a file's own ``scales[scale]`` overrides set it. The tiny scale trains
# in float64 so that its committed tables are the same on every CPU (fedbench/engine/precision.py).
SCALE_DEFAULTS: dict[str, dict[str, Any]] = {"tiny": {"local.precision": "fp64"}}


def apply_scale(raw: dict[str, Any], scale: str | None, source: str = "scenario") -> dict[str, Any]:
    """The raw scenario at ``scale``: its ``scales[scale]`` overrides applied, then the keys of
    :data:`SCALE_DEFAULTS` that the overrides do not set themselves, ``.scale`` appended to the name,
    and the ``scales`` block removed. ``None`` or ``paper`` is the file as written."""
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
    for key, value in SCALE_DEFAULTS.get(scale, {}).items():
        if not _names(scales[scale], key):
            apply_override(raw, key, value, origin=f"scales.{scale}")
    raw["name"] = f"{raw.get('name')}.{scale}"
    return raw


def _names(overlay: dict[str, Any], dotted: str) -> bool:
    """Whether a scale's ``overlay`` sets ``dotted`` itself: as that key, or inside a mapping it gives
    one of its parents (``local: {precision: fp32}``)."""
    parts = dotted.split(".")
    for i in range(1, len(parts) + 1):
        node: Any = overlay.get(".".join(parts[:i]))
        for part in parts[i:]:
            node = node.get(part) if isinstance(node, dict) else None
        if node is not None:
            return True
    return False


def scale_names(raw: dict[str, Any]) -> list[str]:
    """``paper`` plus the scales a raw scenario defines."""
    return ["paper", *((raw.get("scales") or {}).keys())]
