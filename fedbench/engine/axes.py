"""The axes a scenario adds to plain FL: which round plug-in each spec block attaches.

A run gets, in this order, the plug-in of every block present in its spec (``continual``: the task
stream, C-FLAG Sec. 7; ``wireless``: FedQVR-E's uplink, Sec. V; ``validation``: the held-out
validation score of a tuning trial, docs/tuning.md). A new axis is a block in the
schema, a :class:`~fedbench.engine.plugins.RoundPlugin` and one line here; the round loop does not change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from fedbench.engine.continual import ContinualStream
from fedbench.engine.plugins import RoundPlugin
from fedbench.engine.validation import ValidationScore

if TYPE_CHECKING:
    from fedbench.engine.setup import RunSetup
    from fedbench.scenario import RunSpec

PluginFactory = Callable[["RunSpec", int, "RunSetup"], RoundPlugin]


@dataclass(frozen=True)
class Axis:
    """A spec block (a :class:`~fedbench.scenario.RunSpec` field) and the plug-in it attaches when present."""

    block: str
    build: PluginFactory


def wireless_uplink(spec: RunSpec, seed: int, setup: RunSetup) -> RoundPlugin:
    """FedQVR-E's uplink; imported here so that cvxpy (the allocation) loads for wireless runs only."""
    from fedbench.wireless.plugin import WirelessUplink

    return WirelessUplink(spec, seed, setup)


AXES: tuple[Axis, ...] = (
    Axis("continual", ContinualStream), Axis("wireless", wireless_uplink), Axis("validation", ValidationScore),
)


def build_plugins(spec: RunSpec, seed: int, setup: RunSetup) -> list[RoundPlugin]:
    """The plug-ins of the blocks present in ``spec``, in :data:`AXES` order."""
    return [axis.build(spec, seed, setup) for axis in AXES if getattr(spec, axis.block) is not None]
