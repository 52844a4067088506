"""MIFA / MIFAM (GradMA Alg. 6; Gu et al. 2021) against a NumPy transcription of Alg. 6."""

import numpy as np
import pytest
import torch

from fedbench.algorithms import ALGORITHMS
from tests.algorithms.toy import Quadratics, make_algorithm, run_rounds, weights_np

# 5 workers: worker 4 is never sampled (its memory stays 0), worker 2 is sampled in every round
SCHEDULE = [[0, 2], [1, 2, 3], [2, 3], [0, 1, 2]]
STEPS = [3, 2, 4, 1, 2]
LR = 0.05
X0 = np.array([0.3, -0.2, 0.1])


def mifa_reference(fed, x, beta1, eta_g, weighting, schedule=SCHEDULE):
    """Alg. 6 with client-held memories, in GradMA's signs: worker i uploads Δ^(i) = g_new − g_old
    with g = x_t − x_{t,I}^(i); d ← d + Σ_{i∈S_t} p_i Δ^(i); m ← β1·m + d; x ← x − η_g·m."""
    N = fed.num_clients
    p = np.full(N, 1 / N) if weighting == "uniform" else fed.sizes / fed.sizes.sum()
    g_old, d, m = np.zeros((N, fed.dim)), np.zeros(fed.dim), np.zeros(fed.dim)
    for clients in schedule:
        uploads = {}
        for i in clients:
            y = x.copy()
            for _ in range(STEPS[i]):
                y = y - LR * fed.grad_np(i, y)
            g_new = x - y
            uploads[i] = g_new - g_old[i]
            g_old[i] = g_new
        d = d + sum(p[i] * uploads[i] for i in clients)
        m = beta1 * m + d
        x = x - eta_g * m
    return x, g_old


@pytest.mark.parametrize("weighting", ["samples", "uniform"])
def test_mifa_matches_algorithm_6(weighting):
    fed = Quadratics(num_clients=5)
    algo, spec = make_algorithm("mifa", fed, server={"lr": 0.8, "weighting": weighting})
    assert spec.momentum == 0
    state = run_rounds(algo, fed, X0, SCHEDULE, STEPS, LR, weighting=weighting)
    x, g_old = mifa_reference(fed, X0, 0.0, 0.8, weighting)
    np.testing.assert_allclose(state.x.numpy(), x, rtol=1e-11)
    np.testing.assert_allclose(state.g_old.data.numpy(), -g_old, rtol=1e-11)  # fedbench stores x_i − x_t
    assert not state.g_old.data[4].any()


@pytest.mark.parametrize("weighting", ["samples", "uniform"])
def test_mifam_matches_algorithm_6_with_momentum(weighting):
    fed = Quadratics(num_clients=5)
    algo, spec = make_algorithm("mifam", fed, server={"lr": 1.5, "weighting": weighting})
    assert spec.momentum == 0.5
    state = run_rounds(algo, fed, X0, SCHEDULE, STEPS, LR, weighting=weighting)
    x, _ = mifa_reference(fed, X0, 0.5, 1.5, weighting)
    np.testing.assert_allclose(state.x.numpy(), x, rtol=1e-11)


def test_first_round_is_fedavg_scaled_by_s_over_n():
    """With every memory at 0, round 1 moves by (1/N)Σ_{i∈S} Δ_i = (S/N)·(uniform FedAvg step): the
    1/N normalisation is not "fixed" to 1/S."""
    fed = Quadratics(num_clients=5)
    mifa, _ = make_algorithm("mifa", fed, server={"weighting": "uniform"})
    avg, _ = make_algorithm("fedavg", fed, server={"weighting": "uniform"})
    first = SCHEDULE[:1]
    x_mifa = run_rounds(mifa, fed, X0, first, STEPS, LR, weighting="uniform").x.numpy()
    x_avg = run_rounds(avg, fed, X0, first, STEPS, LR, weighting="uniform").x.numpy()
    np.testing.assert_allclose(x_mifa - X0, (2 / 5) * (x_avg - X0), rtol=1e-12)


def test_full_participation_with_sample_weights_is_fedavg():
    """S = N every round: Σ_{i∈[N]} (n_i/n)·Δ_i is exactly FedAvg's sample-weighted mean."""
    fed = Quadratics(num_clients=4)
    everyone = [[0, 1, 2, 3]] * 3
    mifa, _ = make_algorithm("mifa", fed)
    x = run_rounds(mifa, fed, X0, everyone, STEPS, LR).x.numpy()
    ref = X0.copy()
    for clients in everyone:
        ys = []
        for i in clients:
            y = ref.copy()
            for _ in range(STEPS[i]):
                y = y - LR * fed.grad_np(i, y)
            ys.append(y)
        ref = sum(w * y for w, y in zip(weights_np(fed, clients), ys))
    np.testing.assert_allclose(x, ref, rtol=1e-11)


def test_registrations():
    assert ALGORITHMS.capabilities("mifa").server == {}
    assert ALGORITHMS.capabilities("mifam").server == {"momentum": 0.5}
    fed = Quadratics()
    algo, _ = make_algorithm("mifa", fed)
    state = algo.init_state(torch.tensor(X0))
    assert state.g_old.data.shape == (4, 3) and not state.d.any()
