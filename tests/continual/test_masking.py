"""Continual heads as logit masks: other tasks' classes get no probability and no gradient, in the
sequential oracle, the batched (vmap) oracle and evaluation alike."""

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from fedbench.models import build_model
from fedbench.models.flat import MASKED_LOGIT, FlatModel
from tests.continual.common import COLS, matrix, raw_with, run, spec_of


def model_and_batch():
    torch.manual_seed(0)
    model = FlatModel(build_model("mlp", {"hidden": [8]}, (1, 8, 8), 6))
    x, y = torch.randn(10, 1, 8, 8), torch.tensor([0, 1, 2, 3, 4, 5, 0, 3, 4, 1])
    return model, x, y


def test_without_a_mask_the_logits_pass_through_untouched():
    model, x, y = model_and_batch()
    logits = model.logits(model.flatten(), {}, x)
    assert model.masked(logits, y) is logits


def test_task_incremental_loss_is_cross_entropy_over_the_samples_own_task_head():
    model, x, y = model_and_batch()
    tasks = [[0, 1], [2, 3], [4, 5]]
    table = torch.zeros(6, 6, dtype=torch.bool)
    for group in tasks:
        for a in group:
            table[a, group] = True
    model.label_mask = table
    flat = model.flatten()
    loss, grad = model.loss_and_grad(flat, {}, x, y)
    # independent: the module's own forward, each sample scored only on its task's two logits
    module = model.module
    out = module(x)
    losses = []
    for i in range(len(y)):
        group = tasks[int(y[i]) // 2]
        losses.append(F.cross_entropy(out[i, group].unsqueeze(0), torch.tensor([group.index(int(y[i]))])))
    expected = torch.stack(losses).mean()
    expected_grad = torch.cat([g.reshape(-1) for g in torch.autograd.grad(expected, list(module.parameters()))])
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)
    torch.testing.assert_close(grad, expected_grad, rtol=1e-5, atol=1e-7)
    masked = model.masked(model.logits(flat, {}, x), y)
    assert (masked[~table[y]] == MASKED_LOGIT).all() and torch.equal(masked[table[y]], out.detach()[table[y]])
    assert (F.softmax(masked, 1)[~table[y]] == 0).all()


def test_a_class_never_in_a_batchs_allowed_sets_gets_no_gradient():
    model, x, y = model_and_batch()
    keep = y < 4  # classes 0..3 seen (class-incremental after two tasks)
    model.label_mask = torch.tensor([True] * 4 + [False] * 2).expand(6, 6).clone()
    _, grad = model.loss_and_grad(model.flatten(), {}, x[keep], y[keep])
    out_bias = model.unflatten(grad)[model.names[-1]]
    assert (out_bias[4:] == 0).all() and (out_bias[:4] != 0).any()


def test_class_incremental_cannot_predict_unseen_classes_and_task_incremental_stays_in_the_task(tmp_path):
    _, extras, _ = run(tmp_path, spec_of(raw_with({"continual.mode": "class"})), "ci")
    a = np.array(matrix(extras))
    assert a.shape == (3, 3) and a[0, 1] == a[0, 2] == a[1, 2] == 0.0  # future classes are masked out
    assert a[0, 0] > 1 / 3
    _, extras, _ = run(tmp_path, spec_of(raw_with()), "ti")
    a = np.array(matrix(extras))
    assert (a[np.triu_indices(3, 1)] > 0).all()  # a future task's own head still scores among its 3 classes


@pytest.mark.parametrize("mode", ["task", "class"])
def test_batched_equals_sequential_with_masks_and_per_step_replay(tmp_path, mode):
    local = {"epochs": 0.5, "batch_size": 16, "lr": 0.1, "weight_decay": 1e-3, "clip_grad_norm": 2.0}
    raw = raw_with({"continual.mode": mode, "partition.omega": 0.3}, local=local)
    spec = spec_of(raw, "er_fl")
    seq, seq_extra, _ = run(tmp_path, spec, "seq", "sequential")
    bat, bat_extra, _ = run(tmp_path, spec, "bat", "batched")
    pd.testing.assert_frame_equal(seq[COLS], bat[COLS], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(matrix(seq_extra), matrix(bat_extra), atol=1e-6)
