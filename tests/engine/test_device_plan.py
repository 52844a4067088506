"""``local.shuffle: device`` (fedbench/engine/device_plan.py): the vectorised walk is the batcher's walk, a plan
drawn on the device is the plan of the batchers' own draws of the same hashed permutations (so the sequential,
batched and population executors agree), the permutations are pinned integers, a resumed run draws what an
uninterrupted one does, and the key stays out of the run hash while it holds its default."""

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest
import torch

import fedbench.engine.plan as plan_module
from fedbench.data.base import ArraySplit
from fedbench.engine.augment import augment_draws
from fedbench.engine.batches import ClientBatcher
from fedbench.engine.device_plan import (
    hashed_augment,
    hashed_choice,
    hashed_permutation,
    key_of,
    permutation_keys,
    sort_keys,
    walks,
)
from fedbench.engine.local import LocalConfig, ReplayTable
from fedbench.engine.plan import draw_plan, hashed_plan, lay_out, row_draws
from fedbench.engine.population import PopulationRun, execute_population
from fedbench.engine.population_rows import joint_plan
from fedbench.engine.runner import execute_run
from fedbench.engine.setup import DataCache
from fedbench.options import RunOptions
from fedbench.scenario import AugmentSpec, ScenarioError, parse_scenario
from fedbench.store import ResultsStore
from tests.engine.test_batched import BASE, ImageCache, bn_scenario, metrics, with_algorithm
from tests.engine.test_population import LOCAL, alone, assert_same, mixed_runs, spec_of
from tests.factories import tiny_scenario, tiny_spec, with_changes

CFG = LocalConfig(0.0, None, AugmentSpec(), seed=0)


def advanced(n: int, batch: int, drop: bool, draws: list[int]) -> ClientBatcher:
    """A one-client batcher whose cursor has moved through ``draws`` rounds of so many steps."""
    b = ClientBatcher([torch.arange(n)], batch, seed=0, drop_singleton=drop)
    for k in draws:
        b._advance(0, k)
    return b


def test_the_vectorised_walk_is_the_batchers_walk():
    """Every (n, B, drop_singleton, cursor, K): the same epochs, starts, lengths, positions and cursor after,
    including cursors left on a skipped singleton and steps past the epoch's end."""
    rng = np.random.default_rng(0)
    cases = 0
    for n in range(1, 14):
        for batch in range(2, 7):
            for drop in (False, True):
                for _ in range(6):
                    b = advanced(n, batch, drop, [int(v) for v in rng.integers(1, 6, rng.integers(0, 4))])
                    k = int(rng.integers(0, 9))
                    cursor = b.cursor[0]
                    segments, lengths, positions, after = b._walk(0, k)
                    w = walks(*(np.array([v]) for v in (n, batch, int(drop), cursor, k)))
                    assert list(w.length[:k, 0]) == lengths and list(w.position[:k, 0]) == positions
                    assert int(w.after[0]) == after and (w.length[k:] == 0).all()
                    places = [(e, i) for e, a, z in segments for i in range(a, z)]
                    assert places == [(w.epoch[s, 0], w.start[s, 0] + i) for s in range(k) for i in range(lengths[s])]
                    cases += 1
    assert cases == 13 * 5 * 2 * 6


def parts_of(sizes: list[int], total: int = 200) -> list[torch.Tensor]:
    order = torch.randperm(total, generator=torch.Generator().manual_seed(1))
    return list(order[: sum(sizes)].split(sizes))


AUGMENTED = [
    LocalConfig(0.0, None, AugmentSpec(flip=True, crop_padding=2), seed=s, shuffle="device") for s in (0, 1, 1)
]


