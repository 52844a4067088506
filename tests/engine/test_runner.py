"""The shared round loop: determinism, resume, bits, divergence and failure handling."""

import copy

import pandas as pd
import pytest
import torch

from fedbench.engine.runner import execute_run
from fedbench.engine.setup import DataCache
from fedbench.options import RunOptions
from fedbench.runs import run_scenario
from fedbench.scenario import parse_scenario, resolve_runs, run_id_of
from fedbench.store import ResultsStore
from tests.factories import tiny_scenario

RAW = tiny_scenario(
    {"partition.omega": 0.3}, name="engine", rounds=5, eval={"every": 2}, checkpoint_every=2, targets=[0.3]
)


def scenario(**changes):
    raw = copy.deepcopy(RAW)
    raw.update(changes)
    return parse_scenario(raw)


def run(tmp_path, sc, name="out", seed=0, on_round=None):
    store = ResultsStore(tmp_path / name)
    spec = resolve_runs(sc)[0]
    outcome = execute_run(spec, seed, store, DataCache(tmp_path / "data", False, torch.device("cpu")), "h", on_round)
    return store, outcome, store.metrics([outcome.run_id])


COLS = ["round", "test_acc", "test_loss", "train_loss", "bits_up", "bits_down"]


def test_same_seed_gives_identical_numbers_and_other_seed_differs(tmp_path):
    _, o1, m1 = run(tmp_path, scenario(), "a")
    _, o2, m2 = run(tmp_path, scenario(), "b")
    assert o1.status == o2.status == "finished"
    pd.testing.assert_frame_equal(m1[COLS], m2[COLS])
    _, _, m3 = run(tmp_path, scenario(), "c", seed=1)
    assert not m1["train_loss"].equals(m3["train_loss"])
    assert m1["test_acc"].notna().tolist() == [False, True, False, True, True]  # every 2 and the last round


def test_interrupted_run_resumes_with_identical_results(tmp_path):
    _, _, full = run(tmp_path, scenario(), "full")

    def stop_at_4(t, _):
        if t == 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, scenario(), "cut", on_round=stop_at_4)
    store = ResultsStore(tmp_path / "cut")
    rid = run_id_of(resolve_runs(scenario())[0], 0)
    assert store.status(rid) == "running" and store.checkpoint_path(rid).exists()
    _, outcome, resumed = run(tmp_path, scenario(), "cut")
    assert outcome.status == "finished" and not store.checkpoint_path(rid).exists()
    pd.testing.assert_frame_equal(full[COLS], resumed[COLS])


def test_finished_runs_are_skipped(tmp_path):
    sc = scenario()
    run(tmp_path, sc, "s")
    _, outcome, _ = run(tmp_path, sc, "s")
    assert outcome.status == "skipped"


def test_bits_count_what_is_sent(tmp_path):
    P = 64 * 16 + 16 + 16 * 10 + 10
    _, _, avg = run(tmp_path, scenario(), "avg")
    assert (avg["bits_up"] == 3 * P * 32).all() and (avg["bits_down"] == 3 * P * 32).all()
    _, _, sc = run(tmp_path, scenario(algorithms=[{"name": "scaffold"}]), "sc")
    assert (sc["bits_up"] == 2 * 3 * P * 32).all() and (sc["bits_down"] == 2 * 3 * P * 32).all()


def test_equivalences_through_the_engine(tmp_path):
    _, _, avg = run(tmp_path, scenario(), "avg")
    _, _, prox = run(tmp_path, scenario(algorithms=[{"name": "fedprox", "mu": 0.0}]), "prox")
    pd.testing.assert_frame_equal(avg[["test_acc", "train_loss"]], prox[["test_acc", "train_loss"]])
    # SCAFFOLD's first round, with c = c_i = 0, is FedAvg's first round
    _, _, sc1 = run(tmp_path, scenario(algorithms=[{"name": "scaffold"}], rounds=1), "sc1")
    _, _, avg1 = run(tmp_path, scenario(rounds=1), "avg1")
    pd.testing.assert_frame_equal(
        avg1[["test_acc", "test_loss", "train_loss"]], sc1[["test_acc", "test_loss", "train_loss"]]
    )


def test_divergence_is_recorded_and_the_suite_goes_on(tmp_path, monkeypatch):
    from fedbench.algorithms.fedprox import FedProx

    def explode(self, ctx, x, carry, grad):  # a local step whose iterate overflows to inf
        return x - ctx.lr * grad(x) * float("inf"), carry

    monkeypatch.setattr(FedProx, "local_step", explode)
    sc = scenario(algorithms=[{"name": "fedprox"}, {"name": "fedavg"}], rounds=3)
    outcomes = run_scenario(sc, tmp_path / "div", RunOptions(device="cpu", data_dir=tmp_path / "data"))
    assert [o.status for o in outcomes] == ["diverged", "finished"]
    store = ResultsStore(tmp_path / "div")
    runs = store.runs().set_index("algorithm")
    assert runs.loc["FedProx", "status"] == "diverged"
    assert store.metrics([runs.loc["FedProx", "run_id"]])["round"].tolist() == [1]  # stopped at once


