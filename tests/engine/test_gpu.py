"""The engine on CUDA (marker ``gpu``: skipped with a reason where torch sees no CUDA device).

Executor equality, dropout and resume reproducibility, per-client tables in pinned host memory
(``--client-state host``), chunked against unchunked batched rounds and the compiled step against
the eager one, each on the GPU. Runs that
compare the two executors switch TF32 off (``local.tf32: false``): TF32 rounds every matmul input
to 10 mantissa bits, more than the executors' float reassociation, and the comparison is of the
executors, not of TF32.
"""

import copy

import pandas as pd
import pytest
import torch

from fedbench.algorithms.client_table import HostTable
from fedbench.algorithms.state import state_leaves
from fedbench.engine.runner import RoundLoop, execute_run
from fedbench.engine.setup import DataCache, build_run
from fedbench.options import RunOptions
from fedbench.scenario import parse_scenario, resolve_runs
from fedbench.store import ResultsStore
from tests.engine.test_batched import BASE, COLS, ImageCache, bn_scenario, with_algorithm
from tests.factories import tiny_scenario

pytestmark = pytest.mark.gpu
CUDA = torch.device("cuda")
ALGORITHMS = ["fedavg", "fedsam", "scaffold", "gradma", "fedcams", "mimelite", "fedqvr"]


def run(
    tmp_path,
    raw,
    name,
    executor="batched",
    chunk=None,
    shape=None,
    on_round=None,
    client_state="device",
    global_seed=None,
    compile_step="auto",
):
    """One run on CUDA; its metrics (all rounds), or the exception ``on_round`` raised."""
    if global_seed is not None:  # what the caller left in torch's global generators must not matter
        torch.manual_seed(global_seed)
    spec = resolve_runs(parse_scenario(raw))[0]
    store = ResultsStore(tmp_path / name)
    cache = DataCache(tmp_path / "data", False, CUDA) if shape is None else ImageCache(tmp_path, shape, CUDA)
    out = execute_run(
        spec,
        0,
        store,
        cache,
        "h",
        on_round,
        RunOptions(executor=executor, client_state=client_state, chunk=chunk, compile_step=compile_step),
    )
    assert out.status == "finished", out
    return store.metrics([out.run_id])


@pytest.mark.parametrize("name", ALGORITHMS)
def test_executors_agree_on_cuda(tmp_path, name):
    raw = with_algorithm(BASE, name)
    raw["local"]["tf32"] = False
    seq, bat = run(tmp_path, raw, "seq", "sequential")[COLS], run(tmp_path, raw, "bat")[COLS]
    pd.testing.assert_frame_equal(seq, bat, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize(
    "model, shape", [({"name": "resnet20"}, (1, 8, 8)), ({"name": "lenet5_bn", "dropout": 0.0}, (1, 16, 16))]
)
def test_executors_agree_on_cuda_with_batchnorm(tmp_path, model, shape):
    raw = bn_scenario(
        model, batch_size=16, tf32=False
    )  # float32 on a GPU: batches of 16 keep BatchNorm well conditioned
    seq, bat = run(tmp_path, raw, "seq", "sequential", shape=shape)[COLS], run(tmp_path, raw, "bat", shape=shape)[COLS]
    pd.testing.assert_frame_equal(seq, bat, rtol=1e-3, atol=1e-5)


DROPOUT = tiny_scenario({"model.hidden": [32], "model.dropout": 0.5}, name="dropout", rounds=5, checkpoint_every=2)


@pytest.mark.parametrize("executor", ["sequential", "batched"])
def test_dropout_runs_are_reproducible_and_resume_identically_on_cuda(tmp_path, executor):
    cols = ["round", *COLS]
    a = run(tmp_path, DROPOUT, "a", executor, global_seed=1)[cols]
    pd.testing.assert_frame_equal(a, run(tmp_path, DROPOUT, "b", executor, global_seed=2)[cols])
    no_dropout = copy.deepcopy(DROPOUT)
    no_dropout["model"]["dropout"] = 0.0
    assert not a["train_loss"].equals(run(tmp_path, no_dropout, "c", executor)["train_loss"])

    def stop_at_4(t, _):
        if t == 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, DROPOUT, "cut", executor, on_round=stop_at_4, global_seed=1)
    resumed = run(tmp_path, DROPOUT, "cut", executor, global_seed=3)  # from the round-2 checkpoint
    pd.testing.assert_frame_equal(a, resumed[cols])


