"""FedDyn against a NumPy transcription of Acar et al. (2021) Alg. 1."""

import numpy as np

from tests.algorithms.toy import Quadratics, make_algorithm, run_rounds

SCHEDULE = [[0, 2], [1, 2, 3], [0, 3], [1, 2]]
STEPS = [3, 2, 4, 1]
LR = 0.05
ALPHA = 0.3


def feddyn_reference(fed, theta):
    N = fed.num_clients
    grad_prev = np.zeros((N, fed.dim))  # ∇L_k(θ_k^{t−1})
    h = np.zeros(fed.dim)
    for clients in SCHEDULE:
        new = []
        for k in clients:
            th = theta.copy()
            for _ in range(STEPS[k]):  # gradient of L_k(θ) − <∇L_k(θ_k^{t−1}), θ> + α/2‖θ − θ^{t−1}‖²
                th = th - LR * (fed.grad_np(k, th) - grad_prev[k] + ALPHA * (th - theta))
            grad_prev[k] = grad_prev[k] - ALPHA * (th - theta)
            new.append(th)
        h = h - ALPHA / N * sum(th - theta for th in new)
        theta = np.mean(new, axis=0) - h / ALPHA
    return theta, h, grad_prev


def test_feddyn_matches_algorithm_1():
    fed = Quadratics()
    x0 = np.array([0.3, -0.2, 0.1])
    algo, spec = make_algorithm("feddyn", fed, alpha=ALPHA)
    assert spec.weighting == "uniform"  # the paper averages the active models uniformly
    state = run_rounds(algo, fed, x0, SCHEDULE, STEPS, LR, weighting=spec.weighting)
    theta, h, grad_prev = feddyn_reference(fed, x0)
    np.testing.assert_allclose(state.x.numpy(), theta, rtol=1e-11)
    np.testing.assert_allclose(state.h.numpy(), h, rtol=1e-11, atol=1e-14)
    np.testing.assert_allclose(state.grad_i.data.numpy(), grad_prev, rtol=1e-11, atol=1e-14)
