"""A run's rounds stay on the device between reads (fedbench/engine/pending.py, issue 26 item 3): a round that
does not evaluate, checkpoint or end reads nothing to the host, for every batchable algorithm but those whose
update reads by design; the rounds are read and recorded together, with the numbers, divergence, crashes,
callbacks and checkpoints of a run read every round; a population reads its members the same way."""

import pandas as pd
import pytest
import torch

import fedbench.engine.runner as runner
import tests.continual.common as continual
from fedbench.algorithms import projection
from fedbench.engine.pending import HostReads, PendingRound, read_rounds, to_device
from fedbench.engine.population import PopulationRun, execute_population, population_round
from fedbench.engine.precision import default_dtype
from fedbench.engine.runner import RoundLoop, execute_run
from fedbench.engine.setup import DataCache, build_run
from fedbench.options import RunOptions
from fedbench.scenario import parse_scenario, resolve_runs
from fedbench.store import ResultsStore
from tests.engine.test_batched import BATCHABLE, with_algorithm
from tests.factories import tiny_scenario

# Algorithms whose round reads device values on the host by design, and why (each is checked to still read).
READS_BY_DESIGN = {
    "gradma": "QP_g reads the memory's live constraints and reduced factors to the host and solves there (mem_red)",
    "gradma_s": "as gradma",
}
COLS = ["round", "test_acc", "test_loss", "train_loss", "bits_up", "bits_down", "consistency"]


def spec_of(name="fedavg", **changes):
    raw = with_algorithm(tiny_scenario({"local.precision": "fp64"}, rounds=12, eval={"every": 5}), name)
    raw.update(changes)
    return resolve_runs(parse_scenario(raw))[0]


def cache(tmp_path):
    return DataCache(tmp_path / "data", False, torch.device("cpu"))


@pytest.mark.parametrize("name", BATCHABLE)
def test_a_round_between_reads_reads_nothing_to_the_host(tmp_path, monkeypatch, name):
    monkeypatch.setattr(projection, "HERE", True)  # GradMA's QP_l as on a GPU: on the device
    spec = spec_of(name)
    with default_dtype(torch.float64):
        loop = RoundLoop(spec, 0, build_run(spec, 0, cache(tmp_path)), "batched", None, "off")
        loop.lazy_round(1)
        assert not loop.reads(2)
        with HostReads() as reads:
            pending = loop.lazy_round(2)
    assert isinstance(pending.finite, torch.Tensor) and isinstance(pending.metrics["train_loss"], torch.Tensor)
    if name in READS_BY_DESIGN:
        assert reads.count > 0, f"{name} no longer reads on the host: drop it from READS_BY_DESIGN"
    else:
        assert reads.count == 0, dict(reads.where)


@pytest.mark.parametrize("population", [False, True])
def test_an_evaluating_round_reads_once(tmp_path, population):
    """A round that evaluates (test scores and the clients' accuracy spread) and its pending rounds are one
    transfer to the host, in a run and in a population of three."""
    spec = spec_of(eval={"every": 5, "client_spread": True})
    with default_dtype(torch.float64):
        loops = [
            RoundLoop(spec, seed, build_run(spec, seed, cache(tmp_path)), "batched", None, "off") for seed in range(3)
        ]

        def train(t):
            return population_round(loops, t) if population else [loops[0].lazy_round(t)]

        for t in range(1, 5):
            train(t)
        with HostReads() as reads:
            pending = train(5)
            read_rounds(pending)
    assert reads.count == 1, dict(reads.where)
    assert all(isinstance(p.metrics["client_acc_std"], float) and 0 <= p.metrics["test_acc"] <= 1 for p in pending)


@pytest.mark.parametrize("name", ["fedtrack", "cflag"])
def test_a_continual_population_reads_its_task_end_once(tmp_path, name):
    """A continual round that ends a task (the seen tasks' scores and the accuracy-matrix row of every run) is one
    transfer to the host for a population of three, its IAG tables shaped from the engine's host sizes; the row is
    read as a list."""
    spec = continual.spec_of(continual.raw_with({"local.precision": "fp64"}), name)
    with default_dtype(torch.float64):
        loops = [
            RoundLoop(spec, seed, build_run(spec, seed, cache(tmp_path)), "batched", None, "off") for seed in range(3)
        ]
        population_round(loops, 1)
        with HostReads() as reads:
            pending = population_round(loops, 2)  # the end of task 0
            read_rounds(pending)
    assert reads.count == 1, dict(reads.where)
    assert all(isinstance(p.metrics["test_acc"], float) for p in pending)
    assert all(isinstance(p.extra["task_acc"], list) and len(p.extra["task_acc"]) == 3 for p in pending)


