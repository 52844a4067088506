"""FedCOMGATE against NumPy transcriptions of Haddadpour et al. (2021) Alg. 2 under partial
participation: the derived tracking rule (δ_i += G_i − Ḡ, G_i = Q(D_i)/(ηK_i)) that keeps Σ_i δ_i = 0,
and the authors' FedTorch semantics (fedgate_aggregation_centered), which does not."""

import numpy as np
import pytest
import torch

from fedbench.algorithms import RoundContext
from fedbench.algorithms.base import Upload
from fedbench.compress import build_compressor
from tests.algorithms.test_fedqvr import quantizer_np
from tests.algorithms.toy import Quadratics, iterate_rounds, make_algorithm, run_rounds, weights_np

SCHEDULE = [[0, 2], [1, 2, 3], [0, 3], [1, 2], [0, 1, 2, 3]]  # partial participation
STEPS = [3, 2, 4, 1]  # unequal K_i
LR = 0.05
X0 = np.array([0.3, -0.2, 0.1, 0.4, -0.6])


def fedcomgate_reference(fed, eta_g, quant, tracking="sampled", schedule=SCHEDULE, steps=STEPS, weighting="uniform"):
    """Local x ← x − η(g − δ_i); D_i = x_t − x_i; D̄ = Σ w_i Q(D_i); x ← x − η_g D̄; for the sampled i
    δ_i += Q(D_i)/(ηK_i) − Σ_j w_j Q(D_j)/(ηK_j) (sampled) or (D_i − D̄)/(ηK_i) (fedtorch: exact D_i).
    Returns (x, δ) after every round."""
    x = X0.copy()
    delta = np.zeros((fed.num_clients, fed.dim))
    history = []
    for t, clients in enumerate(schedule, start=1):
        w = weights_np(fed, clients, weighting)
        D, QD = {}, {}
        for i in clients:
            y = x.copy()
            for _ in range(steps[i]):
                y = y - LR * (fed.grad_np(i, y) - delta[i])
            D[i] = x - y
            QD[i] = -quant(y - x, t, i)  # the client quantizes its change; Q(−z) = −Q(z)
        D_bar = sum(wi * QD[i] for wi, i in zip(w, clients))
        G_bar = sum(wi * QD[i] / (LR * steps[i]) for wi, i in zip(w, clients))
        for i in clients:
            if tracking == "sampled":
                delta[i] = delta[i] + QD[i] / (LR * steps[i]) - G_bar
            else:
                delta[i] = delta[i] + (D[i] - D_bar) / (LR * steps[i])
        x = x - eta_g * D_bar
        history.append((x.copy(), delta.copy()))
    return history


@pytest.mark.parametrize("eta_g", [1.0, 0.2])
@pytest.mark.parametrize("tracking", ["sampled", "fedtorch"])
def test_fedcomgate_matches_the_reference_under_partial_participation(eta_g, tracking):
    fed = Quadratics(dim=5)
    algo, spec = make_algorithm(
        "fedcomgate", fed, server={"lr": eta_g}, compression={"kind": "stochastic", "bits": 2}, tracking=tracking
    )
    assert spec.weighting == "uniform"
    history = fedcomgate_reference(fed, eta_g, quantizer_np(2), tracking)
    for (state, _), (x, delta) in zip(
        iterate_rounds(algo, fed, X0, SCHEDULE, STEPS, LR, spec.weighting), history, strict=True
    ):
        np.testing.assert_allclose(state.x.numpy(), x, rtol=1e-11)
        np.testing.assert_allclose(state.delta_i.data.numpy(), delta, rtol=1e-10, atol=1e-13)
    assert not np.allclose(
        history[-1][0], fedcomgate_reference(fed, eta_g, lambda z, t, i: z, tracking)[-1][0]
    )  # Q mattered


def test_the_default_is_the_sampled_rule():
    algo, _ = make_algorithm("fedcomgate", Quadratics(dim=5))
    assert algo.params.tracking == "sampled"


