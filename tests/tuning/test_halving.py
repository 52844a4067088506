"""Successive halving (``tune.scheduler: halving``): the rung schedule against its closed form, the rung
runs' names and ids, promotion from a store whose scores are written by hand (ties, a diverged and a
failed trial, completion order), resume, the record of the rungs, and one small tuning end to end."""

import json
import math

import pytest
from rich.console import Console

from fedbench.options import RunOptions
from fedbench.scenario import parse_scenario
from fedbench.scenario.tunespec import HalvingSpec
from fedbench.store import ResultsStore
from fedbench.sweeps.driver import run_sweep, run_tuning
from fedbench.sweeps.halving import ladder
from fedbench.sweeps.tuning import TuningError, final_runs, plan, plan_lines, select
from fedbench.sweeps.worker import record_of
from tests.factories import tiny_scenario

LRS = [0.001, 0.01, 0.03, 0.1, 0.2, 0.3]  # 6 candidates
HALVING = {
    "space": {"local.lr": LRS},
    "scheduler": "halving",
    "halving": {"min_rounds": 1, "eta": 2},
    "trials": {"seeds": [0, 1], "rounds": 4},
    "protocol": "paper",
}


def halving_plan(**changes):
    return plan(parse_scenario(tiny_scenario(tune={**HALVING, **changes}, rounds=4)))


