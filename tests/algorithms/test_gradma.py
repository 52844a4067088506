"""GradMA, GradMA-W and GradMA-S against NumPy float64 transcriptions of Luo et al. (CVPR 2023)
Algs. 1–4, 7, 8 with the QP solved independently (cvxpy), on the toy quadratic federation."""

import json
from collections import OrderedDict
from types import SimpleNamespace

import cvxpy as cp
import numpy as np
import pytest
import torch

from fedbench.algorithms import RoundContext
from fedbench.algorithms.base import Upload
from tests.algorithms.toy import Quadratics, StepOracle, iterate_rounds, make_algorithm, run_rows, weights_np
from tests.factories import tiny_scenario
from tests.optim import named

LAYOUT = (2, 3)  # two "parameter tensors" of the 5-dim toy model
SCHEDULE = [[0, 2], [1, 4], [0, 3], [2, 5], [1, 3], [0, 4], [5, 2], [1, 0]]  # sorted per round by the engine
STEPS = [3, 2, 4, 1, 3, 2]
LR = 0.05


def drive(algo, fed, x0, schedule, steps, lr, weighting="samples"):
    """toy.iterate_rounds with each round's clients sorted, as the engine samples them."""
    return iterate_rounds(algo, fed, x0, [sorted(c) for c in schedule], steps, lr, weighting)


def last(iterable):
    *_, final = iterable
    return final


# -- independent reference ----------------------------------------------------------------------
def qp(p: np.ndarray, cols: list[np.ndarray], blocks: tuple[int, ...]) -> np.ndarray:
    """Eq. 2 block by block with cvxpy: argmin ½‖p − v‖² s.t. ⟨v, c⟩ ≥ 0 for every column c."""
    out, start = [], 0
    for size in blocks:
        sl = slice(start, start + size)
        start += size
        M = np.array([c[sl] / np.linalg.norm(c[sl]) for c in cols if np.linalg.norm(c[sl]) > 0]).reshape(-1, size)
        if len(M) == 0 or (M @ p[sl]).min() >= 0:
            out.append(p[sl])
            continue
        v = cp.Variable(size)
        problem = cp.Problem(cp.Minimize(0.5 * cp.sum_squares(v - p[sl])), [M @ v >= 0])
        try:
            problem.solve(solver="CLARABEL", tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12)
        except cp.error.SolverError:
            problem.solve(solver="CLARABEL")
        out.append(v.value)
    return np.concatenate(out)


def worker_reference(fed, i, x_t, x_prev, K, lr, blocks, active=None):
    """Worker_Update, Alg. 2 / Eq. 5; ``active`` counts violated constraints by kind."""
    x = x_t.copy()
    for _ in range(K):
        g = fed.grad_np(i, x)
        G = [fed.grad_np(i, x_prev), fed.grad_np(i, x_t), x - x_t]
        if active is not None:
            for j, c in enumerate(G):
                active[j] += float(g @ c) < -1e-12
        x_prev, x = x, x - lr * qp(g, G, blocks)
    return x


def server_reference(fed, x0, schedule, steps, lr, beta1, beta2, m, eta_g, blocks, worker=None):
    """Alg. 1 with mem_red (Alg. 4, an OrderedDict buffer as in the authors' code) and
    Server_Update (Alg. 3). ``worker(i, x_t, x_prev)`` gives x_{t+1}^(i); plain SGD when None."""
    x, mom = x0.copy(), np.zeros_like(x0)
    buf, D = OrderedDict(), {}
    last_local = {i: x0.copy() for i in range(fed.num_clients)}
    history = []
    for clients in schedule:
        clients = sorted(clients)
        new = set()
        for i in clients if m > 0 else []:  # Alg. 4
            if i in buf:
                buf[i] += 1
                continue
            if len(buf) == m:
                old = OrderedDict((k, c) for k, c in buf.items() if k not in clients)
                evict = min(old, key=old.get)  # first minimum = earliest inserted
                del buf[evict], D[evict]
            buf[i] = 1
            new.add(i)
        d = {}
        for i in clients:
            if worker is None:
                y = x.copy()
                for _ in range(steps[i]):
                    y = y - lr * fed.grad_np(i, y)
            else:
                y = worker(i, x, last_local[i])
            last_local[i] = y
            d[i] = x - y
        w = weights_np(fed, clients)
        mom = beta1 * mom + sum(wi * d[i] for wi, i in zip(w, clients))  # Eq. 6
        for k in buf:  # Eq. 7
            D[k] = d[k] if k in new else beta2 * D[k] + d[k] if k in clients else beta2 * D[k]
        if m > 0:
            mom = qp(mom, [D[k] for k in buf], blocks)  # Eq. 8
        x = x - eta_g * mom
        history.append((x.copy(), mom.copy(), {k: D[k].copy() for k in buf}, dict(buf)))
    return history


