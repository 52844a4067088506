"""The server updates of a population's runs as one computation: ``torch.func.vmap`` of the algorithm's
``server_update`` over a leading run axis, or its class's own ``server_updates`` of several runs
(:func:`joint_server_updates`: a host-side projection of the runs' rows at once); and their BatchNorm buffers
averaged together (:func:`joint_buffers`).

Each run of a population (:mod:`fedbench.engine.population`) has its own server: its state, its round's
context (clients, η_l, K_i, broadcast), its decoded uploads and aggregation weights, its η_g. Updated one
by one, R runs cost R calls of a few ``[P]``-sized kernels each, which on a GPU is R times the launches.
The runs whose updates have one shape are updated together instead: their inputs are stacked along a
new leading axis and the algorithm's own ``server_update`` (the hook, not a second copy of its rule) runs
once under ``torch.func.vmap``, with each run's η_l and η_g a per-run 0-d tensor
(:meth:`~fedbench.optim.server.ServerOptimizer.at_rate`). A run joins such a group (:func:`joint_key`)
when:

* its algorithm declares ``Capabilities.vmap_server`` (a pure tensor update whose ``[N, P]`` client tables, if
  any, change only through their own operations, nothing read to the host);
* and it shares with the group the algorithm class, its parameters, its server settings but η_g, and
  the shapes, dtypes and devices of every input (S, N, P); its client tables are on the device
  (:class:`~fedbench.algorithms.client_table.DeviceTable`: ``--client-state host`` keeps a run alone).

The client tables of a group's runs (control variates, gradient memories, …) live in one ``[R, N, P]``
storage, each run's table a view of its row (:func:`stacked_tables`: stacked once, when the group first forms
or its runs change, not each round), and the vmapped update changes them in place through their operations
(:class:`RunRows`), as each run's own update changes its table.

What the update is given is what reached the server, after the plug-ins chose it (a straggler's upload
lost, DP's clipped and noised rows: :meth:`~fedbench.engine.runner.RoundLoop.receive`), so plug-ins keep
their meaning. Every other run is updated alone, as on the batched executor. The vmapped update computes each
run's elementwise operations as that run alone does and its weighted sums as batched products, equal to
the run alone to float tolerance (tests/engine/test_population_server.py: in float64 to 1e-10, and in float32
bit for bit on this project's CPU). That holds with bias correction too: the runs' β^t is one vectorised power,
which may round the last float64 bit otherwise than each run's own.
"""

from __future__ import annotations

import copy
import json
import weakref
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

import torch
import torch.utils._pytree as pytree
from torch.func import vmap

from fedbench.algorithms.base import RoundContext, Upload
from fedbench.algorithms.client_table import ClientTable, DeviceTable
from fedbench.engine.flat_tree import flatten
from fedbench.engine.pending import to_device

if TYPE_CHECKING:
    from fedbench.engine.plugins import Received
    from fedbench.engine.runner import RoundLoop
    from fedbench.models.flat import Buffers

Update = tuple[Any, dict]  # a run's new server state and its logs


def server_inputs(loop: RoundLoop, received: Received) -> Any:
    """What a run's ``server_update`` reads but its rates, as one pytree: its state, its round's
    context's tensors, its decoded uploads and its weights."""
    ctx = received.ctx
    context = (ctx.clients, ctx.steps, dict(ctx.broadcast), ctx.held, dict(ctx.inputs), ctx.sizes)
    return (loop.state, context, received.uploads.sent, received.uploads.kept, received.weights)


def rates(loops: list[RoundLoop], received: list[Received]) -> tuple[torch.Tensor, torch.Tensor]:
    """Each run's η_l and η_g, ``[R]`` each in the model's dtype, moved to its device in one copy each
    (:func:`~fedbench.engine.pending.to_device`)."""
    x = loops[0].state.x
    local = torch.tensor([float(got.ctx.lr) for got in received], dtype=x.dtype)
    server = torch.tensor([float(loop.s.algorithm.server.lr) for loop in loops], dtype=x.dtype)
    return to_device(local, x.device), to_device(server, x.device)


Flat = tuple[list[Any], pytree.TreeSpec]  # a run's server inputs flattened (:func:`server_inputs`)


