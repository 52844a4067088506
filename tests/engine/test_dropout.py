"""Dropout through the round loop: masks come from the ``("dropout", t)`` stream, so a run is
reproducible whatever the caller did to torch's global generator, and a resumed run matches an
uninterrupted one."""

import pandas as pd
import pytest
import torch

from fedbench.engine.runner import execute_run
from fedbench.engine.setup import DataCache
from fedbench.options import RunOptions
from fedbench.scenario import parse_scenario, resolve_runs, run_id_of
from fedbench.store import ResultsStore
from tests.factories import tiny_scenario, with_changes

RAW = tiny_scenario(
    {"model.hidden": [32], "model.dropout": 0.5, "partition.omega": 0.3},
    name="dropout",
    rounds=5,
    eval={"every": 1},
    checkpoint_every=2,
    targets=[0.3],
)
COLS = ["round", "test_acc", "test_loss", "train_loss", "consistency"]


def scenario(**model):
    return parse_scenario(with_changes(RAW, {f"model.{key}": value for key, value in model.items()}))


def run(tmp_path, sc, name, seed=0, on_round=None, executor="sequential", global_seed=None):
    if global_seed is not None:  # what the caller left in torch's global generator must not matter
        torch.manual_seed(global_seed)
    store = ResultsStore(tmp_path / name)
    spec = resolve_runs(sc)[0]
    cache = DataCache(tmp_path / "data", False, torch.device("cpu"))
    outcome = execute_run(spec, seed, store, cache, "h", on_round, RunOptions(executor=executor))
    assert outcome.status == "finished", outcome.error
    return store.metrics([outcome.run_id])


@pytest.mark.parametrize("executor", ["sequential", "batched"])
def test_dropout_runs_are_reproducible_and_seeded(tmp_path, executor):
    a = run(tmp_path, scenario(), "a", executor=executor, global_seed=1)
    b = run(tmp_path, scenario(), "b", executor=executor, global_seed=2)
    pd.testing.assert_frame_equal(a[COLS], b[COLS])
    other_seed = run(tmp_path, scenario(), "c", seed=1, executor=executor)
    assert not a["train_loss"].equals(other_seed["train_loss"])
    no_dropout = run(tmp_path, scenario(dropout=0.0), "d", executor=executor)
    assert not a["train_loss"].equals(no_dropout["train_loss"])  # the masks really act on training


def test_no_dropout_run_is_unchanged_by_the_dropout_stream(tmp_path):
    """Without dropout nothing draws from the global generator: any global state gives the same run."""
    a = run(tmp_path, scenario(dropout=0.0), "a", global_seed=1)
    b = run(tmp_path, scenario(dropout=0.0), "b", global_seed=2)
    pd.testing.assert_frame_equal(a[COLS], b[COLS])


def test_the_callers_global_generator_is_left_alone(tmp_path):
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    run(tmp_path, scenario(), "a")
    torch.testing.assert_close(torch.rand(3), expected, rtol=0, atol=0)


def test_interrupted_dropout_run_resumes_with_identical_results(tmp_path):
    full = run(tmp_path, scenario(), "full", global_seed=1)

    def stop_at_4(t, _):
        if t == 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, scenario(), "cut", on_round=stop_at_4, global_seed=1)
    store = ResultsStore(tmp_path / "cut")
    rid = run_id_of(resolve_runs(scenario())[0], 0)
    assert store.status(rid) == "running" and store.checkpoint_path(rid).exists()
    resumed = run(tmp_path, scenario(), "cut", global_seed=3)  # resumes after round 2
    assert not store.checkpoint_path(rid).exists()
    pd.testing.assert_frame_equal(full[COLS], resumed[COLS])
