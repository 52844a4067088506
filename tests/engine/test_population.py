"""A population of runs (fedbench/engine/population.py) gives each run the numbers it has alone on the batched
executor: every batchable algorithm, mixed seeds, partitions, S, round counts and server settings in one
population, in float64 to 1e-10; BatchNorm and dropout models; a diverging member; a population killed
mid-run and resumed; a failing population; the grouping and the option."""

import gc
import json

import pandas as pd
import pytest
import torch

import fedbench.engine.inputs as inputs
import fedbench.engine.population as population
import fedbench.engine.population_rows as population_rows
import fedbench.engine.population_server as population_server
from fedbench.algorithms import ALGORITHMS
from fedbench.engine.population import PopulationRun, execute_population, group_runs, population_key, population_size
from fedbench.engine.runner import RoundLoop, execute_run
from fedbench.engine.setup import DataCache
from fedbench.options import RunOptions
from fedbench.scenario import parse_scenario, resolve_runs, run_id_of
from fedbench.store import ResultsStore
from tests.continual.common import RAW as continual_raw
from tests.engine.test_batched import BATCHABLE, COLS, ImageCache, with_algorithm
from tests.factories import tiny_scenario, tiny_spec, with_changes

RTOL, ATOL = 1e-10, 1e-12
JOINING = [n for n in BATCHABLE if ALGORITHMS.capabilities(n).population]  # those that may share a population
LOCAL = {"epochs": 0.5, "batch_size": 16, "lr": 0.05, "weight_decay": 1e-3, "clip_grad_norm": 2.0, "precision": "fp64"}
PLAIN_SERVER = {"fedqvr", "fedqvr_e"}  # their server has no optimizer of its own (server.lr must be 1)


def spec_of(raw):
    return resolve_runs(parse_scenario(raw))[0]


def mixed_runs(name, model=None, local=LOCAL):
    """Three runs of one population: seeds 0 and 1 of one scenario, and seed 2 of another with other clients
    (N = 10, S = 4), partition, round count, (where the algorithm has one) server learning rate and (where its
    capabilities allow: ``row_lr``, ``row_params``) local learning rate and decay and the algorithm's parameters
    (half their defaults)."""
    extra = {"model": model} if model else {}
    a = spec_of(with_algorithm(tiny_scenario({"clients.num": 8, "clients.per_round": 3}, local=local, **extra), name))
    changes = {"clients.num": 10, "clients.per_round": 4, "partition.omega": 0.2}
    if name not in PLAIN_SERVER:
        changes["server.lr"] = 0.7
    caps = ALGORITHMS.capabilities(name)
    if caps.row_lr:
        local = {**local, "lr": 0.03, "lr_decay": 0.9}
    raw_b = with_algorithm(tiny_scenario(changes, local=local, rounds=4, **extra), name)
    fields = ALGORITHMS.get(name).params.model_fields
    raw_b["algorithms"][0].update({p: 0.5 * (fields[p].default or 0.2) for p in caps.row_params})
    b = spec_of(raw_b)
    assert population_key(a) == population_key(b) is not None
    return [PopulationRun(a, 0, "h"), PopulationRun(a, 1, "h"), PopulationRun(b, 2, "h")]


def alone(tmp_path, runs, cache):
    """Each run by itself on the batched executor."""
    store = ResultsStore(tmp_path / "alone")
    outs = [execute_run(r.spec, r.seed, store, cache, "h", options=RunOptions(executor="batched")) for r in runs]
    assert all(o.status == "finished" for o in outs), outs
    return store, outs


def assert_same(pop_store, pop_outs, alone_store, alone_outs):
    for p, a in zip(pop_outs, alone_outs):
        assert p.run_id == a.run_id
        cols = [*COLS, "client_acc_std"]  # the spread computed with the population's
        got, want = pop_store.metrics([p.run_id])[cols], alone_store.metrics([a.run_id])[cols]
        pd.testing.assert_frame_equal(got, want, rtol=RTOL, atol=ATOL)


