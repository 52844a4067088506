"""LwF-FL's, iCaRL-FL's and TARGET's own local losses on the batched executor's padded rows are the losses client by
client (frozen old model on scratch BatchNorm buffers, old heads as masks, iCaRL's replay draws joined to the batch,
TARGET's synthetic batch as the objective's own, moving the BatchNorm statistics on), in
task- and class-incremental mode, with and without BatchNorm: the sequential numbers and accuracy matrix in
float64, on a CPU and (marker gpu) on CUDA."""

import json

import numpy as np
import pandas as pd
import pytest
import torch

from fedbench.algorithms import ALGORITHMS
from fedbench.engine.runner import execute_run
from fedbench.engine.setup import DataCache
from fedbench.options import RunOptions
from fedbench.scenario import parse_scenario, resolve_runs
from fedbench.store import ResultsStore
from tests.continual.common import COLS, matrix, raw_with, run, spec_of

F64_RTOL, F64_ATOL = 1e-9, 1e-12


TARGET = {  # TARGET's server-side generation, small: a pool of 10 synthetic digits at each task's end
    "name": "target_fl",
    **{"synthetic_batch": 4, "pool_size": 10, "synthesis_rounds": 2, "generator_steps": 2, "synthesis_batch": 4},
    **{"warmup": 1, "student_steps": 2, "student_batch": 3, "noise_dim": 5, "generator_width": 7},
}


def spec_for(raw, name):
    """The continual scenario ``raw`` with the algorithm ``name`` (TARGET with its small generation)."""
    if name == "target_fl":
        return resolve_runs(parse_scenario({**raw, "algorithms": [TARGET]}))[0]
    return spec_of(raw, name)


@pytest.mark.parametrize("name", ["lwf_fl", "icarl_fl", "target_fl"])
@pytest.mark.parametrize("mode", ["task", "class"])
@pytest.mark.parametrize("model", [None, {"name": "tinynn", "hidden": [12, 8]}])
def test_batched_rows_equal_the_clients_one_by_one(tmp_path, name, mode, model):
    local = {"epochs": 0.5, "batch_size": 8, "lr": 0.1, "drop_singleton_batch": True, "precision": "fp64"}
    changes = {"continual.mode": mode, "local": local}  # unequal K_i and partial last batches: padded rows
    raw = raw_with(changes, **({"model": model} if model else {}))
    spec = spec_for(raw, name)
    seq, seq_extra, a = run(tmp_path, spec, "seq", "sequential")
    bat, bat_extra, b = run(tmp_path, spec, "bat", "batched")
    assert a.status == b.status == "finished"
    pd.testing.assert_frame_equal(seq[COLS], bat[COLS], rtol=F64_RTOL, atol=F64_ATOL)
    want, got = np.array(matrix(seq_extra)), np.array(matrix(bat_extra))
    assert want.shape == (3, 3)
    np.testing.assert_allclose(got, want, rtol=F64_RTOL, atol=F64_ATOL)
    caps = ALGORITHMS.capabilities(name)
    assert caps.batchable and caps.own_loss


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["lwf_fl", "icarl_fl", "target_fl"])
def test_batched_rows_equal_the_clients_one_by_one_on_cuda(tmp_path, name):
    """The same on CUDA (float64, BatchNorm, class mode): the vmapped losses without a host read in the step."""
    local = {"epochs": 0.5, "batch_size": 8, "lr": 0.1, "drop_singleton_batch": True, "precision": "fp64"}
    spec = spec_for(
        raw_with({"continual.mode": "class", "local": local}, model={"name": "tinynn", "hidden": [12, 8]}), name
    )
    cache = DataCache(tmp_path / "data", False, torch.device("cuda"))
    frames = []
    for executor in ("sequential", "batched"):
        store = ResultsStore(tmp_path / executor)
        out = execute_run(spec, 0, store, cache, "h", options=RunOptions(device="cuda", executor=executor))
        assert out.status == "finished", out
        frame = store.metrics([out.run_id])
        frames.append((frame[COLS], [json.loads(e).get("task_acc") for e in frame["extra"]]))
    (seq, seq_rows), (bat, bat_rows) = frames
    pd.testing.assert_frame_equal(seq, bat, rtol=1e-7, atol=1e-9)
    for s, b in zip(seq_rows, bat_rows):
        assert (s is None and b is None) or np.allclose(s, b, rtol=1e-7, atol=1e-9)
