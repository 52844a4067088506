"""The wireless uplink in the round loop: ideal-channel equality, deadline outages (nothing
received → model unchanged; some received → renormalised or zero-filled weights; lost clients'
state untouched), and the adaptive-bits path (allocation before training, widths in
``ctx.bits``, removed devices not trained)."""

import copy
import json
from typing import ClassVar

import numpy as np
import pandas as pd
import pytest
import torch

from fedbench.algorithms import ALGORITHMS, Algorithm, Upload
from fedbench.algorithms.capabilities import Capabilities
from fedbench.compress import Compressed
from fedbench.engine.runner import RoundLoop, execute_run
from fedbench.engine.setup import DataCache, build_run
from fedbench.options import RunOptions
from fedbench.registry import Entry, NoParams
from fedbench.scenario import parse_scenario, resolve_runs
from fedbench.store import ResultsStore
from tests.factories import P_MLP16, tiny_scenario

RAW = tiny_scenario(name="wireless")
P = P_MLP16
MU = 2 * 32 * 4  # fp32 min and max per parameter tensor (4 tensors)
COLS = ["round", "test_acc", "test_loss", "train_loss", "bits_up", "bits_down", "consistency"]


def spec_of(wireless=None, algorithm="fedavg"):
    raw = copy.deepcopy(RAW)
    raw["algorithms"] = [algorithm if isinstance(algorithm, dict) else {"name": algorithm}]
    if wireless is not None:
        raw["wireless"] = wireless
    return resolve_runs(parse_scenario(raw))[0]


def cache(tmp_path):
    return DataCache(tmp_path / "data", False, torch.device("cpu"))


def run(tmp_path, spec, name, executor="sequential"):
    store = ResultsStore(tmp_path / name)
    outcome = execute_run(spec, 0, store, cache(tmp_path), "h", options=RunOptions(executor=executor))
    assert outcome.status == "finished", outcome
    frame = store.metrics([outcome.run_id])
    return frame, [json.loads(e) for e in frame["extra"]]


def loop_of(tmp_path, spec) -> RoundLoop:
    return RoundLoop(spec, 0, build_run(spec, 0, cache(tmp_path)), "sequential")


def spy(loop):
    """Record what server_update receives: (clients, uploads, weights)."""
    calls, real = [], loop.s.algorithm.server_update

    def wrapped(state, ctx, up, weights):
        calls.append((ctx.clients.tolist(), {k: v.clone() for k, v in up.sent.items()}, weights.clone()))
        return real(state, ctx, up, weights)

    loop.s.algorithm.server_update = wrapped
    return calls


def transfer_times(log, payload_bits):
    """T_i = B̂/(W log₂(1 + a/W)) written out from the logged channel."""
    a, w = np.array(log["snr_bw_hz"]), np.array(log["bandwidth_hz"])
    return payload_bits / (w * np.log2(1 + a / w))


def test_a_loose_deadline_changes_nothing(tmp_path):
    ideal, _ = run(tmp_path, spec_of(), "ideal")
    loose, extras = run(tmp_path, spec_of({"tau_s": 10.0}), "loose")
    pd.testing.assert_frame_equal(ideal[COLS], loose[COLS])
    for e in extras:
        w = e["wireless"]
        assert w["lost"] == [] and len(w["received"]) == 3 and w["server_update"] == "done"
        assert w["payload_bits"] == [32.0 * P] * 3 and sum(w["bandwidth_hz"]) == pytest.approx(1e8)


def test_when_every_upload_misses_the_deadline_the_model_stays(tmp_path):
    spec = spec_of({"tau_s": 1e-9})
    x0 = build_run(spec, 0, cache(tmp_path))
    acc0, loss0 = x0.model.evaluate(x0.x0, x0.buffers0, x0.data.test, spec.eval.batch_size)
    frame, extras = run(tmp_path, spec, "tight")
    assert (frame["test_loss"] == loss0).all() and (frame["test_acc"] == acc0).all()
    assert frame["train_loss"].notna().all()  # the clients did train
    assert (frame["bits_up"] == 3 * 32 * P).all()  # lost uploads still used the channel
    for e in extras:
        assert len(e["wireless"]["lost"]) == 3 and e["wireless"]["received"] == []
        assert e["wireless"]["server_update"] == "skipped: no upload arrived"


def one_lost(tmp_path, payload_bits):
    """τ between the 2nd and 3rd fastest transfer of round 1: exactly one of three uploads is lost."""
    first = loop_of(tmp_path, spec_of({"tau_s": 10.0}))
    _, extra = first.round(1)
    times = transfer_times(extra["wireless"], payload_bits)
    tau = float(np.sort(times)[1:].mean())
    lost = [c for c, t in zip(extra["wireless"]["received"], times) if t > tau]
    assert len(lost) == 1
    return tau, lost