def test_a_population_round_that_draws_from_the_global_generators_trains_its_runs_alone(tmp_path, monkeypatch):
    """A hook that draws from torch's global generators (here every upload) would make a population's runs differ
    from themselves alone, so the population's round refuses it: its runs train again one by one (a warning says
    why), each the run it is alone, and the generators are as they were."""
    from fedbench.algorithms.base import Algorithm

    upload = Algorithm.upload
    monkeypatch.setattr(Algorithm, "upload", lambda self, *a: torch.rand(1) is None or upload(self, *a))
    runs = mixed_runs("fedavg")
    cache = DataCache(tmp_path, False, torch.device("cpu"))
    store = ResultsStore(tmp_path / "pop")
    torch.manual_seed(5)
    before = torch.get_rng_state()
    with pytest.warns(RuntimeWarning, match="global random generators"):
        outs = execute_population(runs, store, cache, RunOptions(population="3"))
    assert torch.equal(torch.get_rng_state(), before)
    assert [o.status for o in outs] == ["finished"] * 3
    assert_same(store, outs, *alone(tmp_path, runs, cache))


@pytest.mark.filterwarnings("error::RuntimeWarning")  # a population that falls back to one-by-one fails the test
@pytest.mark.parametrize("name", JOINING)
def test_population_equals_each_run_alone(tmp_path, name):
    runs = mixed_runs(name)
    cache = DataCache(tmp_path, False, torch.device("cpu"))
    store = ResultsStore(tmp_path / "pop")
    outs = execute_population(runs, store, cache, RunOptions(population="3"))
    assert [o.status for o in outs] == ["finished"] * 3
    assert_same(store, outs, *alone(tmp_path, runs, cache))


@pytest.mark.filterwarnings("error::RuntimeWarning")
@pytest.mark.parametrize("name", ["fedavg", "fedsam", "scaffold"])
def test_population_with_batchnorm_and_dropout(tmp_path, name):
    """LeNet-5 with BatchNorm and dropout: per-run BatchNorm buffers and per-client dropout keys."""
    local = {**LOCAL, "batch_size": 8, "drop_singleton_batch": True}
    runs = mixed_runs(name, {"name": "lenet5_bn", "dropout": 0.3}, local)
    cache = ImageCache(tmp_path, (1, 16, 16))
    store = ResultsStore(tmp_path / "pop")
    outs = execute_population(runs, store, cache, RunOptions(population="3"))
    assert_same(store, outs, *alone(tmp_path, runs, cache))


@pytest.mark.filterwarnings("error::RuntimeWarning")
@pytest.mark.parametrize("name", ["scaffold", "fedprox", "fedqvr"])  # per-row η_l, and per-row μ; γ and a
def test_population_in_chunks_equals_one_chunk(tmp_path, name):
    runs = mixed_runs(name)
    cache = DataCache(tmp_path, False, torch.device("cpu"))
    whole, chunked = ResultsStore(tmp_path / "whole"), ResultsStore(tmp_path / "chunked")
    a = execute_population(runs, whole, cache, RunOptions(population="3"))
    b = execute_population(runs, chunked, cache, RunOptions(population="3", chunk=2))
    assert_same(chunked, b, whole, a)


@pytest.mark.filterwarnings("error::RuntimeWarning")
@pytest.mark.parametrize("name", ["fedavg", "scaffold", "gradma"])
def test_trials_of_one_seed_draw_their_batches_once(tmp_path, monkeypatch, name):
    """A tuning population: two runs of one seed and partition that differ in η_g (and η_l where rows may)
    draw their round's batches once, and each is the run it is alone; a run of the same seed on another
    partition, and one of another seed, draw their own."""
    clients = {"clients.num": 8, "clients.per_round": 3}
    local = {**LOCAL, "lr": 0.03} if ALGORITHMS.capabilities(name).row_lr else LOCAL
    a = spec_of(with_algorithm(tiny_scenario(clients, local=LOCAL), name))
    b = spec_of(with_algorithm(tiny_scenario({**clients, "server.lr": 0.7}, local=local), name))
    c = spec_of(with_algorithm(tiny_scenario({**clients, "partition.omega": 0.2}, local=LOCAL), name))
    runs = [PopulationRun(a, 0, "h"), PopulationRun(b, 0, "h"), PopulationRun(c, 0, "h"), PopulationRun(a, 1, "h")]
    drawn = []
    real = population_rows.row_draws

    def counted(batcher, *args):
        drawn.append(batcher.seed)
        return real(batcher, *args)

    monkeypatch.setattr(population_rows, "row_draws", counted)
    cache = DataCache(tmp_path, False, torch.device("cpu"))
    store = ResultsStore(tmp_path / "pop")
    outs = execute_population(runs, store, cache, RunOptions(population="4"))
    assert [o.status for o in outs] == ["finished"] * 4
    assert drawn == [0, 0, 1] * a.rounds  # a and b once, c, then seed 1
    monkeypatch.setattr(population_rows, "row_draws", real)
    assert_same(store, outs, *alone(tmp_path, runs, cache))


