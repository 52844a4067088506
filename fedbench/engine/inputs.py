"""The engine inputs an algorithm declares (``Capabilities.inputs``; names in
:data:`~fedbench.algorithms.capabilities.INPUTS`) and who provides them.

Before the clients' local work, the round loop asks for the inputs the algorithm declared:
first every round plug-in (:meth:`~fedbench.engine.plugins.RoundPlugin.provide`, e.g. the continual
stream's replay-memory gradients, the wireless uplink's bit allocation), then, for what no plug-in
gave, the engine's own providers (:data:`PROVIDERS`): ``full_grad`` from the clients' whole local
data, ``memory_grad``/``memory_size`` as zeros (no replay memory without a task stream). An input
nobody provides is absent from ``ctx.inputs`` (``bits`` without a wireless block). The round loop
names no input and no algorithm: a new input is a name in ``INPUTS`` and a provider here or in a
plug-in.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from fedbench.engine.batched import dropout_keys
from fedbench.engine.federation import InputRequest
from fedbench.engine.full_gradient import full_local_gradients

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
