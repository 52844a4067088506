"""What the store holds for a run, as a tracker receives it (:class:`RunExport`): identity, the resolved spec as
flat hyper-parameters, and every number of every round."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fedbench.store import METRIC_COLUMNS

if TYPE_CHECKING:
    from fedbench.store import ResultsStore

Param = str | int | float | bool


@dataclass(frozen=True)
class RunExport:
    """One run of the store, ready for a tracker: identity, hyper-parameters and the scalars per round."""

    run_id: str
    scenario: str
    algorithm: str
    seed: int
    status: str
    scenario_hash: str
    spec_hash: str
    spec_json: str
    params: dict[str, Param]
    rounds: list[tuple[int, dict[str, float]]] = field(default_factory=list)

    def digest(self) -> str:
        """A hash of everything a tracker receives: equal digests, nothing to rewrite."""
        body = json.dumps([self.status, self.scenario_hash, self.params, self.rounds], sort_keys=True)
        return hashlib.sha256(body.encode()).hexdigest()

    @property
    def last_round(self) -> int:
        return self.rounds[-1][0] if self.rounds else 0

    def tags(self) -> dict[str, str]:
        """The ``fedbench.*`` identity of the run (MLflow tags)."""
        return {
            "fedbench.run_id": self.run_id,
            "fedbench.scenario": self.scenario,
            "fedbench.algorithm": self.algorithm,
            "fedbench.seed": str(self.seed),
            "fedbench.spec_hash": self.spec_hash,
            "fedbench.scenario_hash": self.scenario_hash,
            "fedbench.status": self.status,
        }


def numbers(value: Any, prefix: str = "") -> Iterator[tuple[str, float]]:
    """The numbers of an extra log (nested mappings) under their dotted paths; text, lists, booleans
    and nulls are left out."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield from numbers(item, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield prefix, float(value)


def flatten(value: Any, prefix: str = "") -> Iterator[tuple[str, Param]]:
    """A resolved spec as dotted keys; lists and nulls as JSON text."""
    if isinstance(value, Mapping) and (value or not prefix):
        for key, item in value.items():
            yield from flatten(item, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(value, (str, int, float, bool)):
        yield prefix, value
    else:
        yield prefix, json.dumps(value, sort_keys=True)


def round_scalars(row: Mapping[str, Any]) -> dict[str, float]:
    """One stored round's scalars: the metric columns that are not NULL, then the extra logs' numbers."""
    values = {c: float(row[c]) for c in METRIC_COLUMNS if row[c] is not None and not math.isnan(row[c])}
    extra = json.loads(row["extra"]) if row["extra"] else {}
    values.update((k, v) for k, v in numbers(extra) if k not in values)
    return values


def read_runs(
    store: ResultsStore, run_ids: Sequence[str] | None = None, scenario: str | None = None
) -> list[RunExport]:
    """The runs ``run_ids`` (default: the store's current runs, of ``scenario`` if given), in store order,
    with their rounds."""
    runs = store.runs(scenario, include_stale=run_ids is not None)
    if run_ids is not None:
        runs = runs[runs["run_id"].isin(list(run_ids))]
    metrics = store.metrics(runs["run_id"])
    by_run: dict[str, list[tuple[int, dict[str, float]]]] = {}
    rows: list[dict[str, Any]] = metrics.to_dict("records")  # type: ignore[assignment]  # str column names
    for row in rows:
        by_run.setdefault(row["run_id"], []).append((int(row["round"]), round_scalars(row)))
    out = []
    for r in runs.to_dict("records"):
        params: dict[str, Param] = dict(flatten(json.loads(r["spec_json"])))
        params.update(
            seed=int(r["seed"]), run_id=r["run_id"], spec_hash=r["spec_hash"], scenario_hash=r["scenario_hash"]
        )
        out.append(
            RunExport(
                r["run_id"],
                r["scenario"],
                r["algorithm"],
                int(r["seed"]),
                r["status"],
                r["scenario_hash"],
                r["spec_hash"],
                r["spec_json"],
                params,
                by_run.get(r["run_id"], []),
            )
        )
    return out
