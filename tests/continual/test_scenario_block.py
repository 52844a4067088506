"""The ``continual`` block and ``local.optimizer``: validation naming the keys, and unchanged hashes
and JSON for specs without them."""

import copy
import hashlib
import json

import pytest
import torch

from fedbench.engine.batches import ClientBatcher
from fedbench.scenario import ScenarioError, parse_scenario, resolve_runs
from fedbench.seeding import torch_stream
from tests.continual.common import RAW, raw_with


def problems(raw) -> list[str]:
    with pytest.raises(ScenarioError) as err:
        parse_scenario(raw)
    return err.value.problems


def test_bad_blocks_name_their_keys():
    assert problems(raw_with(rounds=7)) == [
        "(top level): rounds (7) must equal continual.tasks × continual.rounds_per_task = 3 × 2 = 6"
    ]
    assert problems(raw_with({"continual.memory.per_task": 0, "continual.memory.replay": "per_step"})) == [
        "continual: memory.replay: per_step needs memory.per_task ≥ 1 (the memory would stay empty)"
    ]
    assert problems(raw_with({"continual.mode": "domain"}))[0].startswith(
        "continual.mode: Input should be 'task' or 'class'"
    )
    assert problems(raw_with({"continual.heads": 2})) == ["continual.heads: unknown key"]
    assert problems(raw_with({"local.betas": [0.9, 1.0], "local.optimizer": "adam"}))[0].startswith(
        "local.betas: expected two values in [0, 1)"
    )
    found = problems(raw_with({"local.optimizer": "adam"}, algorithms=[{"name": "scaffold"}]))
    assert len(found) == 1 and found[0].startswith("local.optimizer: scaffold (algorithms[0]) does not support 'adam'")
    assert "fine_fl" in found[0] and "er_fl" in found[0]


def test_specs_without_the_new_keys_keep_their_json_and_hash():
    raw = {k: v for k, v in copy.deepcopy(RAW).items() if k != "continual"}
    spec = resolve_runs(parse_scenario(raw))[0]
    data = json.loads(spec.to_json())
    assert "continual" not in data and not {"optimizer", "betas", "eps"} & set(data["local"])
    payload = {k: v for k, v in data.items() if k not in ("targets", "checkpoint_every", "paper", "wireless", "blowup")}
    before = hashlib.sha256(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    assert spec.spec_hash() == before
    adam = resolve_runs(parse_scenario({**raw, "local": {**raw["local"], "optimizer": "adam"}}))[0]
    continual = resolve_runs(parse_scenario(raw_with()))[0]
    assert len({before, adam.spec_hash(), continual.spec_hash()}) == 3
    assert json.loads(continual.to_json())["continual"]["memory"]["per_task"] == 12


def test_a_tasks_batcher_has_its_own_stream_and_the_plain_one_is_unchanged():
    parts = [torch.arange(10, 30)]
    plain, task1 = ClientBatcher(parts, 5, seed=0), ClientBatcher(parts, 5, seed=0, task=1)
    legacy = parts[0][torch.randperm(20, generator=torch_stream(0, "batches", 0, 0))][:5]
    assert torch.equal(plain.next(0), legacy)
    assert not torch.equal(ClientBatcher(parts, 5, seed=0).next(0), task1.next(0))
