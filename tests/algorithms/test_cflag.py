"""C-FLAG (Alg. 1 + AdapLR) against an independent NumPy float64 transcription of eqs. (4), (5),
(19)–(24) and Table 1, on per-sample quadratics driven through the hooks; the AdapLR rates on hand
values; and C-FLAG, C-FLAG-GD, FedTrack and NCCL-FL end to end on Split-digits (both executors).

The toy: client i holds components g_{i,j}(x) = ½(a_jᵀx − b_j)² (j < n_i; g_i is their mean) and a
memory loss with rows (m_r, y_r); each local step's oracle is one component's gradient (the engine
with ``local.batch_size: 1``) and, for NCCL-FL, ``grad.memory`` one memory row's gradient.
"""

from __future__ import annotations

import dataclasses
import math
from functools import partial

import numpy as np
import pandas as pd
import pytest
import torch

from fedbench.algorithms import ALGORITHMS, AlgorithmContext, RoundContext
from fedbench.algorithms.cflag import adaptive_rates
from fedbench.engine.uploads import decoded, merged
from fedbench.optim.client import LocalAdam, LocalOptimizer
from fedbench.optim.server import ServerOptimizer
from fedbench.optim.spec import ServerSpec
from tests.algorithms.toy import host_logs, run_rows
from tests.continual.common import COLS, P, matrix, raw_with, run, spec_of

SIZES = (4, 5, 3)
SCHEDULE = [[0, 1, 2], [0, 2], [1, 2], [0, 1, 2], [0, 1]]
MEMORY_ON = [False, True, True, True, True]  # round 1 is task 0: empty memories
STEPS = [3, 4, 2]  # K_i ≤ n_i: no component is refreshed twice in a round
LR = 0.05
X0 = np.array([0.4, -0.3, 0.2])
ADAM = (0.9, 0.99, 1e-8)


class Toy:
    def __init__(self, sizes=SIZES, dim: int = 3, seed: int = 3):
        rng = np.random.default_rng(seed)
        self.sizes, self.dim = sizes, dim
        self.A = [rng.normal(size=(n, dim)) for n in sizes]
        self.b = [rng.normal(size=n) for n in sizes]
        self.M = [rng.normal(size=(4, dim)) + 0.5 for _ in sizes]
        self.y = [rng.normal(size=4) for _ in sizes]

    # NumPy (the reference)
    def sample_np(self, i, j, x):
        return self.A[i][j] * (self.A[i][j] @ x - self.b[i][j])

    def full_np(self, i, x):
        return np.mean([self.sample_np(i, j, x) for j in range(self.sizes[i])], 0)

    def memory_row_np(self, i, r, x):
        return self.M[i][r] * (self.M[i][r] @ x - self.y[i][r])

    def memory_np(self, i, x):
        return np.mean([self.memory_row_np(i, r, x) for r in range(4)], 0)

    def order(self, t: int, i: int, k: int) -> int:
        """Component refreshed by client i at step k of round t: a walk through a permutation."""
        return int(np.random.default_rng((t, i)).permutation(self.sizes[i])[k % self.sizes[i]])

    def memory_row(self, t: int, i: int, k: int) -> int:
        return int(np.random.default_rng((t, i, k, 7)).integers(4))

    # torch (the hooks' oracles)
    def oracle(self, clients: list[int], t: int, k: int, memory: bool):
        """grad(z) rows: client clients[row]'s component at step k; grad.memory(z): a memory row's gradient."""
        a = torch.tensor(np.stack([self.A[i][self.order(t, i, k)] for i in clients]))
        b = torch.tensor([self.b[i][self.order(t, i, k)] for i in clients])
        m = torch.tensor(np.stack([self.M[i][self.memory_row(t, i, k)] for i in clients]))
        y = torch.tensor([self.y[i][self.memory_row(t, i, k)] for i in clients])

        def grad(z):
            return a * ((a * z).sum(1) - b).unsqueeze(1)

        grad.memory = (lambda z: m * ((m * z).sum(1) - y).unsqueeze(1)) if memory else torch.zeros_like
        grad.step = k
        return grad


