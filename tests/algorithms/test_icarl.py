"""iCaRL-FL: the local loss and gradient match an independent BCE/distillation computation, herding
matches a NumPy re-derivation of iCaRL Alg. 4, the engine's exemplars keep the random memory's class
counts and are the herded ones of independently computed features, the recorded accuracy-matrix row is
the nearest-mean-of-exemplars one (independent NumPy NME) with the network's row kept beside it, a resumed
run is identical, and Split-digits records the accuracy matrix in task and class mode at FedAvg's cost."""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from torch.nn.utils import vector_to_parameters

from fedbench.algorithms import ALGORITHMS
from fedbench.algorithms.base import TaskData
from fedbench.algorithms.icarl import ICaRLObjective, herding
from fedbench.continual.memory import ReplayMemory
from fedbench.continual.tasks import TaskStream
from fedbench.engine.local import GradientOracle, LocalConfig
from fedbench.engine.task_stream import ContinualStream
from fedbench.models import build_model
from fedbench.models.flat import FlatModel
from fedbench.scenario import AugmentSpec, parse_scenario, resolve_runs, run_id_of
from fedbench.store import ResultsStore
from tests.algorithms.toy import Quadratics, make_algorithm
from tests.continual.common import COLS, P, loop_of, matrix, raw_with, run

CFG = LocalConfig(weight_decay=0.0, clip_grad_norm=None, augment=AugmentSpec(), seed=0)
CLASS_TASK = np.array([0, 0, 1, 1, 2, 2])  # training task 2; classes 0-3 are old


def tiny_mlp():
    torch.manual_seed(0)
    return build_model("mlp", {"hidden": [6, 5]}, (4,), 6).double()


def label_mask(mode: str | None) -> torch.Tensor | None:
    if mode is None:
        return None
    if mode == "task":
        return torch.as_tensor(CLASS_TASK[:, None] == CLASS_TASK[None, :])
    return torch.ones(6, 6, dtype=torch.bool)


def icarl_by_hand(w, w_old, x, y, mode, old):
    """(1/B) Σ_b Σ_{c ∈ allowed(y_b) ∪ old} −[t log σ(z) + (1−t) log(1−σ(z))], t = σ(z_old) on old classes, else δ."""
    net, old_net = tiny_mlp(), tiny_mlp()
    vector_to_parameters(w, net.parameters())
    vector_to_parameters(w_old, old_net.parameters())
    z, z_old = net(x), old_net(x).detach()
    mask = label_mask(mode)
    total = 0.0
    for b in range(len(y)):
        for c in range(6):
            allowed = True if mask is None else bool(mask[y[b], c])
            if not (allowed or c in old):
                continue
            t = 1 / (1 + torch.exp(-z_old[b, c])) if c in old else float(c == y[b])
            s = 1 / (1 + torch.exp(-z[b, c]))
            total = total - (t * torch.log(s) + (1 - t) * torch.log(1 - s))
    loss = total / len(y)
    grads = torch.autograd.grad(loss, list(net.parameters()))
    return loss.detach(), torch.cat([g.reshape(-1) for g in grads])


