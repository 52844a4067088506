"""Grid files: a base scenario and a cartesian product of dotted-key overrides, expanded into runs.

A grid file names a base scenario (relative to the grid file) and the values to sweep::

    base: ../quickstart.yaml
    scale: tiny                 # optional: a scale the base defines (default: as written)
    grid:                       # every combination becomes one scenario ("point")
      partition.omega: [0.1, 1.0]
      clients.per_round: [5, 10]
    set: {rounds: 20}           # optional: fixed overrides of every point (not in the names)
    seeds: [0, 1]               # optional: replaces the base's seeds
    name: omega_s               # optional: prefix of the point names (default: the base's name)

Overrides go through :func:`fedbench.scenario.apply_override` (a dotted key replaces that value or
block), after the scale. Point ``{partition.omega: 0.1, clients.per_round: 5}`` of ``quickstart``
at scale ``tiny`` is the scenario ``quickstart--omega-0.1--per_round-5.tiny``: the scale stays the
last ``.suffix`` (reports read it from there) and names keep to scenario names' characters. A
point of a non-empty grid drops the base's ``paper`` reference: a variant is no cell of the
paper's table. A plain scenario file is a grid of one point with the scenario's own name, so
its run ids equal those of ``fedbench run``.
"""

from __future__ import annotations

import copy
import itertools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, ValidationError

from fedbench.scenario import (
    RunSpec,
    Scenario,
    ScenarioError,
    apply_override,
    apply_scale,
    parse_scenario,
    read_yaml,
    run_id_of,
    scenario_hash,
)
from fedbench.strict import Seed, StrictModel

_NAME = r"^[A-Za-z0-9_.\-]+$"


class SweepError(ValueError):
    """A sweep that cannot start (bad option, missing dependency); the message says what is allowed."""


class GridFile(StrictModel):
    """The schema of a grid file (see the module docstring); its values are strict, as a scenario's."""

    base: str = Field(description="scenario file, relative to the grid file")
    scale: str | None = Field(default=None, description="a scale the base defines (default: the file as written)")
    grid: dict[str, list[Any]] = Field(default_factory=dict, description="dotted key → non-empty list of values")
    set: dict[str, Any] = Field(default_factory=dict, description="dotted key → value, applied to every point")
    seeds: list[Seed] | None = Field(default=None, min_length=1, description="replaces the base's seeds")
    name: str | None = Field(default=None, pattern=_NAME, description="prefix of the point names")


@dataclass(frozen=True)
class SweepPoint:
    """One scenario of a sweep: a grid point (``overrides``) of a base file."""

    scenario: Scenario
    overrides: dict[str, Any]
    source: str


@dataclass(frozen=True)
class SweepRun:
    """One (algorithm, seed) of a sweep point: what an executor runs."""

    spec: RunSpec
    seed: int
    scenario_hash: str

    @property
    def run_id(self) -> str:
        return run_id_of(self.spec, self.seed)

    def describe(self) -> str:
        return f"{self.spec.scenario}  {self.spec.label} seed {self.seed}"


def _value_text(value: Any) -> str:
    """A grid value as it appears in a point name: YAML-like scalars, lists joined by ``_``."""
    if isinstance(value, bool) or value is None:
        return yaml.safe_dump(value).splitlines()[0]
    if isinstance(value, (list, tuple)):
        return "_".join(_value_text(v) for v in value)
    if isinstance(value, dict):
        return "_".join(f"{k}-{_value_text(v)}" for k, v in value.items())
    return str(value)


def _short_keys(keys: list[str]) -> dict[str, str]:
    """Each dotted key by its last part when that part is unique among the keys, else in full."""
    last = [k.split(".")[-1] for k in keys]
    return {k: (s if last.count(s) == 1 else k.replace(".", "_")) for k, s in zip(keys, last)}


def point_name(prefix: str, point: dict[str, Any], scale: str | None) -> str:
    """``<prefix>--<key>-<value>--…[.scale]``, with characters outside ``[A-Za-z0-9_.-]`` as ``_``
    and every ``.`` not followed by a digit as ``_`` (so that the scale stays the only ``.name``)."""
    short = _short_keys(list(point))
    suffix = "".join(f"--{short[k]}-{_value_text(v)}" for k, v in point.items())
    suffix = re.sub(r"\.(?!\d)", "_", re.sub(r"[^A-Za-z0-9_.\-]", "_", suffix))
    return prefix + suffix + ("" if scale in (None, "paper") else f".{scale}")


