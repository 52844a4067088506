"""SCAFFOLD option II against a NumPy transcription of Karimireddy et al. (2020) Alg. 1."""

import numpy as np
import torch

from tests.algorithms.toy import Quadratics, make_algorithm, run_rounds, weights_np

SCHEDULE = [[0, 2], [1, 2, 3], [0, 3], [1, 2]]
STEPS = [3, 2, 4, 1]
LR = 0.05


def scaffold_reference(fed, x, eta_g=1.0):
    N = fed.num_clients
    c, ci = np.zeros(fed.dim), np.zeros((N, fed.dim))
    for clients in SCHEDULE:
        dys, dcs = [], []
        for i in clients:
            y = x.copy()
            for _ in range(STEPS[i]):
                y = y - LR * (fed.grad_np(i, y) - ci[i] + c)
            ci_new = ci[i] - c + (x - y) / (STEPS[i] * LR)
            dys.append(y - x)
            dcs.append(ci_new - ci[i])
            ci[i] = ci_new
        w = weights_np(fed, clients)
        x = x + eta_g * sum(wi * d for wi, d in zip(w, dys))
        c = c + sum(dcs) / N
    return x, c, ci


def test_scaffold_matches_algorithm_1_option_2():
    fed = Quadratics()
    x0 = np.array([0.3, -0.2, 0.1])
    algo, _ = make_algorithm("scaffold", fed, server={"lr": 0.7})
    state = run_rounds(algo, fed, x0, SCHEDULE, STEPS, LR)
    x, c, ci = scaffold_reference(fed, x0, eta_g=0.7)
    np.testing.assert_allclose(state.x.numpy(), x, rtol=1e-11)
    np.testing.assert_allclose(state.c.numpy(), c, rtol=1e-11, atol=1e-14)
    np.testing.assert_allclose(state.c_i.data.numpy(), ci, rtol=1e-11, atol=1e-14)


def test_scaffold_invariant_c_is_mean_of_client_variates():
    """With c = c_i = 0 at the start and c += (1/N)ΣΔc_i, c always equals (1/N)Σ_i c_i."""
    fed = Quadratics()
    algo, _ = make_algorithm("scaffold", fed)
    state = run_rounds(algo, fed, np.array([0.3, -0.2, 0.1]), SCHEDULE, STEPS, LR)
    torch.testing.assert_close(state.c, state.c_i.data.mean(0))


def test_scaffold_first_round_equals_fedavg():
    fed = Quadratics()
    x0 = np.array([0.3, -0.2, 0.1])
    sc, _ = make_algorithm("scaffold", fed)
    avg, _ = make_algorithm("fedavg", fed)
    first = SCHEDULE[:1]
    assert torch.equal(run_rounds(sc, fed, x0, first, STEPS, LR).x, run_rounds(avg, fed, x0, first, STEPS, LR).x)
