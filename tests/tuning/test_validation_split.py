"""The validation protocol's split: stratified, disjoint from training, the same for every trial."""

import numpy as np
import pytest
import torch

from fedbench.data.holdout import hold_out, stratified_counts
from fedbench.engine.setup import DataCache, build_run
from fedbench.scenario import parse_scenario
from fedbench.sweeps.tuning import plan
from tests.factories import tiny_scenario

TUNE = {
    "space": {"local.lr": [0.01, 0.1], "server.lr": [1.0, 3.0]},
    "trials": {"rounds": 2},
    "validation_fraction": 0.2,
}


def test_stratified_counts_follow_the_labels():
    labels = np.array([0] * 50 + [1] * 30 + [2] * 20)
    assert stratified_counts(labels, 0.1) == {0: 5, 1: 3, 2: 2}
    counts = stratified_counts(np.array([0, 0, 0, 1, 1, 2]), 0.5)
    assert sum(counts.values()) == 3 and counts[0] >= 1 and counts[1] >= 1
    assert sum(stratified_counts(np.array([4]), 0.5).values()) == 0  # a one-sample client keeps it


def test_hold_out_partitions_a_client():
    labels = np.repeat(np.arange(4), 25)
    indices = np.arange(0, 100, 2)  # the client's samples (labels 0..3, 12 or 13 each)
    train, val = hold_out(indices, labels, 0.2, np.random.default_rng(0))
    assert not set(train) & set(val) and sorted([*train, *val]) == list(indices)
    assert len(val) == 10 and set(np.unique(labels[val])) == {0, 1, 2, 3}


def _setups(tmp_path):
    cache = DataCache(tmp_path / "data", False, torch.device("cpu"))
    sc = parse_scenario(tiny_scenario(tune=TUNE))
    trials = plan(sc).entries[0].trials
    return sc, cache, [build_run(t.spec, 0, cache) for t in trials]


def test_split_is_disjoint_from_training_and_the_same_for_every_trial(tmp_path):
    sc, cache, setups = _setups(tmp_path)
    whole = build_run(sc.runs[0], 0, cache)  # the plain run: every sample trains
    first = setups[0]
    assert first.validation is not None
    for setup in setups:
        for i, (train, val, all_of_i) in enumerate(
            zip(setup.federation.parts, setup.validation, whole.federation.parts)
        ):
            assert not set(train.tolist()) & set(val.tolist()), f"client {i} trains on validation samples"
            assert sorted(train.tolist() + val.tolist()) == sorted(all_of_i.tolist())
            assert torch.equal(val, first.validation[i]) and torch.equal(train, first.federation.parts[i])
        assert torch.equal(setup.federation.sizes, torch.tensor([float(len(p)) for p in setup.federation.parts]))
    held = sum(len(v) for v in first.validation)
    assert abs(held - 0.2 * sum(len(p) for p in whole.federation.parts)) <= len(whole.federation.parts)


def test_split_depends_on_the_seed(tmp_path):
    _, cache, setups = _setups(tmp_path)
    trial = plan(parse_scenario(tiny_scenario(tune=TUNE))).entries[0].trials[0]
    other = build_run(trial.spec, 1, cache)
    assert any(not torch.equal(a, b) for a, b in zip(setups[0].validation, other.validation))


def test_validation_accuracy_is_sample_weighted_over_all_clients(tmp_path):
    """``val_acc`` is correct / all validation samples, computed here from per-sample scores on the
    whole training set; the test-set score is recorded as without the split."""
    from fedbench.engine.runner import RoundLoop

    _, _, setups = _setups(tmp_path)
    sc = parse_scenario(tiny_scenario(tune=TUNE))
    spec = plan(sc).entries[0].trials[0].spec
    loop = RoundLoop(spec, 0, setups[0])
    metrics, extra = loop.round(1)
    s = loop.s
    correct, _ = s.model.per_sample(loop.state.x, loop.buffers, s.data.train, 256)
    rows = torch.cat(s.validation)
    assert extra["val_acc"] == pytest.approx(float(correct[rows].float().mean()))
    assert metrics["test_acc"] == pytest.approx(s.model.evaluate(loop.state.x, loop.buffers, s.data.test, 256)[0])
