"""The scenario's ``wireless`` block: defaults, validation naming the key, hashing."""

import copy
import hashlib
import json

import pytest

from fedbench.scenario import ScenarioError, parse_scenario, resolve_runs
from tests.factories import DROP, tiny_scenario

BASE = tiny_scenario({"clients.num": 10, "local.iterations": 2, "local.batch_size": 8}, name="w", partition=DROP)


def raw_with(wireless):
    raw = copy.deepcopy(BASE)
    if wireless is not None:
        raw["wireless"] = wireless
    return raw


def test_defaults_are_the_papers_values_and_the_documented_assumptions():
    w = resolve_runs(parse_scenario(raw_with({})))[0].wireless
    assert w.model_dump() == {
        "tau_s": 1.0,
        "bandwidth_hz": 1e8,
        "tx_power_dbm": 30.0,
        "noise_psd_dbm_hz": -143.0,
        "cell_radius_m": 3000.0,
        "pathloss_const": 1e-3,
        "pathloss_exp": 2.0,
        "fairness_alpha": 0.5,
        "b_min": 2,
        "b_max": None,
        "resolve_after_drop": False,
        "outage_aggregation": "renormalize",
    }
    assert resolve_runs(parse_scenario(raw_with(None)))[0].wireless is None


@pytest.mark.parametrize(
    "block,expected",
    [
        ({"tau_s": 0}, "wireless.tau_s: Input should be greater than 0, got 0"),
        ({"W_total_hz": 1e8}, "wireless.W_total_hz: unknown key"),
        ({"b_min": 0}, "wireless.b_min: Input should be greater than or equal to 1, got 0"),
        ({"b_min": 4, "b_max": 3}, "wireless: b_max (3) must be ≥ b_min (4)"),
        ({"fairness_alpha": -1}, "wireless.fairness_alpha: Input should be greater than or equal to 0, got -1"),
        ({"outage_aggregation": "drop"}, "wireless.outage_aggregation: Input should be 'renormalize' or 'zero_fill'"),
        ({"cell_radius_m": -5}, "wireless.cell_radius_m: Input should be greater than 0, got -5"),
    ],
)
def test_bad_values_name_their_key(block, expected):
    with pytest.raises(ScenarioError) as err:
        parse_scenario(raw_with(block))
    assert any(p.startswith(expected) for p in err.value.problems), err.value.problems


def test_an_absent_block_leaves_the_hash_as_before_and_a_present_one_changes_it():
    spec = resolve_runs(parse_scenario(raw_with(None)))[0]
    # the hash formula from before the block existed
    payload = spec.model_dump(mode="json", exclude={"targets", "checkpoint_every", "paper", "wireless", "blowup"})
    before = hashlib.sha256(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    assert spec.spec_hash() == before
    with_block = resolve_runs(parse_scenario(raw_with({})))[0].spec_hash()
    other_tau = resolve_runs(parse_scenario(raw_with({"tau_s": 0.8})))[0].spec_hash()
    assert len({before, with_block, other_tau}) == 3


def test_set_override_reaches_the_block():
    sc = parse_scenario(raw_with({}), overrides=["wireless.tau_s=0.25", "wireless.b_max=8"])
    assert sc.wireless.tau_s == 0.25 and sc.wireless.b_max == 8