def _describe(point: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in point.items())


def read_grid(path: Path) -> GridFile | None:
    """The grid file at ``path``, or None when it is a plain scenario file (no ``base`` key)."""
    raw = read_yaml(path)
    if not isinstance(raw, dict) or "base" not in raw:
        return None
    try:
        return GridFile.model_validate(raw)
    except ValidationError as exc:
        problems = [f"{'.'.join(map(str, e['loc'])) or '(top level)'}: {e['msg']}" for e in exc.errors()]
        raise ScenarioError(problems, str(path)) from None


def expand_file(path: str | Path, scale: str | None = None, skipped: list[str] | None = None) -> list[SweepPoint]:
    """The points of a grid file, or the single point of a plain scenario file. ``scale`` (the
    command line's ``--scale``) replaces the grid file's ``scale``. Errors name the file, and for
    a point its grid keys and values; with a ``skipped`` list, an invalid point's error is appended
    there and the point left out instead (the file itself must still be valid)."""
    path = Path(path)
    grid = read_grid(path)
    if grid is None:
        return [SweepPoint(parse_scenario(read_yaml(path), str(path), scale=scale), {}, str(path))]
    empty = [k for k, values in grid.grid.items() if not values]
    if empty:
        raise ScenarioError([f"grid.{k}: expected a non-empty list of values" for k in empty], str(path))
    scale = scale if scale is not None else grid.scale
    base_path = path.parent / grid.base
    raw = apply_scale(read_yaml(base_path), scale, str(base_path))
    try:
        for key, value in grid.set.items():
            apply_override(raw, key, value, origin="set:")
    except ScenarioError as exc:
        raise ScenarioError(exc.problems, str(path)) from None
    if grid.seeds is not None:
        raw["seeds"] = list(grid.seeds)
    prefix = grid.name or str(raw.get("name"))
    if scale not in (None, "paper"):
        prefix = prefix.removesuffix(f".{scale}")
    keys = list(grid.grid)
    points = []
    for values in itertools.product(*grid.grid.values()):
        point = dict(zip(keys, values))
        point_raw = copy.deepcopy(raw)
        where = f"{path}: grid point {_describe(point)}" if point else str(path)
        try:
            for key, value in point.items():
                apply_override(point_raw, key, value, origin="grid:")
            if point or grid.name:
                point_raw["name"] = point_name(prefix, point, scale)
            if point:
                point_raw.pop("paper", None)
            scenario = parse_scenario(point_raw, where, at_scale=scale)
        except ScenarioError as exc:
            if skipped is None:
                raise ScenarioError(exc.problems, where) from None
            skipped.append(f"{where}: {'; '.join(exc.problems)}")
            continue
        points.append(SweepPoint(scenario, point, str(path)))
    return points


def expand(
    paths: list[str | Path], scale: str | None = None, seeds: list[int] | None = None, skipped: list[str] | None = None
) -> list[SweepPoint]:
    """Every point of every file, in order; ``seeds`` (``--seeds``) replaces each point's seeds;
    invalid points go to ``skipped`` when it is given (see :func:`expand_file`). Two points with
    one name but different runs are an error (their reports would mix)."""
    points = []
    for path in paths:
        for p in expand_file(path, scale, skipped):
            sc = p.scenario if seeds is None else p.scenario.model_copy(update={"seeds": list(seeds)})
            points.append(SweepPoint(sc, p.overrides, p.source))
    seen: dict[tuple[str, str], tuple[str, str]] = {}
    for p in points:
        for spec in p.scenario.runs:
            key, value = (spec.scenario, spec.label), (spec.spec_hash(), p.source)
            if seen.setdefault(key, value)[0] != value[0]:
                raise ScenarioError(
                    [
                        f"scenario {key[0]!r} ({key[1]}) comes from {seen[key][1]} and {p.source} with different "
                        "settings; give one of the grid files its own `name:`"
                    ],
                    "sweep",
                )
    return points


def sweep_runs(points: list[SweepPoint]) -> list[SweepRun]:
    """One :class:`SweepRun` per (point, algorithm, seed), algorithm-major within a point as
    ``fedbench run``; a run listed twice (two files naming the same scenario) is kept once."""
    runs: dict[str, SweepRun] = {}
    for p in points:
        shash = scenario_hash(p.scenario)
        for spec in p.scenario.runs:
            for seed in p.scenario.seeds:
                run = SweepRun(spec, seed, shash)
                runs.setdefault(run.run_id, run)
    return list(runs.values())
