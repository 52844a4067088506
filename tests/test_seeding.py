"""The named streams' seeds (fedbench/seeding.py): torch_seeds, numpy's SeedSequence restated over arrays, gives
the integers torch_seed gives one call at a time, for every key length and for values that need several words."""

import random

import pytest

from fedbench.seeding import torch_seed, torch_seeds


@pytest.mark.parametrize("keys", [0, 1, 2, 3, 4, 6])
def test_seeds_computed_together_are_those_computed_one_by_one(keys):
    rng = random.Random(keys)
    edge = [0, 1, 2**31, 2**32 - 1]
    for name in ["batches", "task_batches", "dropout", ""]:
        rows = [
            (rng.choice([*edge, rng.getrandbits(32)]), *[rng.choice([*edge, rng.getrandbits(32)]) for _ in range(keys)])
            for _ in range(50)
        ]
        assert torch_seeds(name, rows) == [torch_seed(r[0], name, *r[1:]) for r in rows]


def test_a_value_of_several_words_goes_one_by_one():
    for rows in ([(2**32 + 5, 1, 2), (7, 2**40, 0), (3, 4, 5)], [(3, 4, 5), (2**70, 0, 1)]):
        assert torch_seeds("batches", rows) == [torch_seed(r[0], "batches", *r[1:]) for r in rows]
    assert torch_seeds("batches", []) == []


def test_dropout_keys_of_several_runs_are_each_clients_stream():
    """The batched executor's dropout keys, computed for several runs at once, are each client's own
    ("dropout", round, client) stream seed, masked to 32 bits (a seed past 2³² included)."""
    import torch

    from fedbench.engine.batched import dropout_keys, runs_dropout_keys

    runs = [(0, 1, [3, 0, 7]), (2**40 + 3, 12, [1]), (5, 2, [])]
    keys = runs_dropout_keys(runs, torch.device("cpu"))
    assert keys.dtype == torch.int64
    assert keys.tolist() == [torch_seed(s, "dropout", t, c) & 0xFFFFFFFF for s, t, clients in runs for c in clients]
    assert dropout_keys(0, 1, [3, 0, 7], torch.device("cpu")).tolist() == keys[:3].tolist()
