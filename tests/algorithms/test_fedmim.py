"""FedMIM, FedCM and FedSAM against NumPy transcriptions of their algorithms."""

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from fedbench.algorithms.fedmim import FedMIMParams
from tests.algorithms.toy import Quadratics, make_algorithm, run_rounds, weights_np

SCHEDULE = [[0, 2], [1, 2, 3], [0, 3], [1, 2], [0, 1, 2, 3]]
STEPS = [3, 2, 4, 1]
EQUAL = [3, 3, 3, 3]
LR = 0.05
X0 = np.array([0.3, -0.2, 0.1])


def fedmim_reference(fed, alpha, beta, steps):
    """FedMIM Alg. 1 with δ_s = (x_{s−1} − x_s)/K_i, history x_{−j} = x_0, η_g = 1."""
    J = max(len(alpha), len(beta))
    hist = [X0.copy() for _ in range(J + 1)]  # hist[j] = x_{t−j}
    A = 1 - sum(alpha)
    for clients in SCHEDULE:
        x = hist[0]
        new = []
        for i in clients:
            K = steps[i]
            delta = [(hist[j + 1] - hist[j]) / K for j in range(J)]
            m_a = sum((a * delta[j] for j, a in enumerate(alpha)), np.zeros(3))
            m_b = sum((b * delta[j] for j, b in enumerate(beta)), np.zeros(3))
            y = x.copy()
            for _ in range(K):
                y = (y - m_a) - A * LR * fed.grad_np(i, y - m_b)
            new.append(y)
        w = weights_np(fed, clients)
        x_next = x + sum(wi * (y - x) for wi, y in zip(w, new))
        hist = [x_next] + hist[:-1]
    return hist[0]


@pytest.mark.parametrize(
    "alpha,beta", [([0.6, 0.3], [0.9, 0.1]), ([0.9], []), ([0.3, 0.6], [0.1, 0.9]), ([0.5], [1.0])]
)
def test_fedmim_matches_algorithm_1(alpha, beta):
    fed = Quadratics()
    algo, _ = make_algorithm("fedmim", fed, alpha=alpha, beta=beta)
    state = run_rounds(algo, fed, X0, SCHEDULE, STEPS, LR)
    np.testing.assert_allclose(state.x.numpy(), fedmim_reference(fed, alpha, beta, STEPS), rtol=1e-11)


def test_fedmim_without_momentum_is_fedavg_exactly():
    fed = Quadratics()
    mim, _ = make_algorithm("fedmim", fed, alpha=[], beta=[])
    mim0, _ = make_algorithm("fedmim", fed, alpha=[0.0, 0.0], beta=[0.0])
    avg, _ = make_algorithm("fedavg", fed)
    x_avg = run_rounds(avg, fed, X0, SCHEDULE, STEPS, LR).x
    assert torch.equal(run_rounds(mim, fed, X0, SCHEDULE, STEPS, LR).x, x_avg)
    assert torch.equal(run_rounds(mim0, fed, X0, SCHEDULE, STEPS, LR).x, x_avg)


def test_fedmim_one_alpha_no_beta_is_fedcm_at_constant_lr():
    fed = Quadratics()
    mim, _ = make_algorithm("fedmim", fed, alpha=[0.9], beta=[])
    cm, _ = make_algorithm("fedcm", fed, alpha=0.1)
    torch.testing.assert_close(
        run_rounds(mim, fed, X0, SCHEDULE, EQUAL, LR).x,
        run_rounds(cm, fed, X0, SCHEDULE, EQUAL, LR).x,
        rtol=1e-12,
        atol=1e-14,
    )


def test_fedmim_round_recursion_is_multi_lag_heavy_ball_for_one_step():
    """Notes §1.3 (1) with K = 1, β = 0: x_{t+1} − x_t = Σ_j α_j (x_{t−j} − x_{t−j−1}) − A·η_l·ḡ(x_t)."""
    fed = Quadratics()
    alpha = [0.5, 0.2]
    algo, _ = make_algorithm("fedmim", fed, alpha=alpha, beta=[])
    xs = [X0, X0, X0]
    for r in range(1, len(SCHEDULE) + 1):
        xs.append(run_rounds(algo, fed, X0, SCHEDULE[:r], [1, 1, 1, 1], LR).x.numpy())
    for t in range(3, len(xs) - 1):
        clients = SCHEDULE[t - 2]
        g = sum(w * fed.grad_np(i, xs[t]) for w, i in zip(weights_np(fed, clients), clients))
        rhs = alpha[0] * (xs[t] - xs[t - 1]) + alpha[1] * (xs[t - 1] - xs[t - 2]) - (1 - sum(alpha)) * LR * g
        np.testing.assert_allclose(xs[t + 1] - xs[t], rhs, rtol=1e-9, atol=1e-13)


def test_fedmim_validation():
    with pytest.raises(ValidationError, match="sum\\(alpha\\) must be < 1"):
        FedMIMParams(alpha=[0.6, 0.4])
    with pytest.raises(ValidationError, match="≥ 0"):
        FedMIMParams(alpha=[0.5], beta=[-0.1])
    assert FedMIMParams().history == 2


def test_fedcm_matches_algorithm():
    fed = Quadratics()
    a = 0.3
    algo, _ = make_algorithm("fedcm", fed, alpha=a)
    state = run_rounds(algo, fed, X0, SCHEDULE, STEPS, LR)
    x, mom = X0.copy(), np.zeros(3)
    for clients in SCHEDULE:
        deltas = []
        for i in clients:
            y = x.copy()
            for _ in range(STEPS[i]):
                y = y - LR * (a * fed.grad_np(i, y) + (1 - a) * mom)
            deltas.append(y - x)
        w = weights_np(fed, clients)
        mom = -sum(wi * d / (STEPS[i] * LR) for wi, d, i in zip(w, deltas, clients))
        x = x + sum(wi * d for wi, d in zip(w, deltas))
    np.testing.assert_allclose(state.x.numpy(), x, rtol=1e-11)
    np.testing.assert_allclose(state.momentum.numpy(), mom, rtol=1e-11)


def test_fedsam_matches_sam_step():
    fed = Quadratics()
    rho = 0.2
    algo, _ = make_algorithm("fedsam", fed, rho=rho)
    state = run_rounds(algo, fed, X0, SCHEDULE, STEPS, LR)
    x = X0.copy()
    for clients in SCHEDULE:
        new = []
        for i in clients:
            y = x.copy()
            for _ in range(STEPS[i]):
                g = fed.grad_np(i, y)
                y = y - LR * fed.grad_np(i, y + rho * g / np.linalg.norm(g))
            new.append(y)
        x = x + sum(wi * (y - x) for wi, y in zip(weights_np(fed, clients), new))
    np.testing.assert_allclose(state.x.numpy(), x, rtol=1e-11)
