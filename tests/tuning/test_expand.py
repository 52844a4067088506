"""Expansion of a tune block into trials: grid order, run identities, the sampler, final runs, and
that a scenario without a block keeps its specs and hashes."""

import json

import pytest

from fedbench.scenario import parse_scenario, run_id_of, scenario_hash
from fedbench.sweeps.tuning import Choice, final_runs, plan
from tests.factories import tiny_scenario

GRID = {"space": {"local.lr": [0.01, 0.1], "server.lr": [1.0, 2.0]}, "protocol": "paper"}


def tuned(tune: dict, **top) -> dict:
    return tiny_scenario(tune=tune, **top)


def test_grid_is_the_cartesian_product_in_order():
    entry = plan(parse_scenario(tuned(GRID))).entries[0]
    assert [t.values for t in entry.trials] == [
        {"local.lr": 0.01, "server.lr": 1.0},
        {"local.lr": 0.01, "server.lr": 2.0},
        {"local.lr": 0.1, "server.lr": 1.0},
        {"local.lr": 0.1, "server.lr": 2.0},
    ]
    assert [t.index for t in entry.trials] == [0, 1, 2, 3]


def test_trial_run_ids_are_the_hashes_of_the_overridden_specs():
    """Each trial's spec equals the spec of the scenario written with the trial's values (an
    independent resolution), under the trial's name, rounds and seeds."""
    tune = {"space": {"local.lr": [0.01, 0.1]}, "protocol": "paper", "trials": {"seeds": [3], "rounds": 2}}
    sc = parse_scenario(tuned(tune, seeds=[0, 1]))
    for trial in plan(sc).entries[0].trials:
        lr = trial.values["local.lr"]
        written = parse_scenario(tiny_scenario({"local.lr": lr}, name=f"tiny--tune--lr-{lr}", rounds=2)).runs[0]
        assert trial.spec.spec_hash() == written.spec_hash()
        assert [r.run_id for r in trial.runs()] == [run_id_of(written, 3)]


def test_algorithm_parameters_are_tuned_by_name():
    sc = parse_scenario(
        tiny_scenario(
            algorithms=[{"name": "fedprox", "mu": 0.1, "tune": {"space": {"mu": [0.01, 1.0]}, "protocol": "paper"}}]
        )
    )
    trials = plan(sc).entries[0].trials
    assert [t.spec.algorithm["mu"] for t in trials] == [0.01, 1.0]
    assert trials[1].spec.components.algorithm.mu == 1.0
    written = parse_scenario(tiny_scenario(name="tiny--tune--mu-1.0", algorithms=[{"name": "fedprox", "mu": 1.0}]))
    assert trials[1].spec.spec_hash() == written.runs[0].spec_hash()


def test_validation_protocol_is_part_of_the_identity():
    paper = plan(parse_scenario(tuned({**GRID, "protocol": "paper"}))).entries[0].trials[0]
    val = plan(parse_scenario(tuned({**GRID, "protocol": "validation"}))).entries[0].trials[0]
    other = (
        plan(parse_scenario(tuned({**GRID, "protocol": "validation", "validation_fraction": 0.2}))).entries[0].trials[0]
    )
    assert paper.spec.validation is None and val.spec.validation.fraction == 0.1
    assert len({paper.spec.spec_hash(), val.spec.spec_hash(), other.spec.spec_hash()}) == 3
    assert json.loads(val.spec.to_json())["validation"] == {"fraction": 0.1}
    assert val.spec.paper is None


def test_a_scenario_without_tune_keeps_its_specs_and_hash():
    plain, with_block = parse_scenario(tiny_scenario()), parse_scenario(tuned(GRID))
    assert scenario_hash(plain) == scenario_hash(with_block)
    assert [s.to_json() for s in plain.runs] == [s.to_json() for s in with_block.runs]
    assert "validation" not in plain.runs[0].to_json() and "tune" not in plain.runs[0].to_json()


def test_an_entry_block_is_laid_over_the_scenario_block():
    """Space keys are added (the entry's values win), trials merge key by key, other keys replace."""
    sc = parse_scenario(
        tiny_scenario(
            tune={**GRID, "trials": {"seeds": [0], "rounds": 2}},
            algorithms=[
                {"name": "fedavg"},
                {
                    "name": "fedprox",
                    "tune": {
                        "space": {"mu": [0.5, 1.0], "local.lr": [0.2]},
                        "protocol": "validation",
                        "trials": {"rounds": 1},
                    },
                },
                {"name": "fedavgm", "label": "untuned", "tune": False},
            ],
        )
    )
    fedavg, fedprox, off = plan(sc).entries
    assert len(fedavg.trials) == 4 and off.tune is None and off.trials == ()
    assert [t.values for t in fedprox.trials] == [
        {"local.lr": 0.2, "server.lr": s, "mu": m} for s in (1.0, 2.0) for m in (0.5, 1.0)
    ]
    assert fedprox.tune.protocol == "validation" and fedavg.tune.protocol == "paper"
    assert fedprox.tune.trials.seeds == [0] and {t.spec.rounds for t in fedprox.trials} == {1}


