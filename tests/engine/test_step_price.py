"""``--compile auto`` at the step's measured prices (fedbench/engine/step_price.py): the rule, the price book,
measuring on the run's model without touching its numbers, a second run deciding from the book, and a resumed run
keeping the step it took."""

import json

import pandas as pd
import pytest
import torch

import fedbench.engine.compiled as compiled
import fedbench.engine.step_price as step_price
from fedbench.engine.batched import probe_inputs
from fedbench.engine.batched_layers import RowLayers
from fedbench.engine.compiled import MIN_PRICED_STEPS, compile_choice
from fedbench.engine.runner import execute_run
from fedbench.engine.setup import DataCache, build_run
from fedbench.engine.step_price import PAYBACK, Price, PriceBook, cheap_choice, priced_choice, priced_step
from fedbench.options import RunOptions
from fedbench.scenario import parse_scenario, resolve_runs
from fedbench.store import ResultsStore
from tests.engine.test_batched import BASE, COLS, with_algorithm

CPU = torch.device("cpu")
# 5 rounds × 80 local steps: 400 steps, the least auto measures.
LONG = with_algorithm({**BASE, "rounds": 5, "local": {**BASE["local"], "epochs": None, "iterations": 80}}, "fedavg")


def test_the_mode_whose_saving_repays_its_setup_is_taken():
    eager = Price(2e-3)
    compiled_ = Price(1e-3, 10.0)
    mode, why = priced_choice({"eager": eager, "compiled": compiled_}, 50_000)
    assert mode == "compiled"
    assert why == (
        "step compiled (auto, measured: compiled 2.00 → 1.00 ms a step saves 50.0 s over 50,000 steps "
        "against 10.0 s to compile)"
    )
    # Saving 15 s against 10 s to compile: it pays, but not PAYBACK (2) times over.
    mode, why = priced_choice({"eager": eager, "compiled": compiled_}, 15_000, "known prices")
    assert mode == "eager" and why.startswith(
        "step eager (auto, known prices: compiled 2.00 → 1.00 ms a step saves 15.0"
    )
    assert priced_choice({"eager": eager, "compiled": compiled_}, 20_000)[0] == "compiled"  # exactly PAYBACK × 10 s


def test_the_larger_net_saving_wins_and_a_disagreeing_mode_never_does():
    prices = {"eager": Price(2e-3), "compiled": Price(0.5e-3, 60.0), "graphed": Price(1e-3, 0.01)}
    assert priced_choice(prices, 50_000)[0] == "graphed"  # 50 s − 0.01 against 75 s − 60
    assert priced_choice(prices, 500_000)[0] == "compiled"  # 750 s − 60 against 500 s − 0.01
    wrong = {**prices, "compiled": Price(0.5e-3, 60.0, agrees=False)}
    mode, why = priced_choice(wrong, 500_000)
    assert mode == "graphed" and "step replayed from CUDA graphs" in why
    mode, why = priced_choice({"eager": Price(2e-3), "graphed": Price(1e-3, 0.01, agrees=False)}, 10**6)
    assert mode == "eager" and "graphed disagreed with eager" in why


def test_compiling_is_measured_only_where_it_could_pay():
    assert cheap_choice(1e-3, 1_000) == "its 1,000 eager steps take 1.0 s, less than 2 × 5 s to compile"
    assert cheap_choice(1e-3, 10_000) is None  # 10 s of eager steps: compiling in ≥ 5 s could pay
    mode, why = priced_choice({"eager": Price(1e-3)}, 1_000)
    assert mode == "eager" and why.endswith(
        "compiled not measured: its 1,000 eager steps take 1.0 s, less than 2 × 5 s to compile)"
    )
    assert PAYBACK == 2


def test_auto_without_prices_a_resumed_step_and_runs_too_short_to_measure():
    asked = []

    def priced():
        asked.append(1)
        return "compiled", "measured"

    assert compile_choice("auto", True, MIN_PRICED_STEPS - 1, CPU, priced) == (
        "eager",
        "step eager (auto: 399 local steps < 400, too few to measure its price)",
    )
    assert compile_choice("auto", True, MIN_PRICED_STEPS, CPU, priced) == ("compiled", "measured")
    assert compile_choice("auto", True, 10**6, CPU, priced, resumed="eager") == (
        "eager",
        "step eager (auto: as the run took it before it was resumed)",
    )
    assert compile_choice("auto", True, 10**6, CPU, priced, resumed="graphed") == (
        "eager",  # graphed on CUDA, resumed on a CPU: the same numbers without CUDA graphs
        "step eager (auto: as the run took it before it was resumed)",
    )
    assert compile_choice("off", True, 10**6, CPU, priced) == ("eager", "step eager (--compile off)")
    assert len(asked) == 1  # only where auto had to decide


