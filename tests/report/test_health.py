"""Blow-up flags (issue 15 item 8): finished runs with finite but exploded loss, or accuracy back at chance."""

import json

import pandas as pd

from fedbench.report.health import blowup_reason
from fedbench.report.tables import format_table, summarize

SPEC = json.dumps({"blowup": {"loss_factor": 100, "chance_margin": 0.05}})
PARTITION = json.dumps({"partition": {"num_classes": 10}})


def metrics(acc, loss, run_id="r0"):
    n = len(acc)
    return pd.DataFrame(
        {
            "run_id": run_id,
            "round": range(1, n + 1),
            "test_acc": acc,
            "test_loss": loss,
            "train_loss": loss,
            "bits_up": 1.0,
            "bits_down": 1.0,
            "extra": [PARTITION] + [None] * (n - 1),
        }
    )


def test_a_loss_beyond_the_factor_or_accuracy_back_at_chance_is_flagged():
    assert blowup_reason(SPEC, "finished", metrics([0.3, 0.5, 0.6], [2.0, 1.5, 1.0])) is None
    assert "train_loss reached 1e+03, 500× its first value" in blowup_reason(
        SPEC, "finished", metrics([0.3, 0.5, 0.6], [2.0, 1.5, 1000.0])
    )
    assert "fell to 10.0% (chance 10.0%) after 60.0%" in blowup_reason(
        SPEC, "finished", metrics([0.3, 0.6, 0.1], [2, 1, 2])
    )
    assert blowup_reason(SPEC, "finished", metrics([0.12, 0.13, 0.1], [2, 2, 2])) is None  # never clearly above chance
    assert blowup_reason(SPEC, "diverged", metrics([0.3, 0.6, 0.1], [2, 1, 2])) is None  # already marked div.


def test_thresholds_come_from_the_scenario_and_continual_runs_are_not_flagged():
    loose = json.dumps({"blowup": {"loss_factor": 1e4, "chance_margin": 0.05}})
    assert blowup_reason(loose, "finished", metrics([0.3, 0.5, 0.6], [2.0, 1.5, 1000.0])) is None
    continual = json.dumps({"continual": {"tasks": 2}})
    assert blowup_reason(continual, "finished", metrics([0.3, 0.6, 0.1], [1e-6, 1, 2])) is None
    no_classes = metrics([0.3, 0.6, 0.1], [2, 1, 2]).assign(extra=None)  # stores written before num_classes was logged
    assert blowup_reason(SPEC, "finished", no_classes) is None


def test_the_table_marks_the_flagged_seed_and_the_csv_gains_the_column_only_then():
    runs = pd.DataFrame(
        {
            "run_id": ["a", "b"],
            "scenario": "s",
            "algorithm": "FedX",
            "seed": [0, 1],
            "status": "finished",
            "spec_json": SPEC,
        }
    )
    ok = pd.concat([metrics([0.3, 0.5, 0.6], [2, 1.5, 1], "a"), metrics([0.3, 0.5, 0.6], [2, 1.5, 1], "b")])
    bad = pd.concat([metrics([0.3, 0.5, 0.6], [2, 1.5, 1], "a"), metrics([0.3, 0.6, 0.1], [2, 1, 2], "b")])
    assert "blowup" not in format_table(summarize(runs, ok), "csv") and "blow-up" not in format_table(
        summarize(runs, ok), "markdown"
    )
    assert "1 blow-up" in format_table(summarize(runs, bad), "markdown")
    assert format_table(summarize(runs, bad), "csv").splitlines()[0].count("blowup") == 1


def test_a_paper_cell_marks_blown_up_seeds_like_diverged_ones():
    from fedbench.report.tables import acc_cell

    row = pd.Series({"v_acc_mean": 0.5, "v_acc_std": 0.1, "diverged": 1, "failed": 0, "blowup": 1}, dtype=object)
    assert acc_cell(row, "v", "±") == "50.00 ± 10.00 (1 div., 1 blow-up)"


def test_a_train_loss_beyond_the_divergence_bound_recorded_finished_is_flagged():
    """Issue 24: a run an older fedbench recorded finished with a first-round train loss of 4.6e29 (at chance) is
    flagged, continual or not; 1e12 · ln 10 ≈ 2.3e12 is the bound runs now diverge at."""
    huge = metrics([0.1, 0.1, 0.1], [4.6e29, 4.6e29, 4.6e29])
    assert blowup_reason(SPEC, "finished", huge) == "train_loss reached 4.6e+29, above 1e+12 × ln 10 (a divergence now)"
    assert "4.6e+29" in blowup_reason(json.dumps({"continual": {"tasks": 2}}), "finished", huge)
    assert blowup_reason(SPEC, "finished", metrics([0.3, 0.5, 0.6], [2e12, 2e12, 2e12])) is None  # below the bound
