"""Task streams: class split and order, task indices, logit-mask tables, per-task partitions."""

import numpy as np
import pytest
import torch

from fedbench.continual.tasks import split_tasks
from fedbench.engine.setup import build_run
from tests.continual.common import cache, raw_with, spec_of


def labels(n_per_class: int, k: int) -> np.ndarray:
    return np.repeat(np.arange(k), n_per_class)[np.random.default_rng(0).permutation(n_per_class * k)]


def test_natural_order_gives_consecutive_classes_and_their_samples():
    train_y, test_y = labels(5, 10), labels(2, 10)
    s = split_tasks(train_y, test_y, 10, 3, 3, "natural", "task", seed=0)
    assert s.classes == ((0, 1, 2), (3, 4, 5), (6, 7, 8))
    assert s.class_task.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2, -1]  # class 9 is in no task
    for j, group in enumerate(s.classes):
        assert s.train[j].tolist() == [i for i, y in enumerate(train_y) if y in group]
        assert s.test[j].tolist() == [i for i, y in enumerate(test_y) if y in group]


def test_null_classes_per_task_divides_the_classes_evenly_or_says_what_to_set():
    s = split_tasks(labels(3, 10), labels(1, 10), 10, 5, None, "natural", "task", 0)
    assert s.classes == ((0, 1), (2, 3), (4, 5), (6, 7), (8, 9))
    with pytest.raises(
        ValueError, match=r"classes_per_task: null needs num_classes \(10\) divisible by continual.tasks \(3\)"
    ):
        split_tasks(labels(3, 10), labels(1, 10), 10, 3, None, "natural", "task", 0)
    with pytest.raises(ValueError, match="4 × 3 exceeds the dataset's 10 classes"):
        split_tasks(labels(3, 10), labels(1, 10), 10, 4, 3, "natural", "task", 0)


def test_seeded_order_is_a_per_seed_permutation_of_disjoint_tasks():
    y = labels(3, 10)
    a = split_tasks(y, y, 10, 5, 2, "seeded", "task", seed=1)
    assert sorted(c for g in a.classes for c in g) == list(range(10))
    assert a.classes == split_tasks(y, y, 10, 5, 2, "seeded", "task", seed=1).classes
    orders = {split_tasks(y, y, 10, 5, 2, "seeded", "task", seed=s).classes for s in range(6)}
    assert len(orders) == 6  # each seed its own order


def test_task_incremental_mask_is_the_own_tasks_classes_and_class_incremental_the_seen_ones():
    y = labels(2, 5)
    ti = split_tasks(y, y, 5, 2, 2, "natural", "task", 0)  # tasks {0,1}, {2,3}; class 4 in none
    T, F = True, False
    assert (
        ti.label_mask(0).tolist()
        == ti.label_mask(1).tolist()
        == [[T, T, F, F, F], [T, T, F, F, F], [F, F, T, T, F], [F, F, T, T, F], [T, T, T, T, T]]
    )
    ci = split_tasks(y, y, 5, 2, 2, "natural", "class", 0)
    assert ci.label_mask(0).tolist() == [[T, T, F, F, F]] * 5
    assert ci.label_mask(1).tolist() == [[T, T, T, T, F]] * 5


def test_the_partition_is_applied_per_task_and_covers_each_tasks_indices_once(tmp_path):
    spec = spec_of(raw_with({"clients.num": 4, "clients.per_round": 2}))
    setup = build_run(spec, 0, cache(tmp_path))
    stream, y = setup.tasks.stream, setup.data.train.y
    for j, parts in enumerate(setup.tasks.parts):
        joined = torch.cat(parts).tolist()
        assert sorted(joined) == stream.train[j].tolist()  # every index of task j exactly once
        assert set(y[torch.cat(parts)].tolist()) == set(stream.classes[j])
    fed = setup.federation
    assert list(fed.parts) == list(setup.tasks.parts[0]) and fed.sizes.tolist() == [len(p) for p in fed.parts]
    # Dirichlet ω = 0.5 draws different client shares per task (the ("partition", task) streams)
    shares = [[len(p) for p in parts] for parts in setup.tasks.parts]
    assert len({tuple(s) for s in shares}) == 3
