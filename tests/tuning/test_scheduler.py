"""``tune.scheduler``: an absent key changes no trial, ``grid`` and ``random`` name today's two searches,
an entry's scheduler laid over the scenario's block; and the budget (``searched``) under every tuning table."""

import csv
import io

import pandas as pd

from fedbench.report.tuned import tuning_notes
from fedbench.report.tuning_table import render
from fedbench.scenario import parse_scenario
from fedbench.sweeps.tuning import Choice, final_runs, plan
from tests.factories import tiny_scenario

GRID = {"space": {"local.lr": [0.01, 0.1], "server.lr": [1.0, 2.0]}, "protocol": "paper"}


def trials_of(tune: dict, **top) -> list[tuple[dict, str]]:
    entry = plan(parse_scenario(tiny_scenario(tune=tune, **top))).entries[0]
    return [(t.values, t.spec.spec_hash()) for t in entry.trials]


def test_grid_and_random_name_the_searches_an_absent_scheduler_makes():
    assert trials_of({**GRID, "scheduler": "grid"}) == trials_of(GRID)
    assert trials_of({**GRID, "scheduler": "random", "budget": 3}) == trials_of({**GRID, "budget": 3})
    ranges = {"space": {"local.lr": {"log_uniform": [1e-3, 1e-1]}}, "budget": 4, "protocol": "paper"}
    assert trials_of({**ranges, "scheduler": "random"}) == trials_of(ranges)
    search = [
        parse_scenario(tiny_scenario(tune=t)).tune.search
        for t in (GRID, {**GRID, "budget": 3}, {**GRID, "budget": 9}, ranges, {**GRID, "budget_fraction": 0.5})
    ]
    assert search == ["grid", "random", "grid", "random", "random"]


def test_an_entry_scheduler_drops_what_only_the_other_scheduler_takes():
    """An entry's ``grid`` searches its whole grid under a scenario budget; its ``random`` drops a
    scenario's halving block; an entry's halving block replaces the scenario's."""
    block = {**GRID, "budget_fraction": 0.5, "scheduler": "halving", "halving": {"min_rounds": 1}}
    raw = tiny_scenario(
        tune=block,
        algorithms=[
            {"name": "fedavg"},
            {"name": "fedavgm", "tune": {"scheduler": "grid"}},
            {"name": "fedprox", "tune": {"scheduler": "random"}},
            {"name": "fedadam", "tune": {"halving": {"min_rounds": 2, "eta": 2}}},
        ],
    )
    halving, grid, random, other = (e.tune for e in plan(parse_scenario(raw)).entries)
    assert halving.search == "halving" and halving.trial_budget() == 2 and halving.halving.eta == 3
    assert grid.search == "grid" and grid.budget_fraction is None and grid.halving is None
    assert random.search == "random" and random.halving is None and random.budget_fraction == 0.5
    assert other.halving.min_rounds == 2 and other.halving.eta == 2


def test_a_grid_tuned_run_keeps_its_json():
    """The ``rungs`` record exists under halving only: a grid's tuned run has the keys (and hash) it had."""
    tuning = plan(parse_scenario(tiny_scenario(tune=GRID)))
    (run, *_) = final_runs(tuning, [Choice(tuning.entries[0], tuning.entries[0].trials[1], (0.1, 0.9, 0.2, 0.3))])
    assert run.spec.model_dump(mode="json")["tuned"] == {
        "values": {"local.lr": 0.01, "server.lr": 2.0},
        "trials": 4,
        "protocol": "paper",
        "metric": "top_acc",
        "rounds": 3,
        "seeds": [0],
    }


