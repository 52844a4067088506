"""The continual axis through the round loop: the accuracy matrix end to end (FedAvg and ER), seen-task
test accuracy, task switching and per-task learning rates, memory gradients, per-step replay, the
end-of-task hook, and resuming mid-run."""

import copy
import json
from dataclasses import replace
from typing import ClassVar

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from fedbench.algorithms import ALGORITHMS, Algorithm
from fedbench.data import load_dataset
from fedbench.engine.task_stream import ContinualStream
from fedbench.registry import Entry, NoParams
from fedbench.scenario import parse_scenario, resolve_runs, run_id_of
from fedbench.store import ResultsStore
from tests.continual.common import COLS, RAW, P, loop_of, matrix, raw_with, run, spec_of


def test_split_digits_records_the_accuracy_matrix_for_fedavg_and_er(tmp_path):
    avg, avg_extra, o1 = run(tmp_path, spec_of(raw_with(), "fedavg"), "avg")
    er, er_extra, o2 = run(tmp_path, spec_of(raw_with(), "er_fl"), "er")
    assert o1.status == o2.status == "finished"
    a, e = np.array(matrix(avg_extra)), np.array(matrix(er_extra))
    assert a.shape == e.shape == (3, 3) and ((a >= 0) & (a <= 1)).all()
    assert np.array_equal(a[0], e[0]) and not np.array_equal(a[1:], e[1:])  # memory is empty during task 0 only
    assert (np.diag(a) > 1 / 3).all() and (np.diag(e) > 1 / 3).all()  # each task learnt above its head's chance
    assert [x["task"] for x in avg_extra] == [0, 0, 1, 1, 2, 2]
    assert ["partition" in x for x in avg_extra] == [True, False, True, False, True, False]
    assert [x.get("memory_sizes") for x in avg_extra][1::2] == [[12] * 3, [24] * 3, [36] * 3]


def test_test_accuracy_is_over_the_tasks_seen_so_far(tmp_path):
    frame, extras, _ = run(tmp_path, spec_of(raw_with()), "seen")
    a = np.array(matrix(extras))
    test_y = load_dataset("digits", {}, tmp_path / "data", False).test.y.numpy()
    n = np.array([np.isin(test_y, [3 * j, 3 * j + 1, 3 * j + 2]).sum() for j in range(3)])
    for row, t in enumerate([2, 4, 6]):
        expected = (n[: row + 1] * a[row, : row + 1]).sum() / n[: row + 1].sum()
        assert frame["test_acc"][t - 1] == pytest.approx(expected, abs=1e-6)
    assert frame["test_acc"].notna().all()  # eval.every = 1


def test_learning_rates_per_task_restart_their_decay(tmp_path):
    raw = raw_with({"continual.lr_per_task": [0.02, 0.05], "local.lr_decay": 0.5})
    _, extras, _ = run(tmp_path, spec_of(raw), "lr")
    assert [x["lr"] for x in extras] == pytest.approx([0.02, 0.01, 0.05, 0.025, 0.05, 0.025])


def test_scenario_level_per_step_replay_makes_fedavg_the_er_baseline(tmp_path):
    er, _, _ = run(tmp_path, spec_of(raw_with(), "er_fl"), "er")
    avg, _, _ = run(tmp_path, spec_of(raw_with({"continual.memory.replay": "per_step"}), "fedavg"), "avg")
    pd.testing.assert_frame_equal(er[COLS], avg[COLS])


def test_per_step_replay_joins_a_memory_draw_to_each_minibatch(tmp_path):
    loop = loop_of(tmp_path, spec_of(raw_with(), "er_fl"))
    train = loop.s.data.train
    loop.round(1)
    xb, yb = loop.local_cfg.batch(train, loop.fed.batcher, 0)
    assert len(yb) == 16  # task 0: empty memory, plain minibatch
    loop.round(2)
    loop.round(3)  # now in task 1, memory holds client 0's task-0 slot
    position = int(loop.fed.batcher.cursor[0])
    idx = loop.fed.batcher.next(0)
    loop.fed.batcher.cursor[0] = position  # draw the same minibatch again through the config
    xb, yb = loop.local_cfg.batch(train, loop.fed.batcher, 0)
    memory = set(loop.plugin(ContinualStream).memory.indices(0).tolist())
    b = len(idx)
    assert len(yb) == b + 5 and torch.equal(yb[:b], train.y[idx])
    assert set(yb[b:].tolist()) <= {0, 1, 2} and set(yb[:b].tolist()) <= {3, 4, 5}
    rows = sorted(memory)
    assert all(any(torch.equal(xb[b + k], train.x[r]) for r in rows) for k in range(5))


