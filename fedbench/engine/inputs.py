"""The engine inputs an algorithm declares (``Capabilities.inputs``; names in
:data:`~fedbench.algorithms.capabilities.INPUTS`) and who provides them.

Before the clients' local work, the round loop asks for the inputs the algorithm declared:
first every round plug-in (:meth:`~fedbench.engine.plugins.RoundPlugin.provide`, e.g. the continual
stream's replay-memory gradients, the wireless uplink's bit allocation), then, for what no plug-in
gave, the engine's own providers (:data:`PROVIDERS`): ``full_grad`` from the clients' whole local
data, ``memory_grad``/``memory_size`` as zeros (no replay memory without a task stream). An input
nobody provides is absent from ``ctx.inputs`` (``bits`` without a wireless block). A gradient over samples
(``full_grad``, a replay memory's ``memory_grad``) is provided as a :class:`~fedbench.engine.federation.Gradients`,
which the engine computes: a run's alone (:func:`resolve`), a population's runs' in one batched computation
(:func:`joint_inputs`). The round loop names no input and no algorithm: a new input is a name in ``INPUTS`` and
a provider here or in a plug-in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch

from fedbench.engine.batched import dropout_keys, runs_dropout_keys
from fedbench.engine.federation import Gradients, InputRequest
from fedbench.engine.full_gradient import full_local_gradients, runs_client_gradients

Provided = torch.Tensor | Gradients  # an input's value, or the gradients the engine computes for it
Provider = Callable[[InputRequest], Provided]


def full_gradients(req: InputRequest) -> Gradients:
    """∇f_i(x_t) ``[S, P]`` over each client's whole local data (:mod:`fedbench.engine.full_gradient`), dropout
    keyed by the round's streams."""
    return Gradients(tuple(range(len(req.ids))), tuple(req.fed.parts[c] for c in req.ids), dropout=True)


def empty_memory_gradients(req: InputRequest) -> torch.Tensor:
    """Without a replay memory: zero gradients ``[S, P]``."""
    return req.point.new_zeros((len(req.clients), req.point.numel()))


def empty_memory_sizes(req: InputRequest) -> torch.Tensor:
    """Without a replay memory: zero sizes ``[S]``."""
    return req.point.new_zeros(len(req.clients))


PROVIDERS: dict[str, Provider] = {
    "full_grad": full_gradients,
    "memory_grad": empty_memory_gradients,
    "memory_size": empty_memory_sizes,
}


def _placed(req: InputRequest, asked: Gradients, grads: torch.Tensor) -> torch.Tensor:
    """``grads`` of ``asked.rows`` as the ``[S, P]`` input (zero rows elsewhere)."""
    if asked.rows == tuple(range(len(req.ids))):
        return grads
    out = req.point.new_zeros((len(req.ids), req.point.numel()))
    out[list(asked.rows)] = grads
    return out


def resolve(req: InputRequest, value: Provided) -> torch.Tensor:
    """An input's value for one run: ``value`` itself, or the :class:`Gradients` it asks for, computed."""
    if not isinstance(value, Gradients):
        return value
    if not value.parts:
        return req.point.new_zeros((len(req.ids), req.point.numel()))
    keys = None
    if value.dropout:
        keys = dropout_keys(req.cfg.seed, req.round, [req.ids[r] for r in value.rows], req.point.device)
    grads = full_local_gradients(
        req.model, req.buffers, req.train, list(value.parts), req.point, req.batch_size, req.cfg, keys, req.rows
    )
    return _placed(req, value, grads)


def runs_resolve(items: list[tuple[InputRequest, Gradients]], rows: int = 0) -> list[torch.Tensor]:
    """:func:`resolve` of several runs' :class:`Gradients` (one model, training set and minibatch size) as one
    batched computation (:func:`~fedbench.engine.full_gradient.runs_client_gradients`, ``rows`` a call at least:
    the rows the population's local steps hold at once), each finished with its run's clipping/weight-decay
    convention."""
    first = items[0][0]
    device = first.point.device
    working = [(req, asked) for req, asked in items if asked.parts]
    keyed = [(req.cfg.seed, req.round, [req.ids[r] for r in asked.rows]) for req, asked in working if asked.dropout]
    drawn = iter(runs_dropout_keys(keyed, device).split([len(c) for *_, c in keyed]) if keyed else ())
    plain = sum(len(asked.rows) for _, asked in working if not asked.dropout)
    zeros = iter(
        torch.zeros(plain, dtype=torch.int64, device=device).split(
            [len(asked.rows) for _, asked in working if not asked.dropout]
        )
    )
    runs = [
        (req.buffers, list(asked.parts), req.point, next(drawn) if asked.dropout else next(zeros))
        for req, asked in working
    ]
    grads = iter(runs_client_gradients(first.model, first.train, runs, first.batch_size, rows) if runs else ())
    out = []
    for req, asked in items:
        if not asked.parts:
            out.append(req.point.new_zeros((len(req.ids), req.point.numel())))
            continue
        g = next(grads)
        out.append(_placed(req, asked, req.cfg.finish(g, req.point.unsqueeze(0).expand(len(g), -1))))
    return out


def joint_inputs(
    asked: Mapping[int, tuple[InputRequest, Mapping[str, Provided]]], chunk: int | None = None
) -> dict[int, dict[str, torch.Tensor]]:
    """The inputs of several runs (keyed by the run's index: its request and what its providers gave,
    :meth:`~fedbench.engine.runner.RoundLoop.asked_inputs`), each input's :class:`Gradients` computed for all the
    runs that ask for it at once where two or more do (:func:`runs_resolve`, as many rows a call as the population's
    local steps hold: ``chunk``, or all the runs' clients when None), the rest as each run alone would."""
    given: dict[int, dict[str, torch.Tensor]] = {i: {} for i in asked}
    names = sorted({name for _, values in asked.values() for name in values})
    for name in names:
        deferred = [i for i, (_, values) in asked.items() if isinstance(values.get(name), Gradients)]
        if len(deferred) >= 2:
            items = [(asked[i][0], asked[i][1][name]) for i in deferred]
            rows = chunk or sum(len(req.ids) for req, _ in items)
            for i, value in zip(deferred, runs_resolve(items, rows)):  # type: ignore[arg-type]
                given[i][name] = value
        for i, (req, values) in asked.items():
            if name in values and name not in given[i]:
                given[i][name] = resolve(req, values[name])
    return given