def memory_of(state) -> dict[int, np.ndarray]:
    """client → D_j = exp(log_scale_j)·U_j from the slot table."""
    out = {}
    for j, c in enumerate(state.memory.client.tolist()):
        if c >= 0:
            out[c] = (state.memory.log_scale[j].exp() * state.memory.U[j]).numpy()
    return out


# -- tests ----------------------------------------------------------------------------------------
def test_gradma_s_with_no_memory_is_fedavgm_bitwise():
    """(a) m = 0 ≡ FedAvgM (paper §3.7), including partial participation and sample weights."""
    fed = Quadratics(num_clients=6, dim=5)
    x0 = np.linspace(-0.5, 0.5, 5)
    s, _ = make_algorithm("gradma_s", fed, server={"lr": 0.7}, beta1=0.9, memory_size=0)
    f, _ = make_algorithm("fedavgm", fed, server={"lr": 0.7, "momentum": 0.9})
    for (sa, logs), (fa, _) in zip(drive(s, fed, x0, SCHEDULE, STEPS, LR), drive(f, fed, x0, SCHEDULE, STEPS, LR)):
        assert torch.equal(sa.x, fa.x)
        assert torch.equal(sa.momentum, -named(fa.opt)["m"])  # m = Σ w (x_t − x_i) is FedAvgM's −Δ momentum
        assert logs == {"qp_fallbacks": 0, "memory_slots": 0}


@pytest.mark.parametrize("projection,blocks", [("per_tensor", LAYOUT), ("whole_model", (5,))])
@pytest.mark.parametrize("m,beta2", [(3, 0.5), (6, 0.9), (6, 0.0)])
def test_gradma_s_server_update_matches_algorithms_3_and_4(projection, blocks, m, beta2):
    """(b) momentum, memory (Eq. 7), eviction (Alg. 4) and the QP_g step (Eq. 8) every round;
    β2 = 0 (the β ablation): buffered workers absent from a round have D_j = 0, no constraint."""
    fed = Quadratics(num_clients=6, dim=5, seed=1)
    x0 = np.linspace(-1.0, 1.0, 5)
    algo, _ = make_algorithm(
        "gradma_s", fed, server={"lr": 0.8}, layout=LAYOUT, beta1=0.5, beta2=beta2, memory_size=m, projection=projection
    )
    ref = server_reference(fed, x0, SCHEDULE, STEPS, LR, 0.5, beta2, m, 0.8, blocks)
    projected = 0
    for (state, logs), (x, mom, D, buf) in zip(drive(algo, fed, x0, SCHEDULE, STEPS, LR), ref):
        np.testing.assert_allclose(state.x.numpy(), x, rtol=1e-7, atol=1e-9)
        np.testing.assert_allclose(state.momentum.numpy(), mom, rtol=1e-7, atol=1e-9)
        ours = memory_of(state)
        assert set(ours) == set(D) and logs == {"qp_fallbacks": 0, "memory_slots": len(D)}
        for k in D:
            np.testing.assert_allclose(ours[k], D[k], rtol=1e-7, atol=1e-9)  # d_i inherits x_t's cvxpy error
        counts = dict(zip(state.memory.client.tolist(), state.memory.taken.tolist()))
        assert all(counts[k] == c for k, c in buf.items())
        projected += 1
    assert projected == len(SCHEDULE)


