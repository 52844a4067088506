"""Every committed config keeps its spec hashes and scenario hashes (so existing stores keep matching).

The pins (tests/scenario_pins/spec_hashes.json, first 16 hex digits as in run ids) were written
by the code before the scenario layer was split into a package; a refactor must leave them as
they are. Regenerate only for a deliberate change of a config, in the same commit."""

import json
from pathlib import Path

import pytest

from fedbench.scenario import load_scenario, read_yaml, scale_names, scenario_hash
from fedbench.sweeps.grid import expand_file, read_grid

ROOT = Path(__file__).parents[1]
PINS = json.loads((ROOT / "tests/scenario_pins/spec_hashes.json").read_text())


def current_hashes(path: Path) -> dict[str, list[str]]:
    """{scale or grid point name: [scenario hash, spec hash of each run...]} (16 hex digits each)."""
    if read_grid(path) is not None:
        points = {p.scenario.name: p.scenario for p in expand_file(path)}
    else:
        points = {scale: load_scenario(path, scale=scale) for scale in scale_names(read_yaml(path))}
    return {key: [h[:16] for h in [scenario_hash(sc), *(s.spec_hash() for s in sc.runs)]] for key, sc in points.items()}


@pytest.mark.parametrize("name", sorted(PINS))
def test_committed_config_hashes_are_unchanged(name):
    assert current_hashes(ROOT / name) == PINS[name]


def test_every_committed_config_is_pinned():
    files = {str(p.relative_to(ROOT)) for p in (ROOT / "configs").rglob("*.yaml") if not p.name.startswith("_")}
    assert files == set(PINS), "a config was added or removed: pin its hashes (see this module's docstring)"
