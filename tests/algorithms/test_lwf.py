"""LwF-FL: the local loss and its gradient match an independent computation (plain nn.Module copies,
softmaxes written out) in task- and class-incremental mode, the old heads and the old model are set at
task ends, λ = 0 is Fine-FL exactly, and Split-digits records the accuracy matrix in both modes."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from torch.nn.utils import vector_to_parameters

from fedbench.algorithms.lwf import LwFObjective, old_heads
from fedbench.engine.local import GradientOracle, LocalConfig
from fedbench.models import build_model
from fedbench.models.flat import FlatModel
from fedbench.scenario import AugmentSpec, parse_scenario, resolve_runs
from tests.continual.common import COLS, P, loop_of, matrix, raw_with, run

CFG = LocalConfig(weight_decay=0.0, clip_grad_norm=None, augment=AugmentSpec(), seed=0)
CLASS_TASK = np.array([0, 0, 1, 1, 2, 2])  # 3 tasks × 2 classes; training task 2, tasks 0 and 1 are old


def tiny_mlp():
    torch.manual_seed(0)
    return build_model("mlp", {"hidden": [6, 5]}, (4,), 6).double()


def label_mask(mode: str) -> torch.Tensor:
    """The engine's heads while training task 2: own task (task mode) or all seen classes (class mode)."""
    if mode == "task":
        return torch.as_tensor(CLASS_TASK[:, None] == CLASS_TASK[None, :])
    return torch.ones(6, 6, dtype=torch.bool)


def lwf_by_hand(w, w_old, x, y, mode, lam, temperature):
    """CE on each sample's allowed classes + λ Σ_heads mean_b −Σ p_old log p_new, written out."""
    net, old_net = tiny_mlp(), tiny_mlp()
    vector_to_parameters(w, net.parameters())
    vector_to_parameters(w_old, old_net.parameters())
    z, z_old = net(x), old_net(x).detach()
    allowed = label_mask(mode)
    ce = torch.stack([-z[b, y[b]] + torch.log(torch.exp(z[b, allowed[y[b]]]).sum()) for b in range(len(y))]).mean()
    heads = [[0, 1], [2, 3]] if mode == "task" else [[0, 1, 2, 3]]
    kd = 0.0
    for h in heads:
        e_old, e_new = torch.exp(z_old[:, h] / temperature), torch.exp(z[:, h] / temperature)
        p_old = e_old / e_old.sum(1, keepdim=True)
        log_new = z[:, h] / temperature - torch.log(e_new.sum(1, keepdim=True))
        kd = kd + (-(p_old * log_new).sum(1)).mean()
    loss = ce + lam * kd
    grads = torch.autograd.grad(loss, list(net.parameters()))
    return loss.detach(), torch.cat([g.reshape(-1) for g in grads])


def test_old_heads_per_task_or_one_head():
    class_task = np.array([0, 0, 1, 1, 2, 2, -1])
    assert old_heads(class_task, 1, "task").tolist() == [0, 0, 1, 1, -1, -1, -1]
    assert old_heads(class_task, 1, "class").tolist() == [0, 0, 0, 0, -1, -1, -1]
    assert old_heads(class_task, 0, "task").tolist() == [0, 0, -1, -1, -1, -1, -1]