class MemoryProbe(Algorithm):
    """FedAvg that records the memory gradients it is given, broadcasts their weighted mean
    (C-FLAG's ∇f†(x_t)), and records the end-of-task data."""

    caps = replace(Algorithm.caps, label="Probe", inputs=("memory_grad", "memory_size"))
    seen: ClassVar[list] = []
    ended: ClassVar[list] = []

    def prepare_round(self, state, ctx, weights):
        grads, sizes = ctx.input("memory_grad"), ctx.input("memory_size")
        MemoryProbe.seen.append(
            (ctx.round, ctx.clients.tolist(), grads.clone(), sizes.clone(), ctx.broadcast["x"].clone())
        )
        return ctx.sending(memory_grad=weights @ grads)

    def end_task(self, state, data):
        x = state.x
        MemoryProbe.ended.append(
            (data.task, data.sizes.clone(), data.gradients(x), data.gradients(x, squared=True), x.clone())
        )
        return state, {"probe_task": data.task}


@pytest.fixture
def probe(monkeypatch):
    entry = Entry("memory_probe", MemoryProbe, "test-only", NoParams)
    monkeypatch.setitem(ALGORITHMS._entries, "memory_probe", entry)
    MemoryProbe.seen, MemoryProbe.ended = [], []
    return MemoryProbe