def test_tune_false_on_the_scenario_leaves_every_entry_untuned():
    """A scale overlay switches tuning off with ``tune: false`` (entries' own blocks included)."""
    sc = parse_scenario(
        tiny_scenario(
            tune=False, algorithms=[{"name": "fedavg"}, {"name": "fedprox", "tune": {"space": {"mu": [0.5]}}}]
        )
    )
    assert not sc.tuned and all(e.tune is None for e in plan(sc).entries)


def test_a_budget_on_a_grid_draws_distinct_grid_points():
    """Random search over a grid: ``budget`` distinct points, the same for the same seed."""
    grid = {"space": {"local.lr": [0.01, 0.05, 0.1], "server.lr": [0.1, 1.0, 10.0]}}
    full = [t.values for t in plan(parse_scenario(tuned(grid))).entries[0].trials]
    drawn = [t.values for t in plan(parse_scenario(tuned({**grid, "budget": 4}))).entries[0].trials]
    again = [t.values for t in plan(parse_scenario(tuned({**grid, "budget": 4}))).entries[0].trials]
    other = [t.values for t in plan(parse_scenario(tuned({**grid, "budget": 4, "seed": 3}))).entries[0].trials]
    assert len(full) == 9 and len(drawn) == 4 and drawn == again and drawn != other
    assert all(v in full for v in drawn) and len({tuple(v.items()) for v in drawn}) == 4
    assert [t.values for t in plan(parse_scenario(tuned({**grid, "budget": 20}))).entries[0].trials] == full


def _drawn(block: dict, **top) -> list[dict]:
    return [t.values for t in plan(parse_scenario(tuned(block, **top))).entries[0].trials]


def test_a_drawn_search_always_holds_the_written_setting():
    """Issue 27: two draws from FedAvg's 6-point grid missed the paper's setting in 7 of 14 GradMA columns;
    the written setting (local.lr 0.1, server.lr 1.0) takes the last place of draws that miss it."""
    grid = {"space": {"local.lr": [0.01, 0.05, 0.1], "server.lr": [0.1, 1.0, 10.0]}, "budget": 3}
    written = {"local.lr": 0.1, "server.lr": 1.0}
    plain = [_drawn({**grid, "seed": s, "include_written": False}) for s in range(12)]
    kept = [_drawn({**grid, "seed": s}) for s in range(12)]
    assert any(written not in p for p in plain) and any(written in p for p in plain)  # both cases are exercised
    for p, k in zip(plain, kept):
        assert written in k and len(k) == 3 and len({tuple(v.items()) for v in k}) == 3
        assert k == (p if written in p else p[:2] + [written])  # the other draws and their order are kept
    assert all(type(v["server.lr"]) is float for k in kept for v in k)  # the grid's own spelling (1.0, not 1)
    # outside the space: nothing to include (server.lr 2.0 is no grid point); the whole grid: unchanged
    for s in range(4):
        assert _drawn({**grid, "seed": s}, server={"lr": 2.0}) == _drawn(
            {**grid, "seed": s, "include_written": False}, server={"lr": 2.0}
        )
    assert _drawn({"space": grid["space"]}) == _drawn({"space": grid["space"], "include_written": False})


def test_the_written_setting_of_a_parameter_and_of_a_range():
    """Algorithm parameters are read from the entry; a range holds a number within its bounds."""
    raw = tuned({"space": {"local.lr": [0.01, 0.1]}, "budget": 1, "protocol": "paper"})
    raw["algorithms"] = [{"name": "fedprox", "mu": 0.1, "tune": {"space": {"mu": [0.01, 0.1, 1.0]}}}]
    for seed in range(6):
        raw["tune"]["seed"] = seed
        assert [t.values for t in plan(parse_scenario(raw)).entries[0].trials] == [{"local.lr": 0.1, "mu": 0.1}]
    raw["algorithms"][0]["tune"]["include_written"] = False  # an entry's key wins over the scenario's
    assert {
        str(plan(parse_scenario({**raw, "tune": {**raw["tune"], "seed": s}})).entries[0].trials[0].values)
        for s in range(6)
    } != {str({"local.lr": 0.1, "mu": 0.1})}
    ranges = {"space": {"local.lr": {"log_uniform": [1e-3, 1e-1]}}, "budget": 3}
    assert _drawn(ranges)[-1] == {"local.lr": 0.1}  # 0.1 is the range's upper bound: inside
    assert 0.1 not in [v["local.lr"] for v in _drawn(ranges, local={"lr": 0.5, "iterations": 3, "batch_size": 16})]