@pytest.mark.parametrize("augment", [False, True])
@pytest.mark.parametrize("drop", [False, True])
def test_a_device_plan_is_the_plan_of_the_batchers_own_draws(drop, augment):
    """Three runs (two of one seed and partition), unequal n_i (one of a single sample), unequal K_i, six rounds:
    the same indices, masks, widths and (augmenting) crops and flips as :func:`lay_out` of the batchers' draws,
    and the same cursors after."""
    parts, other = parts_of([7, 1, 13, 25, 4, 40]), parts_of([9, 30, 2, 11, 6, 3])
    train = ArraySplit(torch.zeros(200, 1, 4, 4), torch.zeros(200, dtype=torch.int64))
    cfgs = AUGMENTED if augment else [CFG] * 3

    def batchers():
        return [
            ClientBatcher(p, 5, seed=s, drop_singleton=drop, shuffle="device")
            for p, s in ((parts, 0), (parts, 1), (other, 1))
        ]

    got, want = batchers(), batchers()
    for r in range(6):
        clients = [[0, 2, 3], [5, 1], [4, 0, 1 + r % 3]]  # distinct within a run, as sampled
        steps = [[3, 1, 7], [2, 4 + r], [9, 5, 2]]
        plan = hashed_plan(train, list(zip(got, clients, steps)), cfgs)
        refs = [lay_out(train, row_draws(b, c, s, cfg), s, cfg) for b, c, s, cfg in zip(want, clients, steps, cfgs)]
        ref = joint_plan(refs)  # each run's plan (its own augmentation seed), side by side
        assert torch.equal(plan.index, ref.index) and torch.equal(plan.mask, ref.mask) and plan.width == ref.width
        assert [b.cursor for b in got] == [b.cursor for b in want]
        if augment:
            assert plan.crops is not None and ref.crops is not None
            assert all(torch.equal(a, b) for a, b in zip(plan.crops, ref.crops))


def memory_config(memories: list[np.ndarray], seed: int, apart: bool, augment: AugmentSpec) -> LocalConfig:
    """A run's local configuration with per-step replay from ``memories`` (one per client), hashed with key
    κ(base, client, position), and the same memories as a device table."""
    base, count = 1000 + seed, 4
    sizes = np.array([len(m) for m in memories], dtype=np.int64)
    table = ReplayTable(torch.from_numpy(np.concatenate(memories)), np.cumsum(sizes) - sizes, sizes, count, base)

    def replay(client: int, position: int) -> torch.Tensor | None:
        if not len(memories[client]):
            return None
        return torch.from_numpy(hashed_choice(memories[client], count, key_of(base, client, position)))

    return LocalConfig(
        0.0, None, augment, seed=seed, replay=replay, replay_table=lambda: table, replay_apart=apart, shuffle="device"
    )


@pytest.mark.parametrize("apart", [False, True])
@pytest.mark.parametrize("augment", [False, True])
def test_replay_draws_hashed_on_the_device_are_the_hosts(apart, augment):
    """Per-step replay under ``local.shuffle: device``: three runs' memories (empty, smaller than a draw, larger),
    unequal K_i, four rounds: the device plan joins to each batch the draw ``cfg.replay`` makes on the host (the
    same indices, masks, widths, replay places and, augmenting, crops), with the same cursors after."""
    parts, other = parts_of([7, 1, 13, 25, 4, 40]), parts_of([9, 30, 2, 11, 6, 3])
    train = ArraySplit(torch.zeros(200, 1, 4, 4), torch.zeros(200, dtype=torch.int64))
    rng = np.random.default_rng(3)
    memories = [[rng.choice(200, size=n, replace=False) for n in sizes] for sizes in ([0, 3, 9, 2, 12, 0], [5] * 6)]
    spec = AugmentSpec(flip=True, crop_padding=2) if augment else AugmentSpec()
    cfgs = [memory_config(memories[0], 0, apart, spec), CFG, memory_config(memories[1], 1, apart, spec)]
    if augment:
        cfgs[1] = AUGMENTED[1]
    host = [c if c.replay is None else dataclasses.replace(c, replay_table=None) for c in cfgs]

    def batchers():
        return [ClientBatcher(p, 5, seed=s, shuffle="device") for p, s in ((parts, 0), (parts, 1), (other, 1))]

    got, want = batchers(), batchers()
    for r in range(4):
        clients = [[0, 2, 3], [5, 1], [4, 0, 1 + r % 3]]
        steps = [[3, 1, 7], [2, 4 + r], [9, 5, 2]]
        plan = hashed_plan(train, list(zip(got, clients, steps)), cfgs)
        ref = joint_plan(
            [lay_out(train, row_draws(b, c, k, g), k, g) for b, c, k, g in zip(want, clients, steps, host)]
        )
        assert torch.equal(plan.index, ref.index) and torch.equal(plan.mask, ref.mask) and plan.width == ref.width
        assert (plan.memory is None) == (ref.memory is None) == (not apart)
        assert plan.memory is None or torch.equal(plan.memory, ref.memory)
        assert [b.cursor for b in got] == [b.cursor for b in want]
        if augment:
            assert plan.crops is not None and ref.crops is not None
            assert all(torch.equal(a, b) for a, b in zip(plan.crops, ref.crops))
    assert max(plan.width) > 5  # batches of 5 with replay draws joined


