import numpy as np
import torch

from fedbench.engine.batches import ClientBatcher
from fedbench.seeding import torch_stream


def test_each_epoch_visits_every_sample_once_and_reshuffles():
    parts = [torch.arange(10), torch.arange(10, 13)]
    b = ClientBatcher(parts, batch_size=4, seed=0)
    epoch1 = torch.cat([b.next(0) for _ in range(3)])  # 4 + 4 + 2
    epoch2 = torch.cat([b.next(0) for _ in range(3)])
    assert sorted(epoch1.tolist()) == list(range(10)) == sorted(epoch2.tolist())
    assert not torch.equal(epoch1, epoch2)
    assert len(b.next(1)) == 3  # batch = min(B, n_i)
    assert b.steps_for_epochs(0, 1.0) == 3 and b.steps_for_epochs(1, 2.0) == 2 and b.steps_for_epochs(0, 0.01) == 1


def test_resume_from_state_dict_draws_the_same_batches():
    parts = [torch.arange(7)]
    a = ClientBatcher(parts, 3, seed=5)
    for _ in range(4):
        a.next(0)
    b = ClientBatcher(parts, 3, seed=5)
    b.load_state_dict(a.state_dict())
    assert all(torch.equal(a.next(0), b.next(0)) for _ in range(6))


def test_streams_depend_on_seed_and_client():
    parts = [torch.arange(50), torch.arange(50)]
    a, b = ClientBatcher(parts, 50, seed=0), ClientBatcher(parts, 50, seed=1)
    x0, x1 = a.next(0), a.next(1)
    assert not torch.equal(x0, x1) and not torch.equal(x0, b.next(0))


def test_drop_singleton_skips_an_epochs_lone_last_sample():
    part = [torch.arange(5)]
    plain, dropping = ClientBatcher(part, 2, seed=0), ClientBatcher(part, 2, seed=0, drop_singleton=True)
    assert [len(plain.next(0)) for _ in range(4)] == [2, 2, 1, 2]
    sizes = [len(dropping.next(0)) for _ in range(4)]
    assert sizes == [2, 2, 2, 2] and int(dropping.cursor[0]) == 9  # 4 + 1 skipped + 2 + 2
    second_epoch = torch.randperm(5, generator=torch_stream(0, "batches", 0, 1))
    again = ClientBatcher(part, 2, seed=0, drop_singleton=True)
    [again.next(0) for _ in range(2)]
    assert again.next(0).tolist() == second_epoch[:2].tolist()
    single = ClientBatcher([torch.arange(1)], 4, seed=0, drop_singleton=True)
    assert [len(single.next(0)) for _ in range(2)] == [1, 1]  # a one-sample client still trains


def test_a_host_draw_is_the_device_draw():
    parts = [torch.arange(0, 7), torch.arange(7, 30)]
    on_host, on_device = ClientBatcher(parts, 5, seed=4), ClientBatcher(parts, 5, seed=4)
    for client, steps in [(0, 3), (1, 4), (0, 5)]:
        positions = [on_device.cursor[client]]
        batches = [on_device.next(client)]
        for _ in range(steps - 1):
            positions.append(on_device.cursor[client])
            batches.append(on_device.next(client))
        host, lengths, at = on_host.draw(client, steps)
        assert isinstance(host, np.ndarray) and host.tolist() == torch.cat(batches).tolist()
        assert lengths == [len(b) for b in batches] and at == positions


def test_each_permutation_is_its_streams_randperm_whatever_came_before():
    """One generator is reseeded for every permutation: each is the randperm of a fresh generator of its
    ("batches", client, epoch) stream, over the client's samples."""
    parts = [torch.arange(100, 107), torch.arange(7, 30), torch.arange(3)]
    b = ClientBatcher(parts, 4, seed=9)
    for client, steps in [(1, 20), (0, 5), (2, 4), (1, 3), (0, 9)]:
        start = b.cursor[client]
        host, lengths, _ = b.draw(client, steps)
        n, expected, cursor = len(parts[client]), [], start
        for take in lengths:
            epoch, pos = divmod(cursor, n)
            order = torch.randperm(n, generator=torch_stream(9, "batches", client, epoch))
            expected += parts[client][order][pos : pos + take].tolist()
            cursor += take
        assert host.tolist() == expected


def test_a_walk_made_ahead_is_not_used_once_the_cursor_moved():
    from fedbench.engine.batches import seed_ahead

    parts = [torch.arange(0, 11)]
    plain, ahead = ClientBatcher(parts, 3, seed=1), ClientBatcher(parts, 3, seed=1)
    seed_ahead([(ahead, [0], [5])])  # walks 5 batches from cursor 0
    assert torch.equal(plain.next(0), ahead.next(0))  # the cursor moves past that walk's start
    a, b = plain.draw(0, 5), ahead.draw(0, 5)
    assert np.array_equal(a[0], b[0]) and a[1:] == b[1:] and plain.cursor == ahead.cursor


def test_seeds_computed_ahead_draw_the_same_batches():
    from fedbench.engine.batches import seed_ahead

    parts = [torch.arange(0, 7), torch.arange(7, 30), torch.arange(30, 33)]
    plain, ahead = ClientBatcher(parts, 5, seed=4, task=2), ClientBatcher(parts, 5, seed=4, task=2)
    for clients, steps in [([0, 1, 2], [3, 9, 4]), ([2, 0], [7, 1]), ([1], [12])]:
        seed_ahead([(ahead, clients, steps)])
        assert ahead._seeds  # some epochs' seeds were computed ahead
        for client, k in zip(clients, steps):
            a, b = plain.draw(client, k), ahead.draw(client, k)
            assert np.array_equal(a[0], b[0]) and a[1:] == b[1:]
    assert not ahead._seeds  # every seed computed ahead was used
