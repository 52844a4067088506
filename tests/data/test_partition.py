"""Partition conventions: coverage, determinism, skew, sizes, termination and error messages."""

from __future__ import annotations

import time

import numpy as np
import pytest
from pydantic import ValidationError

from fedbench.data.partition import PARTITIONS, label_histogram, make_partition, partition_summary

N_CLIENTS = 20


def balanced_labels(per_class: int = 300, num_classes: int = 10, seed: int = 0) -> np.ndarray:
    labels = np.repeat(np.arange(num_classes), per_class)
    return np.random.default_rng(seed).permutation(labels)


def long_tail_labels() -> np.ndarray:
    return np.concatenate([np.full(int(2000 * 0.5**c), c) for c in range(10)])


def run(kind, labels, params=None, n=N_CLIENTS, seed=0, client_ids=None):
    return make_partition(kind, labels, n, np.random.default_rng(seed), params, client_ids)


def assert_disjoint_cover(parts, n_total, expected_used=None):
    for p in parts:
        assert p.dtype == np.int64 and np.all(np.diff(p) > 0)  # sorted, no duplicates inside
    flat = np.concatenate(parts)
    assert len(np.unique(flat)) == len(flat), "an index was given twice"
    assert flat.min(initial=0) >= 0 and flat.max(initial=0) < n_total
    assert len(flat) == (n_total if expected_used is None else expected_used)


CASES = [
    ("iid", {}),
    ("dirichlet", {"omega": 0.1}),
    ("dirichlet", {"omega": 0.1, "min_samples": 0}),
    ("dirichlet_balanced", {"omega": 0.1}),
    ("classes_per_client", {"k": 2}),
    ("classes_per_client", {"k": 2, "distinct": True}),
]


def test_registered_names():
    assert PARTITIONS.names() == ["classes_per_client", "dirichlet", "dirichlet_balanced", "iid", "natural"]
    for entry in PARTITIONS:
        assert entry.description


@pytest.mark.parametrize("kind,params", CASES)
@pytest.mark.parametrize("labels", [balanced_labels(), long_tail_labels()], ids=["balanced", "long_tail"])
def test_every_index_used_once(kind, params, labels):
    parts = run(kind, labels, params)
    assert len(parts) == N_CLIENTS
    n = len(labels)
    used = n // N_CLIENTS * N_CLIENTS if kind == "dirichlet_balanced" else n
    assert_disjoint_cover(parts, n, used)


@pytest.mark.parametrize("kind,params", CASES)
def test_deterministic_per_seed(kind, params):
    labels = balanced_labels()
    a, b, c = run(kind, labels, params, seed=1), run(kind, labels, params, seed=1), run(kind, labels, params, seed=2)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c))


@pytest.mark.parametrize("kind", ["dirichlet", "dirichlet_balanced"])
def test_label_skew_grows_as_omega_shrinks(kind):
    labels = balanced_labels(per_class=500)
    tv = [
        partition_summary(label_histogram(labels, run(kind, labels, {"omega": w}), 10))["label_skew_tv"]
        for w in (100.0, 1.0, 0.01)
    ]
    assert tv[0] < 0.15 < tv[1] < tv[2]
    assert tv[2] > 0.6


def test_iid_sizes_equal_as_possible():
    parts = run("iid", np.zeros(1003, dtype=np.int64), n=10)
    assert sorted({len(p) for p in parts}) == [100, 101]


@pytest.mark.parametrize("min_samples", [0, 2, 5])
def test_dirichlet_min_samples(min_samples):
    labels = balanced_labels()
    parts = run("dirichlet", labels, {"omega": 0.01, "min_samples": min_samples}, n=100)
    assert min(len(p) for p in parts) >= min_samples
    assert_disjoint_cover(parts, len(labels))


def test_dirichlet_min_samples_too_many():
    with pytest.raises(ValueError, match="min_samples=50 × clients.num=100"):
        run("dirichlet", balanced_labels(per_class=100), {"omega": 1.0, "min_samples": 50}, n=100)


def test_dirichlet_split_follows_q():
    """min_samples=0: client i's share of class c is floor-cut from cumsum(q_c), q_c ~ Dir(ω·1_N)."""
    labels = balanced_labels(per_class=1000, num_classes=3)
    rng = np.random.default_rng(7)
    q = rng.dirichlet(np.full(5, 2.0), size=3)
    hist = label_histogram(labels, run("dirichlet", labels, {"omega": 2.0, "min_samples": 0}, n=5, seed=7), 3)
    for c in range(3):
        cuts = (np.cumsum(q[c])[:-1] * 1000).astype(int)
        np.testing.assert_array_equal(hist[:, c], np.diff(np.concatenate([[0], cuts, [1000]])))