def test_one_runs_draw_plan_takes_the_device_path():
    parts = parts_of([12, 30, 5])
    train = ArraySplit(torch.zeros(200, 3), torch.zeros(200, dtype=torch.int64))
    plan = draw_plan(train, ClientBatcher(parts, 8, seed=3, shuffle="device"), [2, 1], [3, 4], CFG)
    b = ClientBatcher(parts, 8, seed=3, shuffle="device")
    ref = lay_out(train, row_draws(b, [2, 1], [3, 4], CFG), [3, 4], CFG)
    assert torch.equal(plan.index, ref.index) and torch.equal(plan.mask, ref.mask)


def test_hashed_permutations_are_pinned_integers_and_ranks_never_tie():
    """Integer arithmetic only: these are the permutations on every CPU and GPU (a change here moves every
    number of every ``shuffle: device`` run)."""
    key = int(permutation_keys(torch.tensor(12345), torch.tensor(3), torch.tensor(7)))
    assert key == 2845949611
    assert hashed_permutation(key, 12).tolist() == [3, 8, 6, 7, 5, 9, 10, 0, 1, 11, 2, 4]
    for k in (0, 1, 2**32 - 1, key):
        ranks = sort_keys(torch.tensor(k), torch.arange(50_000))
        assert len(torch.unique(ranks)) == 50_000 and int(ranks.max()) < 2**32
    dy, dx, flips = augment_draws(8, True, 4, 0, 3, 17, "device")
    assert dy.tolist() == [4, 5, 8, 0, 4, 2, 1, 4] and dx.tolist() == [0, 8, 7, 5, 6, 7, 1, 3]
    assert flips.int().tolist() == [1, 0, 1, 0, 0, 1, 1, 0]
    b = ClientBatcher(parts_of([40]), 8, seed=2, shuffle="device")
    assert sorted(b._permutation(0, 5).tolist()) == sorted(b.parts[0].tolist())
    assert b._permutation(0, 5).tolist() != b._permutation(0, 6).tolist()


def device(raw: dict) -> dict:
    return with_changes(raw, {"local.shuffle": "device"})


@pytest.mark.parametrize("name", ["fedavg", "scaffold", "gradma"])
def test_batched_equals_sequential_under_device_shuffle(tmp_path, name):
    """The sequential executor composes each hashed permutation on the host; the batched one ranks a round's
    on the device: the same batches."""
    raw = device(with_algorithm(BASE, name))
    seq, bat = metrics(tmp_path, raw, "sequential"), metrics(tmp_path, raw, "batched")
    pd.testing.assert_frame_equal(seq, bat, rtol=1e-4, atol=1e-6)
    host = metrics(tmp_path, with_algorithm(BASE, name), "batched", name="host")
    assert not np.allclose(host["train_loss"], bat["train_loss"])  # other batches than host's


def test_batchnorm_with_skipped_singletons_and_augmentation_under_device_shuffle(tmp_path):
    """drop_singleton (the walk's skip) and augmentation (drawn by the batcher from the hashed permutations)."""
    raw = device(bn_scenario({"name": "lenet5_bn", "dropout": 0.0}, epochs=1.5, precision="fp64"))
    raw = with_changes(raw, {"local.augment.flip": True, "local.augment.crop_padding": 2})
    seq = metrics(tmp_path, raw, "sequential", shape=(1, 16, 16))
    bat = metrics(tmp_path, raw, "batched", shape=(1, 16, 16))
    pd.testing.assert_frame_equal(seq, bat, rtol=1e-9, atol=1e-12)
    plain = device(bn_scenario({"name": "lenet5_bn", "dropout": 0.0}, epochs=1.5, precision="fp64"))
    seq = metrics(tmp_path, plain, "sequential", shape=(1, 16, 16), name="s2")
    bat = metrics(tmp_path, plain, "batched", shape=(1, 16, 16), name="b2")
    pd.testing.assert_frame_equal(seq, bat, rtol=1e-9, atol=1e-12)