def choices() -> list[Choice]:
    """Five entries, one per kind of search, with made-up scores (the table reads no store)."""
    raw = tiny_scenario(
        tune=GRID,
        rounds=4,
        algorithms=[
            {"name": "fedavg", "label": "Grid"},
            {"name": "fedavg", "label": "Random", "tune": {"budget": 3}},
            {
                "name": "fedavg",
                "label": "Ranges",
                "tune": {"space": {"local.lr": {"uniform": [0.01, 0.1]}}, "budget": 2},
            },
            {
                "name": "fedavg",
                "label": "Halving",
                "tune": {"scheduler": "halving", "halving": {"min_rounds": 1, "eta": 2}},
            },
            {"name": "fedavg", "label": "Untuned", "tune": False},
        ],
    )
    grid, random, ranges, halving, untuned = plan(parse_scenario(raw)).entries
    at = halving.at_rung
    return [
        Choice(grid, grid.trials[0], (0.9, 0.1, 0.2, 0.3)),
        Choice(random, random.trials[0], (0.9, 0.1, 0.2)),
        Choice(ranges, ranges.trials[1], (0.1, 0.9)),
        Choice(halving, at(halving.trials[3], 2), (0.1, 0.5, 0.3, 0.8), (0, 1, 0, 2)),
        Choice(untuned, None, ()),
    ]


def test_the_tuning_table_states_each_method_s_budget():
    table = list(csv.reader(io.StringIO(render(choices(), "tiny", "csv"))))
    assert table[0] == ["method", "chosen", "trials", "searched", "metric", "best", "runner-up", "protocol"]
    searched = {row[0]: (row[2], row[3], row[6]) for row in table[1:]}
    assert searched == {
        "Grid": ("4", "4 / 4 (100 %) grid", "30.00"),
        "Random": ("3", "3 / 4 (75 %) random", "20.00"),
        "Ranges": ("2", "2 drawn random", "10.00"),
        "Halving": ("4", "4 / 4 (100 %) halving 4→2→1", "—"),  # alone at the last rung: no runner-up
        "Untuned": ("0", "—", "—"),
    }
    md = render(choices(), "tiny", "markdown")
    head = next(line for line in md.splitlines() if line.startswith("| method"))
    assert [c.strip() for c in head.strip("|").split("|")] == table[0]
    assert "| 4 / 4 (100 %) halving 4→2→1 |" in md.replace("  ", " ").replace("  ", " ")
    assert "_halving: rungs of 1, 2, 4 rounds, each keeping the top 1/2 of its candidates" in md
    assert "_searched: the settings run of the method's own grid and their share" in md
    # the chosen setting that is the entry's own is marked, and counted (Ranges drew 0.1 and 1.0, the written ones)
    chosen = {row[0]: row[1] for row in table[1:]}
    assert chosen["Ranges"] == "local.lr=0.1, server.lr=1 (as written)" and "written" not in chosen["Grid"]
    assert "_as written: the entry's own setting was chosen in 1 of 4 searches; a drawn search always ran" in md
    # one note per way the trials ran (rounds × seeds), naming each budget once: Grid's and Halving's 4 are one
    trials = [line for line in md.splitlines() if line.startswith("_trials")]
    assert trials == ["_trials: 2, 3 or 4 settings (the trials column) per method, each 4 rounds × seed(s) 0_"]


def test_the_tuned_note_names_successive_halving():
    tuned = {"values": {}, "trials": 6, "protocol": "paper", "metric": "top_acc", "rounds": 4, "seeds": [0]}
    runs = pd.DataFrame(
        {
            "algorithm": ["A", "B"],
            "spec_json": [
                f'{{"tuned": {str(tuned).replace(chr(39), chr(34))}}}',
                f'{{"tuned": {str({**tuned, "rungs": [[1, 6], [2, 3], [4, 1]]}).replace(chr(39), chr(34))}}}',
            ],
        }
    )
    grid, halving = tuning_notes(runs)
    assert "halving" not in grid and "(A)" in grid
    assert (
        "(B): each setting chosen among 6 trial settings (successive halving, rungs of 1, 2, 4 rounds) by top_acc"
        in halving
    )
