"""``local.tf32``: TF32 on a GPU by default, in the run hash only when switched off."""

import json

import torch

from fedbench.engine.precision import _targets, gpu_precision
from tests.factories import tiny_spec


def test_tf32_enters_the_hash_only_when_off():
    default, off, on = tiny_spec(), tiny_spec({"local.tf32": False}), tiny_spec({"local.tf32": True})
    assert default.local.tf32 and "tf32" not in json.loads(default.to_json())["local"]
    assert on.spec_hash() == default.spec_hash()
    assert off.spec_hash() != default.spec_hash() and json.loads(off.to_json())["local"]["tf32"] is False


def test_gpu_precision_sets_and_restores_the_cuda_flags_and_leaves_a_cpu_run_alone():
    before = [getattr(obj, name) for obj, name, _, _ in _targets()]
    with gpu_precision(True, torch.device("cpu")):
        assert [getattr(obj, name) for obj, name, _, _ in _targets()] == before
    for tf32 in (True, False):
        with gpu_precision(tf32, torch.device("cuda")):  # flags only: no CUDA call is made
            assert [getattr(obj, name) for obj, name, _, _ in _targets()] == [
                on if tf32 else off for _, _, on, off in _targets()
            ]
        assert [getattr(obj, name) for obj, name, _, _ in _targets()] == before