@pytest.mark.parametrize("loss, status", [(4.6e29, "diverged"), (2.0e12, "finished")])
def test_an_astronomically_large_finite_train_loss_diverges(tmp_path, monkeypatch, loss, status):
    """Issue 24: a first-round train loss of 4.6e29 is a divergence (above 1e12 · ln 10 ≈ 2.3e12), kept out
    of the table's means like any diverged seed; a large loss below the bound trains on (a blow-up at most)."""
    from fedbench.engine import runner
    from fedbench.report.tables import format_table, summarize

    plain = runner.round_metrics

    def huge_for_seed_1(ctx, result, numel):
        metrics = plain(ctx, result, numel)
        return {**metrics, "train_loss": loss} if seeds[0] == 1 else metrics

    seeds = [0]
    monkeypatch.setattr(runner, "round_metrics", huge_for_seed_1)
    for seed in (0, 1):
        seeds[0] = seed
        _, outcome, _ = run(tmp_path, scenario(), "div", seed=seed)
        assert outcome.status == ("finished" if seed == 0 else status)
    store = ResultsStore(tmp_path / "div")
    runs = store.runs().set_index("seed")
    summary = summarize(store.runs(), store.metrics())
    if status == "diverged":
        assert runs.loc[1, "error"] == "train loss 4.6e+29 above 1e+12 × ln 10 = 2.3e+12 at round 1"
        assert store.metrics([runs.loc[1, "run_id"]])["round"].tolist() == [1]  # stopped at once
        finished = store.metrics([runs.loc[0, "run_id"]])["test_acc"].dropna()
        assert summary.loc[0, "final_acc_mean"] == finished.iloc[-1] and summary.loc[0, "final_acc_std"] == 0.0
        assert "(1 div.)" in format_table(summary, "markdown")
    else:
        assert runs.loc[1, "error"] is None and summary.loc[0, "finished"] == 2


def test_a_crashing_run_is_recorded_failed_and_others_still_run(tmp_path, monkeypatch):
    from fedbench.algorithms.fedprox import FedProx

    def boom(*args, **kwargs):
        raise RuntimeError("injected failure")

    monkeypatch.setattr(FedProx, "local_step", boom)
    sc = scenario(algorithms=[{"name": "fedprox"}, {"name": "fedavg"}], rounds=2)
    outcomes = run_scenario(sc, tmp_path / "f", RunOptions(device="cpu", data_dir=tmp_path / "data"))
    assert [o.status for o in outcomes] == ["failed", "finished"]
    runs = ResultsStore(tmp_path / "f").runs()
    assert "injected failure" in runs.set_index("algorithm").loc["FedProx", "error"]


def test_epochs_mode_uses_each_clients_size(tmp_path):
    sc = scenario(local={"epochs": 1, "batch_size": 16, "lr": 0.1}, rounds=1)
    store, outcome, m = run(tmp_path, sc, "ep")
    assert outcome.status == "finished" and m["train_loss"].notna().all()


def test_fedmim_without_momentum_is_fedavg_bitwise_with_wd_and_clipping(tmp_path):
    local = {
        "iterations": 3,
        "batch_size": 16,
        "lr": 0.1,
        "lr_decay": 0.99,
        "weight_decay": 1e-3,
        "clip_grad_norm": 0.5,
    }
    _, _, avg = run(tmp_path, scenario(local=local), "avg")
    _, _, mim = run(tmp_path, scenario(local=local, algorithms=[{"name": "fedmim", "alpha": [], "beta": []}]), "mim")
    cols = ["test_acc", "test_loss", "train_loss", "consistency", "client_acc_std"]
    pd.testing.assert_frame_equal(avg[cols], mim[cols])


def test_local_consistency_and_client_spread_are_recorded(tmp_path):
    from fedbench.engine.runner import local_consistency

    final = torch.tensor([[0.0, 0.0], [2.0, 0.0], [1.0, 3.0]])  # mean (1, 1): squared distances 2, 2, 4
    assert local_consistency(final) == pytest.approx(8 / 3)
    _, _, m = run(tmp_path, scenario(), "c")
    assert (m["consistency"] > 0).all()
    assert m["client_acc_std"].notna().tolist() == m["test_acc"].notna().tolist()
    assert ((m["client_acc_std"].dropna() >= 0) & (m["client_acc_std"].dropna() <= 0.5)).all()


