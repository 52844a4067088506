"""FedMLB/FedMLBM: hybrid paths equal an independent module-level computation (local layers, then
a copy of the model holding the global weights), the loss and gradient match the authors'
formulation written out with autograd, λ1 = λ2 = 0 is FedAvg through the engine, and short runs
finish on digits (mlp) and MNIST-1D (cnn1d)."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from pydantic import ValidationError
from torch import nn
from torch.nn.utils import vector_to_parameters

from fedbench.algorithms import ALGORITHMS
from fedbench.algorithms.fedmlb import MLBObjective
from fedbench.engine.local import GradientOracle, LocalConfig
from fedbench.engine.runner import RoundLoop, execute_run
from fedbench.engine.setup import DataCache, build_run
from fedbench.models import build_model
from fedbench.models.flat import FlatModel
from fedbench.options import RunOptions
from fedbench.scenario import AugmentSpec, parse_scenario, resolve_runs
from fedbench.store import ResultsStore
from tests.factories import tiny_scenario

CFG = LocalConfig(weight_decay=0.0, clip_grad_norm=None, augment=AugmentSpec(), seed=0)


def tiny_mlp(seed=0):
    torch.manual_seed(seed)
    return build_model("mlp", {"hidden": [6, 5]}, (4,), 3).double()


def loaded(make, vec):
    module = make()
    vector_to_parameters(vec, module.parameters())
    return module


def points(flat, n=2, scale=0.3, seed=7):
    torch.manual_seed(seed)
    return [flat.flatten() + scale * torch.randn(flat.dim, dtype=flat.flatten().dtype) for _ in range(n)]


# -- hybrid paths -----------------------------------------------------------------------------
def test_mlp_hybrid_paths_equal_local_layers_then_global_module():
    flat = FlatModel(tiny_mlp())
    w, w_glob = points(flat)
    local, glob = loaded(tiny_mlp, w), loaded(tiny_mlp, w_glob)
    x = torch.randn(5, 4, dtype=torch.float64)
    h1 = torch.relu(local.fc1(x))
    h2 = torch.relu(local.fc2(h1))
    q1 = glob.out(torch.relu(glob.fc2(h1)))  # global blocks 2..B
    q2 = glob.out(h2)  # global classifier only
    features = flat.run_stages(w, {}, x)
    torch.testing.assert_close(flat.run_stages(w_glob, {}, features[0], start=1)[-1], q1, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(flat.run_stages(w_glob, {}, features[1], start=2)[-1], q2, rtol=1e-12, atol=1e-14)


def test_lenet5_hybrid_path_equals_local_convs_then_global_copy():
    torch.manual_seed(0)
    make = lambda: build_model("lenet5", {}, (1, 16, 16), 4)  # noqa: E731
    flat = FlatModel(make())
    w, w_glob = points(flat, scale=0.05)
    local, glob = loaded(make, w), loaded(make, w_glob)
    x = torch.randn(3, 1, 16, 16)
    h2 = F.max_pool2d(F.relu(local.conv2(F.max_pool2d(F.relu(local.conv1(x)), 2))), 2)  # local blocks 1–2
    q2 = glob.fc3(F.relu(glob.fc2(F.relu(glob.fc1(h2.flatten(1))))))  # global blocks 3–4 + classifier
    features = flat.run_stages(w, {}, x)
    torch.testing.assert_close(flat.run_stages(w_glob, {}, features[1], start=2)[-1], q2, rtol=1e-5, atol=1e-6)


# -- FedMLB's loss --------------------------------------------------------------------------
def fedmlb_by_hand(w, w_glob, x, y, lambda1, lambda2, temperature, branches):
    """The authors' formulation (local_update_method/FedMLB.py) on module copies, with autograd."""
    local, glob = loaded(tiny_mlp, w), loaded(tiny_mlp, w_glob)
    for p in glob.parameters():
        p.requires_grad_(False)
    h1 = torch.relu(local.fc1(x))
    h2 = torch.relu(local.fc2(h1))
    logits = local.out(h2)
    hybrid = {1: glob.out(torch.relu(glob.fc2(h1))), 2: glob.out(h2)}
    kl = nn.KLDivLoss(reduction="batchmean")
    ce = [F.cross_entropy(hybrid[b], y) for b in branches]
    kd = [kl(F.log_softmax(logits / temperature, 1), F.softmax(hybrid[b] / temperature, 1)) for b in branches]
    loss = F.cross_entropy(logits, y) + lambda1 * sum(ce) / len(branches) + lambda2 * sum(kd) / len(branches)
    grads = torch.autograd.grad(loss, list(local.parameters()))
    return loss.detach(), torch.cat([g.reshape(-1) for g in grads])