def test_qp_g_is_active_in_the_reference_schedule():
    """Guard for (b): the schedule really exercises the projection (some m violates a memory)."""
    fed = Quadratics(num_clients=6, dim=5, seed=1)
    ref = server_reference(fed, np.linspace(-1.0, 1.0, 5), SCHEDULE, STEPS, LR, 0.5, 0.5, 3, 0.8, LAYOUT)
    raw = server_reference(fed, np.linspace(-1.0, 1.0, 5), SCHEDULE, STEPS, LR, 0.5, 0.5, 0, 0.8, LAYOUT)
    assert not np.allclose(ref[-1][0], raw[-1][0])


def _server_only(algo, fed, schedule, deltas):
    """Drive server_update with hand-made uploads (one client per round)."""
    state = algo.init_state(torch.zeros(fed.dim, dtype=torch.float64))
    seen = []
    for t, (clients, delta) in enumerate(zip(schedule, deltas), start=1):
        index = torch.tensor(clients)
        ctx = RoundContext(
            index, 0.1, torch.ones(len(clients), dtype=torch.float64), algo.broadcast(state, index), None, t
        )
        uniform = torch.full((len(clients),), 1 / len(clients), dtype=torch.float64)
        state, _ = algo.server_update(state, ctx, Upload({"delta": torch.tensor(delta)}), uniform)
        seen.append(sorted(c for c in state.memory.client.tolist() if c >= 0))
    return state, seen


def test_eviction_least_count_non_active_then_earliest_inserted():
    """(c) m = 2, S = 1: Alg. 4 evicts the least-participating buffered worker, ties broken by
    insertion order (a count update does not move a worker; a re-entered one goes last)."""
    fed = Quadratics(num_clients=5, dim=3)
    algo, _ = make_algorithm("gradma_s", fed, memory_size=2)
    schedule = [[0], [1], [0], [2], [1], [3], [0], [0], [4]]
    rng = np.random.default_rng(0)
    deltas = [rng.normal(size=(1, 3)) for _ in schedule]
    state, seen = _server_only(algo, fed, schedule, deltas)
    assert seen == [
        [0],
        [0, 1],
        [0, 1],
        [0, 2],  # 2 evicts 1 (count 1 < 2)
        [0, 1],  # 1 evicts 2: tie at count 1 with nobody else evictable
        [0, 3],  # 3 evicts 1 (count 1; 0 has 2)
        [0, 3],
        [0, 3],
        [0, 4],  # 4 evicts 3 (count 1; 0 has 4)
    ]
    assert dict(zip(state.memory.client.tolist(), state.memory.taken.tolist())) == {0: 4, 4: 1}
    # the tie-break: equal counts → earliest inserted goes, even after a count update of the other
    algo, _ = make_algorithm("gradma_s", fed, memory_size=2)
    _, seen = _server_only(algo, fed, [[0], [1], [0], [1], [2], [3]], deltas)
    assert seen[4] == [1, 2] and seen[5] == [1, 3]  # 0 (inserted first) goes, then 2 (count 1 < 2)
    # a re-entered worker starts from its fresh update, not its evicted memory (Eq. 7, c reset to 0)
    algo, _ = make_algorithm("gradma_s", fed, memory_size=2, beta2=0.5)
    state, seen = _server_only(algo, fed, [[0], [1], [2], [0]], deltas)
    assert seen[-1] == [0, 2]
    D = memory_of(state)
    np.testing.assert_allclose(D[0], -deltas[3][0], rtol=1e-15)
    np.testing.assert_allclose(D[2], -0.5 * deltas[2][0], rtol=1e-15)


