"""FedTrack (Mitra et al. 2021; C-FLAG eqs. 4–5 without memory) against the NumPy transcription of
tests/algorithms/test_cflag.py, its identity with C-FLAG on an empty memory, and its traffic."""

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest
import torch

import tests.algorithms.test_cflag as cflag_tests
from fedbench.algorithms.fedtrack import FedTrack
from tests.algorithms.test_cflag import LR, X0, Toy, build, cflag_reference, drive
from tests.continual.common import COLS, P, raw_with, run, spec_of


@pytest.mark.parametrize(
    "iag,adam,batch", [("off", False, 1), ("sample", False, 1), ("batch_table", False, 2), ("batch_table", True, 3)]
)
def test_fedtrack_matches_eq_4_with_each_estimate(iag, adam, batch):
    """x_{t+1} = Σ p_i x_{t,E}^i after K_i steps of (4) — no memory step, no adaptation."""
    toy = Toy()
    state, logs = drive(build("fedtrack", toy, batch_size=batch, adam=adam, iag=iag), toy)
    x, _ = cflag_reference(toy, iag, adaptive=False, memory=False, adam=adam, batch=batch)
    np.testing.assert_allclose(state.x.numpy(), x, rtol=1e-10, atol=1e-13)
    assert logs == [{}] * len(logs)


@pytest.mark.parametrize("name,slack", [("fedtrack", 0), ("cflag", 2)])
def test_the_engines_epoch_batches_shape_the_table_without_reading_the_sizes(monkeypatch, name, slack):
    """With the context's ``epoch_batches`` (the engine's, on the host: at least the round's largest
    ⌈n_i / min(B, n_i)⌉) the IAG table is shaped without reading the clients' sizes, wider ones included, and
    every number is as with the read."""
    toy, batch = Toy(), 2
    read, _ = drive(build(name, toy, batch_size=batch), toy)
    plain = cflag_tests.round_ctx

    def carrying(algo, state, toy, clients, t, lr, on):
        most = max(math.ceil(toy.sizes[i] / min(batch, toy.sizes[i])) for i in clients)
        return dataclasses.replace(plain(algo, state, toy, clients, t, lr, on), epoch_batches=most + slack)

    def no_read(self, ctx):
        raise AssertionError("read the sizes")

    monkeypatch.setattr(cflag_tests, "round_ctx", carrying)
    monkeypatch.setattr(FedTrack, "most_batches", no_read)
    for batched in (False, True):
        state, _ = drive(build(name, toy, batch_size=batch), toy, batched=batched)
        np.testing.assert_allclose(state.x.numpy(), read.x.numpy(), rtol=1e-13, atol=1e-15)


def test_drift_correction_cancels_at_the_server():
    """(20)–(21): with one local step of plain GD on the full gradient (iag: sample, k = 0), every client
    moves by −β(∇g(x_t) − ∇g_i(x_t) + ∇g_i(x_t)) = −β∇g(x_t): the round is one centralised GD step."""
    toy = Toy()
    state, _ = drive(
        build("fedtrack", toy, iag="sample"), toy, schedule=[[0, 1, 2]], memory_on=[False], steps_of=[1, 1, 1]
    )
    n = np.array(toy.sizes, float)
    grad = sum(ni / n.sum() * toy.full_np(i, X0) for i, ni in enumerate(n))
    np.testing.assert_allclose(state.x.numpy(), X0 - LR * grad, rtol=1e-12)


@pytest.mark.parametrize("iag,adam", [("off", False), ("batch_table", True), ("sample", False)])
def test_cflag_on_an_empty_memory_is_fedtrack(iag, adam):
    """Task 0 (F = 0): no memory step and no adaptation, adaptive on or off, C-FLAG ≡ FedTrack bit for bit;
    C-FLAG-GD ≡ FedTrack with iag: sample."""
    toy = Toy()
    empty = [False] * 5
    track, _ = drive(build("fedtrack", toy, batch_size=2, adam=adam, iag=iag), toy, memory_on=empty)
    for adaptive in (True, False):
        cflag, logs = drive(
            build("cflag", toy, batch_size=2, adam=adam, iag=iag, adaptive=adaptive), toy, memory_on=empty
        )
        assert torch.equal(cflag.x, track.x)
        for log in (entry["cflag"] for entry in logs):
            assert log["alpha_scale"] == log["beta_scale"] == [1.0] * len(log["clients"]) and log["interfering"] == 0
    if iag == "sample" and not adam:
        gd, _ = drive(build("cflag_gd", toy, batch_size=2), toy, memory_on=empty)
        assert torch.equal(gd.x, track.x)


def test_through_the_engine_cflag_is_fedtrack_during_task_0_with_fedtracks_traffic(tmp_path):
    raw = raw_with({"local.optimizer": "adam", "continual.lr_per_task": [0.005, 0.01]})
    track, _, _ = run(tmp_path, spec_of(raw, "fedtrack"), "track")
    cflag, _, _ = run(tmp_path, spec_of(raw, "cflag"), "cflag")
    same = ["test_acc", "test_loss", "train_loss", "consistency"]
    pd.testing.assert_frame_equal(track[same][:2], cflag[same][:2])  # rounds 1–2: task 0, empty memory
    assert not np.allclose(track["test_loss"][2:], cflag["test_loss"][2:])  # the memory step acts afterwards
    assert (track["bits_up"] == 2 * 3 * P * 32).all() and (track["bits_down"] == 2 * 3 * P * 32).all()
    assert (cflag["bits_up"] * 2 == track["bits_up"] * 3).all() and (
        cflag["bits_down"] * 2 == track["bits_down"] * 3
    ).all()
    assert set(COLS) <= set(track.columns)
