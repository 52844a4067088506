"""The benchmark compares like with like: Flower's ClientApp + FedAvg aggregation (the benchmark's
Flower harness) and fedbench's sequential FedAvg round produce the same global model."""

import pytest
import torch

pytest.importorskip("flwr")

from flwr.app import ArrayRecord, Context, Message, MessageType, RecordDict  # noqa: E402

from benchmarks.fedbench_harness import fedavg_rounds  # noqa: E402
from benchmarks.flower_harness import client_app, fedavg_strategy, train_config  # noqa: E402
from benchmarks.workload import case_named, initial_model  # noqa: E402
from fedbench.models.flat import FlatModel  # noqa: E402


def test_flower_round_matches_fedbench_sequential_round(monkeypatch):
    try:  # newer flwr stamps messages with the process's run/node/task; a running ServerApp sets them
        from flwr.supercore.task_identity import TaskIdentity

        for field in ("_run_id", "_node_id", "_task_id"):
            monkeypatch.setattr(TaskIdentity, field, 0)
    except ImportError:
        pass
    case, clients, cpu = case_named("mlp-tiny"), 2, torch.device("cpu")
    start = ArrayRecord(initial_model(case).state_dict())
    replies = []
    for node in range(clients):
        config = train_config("mlp-tiny", cpu, 1)
        config["server-round"] = 1  # what FedAvg.configure_train adds
        msg = Message(
            RecordDict({"arrays": start, "config": config}), dst_node_id=node + 1, message_type=MessageType.TRAIN
        )
        context = Context(0, node + 1, {"partition-id": node, "num-partitions": clients}, RecordDict(), {})
        replies.append(client_app(msg, context))
    arrays, _ = fedavg_strategy(clients).aggregate_train(1, replies)
    model = initial_model(case)
    x0 = FlatModel(model).flatten().clone()
    model.load_state_dict(arrays.to_torch_state_dict())
    flower = FlatModel(model).flatten()

    one_round, params = fedavg_rounds(case, clients, cpu, "sequential")
    one_round(0)
    assert (params() - x0).norm() > 1e-2  # the round moved the model
    torch.testing.assert_close(flower, params(), atol=1e-5, rtol=0)