def test_memory_smaller_than_clients_per_round_is_refused():
    fed = Quadratics(num_clients=5, dim=3)
    algo, _ = make_algorithm("gradma_s", fed, memory_size=1)
    with pytest.raises(ValueError, match="needs S ≤ m"):
        _server_only(algo, fed, [[0, 1]], [np.ones((2, 3))])


@pytest.mark.parametrize("anchor", ["last_local", "global"])
@pytest.mark.parametrize("projection,blocks", [("per_tensor", LAYOUT), ("whole_model", (5,))])
def test_gradma_w_matches_algorithm_7_with_active_constraints(anchor, projection, blocks):
    """(d) QP_l worker steps (Alg. 2, Eq. 5) with every constraint kind active, server
    x ← x − η_g Σ w_i d_i (Alg. 7); x_{t,−1} is the stored last local model or x_t."""
    fed = Quadratics(num_clients=6, dim=5, seed=2)
    lr = 0.12  # large enough to overshoot: consecutive gradients disagree
    x0 = np.linspace(-1.0, 1.0, 5)
    algo, _ = make_algorithm(
        "gradma_w", fed, server={"lr": 0.9}, layout=LAYOUT, prev_anchor=anchor, projection=projection
    )
    x, last_local, active = x0.copy(), {i: x0.copy() for i in range(6)}, [0, 0, 0]
    for (state, logs), clients in zip(drive(algo, fed, x0, SCHEDULE, STEPS, lr), SCHEDULE):
        clients = sorted(clients)
        ys = []
        for i in clients:
            prev = last_local[i] if anchor == "last_local" else x
            ys.append(worker_reference(fed, i, x, prev, STEPS[i], lr, blocks, active))
            last_local[i] = ys[-1]
        x = x - 0.9 * sum(w * (x - y) for w, y in zip(weights_np(fed, clients), ys))
        np.testing.assert_allclose(state.x.numpy(), x, rtol=1e-7, atol=1e-9)
        assert logs == {"qp_fallbacks": 0}
        if anchor == "last_local":
            stored = np.stack([last_local[i] for i in range(6)])  # x_0 for workers not yet sampled
            np.testing.assert_allclose(state.last_local.data.numpy(), stored, rtol=1e-7, atol=1e-9)
    assert min(active) > 0, active  # ∇f(x_{τ−1}), ∇f(x_t) and x_τ − x_t each violated at some step


