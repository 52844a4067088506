"""FedQVR / FedQVR-E against a NumPy float64 transcription of Wang et al. Alg. 1–2 (Eqs. 9–12) and
the paper's identities (Eqs. 18, 39, 40, c = Σ p_i c_i)."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.utils._pytree as pytree

from fedbench.algorithms import ALGORITHMS, RoundContext
from fedbench.algorithms.fedqvr import VariateRows, effective_steps
from fedbench.engine.uploads import decoded, merged, upload_bits
from fedbench.seeding import torch_stream
from tests.algorithms.toy import Quadratics, StepOracle, ToyOracle, make_algorithm
from tests.test_compress import numpy_quantize

SCHEDULE = [[0, 2], [1, 2, 3], [0, 3], [1, 2], [0, 1, 2, 3], [2, 3]]
STEPS = [3, 2, 5, 1]  # heterogeneous local work (HLU): K_i differs per client
LR, GAMMA, A = 0.05, 1.0, 0.3  # γ = 0.3 (the paper's) diverges on these quadratics (L ≈ 13; notes §12.19)
X0 = np.array([0.3, -0.2, 0.1])


def quantizer_np(bits):
    """Q(z, B) with the uniforms of stream ("compress", round, client) under seed 0 (one tensor, notes §2)."""

    def q(z, t, i, b=None):
        b = b or bits
        if b >= 24:  # documented cap: widths ≥ 24 are sent unquantized
            return z
        u = torch.rand(len(z), generator=torch_stream(0, "compress", t, i), dtype=torch.float64).numpy()
        return numpy_quantize(z, b, u)

    return q


def fedqvr_reference(
    fed,
    schedule,
    steps,
    quant=None,
    bits=None,
    aggregate="paper",
    gamma=GAMMA,
    a=A,
    lr=LR,
    x0=X0,
    received=None,
    outage="renormalize",
):
    """Alg. 1 as printed; ``bits[t][i]`` gives FedQVR-E's per-device widths (Alg. 2). ``received[t]``:
    the clients whose upload arrives (the others keep c_i and add nothing); m is the number sampled
    under ``zero_fill`` and the number received under ``renormalize``."""
    N, d = fed.num_clients, fed.dim
    p = fed.sizes / fed.sizes.sum()
    theta, c, ci = x0.copy(), np.zeros(d), np.zeros((N, d))
    history = []
    for t, clients in enumerate(schedule, start=1):
        theta0 = theta - c / gamma  # line 3
        deltas = {}
        for i in clients:
            phi = theta0.copy()
            for _ in range(steps[i]):
                phi = (phi - lr * (fed.grad_np(i, phi) - ci[i]) + gamma * lr * theta0) / (1 + gamma * lr)  # (9)
            e_tilde = (1 - (1 + gamma * lr) ** (-steps[i])) / (gamma * lr)
            delta = phi - theta0
            if quant is not None:
                delta = quant(delta, t, i, bits[t - 1][i] if bits else None)
            deltas[i] = (a / (lr * e_tilde), delta)
        arrived = clients if received is None else received[t - 1]
        deltas = {i: deltas[i] for i in arrived}  # a lost upload: no (10), (11) or (12) term
        for i, (s, delta) in deltas.items():
            ci[i] = ci[i] - s * delta  # (10)
        c = c - sum(p[i] * s * delta for i, (s, delta) in deltas.items())  # (11)
        m = len(clients) if outage == "zero_fill" else len(arrived)
        if aggregate == "paper":  # (12): θ0 + (N/m) Σ_{i∈A} p_i Δ_i
            theta = theta0 + N / m * sum(p[i] * delta for i, (_, delta) in deltas.items())
        else:  # n_i / Σ_{j∈A} n_j over the received, × |A|/m
            n = fed.sizes[arrived]
            theta = theta0 + len(arrived) / m * sum(w * deltas[i][1] for w, i in zip(n / n.sum(), arrived))
        history.append((theta.copy(), c.copy(), ci.copy()))
    return history


def drive(algo, fed, schedule, steps, lr=LR, bits=None, x0=X0, received=None, outage="renormalize"):
    """The sequential engine's hook order (tests/algorithms/toy.py), plus FedQVR-E widths in
    ``ctx.bits``; returns the state after every round and each round's upload bits. Like
    the engine's ``aggregate``, only the ``received[t]`` rows reach ``server_update``, with the uniform
    weight 1/(number sampled) under ``zero_fill`` or 1/(number received) under ``renormalize``."""
    state = algo.init_state(torch.tensor(x0))
    states, spent = [], []
    for t, clients in enumerate(schedule, start=1):
        index = torch.tensor(clients)
        k = torch.tensor([float(steps[i]) for i in clients], dtype=torch.float64)
        inputs = {} if bits is None else {"bits": torch.tensor([bits[t - 1][i] for i in clients])}
        sizes = torch.tensor(fed.sizes)
        ctx = RoundContext(
            index, lr, k, algo.broadcast(state, index), algo.client_state(state, index), t, inputs, sizes
        )
        parts = []
        for row, i in enumerate(clients):
            sub = ctx.select(slice(row, row + 1))
            x, carry = sub.start, algo.local_init(sub, sub.start)
            for step in range(steps[i]):
                x, carry = algo.local_step(sub, x, carry, ToyOracle(fed, i, step))
            parts.append(algo.upload(sub, x, carry))
        up = merged(parts)
        spent.append(upload_bits(up))
        arrived = clients if received is None else received[t - 1]
        rows = torch.tensor([clients.index(i) for i in arrived])
        m = len(clients) if outage == "zero_fill" else len(arrived)
        u = torch.full((len(arrived),), 1 / m, dtype=torch.float64)  # the engine's uniform weights
        state, _ = algo.server_update(state, ctx.select(rows), decoded(up).rows(rows), u)
        states.append(pytree.tree_map(lambda v: v.clone() if hasattr(v, "clone") else v, state))  # tables are donated
    return states, spent


def balanced(fed):
    fed.sizes = np.full(fed.num_clients, 25.0)
    return fed


def assert_matches(states, history, rtol=1e-11):
    for s, (theta, c, ci) in zip(states, history, strict=True):
        np.testing.assert_allclose(s.x.numpy(), theta, rtol=rtol, atol=1e-13)
        np.testing.assert_allclose(s.c.numpy(), c, rtol=rtol, atol=1e-13)
        np.testing.assert_allclose(s.c_i.data.numpy(), ci, rtol=rtol, atol=1e-13)


def test_identity_compressor_matches_algorithm_1_with_balanced_data():
    """Balanced data: Eq. 12's (N/m)Σ p_i Δ_i is the mean, and both aggregation forms give it."""
    fed = balanced(Quadratics())
    history = fedqvr_reference(fed, SCHEDULE, STEPS)
    for aggregation in ("paper", "renormalized"):
        algo, _ = make_algorithm("fedqvr", fed, gamma=GAMMA, aggregation=aggregation)
        assert_matches(drive(algo, fed, SCHEDULE, STEPS)[0], history)


