"""Every registered algorithm's numbers, both client executors, in one JSON file: the check that a
refactor of the algorithm contract or the engine changes no number (issue 25 used it at every step).

    python -m benchmarks.every_algorithm before.json      # on the old tree
    python -m benchmarks.every_algorithm after.json       # on the new one
    cmp before.json after.json                            # byte-identical, or some number moved

Each algorithm runs 4–6 float64 rounds on the offline digits (an MLP, 8 clients, 3 a round): plain FL, or
the 3-task continual stream or the wireless uplink where its validation asks for one, and a few variants
(compressed uplinks, GradMA's whole-model projection and global anchor, local Adam). Every run goes through
the sequential and the batched executor, and every round's metrics are kept with 17 significant digits.
About 20 s on 2 CPU cores. Not a timed test: it decides nothing by itself.
"""

from __future__ import annotations

import json
import sys
import tempfile
import warnings
from pathlib import Path

import fedbench.api as fb
from fedbench.algorithms import ALGORITHMS

BASE = {
    "dataset": {"name": "digits"},
    "model": {"name": "mlp", "hidden": [16]},
    "clients": {"num": 8, "per_round": 3},
    "partition": {"kind": "dirichlet", "omega": 0.3},
    "local": {"iterations": 3, "batch_size": 16, "lr": 0.05, "precision": "fp64"},
    "rounds": 4,
    "eval": {"every": 2},
    "seeds": [0],
}
CONTINUAL = {
    **BASE,
    "clients": {"num": 5, "per_round": 3},
    "partition": {"kind": "dirichlet", "omega": 0.5},
    "local": {"epochs": 1, "batch_size": 32, "optimizer": "adam", "precision": "fp64"},
    "rounds": 6,
    "continual": {
        "tasks": 3,
        "classes_per_task": 3,
        "class_order": "seeded",
        "mode": "task",
        "rounds_per_task": 2,
        "lr_per_task": [0.002, 0.004],
        "memory": {"per_task": 20, "replay_batch": 5},
    },
}
WIRELESS = {
    **BASE,
    "wireless": {
        "tau_s": 0.02,
        "bandwidth_hz": 1.0e8,
        "tx_power_dbm": 30,
        "noise_psd_dbm_hz": -143,
        "cell_radius_m": 3000,
        "pathloss_const": 1.0e-3,
        "pathloss_exp": 2,
        "fairness_alpha": 0.5,
        "b_min": 2,
    },
}
TWO_BITS = {"compression": {"kind": "stochastic", "bits": 2}}
VARIANTS: dict[str, list[tuple[dict, dict]]] = {
    "fedqvr_e": [(WIRELESS, TWO_BITS)],
    "fedcams": [(BASE, TWO_BITS), (BASE, {"compression": {"kind": "topk", "ratio": 0.3}})],
    "fedpaq": [(BASE, TWO_BITS)],
    "fedcomgate": [(BASE, TWO_BITS)],
    "fedqvr": [(BASE, TWO_BITS)],
    "gradma": [(BASE, {}), (BASE, {"projection": "whole_model", "prev_anchor": "global", "memory_size": 4})],
    "fedavg": [(BASE, {}), ({**BASE, "local": {**BASE["local"], "optimizer": "adam"}}, {})],
}


def scenario_for(name: str, template: dict, params: dict, variant: int):
    """The algorithm's scenario: ``template`` if it validates, else the continual or wireless one."""
    error = None
    for raw in [template] if template is not BASE else [BASE, CONTINUAL, WIRELESS]:
        try:
            return fb.scenario({**raw, "name": f"g_{name}_{variant}", "algorithms": [{"name": name, **params}]})
        except Exception as exc:  # noqa: BLE001 - try the next template
            error = exc
    raise SystemExit(f"{name}: no template validates: {error}")


def numbers(sc, executor: str) -> str:
    """Every round's metrics of the scenario's one run on ``executor``, as CSV (wall-clock time left out)."""
    with tempfile.TemporaryDirectory() as out:
        frame = fb.run(sc, out=out, executor=executor).rounds()
    columns = [c for c in frame.columns if c not in ("wall_s", "run_id", "extra")]
    return frame[columns].to_csv(index=False, float_format="%.17g")


def main(path: str) -> None:
    warnings.simplefilter("ignore")
    results = {}
    for entry in ALGORITHMS:
        for variant, (template, params) in enumerate(VARIANTS.get(entry.name, [(BASE, {})])):
            sc = scenario_for(entry.name, template, params, variant)
            for executor in ("sequential", "batched"):
                results[f"{entry.name}/{variant}/{executor}"] = numbers(sc, executor)
    Path(path).write_text(json.dumps(results, indent=1, sort_keys=True))
    print(f"{len(results)} runs written to {path}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "every_algorithm.json")
