"""CI regression on a tiny offline federation: FedAvg and SCAFFOLD on digits, Dirichlet ω = 0.1.

The accuracy bands were measured with this exact scenario (seed 0) and are wide enough to
absorb BLAS differences between CPUs, narrow enough to catch a broken update rule, partition
or evaluation (chance is 10%). Determinism is checked exactly: same scenario + seed → identical
per-round numbers.
"""

import pandas as pd
import pytest
import torch

from fedbench.engine.runner import execute_run
from fedbench.engine.setup import DataCache
from fedbench.scenario import parse_scenario, resolve_runs
from fedbench.store import ResultsStore
from tests.factories import tiny_scenario

SCENARIO = tiny_scenario(
    {"model.hidden": [64], "clients.num": 20, "clients.per_round": 5, "partition.omega": 0.1},
    name="regression",
    local={"iterations": 10, "batch_size": 16, "lr": 0.05},
    rounds=30,
    algorithms=[{"name": "fedavg"}, {"name": "scaffold"}],
)
# label → (minimum top accuracy, maximum top accuracy) after 30 rounds
BANDS = {"FedAvg": (0.87, 0.96), "SCAFFOLD": (0.89, 0.98)}  # measured: 0.920, 0.938


def top_accuracies(out):
    store = ResultsStore(out)
    cache = DataCache(out / "data", False, torch.device("cpu"))
    result = {}
    for spec in resolve_runs(parse_scenario(SCENARIO)):
        outcome = execute_run(spec, 0, store, cache, "regression")
        assert outcome.status == "finished"
        result[spec.label] = store.metrics([outcome.run_id])
    return result


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return top_accuracies(tmp_path_factory.mktemp("a")), top_accuracies(tmp_path_factory.mktemp("b"))


@pytest.mark.parametrize("label", list(BANDS))
def test_accuracy_band(runs, label):
    top = runs[0][label]["test_acc"].max()
    low, high = BANDS[label]
    assert low <= top <= high, f"{label} top accuracy {top:.4f} outside [{low}, {high}]"


def test_scaffold_beats_fedavg_under_label_skew(runs):
    assert runs[0]["SCAFFOLD"]["test_acc"].max() > runs[0]["FedAvg"]["test_acc"].max()


@pytest.mark.parametrize("label", list(BANDS))
def test_deterministic(runs, label):
    cols = ["round", "test_acc", "test_loss", "train_loss", "bits_up", "bits_down"]
    pd.testing.assert_frame_equal(runs[0][label][cols], runs[1][label][cols])