RANGES = {
    "space": {
        "local.lr": {"log_uniform": [1e-3, 1e-1]},
        "server.lr": {"uniform": [0.5, 2.0]},
        "server.momentum": {"choice": [0.0, 0.9]},
        "local.batch_size": [8, 16],
    },
    "budget": 6,
}


def test_the_same_scenario_and_seed_propose_the_same_trials():
    first = [t.values for t in plan(parse_scenario(tuned(RANGES))).entries[0].trials]
    again = [t.values for t in plan(parse_scenario(tuned(RANGES))).entries[0].trials]
    other = [t.values for t in plan(parse_scenario(tuned({**RANGES, "seed": 1}))).entries[0].trials]
    assert first == again and first != other
    assert len(first) == 6
    for v in first:
        assert 1e-3 <= v["local.lr"] <= 1e-1 and 0.5 <= v["server.lr"] <= 2.0
        assert v["server.momentum"] in (0.0, 0.9) and v["local.batch_size"] in (8, 16)
        assert float(f"{v['local.lr']:.3g}") == v["local.lr"]


def test_the_sampler_is_keyed_by_scenario_and_entry():
    a = [t.values for t in plan(parse_scenario(tuned(RANGES))).entries[0].trials]
    b = [t.values for t in plan(parse_scenario(tuned(RANGES, name="other"))).entries[0].trials]
    assert a != b


def test_final_runs_use_the_chosen_values_on_the_scenario_name_and_seeds():
    sc = parse_scenario(
        tuned(
            {**GRID, "trials": {"seeds": [0], "rounds": 2}},
            seeds=[0, 1],
            algorithms=[{"name": "fedavg"}, {"name": "fedprox", "mu": 0.1}],
        )
    )
    tuning = plan(sc)
    best = tuning.entries[0].trials[2]
    runs = final_runs(
        tuning, [Choice(tuning.entries[0], best, (0.1, 0.2, 0.9, 0.3)), Choice(tuning.entries[1], None, ())]
    )
    written = parse_scenario(
        tiny_scenario(
            {"local.lr": 0.1, "server.lr": 1.0},
            seeds=[0, 1],
            algorithms=[{"name": "fedavg"}, {"name": "fedprox", "mu": 0.1}],
        )
    )
    fedavg, fedprox = written.runs
    assert [r.run_id for r in runs[2:]] == [run_id_of(fedprox, seed) for seed in (0, 1)]  # untuned: as written
    tuned_spec = runs[0].spec
    assert tuned_spec.tuned.values == {"local.lr": 0.1, "server.lr": 1.0} and tuned_spec.tuned.trials == 4
    assert tuned_spec.model_copy(update={"tuned": None}).spec_hash() == fedavg.spec_hash()
    assert all(r.spec.validation is None and r.spec.rounds == 3 and r.spec.scenario == sc.name for r in runs)


@pytest.mark.parametrize("metric", ["top_acc", "final_acc"])
def test_runner_up_is_the_second_best(metric):
    sc = parse_scenario(tuned({**GRID, "select": {"metric": metric}}))
    entry = plan(sc).entries[0]
    choice = Choice(entry, entry.trials[2], (0.1, 0.2, 0.9, 0.3))
    assert choice.runner_up == 0.3


def test_a_tuned_run_is_a_run_of_its_own_even_at_the_written_values():
    """Choosing the values the file already has still marks the run tuned: its own id, never the
    untuned run's (the tables mark it, and a store holding both keeps them apart)."""
    sc = parse_scenario(tuned({"space": {"local.lr": [0.1, 0.01]}}, seeds=[0, 1]))
    tuning = plan(sc)
    runs = final_runs(tuning, [Choice(tuning.entries[0], tuning.entries[0].trials[0], (0.9, 0.1))])
    assert [r.run_id for r in runs] != [run_id_of(sc.runs[0], s) for s in (0, 1)]
    assert runs[0].spec.model_copy(update={"tuned": None}).spec_hash() == sc.runs[0].spec_hash()