def test_gradma_matches_algorithm_1():
    """GradMA = Alg. 2 workers + Algs. 3–4 server, per tensor, with evictions (m = 3 < N = 6)."""
    fed = Quadratics(num_clients=6, dim=5, seed=2)
    lr, x0 = 0.12, np.linspace(-1.0, 1.0, 5)
    algo, _ = make_algorithm("gradma", fed, server={"lr": 0.8}, layout=LAYOUT, beta1=0.5, beta2=0.5, memory_size=3)
    worker = lambda i, x_t, prev: worker_reference(fed, i, x_t, prev, STEPS[i], lr, LAYOUT)  # noqa: E731
    ref = server_reference(fed, x0, SCHEDULE, STEPS, lr, 0.5, 0.5, 3, 0.8, LAYOUT, worker=worker)
    for (state, logs), (x, mom, D, _) in zip(drive(algo, fed, x0, SCHEDULE, STEPS, lr), ref):
        np.testing.assert_allclose(state.x.numpy(), x, rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(state.momentum.numpy(), mom, rtol=1e-6, atol=1e-8)
        assert logs == {"qp_fallbacks": 0, "memory_slots": len(D)}


@pytest.mark.parametrize("projection", ["per_tensor", "whole_model"])
def test_projected_momentum_agrees_with_every_memory(projection):
    """(e) after each round ⟨m~_b, D_j,b⟩ ≥ 0 for every buffered worker j (and block b)."""
    fed = Quadratics(num_clients=6, dim=5, seed=3)
    algo, _ = make_algorithm("gradma", fed, layout=LAYOUT, memory_size=4, beta1=0.9, projection=projection)
    blocks = [slice(0, 2), slice(2, 5)] if projection == "per_tensor" else [slice(0, 5)]
    checked = 0
    for state, _ in drive(algo, fed, np.linspace(-1.0, 1.0, 5), SCHEDULE * 2, STEPS, 0.12):
        m = state.momentum.numpy()
        for D in memory_of(state).values():
            for b in blocks:
                assert m[b] @ D[b] >= -1e-12 * np.linalg.norm(D[b])  # ‖m‖ = O(0.1) before projection
                checked += 1
    assert checked > 0


def test_prev_anchor_global_and_last_local_differ_only_after_a_worker_has_trained():
    """(f) round 1: x_{t,−1} = x_0 = x_t for both anchors → identical; later the stored last local
    model and x_t differ, so do the runs; ``last_local`` is only kept with its anchor."""
    fed = Quadratics(num_clients=6, dim=5, seed=2)
    x0 = np.linspace(-1.0, 1.0, 5)
    runs = {}
    for anchor in ("last_local", "global"):
        algo, _ = make_algorithm("gradma", fed, layout=LAYOUT, memory_size=3, prev_anchor=anchor)
        runs[anchor] = [s.x.clone() for s, _ in drive(algo, fed, x0, SCHEDULE[:3], STEPS, 0.12)]
        assert (algo.init_state(torch.tensor(x0)).last_local is not None) == (anchor == "last_local")
    assert torch.equal(runs["last_local"][0], runs["global"][0])
    assert not torch.allclose(runs["last_local"][2], runs["global"][2])


def test_gradma_without_memory_and_momentum_is_gradma_w():
    fed = Quadratics(num_clients=6, dim=5, seed=2)
    x0 = np.linspace(-1.0, 1.0, 5)
    full, _ = make_algorithm("gradma", fed, server={"lr": 0.9}, layout=LAYOUT, beta1=0.0, memory_size=0)
    worker, _ = make_algorithm("gradma_w", fed, server={"lr": 0.9}, layout=LAYOUT)
    a = last(drive(full, fed, x0, SCHEDULE, STEPS, 0.12))[0]
    b = last(drive(worker, fed, x0, SCHEDULE, STEPS, 0.12))[0]
    torch.testing.assert_close(a.x, b.x, rtol=1e-14, atol=1e-15)


def test_worker_fallbacks_are_counted_only_for_steps_a_client_takes(monkeypatch):
    """A failed QP_l block is logged (never silent); a client that has finished its K_i steps in the
    batched engine keeps its count."""
    from fedbench.algorithms import gradma

    fed = Quadratics(num_clients=6, dim=5)
    algo, _ = make_algorithm("gradma_w", fed, layout=LAYOUT)

    def failing(p, M, blocks):
        return p.clone(), torch.full((len(p),), len(blocks), dtype=torch.int64)

    monkeypatch.setattr(gradma, "project", failing)
    state = algo.init_state(torch.zeros(5, dtype=torch.float64))
    clients = torch.tensor([0, 1])
    steps = torch.tensor([1.0, 3.0], dtype=torch.float64)
    ctx = RoundContext(clients, 0.1, steps, algo.broadcast(state, clients), algo.client_state(state, clients))
    both = lambda z: torch.stack([fed.oracle(0)(z[:1])[0], fed.oracle(1)(z[1:])[0]])  # noqa: E731
    _, up = run_rows(algo, ctx, [1, 3], lambda k: StepOracle(both, k))  # client 0 finishes after 1 step
    assert up.kept.fallbacks.tolist() == [2, 6]
    _, logs = algo.server_update(state, ctx, up, torch.tensor([0.5, 0.5], dtype=torch.float64))
    assert logs == {"qp_fallbacks": 8}


def test_server_momentum_must_come_from_beta1():
    fed = Quadratics()
    with pytest.raises(ValueError, match="momentum 0"):
        make_algorithm("gradma", fed, server={"momentum": 0.9})
    with pytest.raises(ValueError, match="optimizer must be 'sgd'"):
        make_algorithm("gradma_s", fed, server={"optimizer": "adam"})
    make_algorithm("gradma_w", fed, server={"momentum": 0.9})  # GradMA-W's server is configuration


def test_defaults_and_unknown_parameters():
    from fedbench.algorithms import ALGORITHMS

    assert ALGORITHMS.get("gradma").params().model_dump() == {
        "projection": "per_tensor",
        "prev_anchor": "last_local",
        "beta1": 0.5,
        "beta2": 0.5,
        "memory_size": 100,
    }
    with pytest.raises(ValueError):
        ALGORITHMS.get("gradma_w").params.model_validate({"beta1": 0.5})
    with pytest.raises(ValueError):
        ALGORITHMS.get("gradma_s").params.model_validate({"prev_anchor": "global"})


def test_engine_run_resumes_from_a_checkpoint_with_identical_results(tmp_path):
    """The memory table, slot bookkeeping and last-local models survive a checkpoint."""
    import pandas as pd

    from fedbench.engine.runner import execute_run
    from fedbench.engine.setup import DataCache
    from fedbench.scenario import parse_scenario, resolve_runs
    from fedbench.store import ResultsStore

    raw = tiny_scenario(
        {"partition.omega": 0.3},
        name="gradma",
        rounds=6,
        checkpoint_every=2,
        algorithms=[{"name": "gradma", "memory_size": 4}],
    )
    spec = resolve_runs(parse_scenario(raw))[0]
    cache = DataCache(tmp_path / "data", False, torch.device("cpu"))

    def run(name, on_round=None):
        store = ResultsStore(tmp_path / name)
        out = execute_run(spec, 0, store, cache, "h", on_round)
        return out, store.metrics([out.run_id])

    _, full = run("full")

    def stop(t, _):
        if t == 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run("cut", stop)
    out, resumed = run("cut")
    assert out.status == "finished"
    cols = ["round", "test_acc", "test_loss", "train_loss"]
    pd.testing.assert_frame_equal(full[cols], resumed[cols])
    assert [json.loads(e)["memory_slots"] for e in full["extra"]] == [3, 4, 4, 4, 4, 4]


def test_fallbacks_warn_once_per_run_and_are_footnoted_under_the_table(tmp_path, monkeypatch):
    """(d) Never silent: the runner warns once per run from the ``qp_fallbacks`` round log, and the
    written table says how many projections fell back."""
    import warnings

    from fedbench.algorithms import gradma
    from fedbench.engine.runner import execute_run
    from fedbench.engine.setup import DataCache
    from fedbench.report.tables import write_tables
    from fedbench.scenario import parse_scenario, resolve_runs
    from fedbench.store import ResultsStore

    def failing(p, M, blocks):  # every block of every row left unprojected (the dual's counts, on the host)
        return p.clone(), SimpleNamespace(counts=[len(blocks)] * len(p))

    monkeypatch.setattr(gradma, "solve", failing)
    raw = tiny_scenario(
        {"model.hidden": [8], "clients.num": 6, "clients.per_round": 2, "partition.omega": 0.3, "local.iterations": 2},
        name="fallbacks",
        algorithms=[{"name": "gradma_s", "memory_size": 4}],
    )
    spec = resolve_runs(parse_scenario(raw))[0]
    store = ResultsStore(tmp_path / "store")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = execute_run(spec, 0, store, DataCache(tmp_path / "data", False, torch.device("cpu")), "h")
    assert out.status == "finished"
    fell_back = [w for w in caught if issubclass(w.category, RuntimeWarning) and "fell back" in str(w.message)]
    assert len(fell_back) == 1 and "GradMA-S" in str(fell_back[0].message)
    per_round = [json.loads(e)["qp_fallbacks"] for e in store.metrics([out.run_id])["extra"]]
    assert per_round == [4, 4, 4]  # 4 parameter tensors of the MLP, one QP_g per round
    md = next(p for p in write_tables(store, tmp_path / "tables", None) if p.suffix == ".md").read_text()
    assert "_GradMA-S: 12 QP projections fell back (left unprojected)_" in md
