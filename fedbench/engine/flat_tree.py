"""The pytrees a population flattens for each of its runs every round (their server inputs,
:mod:`fedbench.engine.population_server`), flattened without ``torch.utils._pytree``'s per-node overhead: the
leaves ``tree_flatten`` gives, in its order, and a hashable signature of their structure (nested tuples of types and
keys, hashed in C) for grouping runs. Torch's own ``TreeSpec`` (for ``tree_unflatten``) is made once a signature, and
that first time its leaves are checked to be the walk's, one by one (a structure the walk would read otherwise is
flattened by torch each time: :data:`_TORCH`).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import torch.utils._pytree as pytree

_LEAF = 0  # a leaf's place in a signature
_MISSING = object()
_NODES: dict[type, Any] = {}  # a type → its pytree NodeDef, or None for a leaf (torch's rule, memoised)
_SPECS: dict[Hashable, pytree.TreeSpec] = {}  # a signature → its TreeSpec
_TORCH: set[Hashable] = set()  # signatures whose structure torch flattens otherwise than the walk: torch's then


def flatten(tree: Any) -> tuple[list[Any], Hashable, pytree.TreeSpec]:
    """``tree``'s leaves (as ``torch.utils._pytree.tree_flatten`` gives them), a hashable signature of its
    structure (equal for trees of one structure) and its ``TreeSpec``."""
    leaves: list[Any] = []
    try:
        signature: Hashable = _walk(tree, leaves)
        hash(signature)
    except TypeError:  # a node whose context does not hash: torch's TreeSpec is the signature
        theirs, spec = pytree.tree_flatten(tree)
        return theirs, spec, spec
    spec = _SPECS.get(signature)
    if spec is not None and signature not in _TORCH:
        return leaves, signature, spec
    theirs, spec = pytree.tree_flatten(tree)
    if len(theirs) != len(leaves) or any(a is not b for a, b in zip(theirs, leaves)):
        _TORCH.add(signature)
        return theirs, spec, spec
    _SPECS[signature] = spec
    return leaves, signature, spec


def _node(kind: type) -> Any:
    """The pytree NodeDef of instances of ``kind`` (every namedtuple class is one), or None for a leaf."""
    found = _NODES.get(kind, _MISSING)
    if found is _MISSING:
        found = _NODES[kind] = pytree.SUPPORTED_NODES.get(
            pytree.namedtuple if pytree.is_namedtuple_class(kind) else kind
        )
    return found


def _walk(node: Any, leaves: list[Any]) -> Hashable:
    """``node``'s signature, its leaves appended to ``leaves`` in torch's order."""
    kind = type(node)
    if kind is tuple or kind is list:
        return (kind, tuple([_walk(child, leaves) for child in node]))
    if kind is dict:
        return (dict, tuple(node), tuple([_walk(child, leaves) for child in node.values()]))
    found = _node(kind)
    if found is None:
        leaves.append(node)
        return _LEAF
    children, context = found.flatten_fn(node)
    return (kind, _frozen(context), tuple([_walk(child, leaves) for child in children]))


def _frozen(context: Any) -> Hashable:
    """A node's context as a hashable value (lists as tuples)."""
    if isinstance(context, list | tuple):
        return tuple(_frozen(c) for c in context)
    return context
