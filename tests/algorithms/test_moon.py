"""MOON/MOONM: the objective hook keeps cross-entropy gradients exact, MOON's loss and gradient
match an independent autograd computation on plain nn.Module copies, μ = 0 is FedAvg through
the engine, and short runs finish on digits (mlp) and MNIST-1D (cnn1d)."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import vector_to_parameters

from fedbench.algorithms import ALGORITHMS, RoundContext
from fedbench.algorithms.moon import MoonObjective
from fedbench.engine.executor import choose_executor
from fedbench.engine.local import GradientOracle, LocalConfig
from fedbench.engine.runner import RoundLoop, execute_run
from fedbench.engine.setup import DataCache, build_run
from fedbench.engine.uploads import decoded
from fedbench.models import build_model
from fedbench.models.flat import FlatModel, RowFields
from fedbench.scenario import AugmentSpec, parse_scenario, resolve_runs
from fedbench.store import ResultsStore
from tests.algorithms.toy import Quadratics, make_algorithm
from tests.factories import tiny_scenario

CFG = LocalConfig(weight_decay=0.0, clip_grad_norm=None, augment=AugmentSpec(), seed=0)


def tiny_mlp(seed=0):
    torch.manual_seed(seed)
    return build_model("mlp", {"hidden": [6, 5]}, (4,), 3).double()


def batch(seed=1, n=8):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 4, generator=g, dtype=torch.float64), torch.randint(0, 3, (n,), generator=g)


@dataclass(frozen=True)
class Loss(RowFields):
    """A plain function as an objective (no row fields)."""

    f: Callable

    def __call__(self, model, point, buffers, x, y, mask=None):
        return self.f(model, point, buffers, x, y)


def ce_objective(model, point, buffers, x, y):
    return F.cross_entropy(model.logits(point, buffers, x), y)


def ce_by_stages(model, point, buffers, x, y):
    return F.cross_entropy(model.run_stages(point, buffers, x)[-1], y)


# -- the objective hook ---------------------------------------------------------------------
def test_cross_entropy_objective_gives_exactly_the_default_gradients():
    flat = FlatModel(tiny_mlp())
    x, y = batch()
    points = flat.flatten().unsqueeze(0) + 0.1 * torch.randn(3, flat.dim, dtype=torch.float64)
    cfg = LocalConfig(weight_decay=1e-2, clip_grad_norm=0.5, augment=AugmentSpec(), seed=0)
    default = GradientOracle(flat, {}, x, y, cfg)
    plain = default(points)
    for objective in (Loss(ce_objective), Loss(ce_by_stages)):
        oracle = GradientOracle(flat, {}, x, y, cfg)
        assert torch.equal(oracle(points, objective=objective), plain)
        assert torch.equal(oracle.first_loss, default.first_loss)
    # and the default is the plain autograd gradient of a module copy (then clipped + decayed)
    net = copy.deepcopy(flat.module)
    vector_to_parameters(points[1], net.parameters())
    loss = F.cross_entropy(net(x), y)
    g = torch.cat([t.reshape(-1) for t in torch.autograd.grad(loss, list(net.parameters()))])
    g = g * min(1.0, 0.5 / (g.norm() + 1e-6)) + 1e-2 * points[1]
    torch.testing.assert_close(plain[1], g, rtol=1e-12, atol=1e-14)


# -- MOON's loss ----------------------------------------------------------------------------
def moon_by_hand(w, w_glob, w_prev, x, y, mu, tau):
    """Three plain nn.Module copies, separate forward passes, MOON Eq. 3–4, autograd."""
    net, glob, prev = tiny_mlp(), tiny_mlp(), tiny_mlp()
    for module, vec in ((net, w), (glob, w_glob), (prev, w_prev)):
        vector_to_parameters(vec, module.parameters())
    rep = lambda m, v: F.relu(m.fc2(F.relu(m.fc1(v))))  # noqa: E731  penultimate features by hand
    z, zg, zp = rep(net, x), rep(glob, x).detach(), rep(prev, x).detach()
    assert min(z.norm(dim=1).min(), zg.norm(dim=1).min(), zp.norm(dim=1).min()) > 1e-3  # cosines well defined
    cos = lambda a, b: (a * b).sum(1) / (a.norm(dim=1) * b.norm(dim=1))  # noqa: E731
    eg, ep = torch.exp(cos(z, zg) / tau), torch.exp(cos(z, zp) / tau)
    l_con = (-torch.log(eg / (eg + ep))).mean()
    loss = F.cross_entropy(net(x), y) + mu * l_con
    grads = torch.autograd.grad(loss, list(net.parameters()))
    return loss.detach(), torch.cat([g.reshape(-1) for g in grads])


@pytest.mark.parametrize("mu,tau", [(1.0, 0.5), (5.0, 0.2), (0.3, 2.0)])
def test_moon_loss_and_gradient_match_an_independent_computation(mu, tau):
    flat = FlatModel(tiny_mlp())
    x, y = batch()
    torch.manual_seed(5)  # a draw where no sample's representation is all-zero (dead ReLUs)
    w, w_glob, w_prev = (flat.flatten() + 0.3 * torch.randn(flat.dim, dtype=torch.float64) for _ in range(3))
    oracle = GradientOracle(flat, {}, x, y, CFG)
    got = oracle(w.unsqueeze(0), objective=MoonObjective(w_glob[None], w_prev[None], mu, tau))[0]
    loss, want = moon_by_hand(w, w_glob, w_prev, x, y, mu, tau)
    torch.testing.assert_close(oracle.first_loss, loss, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    ce_only = GradientOracle(flat, {}, x, y, CFG)(w.unsqueeze(0))[0]
    assert (got - ce_only).norm() > 1e-3  # the contrastive term does move the gradient


def test_contrastive_gradient_vanishes_when_previous_equals_global():
    """First participation (previous := x_t): z_prev = z_glob, so ∇ℓ_con = 0 and MOON is plain CE."""
    flat = FlatModel(tiny_mlp())
    x, y = batch()
    w = flat.flatten() + 0.2
    g = flat.flatten()
    moon = GradientOracle(flat, {}, x, y, CFG)(w.unsqueeze(0), objective=MoonObjective(g[None], g[None], 3.0, 0.5))
    plain = GradientOracle(flat, {}, x, y, CFG)(w.unsqueeze(0))
    torch.testing.assert_close(moon, plain, rtol=1e-12, atol=1e-14)


# -- hooks: the previous-model table --------------------------------------------------------
def test_previous_model_is_the_global_model_until_a_client_has_trained():
    fed = Quadratics(num_clients=4, dim=3)
    algo, _ = make_algorithm("moon", fed)
    x0 = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64)
    state = algo.init_state(x0)
    clients = torch.tensor([1, 3])
    assert torch.equal(algo.client_state(state, clients).previous, x0.expand(2, -1))
    local = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=torch.float64)
    ctx = RoundContext(
        clients, 0.1, torch.ones(2), algo.broadcast(state, clients), algo.client_state(state, clients), 1
    )
    up = algo.upload(ctx, local, algo.local_init(ctx, local))
    assert set(up.sent) == {"delta"} and torch.equal(up.kept.previous, local)
    state, _ = algo.server_update(state, ctx, decoded(up), torch.tensor([0.5, 0.5], dtype=torch.float64))
    torch.testing.assert_close(state.x, local.mean(0))  # FedAvg, η_g = 1
    prev = algo.client_state(state, torch.tensor([0, 1, 3])).previous
    assert torch.equal(prev[0], state.x) and torch.equal(prev[1], local[0]) and torch.equal(prev[2], local[1])
    assert ALGORITHMS.capabilities("moon").batchable and ALGORITHMS.capabilities("moonm").batchable


def test_non_batchable_algorithms_take_the_sequential_executor():
    cuda = torch.device("cuda")
    assert not choose_executor("batched", cuda, batchable=False, chunk=4).batched
    assert not choose_executor("auto", cuda, batchable=False, chunk=4).batched
    assert choose_executor("auto", cuda, chunk=4).batched
    with pytest.raises(ValueError, match="executor must be one of"):
        choose_executor("fast", cuda, batchable=False)


# -- engine runs ----------------------------------------------------------------------------
RAW = tiny_scenario(name="moon", rounds=4)


def final_model(tmp_path, algorithm, raw=RAW, executor="auto"):
    raw = copy.deepcopy(raw)
    raw["algorithms"] = [algorithm]
    spec = resolve_runs(parse_scenario(raw))[0]
    loop = RoundLoop(spec, 0, build_run(spec, 0, DataCache(tmp_path, False, torch.device("cpu"))), executor)
    metrics = [loop.round(t)[0] for t in range(1, spec.rounds + 1)]
    return loop.state.x, [(m["train_loss"], m["test_loss"], m["bits_up"]) for m in metrics]


@pytest.mark.slow
def test_moon_with_mu_zero_is_fedavg_exactly(tmp_path):
    x_avg, m_avg = final_model(tmp_path, {"name": "fedavg"})
    x_moon, m_moon = final_model(tmp_path, {"name": "moon", "mu": 0.0})
    assert torch.equal(x_moon, x_avg) and m_moon == m_avg
    x_on, _ = final_model(tmp_path, {"name": "moon", "mu": 1.0})
    assert not torch.equal(x_on, x_avg)
    x_m, _ = final_model(tmp_path, {"name": "moonm", "mu": 0.0})
    x_avgm, _ = final_model(tmp_path, {"name": "fedavgm", "server": {"momentum": 0.5}})
    assert torch.equal(x_m, x_avgm)  # MOONM = MOON's loss + FedAvgM with β = 0.5


def test_batched_executor_trains_it_as_the_sequential_one(tmp_path):
    """MOON's loss on the batched rows (tests/engine/test_batched.py checks it in float64 to 1e-9): float32
    within float tolerance of the sequential executor's, which it no longer falls back to."""
    seq, m_seq = final_model(tmp_path, {"name": "moon"}, executor="sequential")
    bat, m_bat = final_model(tmp_path, {"name": "moon"}, executor="batched")
    torch.testing.assert_close(bat, seq, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.array(m_bat, dtype=float), np.array(m_seq, dtype=float), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize(
    "dataset,model",
    [
        ({"name": "digits"}, {"name": "mlp", "hidden": [32, 16]}),
        ({"name": "mnist1d", "num_samples": 1000}, {"name": "cnn1d"}),
    ],
    ids=["digits-mlp", "mnist1d-cnn1d"],
)
@pytest.mark.parametrize("name", ["moon", "moonm"])
def test_short_run_finishes(tmp_path, dataset, model, name):
    raw = {**copy.deepcopy(RAW), "dataset": dataset, "model": model, "rounds": 3, "algorithms": [{"name": name}]}
    spec = resolve_runs(parse_scenario(raw))[0]
    store = ResultsStore(tmp_path / "store")
    out = execute_run(spec, 0, store, DataCache(tmp_path, False, torch.device("cpu")), "h")
    assert out.status == "finished", out
    metrics = store.metrics([out.run_id])
    assert len(metrics) == 3 and metrics[["train_loss", "test_loss", "test_acc"]].iloc[-1].map(math.isfinite).all()


def test_models_without_blocks_fail_with_a_clear_error(tmp_path):
    raw = {**copy.deepcopy(RAW), "model": {"name": "logreg"}, "rounds": 1, "algorithms": [{"name": "moon"}]}
    spec = resolve_runs(parse_scenario(raw))[0]
    out = execute_run(spec, 0, ResultsStore(tmp_path / "s"), DataCache(tmp_path, False, torch.device("cpu")), "h")
    assert out.status == "failed" and "moon needs at least one hidden block" in out.error and "'logreg'" in out.error


class _BNNet(nn.Module):
    """A tiny BatchNorm net with blocks, defined here so the test needs no registered BN model."""

    def __init__(self):
        super().__init__()
        self.fc1, self.bn1, self.fc2 = nn.Linear(4, 6), nn.BatchNorm1d(6), nn.Linear(6, 3)

    def forward(self, x):
        return self.fc2(torch.relu(self.bn1(self.fc1(x))))

    def stages(self):
        return [lambda x: torch.relu(self.bn1(self.fc1(x))), self.fc2]


def test_frozen_passes_leave_the_batchnorm_statistics_alone():
    """Running statistics move once per step (the main pass), as with cross-entropy."""
    from fedbench.algorithms.fedmlb import MLBObjective

    torch.manual_seed(0)
    flat = FlatModel(_BNNet())
    x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))
    w = flat.flatten()
    other = w + 0.5 * torch.randn_like(w)
    plain = flat.buffers()
    GradientOracle(flat, plain, x, y, CFG)(w.unsqueeze(0))
    for objective in (
        MoonObjective(other[None], other[None] * 0.5, 1.0, 0.5),
        MLBObjective(other[None], 1.0, 1.0, 1.0),
    ):
        buffers = flat.buffers()
        GradientOracle(flat, buffers, x, y, CFG)(w.unsqueeze(0), objective=objective)
        assert buffers.keys() == plain.keys() and all(torch.equal(buffers[k], plain[k]) for k in plain)
