"""The shared tiny scenario (tests/factories.py): overrides touch only what they name, and every call is fresh."""

from fedbench.scenario import parse_scenario, resolve_runs
from tests.factories import DROP, TINY, tiny_scenario, tiny_spec, with_changes


def test_dotted_changes_replace_one_leaf_and_keep_its_siblings():
    raw = tiny_scenario({"partition.omega": 0.3, "continual.tasks": 3}, name="x", rounds=5)
    assert raw["partition"] == {"kind": "dirichlet", "omega": 0.3} and raw["continual"] == {"tasks": 3}
    assert raw["name"] == "x" and raw["rounds"] == 5 and raw["local"] == TINY["local"]


def test_top_level_entries_replace_whole_blocks_and_drop_deletes():
    raw = tiny_scenario({"local.lr": DROP}, local={"epochs": 1, "batch_size": 8, "lr": 0.1}, partition=DROP)
    assert raw["local"] == {"epochs": 1, "batch_size": 8} and "partition" not in raw


def test_every_call_is_a_fresh_copy():
    a = tiny_scenario()
    a["model"]["hidden"].append(8)
    a["algorithms"].clear()
    assert tiny_scenario() == TINY and TINY["model"]["hidden"] == [16] and TINY["algorithms"] == [{"name": "fedavg"}]
    base = tiny_scenario({"clients.num": 4})
    assert with_changes(base, {"clients.num": 5})["clients"]["num"] == 5 and base["clients"]["num"] == 4


def test_tiny_spec_resolves_the_named_algorithm():
    spec = tiny_spec({"clients.num": 6}, algorithm="scaffold")
    assert spec.label == "SCAFFOLD" and spec.clients.num == 6
    assert spec.spec_hash() != tiny_spec({"clients.num": 6}).spec_hash()
    assert tiny_spec().spec_hash() == resolve_runs(parse_scenario(tiny_scenario()))[0].spec_hash()


def test_the_conftest_fixtures_hand_out_the_factories_objects(tiny_raw, tiny_run_spec):
    assert tiny_raw == tiny_scenario() and tiny_raw is not tiny_scenario()
    assert tiny_run_spec.spec_hash() == tiny_spec().spec_hash() and tiny_run_spec.algorithm["name"] == "fedavg"
