"""A resolved run and its identity: the spec the engine executes and the store hashes.

One scenario file gives one :class:`RunSpec` per algorithm entry (every default filled in); a
run is a (spec, seed) pair, identified by ``<spec hash[:16]>-s<seed>`` (:func:`run_id_of`). The
spec's canonical JSON and hash are frozen: the hashes of every committed config are pinned in
tests/test_spec_pins.py, so stores written before a refactor keep matching.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field, PrivateAttr, model_serializer

from fedbench.optim.spec import ServerSpec
from fedbench.scenario.schema import (
    BlowupSpec,
    ClientsSpec,
    ContinualSpec,
    EvalSpec,
    LocalSpec,
    PaperRef,
    PrivacySpec,
    Strict,
    WirelessSpec,
)
from fedbench.scenario.tunespec import TunedFrom, ValidationSplit
from fedbench.store import RunRecord


@dataclass(frozen=True)
class Components:
    """The run's registered components, each its registry entry's validated parameter model."""

    dataset: BaseModel
    model: BaseModel
    partition: BaseModel
    compression: BaseModel
    algorithm: BaseModel


class RunSpec(Strict):
    """One fully resolved run (without its seed): what the engine executes and the store hashes."""

    scenario: str
    dataset: dict[str, Any]
    model: dict[str, Any]
    clients: ClientsSpec
    partition: dict[str, Any]
    local: LocalSpec
    rounds: int
    eval: EvalSpec
    compression: dict[str, Any]
    algorithm: dict[str, Any]
    server: ServerSpec
    targets: list[float]
    checkpoint_every: int
    paper: PaperRef | None = None
    wireless: WirelessSpec | None = None
    continual: ContinualSpec | None = None
    privacy: PrivacySpec | None = None
    blowup: BlowupSpec = Field(default_factory=BlowupSpec)
    validation: ValidationSplit | None = None
    tuned: TunedFrom | None = None
    _scale: str = PrivateAttr(default="paper")
    _components: Components | None = PrivateAttr(default=None)

    @model_serializer(mode="wrap")
    def _omit_absent_blocks(self, handler: Any) -> dict[str, Any]:
        """Absent ``continual``, ``privacy``, ``validation`` and ``tuned`` blocks are left out of the JSON
        (and the hash), as if they did not exist."""
        data = handler(self)
        for block in ("continual", "privacy", "validation", "tuned"):
            if getattr(self, block) is None:
                data.pop(block, None)
        return data

    def spec_hash(self) -> str:
        """SHA-256 of the canonical JSON of everything that changes results (targets excluded;
        absent ``wireless``/``continual``/``privacy``/``validation``/``tuned`` blocks and sgd's unused Adam keys are left out, so specs
        written before they existed keep their hash)."""
        skip = {"targets", "checkpoint_every", "paper", "blowup"} | ({"wireless"} if self.wireless is None else set())
        payload = self.model_dump(mode="json", exclude=skip)
        blob = json.dumps(payload, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json"), sort_keys=True)

    @property
    def label(self) -> str:
        return str(self.algorithm["label"])

    @property
    def scale(self) -> str:
        """The scale the scenario file was resolved at (``paper`` for the file as written); not hashed."""
        return self._scale

    @property
    def components(self) -> Components:
        """The validated parameter models of the run's dataset, model, partition, compressor and
        algorithm (set by resolution; never parsed again)."""
        if self._components is None:
            raise RuntimeError(f"{self.scenario} / {self.label}: RunSpec built outside scenario resolution")
        return self._components

    def resolved(self, scale: str, components: Components) -> RunSpec:
        """This spec with its scale and validated components attached (resolution's last step)."""
        self._scale, self._components = scale, components
        return self


def run_id_of(spec: RunSpec, seed: int) -> str:
    """``<spec hash[:16]>-s<seed>``: the store's key of the run (spec, seed)."""
    return f"{spec.spec_hash()[:16]}-s{seed}"


def run_record(spec: RunSpec, seed: int, scenario_hash: str) -> RunRecord:
    """The store's record of the run (spec, seed) of a scenario with this hash."""
    paper = spec.paper
    cell = (None, None, None) if paper is None else (paper.name, paper.table, paper.column)
    return RunRecord(
        run_id_of(spec, seed),
        spec.scenario,
        scenario_hash,
        spec.spec_hash(),
        spec.label,
        seed,
        spec.to_json(),
        spec.scale,
        *cell,
    )
