"""A tiny deterministic federation for pinning update rules: client i has the quadratic loss
f_i(x) = ½‖A_i x − b_i‖², whose exact gradient A_iᵀ(A_i x − b_i) stands in for a minibatch
gradient. ``run_rounds`` drives an algorithm through the hooks exactly as documented in
``fedbench/algorithms/base.py``; the tests compare it with NumPy float64 re-derivations of the
papers' equations."""

from __future__ import annotations

import numpy as np
import torch

from fedbench.algorithms import ALGORITHMS, AlgorithmContext, RoundContext
from fedbench.compress import Compressed, build_compressor
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


def make_algorithm(name: str, fed: Quadratics, server: dict | None = None, compression: dict | None = None, layout: tuple[int, ...] = (), **params):
    entry = ALGORITHMS.get(name)
    spec = ServerSpec.model_validate({**dict(entry.obj.caps.server), **(server or {})})
    comp = dict(compression or {"kind": "none"})
    compressor = build_compressor(comp.pop("kind"), comp, layout or (fed.dim,))
    ctx = AlgorithmContext(fed.num_clients, fed.dim, torch.tensor(fed.sizes), torch.device("cpu"), 0, compressor, layout)
    return entry.obj(entry.params.model_validate(params), ServerOptimizer(spec), ctx), spec


def run_rounds(algo, fed: Quadratics, x0: np.ndarray, schedule: list[list[int]], steps: list[int], lr: float, weighting: str = "samples"):
    """Drive the hooks like the sequential engine; returns the final state."""
    state = algo.init_state(torch.tensor(x0))
    for state, _ in iterate_rounds(algo, fed, x0, schedule, steps, lr, weighting):
        pass
    return state


def iterate_rounds(algo, fed: Quadratics, x0: np.ndarray, schedule: list[list[int]], steps: list[int], lr: float, weighting: str = "samples"):
    """:func:`run_rounds` as a generator of (state, server logs) after every round."""
    state = algo.init_state(torch.tensor(x0))
    for t, clients in enumerate(schedule, start=1):
        index = torch.tensor(clients)
        k = torch.tensor([float(steps[i]) for i in clients], dtype=torch.float64)
        ctx = RoundContext(index, lr, k, algo.broadcast(state, index), algo.client_state(state, index), t)
        if algo.caps.full_gradient:  # the exact ∇f_i(x_t), as the engine's full_local_gradients
            x_t = ctx.broadcast["x"].unsqueeze(0)
            ctx.full_grad = torch.cat([fed.oracle(i)(x_t) for i in clients])
        uploads = {}
        for row, i in enumerate(clients):
            sub = ctx.select(slice(row, row + 1))
            x = sub.start
            for _ in range(steps[i]):
                x = algo.local_step(sub, x, fed.oracle(i))
            for name, v in algo.upload(sub, x).items():
                uploads.setdefault(name, []).append(v.value if isinstance(v, Compressed) else v)
        uploads = {name: torch.cat(v) for name, v in uploads.items()}
        sizes = torch.tensor(fed.sizes[clients])
        w = sizes / sizes.sum() if weighting == "samples" else torch.full((len(clients),), 1 / len(clients), dtype=torch.float64)
        yield state, algo.server_update(state, ctx, uploads, w)


def weights_np(fed: Quadratics, clients: list[int], weighting: str = "samples") -> np.ndarray:
    if weighting == "uniform":
        return np.full(len(clients), 1 / len(clients))
    n = fed.sizes[clients]
    return n / n.sum()
