"""A tiny deterministic federation for pinning update rules: client i has the quadratic loss
f_i(x) = ½‖A_i x − b_i‖², whose exact gradient A_iᵀ(A_i x − b_i) stands in for a minibatch
gradient. ``run_rounds`` drives an algorithm through the hooks exactly as documented in
``fedbench/algorithms/base.py``; the tests compare it with NumPy float64 re-derivations of the
papers' equations."""

from __future__ import annotations

import numpy as np
import torch

from fedbench.algorithms import ALGORITHMS, AlgorithmContext, RoundContext
from fedbench.algorithms.base import Upload, where_rows
from fedbench.compress import build_compressor
from fedbench.engine.pending import PendingRound, read_rounds
from fedbench.engine.uploads import decoded, merged
from fedbench.optim.server import ServerOptimizer
from fedbench.optim.spec import ServerSpec


class Quadratics:
    def __init__(self, num_clients: int = 4, dim: int = 3, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.A = rng.normal(size=(num_clients, 5, dim))
        self.b = rng.normal(size=(num_clients, 5))
        self.sizes = np.arange(1, num_clients + 1, dtype=float) * 10.0
        self.num_clients, self.dim = num_clients, dim

    def grad_np(self, i: int, x: np.ndarray) -> np.ndarray:
        return self.A[i].T @ (self.A[i] @ x - self.b[i])

    def oracle(self, i: int):
        A, b = torch.tensor(self.A[i]), torch.tensor(self.b[i])
        return lambda z: (A.T @ (A @ z.T - b[:, None])).T


def make_algorithm(
    name: str,
    fed: Quadratics,
    server: dict | None = None,
    compression: dict | None = None,
    layout: tuple[int, ...] = (),
    **params,
):
    entry = ALGORITHMS.get(name)
    spec = ServerSpec.model_validate({**dict(entry.obj.caps.server), **(server or {})})
    comp = dict(compression or {"kind": "none"})
    compressor = build_compressor(comp.pop("kind"), comp, layout or (fed.dim,))
    ctx = AlgorithmContext(fed.num_clients, fed.dim, torch.device("cpu"), 0, compressor, layout)
    return entry.obj(entry.params.model_validate(params), ServerOptimizer(spec), ctx), spec


class ToyOracle:
    """The exact gradient of client i's quadratic at every row, for local step ``step``."""

    def __init__(self, fed: Quadratics, i: int, step: int = 0):
        self.grad, self.step = fed.oracle(i), step

    def __call__(self, z: torch.Tensor, objective=None) -> torch.Tensor:
        return self.grad(z)

    def memory(self, z: torch.Tensor) -> torch.Tensor:
        """No replay draw: zero rows."""
        return torch.zeros_like(z)


def run_rounds(
    algo,
    fed: Quadratics,
    x0: np.ndarray,
    schedule: list[list[int]],
    steps: list[int],
    lr: float,
    weighting: str = "samples",
):
    """Drive the hooks like the sequential engine; returns the final state."""
    *_, (state, _) = iterate_rounds(algo, fed, x0, schedule, steps, lr, weighting)
    return state


def iterate_rounds(
    algo,
    fed: Quadratics,
    x0: np.ndarray,
    schedule: list[list[int]],
    steps: list[int],
    lr: float,
    weighting: str = "samples",
):
    """:func:`run_rounds` as a generator of (state, server logs) after every round."""
    state = algo.init_state(torch.tensor(x0))
    for t, clients in enumerate(schedule, start=1):
        index = torch.tensor(clients)
        k = torch.tensor([float(steps[i]) for i in clients], dtype=torch.float64)
        inputs = {}
        if "full_grad" in algo.caps.inputs:  # the exact ∇f_i(x_t), as the engine's full_local_gradients
            x_t = algo.broadcast(state, index)["x"].unsqueeze(0)
            inputs["full_grad"] = torch.cat([fed.oracle(i)(x_t) for i in clients])
        sizes = torch.tensor(fed.sizes)  # n_i of every client
        ctx = RoundContext(
            index, lr, k, algo.broadcast(state, index), algo.client_state(state, index), t, inputs, sizes
        )
        sizes = torch.tensor(fed.sizes[clients])
        w = (
            sizes / sizes.sum()
            if weighting == "samples"
            else torch.full((len(clients),), 1 / len(clients), dtype=torch.float64)
        )
        ctx = algo.prepare_round(state, ctx, w)
        parts = []
        for row, i in enumerate(clients):
            sub = ctx.select(slice(row, row + 1))
            x = sub.start
            carry = algo.local_init(sub, x)
            for step in range(steps[i]):
                x, carry = algo.local_step(sub, x, carry, ToyOracle(fed, i, step))
            parts.append(algo.upload(sub, x, carry))
        up = decoded(merged(parts))
        state, logs = algo.server_update(state, ctx, up, w)
        yield state, host_logs(logs)


def host_logs(logs: dict) -> dict:
    """A ``server_update``'s logs with their device values read to the host, as a run records them."""
    pending = PendingRound(0, {}, dict(logs), True)
    read_rounds([pending])
    return pending.extra


def weights_np(fed: Quadratics, clients: list[int], weighting: str = "samples") -> np.ndarray:
    if weighting == "uniform":
        return np.full(len(clients), 1 / len(clients))
    n = fed.sizes[clients]
    return n / n.sum()


def run_rows(algo, ctx: RoundContext, steps: list[int], oracle) -> tuple[torch.Tensor, Upload]:
    """The batched engine's local work on the toy (engine/batched.py ``train_rows``): every row at
    once, ``oracle(k)`` the gradient oracle of step k, a row past its K_i keeping its iterate and
    carry. Returns the final iterates and the upload."""
    x, carry = ctx.start, algo.local_init(ctx, ctx.start)
    k_of = torch.tensor(steps)
    for k in range(max(steps)):
        moved, new = algo.local_step(ctx, x, carry, oracle(k))
        on = k_of > k
        x, carry = where_rows(on, moved, x), where_rows(on, new, carry)
    return x, algo.upload(ctx, x, carry)


class StepOracle:
    """A plain function of the rows as the oracle of local step ``step``."""

    def __init__(self, fn, step: int = 0):
        self.fn, self.step = fn, step

    def __call__(self, z: torch.Tensor, objective=None) -> torch.Tensor:
        return self.fn(z)

    def memory(self, z: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(z)
