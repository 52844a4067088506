"""FedAMS (option 1) and FedCAMS against NumPy transcriptions of Wang et al. (2022) Alg. 1–2."""

import numpy as np
import pytest
import torch

from tests.algorithms.toy import Quadratics, make_algorithm, run_rounds

SCHEDULE = [[0, 2], [1, 2, 3], [0, 3], [1, 2], [0, 1, 2, 3]]
STEPS = [3, 2, 4, 1]
LR = 0.05
X0 = np.array([0.3, -0.2, 0.1])


def local_delta(fed, i, x):
    y = x.copy()
    for _ in range(STEPS[i]):
        y = y - LR * fed.grad_np(i, y)
    return y - x


def sign_c(v):
    return np.sign(v) * np.abs(v).sum() / len(v)


def fedams_reference(fed, eta, eps, bias_correction, compress=None):
    b1, b2 = 0.9, 0.99
    x, m, v, vhat = X0.copy(), np.zeros(3), np.zeros(3), np.full(3, eps)
    err = np.zeros((fed.num_clients, 3))
    sent_total, true_total = np.zeros((fed.num_clients, 3)), np.zeros((fed.num_clients, 3))
    for t, clients in enumerate(SCHEDULE, start=1):
        sent = []
        for i in clients:
            d = local_delta(fed, i, x)
            if compress is None:
                sent.append(d)
                continue
            c = compress(d + err[i])
            err[i] = d + err[i] - c
            sent.append(c)
            sent_total[i] += c
            true_total[i] += d
        delta = np.mean(sent, axis=0)  # uniform 1/|S_t|
        m = b1 * m + (1 - b1) * delta
        v = b2 * v + (1 - b2) * delta**2
        vhat = np.maximum(vhat, np.maximum(v, eps))
        if bias_correction:
            x = x + eta * (m / (1 - b1**t)) / np.sqrt(vhat / (1 - b2**t))
        else:
            x = x + eta * m / np.sqrt(vhat)
    return x, err, sent_total, true_total


@pytest.mark.parametrize("bias_correction", [False, True])
def test_fedams_option_1(bias_correction):
    fed = Quadratics()
    algo, spec = make_algorithm("fedams", fed, server={"bias_correction": bias_correction, "eps": 0.01, "lr": 0.5})
    state = run_rounds(algo, fed, X0, SCHEDULE, STEPS, LR, weighting=spec.weighting)
    x, *_ = fedams_reference(fed, 0.5, 0.01, bias_correction)
    np.testing.assert_allclose(state.x.numpy(), x, rtol=1e-11)


def test_fedcams_with_identity_compressor_is_fedams_exactly():
    fed = Quadratics()
    cams, spec = make_algorithm("fedcams", fed)
    ams, _ = make_algorithm("fedams", fed)
    a = run_rounds(cams, fed, X0, SCHEDULE, STEPS, LR, weighting=spec.weighting)
    b = run_rounds(ams, fed, X0, SCHEDULE, STEPS, LR, weighting=spec.weighting)
    assert torch.equal(a.x, b.x) and not a.error.data.any()


def test_fedcams_error_feedback_with_scaled_sign():
    fed = Quadratics()
    algo, spec = make_algorithm("fedcams", fed, compression={"kind": "sign"}, server={"bias_correction": True})
    state = run_rounds(algo, fed, X0, SCHEDULE, STEPS, LR, weighting=spec.weighting)
    x, err, sent, true = fedams_reference(fed, 1.0, 1e-3, True, compress=sign_c)
    np.testing.assert_allclose(state.x.numpy(), x, rtol=1e-10)
    np.testing.assert_allclose(state.error.data.numpy(), err, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(sent, true - err, atol=1e-12)  # telescoping: ΣΔ̂ = ΣΔ − e_final
