"""The batched step through torch.compile (``--compile``): equal to the eager step to float tolerance for
the ways algorithms call the gradient oracle (one evaluation, two, per-client state, a replay draw kept
apart) and for BatchNorm and dropout models; chunked equal to unchunked; a resumed compiled run equal
to an uninterrupted one; and ``auto``'s rule."""

import os

import pandas as pd
import pytest
import torch

from fedbench.engine.compiled import COMPILE_MIN_STEPS, compile_choice
from fedbench.engine.executor import choose_executor
from fedbench.engine.runner import execute_run
from fedbench.engine.setup import DataCache
from fedbench.options import RunOptions
from fedbench.scenario import parse_scenario, resolve_runs
from fedbench.store import ResultsStore
from tests.continual.common import raw_with
from tests.engine.test_batched import BASE, COLS, ImageCache, bn_scenario, with_algorithm

pytestmark = pytest.mark.slow  # torch.compile: seconds to tens of seconds per test on 2 cores

# FedAvg: one evaluation a step; FedSAM: two (the perturbed point); SCAFFOLD: per-client state;
# NCCL-FL: a replay draw differentiated apart (oracle.memory) — the ways algorithms use the step.
ORACLE_USES = ["fedavg", "fedsam", "scaffold", "nccl_fl"]


def fp64(raw: dict) -> dict:
    """``raw`` trained in float64: compiled and eager steps sum in different orders, and float32 training
    amplifies that into differences of 1e-3 on some CPUs (issue 24); in float64 they stay near 1e-12."""
    return {**raw, "local": {**raw["local"], "precision": "fp64"}}


def run_metrics(tmp_path, raw, name, shape=None, columns=COLS, **how):
    """One batched run on the CPU with the run options ``how``; its metrics' ``columns`` (None: all)."""
    spec = resolve_runs(parse_scenario(raw))[0]
    store = ResultsStore(tmp_path / name)
    cache = DataCache(tmp_path, False, torch.device("cpu")) if shape is None else ImageCache(tmp_path, shape)
    out = execute_run(spec, 0, store, cache, "h", options=RunOptions(executor="batched", **how))
    assert out.status == "finished", out
    metrics = store.metrics([out.run_id])
    return metrics if columns is None else metrics[columns]