@pytest.mark.filterwarnings("error::RuntimeWarning")
@pytest.mark.parametrize("name", ["fedavg", "scaffold"])
def test_a_population_under_device_shuffle_equals_each_run_alone(tmp_path, name, monkeypatch):
    """Every run's rows ranked by one sort: each run is the run it is alone."""
    runs = mixed_runs(name, local={**LOCAL, "shuffle": "device"})
    calls = []
    import fedbench.engine.population_rows as population_rows

    real = population_rows.hashed_plan
    monkeypatch.setattr(population_rows, "hashed_plan", lambda *a: calls.append(len(a[1])) or real(*a))
    cache = DataCache(tmp_path, False, torch.device("cpu"))
    store = ResultsStore(tmp_path / "pop")
    outs = execute_population(runs, store, cache, RunOptions(population="3"))
    assert [o.status for o in outs] == ["finished"] * 3 and calls and calls[0] == 3
    assert_same(store, outs, *alone(tmp_path, runs, cache))
    rows = store.metrics([o.run_id for o in outs])
    notes = rows[rows["round"] == 1]["extra"].map(lambda e: json.loads(e)["executor"])
    assert notes.str.endswith("; round plans drawn on the device").all() and len(notes) == 3


def test_a_device_shuffled_population_killed_mid_run_resumes_exactly(tmp_path):
    local = {**LOCAL, "shuffle": "device", "epochs": 0.7}
    spec = spec_of(with_algorithm(tiny_scenario(local=local, rounds=5, checkpoint_every=2), "fedavg"))
    runs = [PopulationRun(spec, s, "h") for s in range(2)]
    cache = DataCache(tmp_path, False, torch.device("cpu"))
    store = ResultsStore(tmp_path / "pop")

    def stop(i, t, metrics):
        if (i, t) == (1, 3):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        execute_population(runs, store, cache, RunOptions(population="2"), stop)
    outs = execute_population(runs, store, cache, RunOptions(population="2"))
    assert [o.status for o in outs] == ["finished"] * 2
    assert_same(store, outs, *alone(tmp_path, runs, cache))


@pytest.mark.parametrize("name", ["fine_fl", "er_fl", "nccl_fl", "icarl_fl"])
def test_a_continual_run_under_device_shuffle(tmp_path, monkeypatch, name):
    """Each task's batcher ranks its own stream (``("task_batches", task)``); per-step replay draws (ER, iCaRL's
    exemplars, NCCL's apart) are hashed from ``("replay_step", task)``, on the host by the sequential executor and
    on the device with the round's plan by the batched one (no host plan): the same numbers, in float64."""
    from tests.continual.common import RAW

    def on_the_host(*args, **kwargs):
        raise AssertionError("a plan under local.shuffle: device was laid out on the host")

    monkeypatch.setattr(plan_module, "lay_out", on_the_host)
    raw = device(with_changes(with_algorithm(RAW, name), {"local.precision": "fp64"}))
    spec = spec_of(raw)
    stores = {}
    for executor in ("sequential", "batched"):
        store = ResultsStore(tmp_path / f"{name}-{executor}")
        out = execute_run(
            spec, 0, store, DataCache(tmp_path, False, torch.device("cpu")), "h", options=RunOptions(executor=executor)
        )
        assert out.status == "finished", out
        stores[executor] = store.metrics([out.run_id])[["test_acc", "train_loss"]]
    pd.testing.assert_frame_equal(stores["sequential"], stores["batched"], rtol=1e-9, atol=1e-12)


def test_the_key_is_in_the_run_hash_only_when_set():
    default, on = tiny_spec(), spec_of(device(tiny_scenario()))
    assert "shuffle" not in json.loads(default.to_json())["local"]
    assert json.loads(on.to_json())["local"]["shuffle"] == "device" and on.spec_hash() != default.spec_hash()
    with pytest.raises(ScenarioError, match="local.shuffle"):
        parse_scenario(tiny_scenario({"local.shuffle": "gpu"}))
    with pytest.raises(ScenarioError, match="drop_singleton_batch needs batch_size ≥ 2"):
        parse_scenario(tiny_scenario({"local.batch_size": 1, "local.drop_singleton_batch": True}))


@pytest.mark.gpu
def test_a_device_plan_on_cuda_is_the_hosts():
    parts = parts_of([7, 1, 13, 25, 4, 40])
    plans = []
    for where in ("cpu", "cuda"):
        train = ArraySplit(torch.zeros(200, 3, device=where), torch.zeros(200, dtype=torch.int64, device=where))
        b = ClientBatcher([p.to(where) for p in parts], 5, seed=4, drop_singleton=True, shuffle="device")
        plans.append(hashed_plan(train, [(b, [0, 3, 5, 1], [3, 9, 6, 2])], [CFG]))
    assert torch.equal(plans[0].index, plans[1].index.cpu()) and torch.equal(plans[0].mask, plans[1].mask.cpu())


