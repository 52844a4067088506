"""FedPAQ against a NumPy transcription of Reisizadeh et al. (2020) Alg. 1 with the stochastic quantizer."""

import numpy as np
import pytest
import torch

from fedbench.algorithms import ALGORITHMS
from tests.algorithms.test_fedqvr import quantizer_np
from tests.algorithms.toy import Quadratics, make_algorithm, run_rounds

SCHEDULE = [[0, 2], [1, 2, 3], [0, 3], [1, 2]]
STEPS = [3, 2, 4, 1]
LR = 0.05
X0 = np.array([0.3, -0.2, 0.1, 0.4, -0.6])


def fedpaq_reference(fed, eta_g, quant):
    """x ← x + η_g·(1/r)Σ_{i∈S} Q(x_i − x), x_i after K_i local SGD steps from x."""
    x = X0.copy()
    for t, clients in enumerate(SCHEDULE, start=1):
        sent = []
        for i in clients:
            y = x.copy()
            for _ in range(STEPS[i]):
                y = y - LR * fed.grad_np(i, y)
            sent.append(quant(y - x, t, i))
        x = x + eta_g * np.mean(sent, axis=0)  # uniform over the sampled clients
    return x


@pytest.mark.parametrize("eta_g", [1.0, 0.4])
def test_fedpaq_matches_algorithm_1(eta_g):
    fed = Quadratics(dim=5)  # unbalanced n_i: FedPAQ still averages uniformly
    algo, spec = make_algorithm("fedpaq", fed, server={"lr": eta_g}, compression={"kind": "stochastic", "bits": 2})
    assert spec.weighting == "uniform" and ALGORITHMS.capabilities("fedpaq").compression
    state = run_rounds(algo, fed, X0, SCHEDULE, STEPS, LR, weighting=spec.weighting)
    np.testing.assert_allclose(state.x.numpy(), fedpaq_reference(fed, eta_g, quantizer_np(2)), rtol=1e-11)
    unquantized = fedpaq_reference(fed, eta_g, lambda z, t, i: z)
    assert not np.allclose(state.x.numpy(), unquantized)  # the quantizer was applied


def test_fedpaq_with_identity_compressor_is_uniform_fedavg():
    fed = Quadratics(dim=5)
    paq, spec = make_algorithm("fedpaq", fed)
    avg, _ = make_algorithm("fedavg", fed)
    a = run_rounds(paq, fed, X0, SCHEDULE, STEPS, LR, weighting=spec.weighting)
    b = run_rounds(avg, fed, X0, SCHEDULE, STEPS, LR, weighting="uniform")
    assert torch.equal(a.x, b.x)