def joint_key(loop: RoundLoop, received: Received | None) -> tuple[Hashable, Flat] | None:
    """The group of runs whose server updates are one vmapped call (see the module's docstring), with the run's
    flattened server inputs; None for a run updated alone."""
    algorithm = loop.s.algorithm
    if received is None or not algorithm.caps.vmap_server:
        return None
    if not isinstance(received.ctx.lr, float) or not isinstance(algorithm.server.lr, float):
        return None  # a rate already on the device: the run is updated alone
    leaves, signature, structure = flatten(server_inputs(loop, received))
    if any(isinstance(v, ClientTable) and not isinstance(v, DeviceTable) for v in leaves):
        return None  # a table in host memory: the run is updated alone
    shapes = tuple(describe(v) for v in leaves)
    return (type(algorithm), settings_of(algorithm), signature, shapes, received.ctx.round), (leaves, structure)


def describe(leaf: Any) -> Hashable:
    """What of a server input must be equal across a group: a tensor's or table's shape, dtype and device, a
    constant's value."""
    if isinstance(leaf, torch.Tensor):
        return (type(leaf), leaf.shape, leaf.dtype, leaf.device)
    if isinstance(leaf, ClientTable):
        return (type(leaf), tuple(leaf.shape), leaf.dtype, leaf.data.device)
    return ("constant", repr(leaf))


_SETTINGS: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


def settings_of(algorithm: Any) -> str:
    """The algorithm's parameters and its server settings but η_g (canonical JSON), once per algorithm object
    (they do not change during a run)."""
    if algorithm not in _SETTINGS:
        server = algorithm.server.spec.model_dump(mode="json", exclude={"lr"})
        _SETTINGS[algorithm] = json.dumps([algorithm.params.model_dump(mode="json"), server], sort_keys=True)
    return _SETTINGS[algorithm]


def server_updates(loops: list[RoundLoop], received: list[Received | None]) -> dict[int, Update]:
    """The ``server_update`` of every run of ``loops`` that shares a :func:`joint_key` with another,
    computed per group as one vmapped call; keyed by the run's index. Runs left out are updated alone
    by their loop."""
    groups: dict[Hashable, list[tuple[int, Received, Flat]]] = {}
    for i, (loop, got) in enumerate(zip(loops, received)):
        keyed = joint_key(loop, got)
        if keyed is not None and got is not None:
            groups.setdefault(keyed[0], []).append((i, got, keyed[1]))
    updates: dict[int, Update] = {}
    for members in groups.values():
        if len(members) > 1:
            results = joint_update(
                [loops[i] for i, _, _ in members], [got for _, got, _ in members], [f for *_, f in members]
            )
            updates.update(zip([i for i, _, _ in members], results))
    updates.update(joint_server_updates(loops, received))
    return updates


def joint_server_updates(loops: list[RoundLoop], received: list[Received | None]) -> dict[int, Update]:
    """The server updates of the runs whose algorithm declares ``Capabilities.joint_server``, by class, through
    the class's ``server_updates`` (each run with its own algorithm, state and round); keyed by the run's index."""
    by_class: dict[type, list[int]] = {}
    for i, (loop, got) in enumerate(zip(loops, received)):
        if got is not None and loop.s.algorithm.caps.joint_server:
            by_class.setdefault(type(loop.s.algorithm), []).append(i)
    updates: dict[int, Update] = {}
    for cls, members in by_class.items():
        if len(members) > 1:
            calls = []
            for i in members:
                got = received[i]
                assert got is not None
                calls.append((loops[i].s.algorithm, loops[i].state, got.ctx, got.uploads, got.weights))
            updates.update(zip(members, cls.server_updates(calls)))
    return updates


class RunRows(DeviceTable):
    """One run's rows of a group's ``[R, N, P]`` table storage inside the vmapped update. Its ``add`` is an
    accumulating ``index_put_``: under ``vmap`` one kernel for every run, where ``index_add_`` loops over the runs;
    the same sums (with α ≠ 1, α·rows is rounded before the add, as ``index_add_`` may not: float tolerance)."""

    def add(self, clients: torch.Tensor, rows: torch.Tensor, alpha: float = 1) -> ClientTable:
        rows = self._here(rows)
        self.data.index_put_((clients.to(self.data.device),), rows if alpha == 1 else rows * alpha, accumulate=True)
        return self


def stacked_tables(tables: list[ClientTable]) -> torch.Tensor:
    """One ``[R, N, P]`` storage holding the runs' tables (one column of a group's leaves), each run's table
    rebound to a view of its row: the storage they already share when they are its rows in order, else a new
    one (once, when a group forms or its runs change; each table is donated, module docstring of
    :mod:`~fedbench.algorithms.client_table`)."""
    base = tables[0].data._base
    if (
        base is not None
        and base.shape == (len(tables), *tables[0].shape)
        and all(t.data._base is base and t.data.storage_offset() == r * t.numel() for r, t in enumerate(tables))
    ):
        return base
    stacked = torch.stack([t.data for t in tables])
    for r, t in enumerate(tables):
        t.data = stacked[r]
    return stacked


