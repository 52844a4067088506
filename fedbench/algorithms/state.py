"""Typed algorithm state: what the server keeps between rounds, declared per algorithm.

Every algorithm's server state is a frozen dataclass deriving from :class:`ServerState` (the global
model ``x`` and the server optimizer's state ``opt``), decorated with :func:`state`, which also
registers it as a pytree for ``torch.utils._pytree`` / ``torch.func``: its fields are the leaves
(tensors, :class:`~fedbench.algorithms.client_table.ClientTable` s, nested optimizer states).
Hooks return a new state (``dataclasses.replace(state, x=…)``) and never mutate the one they got.
What the clients hold themselves (``client_state``) and carry through their local steps
(``local_init``/``local_step``) are ``NamedTuple`` s of ``[S, ...]`` rows, also pytrees.

:func:`flatten_state`/:func:`restore_state` turn a state into plain tensors for a checkpoint and
back, given a fresh state of the same algorithm for the structure.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

import torch
import torch.utils._pytree as pytree
from typing_extensions import dataclass_transform

from fedbench.algorithms.client_table import ClientTable
from fedbench.optim.transform import OptState

T = TypeVar("T")


@dataclass_transform(frozen_default=True)
def state(cls: type[T]) -> type[T]:
    """A frozen dataclass registered as a pytree (its fields are its children)."""
    cls = dataclasses.dataclass(frozen=True)(cls)
    pytree.register_dataclass(cls)
    return cls


@state
class ServerState:
    """The server state of FedAvg, and the fields every algorithm's state starts with: the global
    model ``x`` ``[P]`` and the server optimizer's state ``opt`` (:mod:`fedbench.optim.server`)."""

    x: torch.Tensor
    opt: OptState

    def fields(self) -> dict[str, Any]:
        """The state's fields by name (shallow: the values themselves)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


S = TypeVar("S", bound=ServerState)


def extend(base: ServerState, cls: type[S], **more: Any) -> S:
    """``cls`` (a subclass of ``base``'s type) with ``base``'s fields and ``more``."""
    return cls(**base.fields(), **more)


def state_leaves(value: Any) -> list[Any]:
    """The leaves of a state (tensors, client tables, Python scalars)."""
    return pytree.tree_leaves(value)


def state_bytes(value: Any) -> int:
    """Bytes held by a state's tensors and tables."""
    return sum(v.numel() * v.element_size() for v in state_leaves(value) if isinstance(v, (torch.Tensor, ClientTable)))


def flatten_state(value: Any) -> list[Any]:
    """The state's leaves as plain tensors (a client table as its whole ``data``; a copy of it where it is a
    view of a population's ``[R, N, P]`` storage, which ``torch.save`` would write whole), for ``torch.save``."""
    return [
        (v.data if v.data._base is None else v.data.clone()) if isinstance(v, ClientTable) else v
        for v in state_leaves(value)
    ]


def restore_state(fresh: Any, leaves: list[Any], device: torch.device) -> Any:
    """The state of ``fresh``'s structure (an algorithm's ``init_state``) with the checkpointed
    ``leaves``; each client table comes back as the kind ``fresh`` has (device or host), and each tensor where
    ``fresh`` keeps it (e.g. GradMA's slot bookkeeping on the host)."""
    mine, spec = pytree.tree_flatten(fresh)
    if len(mine) != len(leaves):
        raise ValueError(f"the checkpoint holds {len(leaves)} state leaves, the algorithm's state has {len(mine)}")
    restored = [
        type(m).restore(v, device)
        if isinstance(m, ClientTable)
        else v.to(m.device)
        if isinstance(m, torch.Tensor) and isinstance(v, torch.Tensor)
        else v
        for m, v in zip(mine, leaves)
    ]
    return pytree.tree_unflatten(restored, spec)