@pytest.mark.parametrize("weighting", ["uniform", "samples"])
def test_sampled_tracking_keeps_the_weighted_sum_of_delta_zero_every_round(weighting):
    """Σ_i δ_i = 0 (uniform) or Σ_i n_i δ_i = 0 (samples) after every round, with sampling, unequal K_i
    and 2-bit quantization; FedTorch's rule leaves it nonzero in the same run."""
    fed = Quadratics(dim=5)
    comp = {"kind": "stochastic", "bits": 2}
    algo, _ = make_algorithm("fedcomgate", fed, server={"weighting": weighting}, compression=comp)
    old, _ = make_algorithm("fedcomgate", fed, server={"weighting": weighting}, compression=comp, tracking="fedtorch")
    mass = torch.ones(4, dtype=torch.float64) if weighting == "uniform" else torch.tensor(fed.sizes)
    drift = []
    rounds = zip(
        iterate_rounds(algo, fed, X0, SCHEDULE, STEPS, LR, weighting),
        iterate_rounds(old, fed, X0, SCHEDULE, STEPS, LR, weighting),
    )
    for (state, _), (old_state, _) in rounds:
        torch.testing.assert_close(mass @ state.delta_i.data, torch.zeros(5, dtype=torch.float64), atol=1e-12, rtol=0)
        drift.append(float((mass @ old_state.delta_i.data).abs().max()))
    assert state.delta_i.data.abs().max() > 0.1 and max(drift) > 1e-2


def test_a_lost_upload_under_zero_fill_keeps_the_invariant_and_the_sampled_sets_step():
    """server_update on the received rows with the sampled set's weights (sum < 1, the engine's
    zero_fill): x moves by η_g Σ_{received} w_i Q(D_i) and Ḡ is their renormalised mean."""
    fed = Quadratics(dim=5)
    algo, _ = make_algorithm("fedcomgate", fed, server={"lr": 0.5})
    state = algo.init_state(torch.tensor(X0))
    rng = np.random.default_rng(4)
    received, steps = torch.tensor([0, 2, 3]), torch.tensor([3.0, 1.0, 2.0], dtype=torch.float64)
    change = torch.tensor(rng.normal(size=(3, 5)))
    w = torch.full((3,), 0.25, dtype=torch.float64)  # 4 sampled, 1 lost
    ctx = RoundContext(received, LR, steps, {"x": state.x}, algo.client_state(state, received), 1)
    state, _ = algo.server_update(state, ctx, Upload({"delta": change}), w)
    np.testing.assert_allclose(state.x.numpy(), X0 + 0.5 * 0.25 * change.sum(0).numpy(), rtol=1e-13)
    g = -change.numpy() / (LR * steps.numpy()[:, None])
    np.testing.assert_allclose(state.delta_i.data.numpy()[[0, 2, 3]], g - g.mean(0), rtol=1e-12)
    assert (state.delta_i.data[1] == 0).all()
    torch.testing.assert_close(state.delta_i.data.sum(0), torch.zeros(5, dtype=torch.float64), atol=1e-12, rtol=0)


def test_both_rules_are_algorithm_2_with_full_participation_equal_steps_and_no_compression():
    fed = Quadratics(dim=5)
    schedule, steps = [[0, 1, 2, 3]] * 4, [3, 3, 3, 3]
    states = []
    for tracking in ("sampled", "fedtorch"):
        algo, spec = make_algorithm("fedcomgate", fed, tracking=tracking)
        states.append(run_rounds(algo, fed, X0, schedule, steps, LR, weighting=spec.weighting))
    torch.testing.assert_close(states[0].delta_i.data, states[1].delta_i.data, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(states[0].x, states[1].x, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(states[0].delta_i.data.sum(0), torch.zeros(5, dtype=torch.float64), atol=1e-12, rtol=0)
    _, delta = fedcomgate_reference(fed, 1.0, lambda z, t, i: z, "fedtorch", schedule, steps)[-1]
    np.testing.assert_allclose(states[1].delta_i.data.numpy(), delta, rtol=1e-10, atol=1e-13)


def test_only_fedtorch_tracking_keeps_the_exact_change_as_client_state():
    fed = Quadratics(dim=5)
    for tracking, kept in (("sampled", False), ("fedtorch", True)):
        algo, _ = make_algorithm("fedcomgate", fed, tracking=tracking)
        state = algo.init_state(torch.tensor(X0))
        clients = torch.tensor([1])
        ctx = RoundContext(
            clients, LR, torch.tensor([2.0]), algo.broadcast(state, clients), algo.client_state(state, clients), 1
        )
        up = algo.upload(ctx, ctx.start + 1.0, algo.local_init(ctx, ctx.start))
        assert list(up.sent) == ["delta"] and (up.kept is not None) == kept


def test_quantizing_the_model_change_equals_the_papers_scaled_gradient_form():
    """Alg. 2 uploads Q(D_i/(ηK))·ηK; the per-tensor magnitude grid scales with its input, so it
    equals Q(D_i) on the same random draws (up to rounding)."""
    c = build_compressor("stochastic", {"bits": 2}, (3, 4))
    D = torch.randn(2, 7, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    scale = LR * 6
    clients = torch.tensor([0, 3])
    torch.testing.assert_close(
        c(D / scale, 0, 5, clients).value * scale, c(D, 0, 5, clients).value, rtol=1e-12, atol=1e-15
    )