def test_augmentation_changes_training_deterministically(tmp_path):
    local = {"iterations": 3, "batch_size": 16, "lr": 0.1, "augment": {"flip": True, "crop_padding": 1}}
    _, _, plain = run(tmp_path, scenario(), "plain")
    _, _, aug1 = run(tmp_path, scenario(local=local), "aug1")
    _, _, aug2 = run(tmp_path, scenario(local=local), "aug2")
    assert not plain["train_loss"].equals(aug1["train_loss"])
    pd.testing.assert_frame_equal(aug1[COLS], aug2[COLS])


def test_compressed_uploads_are_charged_their_payload(tmp_path):
    P = 64 * 16 + 16 + 16 * 10 + 10
    algos = [{"name": "fedcams", "label": "sign", "compression": {"kind": "sign"}}]
    _, _, sign = run(tmp_path, scenario(algorithms=algos), "sign")
    assert (sign["bits_up"] == 3 * (P + 32)).all() and (sign["bits_down"] == 3 * 32 * P).all()
    algos = [{"name": "fedavg", "compression": {"kind": "topk", "ratio": 0.01}}]
    _, _, topk = run(tmp_path, scenario(algorithms=algos), "topk")
    assert (topk["bits_up"] == 3 * 64 * int(0.01 * P)).all()


def test_compression_only_where_the_algorithm_supports_it():
    from fedbench.scenario import ScenarioError

    with pytest.raises(
        ScenarioError, match=r"algorithms\[0\].compression.kind: scaffold does not support uplink compression"
    ):
        scenario(algorithms=[{"name": "scaffold", "compression": {"kind": "sign"}}])
    with pytest.raises(ScenarioError, match=r"compression.ratio: Input should be less than or equal to 1"):
        scenario(compression={"kind": "topk", "ratio": 2})