def test_unbalanced_data_follow_eq_12_as_printed_by_default():
    """n_i = 10, 20, 30, 40 and 2–4 of 4 clients per round: θ0 + (N/m)Σ_{i∈A} p_i Δ_i with p_i = n_i/n
    over all N (not an average); ``aggregation: renormalized`` gives n_i/Σ_{j∈A} n_j instead."""
    fed = Quadratics()
    algo, spec = make_algorithm("fedqvr", fed, gamma=0.7, a=0.5)
    assert algo.params.aggregation == "paper" and spec.weighting == "uniform"
    paper = fedqvr_reference(fed, SCHEDULE, STEPS, gamma=0.7, a=0.5)
    assert_matches(drive(algo, fed, SCHEDULE, STEPS)[0], paper)
    renorm, _ = make_algorithm("fedqvr", fed, gamma=0.7, a=0.5, aggregation="renormalized")
    renormalised = fedqvr_reference(fed, SCHEDULE, STEPS, gamma=0.7, a=0.5, aggregate="renormalised")
    assert_matches(drive(renorm, fed, SCHEDULE, STEPS)[0], renormalised)
    assert not np.allclose(paper[0][0], renormalised[0][0])  # the two differ when n_i differ
    np.testing.assert_allclose(paper[0][1], renormalised[0][1])  # c (Eq. 11) does not depend on it