def test_reads_come_when_a_round_evaluates_checkpoints_or_ends():
    loop = RoundLoop.__new__(RoundLoop)
    loop.spec = spec_of(checkpoint_every=4)
    assert [t for t in range(1, 13) if loop.reads(t)] == [4, 5, 8, 10, 12]


def recorded_every_round(tmp_path, spec):
    """The rounds of ``spec`` seed 0 read one by one (RoundLoop.round), as a run read every round records them."""
    with default_dtype(torch.float64):
        loop = RoundLoop(spec, 0, build_run(spec, 0, cache(tmp_path)), "auto", None, "off")
        rows = [{"round": t, **loop.round(t)[0]} for t in range(1, spec.rounds + 1)]
    return pd.DataFrame(rows)[COLS]


def test_a_run_records_the_numbers_of_a_run_read_every_round_and_calls_back_each_round(tmp_path):
    spec = spec_of("scaffold", checkpoint_every=4)
    store, seen = ResultsStore(tmp_path / "out"), []
    outcome = execute_run(spec, 0, store, cache(tmp_path), "h", lambda t, m: seen.append(t))
    assert outcome.status == "finished" and seen == list(range(1, 13))
    got = store.metrics([outcome.run_id])[COLS].reset_index(drop=True)
    pd.testing.assert_frame_equal(got, recorded_every_round(tmp_path, spec), check_dtype=False)


def huge_loss_from(monkeypatch, first_round, crash_round=None):
    """Round metrics with a train loss above the divergence bound from ``first_round`` on, and a crash in
    ``crash_round``'s metrics."""
    plain = runner.round_metrics

    def metrics(ctx, result, numel):
        if ctx.round == crash_round:
            raise RuntimeError("the solver failed on a non-finite input")
        out = plain(ctx, result, numel)
        return {**out, "train_loss": torch.tensor(1e30)} if ctx.round >= first_round else out

    monkeypatch.setattr(runner, "round_metrics", metrics)


@pytest.mark.parametrize("crash", [None, 4], ids=["trains-on", "then-crashes"])
def test_a_divergence_between_reads_is_recorded_where_it_happened(tmp_path, monkeypatch, crash):
    """Round 3 diverges; the run reads at round 5 (or crashes in round 4 first, as training on a blown-up model
    may): it is recorded as diverged at round 3, with rounds 1–3 and no checkpoint, as if read every round."""
    huge_loss_from(monkeypatch, 3, crash)
    store, seen = ResultsStore(tmp_path / "out"), []
    outcome = execute_run(spec_of(), 0, store, cache(tmp_path), "h", lambda t, m: seen.append(t))
    assert outcome.status == "diverged" and seen == [1, 2, 3]
    runs = store.runs()
    assert runs.loc[0, "error"].startswith("train loss 1e+30 above") and runs.loc[0, "error"].endswith("at round 3")
    assert store.metrics([outcome.run_id])["round"].tolist() == [1, 2, 3]
    assert not store.checkpoint_path(outcome.run_id).exists()


def test_a_crash_without_a_divergence_records_the_rounds_before_it_and_fails(tmp_path, monkeypatch):
    huge_loss_from(monkeypatch, 99, crash_round=4)
    store = ResultsStore(tmp_path / "out")
    outcome = execute_run(spec_of(), 0, store, cache(tmp_path), "h")
    assert outcome.status == "failed" and "the solver failed" in outcome.error
    assert store.metrics([outcome.run_id])["round"].tolist() == [1, 2, 3]


def test_a_run_killed_between_reads_resumes_exactly(tmp_path):
    spec = spec_of(checkpoint_every=4)
    full_store = ResultsStore(tmp_path / "full")
    full = execute_run(spec, 0, full_store, cache(tmp_path), "h")

    def stop_at_7(t, _):
        if t == 7:
            raise KeyboardInterrupt

    cut = ResultsStore(tmp_path / "cut")
    with pytest.raises(KeyboardInterrupt):
        execute_run(spec, 0, cut, cache(tmp_path), "h", stop_at_7)
    assert cut.metrics([full.run_id])["round"].max() == 8  # recorded at round 8's read, stopped in its callbacks
    assert execute_run(spec, 0, cut, cache(tmp_path), "h").status == "finished"  # from round 4's checkpoint
    pd.testing.assert_frame_equal(cut.metrics([full.run_id])[COLS], full_store.metrics([full.run_id])[COLS])


