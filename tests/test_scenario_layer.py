"""The scenario layer parses once: loading yields resolved runs carrying their scale and their
components' validated models, which the engine uses without validating again."""

import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import fedbench.scenario.load as load_module
from fedbench.data.offline import DigitsParams
from fedbench.engine.setup import DataCache, build_run
from fedbench.models.mlp import MLPParams
from fedbench.scenario import Components, load_scenario, parse_scenario, scenario_hash
from fedbench.sweeps.grid import expand_file
from tests.factories import tiny_scenario

ROOT = Path(__file__).parents[1]


def test_loading_resolves_the_runs_once(monkeypatch):
    calls = []
    real = load_module.resolve_runs
    monkeypatch.setattr(load_module, "resolve_runs", lambda *a, **k: calls.append(a) or real(*a, **k))
    sc = load_scenario(ROOT / "configs/quickstart.yaml")
    first = sc.runs
    scenario_hash(sc), sc.model_copy(update={"seeds": [5]}).runs
    assert len(calls) == 1 and sc.runs is first and sc.model_copy(update={"seeds": [5]}).runs is first


def test_each_run_knows_its_scale_without_reading_the_name():
    tiny = load_scenario(ROOT / "configs/fedcams/table3_eps.yaml", scale="tiny")
    paper = load_scenario(ROOT / "configs/fedcams/table3_eps.yaml")
    assert {s.scale for s in tiny.runs} == {"tiny"} and {s.scale for s in paper.runs} == {"paper"}
    assert tiny.runs[0].spec_hash() != paper.runs[0].spec_hash()
    points = expand_file(ROOT / "configs/sweeps/cflag_fig5_clients_cifar10.yaml", scale="tiny")
    assert {s.scale for p in points for s in p.scenario.runs} == {"tiny"}


def test_components_are_the_registries_validated_models_and_survive_pickling():
    spec = parse_scenario(tiny_scenario()).runs[0]
    assert isinstance(spec.components, Components)
    assert isinstance(spec.components.model, MLPParams) and spec.components.model.hidden == [16]
    assert isinstance(spec.components.dataset, DigitsParams)
    back = pickle.loads(pickle.dumps(spec))  # sweep workers and Ray receive pickled specs
    assert back.scale == spec.scale and back.components == spec.components and back.spec_hash() == spec.spec_hash()


def test_the_engine_builds_a_run_without_validating_its_components_again(tmp_path, monkeypatch):
    spec = parse_scenario(tiny_scenario()).runs[0]

    def refuse(*args, **kwargs):
        raise AssertionError("validated again")

    monkeypatch.setattr(MLPParams, "model_validate", classmethod(refuse))
    monkeypatch.setattr(DigitsParams, "model_validate", classmethod(refuse))
    setup = build_run(spec, 0, DataCache(tmp_path, False, torch.device("cpu")))
    assert setup.model.dim > 0


def test_a_spec_built_outside_resolution_says_so():
    spec = parse_scenario(tiny_scenario()).runs[0]
    bare = type(spec).model_validate(spec.model_dump())
    with pytest.raises(RuntimeError, match="outside scenario resolution"):
        _ = bare.components


@pytest.mark.parametrize("module", ["fedbench.sweeps.grid", "fedbench.scenario"])
def test_the_scenario_layer_and_the_sweep_expander_import_no_engine_and_no_report(module):
    code = f"import sys, {module}; print(sorted(m for m in sys.modules if m.startswith(('fedbench.engine', 'fedbench.report'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert out.strip() == "[]"
