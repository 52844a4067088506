"""TARGET: the clients' loss and gradient (CE over the current task's classes + λ_KD·KD on synthetic
data) and the generator's loss terms (teacher CE, DeepInversion's BatchNorm matching, the adversarial
KL) match independent computations written out on plain nn.Module copies; the student's step and the
generator's first-order-MAML step match hand-written SGD/Adam; the first task is Fine-FL's step exactly;
runs through the engine are deterministic."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from torch.nn.utils import vector_to_parameters

from fedbench.algorithms import ALGORITHMS
from fedbench.algorithms.lwf import old_heads
from fedbench.algorithms.target import TargetObjective, TargetParams
from fedbench.algorithms.target_synthesis import BatchNormMatch, Synthesizer, build_generator, initialise
from fedbench.engine.local import GradientOracle, LocalConfig
from fedbench.models import build_model
from fedbench.models.flat import FlatModel
from fedbench.scenario import AugmentSpec, parse_scenario, resolve_runs
from fedbench.seeding import torch_stream
from tests.continual.common import COLS, P, loop_of, matrix, raw_with, run

CFG = LocalConfig(weight_decay=0.0, clip_grad_norm=None, augment=AugmentSpec(), seed=0)
CLASS_TASK = np.array([0, 0, 1, 1, 2, 2])  # 3 tasks × 2 classes; training task 2, tasks 0 and 1 are old
BOUNDS = (-2.0, 3.0)  # the range of the inputs (TaskData.input_range)
SMALL = {  # a server-side generation that takes well under a second
    "synthetic_batch": 4,
    "pool_size": 10,
    "synthesis_rounds": 3,
    "generator_steps": 2,
    "synthesis_batch": 4,
    "warmup": 1,
    "student_steps": 2,
    "student_batch": 3,
    "noise_dim": 5,
    "generator_width": 7,
}


def tiny_mlp():
    torch.manual_seed(0)
    return build_model("mlp", {"hidden": [6, 5]}, (4,), 6).double()


def tiny_bn():
    torch.manual_seed(0)
    return build_model("tinynn", {}, (4,), 6).double()


def label_mask(mode: str) -> torch.Tensor:
    if mode == "task":
        return torch.as_tensor(CLASS_TASK[:, None] == CLASS_TASK[None, :])
    return torch.ones(6, 6, dtype=torch.bool)


def net_at(make, w, buffers=None):
    net = make()
    vector_to_parameters(w, net.parameters())
    if buffers:
        for name, value in buffers.items():
            dict(net.named_buffers())[name].copy_(value)
    return net


def rows(old_model, heads, synthetic, kd, temperature):
    """TARGET's objective of one client, as its round hands it: one row of each field."""
    return TargetObjective(old_model.unsqueeze(0), heads.unsqueeze(0), synthetic.unsqueeze(0), kd, temperature)


def target_by_hand(w, w_old, x, y, xs, mode, kd, temperature):
    """CE over each sample's current-task classes (its own class kept) + kd·Σ_heads mean_b −Σ p_old log p_new."""
    net, old_net = net_at(tiny_mlp, w), net_at(tiny_mlp, w_old)
    z = net(x)
    rows = []
    for b in range(len(y)):
        yb = int(y[b])
        allowed = {4, 5} if mode == "class" or yb in (4, 5) else set()
        cols = sorted(allowed | {yb})
        rows.append(-z[b, yb] + torch.log(torch.exp(z[b, cols]).sum()))
    loss = torch.stack(rows).mean()
    zs, zs_old = net(xs), old_net(xs).detach()
    heads = [[0, 1], [2, 3]] if mode == "task" else [[0, 1, 2, 3]]
    for h in heads:
        e_old, e_new = torch.exp(zs_old[:, h] / temperature), torch.exp(zs[:, h] / temperature)
        p_old = e_old / e_old.sum(1, keepdim=True)
        log_new = zs[:, h] / temperature - torch.log(e_new.sum(1, keepdim=True))
        loss = loss + kd * (-(p_old * log_new).sum(1)).mean()
    grads = torch.autograd.grad(loss, list(net.parameters()))
    return loss.detach(), torch.cat([g.reshape(-1) for g in grads])