@pytest.mark.parametrize("omega", [0.001, 0.01, 1.0, 1e5])
@pytest.mark.parametrize("labels", [balanced_labels(), long_tail_labels()], ids=["balanced", "long_tail"])
def test_dirichlet_balanced_equal_sizes_and_terminates(omega, labels):
    parts = run("dirichlet_balanced", labels, {"omega": omega}, n=30)
    assert {len(p) for p in parts} == {len(labels) // 30}
    assert_disjoint_cover(parts, len(labels), len(labels) // 30 * 30)


def test_dirichlet_balanced_extreme_omega_shapes():
    labels = balanced_labels(per_class=500)
    iid_like = label_histogram(labels, run("dirichlet_balanced", labels, {"omega": 1e5}), 10)
    one_class = label_histogram(labels, run("dirichlet_balanced", labels, {"omega": 0.001}), 10)
    assert (iid_like > 0).all()
    assert np.median((one_class > 0).sum(axis=1)) <= 2


def test_dirichlet_balanced_fast_at_cifar_scale():
    labels = balanced_labels(per_class=5000)
    start = time.perf_counter()
    parts = run("dirichlet_balanced", labels, {"omega": 0.1}, n=100)
    assert time.perf_counter() - start < 10.0
    assert {len(p) for p in parts} == {500}


def test_classes_per_client_at_most_k_labels():
    labels = balanced_labels(per_class=600)  # 6000 samples, 40 shards of 150: no shard straddles classes
    for k in (1, 2, 3):
        hist = label_histogram(labels, run("classes_per_client", labels, {"k": k}), 10)
        assert (hist > 0).sum(axis=1).max() <= k


def test_classes_per_client_distinct():
    labels = balanced_labels(per_class=600)
    for k in (2, 5, 10):  # k=10: every label has exactly N shards, the tightest feasible case
        parts = run("classes_per_client", labels, {"k": k, "distinct": True}, n=N_CLIENTS)
        hist = label_histogram(labels, parts, 10)
        assert ((hist > 0).sum(axis=1) == k).all()
        assert {len(p) for p in parts} == {6000 // (k * N_CLIENTS) * k}
        assert_disjoint_cover(parts, len(labels))


def test_classes_per_client_duplicates_allowed_by_default():
    labels = balanced_labels(per_class=600)
    counts = [
        (label_histogram(labels, run("classes_per_client", labels, seed=s), 10) > 0).sum(axis=1) for s in range(5)
    ]
    assert min(c.min() for c in counts) == 1  # some client got two shards of one label


def test_classes_per_client_distinct_impossible():
    with pytest.raises(ValueError, match="distinct: true is impossible: label 0"):
        run("classes_per_client", long_tail_labels(), {"k": 4, "distinct": True})


def test_natural():
    labels = balanced_labels(per_class=10)
    ids = np.random.default_rng(0).integers(100, 105, size=len(labels))
    parts = run("natural", labels, n=5, client_ids=ids)
    for i, p in enumerate(parts):
        np.testing.assert_array_equal(p, np.flatnonzero(ids == 100 + i))
    with pytest.raises(ValueError, match=r"clients.num must equal .* \(5\), got clients.num=4"):
        run("natural", labels, n=4, client_ids=ids)
    with pytest.raises(ValueError, match="needs a dataset with per-sample client ids"):
        run("natural", labels, n=5)


@pytest.mark.parametrize(
    "kind,params",
    [
        ("dirichlet", {"omega": 0}),
        ("dirichlet", {}),
        ("dirichlet", {"omega": 1, "alpha": 1}),
        ("dirichlet", {"omega": 1, "min_samples": -1}),
        ("dirichlet_balanced", {"omega": float("inf")}),
        ("classes_per_client", {"k": 0}),
        ("iid", {"omega": 1}),
    ],
)
def test_bad_params_rejected(kind, params):
    with pytest.raises(ValidationError):
        run(kind, balanced_labels(), params)


def test_summary_values():
    hist = np.array([[2, 0], [0, 2], [1, 1], [0, 0]])
    s = partition_summary(hist)
    assert (s["size_min"], s["size_median"], s["size_max"]) == (0, 2.0, 2)
    assert s["mean_classes_per_client"] == pytest.approx(1.0)
    assert s["label_skew_tv"] == pytest.approx((0.5 + 0.5 + 0.0) / 3)  # empty client skipped