def test_a_diverging_member_leaves_its_neighbours_alone(tmp_path):
    """Run 1's server steps 1e6 times too far: it diverges and is recorded so; runs 0 and 2 are as alone."""
    runs = mixed_runs("fedavg")
    wild = spec_of(with_algorithm(tiny_scenario({"server.lr": 1e6}, local=LOCAL, rounds=6), "fedavg"))
    runs[1] = PopulationRun(wild, 1, "h")
    cache = DataCache(tmp_path, False, torch.device("cpu"))
    store = ResultsStore(tmp_path / "pop")
    outs = execute_population(runs, store, cache, RunOptions(population="3"))
    assert [o.status for o in outs] == ["finished", "diverged", "finished"]
    assert store.status(outs[1].run_id) == "diverged"
    keep = [runs[0], runs[2]]
    assert_same(store, [outs[0], outs[2]], *alone(tmp_path, keep, cache))


def test_a_population_killed_mid_run_resumes_exactly(tmp_path):
    runs = [
        PopulationRun(
            spec_of(with_algorithm(tiny_scenario(local=LOCAL, rounds=5, checkpoint_every=2), "scaffold")), s, "h"
        )
        for s in range(3)
    ]
    cache = DataCache(tmp_path, False, torch.device("cpu"))
    store = ResultsStore(tmp_path / "pop")

    def stop(i, t, metrics):
        if (i, t) == (1, 3):  # run 1 has recorded round 3, runs 0 and 2 too or not yet: a mid-round kill
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        execute_population(runs, store, cache, RunOptions(population="3"), stop)
    assert all(store.status(r) == "running" for r in [o.run_id for o in alone(tmp_path / "x", runs, cache)[1]])
    outs = execute_population(runs, store, cache, RunOptions(population="3"))
    assert [o.status for o in outs] == ["finished"] * 3
    assert_same(store, outs, *alone(tmp_path, runs, cache))


def test_a_failing_population_trains_its_runs_one_by_one(tmp_path, monkeypatch):
    runs = mixed_runs("fedavg")
    cache = DataCache(tmp_path, False, torch.device("cpu"))

    def broken(*args, **kwargs):
        raise RuntimeError("out of memory")

    monkeypatch.setattr(population, "run_population_clients", broken)
    store = ResultsStore(tmp_path / "pop")
    with pytest.warns(RuntimeWarning, match="population of 3 runs failed .*out of memory"):
        outs = execute_population(runs, store, cache, RunOptions(population="3"))
    assert [o.status for o in outs] == ["finished"] * 3


def test_done_runs_are_skipped(tmp_path):
    runs = mixed_runs("fedavg")
    cache = DataCache(tmp_path, False, torch.device("cpu"))
    store = ResultsStore(tmp_path / "pop")
    execute_population(runs, store, cache, RunOptions(population="3"))
    assert [o.status for o in execute_population(runs, store, cache)] == ["skipped"] * 3