@pytest.mark.gpu
def test_replay_draws_on_cuda_are_the_hosts():
    parts = parts_of([7, 1, 13, 25, 4, 40])
    rng = np.random.default_rng(5)
    memories = [rng.choice(200, size=n, replace=False) for n in (0, 3, 9, 2, 12, 30)]
    plans = []
    for where in ("cpu", "cuda"):
        cfg = memory_config(memories, 0, True, AugmentSpec())
        moved = dataclasses.replace(cfg.replay_table(), table=torch.from_numpy(np.concatenate(memories)).to(where))
        cfg = dataclasses.replace(cfg, replay_table=lambda moved=moved: moved)
        train = ArraySplit(torch.zeros(200, 3, device=where), torch.zeros(200, dtype=torch.int64, device=where))
        b = ClientBatcher([p.to(where) for p in parts], 5, seed=4, shuffle="device")
        plans.append(hashed_plan(train, [(b, [0, 3, 5, 1, 4], [3, 9, 6, 2, 4])], [cfg]))
    assert all(torch.equal(getattr(plans[0], f), getattr(plans[1], f).cpu()) for f in ("index", "mask", "memory"))
    assert plans[0].memory is not None and plans[0].memory.sum() > 0


def test_hashed_draws_are_uniform():
    """Over 20,000 samples of 400 batches: every crop offset about as often, flips about half, and every sample
    of a permutation about as often first."""
    keys = permutation_keys(torch.tensor(7), torch.arange(400).unsqueeze(1), torch.tensor(3))
    dy, dx, flips = hashed_augment(keys, torch.arange(50), True, 2)
    for offsets in (dy, dx):
        counts = torch.bincount(offsets.flatten(), minlength=5)
        assert len(counts) == 5 and (counts - 4000).abs().max() < 250
    assert abs(flips.float().mean().item() - 0.5) < 0.02
    first = torch.tensor([hashed_permutation(int(k), 10)[0] for k in keys.flatten()])
    assert (torch.bincount(first, minlength=10) - 40).abs().max() < 20
    drawn = torch.tensor(np.concatenate([hashed_choice(np.arange(10), 3, int(k)) for k in keys.flatten()]))
    assert (torch.bincount(drawn, minlength=10) - 120).abs().max() < 35  # a replay draw: each about 3/10 of draws


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_an_augmenting_population_under_device_shuffle_equals_each_run_alone(tmp_path):
    """LeNet-5 with BatchNorm on images, flips and padded crops hashed on the device for every run at once."""
    local = {**LOCAL, "batch_size": 8, "shuffle": "device", "augment": {"flip": True, "crop_padding": 2}}
    runs = mixed_runs("fedavg", {"name": "lenet5_bn", "dropout": 0.0}, local)
    cache = ImageCache(tmp_path, (1, 16, 16))
    store = ResultsStore(tmp_path / "pop")
    outs = execute_population(runs, store, cache, RunOptions(population="3"))
    assert_same(store, outs, *alone(tmp_path, runs, cache))


@pytest.mark.gpu
def test_a_device_shuffled_population_on_cuda_equals_each_run_alone():
    """On CUDA, in float32 with TF32 as runs use it, within the population's CUDA tolerance (test_population.py)."""
    import tempfile
    from pathlib import Path

    runs = mixed_runs("scaffold", local={**LOCAL, "precision": "fp32", "shuffle": "device"})
    with tempfile.TemporaryDirectory() as tmp:
        cache = DataCache(Path(tmp), False, torch.device("cuda"))
        store, alone_store = ResultsStore(Path(tmp) / "pop"), ResultsStore(Path(tmp) / "alone")
        outs = execute_population(runs, store, cache, RunOptions(device="cuda", population="3"))
        assert [o.status for o in outs] == ["finished"] * 3
        options = RunOptions(device="cuda", executor="batched")
        alone_outs = [execute_run(r.spec, r.seed, alone_store, cache, "h", options=options) for r in runs]
        for p, a in zip(outs, alone_outs):
            got, want = store.metrics([p.run_id]), alone_store.metrics([a.run_id])
            cols = ["test_acc", "test_loss", "train_loss"]
            pd.testing.assert_frame_equal(got[cols], want[cols], rtol=1e-3, atol=1e-5)


def test_a_populations_note_says_where_its_plans_are_drawn():
    from fedbench.engine.population import plans_note

    host, on_device = tiny_spec(), spec_of(device(tiny_scenario()))
    assert plans_note(host, torch.device("cpu")) == ""
    assert plans_note(host, torch.device("cuda")) == (
        "; round plans drawn on the host (local.shuffle: device draws them on the GPU)"
    )
    assert plans_note(on_device, torch.device("cpu")) == "; round plans drawn on the device"
