"""NCCL-FL (NCCL's Λ-sign step sizes on every local step + FedAvg) against a NumPy transcription, and
the engine hook it needs: a per-step replay draw kept apart from the minibatch (``replay_apart``,
``grad.memory``) on both executors."""

import math

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from fedbench.engine.batched import BatchedOracle
from fedbench.engine.batched_layers import RowLayers
from fedbench.engine.local import GradientOracle, LocalConfig
from fedbench.engine.task_stream import ContinualStream
from fedbench.models import build_model
from fedbench.models.flat import FlatModel
from fedbench.scenario import AugmentSpec
from tests.algorithms.test_cflag import ADAM, LR, MEMORY_ON, SCHEDULE, STEPS, X0, Toy, build, drive
from tests.continual.common import P, loop_of, raw_with, run, spec_of


def nccl_reference(toy: Toy, alpha=None, L=5.0, adam=False, min_scale=0.0, max_scale=math.inf, memory_on=MEMORY_ON):
    """Every local step: x ← x − α_H ∇f_I − β_H ∇g_J with Table 1 at N = p = E = 1 (Λ = ⟨∇f_I, ∇g_J⟩;
    Λ > 0: α_H = α, β_H = (1 − Lα)Λ/(L‖∇g_J‖²); Λ ≤ 0: α_H = α(1 − Λ/‖∇f_I‖²), β_H = α),
    or Adam on (α_H ∇f_I + β_H ∇g_J)/η_l; server x_{t+1} = Σ p_i x_i. Returns x and the interfering-step counts."""
    x, counts = X0.copy(), []
    alpha = LR if alpha is None else alpha
    for t, clients in enumerate(SCHEDULE, start=1):
        n = np.array([toy.sizes[i] for i in clients], float)
        p, finals, round_counts = n / n.sum(), [], []
        for i in clients:
            y, m, v, interfering = x.copy(), np.zeros(toy.dim), np.zeros(toy.dim), 0
            for k in range(STEPS[i]):
                g = toy.sample_np(i, toy.order(t, i, k), y)
                f = toy.memory_row_np(i, toy.memory_row(t, i, k), y) if memory_on[t - 1] else np.zeros(toy.dim)
                lam = f @ g
                a_h, b_h = alpha, alpha
                if f @ f > 0 and g @ g > 0:
                    if lam > 0:
                        b_h = (1 - L * alpha) * lam / (L * (g @ g))
                    else:
                        a_h = alpha * (1 - lam / (f @ f))
                        interfering += 1
                    a_h = alpha * min(max(a_h / alpha, min_scale), max_scale)
                    b_h = alpha * min(max(b_h / alpha, min_scale), max_scale)
                if adam:
                    b1, b2, eps = ADAM
                    d = (a_h * f + b_h * g) / LR
                    m, v = b1 * m + (1 - b1) * d, b2 * v + (1 - b2) * d * d
                    y = y - LR * (m / (1 - b1 ** (k + 1))) / (np.sqrt(v / (1 - b2 ** (k + 1))) + eps)
                else:
                    y = y - a_h * f - b_h * g
            finals.append(y)
            round_counts.append(interfering)
        counts.append(round_counts)
        x = sum(pi * y for pi, y in zip(p, finals))
    return x, counts


@pytest.mark.parametrize("params,adam", [({}, False), ({"alpha": 0.03, "L": 2.0}, False), ({"max_scale": 1.5}, True)])
def test_nccl_fl_matches_the_lambda_sign_rule(params, adam):
    toy = Toy()
    state, logs = drive(build("nccl_fl", toy, adam=adam, **params), toy)
    x, counts = nccl_reference(toy, adam=adam, **params)
    np.testing.assert_allclose(state.x.numpy(), x, rtol=1e-10, atol=1e-13)
    assert [log["nccl"]["interfering_steps"] for log in logs] == counts
    total = sum(STEPS[i] for clients in SCHEDULE[1:] for i in clients)
    interfering = sum(map(sum, counts))
    assert 0 < interfering < total  # both branches of the rule are exercised
    assert [log["nccl"]["transferring_steps"] for log in logs][0] == [0, 0, 0]  # task 0: empty memory


def test_nccl_fl_on_an_empty_memory_is_fedavg():
    toy = Toy()
    for adam in (False, True):
        nccl, _ = drive(build("nccl_fl", toy, adam=adam), toy, memory_on=[False] * 5)
        avg, _ = drive(build("fedavg", toy, adam=adam), toy, memory_on=[False] * 5)
        assert torch.equal(nccl.x, avg.x)


# -- the engine hook: replay_apart ---------------------------------------------------------------------


def tiny_model() -> FlatModel:
    torch.manual_seed(0)
    return FlatModel(build_model("mlp", {"hidden": [8]}, (1, 8, 8), 10))