def test_grouping():
    a = tiny_spec(algorithm="fedavg")
    seeds_and_servers = [a, tiny_spec({"server.lr": 0.5}, algorithm="fedavg"), tiny_spec({"clients.per_round": 5})]
    other_lr = tiny_spec({"local.lr": 0.01, "local.lr_decay": 0.9}, algorithm="fedavg")  # η_l rides on the rows
    other_algo = tiny_spec(algorithm={"name": "fedprox", "mu": 0.1})
    other_mu = tiny_spec(algorithm={"name": "fedprox", "mu": 0.01})
    moon = tiny_spec(algorithm="moon")  # its own local loss, on the rows: a population of its own runs
    specs = [*seeds_and_servers, other_lr, other_algo, moon, other_mu, a]
    assert population_key(moon) is not None
    assert group_runs(specs, 8) == [[0, 1, 2, 3, 7], [4, 6], [5]]  # FedProx's μ rides on the rows (row_params)
    assert group_runs(specs, 2) == [[0, 1], [2, 3], [4, 6], [5], [7]]
    fedmim = [tiny_spec(algorithm="fedmim"), tiny_spec(algorithm={"name": "fedmim", "alpha": [0.1]})]
    assert group_runs(fedmim, 8) == [[0], [1]]  # a parameter not declared per row keeps runs apart
    nccl = [tiny_spec(algorithm="nccl_fl"), tiny_spec({"local.lr": 0.01}, algorithm="nccl_fl")]  # row_lr = False
    assert group_runs(nccl, 8) == [[0], [1]]
    assert group_runs(specs, 1) == [[i] for i in range(8)]
    natural = spec_of(continual_raw)
    seeded = spec_of(with_changes(continual_raw, {"continual.class_order": "seeded"}))
    seeded_lr = spec_of(with_changes(continual_raw, {"continual.class_order": "seeded", "local.lr": 0.01}))
    assert group_runs([natural, natural], 8, [0, 1]) == [[0, 1]]  # one task schedule and heads
    assert group_runs([seeded, seeded, seeded_lr], 8, [0, 1, 0]) == [[0, 2], [1]]  # a seed's own classes per task
    other_tasks = spec_of(with_changes(continual_raw, {"continual.rounds_per_task": 1}, rounds=3))
    assert population_key(other_tasks) != population_key(natural) is not None


def test_runs_of_other_population_keys_are_refused_as_one_population(tmp_path):
    """The seeds of a seeded class order (each its own classes per task), or an algorithm that trains alone, never
    share a population, whoever calls: a wrong group fails before training instead of mixing the runs' heads."""
    seeded = spec_of(with_changes(continual_raw, {"continual.class_order": "seeded"}))
    cache = DataCache(tmp_path, False, torch.device("cpu"))
    store = ResultsStore(tmp_path / "pop")
    for runs in (
        [PopulationRun(seeded, 0, "h"), PopulationRun(seeded, 1, "h")],
        [PopulationRun(tiny_spec(algorithm="target_fl"), s, "h") for s in (0, 1)],
    ):
        with pytest.raises(ValueError, match="cannot train as one population"):
            execute_population(runs, store, cache)
        assert all(store.status(run_id_of(r.spec, r.seed)) is None for r in runs)  # nothing recorded


def test_every_batchable_algorithm_can_join_a_population_but_one_drawing_from_its_runs_streams():
    for name in JOINING:
        assert population_key(tiny_spec(algorithm=name)) is not None, name
    assert set(ALGORITHMS.names()) - set(JOINING) == {"target_fl"}  # its synthetic draws are keyed by the run's seed
    assert population_key(tiny_spec(algorithm="target_fl")) is None


@pytest.mark.parametrize(
    "option, device, size",
    [("auto", "cpu", 1), ("auto", "cuda", population.GPU_POPULATION), ("off", "cuda", 1), ("5", "cpu", 5)],
)
def test_population_size(option, device, size):
    got, why = population_size(RunOptions(population=option), torch.device(device))
    assert got == size and why


def test_sequential_executor_turns_populations_off():
    assert population_size(RunOptions(population="4", executor="sequential"), torch.device("cpu"))[0] == 1


@pytest.mark.parametrize("bad", ["0", "-2", "many", "2.5"])
def test_population_option_refuses_bad_values(bad):
    with pytest.raises(ValueError, match="--population"):
        RunOptions(population=bad)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["fedavg", "scaffold", "gradma", "gradma_w", "fedcams", "fedmim", "moon", "fedmlb"])