def test_the_price_book_is_shared_through_the_results_folder(tmp_path):
    a, b = PriceBook(tmp_path), PriceBook(tmp_path)
    a.put("k", {"eager": Price(2e-3), "compiled": Price(1e-3, 9.0, agrees=False)})
    assert b.get("k") == {"eager": Price(2e-3), "compiled": Price(1e-3, 9.0, agrees=False)}
    assert json.loads((tmp_path / "compile-cache" / "step-prices.json").read_text())["k"]["eager"]["step_s"] == 2e-3
    b.put("j", {"eager": Price(1.0)})
    assert set(json.loads((tmp_path / "compile-cache" / "step-prices.json").read_text())) == {"k", "j"}
    (tmp_path / "compile-cache" / "step-prices.json").write_text("{not json")
    assert PriceBook(tmp_path).get("k") is None  # an unreadable book is an empty one
    memory = PriceBook()
    memory.put("k", {"eager": Price(1.0)})
    assert memory.get("k") == {"eager": Price(1.0)} and memory.path is None


def test_measuring_runs_the_runs_own_steps_and_keeps_only_the_one_taken(tmp_path, monkeypatch):
    spec = resolve_runs(parse_scenario(LONG))[0]
    setup = build_run(spec, 0, DataCache(tmp_path, False, CPU))
    layers = RowLayers.of(setup.model)

    inputs = probe_inputs(setup.model, setup.buffers0, setup.data.train, 32, 4)

    book = PriceBook(tmp_path)
    mode, why = priced_step(layers, inputs, 400, CPU, book)  # real timings: 400 tiny steps cannot repay compiling
    assert mode == "eager" and "compiled not measured" in why
    (key, prices), *_ = json.loads((tmp_path / "compile-cache" / "step-prices.json").read_text()).items()
    assert set(prices) == {"eager"} and prices["eager"]["step_s"] > 0
    calls = []
    monkeypatch.setattr(step_price, "measure", lambda *a: calls.append(a) or {"eager": Price(1.0)})
    assert priced_step(layers, inputs, 400, CPU, book)[1].startswith("step eager (auto, known prices:")
    assert not calls  # known, and compiling could not pay this run either
    priced_step(layers, inputs, 10**6, CPU, book)  # it could pay a long run: measured
    assert len(calls) == 1
    monkeypatch.setattr(compiled.torch, "compile", lambda step, **_: step)
    compiled.step_function(layers, "compiled")
    monkeypatch.setattr(step_price, "measure", lambda *a: {"eager": Price(1.0), "compiled": Price(2.0, 1.0)})
    assert priced_step(layers, inputs, 10**7, CPU, PriceBook())[0] == "eager"
    assert "compiled" not in layers.steps  # the step not taken is dropped


def run(tmp_path, name, seed=0, on_round=None, raw=LONG):
    spec = resolve_runs(parse_scenario(raw))[0]
    store = ResultsStore(tmp_path / name)
    cache = DataCache(tmp_path / "data", False, CPU)
    options = RunOptions(executor="batched", compile_step="auto")
    out = execute_run(spec, seed, store, cache, "h", on_round, options)
    return store, out


def note_of(store, out):
    return json.loads(store.metrics([out.run_id])["extra"].iloc[0])["executor"]


