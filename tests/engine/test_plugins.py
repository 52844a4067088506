"""Round plug-ins (fedbench/engine/plugins.py, axes.py): a third axis attaches without touching the
round loop and, when it changes nothing, leaves every number as it was; plug-in state rides in the
checkpoint under the plug-in's name; the spec's blocks attach the wireless and continual plug-ins,
and cvxpy loads only for wireless runs."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch

from fedbench.engine import axes
from fedbench.engine.axes import Axis, build_plugins
from fedbench.engine.plugins import RoundPlugin
from fedbench.engine.runner import RoundLoop, execute_run
from fedbench.engine.setup import DataCache, build_run
from fedbench.engine.task_stream import ContinualStream
from fedbench.options import RunOptions
from fedbench.scenario import parse_scenario, resolve_runs
from fedbench.store import ResultsStore
from tests.factories import tiny_scenario

RAW = tiny_scenario(
    {"clients.num": 6},
    name="plugins",
    rounds=4,
    checkpoint_every=2,
    eval={"every": 2},
    algorithms=[{"name": "scaffold"}],
)
ROOT = Path(__file__).resolve().parents[2]
COLS = ["round", "test_acc", "test_loss", "train_loss", "bits_up", "bits_down", "consistency"]


class RoundCounter(RoundPlugin):
    """A third axis: logs ``rounds_seen`` every round, keeps its count in checkpoints, drops nobody."""

    name = "round_counter"

    def __init__(self, spec: Any, seed: int, setup: Any):
        self.seen = 0
        self.sampled: list[list[int]] = []

    def after_sampling(self, t: int, clients: np.ndarray) -> np.ndarray:
        self.seen += 1
        self.sampled.append(clients.tolist())
        return clients

    def round_logs(self, t: int) -> dict[str, Any]:
        return {"rounds_seen": self.seen}

    def state_dict(self) -> dict[str, Any]:
        return {"seen": self.seen}

    def load_state_dict(self, payload: dict[str, Any]) -> None:
        self.seen = payload["seen"]


def spec_of(**top: Any):
    raw = copy.deepcopy(RAW)
    raw.update(top)
    return resolve_runs(parse_scenario(raw))[0]


def cache(tmp_path) -> DataCache:
    return DataCache(tmp_path / "data", False, torch.device("cpu"))


def run(tmp_path, spec, name: str) -> tuple[pd.DataFrame, list[dict]]:
    store = ResultsStore(tmp_path / name)
    outcome = execute_run(spec, 0, store, cache(tmp_path), "h", options=RunOptions(executor="sequential"))
    assert outcome.status == "finished", outcome
    frame = store.metrics([outcome.run_id])
    return frame, [json.loads(e) for e in frame["extra"]]


@pytest.fixture
def counter(monkeypatch):
    """Attach RoundCounter to every run (keyed by the ``local`` block, which every spec has)."""
    monkeypatch.setattr(axes, "AXES", (*axes.AXES, Axis("local", RoundCounter)))


def test_a_third_plugin_attaches_without_touching_the_loop_and_moves_no_number(tmp_path, monkeypatch):
    spec = spec_of()
    plain, plain_extras = run(tmp_path, spec, "plain")
    monkeypatch.setattr(axes, "AXES", (*axes.AXES, Axis("local", RoundCounter)))
    counted, extras = run(tmp_path, spec, "counted")
    pd.testing.assert_frame_equal(plain[COLS], counted[COLS])
    assert [e["rounds_seen"] for e in extras] == [1, 2, 3, 4]
    for before, after in zip(plain_extras, extras):
        after.pop("rounds_seen")
        assert list(after) == list(before) and after == before  # the loop's own logs, in their order


def test_a_plugin_s_state_rides_in_the_checkpoint(tmp_path, counter):
    spec = spec_of()
    loop = RoundLoop(spec, 0, build_run(spec, 0, cache(tmp_path)), "sequential")
    plugin = loop.plugin(RoundCounter)
    for t in (1, 2):
        loop.round(t)
    payload = copy.deepcopy(loop.checkpoint(2))  # as saved: no tensor shared with the running loop
    assert payload["round_counter"] == {"seen": 2}
    resumed = RoundLoop(spec, 0, build_run(spec, 0, cache(tmp_path)), "sequential")
    assert resumed.restore(payload) == 2 and resumed.plugin(RoundCounter).seen == 2
    _, extra = resumed.round(3)
    loop.round(3)
    assert extra["rounds_seen"] == 3 and plugin.sampled[-1] == resumed.plugin(RoundCounter).sampled[-1]
    torch.testing.assert_close(resumed.state.x, loop.state.x, rtol=0, atol=0)


def test_the_spec_blocks_attach_their_plugins_in_order(tmp_path):
    plain = spec_of()
    assert build_plugins(plain, 0, build_run(plain, 0, cache(tmp_path))) == []
    both = spec_of(
        rounds=4,
        wireless={"tau_s": 10.0},
        continual={"tasks": 2, "classes_per_task": 3, "rounds_per_task": 2, "memory": {"per_task": 6}},
    )
    loop = RoundLoop(both, 0, build_run(both, 0, cache(tmp_path)), "sequential")
    assert [p.name for p in loop.plugins] == ["continual", "wireless"]
    assert isinstance(loop.plugin(ContinualStream), ContinualStream)
    with pytest.raises(LookupError, match="no RoundCounter plug-in is attached to this run"):
        loop.plugin(RoundCounter)


def test_cvxpy_loads_for_wireless_runs_only(tmp_path):
    script = f"""
import sys, torch
from fedbench.engine.runner import RoundLoop
from fedbench.engine.setup import DataCache, build_run
from tests.engine.test_plugins import spec_of
data = DataCache({str(tmp_path / "data")!r}, False, torch.device("cpu"))
RoundLoop(spec_of(), 0, build_run(spec_of(), 0, data), "sequential").round(1)
assert "cvxpy" not in sys.modules, "a plain run imported cvxpy"
wireless = spec_of(wireless={{"tau_s": 10.0}})
RoundLoop(wireless, 0, build_run(wireless, 0, data), "sequential")
assert "cvxpy" in sys.modules
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=ROOT, env=env
    )
    assert done.returncode == 0, done.stderr


def test_axes_are_a_registry_of_blocks_with_entry_points(monkeypatch):
    """Each block once, in registration order; an entry point's module is imported on first use only."""
    assert [(a.block, a.build if isinstance(a.build, str) else a.build.__name__) for a in axes.AXES] == [
        ("continual", "ContinualStream"),
        ("wireless", "fedbench.wireless.plugin:WirelessUplink"),
        ("validation", "ValidationScore"),
        ("clients.availability", "ClientAvailability"),  # a dotted block: a key inside a spec field
        ("clients.stragglers", "Stragglers"),
        ("privacy", "fedbench.privacy:DPFedAvg"),
    ]
    with pytest.raises(ValueError, match="'wireless' is registered twice"):
        axes.register_axis("wireless", RoundCounter)
    monkeypatch.setattr(axes, "AXES", axes.AXES)
    axes.register_axis("local", f"{__name__}:RoundCounter")
    assert axes.AXES[-1].factory() is RoundCounter
    assert [type(p) for p in build_plugins(spec_of(), 0, None)] == [RoundCounter]