@pytest.mark.parametrize(
    "lambda1,lambda2,temperature,branches",
    [(1.0, 1.0, 1.0, None), (0.7, 1.3, 2.0, None), (0.5, 2.0, 1.0, (2,)), (1.0, 0.4, 3.0, (1,))],
)
def test_fedmlb_loss_and_gradient_match_an_independent_computation(lambda1, lambda2, temperature, branches):
    flat = FlatModel(tiny_mlp())
    w, w_glob = points(flat)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(8, 4, generator=g, dtype=torch.float64), torch.randint(0, 3, (8,), generator=g)
    oracle = GradientOracle(flat, {}, x, y, CFG)
    got = oracle(w.unsqueeze(0), objective=MLBObjective(w_glob[None], lambda1, lambda2, temperature, branches))[0]
    loss, want = fedmlb_by_hand(w, w_glob, x, y, lambda1, lambda2, temperature, branches or (1, 2))
    torch.testing.assert_close(oracle.first_loss, loss, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    assert (got - GradientOracle(flat, {}, x, y, CFG)(w.unsqueeze(0))[0]).norm() > 1e-3


def test_model_declared_branches_are_the_default():
    flat = FlatModel(tiny_mlp())
    w, w_glob = points(flat)
    x, y = torch.randn(6, 4, dtype=torch.float64), torch.tensor([0, 1, 2, 0, 1, 2])
    grad = lambda branches: GradientOracle(flat, {}, x, y, CFG)(  # noqa: E731
        w.unsqueeze(0), objective=MLBObjective(w_glob[None], 1.0, 1.0, 1.0, branches)
    )
    every, second = grad(None), grad((2,))
    flat.module.fedmlb_branches = (2,)
    assert torch.equal(grad(None), second) and not torch.equal(every, second)
    assert torch.equal(grad((1, 2)), every)  # explicit branches win over the model's


def test_branches_are_validated():
    with pytest.raises(ValidationError, match="distinct block numbers"):
        ALGORITHMS.get("fedmlb").params.model_validate({"branches": [0, 1]})
    with pytest.raises(ValidationError, match="distinct block numbers"):
        ALGORITHMS.get("fedmlb").params.model_validate({"branches": [2, 2]})
    flat = FlatModel(tiny_mlp())
    x, y = torch.randn(4, 4, dtype=torch.float64), torch.tensor([0, 1, 2, 0])
    with pytest.raises(ValueError, match="between 1 and 2"):
        GradientOracle(flat, {}, x, y, CFG)(
            flat.flatten().unsqueeze(0), objective=MLBObjective(flat.flatten()[None], 1, 1, 1, (3,))
        )
    assert ALGORITHMS.capabilities("fedmlb").batchable and ALGORITHMS.capabilities("fedmlbm").batchable


# -- engine runs ----------------------------------------------------------------------------
RAW = tiny_scenario({"model.hidden": [16, 8]}, name="fedmlb", rounds=4)


def final_model(tmp_path, algorithm):
    raw = {**copy.deepcopy(RAW), "algorithms": [algorithm]}
    spec = resolve_runs(parse_scenario(raw))[0]
    loop = RoundLoop(spec, 0, build_run(spec, 0, DataCache(tmp_path, False, torch.device("cpu"))))
    metrics = [loop.round(t)[0] for t in range(1, spec.rounds + 1)]
    return loop.state.x, [(m["train_loss"], m["test_loss"], m["bits_up"]) for m in metrics]


def test_fedmlb_with_zero_lambdas_is_fedavg_exactly(tmp_path):
    x_avg, m_avg = final_model(tmp_path, {"name": "fedavg"})
    x_mlb, m_mlb = final_model(tmp_path, {"name": "fedmlb", "lambda1": 0.0, "lambda2": 0.0})
    assert torch.equal(x_mlb, x_avg) and m_mlb == m_avg
    x_on, _ = final_model(tmp_path, {"name": "fedmlb"})
    assert not torch.equal(x_on, x_avg)
    x_m, _ = final_model(tmp_path, {"name": "fedmlbm", "lambda1": 0.0, "lambda2": 0.0})
    x_avgm, _ = final_model(tmp_path, {"name": "fedavgm", "server": {"momentum": 0.5}})
    assert torch.equal(x_m, x_avgm)  # FedMLBM = FedMLB's loss + FedAvgM with β = 0.5


@pytest.mark.parametrize(
    "dataset,model",
    [
        ({"name": "digits"}, {"name": "mlp", "hidden": [32, 16]}),
        ({"name": "mnist1d", "num_samples": 1000}, {"name": "cnn1d"}),
    ],
    ids=["digits-mlp", "mnist1d-cnn1d"],
)
@pytest.mark.parametrize("name", ["fedmlb", "fedmlbm"])
def test_short_run_finishes(tmp_path, dataset, model, name):
    raw = {**copy.deepcopy(RAW), "dataset": dataset, "model": model, "rounds": 3, "algorithms": [{"name": name}]}
    spec = resolve_runs(parse_scenario(raw))[0]
    store = ResultsStore(tmp_path / "store")
    out = execute_run(
        spec, 0, store, DataCache(tmp_path, False, torch.device("cpu")), "h", options=RunOptions(executor="batched")
    )
    assert out.status == "finished", out  # batched falls back to sequential for a custom local loss
    metrics = store.metrics([out.run_id])
    assert len(metrics) == 3 and metrics[["train_loss", "test_loss", "test_acc"]].iloc[-1].map(math.isfinite).all()


def test_models_without_blocks_fail_with_a_clear_error(tmp_path):
    raw = {
        **copy.deepcopy(RAW),
        "model": {"name": "convmixer", "dim": 8, "depth": 1, "kernel_size": 3, "patch_size": 2},
        "rounds": 1,
        "algorithms": [{"name": "fedmlb"}],
    }
    spec = resolve_runs(parse_scenario(raw))[0]
    out = execute_run(spec, 0, ResultsStore(tmp_path / "s"), DataCache(tmp_path, False, torch.device("cpu")), "h")
    assert (
        out.status == "failed" and "fedmlb needs a model split into blocks" in out.error and "'convmixer'" in out.error
    )
