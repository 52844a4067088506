"""Selection on a small problem whose best setting is known (digits; local.lr 1e-4 barely moves the
model, 0.3 learns), under both protocols; a tuning killed half-way resumes and selects the same."""

import json

import pytest
from rich.console import Console

from fedbench.options import RunOptions
from fedbench.scenario import parse_scenario
from fedbench.store import ResultsStore
from fedbench.sweeps.driver import run_sweep, run_tuning
from fedbench.sweeps.tuning import TuningError, plan, select
from tests.factories import tiny_scenario

SETTINGS = RunOptions(device="cpu", threads=1)
QUIET = Console(quiet=True)


def scenario(**tune):
    block = {"space": {"local.lr": [1e-4, 0.3]}, "trials": {"rounds": 4}, **tune}
    return parse_scenario(tiny_scenario({"partition": {"kind": "iid"}}, tune=block, rounds=4, seeds=[0, 1]))


@pytest.mark.parametrize("protocol", ["validation", "paper"])
def test_the_clearly_better_setting_is_chosen(tmp_path, protocol):
    tuning = plan(scenario(protocol=protocol))
    choices, trials, final = run_tuning(tuning, tmp_path, 1, SETTINGS, QUIET)
    (choice,) = choices
    assert choice.best.values == {"local.lr": 0.3}
    low, high = choice.scores
    assert high > low + 0.1 and choice.runner_up == low
    assert (trials.total, trials.finished, final.total, final.finished) == (4, 4, 2, 2)
    store = ResultsStore(tmp_path)
    rows = store.metrics([r.run_id for r in tuning.trial_runs()])
    logged = [json.loads(e) for e in rows["extra"]]
    assert all(("val_acc" in e) == (protocol == "validation") for e in logged)
    final_specs = {json.loads(s)["local"]["lr"] for s in store.runs("tiny")["spec_json"]}
    assert final_specs == {0.3}


def test_rounds_to_picks_the_setting_that_reaches_the_target(tmp_path):
    tuning = plan(scenario(select={"metric": "rounds_to", "target": 0.3}, protocol="paper"))
    run_sweep(tuning.trial_runs(), tmp_path, jobs=1, options=SETTINGS, console=QUIET)
    (choice,) = select(ResultsStore(tmp_path), tuning)
    assert choice.best.values == {"local.lr": 0.3}
    assert choice.scores[0] == float("inf") and choice.scores[1] <= 4


def test_selection_needs_every_trial(tmp_path):
    tuning = plan(scenario())
    run_sweep(tuning.trial_runs()[:1], tmp_path, jobs=1, options=SETTINGS, console=QUIET)
    with pytest.raises(TuningError, match="3 trial run"):
        select(ResultsStore(tmp_path), tuning)


def test_a_tuning_killed_half_way_resumes_and_selects_the_same(tmp_path):
    tuning = plan(scenario())
    fresh, _, _ = run_tuning(tuning, tmp_path / "fresh", 1, SETTINGS, QUIET)
    half = tmp_path / "half"
    run_sweep(tuning.trial_runs()[:2], half, jobs=1, options=SETTINGS, console=QUIET)  # killed after two runs
    resumed, trials, _ = run_tuning(plan(scenario()), half, 1, SETTINGS, QUIET)
    assert (trials.skipped, trials.finished) == (2, 2)
    assert [c.best.values for c in resumed] == [c.best.values for c in fresh]
    assert [c.scores for c in resumed] == [c.scores for c in fresh]
