"""The round plan draws exactly the minibatches, replay draws and augmentations of the sequential path."""

import torch

from fedbench.data.base import ArraySplit
from fedbench.engine.batches import ClientBatcher
from fedbench.engine.local import LocalConfig
from fedbench.engine.plan import draw_plan
from fedbench.scenario import AugmentSpec

FLIP_CROP = AugmentSpec(flip=True, crop_padding=1)


def setup(replay_apart=False, augment=FLIP_CROP):
    gen = torch.Generator().manual_seed(0)
    train = ArraySplit(torch.randn(60, 1, 4, 4, generator=gen), torch.randint(0, 3, (60,), generator=gen))
    parts = [torch.arange(0, 7), torch.arange(7, 30), torch.arange(30, 33), torch.arange(33, 60)]
    replay = lambda client, position: None if client == 2 else torch.tensor([client, position % 5])  # noqa: E731
    cfg = LocalConfig(0.0, None, augment, seed=3, replay=replay, replay_apart=replay_apart)
    return train, (lambda: ClientBatcher(parts, 5, seed=1, drop_singleton=True)), cfg


def test_plan_batches_are_the_sequential_batches():
    train, batcher, cfg = setup()
    clients, steps = [0, 1, 2, 3], [2, 5, 3, 1]
    a, b = batcher(), batcher()
    plan = draw_plan(train, a, clients, steps, cfg)
    for k in range(max(steps)):
        x, y, mask, memory = plan.batch(k, train)
        assert memory is None and x.shape[:2] == y.shape == mask.shape == (4, plan.width[k])
        for row, client in enumerate(clients):
            if k >= steps[row]:
                assert mask[row].sum() == 0
                continue
            xs, ys = cfg.batch(train, b, client)
            n = len(ys)
            assert torch.equal(x[row, :n], xs) and torch.equal(y[row, :n], ys)
            assert mask[row, :n].sum() == n and mask[row, n:].sum() == 0
    assert a.cursor == b.cursor  # the batcher moved as K_i next() calls move it


def test_plan_rows_and_replay_apart():
    train, batcher, cfg = setup(replay_apart=True, augment=AugmentSpec())
    plan = draw_plan(train, batcher(), [1, 2], [2, 2], cfg)
    _, y, mask, memory = plan.batch(0, train)
    assert memory[0].sum() == 2 and memory[1].sum() == 0  # client 2 has no replay draw
    assert torch.equal(memory[0, 5:7], torch.ones(2)) and torch.equal(mask[0, :7], torch.ones(7))
    part = plan.rows(slice(1, 2))
    assert part.width == plan.width and torch.equal(part.batch(0, train)[1], y[1:])


def test_a_plan_without_replay_is_laid_out_on_the_host_and_moved_in_two_copies(monkeypatch):
    """Without a replay memory the plan is the sequential batches too, and crosses to the data's device as two
    copies (indices, mask), however many permutations the round's clients draw."""
    import fedbench.engine.batches as batches_module
    import fedbench.engine.plan as plan_module

    train, batcher, _ = setup()
    cfg = LocalConfig(0.0, None, AugmentSpec(), seed=3)
    copies = []
    original = plan_module.to_device
    for module in (plan_module, batches_module):  # the batcher's draws, then the plan's layout
        monkeypatch.setattr(module, "to_device", lambda t, d: copies.append(t.device) or original(t, d))
    clients, steps = [0, 1, 2, 3], [6, 5, 3, 9]  # several epochs of every client
    a, b = batcher(), batcher()
    plan = draw_plan(train, a, clients, steps, cfg)
    assert copies == [torch.device("cpu")] * 2
    for k in range(max(steps)):
        x, y, mask, _ = plan.batch(k, train)
        for row, client in enumerate(clients):
            if k < steps[row]:
                xs, ys = cfg.batch(train, b, client)
                assert torch.equal(x[row, : len(ys)], xs) and mask[row].sum() == len(ys)
    assert a.cursor == b.cursor


def test_the_rows_of_several_runs_laid_out_at_once_are_their_plans_side_by_side():
    """A population's plan (every run's drawn rows laid out at once) is each run's own plan, padded and side by side."""
    from fedbench.engine.plan import lay_out, row_draws
    from fedbench.engine.population_rows import joint_plan

    train, batcher, _ = setup()
    cfg = LocalConfig(0.0, None, AugmentSpec(), seed=3)
    runs = [([0, 1, 2, 3], [2, 5, 3, 1]), ([3, 1], [7, 4]), ([2], [1])]  # clients, K_i of three runs
    own = [batcher() for _ in runs]
    apart = joint_plan([draw_plan(train, b, clients, steps, cfg) for b, (clients, steps) in zip(own, runs)])
    together = [batcher() for _ in runs]
    rows = [r for b, (clients, steps) in zip(together, runs) for r in row_draws(b, clients, steps, cfg)]
    joint = lay_out(train, rows, [k for _, steps in runs for k in steps], cfg)
    assert torch.equal(joint.index, apart.index) and torch.equal(joint.mask, apart.mask)
    assert joint.width == apart.width and joint.mask.dtype == apart.mask.dtype