def test_population_equals_each_run_alone_on_cuda(tmp_path, name):
    """On CUDA, in float32 with TF32 as runs use it: within the batched-vs-sequential tolerance of test_gpu.py."""
    runs = mixed_runs(name, local={**LOCAL, "precision": "fp32"})
    cache = DataCache(tmp_path, False, torch.device("cuda"))
    store = ResultsStore(tmp_path / "pop")
    outs = execute_population(runs, store, cache, RunOptions(device="cuda", population="3"))
    assert [o.status for o in outs] == ["finished"] * 3
    alone_store = ResultsStore(tmp_path / "alone")
    alone_outs = [
        execute_run(r.spec, r.seed, alone_store, cache, "h", options=RunOptions(device="cuda", executor="batched"))
        for r in runs
    ]
    for p, a in zip(outs, alone_outs):
        got, want = store.metrics([p.run_id])[COLS], alone_store.metrics([a.run_id])[COLS]
        pd.testing.assert_frame_equal(got, want, rtol=1e-3, atol=1e-5)


def test_run_groups_a_scenarios_seeds_and_entries(tmp_path):
    """fedbench.api.run (as fedbench run) with --population 4: the 3 seeds of FedAvg and of FedAvg with server
    momentum (same local work, another server) form one population of 4 and one of 2; FedAvgM (another algorithm)
    one of 3; MOON (its own local loss on the rows) another of 3; every run is recorded."""
    import sqlite3

    from fedbench import api

    raw = tiny_scenario(
        seeds=[0, 1, 2],
        algorithms=[
            {"name": "fedavg"},
            {"name": "fedavg", "label": "FedAvg+m", "server": {"momentum": 0.5}},
            {"name": "fedavgm"},
            {"name": "moon"},
        ],
    )
    api.run(parse_scenario(raw), tmp_path / "out", population=4)
    with sqlite3.connect(tmp_path / "out" / "fedbench.sqlite") as db:
        notes = db.execute(
            "select json_extract(extra, '$.executor'), count(*) from metrics where round = 1 group by 1 order by 1"
        ).fetchall()
        statuses = db.execute("select status, count(*) from runs group by 1").fetchall()
    assert statuses == [("finished", 12)]
    assert [(note.split(",")[0], n) for note, n in notes] == [
        ("population of 2 runs", 2),
        ("population of 3 runs", 6),
        ("population of 4 runs", 4),
    ]


@pytest.mark.parametrize(
    "model, shape", [({"name": "mlp", "hidden": [16]}, None), ({"name": "lenet5_bn"}, (1, 16, 16))]
)
def test_runs_are_evaluated_together_as_each_alone(tmp_path, model, shape):
    """evaluate_runs' vmapped path (no fallback) gives each model's FlatModel.evaluate, in float64; with
    BatchNorm each run's own running statistics."""
    from fedbench.engine.population_rows import _group_per_sample, client_spreads
    from fedbench.engine.setup import build_run

    spec = spec_of(tiny_scenario(model=model, local={**LOCAL, "batch_size": 8}))
    cache = DataCache(tmp_path, False, torch.device("cpu")) if shape is None else ImageCache(tmp_path, shape)
    setups = [build_run(spec, seed, cache) for seed in range(3)]
    points = [s.x0 for s in setups]
    buffers = [
        {n: v + 0.1 * seed if v.is_floating_point() else v for n, v in s.buffers0.items()}
        for seed, s in enumerate(setups)
    ]
    model_ = setups[0].model
    test = setups[0].data.test
    stacked = {n: torch.stack([b[n] for b in buffers]) for n in buffers[0]}
    hits, losses = _group_per_sample(model_, torch.stack(points), stacked, test, 7)
    together = [(float(h.float().mean()), float(v.mean())) for h, v in zip(hits, losses)]
    alone = [model_.evaluate(p, b, test, 7) for p, b in zip(points, buffers)]
    assert [v for pair in together for v in pair] == pytest.approx([v for pair in alone for v in pair], rel=1e-12)
    assert len({a for a, _ in alone}) > 1 or len({loss for _, loss in alone}) > 1  # the runs differ
    # the clients' accuracy spread on the training set: each run's partition, its clients' means in one index_add
    loops = [RoundLoop(spec, seed, s, "batched", None, "off") for seed, s in enumerate(setups)]
    for loop, b in zip(loops, buffers):
        loop.buffers = b
    want = [float(loop.client_accuracy_spread()) for loop in loops]
    got = client_spreads(model_, points, buffers, setups[0].data.train, 7, [loop.fed for loop in loops])
    assert [float(v) for v in got] == pytest.approx(want, rel=1e-12, abs=1e-15)
    assert len(set(want)) > 1


