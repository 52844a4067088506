"""The batched step replayed from CUDA graphs (``--compile graphs``, fedbench/engine/graphed.py), on a CPU.

A CUDA graph computes nothing when captured, and each replay overwrites its outputs' memory. :class:`Replayed`
stands in for the capture with exactly that behaviour (its outputs are NaN until replayed, and every replay
writes into the same tensors), so these tests check everything but the recording itself: one capture per input
shape, each call's inputs copied in, its outputs copied out before the next call can overwrite them. Runs and
populations on the graphed step then give the eager numbers bit for bit, for the ways algorithms call the
oracle (one evaluation a step, two, per-client state, a replay draw kept apart) and BatchNorm and dropout models.
The recording itself is tested on CUDA (tests/engine/test_gpu.py).
"""

import pandas as pd
import pytest
import torch
from torch.utils._pytree import tree_flatten, tree_map

import fedbench.engine.executor as executor
import fedbench.engine.graphed as graphed
from fedbench.engine.compiled import compile_choice
from fedbench.engine.graphed import GraphedStep, signature
from fedbench.engine.population import execute_population
from fedbench.engine.setup import DataCache
from fedbench.options import RunOptions
from fedbench.store import ResultsStore
from tests.continual.common import raw_with
from tests.engine.test_batched import BASE, COLS, bn_scenario, with_algorithm
from tests.engine.test_compiled import ORACLE_USES, run_metrics
from tests.engine.test_population import LOCAL, mixed_runs


class Replayed:
    """A :class:`~fedbench.engine.graphed.Capture` that behaves as a CUDA graph does: capturing leaves the
    outputs unset (NaN), and each replay recomputes the step from the static inputs into the same outputs."""

    def __init__(self):
        self.captures, self.replays = 0, 0

    def __call__(self, step, inputs):
        self.captures += 1
        outputs = tree_map(
            lambda t: t.clone().fill_(float("nan")) if t.is_floating_point() else t.clone(), step(*inputs)
        )

        def replay():
            self.replays += 1
            for into, fresh in zip(tree_flatten(outputs)[0], tree_flatten(step(*inputs))[0], strict=True):
                into.copy_(fresh)

        return outputs, replay


@pytest.fixture
def replayed(monkeypatch):
    """Runs on this CPU take the graphed step, its graphs captured by one :class:`Replayed`."""
    capture = Replayed()
    monkeypatch.setattr(graphed, "cuda_capture", lambda: capture)

    def choice(compile_step, batched, steps, device=None, *rest):
        if compile_step == "graphs" and batched:
            return "graphed", "step replayed from CUDA graphs (--compile graphs)"
        return compile_choice(compile_step, batched, steps, device, *rest)

    monkeypatch.setattr(executor, "compile_choice", choice)
    return capture


def test_one_capture_per_signature_and_outputs_that_outlive_the_next_call():
    capture = Replayed()
    step = GraphedStep(lambda a, b: (a * sum(b.values()), a.sum()), capture)
    a, w = torch.arange(6.0).reshape(2, 3), torch.full((2, 3), 2.0)
    first = step(a, {"w": w})
    second = step(a + 1, {"w": w})  # the same graph, replayed on new inputs
    assert capture.captures == 1 and capture.replays == 2
    torch.testing.assert_close(first, (a * 2, a.sum()), rtol=0, atol=0)  # not overwritten by the second replay
    torch.testing.assert_close(second, ((a + 1) * 2, (a + 1).sum()), rtol=0, atol=0)
    step(torch.ones(1, 3), {"w": torch.ones(1, 3)})  # another shape: its own graph
    step(a.double(), {"w": w.double()})  # another dtype: its own graph
    assert capture.captures == 3 and len(step.graphs) == 3
    assert signature((a, {"w": w}))[1] == (((2, 3), torch.float32), ((2, 3), torch.float32))
    step(a, {"v": w})  # another buffer's name: its own graph (two buffers of one shape never trade places)
    assert capture.captures == 4


def test_a_shape_that_cannot_be_captured_runs_eagerly():
    class Refused(Replayed):
        def __call__(self, step, inputs):
            self.captures += 1
            raise RuntimeError("operation not permitted when stream is capturing")

    capture = Refused()
    step = GraphedStep(lambda a: (a * 2, a.sum()), capture)
    a = torch.arange(6.0)
    with pytest.warns(RuntimeWarning, match="the step runs eagerly, its capture failed \\(operation not permitted"):
        first = step(a)
    second = step(a + 1)  # not captured again
    assert capture.captures == 1 and step.graphs == {signature((a,)): None}
    torch.testing.assert_close(first, (a * 2, a.sum()), rtol=0, atol=0)
    torch.testing.assert_close(second, ((a + 1) * 2, (a + 1).sum()), rtol=0, atol=0)


def test_graphs_need_a_cuda_device_and_say_so():
    assert compile_choice("graphs", True, 1, torch.device("cuda")) == (
        "graphed",
        "step replayed from CUDA graphs (--compile graphs)",
    )
    assert compile_choice("graphs", True, 1, torch.device("cpu")) == (
        "eager",
        "step eager (--compile graphs needs a CUDA device, not cpu)",
    )
    assert compile_choice("graphs", False, 1, torch.device("cuda")) == ("eager", "")  # the sequential executor
    assert executor.choose_executor("batched", torch.device("cpu"), compile_step="graphs").step == "eager"


@pytest.mark.parametrize("name", ORACLE_USES)
def test_a_graphed_run_equals_the_eager_one(tmp_path, replayed, name):
    raw = with_algorithm(raw_with() if name == "nccl_fl" else BASE, name)
    eager = run_metrics(tmp_path, raw, "eager", columns=None, compile_step="off")
    graphs = run_metrics(tmp_path, raw, "graphs", columns=None, compile_step="graphs")
    pd.testing.assert_frame_equal(eager[COLS], graphs[COLS], check_exact=True)
    assert "step replayed from CUDA graphs" in graphs["extra"].iloc[0]
    assert replayed.captures >= 1 and replayed.replays > replayed.captures


def test_a_graphed_run_with_batchnorm_dropout_and_chunks_equals_the_eager_one(tmp_path, replayed):
    raw, shape = bn_scenario({"name": "lenet5_bn", "dropout": 0.5}), (1, 16, 16)
    eager = run_metrics(tmp_path, raw, "eager", shape, compile_step="off")
    graphs = run_metrics(tmp_path, raw, "graphs", shape, compile_step="graphs", chunk=2)
    pd.testing.assert_frame_equal(eager, graphs, check_exact=True)


@pytest.mark.filterwarnings("error::RuntimeWarning")  # a population that falls back to one-by-one fails the test
@pytest.mark.parametrize("name", ["fedavg", "scaffold"])
def test_a_graphed_population_equals_the_eager_one(tmp_path, replayed, name):
    runs = mixed_runs(name, local={**LOCAL, "precision": "fp32"})
    cache = DataCache(tmp_path, False, torch.device("cpu"))
    stores = {how: ResultsStore(tmp_path / how) for how in ("off", "graphs")}
    outs = {
        how: execute_population(runs, store, cache, RunOptions(population="3", compile_step=how))
        for how, store in stores.items()
    }
    for eager, graphs in zip(outs["off"], outs["graphs"]):
        assert eager.status == graphs.status == "finished"
        got = stores["graphs"].metrics([graphs.run_id])
        pd.testing.assert_frame_equal(stores["off"].metrics([eager.run_id])[COLS], got[COLS], check_exact=True)
        assert got["extra"].str.contains("step replayed from CUDA graphs").iloc[0]
    assert replayed.captures >= 1
