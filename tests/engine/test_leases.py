"""Each run trained once (issue 15 item 6): a run's lease in the store keeps concurrent processes from
training it twice; a killed holder's stale lease is taken over."""

import subprocess
import sys
import time
from pathlib import Path

import torch
import yaml

from fedbench.engine.lease import holder, leased
from fedbench.engine.runner import execute_run
from fedbench.engine.setup import DataCache
from fedbench.scenario import parse_scenario
from fedbench.store import ResultsStore
from tests.factories import tiny_scenario

ROOT = Path(__file__).parents[2]


def test_a_live_lease_is_kept_and_a_stale_one_taken_over(tmp_path):
    store = ResultsStore(tmp_path)
    assert store.claim("r", "a") is None and store.claim("r", "b") == "a" and store.claim("r", "a") is None
    assert store.claim("r", "b", ttl=0.0) is None  # a's heartbeat is older than a zero TTL: b takes over
    store.release("r", "a")  # only the holder's own lease is released
    assert store.claim("r", "c") == "b"
    store.release("r", "b")
    assert store.claim("r", "c") is None


def test_the_heartbeat_renews_the_lease_while_the_block_runs(tmp_path):
    store = ResultsStore(tmp_path)
    with leased(store, "r", every=0.05) as other:
        assert other is None
        time.sleep(0.3)
        assert store.claim("r", "intruder", ttl=0.2) == holder()  # renewed within the last 0.2 s
    assert store.claim("r", "intruder") is None  # released on exit


def test_a_run_held_by_a_live_process_is_left_to_it_and_a_dead_ones_is_taken_over(tmp_path):
    spec = parse_scenario(tiny_scenario({"rounds": 2})).runs[0]
    store, cache = ResultsStore(tmp_path / "out"), DataCache(tmp_path / "data", False, torch.device("cpu"))
    rid = f"{spec.spec_hash()[:16]}-s0"
    store.claim(rid, "otherhost:1")
    busy = execute_run(spec, 0, store, cache, "h")
    assert busy.status == "busy" and "otherhost:1" in busy.error and store.status(rid) is None
    with store._connect() as conn:  # the other process died 10 minutes ago
        conn.execute("UPDATE leases SET heartbeat = heartbeat - 600 WHERE run_id = ?", (rid,))
    assert execute_run(spec, 0, store, cache, "h").status == "finished"
    assert store.claim(rid, "otherhost:2") is None  # released after training


def test_concurrent_processes_on_one_out_train_each_run_once(tmp_path):
    raw = tiny_scenario({"rounds": 12}, algorithms=[{"name": "fedavg"}, {"name": "fedprox", "mu": 0.01}], seeds=[0, 1, 2])
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    cmd = [sys.executable, "-m", "fedbench", "run", str(path), "--out", str(tmp_path / "out"), "--quiet"]
    procs = [subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for _ in range(2)]
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outputs
    finished = sum(o.count(" finished") for o in outputs)
    assert finished == 6, outputs  # six runs, each trained by exactly one process
    runs = ResultsStore(tmp_path / "out").runs()
    metrics = ResultsStore(tmp_path / "out").metrics(runs["run_id"])
    assert set(runs["status"]) == {"finished"} and len(metrics) == 6 * 12 and not metrics.duplicated(["run_id", "round"]).any()