def build(name: str, toy: Toy, batch_size: int = 1, adam: bool = False, **params):
    entry = ALGORITHMS.get(name)
    spec = ServerSpec.model_validate(dict(entry.obj.caps.server))
    local = LocalAdam(*ADAM) if adam else LocalOptimizer()
    ctx = AlgorithmContext(len(toy.sizes), toy.dim, torch.device("cpu"), local_optimizer=local, batch_size=batch_size)
    return entry.obj(entry.params.model_validate(params), ServerOptimizer(spec), ctx)


def round_ctx(algo, state, toy: Toy, clients: list[int], t: int, lr: float, on: bool) -> RoundContext:
    """The engine's context of round t (runner.py ``context``): the declared inputs at x_t."""
    idx = torch.tensor(clients)
    steps = torch.tensor([float(STEPS[i]) for i in clients], dtype=torch.float64)
    broadcast = algo.broadcast(state, idx)
    x_t = broadcast["x"].numpy()
    inputs = {}
    if "full_grad" in algo.caps.inputs:
        inputs["full_grad"] = torch.tensor(np.stack([toy.full_np(i, x_t) for i in clients]))
    if "memory_grad" in algo.caps.inputs:
        rows = [toy.memory_np(i, x_t) if on else np.zeros(toy.dim) for i in clients]
        inputs["memory_grad"] = torch.tensor(np.stack(rows))
    sizes = torch.tensor([float(n) for n in toy.sizes], dtype=torch.float64)
    return RoundContext(idx, lr, steps, broadcast, algo.client_state(state, idx), t, inputs, sizes)


def drive(algo, toy: Toy, batched: bool = False, schedule=SCHEDULE, memory_on=MEMORY_ON, steps_of=STEPS, lr=LR):
    """The engine's round (runner.py) on the toy: the declared inputs at x_t, prepare_round, local
    steps (client by client, or all rows at once with rows past K_i frozen), upload, server_update."""
    state, logs = algo.init_state(torch.tensor(X0)), []
    for t, clients in enumerate(schedule, start=1):
        on = memory_on[t - 1]
        ctx = round_ctx(algo, state, toy, clients, t, lr, on)
        ctx = dataclasses.replace(ctx, steps=torch.tensor([float(steps_of[i]) for i in clients], dtype=torch.float64))
        n = torch.tensor([float(toy.sizes[i]) for i in clients], dtype=torch.float64)
        weights = n / n.sum()
        ctx = algo.prepare_round(state, ctx, weights)
        if batched:
            _, up = run_rows(algo, ctx, [steps_of[i] for i in clients], partial(toy.oracle, clients, t, memory=on))
        else:
            parts = []
            for row, i in enumerate(clients):
                sub = ctx.select(slice(row, row + 1))
                x, carry = sub.start, algo.local_init(sub, sub.start)
                for k in range(steps_of[i]):
                    x, carry = algo.local_step(sub, x, carry, toy.oracle([i], t, k, on))
                parts.append(algo.upload(sub, x, carry))
            up = merged(parts)
        state, log = algo.server_update(state, ctx, decoded(up), weights)
        logs.append(host_logs(log))
    return state, logs