RECEIVED = [[2], [1, 3], [0, 3], [1, 2], [0, 2, 3], [3]]  # each round's uploads that arrive (a subset of SCHEDULE's)


@pytest.mark.parametrize("aggregation", ["paper", "renormalized"])
@pytest.mark.parametrize("outage", ["zero_fill", "renormalize"])
def test_lost_uploads_contribute_zero_and_keep_c_equal_to_sum_p_i_c_i(aggregation, outage):
    """The engine's outage modes with unequal n_i: zero_fill keeps Eq. 12's N/m (m sampled), so a lost
    Δ_i simply adds zero; renormalize uses N/|A| (A received); lost clients keep c_i."""
    fed = Quadratics(num_clients=4, dim=6, seed=1)
    algo, _ = make_algorithm(
        "fedqvr", fed, compression={"kind": "stochastic", "bits": 2}, gamma=GAMMA, aggregation=aggregation
    )
    x0 = np.linspace(-0.5, 0.5, 6)
    states, _ = drive(algo, fed, SCHEDULE, STEPS, x0=x0, received=RECEIVED, outage=outage)
    aggregate = "paper" if aggregation == "paper" else "renormalised"
    history = fedqvr_reference(
        fed, SCHEDULE, STEPS, quant=quantizer_np(2), aggregate=aggregate, x0=x0, received=RECEIVED, outage=outage
    )
    assert_matches(states, history, rtol=1e-10)
    p = torch.tensor(fed.sizes / fed.sizes.sum())
    for s in states:
        torch.testing.assert_close(s.c, p @ s.c_i.data, rtol=1e-12, atol=1e-14)
    other = fedqvr_reference(
        fed,
        SCHEDULE,
        STEPS,
        quant=quantizer_np(2),
        aggregate=aggregate,
        x0=x0,
        received=RECEIVED,
        outage="renormalize" if outage == "zero_fill" else "zero_fill",
    )
    assert not np.allclose(history[0][0], other[0][0])  # the two outage modes differ


@pytest.mark.parametrize("aggregation", ["paper", "renormalized"])
def test_samples_weighting_is_refused(aggregation):
    with pytest.raises(ValueError, match="weighting must be uniform"):
        make_algorithm("fedqvr", Quadratics(), server={"weighting": "samples"}, aggregation=aggregation)


def test_stochastic_quantizer_round_matches_numpy_and_keeps_c_equal_to_sum_p_i_c_i():
    fed = Quadratics(num_clients=4, dim=6, seed=1)
    algo, _ = make_algorithm("fedqvr", fed, compression={"kind": "stochastic", "bits": 2}, gamma=GAMMA)
    x0 = np.linspace(-0.5, 0.5, 6)
    states, spent = drive(algo, fed, SCHEDULE, STEPS, x0=x0)
    history = fedqvr_reference(fed, SCHEDULE, STEPS, quant=quantizer_np(2), x0=x0)
    assert_matches(states, history, rtol=1e-10)
    p = torch.tensor(fed.sizes / fed.sizes.sum())
    for s in states:  # Lemma 3 / Eq. 41: the same quantized Δ_i enters Eqs. 10 and 11
        torch.testing.assert_close(s.c, p @ s.c_i.data, rtol=1e-12, atol=1e-14)
    assert spent == [len(c) * (6 * 3 + 64) for c in SCHEDULE]  # d(B+1) + μ per client; scalar not counted
    assert not np.allclose(history[-1][0], fedqvr_reference(fed, SCHEDULE, STEPS, x0=x0)[-1][0])  # Q mattered


def test_count_scalar_charges_32_bits_per_client():
    fed = Quadratics()
    algo, _ = make_algorithm(
        "fedqvr", fed, compression={"kind": "stochastic", "bits": 3}, count_scalar=True, gamma=GAMMA
    )
    states, spent = drive(algo, fed, SCHEDULE[:2], STEPS)
    assert spent == [len(c) * (3 * 4 + 64 + 32) for c in SCHEDULE[:2]]
    free, _ = make_algorithm("fedqvr", fed, compression={"kind": "stochastic", "bits": 3}, gamma=GAMMA)
    assert torch.equal(drive(free, fed, SCHEDULE[:2], STEPS)[0][-1].x, states[-1].x)


