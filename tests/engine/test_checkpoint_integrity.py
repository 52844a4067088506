"""Checkpoints cannot lie (issue 15 item 4, issue 24 item 8): a damaged checkpoint, another run's, or one whose
rounds the store does not hold, is set aside with a warning and the run restarts, ending with an uninterrupted
run's numbers."""

import shutil

import pandas as pd
import pytest
import torch

from fedbench.engine.checkpoint import MAGIC, CorruptCheckpoint, load_checkpoint, run_identity, save_checkpoint
from fedbench.store import ResultsStore
from tests.engine.test_runner import COLS, run, scenario


def test_a_checkpoint_round_trips_and_a_flipped_bit_is_caught(tmp_path):
    path = tmp_path / "c.pt"
    save_checkpoint(path, {"round": 3, "x": torch.arange(1000.0)})
    assert load_checkpoint(path, torch.device("cpu"))["round"] == 3 and path.read_bytes().startswith(MAGIC)
    blob = bytearray(path.read_bytes())
    blob[-100] ^= 0x01  # one bit of tensor data
    path.write_bytes(bytes(blob))
    with pytest.raises(CorruptCheckpoint, match="does not match its checksum"):
        load_checkpoint(path, torch.device("cpu"))
    assert not list(tmp_path.glob("*.tmp"))


def interrupted(tmp_path, name: str):
    """A run stopped in round 4 (its last checkpoint: round 2), its store, run id and checkpoint path."""

    def stop_at_4(t, _):
        if t == 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, scenario(), name, on_round=stop_at_4)
    store = ResultsStore(tmp_path / name)
    (rid,) = store.runs()["run_id"]
    path = store.checkpoint_path(rid)
    assert load_checkpoint(path, torch.device("cpu"))["round"] == 2
    return store, rid, path


@pytest.mark.parametrize("damage", ["truncated", "zeroed", "bit_flip", "old_format"])
def test_a_damaged_checkpoint_is_set_aside_and_the_run_restarts(tmp_path, damage):
    _, _, full = run(tmp_path, scenario(), "full")
    store, rid, path = interrupted(tmp_path, "cut")
    blob = path.read_bytes()
    body = blob.split(b"\n", 1)[1]
    damaged = {
        "truncated": blob[: len(blob) // 2],
        "zeroed": bytes(len(blob)),
        "bit_flip": blob[:-64] + bytes([blob[-64] ^ 0x10]) + blob[-63:],
        "old_format": body,
    }[damage]
    path.write_bytes(damaged)
    with pytest.warns(RuntimeWarning, match=f"checkpoint {path} is corrupt.*restarts from round 1"):
        _, outcome, resumed = run(tmp_path, scenario(), "cut")
    assert outcome.status == "finished" and path.with_suffix(".pt.corrupt").read_bytes() == damaged
    pd.testing.assert_frame_equal(full[COLS], resumed[COLS])


def test_a_checkpoint_whose_store_was_replaced_is_not_resumed_into_an_empty_record(tmp_path):
    _, _, full = run(tmp_path, scenario(), "full")
    store, rid, path = interrupted(tmp_path, "cut")
    keep = tmp_path / "keep.pt"
    shutil.copy(path, keep)
    shutil.rmtree(tmp_path / "cut")
    path.parent.mkdir(parents=True)
    shutil.copy(keep, path)  # the checkpoint survives, the store is new and empty
    with pytest.warns(RuntimeWarning, match="store holds 0 round"):
        _, outcome, resumed = run(tmp_path, scenario(), "cut")
    assert outcome.status == "finished" and path.with_suffix(".pt.orphan").exists()
    pd.testing.assert_frame_equal(full[COLS], resumed[COLS])
    assert list(resumed["round"]) == [1, 2, 3, 4, 5]


# -- issue 24 item 8: a checkpoint carries its run's identity and another run's is refused --


def interrupted_at(tmp_path, name: str, sc, seed: int = 0):
    """As :func:`interrupted`, for scenario ``sc`` and ``seed``: (store, checkpoint path)."""

    def stop_at_4(t, _):
        if t == 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, sc, name, seed=seed, on_round=stop_at_4)
    store = ResultsStore(tmp_path / name)
    (rid,) = store.runs()["run_id"]
    return store, store.checkpoint_path(rid)


def test_a_checkpoint_carries_its_run_identity(tmp_path):
    store, rid, path = interrupted(tmp_path, "cut")
    spec_hash = store.runs()["spec_hash"].item()
    payload = load_checkpoint(path, torch.device("cpu"))
    assert payload["identity"] == run_identity(rid, spec_hash, 0) == {"run_id": rid, "spec_hash": spec_hash, "seed": 0}
    assert payload["round"] == 2


@pytest.mark.parametrize("other", ["seed", "algorithm"])
def test_another_runs_checkpoint_is_set_aside_and_the_run_restarts(tmp_path, other):
    """Seed 1's checkpoint at seed 0's path, or FedAvg's at SCAFFOLD's: refused, set aside, the run
    restarts and ends with an uninterrupted run's numbers (before, the first was trusted and the
    second failed every rerun)."""
    mine = scenario(algorithms=[{"name": "scaffold"}]) if other == "algorithm" else scenario()
    theirs, their_seed = (scenario(), 0) if other == "algorithm" else (scenario(), 1)
    _, _, full = run(tmp_path, mine, "full")
    _, foreign = interrupted_at(tmp_path, "theirs", theirs, their_seed)
    _, path = interrupted_at(tmp_path, "cut", mine)
    shutil.copy(foreign, path)
    with pytest.warns(RuntimeWarning, match=rf"checkpoint {path} belongs to run .*-s{their_seed} .*, not run .*-s0 "):
        _, outcome, resumed = run(tmp_path, mine, "cut")
    assert outcome.status == "finished" and path.with_suffix(".pt.foreign").read_bytes() == foreign.read_bytes()
    pd.testing.assert_frame_equal(full[COLS], resumed[COLS])


def test_a_checkpoint_without_identity_is_set_aside_as_unverified(tmp_path):
    _, _, full = run(tmp_path, scenario(), "full")
    _, _, path = interrupted(tmp_path, "cut")
    payload = load_checkpoint(path, torch.device("cpu"))
    del payload["identity"]  # as written before checkpoints carried one
    save_checkpoint(path, payload)
    with pytest.warns(RuntimeWarning, match="carries no run identity"):
        _, outcome, resumed = run(tmp_path, scenario(), "cut")
    assert outcome.status == "finished" and path.with_suffix(".pt.unverified").exists()
    pd.testing.assert_frame_equal(full[COLS], resumed[COLS])


def test_a_checkpoint_of_the_older_state_layout_is_set_aside_as_outdated(tmp_path):
    """A checkpoint written before the typed algorithm state (its state a tensor dict, no ``layout``)
    is refused by name, set aside, and the run restarts with an uninterrupted run's numbers."""
    _, _, full = run(tmp_path, scenario(), "full")
    _, _, path = interrupted(tmp_path, "cut")
    payload = load_checkpoint(path, torch.device("cpu"))
    del payload["layout"]
    payload["state"] = {"x": payload["state"][0]}  # layout 1: the state as a tensor dict
    save_checkpoint(path, payload)
    with pytest.warns(RuntimeWarning, match=r"has layout 1, this fedbench reads 2; .*restarts from round 1"):
        _, outcome, resumed = run(tmp_path, scenario(), "cut")
    assert outcome.status == "finished" and path.with_suffix(".pt.outdated").exists()
    pd.testing.assert_frame_equal(full[COLS], resumed[COLS])