def cflag_reference(
    toy: Toy,
    iag: str = "batch_table",
    adaptive: bool = True,
    case: str = "worst",
    L: float = 5.0,
    alpha: float | None = None,
    adam: bool = False,
    batch: int = 1,
    min_scale: float = 0.0,
    max_scale: float = math.inf,
    memory: bool = True,
    schedule=SCHEDULE,
    memory_on=MEMORY_ON,
):
    """C-FLAG in NumPy float64: Alg. 1, eq. (4) with the estimate of eq. (5) (explicit per-component table
    τ, or per-slot table, or the plain minibatch gradient), AdapLR of Table 1, x̃ of eq. (19)/§2.4 (SGD)
    or the rescaled displacement (Adam), Δ = x̃ − α_{t,i}F and x_{t+1} = Σ p_i Δ_i (22). ``memory=False``
    and ``adaptive=False``: FedTrack. Returns x and per-round logs."""
    x, logs = X0.copy(), []
    beta = LR
    alpha = LR if alpha is None else alpha
    for t, clients in enumerate(schedule, start=1):
        n = np.array([toy.sizes[i] for i in clients], float)
        p = n / n.sum()
        G = [toy.full_np(i, x) for i in clients]
        Gbar = sum(pi * g for pi, g in zip(p, G))
        on = memory and memory_on[t - 1]
        F = sum(pi * toy.memory_np(i, x) for pi, i in zip(p, clients)) if on else np.zeros(toy.dim)
        log = {"Lambda": [], "alpha_scale": [], "beta_scale": [], "a": [], "interfering": 0, "transferring": 0}
        deltas = []
        for row, i in enumerate(clients):
            c = Gbar - G[row]
            y, a = x.copy(), np.zeros(toy.dim)
            table = np.stack([toy.sample_np(i, j, x) for j in range(toy.sizes[i])])  # τ_j = 0 (eq. 5, k = 0)
            slots = np.stack([G[row]] * math.ceil(toy.sizes[i] / min(batch, toy.sizes[i])))
            m = v = np.zeros(toy.dim)
            for k in range(STEPS[i]):
                j = toy.order(t, i, k)
                if iag == "off":
                    est = toy.sample_np(i, j, y)
                elif iag == "sample":
                    if k >= 1:
                        table[j] = toy.sample_np(i, j, y)  # τ_{k,j} = k
                    est = table.mean(0)
                else:
                    slots[k % len(slots)] = toy.sample_np(i, j, y)
                    est = slots.mean(0)
                a = a + est
                d = c + est
                if adam:
                    b1, b2, eps = ADAM
                    m, v = b1 * m + (1 - b1) * d, b2 * v + (1 - b2) * d * d
                    y = y - LR * (m / (1 - b1 ** (k + 1))) / (np.sqrt(v / (1 - b2 ** (k + 1))) + eps)
                else:
                    y = y - beta * d
            if adam:  # Adam: AdapLR reads the displacement in gradient units, a_i = (x_t − x_{t,E})/β
                a = (x - y) / beta
            lam = float(F @ a)
            alpha_i, beta_i = alpha, beta
            if adaptive and F @ F > 0 and a @ a > 0:
                kappa = len(clients) if case == "worst" else 1
                if lam > 0:  # transference
                    beta_i = (1 - L * alpha) * lam / (L * kappa * p[row] * (a @ a))
                    log["transferring"] += 1
                else:  # interference
                    alpha_i = alpha * (1 - lam / (F @ F))
                    log["interfering"] += 1
                beta_i = beta * min(max(beta_i / beta, min_scale), max_scale)
                alpha_i = alpha * min(max(alpha_i / alpha, min_scale), max_scale)
            x_tilde = x + beta_i / beta * (y - x) if adam else x - beta * STEPS[i] * c - beta_i * a
            deltas.append(x_tilde - alpha_i * F)
            for key, val in (
                ("Lambda", lam),
                ("alpha_scale", alpha_i / alpha),
                ("beta_scale", beta_i / beta),
                ("a", a),
            ):
                log[key].append(val)
            log.setdefault("rates", []).append((alpha_i, beta_i))
        A = np.stack(log["a"])
        lam_v = np.array(log["Lambda"])
        log["Gamma"] = L * beta**2 / 2 * np.sum((p @ A) ** 2) - beta * (1 - L * alpha) * (p @ lam_v)
        al, be = np.array(log["rates"]).T
        log["Gamma_ad"] = L / 2 * np.sum(((p * be) @ A) ** 2) - np.sum(p * be * (1 - L * al) * lam_v)
        logs.append(log)
        x = sum(pi * d for pi, d in zip(p, deltas))
    return x, logs


def assert_logs_match(logs, ref_logs):
    for got, ref in zip(logs, ref_logs):
        got = got["cflag"]
        for key in ("Lambda", "alpha_scale", "beta_scale"):
            np.testing.assert_allclose(got[key], ref[key], rtol=1e-10, atol=1e-14)
        assert (got["interfering"], got["transferring"]) == (ref["interfering"], ref["transferring"])
        np.testing.assert_allclose(
            [got["Gamma"], got["Gamma_ad"]], [ref["Gamma"], ref["Gamma_ad"]], rtol=1e-10, atol=1e-14
        )