def test_broadcast_is_theta0_only():
    fed = Quadratics()
    algo, _ = make_algorithm("fedqvr", fed, gamma=0.5)
    state = SimpleNamespace(
        x=torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64), c=torch.tensor([0.5, -1.0, 0.0], dtype=torch.float64)
    )
    sent = algo.broadcast(state, torch.tensor([0]))
    assert list(sent) == ["x"] and sent["x"].tolist() == [0.0, 4.0, 3.0]


def test_local_step_eq_9_equals_eq_18():
    """φ⁺ = [φ − η(g + c − c_i)]/(1+γη) + γη/(1+γη)·θ when θ0 = θ − c/γ (Lemma 1)."""
    fed = Quadratics()
    algo, _ = make_algorithm("fedqvr", fed, gamma=0.4)
    rng = np.random.default_rng(3)
    theta, c, ci, phi = (rng.normal(size=(2, 3)) for _ in range(4))
    state = SimpleNamespace(x=torch.tensor(theta[0]), c=torch.tensor(c[0]))
    ctx = RoundContext(
        torch.tensor([0, 1]), 0.07, torch.tensor([4.0, 4.0]), algo.broadcast(state, None), VariateRows(torch.tensor(ci))
    )
    g = rng.normal(size=(2, 3))
    out, _ = algo.local_step(ctx, torch.tensor(phi), (), StepOracle(lambda z: torch.tensor(g)))
    out = out.numpy()
    ge = 0.4 * 0.07
    expected = (phi - 0.07 * (g + c[0] - ci)) / (1 + ge) + ge / (1 + ge) * theta[0]
    np.testing.assert_allclose(out, expected, rtol=1e-13)


def test_accumulated_update_is_eq_39():
    """θ_i − θ0 = −η Σ_t (1+γη)^{−(K−t)} (g_t − c_i), with g_t the gradient at the t-th iterate."""
    fed = Quadratics()
    algo, _ = make_algorithm("fedqvr", fed, gamma=GAMMA)
    K, i = 7, 2
    ci = np.array([[0.2, -0.1, 0.4]])
    state = SimpleNamespace(x=torch.tensor(X0), c=torch.tensor([0.1, 0.0, -0.2], dtype=torch.float64))
    ctx = RoundContext(
        torch.tensor([i]), LR, torch.tensor([float(K)]), algo.broadcast(state, None), VariateRows(torch.tensor(ci))
    )
    grads, oracle = [], fed.oracle(i)

    def recording(z):
        grads.append(oracle(z).numpy()[0])
        return oracle(z)

    x, carry = ctx.start, algo.local_init(ctx, ctx.start)
    for _ in range(K):
        x, carry = algo.local_step(ctx, x, carry, StepOracle(recording))
    ge = GAMMA * LR
    closed = -LR * sum((1 + ge) ** (-(K - t)) * (grads[t] - ci[0]) for t in range(K))
    np.testing.assert_allclose((x - ctx.broadcast["x"]).numpy()[0], closed, rtol=1e-12)


def test_constant_gradient_gives_the_ema_control_variate_of_eq_40():
    """With g ≡ G: Δ_i = −ηẼ_i(G − c_i), so c_i ← c_i − s_iΔ_i = (1 − a)c_i + aG exactly."""
    fed = Quadratics()
    algo, _ = make_algorithm("fedqvr", fed, a=0.25, gamma=GAMMA)
    state = algo.init_state(torch.tensor(X0))
    state.c_i.data[1] = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    G = torch.tensor([[0.3, 0.7, -1.1]], dtype=torch.float64)
    clients = torch.tensor([1])
    ctx = RoundContext(
        clients,
        LR,
        torch.tensor([9.0]),
        algo.broadcast(state, clients),
        algo.client_state(state, clients),
        sizes=torch.tensor(fed.sizes),
    )
    x, carry = ctx.start, algo.local_init(ctx, ctx.start)
    for _ in range(9):
        x, carry = algo.local_step(ctx, x, carry, StepOracle(lambda z: G))
    up = algo.upload(ctx, x, carry)
    ci_old = state.c_i.data[1].clone()
    state, _ = algo.server_update(state, ctx, decoded(up), torch.ones(1, dtype=torch.float64))
    torch.testing.assert_close(state.c_i.data[1], 0.75 * ci_old + 0.25 * G[0], rtol=1e-12, atol=1e-14)