def test_projected_final_runs_are_still_to_do_before_the_trials():
    """A cost estimate counts a tuned entry's final runs as written but never as the untuned runs a store may hold."""
    from fedbench.sweeps.tuning import projected_final_runs

    sc = parse_scenario(tuned(GRID, seeds=[0, 1], algorithms=[{"name": "fedavg"}, {"name": "fedprox", "tune": False}]))
    runs = projected_final_runs(plan(sc), None)
    untuned = [run_id_of(s, seed) for s in sc.runs for seed in (0, 1)]
    assert [r.run_id for r in runs][2:] == untuned[2:] and not set(r.run_id for r in runs[:2]) & set(untuned)
    assert [r.spec.rounds for r in runs] == [s.rounds for s in sc.runs for _ in (0, 1)]


def test_a_budget_fraction_searches_each_entry_s_own_grid_alike():
    """Issue 27: a share of each method's grid, not one count for all (FedAvg 2 of 2, FedProx 3 of 6 at 0.5)."""
    block = {"space": {"local.lr": [0.01, 0.1]}, "budget_fraction": 0.5, "protocol": "paper"}
    raw = tuned(block)
    raw["algorithms"] = [
        {"name": "fedavg"},
        {"name": "fedprox", "mu": 0.1, "tune": {"space": {"mu": [0.01, 0.1, 1.0]}}},
    ]
    fedavg, fedprox = plan(parse_scenario(raw)).entries
    assert len(fedavg.trials) == 1 and len(fedprox.trials) == 3  # ⌈0.5·2⌉ and ⌈0.5·6⌉
    grid = [{"local.lr": lr, "mu": mu} for lr in (0.01, 0.1) for mu in (0.01, 0.1, 1.0)]
    assert all(t.values in grid for t in fedprox.trials) and len({tuple(t.values.items()) for t in fedprox.trials}) == 3
    raw["algorithms"][1]["tune"]["budget"] = 6  # an entry's count replaces the scenario's share
    assert len(plan(parse_scenario(raw)).entries[1].trials) == 6
    assert len(plan(parse_scenario(tuned({**block, "budget_fraction": 1.0}))).entries[0].trials) == 2


@pytest.mark.parametrize(
    "block, needle",
    [
        ({"budget": 2, "budget_fraction": 0.5}, "budget and budget_fraction: give one"),
        (
            {"space": {"local.lr": {"log_uniform": [0.01, 0.1]}}, "budget_fraction": 0.5},
            "a space with a range needs a budget",
        ),
        ({"budget_fraction": 0}, "budget_fraction"),
        ({"select": {"metric": "final_acc", "max_drop": 0.1}}, "max_drop guards top_acc only"),
    ],
)
def test_bad_budgets_and_guards_name_their_key(block, needle):
    from fedbench.scenario import ScenarioError

    with pytest.raises(ScenarioError, match=needle):
        parse_scenario(tuned({**GRID, **block}))


def test_max_drop_scores_a_collapsed_trial_by_its_final_accuracy():
    """A setting that peaked then collapsed is not chosen on its peak (issue 27: 25 chosen runs blew up)."""
    from fedbench.sweeps.halving import run_score

    guarded = plan(parse_scenario(tuned({**GRID, "select": {"metric": "top_acc", "max_drop": 0.05}}))).entries[0]
    plain = plan(parse_scenario(tuned(GRID))).entries[0]
    collapsed, steady = [(1, 0.5), (2, 0.9), (3, 0.2)], [(1, 0.5), (2, 0.8), (3, 0.78)]
    assert run_score(collapsed, plain.tune) == 0.9 > run_score(steady, plain.tune)
    assert run_score(collapsed, guarded.tune) == 0.2 < run_score(steady, guarded.tune) == 0.8  # 0.02 drop: its top
    assert guarded.tune.select.describe() == "top_acc max_drop 0.05"


def test_validate_states_each_entry_s_share_of_its_grid():
    from fedbench.sweeps.tuning import plan_lines

    lines = plan_lines(plan(parse_scenario(tuned({**GRID, "budget": 3}))))
    assert "FedAvg: 3 trial(s) (3 of 4 settings, 75 %, the written one among them) × seeds" in lines[1]
    plain = plan_lines(plan(parse_scenario(tuned({**GRID, "budget": 3, "include_written": False}))))
    assert "FedAvg: 3 trial(s) (3 of 4 settings, 75 %) × seeds" in plain[1]