@pytest.mark.parametrize("case", ["worst", "average"])
def test_cflag_gd_matches_the_papers_equations(case):
    toy = Toy()
    state, logs = drive(build("cflag_gd", toy, case=case), toy)
    x, ref = cflag_reference(toy, "sample", case=case)
    np.testing.assert_allclose(state.x.numpy(), x, rtol=1e-10, atol=1e-13)
    assert_logs_match(logs, ref)
    assert sum(r["interfering"] for r in ref) > 0 and sum(r["transferring"] for r in ref) > 0  # both cases of Table 1
    assert all(r["interfering"] == r["transferring"] == 0 for r in ref[:1])  # task 0: F = 0, no adaptation


@pytest.mark.parametrize(
    "iag,adam,batch",
    [("off", False, 1), ("batch_table", False, 2), ("off", True, 1), ("batch_table", True, 2), ("sample", True, 1)],
)
def test_cflag_matches_reference_for_each_estimate_and_local_optimizer(iag, adam, batch):
    toy = Toy()
    state, logs = drive(build("cflag", toy, batch_size=batch, adam=adam, iag=iag), toy)
    x, ref = cflag_reference(toy, iag, adam=adam, batch=batch)
    np.testing.assert_allclose(state.x.numpy(), x, rtol=1e-10, atol=1e-13)
    assert_logs_match(logs, ref)


def test_cflag_options_alpha_clipping_and_no_adaptation():
    toy = Toy()
    for params, ref_kw in [
        ({"adaptive": False}, {"adaptive": False}),  # Δ = x_{t,E} − αF: the memory step stays (notes §8.1)
        ({"alpha": 0.02, "L": 3.0}, {"alpha": 0.02, "L": 3.0}),
        ({"max_scale": 1.2, "min_scale": 0.5}, {"max_scale": 1.2, "min_scale": 0.5}),
    ]:
        state, logs = drive(build("cflag", toy, **params), toy)
        x, ref = cflag_reference(toy, **ref_kw)
        np.testing.assert_allclose(state.x.numpy(), x, rtol=1e-10, atol=1e-13)
        assert_logs_match(logs, ref)
    _, clipped = cflag_reference(toy, max_scale=1.2, min_scale=0.5)
    scales = [s for r in clipped for s in r["beta_scale"] + r["alpha_scale"]]
    assert min(scales) == 0.5 and max(scales) == 1.2  # the clips were active


def test_the_batched_driver_equals_the_sequential_one():
    """Rows past their K_i keep their iterate and carry in the batched engine: a_i does not grow."""
    toy = Toy()
    for name, kw in [
        ("cflag_gd", {}),
        ("cflag", {"iag": "batch_table", "batch_size": 2, "adam": True}),
        ("fedtrack", {"iag": "sample"}),
        ("nccl_fl", {"adam": True}),
    ]:
        seq, seq_logs = drive(build(name, toy, **kw), toy)
        bat, bat_logs = drive(build(name, toy, **kw), toy, batched=True)
        torch.testing.assert_close(bat.x, seq.x, rtol=1e-12, atol=1e-14)
        for b, s in zip(bat_logs, seq_logs):
            for key, value in s.get("cflag", s.get("nccl", {})).items():
                got = b.get("cflag", b.get("nccl"))[key]
                np.testing.assert_allclose(got, value, rtol=1e-10, atol=1e-14, err_msg=f"{name} {key}")


def test_interference_with_alpha_equal_beta_is_an_agem_projection():
    """App. B.1: for Λ_{t,i} ≤ 0 and β = α,
    Δx_t^i − x_t + βK_i c_i = −αF − α(a_i − (⟨F, a_i⟩/‖F‖²)F),
    i.e. the part of a_i against the memory gradient is projected out."""
    toy = Toy()
    algo = build("cflag_gd", toy)
    state = algo.init_state(torch.tensor(X0))
    ctx = round_ctx(algo, state, toy, [0, 1, 2], 2, LR, True)
    n = torch.tensor(SIZES, dtype=torch.float64)
    ctx = algo.prepare_round(state, ctx, n / n.sum())
    seen = 0
    for row, i in enumerate(range(3)):
        sub = ctx.select(slice(row, row + 1))
        x, carry = sub.start, algo.local_init(sub, sub.start)
        for k in range(STEPS[i]):
            x, carry = algo.local_step(sub, x, carry, toy.oracle([i], 2, k, True))
        up = algo.upload(sub, x, carry)
        F, a = ctx.broadcast["grad_f"], up.kept.a[0]
        if float(F @ a) > 0:
            continue
        seen += 1
        c = ctx.broadcast["grad_g"] - ctx.inputs["full_grad"][row]
        projected = a - (F @ a) / (F @ F) * F
        torch.testing.assert_close(
            up.sent["delta"][0] + LR * STEPS[i] * c, -LR * F - LR * projected, rtol=1e-12, atol=1e-14
        )
        assert abs(float(projected @ F)) < 1e-12
    assert seen > 0