def test_a_population_too_big_for_the_device_trains_in_parts(tmp_path, monkeypatch):
    """fitting_runs sizes the parts from the free CUDA memory; a population of 3 split into parts of 2 and 1
    gives each run its numbers alone, and each run's log names its part."""
    from types import SimpleNamespace as NS

    def member(per_round):
        x0 = NS(device=NS(type="cuda"), numel=lambda: 1000, element_size=lambda: 4)
        return NS(loop=NS(s=NS(x0=x0)), run=NS(spec=NS(clients=NS(per_round=per_round))))

    per_run = 1000 * 4 * 16 * 10  # P floats × STATE_ROWS × the largest S
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (int(2.5 * per_run / 0.7), 0))
    assert population.fitting_runs([member(10), member(5), member(10)]) == 2

    monkeypatch.setattr(population, "fitting_runs", lambda members: 2)
    runs = mixed_runs("scaffold")
    cache = DataCache(tmp_path, False, torch.device("cpu"))
    store = ResultsStore(tmp_path / "pop")
    outs = execute_population(runs, store, cache, RunOptions(population="3"))
    assert_same(store, outs, *alone(tmp_path, runs, cache))
    notes = store.metrics([o.run_id for o in outs])
    first = notes[notes["round"] == 1]["extra"].map(lambda e: json.loads(e)["executor"].split(",")[0])
    assert sorted(first) == ["population of 1 runs", "population of 2 runs", "population of 2 runs"]


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_runs_with_client_availability_and_stragglers_train_in_a_population(tmp_path):
    """Each run samples among its own available clients and shortens its own stragglers' steps in the joint rows."""
    changes = {
        "clients.num": 12,
        "clients.per_round": 4,
        "clients.availability": {"kind": "markov", "stay_on": 0.8, "stay_off": 0.5},
        "clients.stragglers": {"fraction": 0.5},
    }
    local = {**LOCAL, "epochs": None, "iterations": 4}
    spec = spec_of(tiny_scenario(changes, local={k: v for k, v in local.items() if v is not None}, rounds=4))
    runs = [PopulationRun(spec, seed, "h") for seed in range(3)]
    cache = DataCache(tmp_path, False, torch.device("cpu"))
    store = ResultsStore(tmp_path / "pop")
    outs = execute_population(runs, store, cache, RunOptions(population="3"))
    assert_same(store, outs, *alone(tmp_path, runs, cache))


@pytest.mark.parametrize("name", ["fedavg", "fedqvr", "fedqvr_e"])
def test_runs_with_a_wireless_uplink_train_in_a_population(tmp_path, name):
    """Each run draws its own channel: its outages (uploads past the deadline τ left out of its server update) and,
    for FedQVR-E, its bit allocation and the devices it removes before training; one run with a looser τ."""

    def spec_with(tau):
        raw = tiny_scenario({"clients.num": 8, "clients.per_round": 4}, local=LOCAL, rounds=4, wireless={"tau_s": tau})
        return spec_of(with_algorithm(raw, name))

    tight = spec_with(0.002)
    runs = [PopulationRun(tight, 0, "h"), PopulationRun(tight, 1, "h"), PopulationRun(spec_with(0.005), 2, "h")]
    assert population_key(runs[0].spec) == population_key(runs[2].spec) is not None
    cache = DataCache(tmp_path, False, torch.device("cpu"))
    store = ResultsStore(tmp_path / "pop")
    outs = execute_population(runs, store, cache, RunOptions(population="3"))
    assert_same(store, outs, *alone(tmp_path, runs, cache))
    channel = [json.loads(e)["wireless"] for e in store.metrics([outs[0].run_id])["extra"]]
    assert any(len(c["received"]) < 4 for c in channel)  # some uploads lost (or devices removed)


