"""The batched client path equals the sequential reference for every registered algorithm."""

import copy

import pandas as pd
import pytest
import torch

from fedbench.algorithms import ALGORITHMS
from fedbench.engine.runner import execute_run
from fedbench.engine.setup import DataCache
from fedbench.scenario import parse_scenario, resolve_runs
from fedbench.store import ResultsStore
from tests.factories import tiny_scenario

# unequal client sizes (Dirichlet 0.5): epochs → different K_i per client, and clients smaller than the batch
BASE = tiny_scenario(
    {"clients.num": 12, "clients.per_round": 4}, name="batched",
    local={"epochs": 0.5, "batch_size": 32, "lr": 0.05, "weight_decay": 1e-3, "clip_grad_norm": 2.0},
)
COLS = ["test_acc", "test_loss", "train_loss", "bits_up", "bits_down", "consistency"]


def metrics(tmp_path, raw, executor):
    spec = resolve_runs(parse_scenario(raw))[0]
    store = ResultsStore(tmp_path / executor)
    out = execute_run(spec, 0, store, DataCache(tmp_path, False, torch.device("cpu")), "h", executor=executor)
    assert out.status == "finished", out
    return store.metrics([out.run_id])[COLS]


@pytest.mark.parametrize("name", ALGORITHMS.names())
def test_batched_equals_sequential(tmp_path, name):
    raw = copy.deepcopy(BASE)
    raw["algorithms"] = [{"name": name}]
    if ALGORITHMS.capabilities(name).compression:
        raw["algorithms"][0]["compression"] = {"kind": "stochastic", "bits": 4}
    seq, bat = metrics(tmp_path, raw, "sequential"), metrics(tmp_path, raw, "batched")
    pd.testing.assert_frame_equal(seq, bat, rtol=1e-4, atol=1e-6)


def test_batchnorm_models_are_refused_by_batched_and_routed_by_auto(tmp_path):
    raw = copy.deepcopy(BASE)
    raw["model"] = {"name": "convmixer", "dim": 8, "depth": 1, "kernel_size": 3, "patch_size": 2}
    raw["rounds"] = 1
    pd.testing.assert_frame_equal(metrics(tmp_path, raw, "auto"), metrics(tmp_path, raw, "sequential"))
    from fedbench.engine.runner import choose_executor

    assert choose_executor("auto", has_buffers=False, on_gpu=True) and not choose_executor("auto", False, on_gpu=False)
    assert not choose_executor("auto", has_buffers=True, on_gpu=True)
    spec = resolve_runs(parse_scenario(raw))[0]
    store = ResultsStore(tmp_path / "refused")
    out = execute_run(spec, 0, store, DataCache(tmp_path, False, torch.device("cpu")), "h", executor="batched")
    assert out.status == "failed" and "needs a model without buffers" in out.error
