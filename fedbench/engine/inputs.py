"""The engine inputs an algorithm declares (``Capabilities.inputs``; names in
:data:`~fedbench.algorithms.capabilities.INPUTS`) and who provides them.

Before the clients' local work, the round loop asks for the inputs the algorithm declared:
first every round plug-in (:meth:`~fedbench.engine.plugins.RoundPlugin.provide`, e.g. the continual
stream's replay-memory gradients, the wireless uplink's bit allocation), then, for what no plug-in
gave, the engine's own providers (:data:`PROVIDERS`): ``full_grad`` from the clients' whole local
data, ``memory_grad``/``memory_size`` as zeros (no replay memory without a task stream). An input
nobody provides is absent from ``ctx.inputs`` (``bits`` without a wireless block). A population computes
an input of :data:`JOINT_PROVIDERS` for all its runs that declared it at once (:func:`joint_inputs`). The
round loop names no input and no algorithm: a new input is a name in ``INPUTS`` and a provider here or in a
plug-in.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from fedbench.engine.batched import dropout_keys, runs_dropout_keys
from fedbench.engine.federation import InputRequest
from fedbench.engine.full_gradient import full_local_gradients, runs_client_gradients

Provider = Callable[[InputRequest], torch.Tensor]


def full_gradients(req: InputRequest) -> torch.Tensor:
    """∇f_i(x_t) ``[S, P]`` over each client's whole local data (:mod:`fedbench.engine.full_gradient`)."""
    ids = list(req.ids)
    keys = dropout_keys(req.cfg.seed, req.round, ids, req.point.device)
    parts = [req.fed.parts[c] for c in ids]
    return full_local_gradients(req.model, req.buffers, req.train, parts, req.point, req.batch_size, req.cfg, keys)


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


def runs_full_gradients(requests: list[InputRequest]) -> list[torch.Tensor]:
    """:func:`full_gradients` of several runs' requests (one model, training set and minibatch size) as one
    batched computation (:func:`~fedbench.engine.full_gradient.runs_client_gradients`), each finished with its
    run's clipping/weight-decay convention."""
    first = requests[0]
    keys = runs_dropout_keys([(req.cfg.seed, req.round, list(req.ids)) for req in requests], first.point.device)
    runs = [
        (req.buffers, [req.fed.parts[c] for c in req.ids], req.point, own)
        for req, own in zip(requests, keys.split([len(req.ids) for req in requests]))
    ]
    grads = runs_client_gradients(first.model, first.train, runs, first.batch_size)
    return [req.cfg.finish(g, req.point.unsqueeze(0).expand(len(g), -1)) for req, g in zip(requests, grads)]


JOINT_PROVIDERS: dict[str, Callable[[list[InputRequest]], list[torch.Tensor]]] = {"full_grad": runs_full_gradients}


def joint_inputs(requests: dict[int, InputRequest]) -> dict[int, dict[str, torch.Tensor]]:
    """The inputs of :data:`JOINT_PROVIDERS` of the runs ``requests`` (keyed by the run's index) that declared
    them, each computed for all those runs at once where two or more did; keyed by the run's index (the round
    loop uses them where no plug-in provides the input, :meth:`~fedbench.engine.runner.RoundLoop.inputs`)."""
    given: dict[int, dict[str, torch.Tensor]] = {}
    for name, provider in JOINT_PROVIDERS.items():
        wanting = [i for i, req in requests.items() if name in req.wanted]
        if len(wanting) < 2:
            continue
        for i, value in zip(wanting, provider([requests[i] for i in wanting])):
            given.setdefault(i, {})[name] = value
    return given