def masked_mean_gradient(module, flat, x, y, groups):
    """Independent: mean over samples of CE on the sample's own task's logits, by autograd."""
    torch.nn.utils.vector_to_parameters(flat, module.parameters())
    out = module(x)
    losses = [
        F.cross_entropy(out[i, g].unsqueeze(0), torch.tensor([g.index(int(y[i]))]))
        for i in range(len(y))
        for g in [groups[int(y[i]) // 3]]
    ]
    grads = torch.autograd.grad(torch.stack(losses).mean(), list(module.parameters()))
    return torch.cat([g.reshape(-1) for g in grads])


def test_memory_gradients_prepare_round_and_end_task_hooks(tmp_path, probe):
    spec = spec_of(raw_with({"continual.memory.gradient": "full"}), "memory_probe")
    loop = loop_of(tmp_path, spec)
    frames = [loop.round(t) for t in range(1, 7)]
    groups = [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    train, module = loop.s.data.train, copy.deepcopy(loop.s.model.module)
    for t, clients, grads, sizes, x in probe.seen:
        task = (t - 1) // 2
        assert sizes.tolist() == [12 * task] * 3
        if task == 0:
            assert (grads == 0).all()  # empty memory: zero rows
            continue
        for row, c in enumerate(clients):
            mem = torch.as_tensor(loop.plugin(ContinualStream).memory.indices(c)[: 12 * task])
            expected = masked_mean_gradient(module, x, train.x[mem], train.y[mem], groups)
            torch.testing.assert_close(grads[row], expected, rtol=1e-4, atol=1e-6)
    assert all(m["bits_down"] == 3 * 2 * P * 32 for m, _ in frames)  # x and the broadcast ∇f† are charged
    assert [e[0] for e in probe.ended] == [0, 1, 2] and [x.get("probe_task") for _, x in frames][1::2] == [0, 1, 2]
    for task, sizes, grads, squared, x in probe.ended:
        parts = loop.s.tasks.parts[task]
        assert sizes.tolist() == [len(p) for p in parts]
        for c, part in enumerate(parts):
            torch.testing.assert_close(
                grads[c], masked_mean_gradient(module, x, train.x[part], train.y[part], groups), rtol=1e-4, atol=1e-6
            )
        assert (squared >= grads * grads - 1e-7).all()  # Σ w_b g_b² ≥ (Σ w_b g_b)²


def test_outside_a_continual_run_the_memory_gradient_is_zero(tmp_path, probe):
    raw = {k: v for k, v in copy.deepcopy(RAW).items() if k != "continual"}
    loop = loop_of(tmp_path, spec_of(raw, "memory_probe"))
    loop.round(1)
    ((_, _, grads, sizes, _),) = probe.seen
    assert grads.shape == (3, P) and (grads == 0).all() and (sizes == 0).all()


@pytest.mark.parametrize("every,stop", [(3, 5), (2, 5)])  # resume mid-task (from 3) and at a task boundary (from 4)
def test_an_interrupted_continual_run_resumes_with_identical_numbers(tmp_path, every, stop):
    raw = raw_with(checkpoint_every=every)
    spec = spec_of(raw, "er_fl")
    full, full_extra, _ = run(tmp_path, spec, "full")

    def interrupt(t, _):
        if t == stop:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, spec, "cut", on_round=interrupt)
    store = ResultsStore(tmp_path / "cut")
    assert store.checkpoint_path(run_id_of(spec, 0)).exists()
    resumed, resumed_extra, outcome = run(tmp_path, spec, "cut")
    assert outcome.status == "finished"
    pd.testing.assert_frame_equal(full[COLS], resumed[COLS])
    assert matrix(full_extra) == matrix(resumed_extra)


def test_local_adam_runs_the_same_on_both_executors_and_differs_from_sgd(tmp_path):
    raw = raw_with({"local.optimizer": "adam", "continual.lr_per_task": [0.005, 0.01]})
    seq, _, _ = run(tmp_path, spec_of(raw, "fine_fl"), "seq", "sequential")
    bat, _, _ = run(tmp_path, spec_of(raw, "fine_fl"), "bat", "batched")
    pd.testing.assert_frame_equal(seq[COLS], bat[COLS], rtol=1e-4, atol=1e-6)
    sgd, _, _ = run(tmp_path, spec_of(raw_with({"continual.lr_per_task": [0.005, 0.01]}), "fine_fl"), "sgd")
    assert not np.allclose(seq["train_loss"], sgd["train_loss"])


def test_fine_fl_is_fedavg_under_another_label(tmp_path):
    avg, _, _ = run(tmp_path, spec_of(raw_with(), "fedavg"), "avg")
    fine, _, _ = run(tmp_path, spec_of(raw_with(), "fine_fl"), "fine")
    pd.testing.assert_frame_equal(avg[COLS], fine[COLS])
    assert resolve_runs(parse_scenario({**raw_with(), "algorithms": [{"name": "fine_fl"}]}))[0].label == "Fine-FL"
    assert json.loads(spec_of(raw_with(), "er_fl").to_json())["algorithm"]["label"] == "Ering"


def test_the_task_stream_returns_each_tasks_federation_and_mutates_no_shared_setup(tmp_path):
    """Issue 25: the plug-in hands the loop a new Federation per task (parts, n_i, batcher, mask) and
    leaves the run's setup as it was built (the algorithms read n_i from each round's context)."""
    loop = loop_of(tmp_path, spec_of(RAW, "fine_fl"))
    first = loop.s.federation
    sizes0 = first.sizes.clone()
    seen = []
    for t in range(1, 7):  # 3 tasks of 2 rounds
        loop.round(t)
        seen.append(loop.fed)
    assert seen[0] is seen[1] and seen[1] is not seen[2] and seen[3] is not seen[4]  # one per task
    for task, fed in enumerate(seen[::2]):
        parts = loop.s.tasks.parts[task]
        assert all(torch.equal(a, b) for a, b in zip(fed.parts, parts))
        assert fed.sizes.tolist() == [float(len(p)) for p in parts] and torch.equal(
            fed.label_mask, loop.plugin(ContinualStream).masks[task]
        )
    assert loop.s.federation is first and first.label_mask is None
    assert torch.equal(first.sizes, sizes0) and not hasattr(loop.s.algorithm.ctx, "client_sizes")
