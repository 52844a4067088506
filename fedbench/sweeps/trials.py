"""Trials: an entry's candidates as runs. A :class:`Trial` is one proposed setting at one rung, an
:class:`EntryPlan` an entry's candidates with the (rounds, candidates) of each rung. These are what
:mod:`fedbench.sweeps.halving` runs rung by rung and :mod:`fedbench.sweeps.tuning` plans and chooses from.
The types live here, below both modules, so that neither needs to import the other's.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from typing import Any

from fedbench.scenario import RunSpec
from fedbench.scenario.tunespec import TuneSpec
from fedbench.sweeps.grid import SweepRun, point_name


@dataclass(frozen=True)
class Trial:
    """One proposed setting of an entry (``index``: its place among the candidates, grid or draw order)
    at one rung: its values by dotted key, its spec and seeds."""

    entry: int
    index: int
    values: dict[str, Any]
    spec: RunSpec
    seeds: tuple[int, ...]
    rung: int = 0

    def runs(self) -> list[SweepRun]:
        shash = hash_parts([self.spec.spec_hash(), *map(str, self.seeds)])
        return [SweepRun(self.spec, seed, shash) for seed in self.seeds]


@dataclass(frozen=True)
class EntryPlan:
    """An algorithm entry with its tune block (None: not tuned), its candidates as trials of the trial
    rounds, and the (rounds, candidates) of each rung (one rung of them all, but under halving)."""

    index: int
    base: RunSpec
    tune: TuneSpec | None
    trials: tuple[Trial, ...]
    rungs: tuple[tuple[int, int], ...] = ()

    @property
    def label(self) -> str:
        return self.base.label

    @property
    def drawn(self) -> bool:
        """True when the candidates are draws (a budget below the grid, or a sampled range), not a whole grid."""
        if self.tune is None:
            return False
        grid = self.tune.grid_size()
        return grid is None or len(self.trials) < grid

    def at_rung(self, trial: Trial, k: int) -> Trial:
        """``trial`` (a candidate) at rung ``k``: its rounds, and below the trial rounds its own name."""
        rounds = self.rungs[k][0]
        if rounds == trial.spec.rounds:
            return dataclasses.replace(trial, rung=k)
        update = {"scenario": trial_name(self.base, trial.values, rounds), "rounds": rounds}
        spec = trial.spec.model_copy(update=update).resolved(trial.spec.scale, trial.spec.components)
        return dataclasses.replace(trial, spec=spec, rung=k)

    def trial_rounds(self) -> int:
        """Rounds trained per trial seed over every rung (Σ candidates × rounds)."""
        return sum(r * n for r, n in self.rungs)


def hash_parts(parts: list[str]) -> str:
    """SHA-256 of ``parts`` joined by ``|``: :func:`fedbench.scenario.scenario_hash`'s formula."""
    return hashlib.sha256("|".join(parts).encode()).hexdigest()


def trial_name(base: RunSpec, values: dict[str, Any], rounds: int | None = None) -> str:
    """``<scenario>--tune--<key>-<value>…[.scale]``; a halving rung below the trial rounds:
    ``<scenario>--tune-<rounds>rounds--…``."""
    scale = base.scale
    prefix = base.scenario.removesuffix(f".{scale}") if scale != "paper" else base.scenario
    return point_name(f"{prefix}--tune" + ("" if rounds is None else f"-{rounds}rounds"), values, scale)