@pytest.mark.filterwarnings("error::RuntimeWarning")  # a population that falls back to one-by-one fails the test
def test_a_population_member_diverging_between_reads_leaves_its_neighbours_as_they_are(tmp_path, monkeypatch):
    spec = spec_of()
    alone = ResultsStore(tmp_path / "alone")
    want = execute_run(spec, 1, alone, cache(tmp_path), "h", options=RunOptions(executor="batched"))
    plain = runner.round_metrics

    def seed_0_blows_up(ctx, result, numel):  # the population's run 0 is the first of its rows
        out = plain(ctx, result, numel)
        return {**out, "train_loss": torch.tensor(1e30)} if ctx.round >= 3 and seed[0] == 0 else out

    seed = [0]
    original = RoundLoop.settle

    def settle(self, *args, **kwargs):
        seed[0] = self.seed
        return original(self, *args, **kwargs)

    monkeypatch.setattr(runner, "round_metrics", seed_0_blows_up)
    monkeypatch.setattr(RoundLoop, "settle", settle)
    store = ResultsStore(tmp_path / "pop")
    runs = [PopulationRun(spec, 0, "h"), PopulationRun(spec, 1, "h")]
    outs = execute_population(runs, store, cache(tmp_path), RunOptions(population="2"))
    assert [o.status for o in outs] == ["diverged", "finished"]
    assert store.metrics([outs[0].run_id])["round"].tolist() == [1, 2, 3]
    got, expected = store.metrics([outs[1].run_id])[COLS], alone.metrics([want.run_id])[COLS]
    pd.testing.assert_frame_equal(got, expected, rtol=1e-10, atol=1e-12)


def test_read_rounds_reads_every_device_value_once():
    rounds = [
        PendingRound(1, {"a": torch.tensor(0.5), "b": 2.0, "c": None}, {"n": torch.tensor(3)}, torch.tensor(True)),
        PendingRound(2, {"a": torch.tensor(float("nan"))}, {"list": [1, 2]}, torch.tensor(False)),
    ]
    with HostReads() as reads:
        read_rounds(rounds)
    assert reads.count == 1  # one transfer
    assert rounds[0].metrics == {"a": 0.5, "b": 2.0, "c": None} and rounds[0].extra == {"n": 3}
    assert type(rounds[0].extra["n"]) is int  # an integer tensor's count, as a count logged on the host
    assert rounds[0].finite is True and rounds[1].finite is False and rounds[1].extra == {"list": [1, 2]}


def test_read_rounds_reads_the_tensors_nested_in_logs_in_the_same_transfer():
    """A log of one value per client (C-FLAG's rates, NCCL-FL's step counts) is a tensor with dimensions in a
    nested dict or list: read as the nested lists ``tolist`` gives, in the round's one transfer."""
    rates = torch.tensor([0.25, -1.5, 3.0], dtype=torch.float32)
    log = {"cflag": {"Lambda": rates, "clients": torch.tensor([4, 0, 2]), "n": torch.tensor(2), "kept": "text"}}
    extra = {**log, "rows": [torch.tensor([[1, 2], [3, 4]]), torch.zeros(2, 0)], "none": torch.ones(0)}
    rounds = [PendingRound(1, {"a": torch.tensor(0.5)}, extra, torch.tensor(True))]
    with HostReads() as reads:
        read_rounds(rounds)
    assert reads.count == 1
    assert rounds[0].extra == {
        "cflag": {"Lambda": rates.tolist(), "clients": [4, 0, 2], "n": 2, "kept": "text"},
        "rows": [[[1, 2], [3, 4]], [[], []]],
        "none": [],
    }
    assert all(type(v) is int for v in rounds[0].extra["cflag"]["clients"])


def test_to_device_keeps_the_values():
    host = torch.arange(5)
    assert to_device(host, torch.device("cpu")) is host


@pytest.mark.gpu
def test_a_round_between_reads_does_not_synchronise_the_gpu(tmp_path):
    """On CUDA, a non-reading round of FedAvg, SCAFFOLD and GradMA-W (its QP_l on the device) queues its work
    without one synchronising call (torch's sync debug mode raises on the first: a read, a copy from pageable
    memory, a nonzero)."""
    for name in ("fedavg", "scaffold", "gradma_w"):
        spec = spec_of(name)
        loop = RoundLoop(spec, 0, build_run(spec, 0, DataCache(tmp_path, False, torch.device("cuda"))), "batched")
        loop.lazy_round(1)
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            pending = loop.lazy_round(2)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        read_rounds([pending])
        assert pending.finite is True
        assert to_device(torch.arange(3), torch.device("cuda")).tolist() == [0, 1, 2]
