"""Scenarios: a YAML file → a validated :class:`Scenario` → one resolved :class:`RunSpec` per
algorithm entry, each run identified by its spec hash and seed.

The layer, top to bottom: :mod:`.files` (YAML, ``extends``, ``scales``, ``--set``),
:mod:`.schema` (the typed blocks), :mod:`.load` (validate, resolve once), :mod:`.resolve`
(components and capabilities checked against their registries), :mod:`.runspec` (the resolved
run, its hash and its store record), :mod:`.errors` (``YAML.path: message`` lines).
"""

from fedbench.optim.spec import ServerSpec
from fedbench.scenario.errors import ScenarioError
from fedbench.scenario.files import apply_override, apply_scale, deep_merge, read_yaml, scale_names, set_override
from fedbench.scenario.load import load_scenario, parse_scenario, scenario_hash
from fedbench.scenario.resolve import resolve_runs
from fedbench.scenario.runspec import Components, RunSpec, run_id_of, run_record
from fedbench.scenario.schema import (
    AlgorithmSpec,
    AugmentSpec,
    ClientsSpec,
    Component,
    CompressionSpec,
    ContinualSpec,
    EvalSpec,
    LocalSpec,
    MemorySpec,
    PaperRef,
    PartitionSpec,
    Scenario,
    WirelessSpec,
)

__all__ = [
    "AlgorithmSpec",
    "AugmentSpec",
    "ClientsSpec",
    "Component",
    "Components",
    "CompressionSpec",
    "ContinualSpec",
    "EvalSpec",
    "LocalSpec",
    "MemorySpec",
    "PaperRef",
    "PartitionSpec",
    "RunSpec",
    "Scenario",
    "ScenarioError",
    "ServerSpec",
    "WirelessSpec",
    "apply_override",
    "apply_scale",
    "deep_merge",
    "load_scenario",
    "parse_scenario",
    "read_yaml",
    "resolve_runs",
    "run_id_of",
    "run_record",
    "scale_names",
    "scenario_hash",
    "set_override",
]