@pytest.mark.parametrize("name", ORACLE_USES)
def test_compiled_step_equals_the_eager_one(tmp_path, name):
    raw = fp64(
        with_algorithm(raw_with() if name == "nccl_fl" else BASE, name)
    )  # NCCL-FL: a task stream, its memory filled from task 1
    eager = run_metrics(tmp_path, raw, "eager", compile_step="off")
    compiled = run_metrics(tmp_path, raw, "compiled", compile_step="on")
    pd.testing.assert_frame_equal(eager, compiled, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize(
    "model, shape",
    [
        ({"name": "lenet5_bn", "dropout": 0.5}, (1, 16, 16)),  # BatchNorm and dropout (the same hashed masks both ways)
        ({"name": "resnet20"}, (1, 8, 8)),
    ],
)
def test_compiled_step_equals_the_eager_one_with_batchnorm_and_dropout(tmp_path, model, shape):
    raw = fp64(bn_scenario(model))
    eager = run_metrics(tmp_path, raw, "eager", shape, compile_step="off")
    compiled = run_metrics(tmp_path, raw, "compiled", shape, compile_step="on")
    chunked = run_metrics(tmp_path, raw, "chunked", shape, compile_step="on", chunk=2)
    pd.testing.assert_frame_equal(eager, compiled, rtol=1e-9, atol=1e-12)
    pd.testing.assert_frame_equal(compiled, chunked, rtol=1e-9, atol=1e-12)


def test_a_resumed_compiled_run_equals_an_uninterrupted_one(tmp_path):
    raw = {**with_algorithm(BASE, "scaffold"), "rounds": 5, "checkpoint_every": 2}
    whole = run_metrics(tmp_path, raw, "whole", compile_step="on")

    def stop_at_4(t, _):
        if t == 4:
            raise KeyboardInterrupt

    spec = resolve_runs(parse_scenario(raw))[0]
    store, cache = ResultsStore(tmp_path / "cut"), DataCache(tmp_path, False, torch.device("cpu"))
    with pytest.raises(KeyboardInterrupt):
        execute_run(spec, 0, store, cache, "h", stop_at_4, RunOptions(executor="batched", compile_step="on"))
    resumed = run_metrics(tmp_path, raw, "cut", compile_step="on")  # from the round-2 checkpoint, compiled afresh
    pd.testing.assert_frame_equal(whole, resumed, check_exact=True)


def test_the_step_is_really_compiled(tmp_path):
    from torch._dynamo.utils import counters

    counters.clear()
    run_metrics(tmp_path, with_algorithm(BASE, "fedavg"), "on", compile_step="on")
    assert counters["stats"]["unique_graphs"] >= 1 and not counters["graph_break"]
    counters.clear()
    run_metrics(tmp_path, with_algorithm(BASE, "fedavg"), "off", compile_step="off")
    assert not counters["stats"]["unique_graphs"]


@pytest.mark.parametrize("choice", ["auto", "on", "graphs"])
def test_an_algorithms_own_loss_runs_eager_unpriced(choice):
    """Its loss is not the cross-entropy step --compile compiles: eager, and nothing priced, whatever is asked."""

    def priced():
        raise AssertionError("an own loss's step is not priced")

    assert compile_choice(choice, True, 10**9, torch.device("cuda"), priced, own_loss=True) == (
        "eager",
        "step eager (the algorithm's own local loss; --compile applies to cross-entropy's step)",
    )


def test_auto_compiles_batched_runs_long_enough_to_repay_it():
    assert compile_choice("auto", True, COMPILE_MIN_STEPS) == (
        "compiled",
        "step compiled (auto: 20,000 local steps ≥ 20,000)",
    )
    mode, why = compile_choice("auto", True, COMPILE_MIN_STEPS - 1)
    assert mode == "eager" and why.startswith("step eager (auto: 19,999 local steps < 20,000")
    assert compile_choice("on", True, 1) == ("compiled", "step compiled (--compile on)")
    assert compile_choice("off", True, 10**9) == ("eager", "step eager (--compile off)")
    assert compile_choice("on", False, 10**9) == ("eager", "")  # the sequential executor is never compiled
    with pytest.raises(ValueError, match="compile must be one of auto, on, off, graphs, got 'yes'"):
        compile_choice("yes", True, 1)
    cpu = torch.device("cpu")
    assert not choose_executor("auto", cpu, steps=10**6).compiled  # auto on a CPU: sequential
    long_run = choose_executor("batched", cpu, steps=10**6)
    assert long_run.compiled and long_run.note.endswith("step compiled (auto: 1,000,000 local steps ≥ 20,000)")
    assert not choose_executor("batched", cpu, batchable=False, compile_step="on").compiled


@pytest.mark.parametrize(
    "local, expected",
    [
        ({"iterations": 7}, 3 * 7),
        ({"epochs": 2.0, "batch_size": 10}, None),  # rounds × ⌈2·n_max/10⌉
        ({"random_epochs": [1, 3], "batch_size": 10}, None),  # the largest draw, 3 epochs
    ],
)
def test_a_runs_local_steps_are_rounds_times_the_largest_k(tmp_path, local, expected):
    from fedbench.engine.runner import local_steps
    from fedbench.engine.setup import build_run

    raw = with_algorithm({**BASE, "rounds": 3, "local": {**BASE["local"], "epochs": None, **local}}, "fedavg")
    spec = resolve_runs(parse_scenario(raw))[0]
    setup = build_run(spec, 0, DataCache(tmp_path, False, torch.device("cpu")))
    epochs = local.get("epochs") or max(local.get("random_epochs", [0]))
    n_max = max(len(p) for p in setup.federation.parts)
    want = expected if expected is not None else 3 * -(-int(epochs * n_max) // 10)
    assert local_steps(spec, setup.federation.batcher) == want


def test_compiled_graphs_are_cached_under_the_results_folder(tmp_path, monkeypatch):
    """A compiled run points inductor's and Triton's caches at <out>/compile-cache (a later process on the
    folder loads its graphs: benchmarks/README.md), unless TORCHINDUCTOR_CACHE_DIR is set already."""
    import fedbench.engine.compiled as compiled
    import fedbench.engine.runner as runner

    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    assert compiled.use_compile_cache(tmp_path / "a") == (tmp_path / "a" / "compile-cache").absolute()
    assert compiled.use_compile_cache(tmp_path / "b") is None  # the first folder stays for the process
    assert os.environ["TRITON_CACHE_DIR"] == str((tmp_path / "a" / "compile-cache" / "triton").absolute())

    calls = []
    monkeypatch.setattr(runner, "use_compile_cache", calls.append)
    monkeypatch.setattr(compiled.torch, "compile", lambda step, **_: step)  # the run's choice, not inductor's work
    spec = resolve_runs(parse_scenario(with_algorithm(BASE, "fedavg")))[0]
    cache = DataCache(tmp_path, False, torch.device("cpu"))
    for choice, out in (("off", tmp_path / "eager"), ("on", tmp_path / "compiled")):
        execute_run(spec, 0, ResultsStore(out), cache, "h", options=RunOptions(executor="batched", compile_step=choice))
    assert calls == [tmp_path / "compiled"]
