"""fedbench.engine.flat_tree against torch.utils._pytree: the same leaves in the same order, torch's TreeSpec, and
a signature equal exactly for trees of one structure."""

import dataclasses
from typing import NamedTuple

import torch
import torch.utils._pytree as pytree

from fedbench.algorithms.client_table import ClientTable
from fedbench.algorithms.state import ServerState, state
from fedbench.engine import flat_tree


@state
class Probe(ServerState):
    momentum: torch.Tensor
    table: ClientTable | None


class Kept(NamedTuple):
    a: torch.Tensor
    b: torch.Tensor | None


def tree(p=3, held=True, key="x"):
    table = ClientTable(torch.zeros(4, p), torch.device("cpu"))
    server = Probe(x=torch.ones(p), opt=(torch.zeros(p), 1), momentum=torch.zeros(p), table=table)
    context = (torch.arange(2), torch.ones(2), {key: torch.ones(2, p)}, Kept(torch.ones(2), None) if held else None)
    return (server, context, {"delta": torch.ones(2, p), "n": 3}, [0.5, None], torch.ones(2))


def test_the_leaves_and_spec_are_torchs_and_the_signature_tells_structures_apart():
    for t in (tree(), tree(held=False), tree(key="y"), tree(p=5)):
        leaves, signature, spec = flat_tree.flatten(t)
        theirs, their_spec = pytree.tree_flatten(t)
        assert len(leaves) == len(theirs) and all(a is b for a, b in zip(leaves, theirs))
        assert spec == their_spec and hash(signature) is not None
        rebuilt = pytree.tree_unflatten(leaves, spec)
        assert type(rebuilt[0]) is Probe and rebuilt[0].table is t[0].table
    signatures = [flat_tree.flatten(t)[1] for t in (tree(), tree(held=False), tree(key="y"))]
    assert len(set(signatures)) == 3  # None for a held NamedTuple, another broadcast key: other structures
    assert flat_tree.flatten(tree())[1] == flat_tree.flatten(tree(p=5))[1]  # shapes are not structure


def test_a_context_that_does_not_hash_is_flattened_by_torch(monkeypatch):
    @dataclasses.dataclass
    class Odd:
        v: torch.Tensor

    monkeypatch.setitem(
        pytree.SUPPORTED_NODES,
        Odd,
        pytree.NodeDef(Odd, lambda o: ([o.v], {"unhashable": []}), lambda c, ctx: Odd(*c), None),
    )
    monkeypatch.setattr(flat_tree, "_NODES", {})
    odd = Odd(torch.ones(1))
    leaves, signature, spec = flat_tree.flatten((odd, 2))
    assert leaves[0] is odd.v and leaves[1] == 2 and signature == spec


def test_a_structure_the_walk_reads_otherwise_is_flattened_by_torch(monkeypatch):
    """Should the walk's leaves ever differ from torch's for a structure, that structure is torch's from then on."""
    walk = flat_tree._walk

    def astray(node, leaves):  # a leaf too many at every node
        leaves.append(None)
        return walk(node, leaves)

    monkeypatch.setattr(flat_tree, "_walk", astray)
    monkeypatch.setattr(flat_tree, "_SPECS", {})
    monkeypatch.setattr(flat_tree, "_TORCH", set())
    t = tree()
    for _ in range(2):
        leaves, _, spec = flat_tree.flatten(t)
        theirs, their_spec = pytree.tree_flatten(t)
        assert all(a is b for a, b in zip(leaves, theirs)) and len(leaves) == len(theirs) and spec == their_spec
    assert flat_tree._TORCH