@pytest.mark.parametrize("name", ["scaffold", "fedqvr", "mifa"])
def test_pinned_host_tables_give_identical_numbers_and_resume_on_cuda(tmp_path, name):
    raw = with_algorithm(tiny_scenario(name="host", rounds=4, checkpoint_every=2), name)
    spec = resolve_runs(parse_scenario(raw))[0]
    setup = build_run(spec, 0, DataCache(tmp_path / "data", False, CUDA), host_client_state=True)
    tables = [v for v in state_leaves(RoundLoop(spec, 0, setup).state) if isinstance(v, HostTable)]
    assert tables and all(t.data.is_pinned() for t in tables)
    cols = ["round", *COLS]
    device = run(tmp_path, raw, "device", client_state="device")[cols]
    pd.testing.assert_frame_equal(device, run(tmp_path, raw, "host", client_state="host")[cols])

    def stop_at_3(t, _):
        if t == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, raw, "cut", client_state="host", on_round=stop_at_3)
    pd.testing.assert_frame_equal(device, run(tmp_path, raw, "cut", client_state="host")[cols])


@pytest.mark.parametrize("name", ["fedavg", "scaffold", "gradma"])
def test_chunked_rounds_equal_unchunked_ones_on_cuda(tmp_path, name):
    """MLP rows are batched matmuls: bit for bit whatever the chunk."""
    raw = with_algorithm(BASE, name)
    whole = run(tmp_path, raw, "whole", chunk=4)[COLS]
    for chunk in (1, 2):
        pd.testing.assert_frame_equal(run(tmp_path, raw, f"c{chunk}", chunk=chunk)[COLS], whole, check_exact=True)


def test_chunked_rounds_agree_with_unchunked_ones_with_batchnorm_and_dropout_on_cuda(tmp_path):
    """Convolutions of c clients run as one grouped convolution, for which cuDNN may choose another
    kernel per group count: equal to float tolerance (bit for bit on a CPU, tests/engine/test_batched.py)."""
    raw = bn_scenario({"name": "lenet5_bn", "dropout": 0.5}, batch_size=16, tf32=False)
    whole = run(tmp_path, raw, "whole", chunk=3, shape=(1, 16, 16))[COLS]
    for chunk in (1, 2):
        got = run(tmp_path, raw, f"c{chunk}", chunk=chunk, shape=(1, 16, 16))[COLS]
        pd.testing.assert_frame_equal(got, whole, rtol=1e-4, atol=1e-6)


def test_auto_sizes_chunks_from_a_memory_probe_and_logs_it(tmp_path):
    import json

    m = run(tmp_path, with_algorithm(BASE, "fedavg"), "auto", "auto")
    note = json.loads(m["extra"].iloc[0])["executor"]
    assert note.startswith("batched, chunks of ") and "GiB free" in note