@pytest.mark.parametrize("mode", ["task", "class"])
@pytest.mark.parametrize("n", [8, 1])
@pytest.mark.parametrize("kd,temperature", [(25.0, 2.0), (0.5, 0.7)])
def test_client_loss_and_gradient_match_an_independent_computation(mode, n, kd, temperature):
    flat = FlatModel(tiny_mlp())
    flat.label_mask = label_mask(mode)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 4, generator=g, dtype=torch.float64)
    y = torch.tensor([4, 5, 4, 5, 5, 4, 1, 2])[:n]  # current task, plus two old labels (a replay draw)
    xs = torch.randn(max(n - 1, 1), 4, generator=g, dtype=torch.float64)  # synthetic batch
    w, w_old = (flat.flatten() + 0.4 * torch.randn(flat.dim, generator=g, dtype=torch.float64) for _ in range(2))
    heads = old_heads(CLASS_TASK, 1, mode)
    oracle = GradientOracle(flat, {}, x, y, CFG)
    got = oracle(w.unsqueeze(0), objective=rows(w_old, heads, xs, kd, temperature))[0]
    loss, want = target_by_hand(w, w_old, x, y, xs, mode, kd, temperature)
    torch.testing.assert_close(oracle.first_loss, loss, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    no_kd = GradientOracle(flat, {}, x, y, CFG)(w.unsqueeze(0), objective=rows(w_old, heads, xs[:0], kd, 2.0))
    assert (got - no_kd[0]).norm() > 1e-3  # the synthetic batch's distillation moves the gradient


def test_before_any_task_end_the_step_is_fine_fl_exactly():
    flat = FlatModel(tiny_mlp())
    flat.label_mask = label_mask("class")
    g = torch.Generator().manual_seed(2)
    x, y = torch.randn(5, 4, generator=g, dtype=torch.float64), torch.tensor([0, 1, 1, 0, 1])
    w = flat.flatten() + 0.3 * torch.randn(flat.dim, generator=g, dtype=torch.float64)
    xs = torch.randn(3, 4, generator=g, dtype=torch.float64)
    none = torch.zeros(0, dtype=torch.int64)
    got = GradientOracle(flat, {}, x, y, CFG)(w.unsqueeze(0), objective=rows(w, none, xs, 25.0, 2.0))
    plain = GradientOracle(flat, {}, x, y, CFG)(w.unsqueeze(0))
    assert torch.equal(got, plain)


def test_with_batchnorm_both_passes_move_the_step_statistics_and_the_old_model_uses_batch_statistics():
    flat = FlatModel(tiny_bn())
    flat.label_mask = label_mask("class")
    g = torch.Generator().manual_seed(11)
    x, y = torch.randn(6, 4, generator=g, dtype=torch.float64), torch.tensor([4, 5, 4, 5, 5, 4])
    xs = torch.randn(5, 4, generator=g, dtype=torch.float64)
    w, w_old = (flat.flatten() + 0.2 * torch.randn(flat.dim, generator=g, dtype=torch.float64) for _ in range(2))
    buffers = flat.buffers()
    oracle = GradientOracle(flat, buffers, x, y, CFG)
    got = oracle(w.unsqueeze(0), objective=rows(w_old, old_heads(CLASS_TASK, 1, "class"), xs, 3.0, 2.0))[0]
    net, old_net = net_at(tiny_bn, w).train(), net_at(tiny_bn, w_old).train()
    z, zs, zs_old = net(x), net(xs), old_net(xs).detach()  # train mode: batch statistics, running stats move
    ce = F.cross_entropy(z[:, [4, 5]], y - 4)
    p_old = torch.softmax(zs_old[:, :4] / 2.0, 1)
    loss = ce + 3.0 * (-(p_old * torch.log_softmax(zs[:, :4] / 2.0, 1)).sum(1)).mean()
    want = torch.cat([q.reshape(-1) for q in torch.autograd.grad(loss, list(net.parameters()))])
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    for name, value in net.named_buffers():  # the step's buffers saw the real and then the synthetic batch
        torch.testing.assert_close(buffers[name], value, rtol=1e-12, atol=1e-14)


# -- the server's generator ----------------------------------------------------------------------
def bn_buffers(flat: FlatModel, g: torch.Generator) -> dict[str, torch.Tensor]:
    """Random running statistics (means around 0, variances around 1) so that the matching is not trivial."""
    out = {}
    for name, value in flat.buffers().items():
        if name.endswith("running_mean"):
            out[name] = 0.3 * torch.randn(value.shape, generator=g, dtype=torch.float64)
        elif name.endswith("running_var"):
            out[name] = 0.5 + torch.rand(value.shape, generator=g, dtype=torch.float64)
        else:
            out[name] = value
    return out


def bn_by_hand(net, x):
    """Σ_l ‖σ̂²_l − var(h_l)‖ + ‖μ̂_l − mean(h_l)‖ over tinynn's two BatchNorm inputs, eval mode."""
    net.eval()
    h1 = net.fc1(x)
    h2 = net.fc2(torch.relu(net.bn1(h1)))
    total = x.new_zeros(())
    for h, bn in ((h1, net.bn1), (h2, net.bn2)):
        mean, var = h.mean(0), ((h - h.mean(0)) ** 2).mean(0)
        total = (
            total + torch.sqrt(((bn.running_var - var) ** 2).sum()) + torch.sqrt(((bn.running_mean - mean) ** 2).sum())
        )
    return total


def synthesizer(make, classes, buffers=None, seed=3, task=1, **changes):
    flat = FlatModel(make())
    g = torch.Generator().manual_seed(4)
    teacher = flat.flatten() + 0.2 * torch.randn(flat.dim, generator=g, dtype=torch.float64)
    buffers = bn_buffers(flat, g) if buffers is None else buffers
    params = TargetParams(**{**SMALL, **changes})
    return Synthesizer(params, flat, teacher, buffers, (4,), BOUNDS, torch.tensor(classes), seed, task), flat


@pytest.mark.parametrize("make", [tiny_bn, tiny_mlp], ids=["batchnorm", "no_batchnorm"])
def test_generator_loss_terms_match_an_independent_computation(make):
    synth, flat = synthesizer(make, [0, 1, 3], lam_ce=0.7, lam_bn=2.5, lam_adv=1.3)
    synth.bn = BatchNormMatch(flat.module, momentum=0.0)
    g = torch.Generator().manual_seed(5)
    x = torch.randn(6, 4, generator=g, dtype=torch.float64, requires_grad=True)
    labels = torch.tensor([0, 1, 2, 2, 0, 1])  # positions among the old classes 0, 1, 3
    got = synth.generator_loss(x, labels, adversarial=True)
    (got_grad,) = torch.autograd.grad(got, x)
    synth.bn.close()

    teacher = net_at(make, synth.teacher, synth.buffers).eval()
    student = net_at(make, synth.student, synth.student_buffers).eval()
    t, s = teacher(x)[:, [0, 1, 3]], student(x)[:, [0, 1, 3]]
    ce = torch.stack([-t[b, k] + torch.log(torch.exp(t[b]).sum()) for b, k in enumerate([0, 1, 2, 2, 0, 1])]).mean()
    p_t, p_s = torch.exp(t) / torch.exp(t).sum(1, keepdim=True), torch.exp(s) / torch.exp(s).sum(1, keepdim=True)
    kl = (p_t * torch.log(p_t / p_s)).sum(1)
    agree = (t.argmax(1) == s.argmax(1)).double()
    bn = bn_by_hand(teacher, x) if make is tiny_bn else x.new_zeros(())
    want = 0.7 * ce + 2.5 * bn - 1.3 * (kl * agree).mean()
    (want_grad,) = torch.autograd.grad(want, x)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(got_grad, want_grad, rtol=1e-9, atol=1e-12)
    assert agree.sum() > 0 and (make is tiny_mlp or bn > 0.1)  # every term is non-zero
    no_adv = synth.generator_loss(x, labels, adversarial=False)
    assert not torch.isclose(no_adv, got)  # the adversarial term is there when asked for


def test_the_statistics_momentum_mixes_the_earlier_rounds():
    flat = FlatModel(tiny_bn())
    buffers = bn_buffers(flat, torch.Generator().manual_seed(6))
    teacher = flat.flatten()
    bn = BatchNormMatch(flat.module, momentum=0.9)
    flat.module.eval()
    x1, x2 = (torch.randn(5, 4, generator=torch.Generator().manual_seed(k), dtype=torch.float64) for k in (7, 8))
    with bn.recording():
        flat.logits(teacher, buffers, x1)
    bn.end_round()
    with bn.recording():
        flat.logits(teacher, buffers, x2)
    got = bn.loss(teacher)
    bn.close()
    net = net_at(tiny_bn, teacher, buffers).eval()
    h1a, h1b = net.fc1(x1), net.fc1(x2)
    h2a, h2b = net.fc2(torch.relu(net.bn1(h1a))), net.fc2(torch.relu(net.bn1(h1b)))
    want = x1.new_zeros(())
    for ha, hb, layer in ((h1a, h1b, net.bn1), (h2a, h2b, net.bn2)):
        mean = 0.1 * hb.mean(0) + 0.9 * ha.mean(0)
        var = 0.1 * hb.var(0, unbiased=False) + 0.9 * ha.var(0, unbiased=False)
        want = want + (layer.running_var - var).norm() + (layer.running_mean - mean).norm()
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


def test_one_round_moves_the_generator_by_one_meta_adam_step_and_keeps_the_best_batch():
    synth, flat = synthesizer(tiny_bn, [0, 1], generator_steps=1, warmup=5, lr_generator=0.01)
    before = [q.detach().clone() for q in synth.generator.parameters()]
    synth.bn = BatchNormMatch(flat.module, synth.p.bn_momentum)
    synth.synthesis_round(0)
    synth.bn.close()
    # by hand: one step of the fast copy = gradient at G itself; meta Adam's first step is −lr·g/(|g| + ε)
    gen = build_generator(synth.p, (4,), BOUNDS).double()
    vector_to_parameters(torch.cat([b.reshape(-1) for b in before]), gen.parameters())
    draw = torch_stream(3, "target_noise", 1, 0)
    z = torch.randn(4, 5, generator=draw, dtype=torch.float64)
    labels = torch.randint(2, (4,), generator=draw)
    x = gen.train()(z)
    bn = BatchNormMatch(flat.module, momentum=0.0)
    with bn.recording():
        flat.module.eval()
        t = flat.logits(synth.teacher, synth.buffers, x)[:, [0, 1]]
    loss = 0.5 * F.cross_entropy(t, labels) + 10.0 * bn.loss(t)
    bn.close()
    grads = torch.autograd.grad(loss, list(gen.parameters()))
    for q, b, g in zip(synth.generator.parameters(), before, grads):
        torch.testing.assert_close(q.detach(), b - 0.01 * g / (g.abs() + 1e-8), rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(synth.parts[0], x.detach(), rtol=0, atol=0)  # one step: its batch is the best


def test_a_student_step_is_momentum_sgd_on_the_tempered_kl():
    synth, flat = synthesizer(tiny_mlp, [0, 2], student_steps=1, student_batch=3, student_lr=0.3)
    pool = torch.randn(5, 4, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    synth.parts = [pool]
    start = synth.student.clone()
    synth.student_round(4)
    idx = torch.randperm(5, generator=torch_stream(3, "target_student", 1, 4, 0))[:3]
    teacher, student = net_at(tiny_mlp, synth.teacher), net_at(tiny_mlp, start)
    t, s = teacher(pool[idx])[:, [0, 2]].detach() / 20.0, student(pool[idx])[:, [0, 2]] / 20.0
    p_t = torch.softmax(t, 1)
    kl = 400.0 * (p_t * (torch.log_softmax(t, 1) - torch.log_softmax(s, 1))).sum(1).mean()
    g = torch.cat([q.reshape(-1) for q in torch.autograd.grad(kl, list(student.parameters()))])
    torch.testing.assert_close(synth.student, start - 0.3 * (g + 1e-4 * start), rtol=1e-10, atol=1e-12)


def test_generation_is_seeded_capped_and_absent_without_batchnorm_terms():
    a, _ = synthesizer(tiny_bn, [0, 1, 2])
    b, _ = synthesizer(tiny_bn, [0, 1, 2])
    c, _ = synthesizer(tiny_bn, [0, 1, 2], task=2)
    pa, logs = a.run()
    pb, _ = b.run()
    pc, _ = c.run()
    assert pa.shape == (10, 4) and logs["target_pool"] == 10  # 3 rounds × 4, capped at 10
    assert torch.equal(pa, pb) and not torch.equal(pa, pc)
    assert "target_student_loss" in logs and math.isfinite(logs["target_generator_loss"])
    assert pa.min() >= BOUNDS[0] and pa.max() <= BOUNDS[1]  # in the data's domain
    gen = initialise(build_generator(TargetParams(**SMALL), (4,), BOUNDS), torch_stream(0, "target_generator", 0))
    assert [m.weight.tolist() for m in gen.modules() if isinstance(m, torch.nn.BatchNorm1d)][0] == [1.0] * 7
    assert build_generator(TargetParams(generator_width=2), (3, 8, 8), BOUNDS).__class__.__name__ == "ConvGenerator"
    with pytest.raises(ValueError, match="divisible by 4"):
        build_generator(TargetParams(generator="conv"), (1, 6, 6), BOUNDS)


# -- through the engine ----------------------------------------------------------------------------
def spec_with(algorithm: dict, changes: dict | None = None):
    return resolve_runs(parse_scenario({**raw_with(changes), "algorithms": [algorithm]}))[0]


def frame_of(tmp_path, name, algorithm, changes=None):
    frame, extras, outcome = run(tmp_path, spec_with(algorithm, changes), name)
    assert outcome.status == "finished", outcome
    return frame[COLS], np.array(matrix(extras)), extras


TWO_TASKS = {"continual.mode": "class", "continual.tasks": 2, "rounds": 4, "local.optimizer": "adam"}


def test_task_ends_set_the_old_model_the_heads_and_the_pool(tmp_path):
    loop = loop_of(tmp_path, spec_with({"name": "target_fl", **SMALL}, TWO_TASKS))
    loop.round(1)
    assert loop.state.heads.numel() == 0 and loop.state.synthetic.numel() == 0
    loop.round(2)  # task 0 ends: a pool of 10 digits (1×8×8: the conv generator)
    torch.testing.assert_close(loop.state.old_model, loop.state.x, rtol=0, atol=0)
    assert loop.state.heads.tolist() == [0, 0, 0] + [-1] * 7
    assert loop.state.synthetic.shape == (10, 1, 8, 8) and loop.state.synthetic.dtype == loop.state.x.dtype
    caps = ALGORITHMS.capabilities("target_fl")
    assert caps.batchable and caps.own_loss and not caps.population


def test_two_tasks_run_deterministically_and_task_zero_is_fine_fl(tmp_path):
    one, a_one, extras = frame_of(tmp_path, "one", {"name": "target_fl", **SMALL}, TWO_TASKS)
    two, a_two, _ = frame_of(tmp_path, "two", {"name": "target_fl", **SMALL}, TWO_TASKS)
    pd.testing.assert_frame_equal(one, two)
    assert np.array_equal(a_one, a_two) and a_one.shape == (2, 2)
    fine, a_fine, _ = frame_of(tmp_path, "fine", {"name": "fine_fl"}, TWO_TASKS)
    pd.testing.assert_frame_equal(fine.iloc[:2], one.iloc[:2])
    assert np.array_equal(a_fine[0], a_one[0]) and not np.allclose(fine["train_loss"][2:], one["train_loss"][2:])
    assert extras[1]["synthetic_bits_down"] == 3 * 10 * 64 * 32 and extras[1]["target_pool"] == 10
    assert (one["bits_up"] == 3 * P * 32).all() and (one["bits_down"] == 3 * P * 32).all()
