"""EWC-FL: the local correction is the autograd gradient of the EWC penalty, local steps match a NumPy
re-derivation on the toy federation, the engine's Fisher is the mean squared minibatch gradient of each
client's task data (independent autograd on a module copy), λ = 0 is Fine-FL exactly, both executors agree,
and Split-digits records the accuracy matrix in task and class mode."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from fedbench.algorithms import RoundContext
from fedbench.algorithms.base import TaskData
from fedbench.scenario import parse_scenario, resolve_runs
from tests.algorithms.toy import Quadratics, make_algorithm, run_rounds, weights_np
from tests.continual.common import COLS, P, loop_of, matrix, raw_with, run


def fake_task(task: int, sizes: np.ndarray, fisher_at):
    """A TaskData whose squared gradients at a point are ``fisher_at(point)`` ``[N, P]``."""

    def gradients(point, squared=False):
        assert squared, "EWC asks for squared gradients only"
        return fisher_at(point)

    return TaskData(task, torch.tensor(sizes), gradients)


# -- the penalty gradient -------------------------------------------------------------------
@pytest.mark.parametrize("fisher", ["local", "global"])
def test_correction_is_the_autograd_gradient_of_the_penalty(fisher):
    fed = Quadratics(num_clients=4, dim=5)
    lam = 7.0
    algo, _ = make_algorithm("ewc_fl", fed, lam=lam, fisher=fisher)
    state = algo.init_state(torch.zeros(5, dtype=torch.float64))
    rng = np.random.default_rng(3)
    tables, anchors = [], []
    for task in range(2):  # two finished tasks, each with its own θ*_k and Fisher table
        state = dataclasses.replace(state, x=torch.tensor(rng.normal(size=5)))
        table = torch.tensor(rng.uniform(0.1, 2.0, size=(4, 5)))
        sizes = rng.integers(5, 50, size=4).astype(float)
        state, _ = algo.end_task(state, fake_task(task, sizes, lambda p, t=table: t))
        w = torch.tensor(sizes / sizes.sum())
        tables.append(table if fisher == "local" else (w @ table).expand(4, -1))
        anchors.append(state.x.clone())
    clients = torch.tensor([0, 2, 3])
    ctx = RoundContext(clients, 0.1, torch.ones(3), algo.broadcast(state, clients), algo.client_state(state, clients))
    x = torch.tensor(rng.normal(size=(3, 5)), requires_grad=True)
    penalty = sum(
        (lam / 2) * (tables[k][clients] * (x - anchors[k]) ** 2).sum() for k in range(2)
    )  # rows are independent clients, so one sum differentiates every row
    (want,) = torch.autograd.grad(penalty, x)
    torch.testing.assert_close(algo.penalty_gradient(ctx, x.detach()), want, rtol=1e-12, atol=1e-12)


def test_local_steps_and_fedavg_server_match_numpy():
    fed = Quadratics(num_clients=3, dim=4)
    lam, lr, steps = 3.0, 0.05, [2, 3, 1]
    algo, _ = make_algorithm("ewc_fl", fed, lam=lam)
    rng = np.random.default_rng(0)
    x0 = rng.normal(size=4)
    theta = rng.normal(size=4)  # θ*_0
    state = algo.init_state(torch.tensor(theta))
    sq = lambda p: torch.stack([torch.tensor(fed.grad_np(i, p.numpy()) ** 2) for i in range(3)])  # noqa: E731
    state, _ = algo.end_task(state, fake_task(0, fed.sizes, sq))
    state = dataclasses.replace(state, x=torch.tensor(x0))
    schedule = [[0, 2], [1, 2]]
    # run_rounds starts from init_state: hand it the state after the task boundary instead
    algo.init_state = lambda x, s=state: s  # type: ignore[method-assign]
    final = run_rounds(algo, fed, x0, schedule, steps, lr)
    fisher = np.stack([fed.grad_np(i, theta) ** 2 for i in range(3)])  # NumPy re-derivation
    x = x0.copy()
    for clients in schedule:
        locals_ = []
        for i in clients:
            z = x.copy()
            for _ in range(steps[i]):
                z = z - lr * (fed.grad_np(i, z) + lam * fisher[i] * (z - theta))
            locals_.append(z)
        x = x + weights_np(fed, clients) @ (np.array(locals_) - x)
    np.testing.assert_allclose(final.x.numpy(), x, rtol=1e-12, atol=1e-12)


def spec_with(algorithm: dict, changes: dict | None = None):
    """The shared Split-digits scenario (tests/continual/common.py) with one algorithm block."""
    return resolve_runs(parse_scenario({**raw_with(changes), "algorithms": [algorithm]}))[0]


# -- the engine's Fisher ----------------------------------------------------------------------
GROUPS = [[0, 1, 2], [3, 4, 5], [6, 7, 8]]


def head_gradient(module, flat, x, y):
    """Independent: mean over the batch of CE on each sample's own task head, by autograd."""
    torch.nn.utils.vector_to_parameters(flat, module.parameters())
    out = module(x)
    losses = [
        F.cross_entropy(out[b, GROUPS[int(y[b]) // 3]].unsqueeze(0), torch.tensor([int(y[b]) % 3]))
        for b in range(len(y))
    ]
    grads = torch.autograd.grad(torch.stack(losses).mean(), list(module.parameters()))
    return torch.cat([g.reshape(-1) for g in grads])


@pytest.mark.parametrize("fisher", ["local", "global"])
def test_fisher_is_the_mean_squared_minibatch_gradient_at_the_task_end_model(tmp_path, fisher):
    loop = loop_of(tmp_path, spec_with({"name": "ewc_fl", "fisher": fisher}))
    loop.round(1)
    loop.round(2)  # task 0 ends: θ*_0 = x, Fisher at x
    theta = loop.state.x.clone()
    train, module = loop.s.data.train, copy.deepcopy(loop.s.model.module)
    rows, sizes = [], []
    for part in loop.s.tasks.parts[0]:
        total = torch.zeros(P)
        for start in range(0, len(part), 16):  # local.batch_size = 16
            idx = part[start : start + 16]
            g = head_gradient(module, theta, train.x[idx], train.y[idx])
            total += g * g * len(idx) / len(part)
        rows.append(total)
        sizes.append(len(part))
    want = torch.stack(rows)
    if fisher == "global":
        want = torch.tensor(sizes, dtype=torch.float32) / sum(sizes) @ want
    torch.testing.assert_close(loop.state.fisher.data, want, rtol=1e-4, atol=1e-9)
    torch.testing.assert_close(loop.state.anchor.data, want * theta, rtol=1e-4, atol=1e-9)
    assert float(want.sum()) > 0


# -- through the engine ----------------------------------------------------------------------
def frame_of(tmp_path, name, algorithm, changes=None, executor="sequential"):
    frame, extras, outcome = run(tmp_path, spec_with(algorithm, changes), name, executor)
    assert outcome.status == "finished", outcome
    return frame[COLS], np.array(matrix(extras)), extras


@pytest.mark.parametrize(
    "changes", [{}, {"local.optimizer": "adam", "continual.lr_per_task": [0.005, 0.01]}], ids=["sgd", "adam"]
)
def test_lambda_zero_is_fine_fl_exactly_and_lambda_changes_only_later_tasks(tmp_path, changes):
    fine, a_fine, _ = frame_of(tmp_path, "fine", {"name": "fine_fl"}, changes)
    zero, a_zero, _ = frame_of(tmp_path, "zero", {"name": "ewc_fl", "lam": 0.0}, changes)
    pd.testing.assert_frame_equal(fine, zero)
    assert np.array_equal(a_fine, a_zero)
    ewc, a_ewc, _ = frame_of(tmp_path, "ewc", {"name": "ewc_fl", "lam": 10.0}, changes)
    pd.testing.assert_frame_equal(fine.iloc[:2], ewc.iloc[:2])  # task 0: no Fisher yet
    assert np.array_equal(a_fine[0], a_ewc[0]) and not np.allclose(fine["train_loss"][2:], ewc["train_loss"][2:])


@pytest.mark.parametrize("fisher", ["local", "global"])
def test_batched_executor_equals_sequential_in_a_continual_run(tmp_path, fisher):
    changes = {"local.optimizer": "adam", "continual.lr_per_task": [0.005, 0.01]}
    algo = {"name": "ewc_fl", "lam": 10.0, "fisher": fisher}
    seq, a_seq, _ = frame_of(tmp_path, "seq", algo, changes, "sequential")
    bat, a_bat, _ = frame_of(tmp_path, "bat", algo, changes, "batched")
    pd.testing.assert_frame_equal(seq, bat, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(a_seq, a_bat, atol=1e-6)


@pytest.mark.parametrize("mode", ["task", "class"])
def test_split_digits_records_the_accuracy_matrix_at_fedavg_cost(tmp_path, mode):
    frame, a, extras = frame_of(tmp_path, mode, {"name": "ewc_fl", "fisher": "global"}, {"continual.mode": mode})
    assert a.shape == (3, 3) and ((a >= 0) & (a <= 1)).all() and a[0, 0] > 1 / 3
    assert (frame["bits_up"] == 3 * P * 32).all() and (frame["bits_down"] == 3 * P * 32).all()
    ends = [e for e in extras if "task_acc" in e]
    assert all(e["task_end_bits_up"] == e["task_end_bits_down"] == 3 * P * 32 for e in ends)
