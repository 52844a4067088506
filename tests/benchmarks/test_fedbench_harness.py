"""The benchmark's fedbench harness (benchmarks/fedbench_harness.py) trains: each round moves the global
model on from the last one, and the sequential and batched executors give the same model. It runs
without Flower, so it guards the harness wherever the Flower comparison is skipped."""

import torch

from benchmarks.fedbench_harness import fedavg_rounds
from benchmarks.workload import case_named, initial_model
from fedbench.models.flat import FlatModel


def test_fedbench_harness_rounds_move_the_model_on_and_executors_agree():
    case, clients, cpu = case_named("mlp-tiny"), 2, torch.device("cpu")
    x0 = FlatModel(initial_model(case)).flatten().clone()
    models = {}
    for executor in ("sequential", "batched"):
        one_round, params = fedavg_rounds(case, clients, cpu, executor)
        one_round(0)
        first = params().clone()
        one_round(1)
        assert (first - x0).norm() > 1e-2 and (params() - first).norm() > 1e-3  # round 2 starts where round 1 ended
        models[executor] = params()
    torch.testing.assert_close(models["batched"], models["sequential"], atol=1e-5, rtol=0)