def closed_form(n: int, r0: int, eta: int, rounds: int) -> list[tuple[int, int]]:
    """Rung k: ⌊n/eta^k⌋ candidates (at least one) for min(r0·eta^k, rounds) rounds; a lone candidate or
    the full rounds ends it, at the full rounds."""
    out = []
    for k in range(64):
        size, r = max(1, n // eta**k), min(r0 * eta**k, rounds)
        if size == 1 or r == rounds:
            return out + [(rounds, size)]
        out.append((r, size))
    raise AssertionError("no last rung")


@pytest.mark.parametrize("n", [1, 2, 3, 4, 9, 10, 27, 54, 100])
@pytest.mark.parametrize("r0, eta, rounds", [(1, 3, 9), (2, 3, 20), (1, 2, 4), (5, 4, 5), (3, 2, 50), (1, 3, 200)])
def test_rungs_follow_the_closed_form(n, r0, eta, rounds):
    assert HalvingSpec(min_rounds=r0, eta=eta).rungs(n, rounds) == closed_form(n, r0, eta, rounds)


def test_rung_examples():
    """54 candidates, 2 rounds, eta 3, trials of 20: 54×2, 18×6, 6×18, 2×20; 4 candidates: the lone survivor
    of rung 0 goes straight to 20 rounds; one candidate is run once, as a grid would."""
    h = HalvingSpec(min_rounds=2, eta=3)
    assert h.rungs(54, 20) == [(2, 54), (6, 18), (18, 6), (20, 2)]
    assert h.rungs(4, 20) == [(2, 4), (20, 1)]
    assert h.rungs(1, 20) == [(20, 1)]
    assert HalvingSpec(min_rounds=20).rungs(54, 20) == [(20, 54)]


def test_rung_runs_have_their_own_names_and_the_last_rung_is_the_grid_trial():
    entry = halving_plan().entries[0]
    assert entry.rungs == ((1, 6), (2, 3), (4, 1))
    first = [entry.at_rung(t, 0) for t in entry.trials]
    assert [t.spec.rounds for t in first] == [1] * 6
    assert first[0].spec.scenario == "tiny--tune-1rounds--lr-0.001"
    grid = plan(parse_scenario(tiny_scenario(tune={**HALVING, "scheduler": "grid", "halving": None}, rounds=4)))
    grid_trials = grid.entries[0].trials
    last = [entry.at_rung(t, 2) for t in entry.trials]
    assert [t.spec.spec_hash() for t in last] == [t.spec.spec_hash() for t in grid_trials]
    assert last[0].spec.scenario == "tiny--tune--lr-0.001" and last[0].rung == 2
    ids = {r.run_id for k in range(3) for t in entry.trials for r in entry.at_rung(t, k).runs()}
    assert len(ids) == 3 * 6 * 2  # every (candidate, rung, seed) its own run


def fill(store: ResultsStore, trials, acc: dict[float, float], status: dict[float, str] | None = None) -> None:
    """Write each trial's runs as done, with test accuracy ``acc[lr]`` at every round (a chosen score)."""
    for trial in trials:
        lr = trial.values["local.lr"]
        for run in trial.runs():
            store.start_run(record_of(run))
            for rnd in range(1, trial.spec.rounds + 1):
                store.record_round(run.run_id, rnd, {"test_acc": acc[lr]})
            store.finish_run(run.run_id, (status or {}).get(lr, "finished"))


def rung(entry, store, k):
    return ladder(entry, store)[k].trials


def test_promotion_keeps_the_top_half_in_candidate_order(tmp_path):
    tuning, store = halving_plan(), ResultsStore(tmp_path)
    entry = tuning.entries[0]
    acc = dict(zip(LRS, [0.1, 0.5, 0.9, 0.3, 0.8, 0.2]))
    assert len(ladder(entry, store)) == 1 and len(tuning.trial_runs(store)) == 12  # rung 0 only
    fill(store, rung(entry, store, 0), acc)
    top3 = sorted(LRS, key=lambda lr: -acc[lr])[:3]
    assert [t.values["local.lr"] for t in rung(entry, store, 1)] == [lr for lr in LRS if lr in top3]
    assert {t.spec.rounds for t in rung(entry, store, 1)} == {2}
    acc2 = {**acc, 0.03: 0.4}  # at 2 rounds, 0.2 overtakes 0.03
    fill(store, rung(entry, store, 1), acc2)
    assert [t.values["local.lr"] for t in rung(entry, store, 2)] == [0.2]
    fill(store, rung(entry, store, 2), acc2)
    (choice,) = select(store, tuning)
    assert choice.best.values == {"local.lr": 0.2} and choice.best.spec.rounds == 4
    assert choice.reached == (0, 1, 1, 0, 2, 0)  # the rung each candidate reached
    assert choice.scores[4] == 0.8 and choice.scores[2] == 0.4 and choice.runner_up is None  # alone at rung 2
    assert len(tuning.trial_runs(store)) == 2 * (6 + 3 + 1)


def test_ties_go_to_the_earlier_candidate(tmp_path):
    tuning, store = halving_plan(), ResultsStore(tmp_path)
    entry = tuning.entries[0]
    fill(store, rung(entry, store, 0), dict.fromkeys(LRS, 0.5))
    assert [t.values["local.lr"] for t in rung(entry, store, 1)] == LRS[:3]


def test_a_diverged_trial_scores_worst_and_a_failed_one_stops_the_rung(tmp_path):
    tuning, store = halving_plan(), ResultsStore(tmp_path)
    entry = tuning.entries[0]
    acc = dict(zip(LRS, [0.1, 0.5, 0.9, 0.3, 0.8, 0.95]))
    fill(store, rung(entry, store, 0), acc, {0.3: "diverged"})  # its last rows were the best: not promoted
    assert [t.values["local.lr"] for t in rung(entry, store, 1)] == [0.01, 0.03, 0.2]
    failed = tmp_path / "failed"
    store2 = ResultsStore(failed)
    fill(store2, rung(entry, store2, 0), acc, {0.03: "failed"})
    assert len(ladder(entry, store2)) == 1  # the next rung is not known while a run of rung 0 failed
    with pytest.raises(TuningError, match="2 trial run"):
        select(store2, tuning)


def test_the_same_store_gives_the_same_schedule_whatever_the_order(tmp_path):
    """Resume: a plan made again from a store partly filled proposes the same runs; the order the runs
    of a rung finished in (parallel workers) changes nothing."""
    acc = dict(zip(LRS, [0.1, 0.5, 0.9, 0.3, 0.8, 0.2]))
    a, b = ResultsStore(tmp_path / "a"), ResultsStore(tmp_path / "b")
    entry = halving_plan().entries[0]
    rung0 = rung(entry, a, 0)
    fill(a, rung0[:4], acc)  # interrupted after four candidates
    assert [r.run_id for r in halving_plan().trial_runs(a)] == [r.run_id for r in halving_plan().trial_runs()]
    fill(a, rung0[4:], acc)
    fill(b, tuple(reversed(rung0)), acc)
    assert [r.run_id for r in halving_plan().trial_runs(a)] == [r.run_id for r in halving_plan().trial_runs(b)]
    assert len(halving_plan().trial_runs(a)) == 2 * (6 + 3)


def test_one_candidate_runs_once_at_the_trial_rounds(tmp_path):
    tuning = halving_plan(space={"local.lr": [0.1]})
    entry = tuning.entries[0]
    assert entry.rungs == ((4, 1),) and [r.spec.rounds for r in tuning.trial_runs()] == [4, 4]
    store = ResultsStore(tmp_path)
    fill(store, rung(entry, store, 0), {0.1: 0.7})
    (choice,) = select(store, tuning)
    assert choice.best.values == {"local.lr": 0.1} and choice.scores == (0.7,) and choice.runner_up is None


def test_the_final_runs_record_the_rungs(tmp_path):
    tuning, store = halving_plan(), ResultsStore(tmp_path)
    entry = tuning.entries[0]
    for k in range(3):
        fill(store, rung(entry, store, k), dict(zip(LRS, [0.1, 0.5, 0.9, 0.3, 0.8, 0.2])))
    (run, *_) = final_runs(tuning, select(store, tuning))
    tuned = json.loads(run.spec.to_json())["tuned"]
    assert tuned["rungs"] == [[1, 6], [2, 3], [4, 1]] and tuned["trials"] == 6 and tuned["rounds"] == 4
    grid = plan(parse_scenario(tiny_scenario(tune={**HALVING, "scheduler": "grid", "halving": None}, rounds=4)))
    fill(store, grid.entries[0].trials, dict(zip(LRS, [0.1, 0.5, 0.9, 0.3, 0.8, 0.2])))
    (grid_run, *_) = final_runs(grid, select(store, grid))
    assert set(json.loads(grid_run.spec.to_json())["tuned"]) == {
        "values",
        "trials",
        "protocol",
        "metric",
        "rounds",
        "seeds",
    }
    assert grid_run.run_id != run.run_id  # chosen alike (lr 0.03), by another search: a run of its own


def test_validate_states_the_halving_budget():
    lines = plan_lines(halving_plan())
    assert lines[0].startswith("tuning: 6 trial(s), 20 trial run(s), then")  # 2 seeds × (6 + 3 + 1)
    assert lines[1] == (
        "  FedAvg: successive halving of 6 candidate(s) (6 of 6 settings, 100 %) × seeds [0, 1], "
        "rungs 6×1 → 3×2 → 1×4 (candidates × rounds, top 1/2 kept): 16 trial-rounds per seed "
        "(every candidate at 4 rounds: 24, 67 %), paper protocol, top_acc"
    )


SETTINGS = RunOptions(device="cpu", threads=1)
QUIET = Console(quiet=True)


def digits_halving():
    block = {
        "space": {"local.lr": [1e-4, 0.3, 1e-3, 0.1]},
        "scheduler": "halving",
        "halving": {"min_rounds": 1, "eta": 2},
        "trials": {"seeds": [0], "rounds": 4},
        "protocol": "validation",
    }
    return plan(parse_scenario(tiny_scenario({"partition": {"kind": "iid"}}, tune=block, rounds=4, seeds=[0])))


def test_a_halving_tuning_runs_rung_by_rung_and_resumes(tmp_path):
    """Digits: 4 candidates × 1 round, the top 2 × 2 rounds, the best × 4 rounds (7 trial runs); killed
    after two runs of rung 0, it resumes them and chooses the same."""
    tuning = digits_halving()
    choices, trials, final = run_tuning(tuning, tmp_path / "fresh", 1, SETTINGS, QUIET)
    (choice,) = choices
    assert (trials.total, trials.finished, final.total) == (7, 7, 1)
    assert choice.best.values["local.lr"] in (0.3, 0.1) and choice.best.spec.rounds == 4
    assert sorted(choice.reached) == [0, 0, 1, 2] and choice.reached[0] == 0  # lr 1e-4 is out at rung 0
    assert not math.isnan(sum(choice.scores))
    half = tmp_path / "half"
    run_sweep(tuning.trial_runs()[:2], half, jobs=1, options=SETTINGS, console=QUIET)
    resumed, again, _ = run_tuning(digits_halving(), half, 1, SETTINGS, QUIET)
    assert (again.skipped, again.finished) == (2, 5)
    assert resumed[0].best.values == choice.best.values and resumed[0].scores == choice.scores
