"""The batched client path equals the sequential reference for every registered algorithm and every
BatchNorm model, and a chunked batched round equals an unchunked one."""

import copy

import pandas as pd
import pytest
import torch
from torch import nn

from fedbench.algorithms import ALGORITHMS
from fedbench.data.base import ArraySplit, DatasetSplits
from fedbench.engine.batched import BatchedOracle
from fedbench.engine.executor import DEFAULT_CPU_CHUNK, choose_executor
from fedbench.engine.local import GradientOracle
from fedbench.engine.precision import train_dtype
from fedbench.engine.runner import execute_run
from fedbench.engine.setup import DataCache
from fedbench.models.registry import MODELS, build_model
from fedbench.options import RunOptions
from fedbench.scenario import parse_scenario, resolve_runs
from fedbench.store import ResultsStore
from tests.factories import tiny_scenario

# unequal client sizes (Dirichlet 0.5): epochs → different K_i per client, and clients smaller than the batch
BASE = tiny_scenario(
    {"clients.num": 12, "clients.per_round": 4},
    name="batched",
    local={"epochs": 0.5, "batch_size": 32, "lr": 0.05, "weight_decay": 1e-3, "clip_grad_norm": 2.0},
)
COLS = ["test_acc", "test_loss", "train_loss", "bits_up", "bits_down", "consistency"]
BATCHABLE = [n for n in ALGORITHMS.names() if ALGORITHMS.capabilities(n).batchable]

# Every registered model with BatchNorm, at the smallest input it accepts (dropout off: the two executors
# draw dropout masks differently by construction). Images are random, 10 classes (ImageCache).
BN_MODELS = {
    "tinynn": ({"name": "tinynn"}, (1, 8, 8)),
    "lenet5_bn": ({"name": "lenet5_bn", "dropout": 0.0}, (1, 16, 16)),
    "vgg11": ({"name": "vgg11", "dropout": 0.0}, (1, 32, 32)),
    "resnet18": ({"name": "resnet18", "norm": "batch"}, (1, 8, 8)),
    "resnet20": ({"name": "resnet20"}, (1, 8, 8)),
    "convmixer": ({"name": "convmixer", "dim": 8, "depth": 1, "kernel_size": 3, "patch_size": 2}, (1, 8, 8)),
}

HEAVY = {"vgg11", "resnet18"}  # millions of parameters: FedAvg only, one round


class ImageCache(DataCache):
    """Random images of one shape (96 train, 32 test, 10 classes) in place of the scenario's dataset."""

    def __init__(self, tmp_path, shape, device=torch.device("cpu")):
        super().__init__(tmp_path, False, device)
        gen = torch.Generator().manual_seed(0)
        split = [
            ArraySplit(torch.randn(n, *shape, generator=gen), torch.randint(0, 10, (n,), generator=gen))
            for n in (96, 32)
        ]
        self.images = DatasetSplits("images", split[0], split[1], 10, tuple(shape)).to(device)

    def get(self, spec):
        return self.images.to(self.device, train_dtype(spec.local.precision))


def metrics(tmp_path, raw, executor, chunk=None, shape=None, name=None):
    spec = resolve_runs(parse_scenario(raw))[0]
    store = ResultsStore(tmp_path / (name or f"{executor}{chunk}"))
    cache = DataCache(tmp_path, False, torch.device("cpu")) if shape is None else ImageCache(tmp_path, shape)
    out = execute_run(spec, 0, store, cache, "h", options=RunOptions(executor=executor, chunk=chunk))
    assert out.status == "finished", out
    return store.metrics([out.run_id])[COLS]


def with_algorithm(raw, name):
    raw = copy.deepcopy(raw)
    raw["algorithms"] = [{"name": name}]
    if ALGORITHMS.capabilities(name).compression:
        raw["algorithms"][0]["compression"] = {"kind": "stochastic", "bits": 4}
    return raw


