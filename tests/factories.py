"""The tests' tiny federation, written once: scikit-learn's digits (offline), an MLP 64-16-10, 8 clients
of which 3 train each round, 3 local steps, 3 rounds, FedAvg. A test states only what it changes:

    tiny_scenario()                                              # a fresh raw scenario dict
    tiny_scenario({"partition.omega": 0.3, "model.hidden": [8]}, name="engine", rounds=5)
    tiny_scenario({"partition": DROP})                           # remove a key (the schema's default applies)
    tiny_spec({"clients.num": 6}, algorithm="scaffold")          # the resolved RunSpec of one algorithm

Dotted keys replace one leaf and keep its siblings; keyword arguments replace a whole top-level entry
(``local={"epochs": 1, ...}`` drops ``iterations``). Every call returns new objects, so a test may mutate
what it gets."""

from __future__ import annotations

import copy
from typing import Any

from fedbench.scenario import parse_scenario, resolve_runs

DROP = object()  # as a value: delete that key

TINY: dict[str, Any] = {
    "name": "tiny",
    "dataset": {"name": "digits"},
    "model": {"name": "mlp", "hidden": [16]},
    "clients": {"num": 8, "per_round": 3},
    "partition": {"kind": "dirichlet", "omega": 0.5},
    "local": {"iterations": 3, "batch_size": 16, "lr": 0.1},
    "rounds": 3,
    "algorithms": [{"name": "fedavg"}],
}
P_MLP16 = 64 * 16 + 16 + 16 * 10 + 10  # parameters of the default model, mlp 64-16-10


def with_changes(raw: dict, changes: dict[str, Any] | None = None, **top: Any) -> dict:
    """A deep copy of ``raw`` with top-level entries ``top`` replaced, then dotted-key ``changes`` applied
    (``{"continual.mode": "class"}``; missing parents are created; ``DROP`` deletes)."""
    raw = copy.deepcopy(raw)
    for key, value in top.items():
        if value is DROP:
            raw.pop(key, None)
        else:
            raw[key] = copy.deepcopy(value)
    for key, value in (changes or {}).items():
        *parents, last = key.split(".")
        node = raw
        for part in parents:
            node = node.setdefault(part, {})
        if value is DROP:
            node.pop(last, None)
        else:
            node[last] = copy.deepcopy(value)
    return raw


def tiny_scenario(changes: dict[str, Any] | None = None, /, **top: Any) -> dict:
    """A fresh raw scenario dict: ``TINY`` with ``top`` entries replaced and dotted ``changes`` applied."""
    return with_changes(TINY, changes, **top)


def tiny_spec(changes: dict[str, Any] | None = None, /, *, algorithm: str | dict | None = None, **top: Any):
    """The RunSpec of the first algorithm of ``tiny_scenario(changes, **top)``; ``algorithm`` (a name or an
    entry dict) replaces the algorithm list."""
    raw = tiny_scenario(changes, **top)
    if algorithm is not None:
        raw["algorithms"] = [algorithm if isinstance(algorithm, dict) else {"name": algorithm}]
    return resolve_runs(parse_scenario(raw))[0]


def interrupted_at(execute_run, at: int):
    """``execute_run`` (fedbench.runs') whose run is interrupted as by Ctrl-C once round ``at`` is recorded."""

    def stopping(spec, seed, store, cache, shash, on_round, *rest):
        def hook(t, metrics):
            on_round(t, metrics)
            if t == at:
                raise KeyboardInterrupt

        return execute_run(spec, seed, store, cache, shash, hook, *rest)

    return stopping