@pytest.mark.parametrize("mode", ["task", "class"])
@pytest.mark.parametrize("lam,temperature", [(1.0, 2.0), (3.0, 0.7)])
def test_lwf_loss_and_gradient_match_an_independent_computation(mode, lam, temperature):
    flat = FlatModel(tiny_mlp())
    flat.label_mask = label_mask(mode)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(8, 4, generator=g, dtype=torch.float64)
    y = torch.tensor([4, 5, 4, 5, 5, 4, 1, 2])  # current task, plus two old-task labels (own heads in task mode)
    w, w_old = (flat.flatten() + 0.4 * torch.randn(flat.dim, generator=g, dtype=torch.float64) for _ in range(2))
    heads = old_heads(CLASS_TASK, 1, mode)
    oracle = GradientOracle(flat, {}, x, y, CFG)
    got = oracle(w.unsqueeze(0), objective=LwFObjective(w_old[None], heads[None], lam, temperature, 3))[0]
    loss, want = lwf_by_hand(w, w_old, x, y, mode, lam, temperature)
    torch.testing.assert_close(oracle.first_loss, loss, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    plain = GradientOracle(flat, {}, x, y, CFG)(w.unsqueeze(0))[0]
    assert (got - plain).norm() > 1e-3  # distillation moves the gradient
    none = GradientOracle(flat, {}, x, y, CFG)(
        w.unsqueeze(0), objective=LwFObjective(w_old[None], heads[None, :0], lam, temperature, 3)
    )[0]
    assert torch.equal(none, plain)  # no old classes: plain masked cross-entropy


@pytest.mark.parametrize("mode", ["task", "class"])
@pytest.mark.parametrize("count", [3, 6])
def test_the_masked_loss_of_a_padded_batch_is_the_loss_of_its_real_samples(mode, count):
    """The batched executor's form (every head a mask over the classes, ``count`` ≥ the head ids; the padded
    samples masked out) gives the loss and gradient of the samples alone, written out."""
    flat = FlatModel(tiny_mlp())
    flat.label_mask = label_mask(mode)
    g = torch.Generator().manual_seed(3)
    x = torch.randn(8, 4, generator=g, dtype=torch.float64)
    y = torch.tensor([4, 5, 4, 5, 5, 4, 1, 2])
    w, w_old = (flat.flatten() + 0.4 * torch.randn(flat.dim, generator=g, dtype=torch.float64) for _ in range(2))
    padded_x = torch.cat([x, 50 * torch.randn(3, 4, generator=g, dtype=torch.float64)])
    padded_y, mask = torch.cat([y, torch.tensor([0, 3, 5])]), torch.cat([torch.ones(8), torch.zeros(3)]).double()
    objective = LwFObjective(w_old[None], old_heads(CLASS_TASK, 1, mode)[None], 1.5, 0.8, count).at(0)
    point = w.clone().requires_grad_(True)
    loss = objective(flat, point, {}, padded_x, padded_y, mask)
    (grad,) = torch.autograd.grad(loss, point)
    want_loss, want_grad = lwf_by_hand(w, w_old, x, y, mode, 1.5, 0.8)
    torch.testing.assert_close(loss.detach(), want_loss, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(grad, want_grad, rtol=1e-10, atol=1e-12)


# -- through the engine ----------------------------------------------------------------------
def spec_with(algorithm: dict, changes: dict | None = None):
    return resolve_runs(parse_scenario({**raw_with(changes), "algorithms": [algorithm]}))[0]


def frame_of(tmp_path, name, algorithm, changes=None):
    frame, extras, outcome = run(tmp_path, spec_with(algorithm, changes), name)
    assert outcome.status == "finished", outcome
    return frame[COLS], np.array(matrix(extras))


@pytest.mark.parametrize("mode", ["task", "class"])
def test_task_ends_set_the_old_model_and_the_old_heads(tmp_path, mode):
    loop = loop_of(tmp_path, spec_with({"name": "lwf_fl"}, {"continual.mode": mode}))
    loop.round(1)
    assert loop.state.heads.numel() == 0
    loop.round(2)  # task 0 ends
    torch.testing.assert_close(loop.state.old_model, loop.state.x, rtol=0, atol=0)
    old = [0, 0, 0] + [-1] * 7  # classes 0-2 are task 0's; class 9 is in no task
    assert loop.state.heads.tolist() == old
    end_of_task0 = loop.state.x.clone()
    loop.round(3)
    loop.round(4)  # task 1 ends
    assert not torch.equal(loop.state.x, end_of_task0)
    torch.testing.assert_close(loop.state.old_model, loop.state.x, rtol=0, atol=0)
    want = [0, 0, 0, 1, 1, 1] if mode == "task" else [0] * 6
    assert loop.state.heads.tolist() == want + [-1] * 4


@pytest.mark.parametrize("mode", ["task", "class"])
def test_lambda_zero_is_fine_fl_exactly_and_task_zero_is_plain_cross_entropy(tmp_path, mode):
    changes = {"continual.mode": mode, "local.optimizer": "adam", "continual.lr_per_task": [0.005, 0.01]}
    fine, a_fine = frame_of(tmp_path, "fine", {"name": "fine_fl"}, changes)
    zero, a_zero = frame_of(tmp_path, "zero", {"name": "lwf_fl", "lam": 0.0}, changes)
    pd.testing.assert_frame_equal(fine, zero)
    assert np.array_equal(a_fine, a_zero)
    lwf, a_lwf = frame_of(tmp_path, "lwf", {"name": "lwf_fl", "lam": 1.0}, changes)
    pd.testing.assert_frame_equal(fine.iloc[:2], lwf.iloc[:2])
    assert np.array_equal(a_fine[0], a_lwf[0]) and not np.allclose(fine["train_loss"][2:], lwf["train_loss"][2:])


@pytest.mark.parametrize("mode", ["task", "class"])
def test_split_digits_records_the_accuracy_matrix_at_fedavg_cost(tmp_path, mode):
    frame, a = frame_of(tmp_path, mode, {"name": "lwf_fl"}, {"continual.mode": mode})
    assert a.shape == (3, 3) and ((a >= 0) & (a <= 1)).all() and a[0, 0] > 1 / 3
    assert (frame["bits_up"] == 3 * P * 32).all() and (frame["bits_down"] == 3 * P * 32).all()