def test_effective_steps_values_and_limit():
    ge = 0.3 * 0.01  # the paper's γη
    table = {10: 9.837, 12: 11.769, 20: 19.384, 24: 23.123, 50: 46.366, 60: 54.835}  # notes §3.3
    got = effective_steps(torch.tensor([float(k) for k in table]), ge)
    np.testing.assert_allclose(got.numpy(), list(table.values()), atol=6e-4)
    np.testing.assert_allclose((0.3 / (0.01 * got)).numpy()[[0, 2, 4]], [3.050, 1.548, 0.647], atol=6e-4)
    ks = torch.tensor([1.0, 5.0, 40.0])
    np.testing.assert_allclose(effective_steps(ks, 1e-12).numpy(), ks.numpy(), rtol=1e-9)  # Ẽ → K as γη → 0
    assert effective_steps(torch.tensor([1.0]), 0.2).item() == pytest.approx(1 / 1.2)


@pytest.mark.parametrize("server", [{"lr": 0.5}, {"optimizer": "adam"}, {"momentum": 0.9}])
def test_server_optimizer_settings_are_refused(server):
    with pytest.raises(ValueError, match="no server optimizer"):
        make_algorithm("fedqvr", Quadratics(), server=server)


# -- FedQVR-E ---------------------------------------------------------------------------------
BITS = [{0: 2, 1: 5, 2: 3, 3: 7}, {0: 4, 1: 2, 2: 9, 3: 30}] * 3  # allocated B_i per round (30: sent exactly)


def test_fedqvr_e_uses_each_devices_allocated_width():
    fed = Quadratics(num_clients=4, dim=6, seed=2)
    assert ALGORITHMS.capabilities("fedqvr_e").inputs == ("bits",)
    algo, _ = make_algorithm("fedqvr_e", fed, compression={"kind": "stochastic", "bits": 2}, gamma=GAMMA)
    x0 = np.linspace(0.5, -0.5, 6)
    states, spent = drive(algo, fed, SCHEDULE, STEPS, bits=BITS, x0=x0)
    history = fedqvr_reference(fed, SCHEDULE, STEPS, quant=quantizer_np(2), bits=BITS, x0=x0)
    assert_matches(states, history, rtol=1e-10)
    p = torch.tensor(fed.sizes / fed.sizes.sum())
    for s in states:  # Eq. 11 (not Alg. 2's extra 1/N) keeps the invariant
        torch.testing.assert_close(s.c, p @ s.c_i.data, rtol=1e-12, atol=1e-14)
    assert spent == [sum(6 * (BITS[t][i] + 1) + 64 for i in c) for t, c in enumerate(SCHEDULE)]  # Eq. 27


def test_fedqvr_e_without_allocated_widths_is_fedqvr():
    fed = Quadratics()
    e, _ = make_algorithm("fedqvr_e", fed, compression={"kind": "stochastic", "bits": 3}, gamma=GAMMA)
    plain, _ = make_algorithm("fedqvr", fed, compression={"kind": "stochastic", "bits": 3}, gamma=GAMMA)
    assert torch.equal(drive(e, fed, SCHEDULE, STEPS)[0][-1].x, drive(plain, fed, SCHEDULE, STEPS)[0][-1].x)


def test_fedqvr_e_widths_need_the_stochastic_quantizer():
    fed = Quadratics()
    algo, _ = make_algorithm("fedqvr_e", fed, gamma=GAMMA)
    with pytest.raises(ValueError, match="stochastic"):
        drive(algo, fed, SCHEDULE[:1], STEPS, bits=BITS)