@pytest.fixture
def partial(tmp_path):
    return one_lost(tmp_path, 32.0 * P)


@pytest.mark.parametrize("mode", ["renormalize", "zero_fill"])
def test_a_lost_upload_is_left_out_of_the_aggregate(tmp_path, partial, mode):
    tau, lost = partial
    ideal = loop_of(tmp_path, spec_of())
    x0 = ideal.state.x.clone()
    calls = spy(ideal)
    ideal.round(1)
    clients, uploads, _ = calls[0]
    sizes = ideal.fed.sizes[clients]
    loop = loop_of(tmp_path, spec_of({"tau_s": tau, "outage_aggregation": mode}))
    _, extra = loop.round(1)
    assert extra["wireless"]["lost"] == lost
    keep = torch.tensor([c not in lost for c in clients])
    denominator = sizes[keep].sum() if mode == "renormalize" else sizes.sum()
    expected = x0 + (sizes[keep] / denominator) @ uploads["delta"][keep]
    torch.testing.assert_close(loop.state.x, expected, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("aggregation", ["paper", "renormalized"])
@pytest.mark.parametrize("mode", ["renormalize", "zero_fill"])
def test_fedqvr_eq_12_with_a_lost_upload(tmp_path, partial, mode, aggregation):
    """Unequal n_i (Dirichlet), 3 sampled, 1 lost. paper: θ0 + (N/m)Σ_{received} p_i Δ_i with m = 3
    (zero_fill: the lost Δ_i adds zero) or m = 2 (renormalize); renormalized: n_i/Σ_{received} n_j,
    × 2/3 under zero_fill. The lost client keeps c_i = 0 and c = Σ p_i c_i holds."""
    tau, lost = partial  # FedQVR's uncompressed Δ_i has FedAvg's payload (its scalar is free)
    algorithm = {"name": "fedqvr", "aggregation": aggregation}
    ideal = loop_of(tmp_path, spec_of(None, algorithm))
    theta0 = ideal.state.x.clone()  # c = 0 in round 1
    calls = spy(ideal)
    ideal.round(1)
    clients, uploads, _ = calls[0]
    loop = loop_of(tmp_path, spec_of({"tau_s": tau, "outage_aggregation": mode}, algorithm))
    _, extra = loop.round(1)
    assert extra["wireless"]["lost"] == lost
    keep = torch.tensor([c not in lost for c in clients])
    sizes = loop.fed.sizes
    assert sizes.unique().numel() > 1
    n = sizes[clients][keep]
    m = 3 if mode == "zero_fill" else 2
    if aggregation == "paper":
        w = (8 / m) * n / sizes.sum()
    else:
        w = (2 / m) * n / n.sum()
    expected = theta0 + w @ uploads["delta"][keep]
    torch.testing.assert_close(loop.state.x, expected, rtol=1e-5, atol=1e-7)
    assert (loop.state.c_i.data[lost] == 0).all()
    torch.testing.assert_close(loop.state.c, (sizes / sizes.sum()) @ loop.state.c_i.data, rtol=1e-5, atol=1e-8)


def test_lost_clients_keep_their_scaffold_control_variate(tmp_path):
    tau, lost = one_lost(tmp_path, 2 * 32.0 * P)  # SCAFFOLD sends Δy and Δc
    loop = loop_of(tmp_path, spec_of({"tau_s": tau}, "scaffold"))
    _, extra = loop.round(1)
    received = extra["wireless"]["received"]
    assert len(received) == 2 and extra["wireless"]["lost"] == lost
    c_i = loop.state.c_i.data
    assert (c_i[lost] == 0).all() and (c_i[received].abs().sum(1) > 0).all()
    torch.testing.assert_close(loop.state.c, c_i.mean(0))  # c = (1/N) Σ c_i still holds


class BitsProbe(Algorithm):
    """FedAvg that records the widths it is given and charges d(B_i + 1) + μ bits for its upload."""

    caps = Capabilities(label="Probe", inputs=("bits",))
    seen: ClassVar[list] = []

    def upload(self, ctx, x, carry):
        bits = ctx.input("bits")
        assert bits.dtype == torch.int64 and bits.shape == ctx.clients.shape
        BitsProbe.seen.append((ctx.round, ctx.clients.tolist(), bits.tolist()))
        delta = x - ctx.broadcast["x"]
        return Upload({"delta": Compressed(delta, (delta.shape[1] * (bits.double() + 1) + MU).cpu())})


@pytest.fixture
def probe(monkeypatch):
    entry = Entry("bits_probe", BitsProbe, "test-only adaptive FedAvg", NoParams)
    monkeypatch.setitem(ALGORITHMS._entries, "bits_probe", entry)
    BitsProbe.seen = []
    return BitsProbe


@pytest.mark.parametrize("executor", ["sequential", "batched"])
def test_an_adaptive_algorithm_gets_its_allocated_bits_before_training(tmp_path, probe, executor):
    tau, b_min = 3e-4, 4
    frame, extras = run(tmp_path, spec_of({"tau_s": tau, "b_min": b_min}, "bits_probe"), executor, executor)
    seen = {}
    for t, clients, bits in probe.seen:  # one row per call (sequential) or all rows at once (batched)
        for c, b in zip(clients, bits):
            seen.setdefault(t, {})[c] = b
    removed_any = False
    for t, e in enumerate(extras, start=1):
        w = e["wireless"]
        sampled = w["received"] + w["lost"] + w["dropped"] + w["infeasible"]
        allocated = {c: b for c, b in zip(sorted(sampled), w["bits"]) if b > 0}
        assert seen.get(t, {}) == allocated  # exactly the kept devices trained, with their widths
        assert all(b >= b_min for b in allocated.values())
        assert w["lost"] == [] and sorted(w["received"]) == sorted(allocated)  # allocated payloads meet τ
        removed_any |= bool(w["dropped"] or w["infeasible"])
        a, bw = np.array(w["snr_bw_hz"]), np.array(w["bandwidth_hz"])
        order = sorted(sampled)
        for c in allocated:  # (30c) from the logged channel: d(B+1) + μ ≤ τ·W·log₂(1 + a/W)
            i = order.index(c)
            assert P * (allocated[c] + 1) + MU <= tau * bw[i] * np.log2(1 + a[i] / bw[i])
        assert sum(bw) <= 1e8 * (1 + 1e-9)
        assert frame["bits_up"][t - 1] == sum(P * (b + 1) + MU for b in allocated.values())
        assert w["solver_status"] in ("optimal", "optimal_inaccurate", "no feasible device")
    assert removed_any and any(seen.values())  # the scenario exercises both paths


def test_a_round_with_every_device_removed_trains_nothing(tmp_path, probe):
    spec = spec_of({"tau_s": 3e-4, "b_min": 10_000}, "bits_probe")
    setup = build_run(spec, 0, cache(tmp_path))
    _, loss0 = setup.model.evaluate(setup.x0, setup.buffers0, setup.data.test, spec.eval.batch_size)
    frame, extras = run(tmp_path, spec, "idle")
    assert probe.seen == [] and (frame["bits_up"] == 0).all() and frame["train_loss"].isna().all()
    assert (frame["test_loss"] == loss0).all()
    assert all(e["wireless"]["server_update"] == "skipped: every device was removed" for e in extras)


def test_the_channel_is_fixed_by_seed_and_round_not_by_who_else_is_sampled():
    from fedbench.scenario import WirelessSpec
    from fedbench.wireless import Uplink

    up = Uplink(WirelessSpec(), num_clients=8, seed=0, dim=P, overhead_bits=MU)
    a = up.snr_bandwidth(3, np.array([1, 4, 6]))
    assert a[1] == up.snr_bandwidth(3, np.array([4]))[0] == up.snr_bandwidth(3, np.array([0, 4]))[1]
    assert np.array_equal(a, Uplink(WirelessSpec(), 8, 0, P, MU).snr_bandwidth(3, np.array([1, 4, 6])))
    assert not np.array_equal(a, up.snr_bandwidth(4, np.array([1, 4, 6])))
    assert not np.array_equal(a, Uplink(WirelessSpec(), 8, 1, P, MU).snr_bandwidth(3, np.array([1, 4, 6])))


@pytest.mark.skipif("fedqvr_e" not in ALGORITHMS, reason="fedqvr_e not registered")
def test_fedqvr_e_end_to_end_loses_nothing_and_pays_its_allocated_widths(tmp_path):
    raw = copy.deepcopy(RAW)
    raw.update(rounds=3, compression={"kind": "stochastic", "bits": 2}, wireless={"tau_s": 3e-4})
    raw["algorithms"] = [{"name": "fedqvr_e"}]
    frame, extras = run(tmp_path, resolve_runs(parse_scenario(raw))[0], "qvre")
    for t, e in enumerate(extras):
        w = e["wireless"]
        assert w["lost"] == [] and w["server_update"] in ("done", "skipped: every device was removed")
        assert frame["bits_up"][t] == sum(P * (b + 1) + MU for b in w["bits"] if b > 0)
