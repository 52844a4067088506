"""The algorithm contract (issue 25), checked for every registered algorithm on the toy federation:
hooks return new values and mutate nothing they are given — the state, the held rows, the broadcast,
the iterates, the carry (only ``[N, P]`` client tables are donated, module ``client_table``) — the
state is a typed pytree whose checkpoint leaves restore it exactly, and every carry leaf is a block of
rows, which the batched engine masks for clients past their K_i."""

import dataclasses

import numpy as np
import pytest
import torch

from fedbench.algorithms import ALGORITHMS, RoundContext
from fedbench.algorithms.client_table import ClientTable
from fedbench.algorithms.state import ServerState, flatten_state, restore_state, state_leaves
from fedbench.engine.uploads import decoded, merged
from tests.algorithms.toy import Quadratics, ToyOracle, make_algorithm

X0 = np.array([0.4, -0.3, 0.2, 0.1])
SCHEDULE = [[0, 2, 3], [1, 3, 4], [0, 1, 4]]
STEPS = [3, 1, 2, 4, 2]


def tensors(value) -> list[torch.Tensor]:
    """The tensor leaves of a pytree (client tables left out: they are donated)."""
    return [v for v in state_leaves(value) if isinstance(v, torch.Tensor)]


def snapshot(value) -> list[torch.Tensor]:
    return [t.clone() for t in tensors(value)]


def unchanged(value, before: list[torch.Tensor]) -> bool:
    now = tensors(value)
    return len(now) == len(before) and all(torch.equal(a, b) for a, b in zip(now, before))


def round_inputs(algo, fed: Quadratics, point: torch.Tensor, clients: list[int]) -> dict[str, torch.Tensor]:
    """The engine inputs the algorithm declared, as the engine's providers give them without plug-ins."""
    given = {}
    if "full_grad" in algo.caps.inputs:
        given["full_grad"] = torch.cat([fed.oracle(i)(point.unsqueeze(0)) for i in clients])
    if "memory_grad" in algo.caps.inputs:
        given["memory_grad"] = torch.zeros(len(clients), fed.dim, dtype=torch.float64)
    if "memory_size" in algo.caps.inputs:
        given["memory_size"] = torch.zeros(len(clients), dtype=torch.float64)
    return given


@pytest.mark.parametrize("name", [entry.name for entry in ALGORITHMS])
def test_hooks_return_new_values_and_mutate_nothing_they_are_given(name):
    fed = Quadratics(num_clients=5, dim=4)
    algo, spec = make_algorithm(name, fed)
    algo.ctx = dataclasses.replace(algo.ctx, batch_size=2)  # as the engine sets it from local.batch_size
    state = algo.init_state(torch.tensor(X0))
    assert isinstance(state, ServerState) and dataclasses.is_dataclass(state)
    for t, clients in enumerate(SCHEDULE, start=1):
        idx = torch.tensor(clients)
        before = snapshot(state)
        broadcast = algo.broadcast(state, idx)
        steps = torch.tensor([float(STEPS[i]) for i in clients], dtype=torch.float64)
        inputs = round_inputs(algo, fed, broadcast["x"], clients)
        sizes = torch.tensor(fed.sizes)
        ctx = RoundContext(idx, 0.05, steps, broadcast, algo.client_state(state, idx), t, inputs, sizes)
        n = sizes[idx]
        weights = n / n.sum() if spec.weighting == "samples" else torch.full_like(n, 1 / len(n))
        given = (snapshot(ctx.held), {k: v.clone() for k, v in ctx.broadcast.items()})
        ctx = algo.prepare_round(state, ctx, weights)
        parts = []
        for row, i in enumerate(clients):
            sub = ctx.select(slice(row, row + 1))
            x, carry = sub.start, algo.local_init(sub, sub.start)
            for k in range(STEPS[i]):
                kept = (x.clone(), snapshot(carry), snapshot(sub.held))
                new_x, new_carry = algo.local_step(sub, x, carry, ToyOracle(fed, i, k))
                assert torch.equal(x, kept[0]) and unchanged(carry, kept[1]) and unchanged(sub.held, kept[2]), k
                assert all(leaf.shape[0] == 1 for leaf in tensors(new_carry)), "every carry leaf is a block of rows"
                x, carry = new_x, new_carry
            parts.append(algo.upload(sub, x, carry))
        assert all(torch.equal(ctx.broadcast[k], v) for k, v in given[1].items())
        new, logs = algo.server_update(state, ctx, decoded(merged(parts)), weights)
        assert unchanged(state, before), "server_update changed the state it was given"
        assert type(new) is type(state) and isinstance(logs, dict)
        back = restore_state(algo.init_state(torch.tensor(X0)), flatten_state(new), torch.device("cpu"))
        assert type(back) is type(new)
        for a, b in zip(state_leaves(back), state_leaves(new), strict=True):
            a, b = (v.data if isinstance(v, ClientTable) else v for v in (a, b))
            assert (a is None and b is None) or torch.equal(a, b)
        state = new
    assert not torch.equal(state.x, torch.tensor(X0))  # the rounds moved the model
