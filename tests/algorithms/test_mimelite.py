"""MimeLite (Karimireddy et al. 2020, SGDm base) against a NumPy transcription, and through the engine."""

import copy

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from fedbench.engine.runner import RoundLoop, execute_run, sample_clients
from fedbench.engine.setup import DataCache, build_run
from fedbench.options import RunOptions
from fedbench.scenario import parse_scenario, resolve_runs
from fedbench.store import ResultsStore
from tests.algorithms.toy import Quadratics, make_algorithm, run_rounds, weights_np
from tests.factories import tiny_scenario

SCHEDULE = [[0, 2], [1, 2, 3], [0, 3], [1, 2]]
STEPS = [3, 2, 4, 1]
LR = 0.05
X0 = np.array([0.3, -0.2, 0.1])


def mimelite_reference(fed, x, beta, eta_g, weighting="samples"):
    """Mime Alg. 1 with SGDm: c_i = ∇f_i(x); y ← y − η_l((1−β)∇f_i(y) + β s) with s frozen;
    s ← (1−β)Σw_i c_i + β s; x ← x + η_g Σw_i (y_i − x)."""
    s = np.zeros_like(x)
    for clients in SCHEDULE:
        w = weights_np(fed, clients, weighting)
        cs, dys = [], []
        for i in clients:
            cs.append(fed.grad_np(i, x))
            y = x.copy()
            for _ in range(STEPS[i]):
                y = y - LR * ((1 - beta) * fed.grad_np(i, y) + beta * s)
            dys.append(y - x)
        s_new = (1 - beta) * sum(wi * c for wi, c in zip(w, cs)) + beta * s
        x = x + eta_g * sum(wi * dy for wi, dy in zip(w, dys))
        s = s_new
    return x, s


def test_mimelite_matches_mime_algorithm_1():
    fed = Quadratics()
    algo, spec = make_algorithm("mimelite", fed, server={"lr": 0.7}, beta=0.6)
    assert spec.optimizer == "sgd" and spec.momentum == 0
    state = run_rounds(algo, fed, X0, SCHEDULE, STEPS, LR)
    x, s = mimelite_reference(fed, X0, 0.6, 0.7)
    np.testing.assert_allclose(state.x.numpy(), x, rtol=1e-11)
    np.testing.assert_allclose(state.s.numpy(), s, rtol=1e-11)


def test_mimelite_default_beta_uniform_weights():
    fed = Quadratics()
    algo, _ = make_algorithm("mimelite", fed, server={"weighting": "uniform"})
    assert algo.params.beta == 0.9
    state = run_rounds(algo, fed, X0, SCHEDULE, STEPS, LR, weighting="uniform")
    x, s = mimelite_reference(fed, X0, 0.9, 1.0, "uniform")
    np.testing.assert_allclose(state.x.numpy(), x, rtol=1e-11)
    np.testing.assert_allclose(state.s.numpy(), s, rtol=1e-11)


def test_mimelite_without_momentum_is_fedavg():
    fed = Quadratics()
    mime, _ = make_algorithm("mimelite", fed, beta=0.0)
    avg, _ = make_algorithm("fedavg", fed)
    assert torch.equal(
        run_rounds(mime, fed, X0, SCHEDULE, STEPS, LR).x, run_rounds(avg, fed, X0, SCHEDULE, STEPS, LR).x
    )


RAW = tiny_scenario({"partition.omega": 0.3}, name="mime", rounds=2)


def engine_metrics(tmp_path, name, executor="sequential"):
    raw = {**copy.deepcopy(RAW), "algorithms": [{"name": name}]}
    spec = resolve_runs(parse_scenario(raw))[0]
    store = ResultsStore(tmp_path / f"{name}-{executor}")
    out = execute_run(
        spec,
        0,
        store,
        DataCache(tmp_path / "data", False, torch.device("cpu")),
        "h",
        options=RunOptions(executor=executor),
    )
    assert out.status == "finished", out
    return store.metrics([out.run_id])


def test_mimelite_sends_twice_fedavgs_bits_each_way(tmp_path):
    P = 64 * 16 + 16 + 16 * 10 + 10
    avg, mime = engine_metrics(tmp_path, "fedavg"), engine_metrics(tmp_path, "mimelite")
    assert (avg["bits_up"] == 3 * P * 32).all() and (avg["bits_down"] == 3 * P * 32).all()
    assert (mime["bits_up"] == 2 * avg["bits_up"]).all() and (mime["bits_down"] == 2 * avg["bits_down"]).all()
    for name in ("mifa", "mifam", "fedproxm"):  # the other GradMA baselines cost what FedAvg costs
        other = engine_metrics(tmp_path, name)
        pd.testing.assert_series_equal(other["bits_up"], avg["bits_up"])
        pd.testing.assert_series_equal(other["bits_down"], avg["bits_down"])


def test_engine_momentum_is_built_from_full_local_gradients(tmp_path):
    """After round 1, s = (1−β)·Σ_i (n_i/Σn)·∇f_i(x_0) with ∇f_i the mean-loss gradient over
    client i's whole data, recomputed here in one pass with autograd on a copy of the module."""
    raw = {**copy.deepcopy(RAW), "algorithms": [{"name": "mimelite", "beta": 0.9}]}
    spec = resolve_runs(parse_scenario(raw))[0]
    setup = build_run(spec, 0, DataCache(tmp_path / "data", False, torch.device("cpu")))
    x0 = setup.x0.clone()
    loop = RoundLoop(spec, 0, setup, "sequential")
    loop.round(1)
    clients = sample_clients(8, 3, 0, 1).tolist()
    assert any(
        len(setup.federation.parts[c]) > 16 for c in clients
    )  # the engine's batching of the full gradient is exercised
    module = copy.deepcopy(setup.model.module)
    torch.nn.utils.vector_to_parameters(x0, module.parameters())
    sizes = torch.tensor([float(len(setup.federation.parts[c])) for c in clients])
    expected = torch.zeros_like(x0)
    for c, w in zip(clients, sizes / sizes.sum()):
        idx = setup.federation.parts[c]
        module.zero_grad()
        F.cross_entropy(module(setup.data.train.x[idx]), setup.data.train.y[idx]).backward()
        expected += w * torch.cat([p.grad.reshape(-1) for p in module.parameters()])
    torch.testing.assert_close(loop.state.s, 0.1 * expected, rtol=1e-4, atol=1e-6)