@pytest.mark.parametrize("name", ["fine_fl", "er_fl", "ewc_fl", "cflag", "cflag_gd", "nccl_fl", "lwf_fl", "icarl_fl"])
@pytest.mark.parametrize(
    ("changes", "runs"),
    [
        ({}, [(0, 0.1), (1, 0.1), (2, 0.05)]),  # seeds of the natural class order, one with another η_l
        ({"continual.mode": "class", "continual.class_order": "seeded"}, [(3, 0.1), (3, 0.05), (3, 0.02)]),
        ({"local.shuffle": "device"}, [(0, 0.1), (1, 0.1), (2, 0.05)]),  # plans and replay draws on the device
    ],
)
def test_continual_runs_train_in_a_population(tmp_path, monkeypatch, name, changes, runs):
    """Each run switches tasks with its own partition, batches, replay memory and task-end hooks: the rounds and
    the accuracy matrix of each are those it has alone (seeded class order: a seed's trials together); with
    ``vmap_server``, every round's server updates, across task ends, are one vmapped call of all three runs."""
    calls: list[int] = []
    joint = population_server.joint_update
    monkeypatch.setattr(
        population_server, "joint_update", lambda loops, *a: calls.append(len(loops)) or joint(loops, *a)
    )
    raw = with_changes(continual_raw, changes)
    members = []
    for i, (seed, lr) in enumerate(runs):
        server = {**raw.get("server", {})}
        if not ALGORITHMS.capabilities(name).row_lr:  # NCCL-FL: one η_l a population, so the runs' η_g differ
            lr, server["lr"] = runs[0][1], 1.0 - 0.2 * i
        local = {**raw["local"], "precision": "fp64", "lr": lr}
        spec = spec_of({**raw, "algorithms": [{"name": name}], "local": local, "server": server})
        members.append(PopulationRun(spec, seed, "h"))
    assert len({population_key(r.spec, r.seed) for r in members}) == 1
    cache = DataCache(tmp_path, False, torch.device("cpu"))
    store = ResultsStore(tmp_path / "pop")
    resolved, runs_resolve = [], inputs.runs_resolve
    with monkeypatch.context() as patch:
        patch.setattr(
            inputs, "runs_resolve", lambda items, rows: resolved.append(len(items)) or runs_resolve(items, rows)
        )
        outs = execute_population(members, store, cache, RunOptions(population="3"))
    # C-FLAG's full and memory gradients: each one computation for the three runs a round
    assert resolved == [3] * len(ALGORITHMS.capabilities(name).inputs) * continual_raw["rounds"]
    alone_store, alone_outs = alone(tmp_path, members, cache)
    assert_same(store, outs, alone_store, alone_outs)
    for p, a in zip(outs, alone_outs):
        got = [json.loads(e) for e in store.metrics([p.run_id])["extra"]]
        want = [json.loads(e) for e in alone_store.metrics([a.run_id])["extra"]]
        assert sum("task_acc" in row for row in want) == 3
        assert [numbers(g) for g in got] == [pytest.approx(numbers(w), rel=1e-10, abs=1e-12) for w in want]
    assert calls == ([3] * continual_raw["rounds"] if ALGORITHMS.capabilities(name).vmap_server else [])


def numbers(logs, path=""):
    """A round's extra logs as {dotted path: number} (the accuracy-matrix row, C-FLAG's and NCCL-FL's rates, …;
    the run's descriptions, such as its executor's, left out)."""
    if isinstance(logs, dict | list):
        items = logs.items() if isinstance(logs, dict) else enumerate(logs)
        return {p: v for k, sub in items for p, v in numbers(sub, f"{path}.{k}").items()}
    return {path: logs} if isinstance(logs, int | float) else {}


