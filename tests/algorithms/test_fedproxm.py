"""FedProxM (GradMA Alg. 5) against a NumPy FedProx-local + momentum-server transcription."""

import numpy as np
import torch

from fedbench.algorithms import ALGORITHMS
from tests.algorithms.toy import Quadratics, make_algorithm, run_rounds, weights_np

SCHEDULE = [[0, 2], [1, 2, 3], [0, 3], [1, 2]]
STEPS = [3, 2, 4, 1]
LR = 0.05
X0 = np.array([0.3, -0.2, 0.1])


def fedproxm_reference(fed, x, mu, beta1, eta_g, weighting="samples"):
    """GradMA Alg. 5 in its own signs: d^(i) = x_t − x_{t,I}^(i), m ← β1·m + Σw_i d^(i), x ← x − η_g·m."""
    m = np.zeros_like(x)
    for clients in SCHEDULE:
        ds = []
        for i in clients:
            y = x.copy()
            for _ in range(STEPS[i]):
                y = y - LR * (fed.grad_np(i, y) + mu * (y - x))
            ds.append(x - y)
        d = sum(w * di for w, di in zip(weights_np(fed, clients, weighting), ds))
        m = beta1 * m + d
        x = x - eta_g * m
    return x


def test_fedproxm_defaults_to_server_momentum_half():
    entry = ALGORITHMS.get("fedproxm")
    assert entry.obj.caps.server == {"momentum": 0.5}
    assert entry.params().mu == 0.01


def test_fedproxm_matches_algorithm_5():
    fed = Quadratics()
    algo, spec = make_algorithm("fedproxm", fed, server={"lr": 0.7}, mu=0.4)
    assert spec.momentum == 0.5
    state = run_rounds(algo, fed, X0, SCHEDULE, STEPS, LR)
    np.testing.assert_allclose(state.x.numpy(), fedproxm_reference(fed, X0, 0.4, 0.5, 0.7), rtol=1e-11)


def test_fedproxm_uniform_weighting_other_momentum():
    fed = Quadratics()
    algo, _ = make_algorithm("fedproxm", fed, server={"momentum": 0.9, "weighting": "uniform"}, mu=0.1)
    state = run_rounds(algo, fed, X0, SCHEDULE, STEPS, LR, weighting="uniform")
    np.testing.assert_allclose(state.x.numpy(), fedproxm_reference(fed, X0, 0.1, 0.9, 1.0, "uniform"), rtol=1e-11)


def test_fedproxm_without_momentum_is_fedprox():
    fed = Quadratics()
    m0, _ = make_algorithm("fedproxm", fed, server={"momentum": 0.0}, mu=0.3)
    prox, _ = make_algorithm("fedprox", fed, mu=0.3)
    assert torch.equal(run_rounds(m0, fed, X0, SCHEDULE, STEPS, LR).x, run_rounds(prox, fed, X0, SCHEDULE, STEPS, LR).x)
