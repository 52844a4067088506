"""The axes a scenario adds to plain FL: a registry of the round plug-in each spec block attaches.

A run gets, in registration order, the plug-in of every registered block present in its spec
(``continual``: a stream of tasks with replay memories, :mod:`fedbench.engine.task_stream`;
``wireless``: a deadline-constrained uplink with a bandwidth allocation, :mod:`fedbench.wireless.plugin`;
``validation``: the held-out validation score of a tuning trial, docs/tuning.md). A new axis is a
block in the schema, a :class:`~fedbench.engine.plugins.RoundPlugin` and one :func:`register_axis`
line; the round loop does not change. An axis outside the engine registers its plug-in by entry
point, ``"package.module:Name"``, imported only when a spec has the block: the wireless plug-in's
module (and cvxpy, its allocation's solver) loads for wireless runs only, and the engine imports no
axis package (tests/test_layout.py). The task stream and the validation score are engine modules on
packages below the engine (:mod:`fedbench.continual`'s tasks and memories). A block may be a dotted path
into a spec field: ``clients.availability`` and ``clients.stragglers`` (:mod:`fedbench.engine.availability`).
``privacy`` (client-level differential privacy, :mod:`fedbench.privacy`, by entry point) comes last, so it clips and
noises the uploads that the other axes let reach the server.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fedbench.engine.availability import ClientAvailability, Stragglers
from fedbench.engine.plugins import RoundPlugin
from fedbench.engine.task_stream import ContinualStream
from fedbench.engine.validation import ValidationScore

if TYPE_CHECKING:
    from fedbench.engine.setup import RunSetup
    from fedbench.scenario import RunSpec

PluginFactory = Callable[["RunSpec", int, "RunSetup"], RoundPlugin]


@dataclass(frozen=True)
class Axis:
    """A spec block (a :class:`~fedbench.scenario.RunSpec` field) and the plug-in it attaches when present:
    a factory, or its entry point ``"package.module:Name"`` (imported when a spec first has the block)."""

    block: str
    build: PluginFactory | str

    def factory(self) -> PluginFactory:
        """The plug-in factory, its module imported on first use when given by entry point."""
        if not isinstance(self.build, str):
            return self.build
        module, _, name = self.build.partition(":")
        return getattr(importlib.import_module(module), name)


AXES: tuple[Axis, ...] = ()


def register_axis(block: str, build: PluginFactory | str) -> None:
    """Attach ``build``'s plug-in to every run whose spec has ``block`` (after the axes registered before)."""
    global AXES
    if any(a.block == block for a in AXES):
        raise ValueError(f"axis {block!r} is registered twice")
    AXES = (*AXES, Axis(block, build))


register_axis("continual", ContinualStream)
register_axis("wireless", "fedbench.wireless.plugin:WirelessUplink")
register_axis("validation", ValidationScore)
register_axis("clients.availability", ClientAvailability)
register_axis("clients.stragglers", Stragglers)
register_axis("privacy", "fedbench.privacy:DPFedAvg")


def block_of(spec: RunSpec, block: str) -> object:
    """The spec's block ``block`` (a field, or a dotted path into one: ``clients.availability``), or None."""
    value: object = spec
    for part in block.split("."):
        value = getattr(value, part, None)
    return value


def build_plugins(spec: RunSpec, seed: int, setup: RunSetup) -> list[RoundPlugin]:
    """The plug-ins of the blocks present in ``spec``, in :data:`AXES` order."""
    return [axis.factory()(spec, seed, setup) for axis in AXES if block_of(spec, axis.block) is not None]