def joint_update(loops: list[RoundLoop], received: list[Received], flat: list[Flat]) -> list[Update]:
    """The server updates of runs of one :func:`joint_key` (``flat``: their flattened server inputs), as one
    ``vmap`` of the first run's algorithm's ``server_update`` over their stacked inputs (their client tables:
    their shared storage, changed in place); each run's (state, logs), views of the stacked result, with its own
    client tables."""
    first, round_ = loops[0].s.algorithm, received[0].ctx.round
    template, structure = flat[0]
    moving = [i for i, v in enumerate(template) if isinstance(v, torch.Tensor | ClientTable)]
    stacked = [
        stacked_tables([leaves[i] for leaves, _ in flat])
        if isinstance(template[i], ClientTable)
        else torch.stack([leaves[i] for leaves, _ in flat])
        for i in moving
    ]
    local_rates, server_rates = rates(loops, received)
    returned: list[pytree.TreeSpec] = []
    tables_out: list[list[int | None]] = []  # each output leaf: the input leaf of the table it is, or None

    def update(rate: torch.Tensor, server_lr: torch.Tensor, *tensors: torch.Tensor) -> list[torch.Tensor]:
        leaves, tables = list(template), {}
        for i, v in zip(moving, tensors):
            if isinstance(template[i], ClientTable):
                v = tables[i] = RunRows(v, template[i].device)  # this run's rows of the shared storage
            leaves[i] = v
        state, context, sent, kept, weights = pytree.tree_unflatten(leaves, structure)
        clients, steps, broadcast, held, inputs, sizes = context
        ctx = RoundContext(clients, rate, steps, broadcast, held, round_, inputs, sizes)
        algorithm = copy.copy(first)
        algorithm.server = first.server.at_rate(server_lr)
        out, spec = pytree.tree_flatten(algorithm.server_update(state, ctx, Upload(sent, kept), weights))
        returned.append(spec)
        which = {id(t): i for i, t in tables.items()}
        if any(isinstance(v, ClientTable) and id(v) not in which for v in out):
            raise ValueError(f"{type(first).__name__}.server_update returned a client table it was not given")
        tables_out.append([which.get(id(v)) if isinstance(v, ClientTable) else None for v in out])
        return [rate.new_zeros(()) if isinstance(v, ClientTable) else v for v in out]

    outputs = vmap(update)(local_rates, server_rates, *stacked)
    results = []
    for r, leaves in enumerate(zip(*(v.unbind(0) for v in outputs))):
        own = [flat[r][0][i] if i is not None else v for v, i in zip(leaves, tables_out[0])]
        results.append(pytree.tree_unflatten(own, returned[0]))
    return results


def joint_buffers(received: list[Received | None]) -> dict[int, Buffers]:
    """The average of the received BatchNorm buffers (:func:`~fedbench.models.flat.average_buffers`: the float
    buffers weighted by ``buffer_weights``, the integer counters their maximum) of every run that received as
    many clients' buffers of one shape as another run, computed per group as one batched product (or maximum)
    a buffer over ``[G, k, …]`` rows; keyed by the run's index, each a view of its group's result. The others
    average alone."""
    groups: dict[Hashable, list[int]] = {}
    for i, got in enumerate(received):
        if got is None or not got.buffers or not got.buffers[0]:
            continue
        shapes = tuple((n, tuple(v.shape), v.dtype, v.device) for n, v in got.buffers[0].items())
        groups.setdefault((len(got.buffers), shapes, got.buffer_weights.dtype), []).append(i)
    averaged: dict[int, Buffers] = {}
    for members in groups.values():
        if len(members) < 2:
            continue
        got = [received[i] for i in members if received[i] is not None]
        weights = torch.stack([g.buffer_weights for g in got])  # [G, k]
        joint = {}
        for name, first in got[0].buffers[0].items():
            rows = torch.stack([b[name] for g in got for b in g.buffers]).unflatten(0, (len(got), -1))  # [G, k, …]
            if first.is_floating_point():
                joint[name] = torch.einsum("gk,gk...->g...", weights.to(first.dtype), rows).unbind(0)
            else:
                joint[name] = rows.amax(1).unbind(0)
        averaged.update((i, {n: v[j] for n, v in joint.items()}) for j, i in enumerate(members))
    return averaged