def test_auto_measures_once_per_results_folder_and_a_resumed_run_keeps_its_step(tmp_path, monkeypatch):
    """Fake prices make compiling pay (torch.compile itself stubbed: the choice, not inductor's work): the
    first run measures and compiles, a second run into the same folder decides from the book, and a run cut
    in round 3 and resumed after the prices changed keeps the compiled step without measuring, giving the
    uninterrupted numbers."""
    monkeypatch.setattr(compiled.torch, "compile", lambda step, **_: step)
    measured = []
    prices = {"eager": Price(0.1), "compiled": Price(0.01, 1.0)}

    def fake(layers, inputs, steps, device, out, graphs):
        assert graphs is step_price.AUTO_GRAPHS is False  # auto prices CUDA graphs only once a GPU has tested them
        measured.append(out)
        return dict(prices)

    monkeypatch.setattr(step_price, "measure", fake)
    store, first = run(tmp_path, "out")
    assert first.status == "finished" and measured == [tmp_path / "out"]
    assert "step compiled (auto, measured: compiled 100.00 → 10.00 ms a step saves 36.0 s" in note_of(store, first)
    store, second = run(tmp_path, "out", seed=1)
    assert len(measured) == 1 and "step compiled (auto, known prices:" in note_of(store, second)

    def stop_at_3(t, _):
        if t == 3:
            raise KeyboardInterrupt

    raw = {**LONG, "checkpoint_every": 1}
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, "cut", on_round=stop_at_3, raw=raw)
    assert len(measured) == 2
    prices["compiled"] = Price(0.099, 1.0)  # now compiling would not pay: 0.4 s saved against 1 s
    store, resumed = run(tmp_path, "cut", raw=raw)
    assert resumed.status == "finished" and len(measured) == 2  # resumed: the step it took, nothing measured
    whole_store, whole = run(tmp_path, "whole", raw=raw)
    assert "step eager (auto, measured:" in note_of(whole_store, whole)  # at the new prices a new run stays eager
    # Stubbed, the compiled step is the eager one: the resumed run equals the uninterrupted one bit for bit.
    got, want = store.metrics([resumed.run_id])[COLS], whole_store.metrics([whole.run_id])[COLS]
    pd.testing.assert_frame_equal(got, want, check_exact=True)


def test_a_measured_run_has_the_numbers_of_an_eager_one(tmp_path):
    """Measuring draws nothing from the run's streams and moves nothing of its model."""
    store, measured = run(tmp_path, "auto")
    assert "step eager (auto, measured:" in note_of(store, measured)
    spec = resolve_runs(parse_scenario(LONG))[0]
    eager_store = ResultsStore(tmp_path / "eager")
    cache = DataCache(tmp_path / "data", False, CPU)
    eager = execute_run(spec, 0, eager_store, cache, "h", options=RunOptions(executor="batched", compile_step="off"))
    pd.testing.assert_frame_equal(
        store.metrics([measured.run_id])[COLS], eager_store.metrics([eager.run_id])[COLS], check_exact=True
    )


def test_a_step_that_fails_to_build_is_never_taken(tmp_path, monkeypatch):
    spec = resolve_runs(parse_scenario(LONG))[0]
    setup = build_run(spec, 0, DataCache(tmp_path, False, CPU))
    layers = RowLayers.of(setup.model)

    def broken(step, **_):
        raise RuntimeError("no C compiler")

    monkeypatch.setattr(compiled.torch, "compile", broken)
    inputs = probe_inputs(setup.model, setup.buffers0, setup.data.train, 32, 4)
    with pytest.warns(RuntimeWarning, match="the compiled step failed \\(RuntimeError: no C compiler\\)"):
        prices = step_price.measure(layers, inputs, 10**9, CPU, None)
    assert not prices["compiled"].agrees and "compiled" not in layers.steps
    assert priced_choice(prices, 10**9) == (
        "eager",
        "step eager (auto, measured: compiled failed (RuntimeError: no C compiler))",
    )


def test_graphed_prices_in_the_book_are_not_taken_until_auto_prices_graphs(tmp_path):
    spec = resolve_runs(parse_scenario(LONG))[0]
    setup = build_run(spec, 0, DataCache(tmp_path, False, CPU))
    layers = RowLayers.of(setup.model)
    inputs = probe_inputs(setup.model, setup.buffers0, setup.data.train, 32, 4)
    book = PriceBook()
    cheap_graphs = {"eager": Price(1.0), "graphed": Price(0.001, 0.0), "compiled": Price(0.9, 10**9)}
    book.put(step_price.price_key(layers, inputs, CPU), cheap_graphs)
    assert priced_choice(cheap_graphs, 10**6)[0] == "graphed"
    mode, why = priced_step(layers, inputs, 10**6, CPU, book)
    assert mode == "eager" and "graphed" not in why


def test_a_mode_agrees_to_float_rounding_not_to_a_broken_step():
    grads = torch.linspace(-1.0, 1.0, 50).reshape(2, 25)
    eager = (grads, (torch.tensor(1.0), (torch.ones(2), {})))
    rounded = (grads * (1 + 2e-3), eager[1])  # float32's rounding through ResNet-18-BN: 1.8e-3 of the norm
    assert step_price.agrees(rounded, eager)
    assert not step_price.agrees((grads * 1.1, eager[1]), eager)
    assert not step_price.agrees((grads.flip(1), eager[1]), eager)  # every row's gradient elsewhere
    assert not step_price.agrees((torch.full_like(grads, float("nan")), eager[1]), eager)