def ce_grad(model: FlatModel, flat: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Independent: mean cross-entropy gradient by autograd on a copy of the module."""
    module = build_model("mlp", {"hidden": [8]}, (1, 8, 8), 10)
    torch.nn.utils.vector_to_parameters(flat, module.parameters())
    grads = torch.autograd.grad(F.cross_entropy(module(x), y), list(module.parameters()))
    return torch.cat([g.reshape(-1) for g in grads])


def test_the_sequential_oracle_splits_minibatch_and_replay_draw():
    model, cfg = tiny_model(), LocalConfig(0.01, None, AugmentSpec(), 0, replay_apart=True)
    flat = model.flatten()
    x, y = torch.randn(6, 1, 8, 8), torch.randint(0, 10, (6,))
    oracle = GradientOracle(model, {}, x, y, cfg, memory_from=4)
    torch.testing.assert_close(oracle(flat.unsqueeze(0))[0], ce_grad(model, flat, x[:4], y[:4]) + 0.01 * flat)
    torch.testing.assert_close(oracle.memory(flat.unsqueeze(0))[0], ce_grad(model, flat, x[4:], y[4:]) + 0.01 * flat)
    no_draw = GradientOracle(model, {}, x, y, cfg, memory_from=6)
    assert torch.equal(no_draw.memory(flat.unsqueeze(0)), torch.zeros(1, model.dim))  # empty memory: exact zeros
    joined = GradientOracle(model, {}, x, y, cfg)  # ER and every other algorithm: the whole batch
    torch.testing.assert_close(joined(flat.unsqueeze(0))[0], ce_grad(model, flat, x, y) + 0.01 * flat)


def test_the_batched_oracle_equals_the_sequential_one():
    model, cfg = tiny_model(), LocalConfig(0.0, 1.0, AugmentSpec(), 0, replay_apart=True)
    points = model.flatten().unsqueeze(0).repeat(2, 1) + 0.01 * torch.randn(2, model.dim)
    x, y = torch.randn(2, 6, 1, 8, 8), torch.randint(0, 10, (2, 6))
    mask = torch.tensor([[1.0] * 6, [1.0] * 3 + [0.0] * 3])  # row 1: 3 current samples, no draw, padding
    memory = torch.tensor([[0.0] * 4 + [1.0] * 2, [0.0] * 6])
    batched = BatchedOracle(RowLayers.of(model), {}, x, y, mask, cfg, memory)
    got, got_memory = batched(points), batched.memory(points)
    rows = [GradientOracle(model, {}, x[0], y[0], cfg, 4), GradientOracle(model, {}, x[1, :3], y[1, :3], cfg, 3)]
    torch.testing.assert_close(got, torch.cat([o(points[r : r + 1]) for r, o in enumerate(rows)]), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got_memory[0], rows[0].memory(points[:1])[0], rtol=1e-5, atol=1e-6)
    assert torch.equal(got_memory[1], torch.zeros(model.dim))


def test_the_engine_draws_the_replay_batch_apart_for_nccl(tmp_path):
    loop = loop_of(tmp_path, spec_of(raw_with(), "nccl_fl"))
    assert loop.local_cfg.replay_apart and loop.local_cfg.replay is not None
    for t in (1, 2, 3):
        loop.round(t)  # task 1: the memory holds task 0
    train, batcher = loop.s.data.train, loop.fed.batcher
    position = int(batcher.cursor[0])
    idx = batcher.next(0)
    batcher.cursor[0] = position
    x, y, current = loop.local_cfg.batch_parts(train, batcher, 0)
    assert current == len(idx) and len(y) == current + 5 and torch.equal(y[:current], train.y[idx])
    assert set(y[current:].tolist()) <= set(train.y[loop.plugin(ContinualStream).memory.indices(0)].tolist())


def test_through_the_engine_nccl_fl_is_fedavg_on_task_0_and_costs_what_fedavg_costs(tmp_path):
    avg, _, _ = run(tmp_path, spec_of(raw_with(), "fedavg"), "avg")
    nccl, extras, _ = run(tmp_path, spec_of(raw_with(), "nccl_fl"), "nccl")
    same = ["test_acc", "test_loss", "train_loss"]
    pd.testing.assert_frame_equal(avg[same][:2], nccl[same][:2])  # the draw never joins the minibatch
    assert not np.allclose(avg["test_loss"][2:], nccl["test_loss"][2:])
    assert (nccl["bits_up"] == 3 * P * 32).all() and (nccl["bits_down"] == avg["bits_down"]).all()
    later = [sum(e["nccl"]["interfering_steps"]) + sum(e["nccl"]["transferring_steps"]) for e in extras[2:]]
    assert later == [3 * 3] * 4  # every step of every client adapts once the memory is filled (3 steps × 3 clients)
