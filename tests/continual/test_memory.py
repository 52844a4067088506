"""Replay memories: class-balanced quotas, seeded determinism, frozen within a task, filled at its end."""

import numpy as np
import pytest

from fedbench.continual.memory import ReplayMemory, balanced_quota, select_memory
from fedbench.engine.task_stream import ContinualStream
from tests.continual.common import loop_of, raw_with, spec_of


@pytest.mark.parametrize(
    "available,total,expected_sorted",
    [
        ([10, 10, 10], 9, [3, 3, 3]),
        ([1, 10, 10], 9, [1, 4, 4]),  # a short class gives its share to the others
        ([2, 3, 50], 30, [2, 3, 25]),
        ([5, 5], 100, [5, 5]),  # fewer samples than the quota: keep them all
        ([10, 10, 10], 0, [0, 0, 0]),
    ],
)
def test_quota_is_water_filled(available, total, expected_sorted):
    q = balanced_quota(np.array(available), total, np.random.default_rng(0))
    assert sorted(q.tolist()) == sorted(expected_sorted) and (q <= np.array(available)).all()


def test_an_indivisible_quota_differs_by_at_most_one_and_the_extra_units_are_seeded():
    picks = set()
    for seed in range(8):
        q = balanced_quota(np.array([10, 10, 10, 10]), 6, np.random.default_rng(seed))
        assert q.sum() == 6 and sorted(q.tolist()) == [1, 1, 2, 2]
        picks.add(tuple(q.tolist()))
    assert len(picks) > 1


def test_selection_is_class_balanced_without_repeats():
    labels = np.array([0] * 50 + [1] * 50 + [2] * 5)
    indices = np.arange(100, 205)
    kept = select_memory(indices, labels, 40, np.random.default_rng(3))
    counts = np.bincount(labels[kept - 100], minlength=3)
    assert counts.tolist() in ([18, 17, 5], [17, 18, 5]) and len(set(kept.tolist())) == 40
    assert (np.diff(kept) > 0).all() and set(kept) <= set(indices)


def test_fill_is_deterministic_per_seed_and_grows_one_slot_per_task():
    labels = np.repeat(np.arange(4), 10)
    parts = [np.arange(0, 20), np.arange(20, 40)]
    a, b, c = ReplayMemory(2, 6, seed=0), ReplayMemory(2, 6, seed=0), ReplayMemory(2, 6, seed=1)
    for m in (a, b, c):
        m.fill(0, parts, labels)
    assert all(np.array_equal(a.indices(i), b.indices(i)) for i in range(2))
    assert any(not np.array_equal(a.indices(i), c.indices(i)) for i in range(2))
    assert [np.bincount(labels[a.indices(i)]).tolist() for i in range(2)] == [[3, 3], [0, 0, 3, 3]]
    with pytest.raises(ValueError, match="cannot add task 2"):
        a.fill(2, parts, labels)
    a.fill(1, parts, labels)
    assert [a.size(i) for i in range(2)] == [12, 12]
    restored = ReplayMemory(2, 6, seed=0)
    restored.load_state_dict(a.state_dict())
    assert all(np.array_equal(a.indices(i), restored.indices(i)) for i in range(2))


def test_the_memory_is_frozen_during_a_task_and_holds_the_clients_own_task_samples(tmp_path):
    loop = loop_of(tmp_path, spec_of(raw_with()))
    y = loop.s.data.train.y.numpy()
    snapshots = []
    for t in range(1, 7):
        loop.round(t)
        snapshots.append([loop.plugin(ContinualStream).memory.indices(c).copy() for c in range(3)])
        if t == 2:
            task0_parts = [p.numpy() for p in loop.fed.parts]
    same = lambda a, b: all(np.array_equal(x, y_) for x, y_ in zip(a, b))  # noqa: E731
    assert same(snapshots[2], snapshots[1]) and not same(snapshots[3], snapshots[2])  # task 1: rounds 3–4
    sizes = [[len(m) for m in snap] for snap in snapshots]
    assert sizes[0] == [0, 0, 0] and sizes[1] == sizes[2] == [12, 12, 12] and sizes[5] == [36, 36, 36]
    for c in range(3):
        slot0 = loop.plugin(ContinualStream).memory.slots[c][0]
        assert set(slot0) <= set(task0_parts[c]) and set(y[slot0]) <= {0, 1, 2}
        present = np.unique(y[task0_parts[c]])
        counts = np.bincount(y[slot0], minlength=3)[present]
        assert counts.max() - counts.min() <= 1 or counts.min() == min(np.bincount(y[task0_parts[c]])[present])