def test_run_summaries_and_finiteness_computed_together_are_each_runs_own():
    """The members' mean loss and consistency from the joint rows equal each run's own (float64, 1e-14); with
    unequal S each run computes its own. Finiteness of the runs of one shape is checked together: a run with
    a NaN and one with an inf are not finite, the others are, and a run of another shape is checked alone."""
    from types import SimpleNamespace

    from fedbench.engine.population import finite_runs
    from fedbench.engine.population_rows import run_summaries
    from fedbench.engine.runner import consistency_of

    g = torch.Generator().manual_seed(0)
    x, loss = torch.randn(12, 7, generator=g, dtype=torch.float64), torch.rand(12, generator=g, dtype=torch.float64)
    members = [SimpleNamespace(ctx=SimpleNamespace(clients=torch.arange(3))) for _ in range(4)]
    for r, (mean_loss, consistency) in enumerate(run_summaries(members, x, loss)):
        rows = slice(3 * r, 3 * r + 3)
        torch.testing.assert_close(mean_loss, loss[rows].mean(), rtol=1e-14, atol=0)
        torch.testing.assert_close(consistency, consistency_of(x[rows].clone()), rtol=1e-14, atol=0)
    unequal = [SimpleNamespace(ctx=SimpleNamespace(clients=torch.arange(k))) for k in (3, 9)]
    assert run_summaries(unequal, x, loss) == [(None, None)] * 2

    points = [
        torch.zeros(5),
        torch.tensor([0.0, float("nan"), 0, 0, 0]),
        torch.full((5,), float("-inf")),
        torch.ones(2),
    ]
    loops = [SimpleNamespace(state=SimpleNamespace(x=p), finite=lambda p=p: torch.isfinite(p).all()) for p in points]
    assert [bool(f) for f in finite_runs(loops)] == [True, False, False, True]


@pytest.mark.filterwarnings("error::RuntimeWarning")
@pytest.mark.parametrize("name", ["mimelite", "fedtrack"])
def test_a_populations_full_gradients_are_one_computation(tmp_path, monkeypatch, name):
    """The engine input full_grad of the runs of a population comes from one joint computation a round (a run
    left alone computes its own), and each run is the run it is alone."""
    import fedbench.engine.runner as runner

    calls, alone_calls = [], []
    joint, single = inputs.runs_resolve, inputs.resolve
    monkeypatch.setattr(inputs, "runs_resolve", lambda items, rows: calls.append(len(items)) or joint(items, rows))
    for module in (runner, inputs):  # a run alone, or left alone in its population
        monkeypatch.setattr(module, "resolve", lambda req, value: alone_calls.append(1) or single(req, value))
    runs = mixed_runs(name)
    cache = DataCache(tmp_path, False, torch.device("cpu"))
    store = ResultsStore(tmp_path / "pop")
    outs = execute_population(runs, store, cache, RunOptions(population="3"))
    assert [o.status for o in outs] == ["finished"] * 3
    rounds = [r.spec.rounds for r in runs]
    # rounds 1-3 of the three runs: one joint call each; round 4 of the one run left: its own provider
    assert calls == [3] * min(rounds) and len(alone_calls) == max(rounds) - min(rounds), (calls, alone_calls, rounds)
    assert_same(store, outs, *alone(tmp_path, runs, cache))


@pytest.mark.parametrize(("caller_froze", "freeze_from"), [(False, 3), (True, 3), (False, 4)])
def test_a_population_trains_with_the_long_lived_objects_frozen_and_leaves_the_collector_as_it_was(
    tmp_path, monkeypatch, caller_froze, freeze_from
):
    """From ``FREEZE_FROM`` runs, the runs' objects are out of the cyclic collector's scans while the rounds run
    (gc.freeze), and the collector is as it was afterwards: unfrozen, or, when the caller had frozen objects itself,
    with its freeze kept; a smaller population leaves the collector alone."""
    monkeypatch.setattr(population, "FREEZE_FROM", freeze_from)
    frozen_during = []
    lockstep = population._lockstep

    def spying(*args, **kwargs):
        frozen_during.append(gc.get_freeze_count())
        return lockstep(*args, **kwargs)

    monkeypatch.setattr(population, "_lockstep", spying)
    if caller_froze:
        gc.freeze()
    try:
        cache = DataCache(tmp_path, False, torch.device("cpu"))
        outs = execute_population(
            mixed_runs("fedavg"), ResultsStore(tmp_path / "pop"), cache, RunOptions(population="3")
        )
        assert [o.status for o in outs] == ["finished"] * 3
        assert len(frozen_during) == 1 and (frozen_during[0] > 0) == (caller_froze or freeze_from <= 3)
        assert (gc.get_freeze_count() > 0) == caller_froze  # a caller's freeze kept (its objects may have gone)
    finally:
        gc.unfreeze()