def test_data_fraction_keeps_a_seeded_subset_of_each_client(tmp_path):
    from fedbench.engine.setup import build_run

    sc = scenario(local={"iterations": 1, "batch_size": 16, "lr": 0.1, "data_fraction": 0.8})
    spec = resolve_runs(sc)[0]
    cache = DataCache(tmp_path, False, torch.device("cpu"))
    full = build_run(resolve_runs(scenario())[0], 0, cache).federation.parts
    part = build_run(spec, 0, cache).federation.parts
    for f, p in zip(full, part):
        assert len(p) == -(-len(f) * 8 // 10) and set(p.tolist()) <= set(f.tolist())
    assert all(torch.equal(a, b) for a, b in zip(part, build_run(spec, 0, cache).federation.parts))


def test_only_the_first_gradient_of_a_step_moves_batchnorm_statistics():
    from fedbench.engine.local import GradientOracle, LocalConfig
    from fedbench.models import build_model
    from fedbench.models.flat import FlatModel
    from fedbench.scenario import AugmentSpec

    torch.manual_seed(0)
    model = FlatModel(build_model("tinynn", {}, (1, 8, 8), 10))
    x, y = torch.randn(6, 1, 8, 8), torch.randint(0, 10, (6,))
    flat = model.flatten()
    buffers = model.buffers()
    oracle = GradientOracle(model, buffers, x, y, LocalConfig(0.0, None, AugmentSpec(), 0))
    oracle(flat.unsqueeze(0))
    after_first = {k: v.clone() for k, v in buffers.items()}
    initial = model.buffers()
    assert any(not torch.equal(after_first[k], initial[k]) for k in buffers if k.endswith("running_mean"))
    oracle((flat + 1.0).unsqueeze(0))  # an auxiliary evaluation (e.g. GradMA's anchor) on the same batch
    assert all(torch.equal(after_first[k], buffers[k]) for k in buffers)
    fresh = model.buffers()
    GradientOracle(model, fresh, x, y, LocalConfig(0.0, None, AugmentSpec(), 0))(flat.unsqueeze(0))
    assert all(torch.equal(fresh[k], buffers[k]) for k in buffers)  # one update, same as a plain step


def test_bf16_mixed_precision_trains_close_to_fp32(tmp_path):
    local = {**RAW["local"], "precision": "bf16"}
    _, o32, m32 = run(tmp_path, scenario(), "fp32")
    _, o16, m16 = run(tmp_path, scenario(local=local), "bf16")
    assert o16.status == "finished" and m16["train_loss"].notna().all()
    assert not m16["train_loss"].equals(m32["train_loss"])  # the forward really ran in bfloat16
    assert abs(m16["test_acc"].dropna().iloc[-1] - m32["test_acc"].dropna().iloc[-1]) < 0.1
    assert resolve_runs(scenario())[0].spec_hash() != resolve_runs(scenario(local=local))[0].spec_hash()


def test_bf16_logits_round_through_bfloat16():
    from fedbench.models import build_model
    from fedbench.models.flat import FlatModel

    torch.manual_seed(0)
    model = FlatModel(build_model("mlp", {"hidden": [32]}, (1, 8, 8), 10))
    x = torch.randn(4, 1, 8, 8)
    exact = model.logits(model.flatten(), {}, x)
    model.autocast = torch.bfloat16
    mixed = model.logits(model.flatten(), {}, x)
    assert mixed.dtype == torch.float32 and not torch.equal(mixed, exact)
    assert torch.allclose(mixed, exact, atol=0.05)


def test_round_one_logs_the_executor_and_why(tmp_path):
    import json

    _, _, m = run(tmp_path, scenario(), "seq")
    assert json.loads(m["extra"].iloc[0])["executor"] == "sequential (auto on cpu: the per-client loop measured faster)"
    spec = resolve_runs(scenario(model={"name": "tinynn"}))[0]  # BatchNorm trains batched too
    store = ResultsStore(tmp_path / "bn")
    out = execute_run(
        spec,
        0,
        store,
        DataCache(tmp_path / "data", False, torch.device("cpu")),
        "h",
        options=RunOptions(executor="batched", chunk=2),
    )
    note = json.loads(store.metrics([out.run_id])["extra"].iloc[0])["executor"]
    assert (
        note
        == "batched, chunks of 2 clients (asked for; --chunk); step eager (auto: 15 local steps < 400, too few to measure its price)"
    )
    on = execute_run(
        spec,
        0,
        ResultsStore(tmp_path / "on"),
        DataCache(tmp_path / "data", False, torch.device("cpu")),
        "h",
        options=RunOptions(executor="batched", compile_step="on"),
    )
    note = json.loads(ResultsStore(tmp_path / "on").metrics([on.run_id])["extra"].iloc[0])["executor"]
    assert note == "batched, chunks of 16 clients (asked for; cpu default); step compiled (--compile on)"


@pytest.mark.parametrize(
    "algo",
    [
        {"name": "scaffold"},
        {"name": "feddyn"},
        {"name": "gradma", "memory_size": 4},
        {"name": "mifa"},
        {"name": "moon"},
        {"name": "fedcams", "compression": {"kind": "sign"}},
        {"name": "fedqvr", "compression": {"kind": "stochastic", "bits": 2}},
    ],
)
def test_client_tables_in_host_memory_give_identical_numbers_and_resume(tmp_path, algo):
    sc = scenario(algorithms=[algo])
    spec = resolve_runs(sc)[0]
    cache = DataCache(tmp_path / "data", False, torch.device("cpu"))
    frames = {}
    for mode in ("device", "host"):
        store = ResultsStore(tmp_path / mode)
        outcome = execute_run(spec, 0, store, cache, "h", options=RunOptions(client_state=mode))
        assert outcome.status == "finished", outcome.error
        frames[mode] = store.metrics([outcome.run_id])[COLS]
    pd.testing.assert_frame_equal(frames["device"], frames["host"])

    store = ResultsStore(tmp_path / "resumed")  # interrupted after round 3 (checkpoint at round 2), then resumed

    def stop_at_3(t, _):
        if t == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        execute_run(spec, 0, store, cache, "h", stop_at_3, RunOptions(client_state="host"))
    outcome = execute_run(spec, 0, store, cache, "h", options=RunOptions(client_state="host"))
    pd.testing.assert_frame_equal(store.metrics([outcome.run_id])[COLS], frames["device"])


@pytest.mark.parametrize("kind", ["device", "host"])
def test_client_table_operations_match_a_tensor(kind):
    from fedbench.algorithms.client_table import DeviceTable, HostTable

    like = torch.zeros(3)
    table, ref = (DeviceTable if kind == "device" else HostTable).zeros(4, like), torch.zeros(4, 3)
    rows, idx = torch.arange(6.0).reshape(2, 3), torch.tensor([1, 3])
    table = table.write(idx, rows)
    ref[idx] = rows
    table = table.add(torch.tensor([0, 1]), rows, alpha=-0.5)
    ref.index_add_(0, torch.tensor([0, 1]), rows, alpha=-0.5)
    table = table.plus(torch.ones(4, 3))
    ref += torch.ones(4, 3)
    assert torch.equal(table[torch.arange(4)], ref) and torch.equal(table.clone().data, ref)
    assert table.numel() * table.element_size() == ref.numel() * ref.element_size()