def test_with_adam_adaplr_reads_the_displacement_projects_it_or_bounds_it():
    """Adam (notes §8.4): AdapLR's a_i is the displacement in gradient units, a_i = −d_i/β with
    d_i = x_{t,E} − x_t. Interference (Λ ≤ 0, α = β): Δx_t^i = −αF + d_i − (⟨F, d_i⟩/‖F‖²)F, A-GEM's
    projection of the step actually taken (App. B.1); transference: d_i rescaled to a step of norm
    β_{t,i}‖a_i‖ ≤ (1 − Lα)‖F‖/(L N p_i), whatever Adam's step size (Table 1, worst case)."""
    toy = Toy()
    algo = build("cflag", toy, batch_size=2, adam=True)
    state = algo.init_state(torch.tensor(X0))
    n = torch.tensor(SIZES, dtype=torch.float64)
    weights = n / n.sum()
    seen = {True: 0, False: 0}
    for t in range(2, 10):  # rounds from X0 with different component orders
        ctx = algo.prepare_round(state, round_ctx(algo, state, toy, [0, 1, 2], t, LR, True), weights)
        F = ctx.broadcast["grad_f"]
        for row in range(3):
            sub = ctx.select(slice(row, row + 1))
            x, carry = sub.start, algo.local_init(sub, sub.start)
            for k in range(STEPS[row]):
                x, carry = algo.local_step(sub, x, carry, toy.oracle([row], t, k, True))
            up = algo.upload(sub, x, carry)
            d = (x - sub.start)[0]
            torch.testing.assert_close(up.kept.a[0], -d / LR, rtol=1e-12, atol=1e-14)
            interference = float(F @ d) >= 0
            if interference:
                projected = d - (F @ d) / (F @ F) * F
                torch.testing.assert_close(up.sent["delta"][0], -LR * F + projected, rtol=1e-12, atol=1e-14)
            else:
                step = up.sent["delta"][0] + LR * F  # −β_{t,i} a_i: along d_i, bounded
                bound = (1 - 5.0 * LR) * float(F.norm()) / (5.0 * 3 * float(weights[row]))
                assert 0 < float(step.norm()) <= bound * (1 + 1e-12)
                torch.testing.assert_close(step / step.norm(), d / d.norm(), rtol=1e-12, atol=1e-14)
            seen[interference] += 1
    assert seen[True] > 0 and seen[False] > 0


