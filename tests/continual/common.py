"""A tiny Split-digits federation shared by the continual tests: 3 tasks × 3 classes (class 9 in no
task), an MLP, 3 clients, 2 rounds per task."""

import json

import torch

from fedbench.engine.runner import RoundLoop, execute_run
from fedbench.engine.setup import DataCache, build_run
from fedbench.options import RunOptions
from fedbench.scenario import parse_scenario, resolve_runs
from fedbench.store import ResultsStore
from tests.factories import P_MLP16, tiny_scenario, with_changes

RAW = tiny_scenario(
    {"clients.num": 3, "clients.per_round": 3},
    name="split_digits",
    rounds=6,
    continual={"tasks": 3, "classes_per_task": 3, "rounds_per_task": 2, "memory": {"per_task": 12, "replay_batch": 5}},
)
P = P_MLP16
COLS = ["round", "test_acc", "test_loss", "train_loss", "bits_up", "bits_down", "consistency"]


def raw_with(changes: dict | None = None, **top) -> dict:
    """RAW with dotted-key ``changes`` (e.g. {"continual.mode": "class"}) and top-level keys replaced."""
    return with_changes(RAW, changes, **top)


def spec_of(raw: dict, algorithm: str = "fedavg"):
    raw = {**raw, "algorithms": [{"name": algorithm}]}
    return resolve_runs(parse_scenario(raw))[0]


def cache(tmp_path) -> DataCache:
    return DataCache(tmp_path / "data", False, torch.device("cpu"))


def run(tmp_path, spec, name: str, executor: str = "sequential", on_round=None):
    """Execute one run; (metrics frame, parsed extras, outcome)."""
    store = ResultsStore(tmp_path / name)
    outcome = execute_run(spec, 0, store, cache(tmp_path), "h", on_round, RunOptions(executor=executor))
    frame = store.metrics([outcome.run_id])
    return frame, [json.loads(e) for e in frame["extra"]], outcome


def loop_of(tmp_path, spec, executor: str = "sequential") -> RoundLoop:
    return RoundLoop(spec, 0, build_run(spec, 0, cache(tmp_path)), executor)


def matrix(extras: list[dict]) -> list[list[float]]:
    return [e["task_acc"] for e in extras if "task_acc" in e]