@pytest.mark.parametrize("name", ALGORITHMS.names())
def test_batched_equals_sequential(tmp_path, monkeypatch, name):
    """Every algorithm on both executors; and one that passes its own loss to ``grad`` declares ``own_loss`` (the
    batched executor runs it eager, unpriced), one that does not, does not."""
    objectives = []
    for oracle in (GradientOracle, BatchedOracle):

        def spying(self, points, objective=None, call=oracle.__call__):
            objectives.append(objective is not None)
            return call(self, points, objective)

        monkeypatch.setattr(oracle, "__call__", spying)
    raw = with_algorithm(BASE, name)
    seq, bat = metrics(tmp_path, raw, "sequential"), metrics(tmp_path, raw, "batched")
    pd.testing.assert_frame_equal(seq, bat, rtol=1e-4, atol=1e-6)
    assert any(objectives) == ALGORITHMS.capabilities(name).own_loss


# BatchNorm in the batched path normalises with its own masked sums (fedbench.engine.batched_layers): the same
# arithmetic as ATen's kernel in another order. Small BatchNorm batches are ill-conditioned (float32 gradients of
# either path are ~1e-5–1e-4 off a float64 reference on batches of 2–3 samples), so the two paths are compared in
# float64 (local.precision: fp64), where reassociation is invisible and the tolerance can be tight; one float32 run
# checks the real dtype.
F64_RTOL, F64_ATOL = 1e-9, 1e-12


def bn_scenario(model, name="fedavg", **local):
    """6 clients (3 a round) of unequal sizes, half an epoch of batches of 8 (unequal K_i, last batches of 2–7)."""
    raw = tiny_scenario(
        {"clients.num": 6, "clients.per_round": 3},
        name="bn",
        model=model,
        rounds=2,
        local={"epochs": 0.5, "batch_size": 8, "lr": 0.05, "drop_singleton_batch": True, **local},
    )
    return with_algorithm(raw, name)


STAGED = {"moon", "moonm", "fedmlb", "fedmlbm"}  # their own losses run the model block by block (stages())


@pytest.mark.parametrize("name", BATCHABLE)
def test_batched_equals_sequential_with_batchnorm_for_every_algorithm(tmp_path, name):
    """ConvMixer (BatchNorm2d), in float64 (local.precision: fp64); LeNet-5 with BatchNorm for the algorithms
    whose own loss runs the model block by block."""
    params, shape = BN_MODELS["lenet5_bn" if name in STAGED else "convmixer"]
    raw = bn_scenario(params, name, weight_decay=1e-3, clip_grad_norm=2.0, precision="fp64")
    seq, bat = metrics(tmp_path, raw, "sequential", shape=shape), metrics(tmp_path, raw, "batched", shape=shape)
    pd.testing.assert_frame_equal(seq, bat, rtol=F64_RTOL, atol=F64_ATOL)


@pytest.mark.parametrize(
    "model, name",
    [
        pytest.param(m, a, marks=[pytest.mark.slow] if m in HEAVY else [])
        for m in sorted(BN_MODELS)
        for a in ("fedavg", "fedsam", "scaffold")
        if m not in HEAVY or a == "fedavg"
    ],
)
def test_batched_equals_sequential_for_every_batchnorm_model(tmp_path, model, name):
    """Every BatchNorm model with one-evaluation (FedAvg), two-evaluation (FedSAM: the perturbed point must
    leave the statistics alone) and per-client-state (SCAFFOLD) local steps, in float64."""
    params, shape = BN_MODELS[model]
    raw = bn_scenario(params, name, precision="fp64")
    if model in HEAVY:
        raw.update(rounds=1, clients={"num": 4, "per_round": 2})
    seq, bat = metrics(tmp_path, raw, "sequential", shape=shape), metrics(tmp_path, raw, "batched", shape=shape)
    pd.testing.assert_frame_equal(seq, bat, rtol=F64_RTOL, atol=F64_ATOL)