@pytest.mark.parametrize("model, shape", [(None, None), ({"name": "lenet5_bn", "dropout": 0.5}, (1, 16, 16))])
def test_the_compiled_step_equals_the_eager_one_and_resumes_identically_on_cuda(tmp_path, model, shape):
    """Triton kernels against eager CUDA ones (TF32 off); a compiled run cut in round 3 and resumed.
    Three rounds at η_l = 0.01: later or faster, the BatchNorm scenario's batches of 2–7 samples
    blow a client up on either path, and float differences then grow past any tolerance."""
    raw = with_algorithm(BASE, "scaffold") if model is None else bn_scenario(model, batch_size=16, lr=0.01)
    raw = {**raw, "rounds": 3, "checkpoint_every": 1, "local": {**raw["local"], "tf32": False}}
    cols = ["round", *COLS]
    eager = run(tmp_path, raw, "eager", shape=shape, compile_step="off")[cols]
    whole = run(tmp_path, raw, "whole", shape=shape, compile_step="on")[cols]
    pd.testing.assert_frame_equal(eager, whole, rtol=1e-3, atol=1e-5)

    def stop_at_3(t, _):
        if t == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, raw, "cut", shape=shape, on_round=stop_at_3, compile_step="on")
    pd.testing.assert_frame_equal(whole, run(tmp_path, raw, "cut", shape=shape, compile_step="on")[cols])


@pytest.mark.filterwarnings("error::RuntimeWarning")  # a capture that fails (its step run eagerly) fails the test
@pytest.mark.parametrize("model, shape", [(None, None), ({"name": "lenet5_bn", "dropout": 0.5}, (1, 16, 16))])
def test_the_graphed_step_equals_the_eager_one_and_resumes_identically_on_cuda(tmp_path, model, shape):
    """``--compile graphs``: the eager step's kernels captured as CUDA graphs and replayed (TF32 off), a run
    chunked so that its rounds replay two graphs (chunks of 2 and of 1, run as 2 rows), cut in round 3 and
    resumed. The replayed kernels are the eager ones: equal to the eager run to far below the compiled step's
    tolerance, and a resumed graphed run equal to an uninterrupted one bit for bit."""
    raw = with_algorithm(BASE, "scaffold") if model is None else bn_scenario(model, batch_size=16, lr=0.01)
    raw = {**raw, "rounds": 3, "checkpoint_every": 1, "local": {**raw["local"], "tf32": False}}
    cols = ["round", *COLS]
    eager = run(tmp_path, raw, "eager", shape=shape, compile_step="off", chunk=2)[cols]
    graphed = run(tmp_path, raw, "whole", shape=shape, compile_step="graphs", chunk=2)
    assert "step replayed from CUDA graphs" in graphed["extra"].iloc[0]
    pd.testing.assert_frame_equal(eager, graphed[cols], rtol=1e-6, atol=1e-8)

    def stop_at_3(t, _):
        if t == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, raw, "cut", shape=shape, on_round=stop_at_3, compile_step="graphs", chunk=2)
    resumed = run(tmp_path, raw, "cut", shape=shape, compile_step="graphs", chunk=2)[cols]
    pd.testing.assert_frame_equal(graphed[cols], resumed, check_exact=True)


@pytest.mark.filterwarnings("error::RuntimeWarning")
@pytest.mark.parametrize("name", ["fedavg", "fedsam", "gradma"])
def test_a_graphed_population_equals_the_eager_one_on_cuda(tmp_path, name):
    """A population of three runs (mixed seeds, S and learning rates) on the graphed step and on the eager one."""
    from fedbench.engine.population import execute_population
    from tests.engine.test_population import LOCAL, mixed_runs

    runs = mixed_runs(name, local={**LOCAL, "precision": "fp32", "tf32": False})
    cache = DataCache(tmp_path / "data", False, CUDA)
    metrics = {}
    for how in ("off", "graphs"):
        store = ResultsStore(tmp_path / how)
        outs = execute_population(runs, store, cache, RunOptions(device="cuda", population="3", compile_step=how))
        assert [o.status for o in outs] == ["finished"] * 3
        metrics[how] = [store.metrics([o.run_id]) for o in outs]
    for eager, graphed in zip(metrics["off"], metrics["graphs"]):
        assert "step replayed from CUDA graphs" in graphed["extra"].iloc[0]
        pd.testing.assert_frame_equal(eager[COLS], graphed[COLS], rtol=1e-6, atol=1e-8)