def test_adaptive_rates_on_hand_values():
    F = torch.tensor([1.0, 0.0], dtype=torch.float64)
    a = torch.tensor([[2.0, 0.0], [-1.0, 1.0], [0.0, 0.0], [0.0, 3.0]], dtype=torch.float64)
    kp = torch.tensor([0.5, 1.0, 1.0, 2.0], dtype=torch.float64)
    lam, al, be, on = adaptive_rates(F, a, alpha=0.1, beta=0.2, L=2.0, kp=kp)
    assert lam.tolist() == [2.0, -1.0, 0.0, 0.0]
    # transference: β_i = (1 − 0.2)·2/(2·0.5·4) = 0.4 → 2β; interference: α_i = α(1 + 1/1) = 2α
    torch.testing.assert_close(be, torch.tensor([2.0, 1.0, 1.0, 1.0], dtype=torch.float64))
    torch.testing.assert_close(al, torch.tensor([1.0, 2.0, 1.0, 1.0], dtype=torch.float64))
    assert on.tolist() == [True, True, False, True]  # a_i = 0: no adaptation; Λ = 0 with a_i ≠ 0: interference
    _, al, be, on = adaptive_rates(torch.zeros(2, dtype=torch.float64), a, 0.1, 0.2, 2.0, kp)  # task 0: F = 0
    assert not on.any() and (al == 1).all() and (be == 1).all()
    _, al, be, on = adaptive_rates(F, a, 0.1, 0.2, 2.0, kp, adaptive=False)
    assert not on.any() and (al == 1).all() and (be == 1).all()
    _, al, be, _ = adaptive_rates(F, a, 0.1, 0.2, 2.0, kp, min_scale=0.5, max_scale=1.5)
    assert be.tolist() == [1.5, 1.0, 1.0, 1.0] and al.tolist() == [1.0, 1.5, 1.0, 1.0]
    _, _, be, _ = adaptive_rates(F, a, 1.0, 0.2, 2.0, kp)  # 1 − Lα < 0: a negative β_i is cut at min_scale 0
    assert be[0] == 0.0


def test_params_and_errors():
    assert ALGORITHMS.get("cflag").params().model_dump() == {
        "adaptive": True,
        "case": "worst",
        "L": 5.0,
        "alpha": None,
        "max_scale": None,
        "min_scale": 0.0,
        "iag": "batch_table",
    }
    assert ALGORITHMS.get("fedtrack").params().model_dump() == {"iag": "batch_table"}  # eq. (5)'s IAG by default
    assert "iag" not in ALGORITHMS.get("cflag_gd").params().model_dump()
    assert ALGORITHMS.capabilities("cflag").local_optimizer and not ALGORITHMS.capabilities("cflag_gd").local_optimizer
    with pytest.raises(ValueError, match="max_scale"):
        ALGORITHMS.get("cflag").params.model_validate({"max_scale": 0.5, "min_scale": 1.0})
    toy = Toy()
    with pytest.raises(ValueError, match="needs the local batch size"):
        drive(build("cflag", toy, batch_size=0, iag="batch_table"), toy)


# -- end to end: Split-digits (tests/continual/common.py), 3 tasks × 2 rounds, 3 clients ---------------

ENGINE = ["cflag", "cflag_gd", "fedtrack", "nccl_fl"]


def engine_raw(name: str, mode: str) -> dict:
    changes: dict = {"continual.mode": mode}
    if name != "cflag_gd":  # the paper's clients: Adam reset every round
        changes.update({"local.optimizer": "adam", "continual.lr_per_task": [0.005, 0.01]})
    return raw_with(changes)


@pytest.mark.parametrize("mode", ["task", "class"])
@pytest.mark.parametrize("name", ENGINE)
def test_split_digits_accuracy_matrix_on_both_executors(tmp_path, name, mode):
    seq, seq_extra, o1 = run(tmp_path, spec_of(engine_raw(name, mode), name), "seq", "sequential")
    bat, bat_extra, o2 = run(tmp_path, spec_of(engine_raw(name, mode), name), "bat", "batched")
    assert o1.status == o2.status == "finished", (o1, o2)
    pd.testing.assert_frame_equal(seq[COLS], bat[COLS], rtol=1e-4, atol=1e-6)
    a = np.array(matrix(seq_extra))
    assert a.shape == (3, 3) and ((a >= 0) & (a <= 1)).all()
    np.testing.assert_allclose(a, np.array(matrix(bat_extra)), atol=1e-6)
    vectors = {"cflag": 3, "cflag_gd": 3, "fedtrack": 2, "nccl_fl": 1}[name]  # P-vectors per client each way
    assert (seq["bits_up"] == vectors * 3 * P * 32).all() and (seq["bits_down"] == vectors * 3 * P * 32).all()
    if name.startswith("cflag"):
        logs = [e["cflag"] for e in seq_extra]
        assert all(x["interfering"] == x["transferring"] == 0 for x in logs[:2])  # task 0: empty memory
        assert sum(x["interfering"] + x["transferring"] for x in logs[2:]) == 4 * 3  # every client adapts later
        assert all(math.isfinite(x["Gamma"]) and math.isfinite(x["Gamma_ad"]) for x in logs)