@pytest.mark.parametrize("mode,old", [("task", [0, 1, 2, 3]), ("class", [0, 1, 2, 3]), ("class", []), (None, [])])
def test_icarl_loss_and_gradient_match_an_independent_computation(mode, old):
    flat = FlatModel(tiny_mlp())
    flat.label_mask = label_mask(mode)
    g = torch.Generator().manual_seed(2)
    x = torch.randn(8, 4, generator=g, dtype=torch.float64)
    y = torch.tensor([4, 5, 4, 5, 0, 3, 1, 2])  # current samples, then exemplars of old classes
    w, w_old = (flat.flatten() + 0.4 * torch.randn(flat.dim, generator=g, dtype=torch.float64) for _ in range(2))
    old_mask = torch.tensor([c in old for c in range(6)]) if old else torch.zeros(0, dtype=torch.bool)
    oracle = GradientOracle(flat, {}, x, y, CFG)
    got = oracle(w.unsqueeze(0), objective=ICaRLObjective(w_old[None], old_mask[None]))[0]
    loss, want = icarl_by_hand(w, w_old, x, y, mode, old)
    torch.testing.assert_close(oracle.first_loss, loss, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


def herding_numpy(features: np.ndarray, count: int) -> list[int]:
    """iCaRL Alg. 4 (float64): p_k = argmin_x ‖μ − (φ(x) + Σ_{j<k} φ(p_j))/k‖ over unpicked x, first index on ties."""
    mu = features.mean(axis=0)
    picked: list[int] = []
    for k in range(1, count + 1):
        best, best_d = -1, np.inf
        for i, f in enumerate(features):
            if i in picked:
                continue
            d = np.linalg.norm(mu - (f + features[picked].sum(axis=0)) / k)
            if d < best_d:
                best, best_d = i, d
        picked.append(best)
    return picked


def test_herding_matches_numpy_and_picks_distinct_samples():
    rng = np.random.default_rng(4)
    feats = rng.normal(size=(30, 5))
    feats /= np.linalg.norm(feats, axis=1, keepdims=True)
    for count in (1, 7, 30):
        got = herding(torch.tensor(feats), count)
        assert got == herding_numpy(feats, count)
        assert len(set(got)) == count
    assert herding(torch.tensor(feats), 40) == herding_numpy(feats, 30)  # capped at n


def test_nme_uses_renormalised_class_means():
    """Class 0's exemplars sit at ±60° of the query (mean norm 0.5), class 1's at 20°: with the means
    re-normalised (iCaRL) the query is class 0; with raw means it would be class 1."""
    feats = torch.tensor([[0.5, 0.75**0.5], [0.5, -(0.75**0.5)], [np.cos(0.35), np.sin(0.35)]], dtype=torch.float32)
    train_y, test_feats, test_y = torch.tensor([0, 0, 1]), torch.tensor([[1.0, 0.0]]), torch.tensor([0])

    def outputs(point, split, indices=None):
        f, y = (feats, train_y) if split == "train" else (test_feats, test_y)
        idx = torch.arange(len(y)) if indices is None else torch.as_tensor(indices)
        return f[idx], torch.zeros(len(idx), 2), y[idx]

    stream = TaskStream(((0, 1),), np.array([0, 0]), (np.arange(3),), (np.arange(1),), "class")
    memory = ReplayMemory(1, 3, 0)
    memory.slots = [[np.arange(3)]]
    algo, _ = make_algorithm("icarl_fl", Quadratics(num_clients=1, dim=3))
    data = TaskData(0, torch.tensor([3.0]), lambda *a, **k: None, stream, (torch.arange(3),), outputs, memory)
    logs = algo.score(data, torch.zeros(3))
    assert logs["task_acc"] == logs["task_acc_nme"] == [1.0]
    raw = torch.stack([feats[:2].mean(0), feats[2]])
    assert int(torch.cdist(test_feats, raw).argmin()) == 1  # the case does tell the two apart
    assert logs["nme_bits_up"] == 2 * 3 * 32 and logs["nme_bits_down"] == 2 * 2 * 32


# -- through the engine ----------------------------------------------------------------------
GROUPS = [[0, 1, 2], [3, 4, 5], [6, 7, 8]]


def spec_with(algorithm: dict, changes: dict | None = None, **top):
    return resolve_runs(parse_scenario({**raw_with(changes, **top), "algorithms": [algorithm]}))[0]


def features_np(module, flat, x) -> np.ndarray:
    """Independent: the mlp's penultimate features relu(fc1 x), L2-normalised, float64."""
    vector_to_parameters(flat, module.parameters())
    with torch.no_grad():
        h = F.relu(module.fc1(x.flatten(1))).double().numpy()
    return h / np.maximum(np.linalg.norm(h, axis=1, keepdims=True), 1e-12)


@pytest.mark.parametrize("mode", ["task", "class"])
def test_task_end_herds_exemplars_and_scores_the_nearest_mean_of_exemplars(tmp_path, mode):
    loop = loop_of(tmp_path, spec_with({"name": "icarl_fl"}, {"continual.mode": mode}))
    loop.round(1)
    _, extra = loop.round(2)  # task 0 ends
    x, train, test = loop.state.x.clone(), loop.s.data.train, loop.s.data.test
    module = copy.deepcopy(loop.s.model.module)
    labels = train.y.numpy()
    parts = [p.numpy() for p in loop.s.tasks.parts[0]]
    random = ReplayMemory(3, 12, 0)
    random.fill(0, parts, labels)  # the engine's class-balanced random slot, drawn again
    for client, part in enumerate(parts):
        slot = loop.plugin(ContinualStream).memory.slots[client][0]
        assert np.array_equal(
            np.bincount(labels[slot], minlength=10), np.bincount(labels[random.slots[client][0]], minlength=10)
        )
        feats = features_np(module, x, train.x[torch.as_tensor(part)])
        want = []
        for c in np.unique(labels[slot]):
            rows = np.flatnonzero(labels[part] == c)
            want += part[rows[herding_numpy(feats[rows], int((labels[slot] == c).sum()))]].tolist()
        assert sorted(want) == slot.tolist()
    # NME over every client's exemplars, independently
    exemplars = np.concatenate([loop.plugin(ContinualStream).memory.indices(c) for c in range(3)])
    ex_feats = features_np(module, x, train.x[torch.as_tensor(exemplars)])
    means = np.full((10, ex_feats.shape[1]), np.nan)
    for c in np.unique(labels[exemplars]):
        m = ex_feats[labels[exemplars] == c].mean(axis=0)
        means[c] = m / np.linalg.norm(m)
    t_feats, t_y = features_np(module, x, test.x), test.y.numpy()
    allowed = (lambda y: GROUPS[y // 3] if y < 9 else list(range(10))) if mode == "task" else (lambda y: [0, 1, 2])
    pred = np.array(
        [
            min(
                (c for c in allowed(y) if not np.isnan(means[c, 0])),
                key=lambda c: np.linalg.norm(f - means[c]),
                default=-1,
            )
            for f, y in zip(t_feats, t_y)
        ]
    )
    with torch.no_grad():
        vector_to_parameters(x, module.parameters())
        logits = module(test.x).numpy()
    net_pred = np.array([max(allowed(y), key=lambda c: logits[i, c]) for i, y in enumerate(t_y)])
    tasks = [np.isin(t_y, g) for g in GROUPS]
    # float32 means; one test sample moves an entry by ≥ 1/200
    assert extra["task_acc"] == pytest.approx([float((pred == t_y)[t].mean()) for t in tasks], abs=1e-6)
    assert extra["task_acc_nme"] == extra["task_acc"]
    assert extra["task_acc_network"] == pytest.approx([float((net_pred == t_y)[t].mean()) for t in tasks], abs=1e-6)
    assert extra["task_acc"][1:] == [0.0, 0.0]  # no exemplar means for tasks not seen yet
    assert extra["nme_bits_up"] == 3 * 3 * 17 * 32 and extra["nme_bits_down"] == 3 * 3 * 16 * 32
    torch.testing.assert_close(loop.state.old_model, x, rtol=0, atol=0)
    assert loop.state.old.tolist() == [True] * 3 + [False] * 7


def test_network_classifier_keeps_the_engine_row_and_training_is_unchanged(tmp_path):
    nme, nme_extra, _ = run(tmp_path, spec_with({"name": "icarl_fl"}), "nme")
    net, net_extra, _ = run(tmp_path, spec_with({"name": "icarl_fl", "classifier": "network"}), "net")
    pd.testing.assert_frame_equal(nme[COLS], net[COLS])
    ends = [e for e in nme_extra if "task_acc" in e]
    assert [e["task_acc_network"] for e in ends] == matrix(net_extra)
    assert [e["task_acc_nme"] for e in ends] == matrix(nme_extra) != matrix(net_extra)
    assert ALGORITHMS.capabilities("icarl_fl").replay_per_step


def test_an_interrupted_run_resumes_with_the_herded_memory(tmp_path):
    spec = spec_with({"name": "icarl_fl"}, checkpoint_every=2)
    full, full_extra, _ = run(tmp_path, spec, "full")

    def interrupt(t, _):
        if t == 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, spec, "cut", on_round=interrupt)
    assert ResultsStore(tmp_path / "cut").checkpoint_path(run_id_of(spec, 0)).exists()
    resumed, resumed_extra, outcome = run(tmp_path, spec, "cut")
    assert outcome.status == "finished"
    pd.testing.assert_frame_equal(full[COLS], resumed[COLS])
    assert matrix(full_extra) == matrix(resumed_extra)


@pytest.mark.parametrize("mode", ["task", "class"])
def test_split_digits_records_the_accuracy_matrix_at_fedavg_cost(tmp_path, mode):
    frame, extras, outcome = run(tmp_path, spec_with({"name": "icarl_fl"}, {"continual.mode": mode}), mode)
    assert outcome.status == "finished", outcome
    a = np.array(matrix(extras))
    assert a.shape == (3, 3) and ((a >= 0) & (a <= 1)).all() and a[0, 0] > 1 / 3
    assert (frame["bits_up"] == 3 * P * 32).all() and (frame["bits_down"] == 3 * P * 32).all()
    assert [e["memory_sizes"] for e in extras if "task_acc" in e] == [[12] * 3, [24] * 3, [36] * 3]
