"""FedAvg, FedProx and the server-optimizer family against NumPy re-derivations."""

import numpy as np
import pytest
import torch

from tests.algorithms.toy import Quadratics, make_algorithm, run_rounds, weights_np

SCHEDULE = [[0, 2], [1, 2, 3], [0, 3]]
STEPS = [3, 2, 4, 1]
LR = 0.05


def local_sgd(fed, i, x, lr, steps, mu=0.0):
    anchor = x.copy()
    for _ in range(steps):
        x = x - lr * (fed.grad_np(i, x) + mu * (x - anchor))
    return x


def mean_delta(fed, x, clients, mu=0.0):
    w = weights_np(fed, clients)
    return sum(wi * (local_sgd(fed, i, x, LR, STEPS[i], mu) - x) for wi, i in zip(w, clients))


def test_fedavg_matches_weighted_local_sgd():
    fed = Quadratics()
    x = np.array([0.3, -0.2, 0.1])
    algo, _ = make_algorithm("fedavg", fed)
    state = run_rounds(algo, fed, x, SCHEDULE, STEPS, LR)
    for clients in SCHEDULE:
        x = x + mean_delta(fed, x, clients)
    np.testing.assert_allclose(state.x.numpy(), x, rtol=1e-12)


def test_fedprox_adds_proximal_gradient_and_reduces_to_fedavg_at_mu_zero():
    fed = Quadratics()
    x0 = np.array([0.3, -0.2, 0.1])
    prox, _ = make_algorithm("fedprox", fed, mu=0.7)
    x = x0
    for clients in SCHEDULE:
        x = x + mean_delta(fed, x, clients, mu=0.7)
    np.testing.assert_allclose(run_rounds(prox, fed, x0, SCHEDULE, STEPS, LR).x.numpy(), x, rtol=1e-12)
    zero, _ = make_algorithm("fedprox", fed, mu=0.0)
    avg, _ = make_algorithm("fedavg", fed)
    assert torch.equal(
        run_rounds(zero, fed, x0, SCHEDULE, STEPS, LR).x, run_rounds(avg, fed, x0, SCHEDULE, STEPS, LR).x
    )


def test_fedavgm_momentum_and_server_lr():
    fed = Quadratics()
    x = np.array([0.3, -0.2, 0.1])
    algo, _ = make_algorithm("fedavgm", fed, server={"momentum": 0.8, "lr": 0.5})
    state = run_rounds(algo, fed, x, SCHEDULE, STEPS, LR)
    m = np.zeros(3)
    for clients in SCHEDULE:
        m = 0.8 * m + mean_delta(fed, x, clients)
        x = x + 0.5 * m
    np.testing.assert_allclose(state.x.numpy(), x, rtol=1e-12)


def test_fedavgm_with_zero_momentum_unit_lr_is_fedavg():
    fed = Quadratics()
    x0 = np.array([0.3, -0.2, 0.1])
    m0, _ = make_algorithm("fedavgm", fed, server={"momentum": 0.0})
    avg, _ = make_algorithm("fedavg", fed)
    assert torch.equal(run_rounds(m0, fed, x0, SCHEDULE, STEPS, LR).x, run_rounds(avg, fed, x0, SCHEDULE, STEPS, LR).x)


@pytest.mark.parametrize("name", ["fedadam", "fedyogi", "fedamsgrad"])
@pytest.mark.parametrize("bias_correction", [False, True])
def test_adaptive_server_optimizers(name, bias_correction):
    """Reddi et al. 2021 Alg. 2 (FedAdam/FedYogi) and FedAMSGrad, v_0 = 0, Δ = mean model change."""
    fed = Quadratics()
    x = np.array([0.3, -0.2, 0.1])
    b1, b2, eta, tau = 0.9, 0.99, 0.1, 1e-3
    algo, _ = make_algorithm(name, fed, server={"bias_correction": bias_correction})
    state = run_rounds(algo, fed, x, SCHEDULE, STEPS, LR)
    m, v, vmax = np.zeros(3), np.zeros(3), np.zeros(3)
    for t, clients in enumerate(SCHEDULE, start=1):
        d = mean_delta(fed, x, clients)
        m = b1 * m + (1 - b1) * d
        if name == "fedyogi":
            v = v - (1 - b2) * d**2 * np.sign(v - d**2)
        else:
            v = b2 * v + (1 - b2) * d**2
        vmax = np.maximum(vmax, v)
        second = vmax if name == "fedamsgrad" else v
        first = m
        if bias_correction:
            first, second = m / (1 - b1**t), second / (1 - b2**t)
        x = x + eta * first / (np.sqrt(second) + tau)
    np.testing.assert_allclose(state.x.numpy(), x, rtol=1e-10)


def test_uniform_weighting_is_plain_mean():
    fed = Quadratics()
    x0 = np.array([0.3, -0.2, 0.1])
    algo, _ = make_algorithm("fedavg", fed)
    state = run_rounds(algo, fed, x0, [[0, 1, 3]], STEPS, LR, weighting="uniform")
    expected = np.mean([local_sgd(fed, i, x0, LR, STEPS[i]) for i in [0, 1, 3]], axis=0)
    np.testing.assert_allclose(state.x.numpy(), expected, rtol=1e-12)