@pytest.mark.parametrize("model", ["tinynn", "lenet5_bn", "resnet20"])
@pytest.mark.parametrize("name", ["moon", "fedmlb"])
def test_own_local_losses_batched_equal_sequential(tmp_path, model, name):
    """MOON's and FedMLB's own losses (frozen global and previous models, their passes on scratch BatchNorm
    buffers; FedMLB's hybrid paths through the global blocks) on the batched rows, each averaged over the row's
    real samples of unequal last batches: the sequential numbers in float64, with BatchNorm1d, BatchNorm2d and
    residual blocks."""
    params, shape = BN_MODELS[model]
    raw = bn_scenario(params, name, precision="fp64")
    raw["rounds"] = 3  # MOON's previous models are the clients' own from their second participation on
    seq, bat = metrics(tmp_path, raw, "sequential", shape=shape), metrics(tmp_path, raw, "batched", shape=shape)
    pd.testing.assert_frame_equal(seq, bat, rtol=F64_RTOL, atol=F64_ATOL)


def test_batched_equals_sequential_with_batchnorm_in_float32(tmp_path):
    raw = bn_scenario({"name": "resnet20"}, batch_size=16)
    seq, bat = metrics(tmp_path, raw, "sequential", shape=(1, 8, 8)), metrics(tmp_path, raw, "batched", shape=(1, 8, 8))
    pd.testing.assert_frame_equal(seq, bat, rtol=1e-3, atol=1e-5)


def test_every_batchnorm_model_of_the_registry_is_covered():
    found = set()
    for name in MODELS.names():
        with torch.device("meta"):
            try:
                module = build_model(name, {}, (3, 32, 32), 10)
            except ValueError:  # 1-D models
                module = build_model(name, {}, (60,), 10)
        if any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in module.modules()):
            found.add(name)
    assert found == set(BN_MODELS)


@pytest.mark.parametrize("name", BATCHABLE)
def test_chunked_rounds_equal_unchunked_ones(tmp_path, name):
    raw = with_algorithm(BASE, name)
    whole = metrics(tmp_path, raw, "batched", chunk=4)
    for chunk in (1, 2):
        pd.testing.assert_frame_equal(metrics(tmp_path, raw, "batched", chunk=chunk), whole, check_exact=True)


@pytest.mark.parametrize(
    "model, shape",
    [
        ({"name": "lenet5_bn", "dropout": 0.5}, (1, 16, 16)),  # BatchNorm and dropout
        ({"name": "resnet20"}, (1, 8, 8)),
    ],
)
def test_chunked_rounds_equal_unchunked_ones_with_batchnorm_and_dropout(tmp_path, model, shape):
    raw = bn_scenario(model)
    whole = metrics(tmp_path, raw, "batched", chunk=3, shape=shape)
    for chunk in (1, 2):
        pd.testing.assert_frame_equal(
            metrics(tmp_path, raw, "batched", chunk=chunk, shape=shape), whole, check_exact=True
        )


def test_auto_routes_by_device_and_algorithm_and_says_why():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert not choose_executor("auto", cpu).batched
    assert "auto on cpu" in choose_executor("auto", cpu).note
    assert not choose_executor("batched", cpu, batchable=False).batched
    chosen = choose_executor("batched", cpu)
    assert chosen.batched and chosen.chunk == DEFAULT_CPU_CHUNK and "cpu default" in chosen.note
    assert choose_executor("auto", cuda, chunk=5) == choose_executor("auto", cuda, chunk=5)
    assert choose_executor("auto", cuda, chunk=5).chunk == 5 and choose_executor("auto", cuda, chunk=5).batched
    with pytest.raises(ValueError, match="chunk must be a positive"):
        choose_executor("batched", cpu, chunk=0)
    with pytest.raises(ValueError, match="executor must be one of"):
        choose_executor("fast", cpu)
