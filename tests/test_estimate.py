"""`--estimate`: cost classes, the probe on a fake clock (never real timings), done runs, missing
datasets, the probe's limits, and the commands' flags."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch
import yaml
from typer.testing import CliRunner

from fedbench import estimate
from fedbench.cli import app
from fedbench.engine import probe
from fedbench.engine.probe import RoundCost, evaluations
from fedbench.engine.setup import DataCache
from fedbench.options import RunOptions
from fedbench.scenario import parse_scenario, run_record
from fedbench.store import ResultsStore
from tests.data.fakes import fake_cifar10, fake_mnist
from tests.factories import tiny_scenario, tiny_spec

runner = CliRunner()
TWO = [{"name": "fedavg"}, {"name": "scaffold"}]


@pytest.fixture
def fake_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every read of the probe's clock is one second after the last: each timed span is 1 s."""
    ticks = itertools.count()
    monkeypatch.setattr(probe, "CLOCK", lambda: float(next(ticks)))


def estimator(tmp_path: Path, **kw) -> estimate.Estimator:
    return estimate.Estimator(RunOptions(device="cpu", data_dir=tmp_path / "data"), **kw)


def test_probe_times_one_span_per_round_and_per_evaluation(tmp_path: Path, fake_clock: None) -> None:
    cost = probe.probe_run(tiny_spec(), 0, DataCache(tmp_path, False, torch.device("cpu")), rounds=2)
    assert (cost.round_s, cost.eval_s, cost.rounds) == (1.0, 1.0, 2)
    assert cost.executor.startswith("sequential")


def test_the_probe_prices_the_step_as_the_run_would(tmp_path: Path, monkeypatch) -> None:
    """The probe's rounds never end (its spec has 10⁹ rounds), yet ``--compile auto`` decides with the real run's
    local steps, at prices it measures and keeps nowhere (torch.compile stubbed: the choice, not inductor's work)."""
    from fedbench.engine import compiled, step_price

    cache = DataCache(tmp_path, False, torch.device("cpu"))
    spec = tiny_spec(rounds=5)
    steps = 5 * spec.local.iterations
    assert probe.probe_run(spec, 0, cache, RunOptions(executor="batched"), rounds=1).executor.endswith(
        f"step eager (auto: {steps} local steps < 400, too few to measure its price)"
    )
    monkeypatch.setattr(compiled, "MIN_PRICED_STEPS", steps)
    monkeypatch.setattr(compiled.torch, "compile", lambda step, **_: step)
    seen = []

    def fake(layers, inputs, run_steps, device, out, graphs):
        seen.append((run_steps, out))
        return {"eager": step_price.Price(1.0), "compiled": step_price.Price(0.1, 1.0)}

    monkeypatch.setattr(step_price, "measure", fake)
    assert probe.probe_run(spec, 0, cache, RunOptions(executor="batched"), rounds=1).executor.endswith(
        f"step compiled (auto, measured: compiled 1000.00 → 100.00 ms a step saves {steps * 0.9:,.1f} s over "
        f"{steps} steps against 1.0 s to compile)"
    )
    assert seen == [(steps, None)]  # the run's steps; no results folder to keep the prices in


def test_evaluations_follow_the_schedule_and_the_last_round() -> None:
    assert evaluations(tiny_spec(rounds=10)) == 10
    assert evaluations(tiny_spec({"eval.every": 4}, rounds=10)) == 3  # rounds 4, 8 and 10


@pytest.mark.parametrize("rounds, seeds", [(4, [0]), (8, [0]), (4, [0, 1, 2])])
def test_estimate_is_linear_in_rounds_and_runs(tmp_path: Path, fake_clock: None, rounds: int, seeds: list) -> None:
    sc = parse_scenario(tiny_scenario(rounds=rounds, seeds=seeds, algorithms=TWO))
    est = estimator(tmp_path).estimate(estimate.scenario_runs(sc))
    runs = 2 * len(seeds)
    assert (est.runs, est.done, len(est.todo)) == (runs, 0, runs)
    assert est.seconds == runs * (rounds * 1.0 + rounds * 1.0)  # a round and an evaluation per round, 1 s each
    line = estimate.lines(est, estimator(tmp_path))[0]
    assert line.startswith(f"estimate on cpu: {runs} run(s) to do (0 done) × {rounds} rounds ≈ ")


def test_a_class_is_probed_once_per_command(tmp_path: Path, fake_clock: None, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    monkeypatch.setattr(probe, "probe_run", lambda spec, *a: calls.append(spec.label) or RoundCost(1.0, 0.0, 2, "x"))
    est = estimator(tmp_path)
    sc = parse_scenario(tiny_scenario(seeds=[0, 1, 2], algorithms=TWO))
    est.estimate(estimate.scenario_runs(sc))
    est.estimate(estimate.scenario_runs(sc))
    assert calls == ["FedAvg", "SCAFFOLD"]


def test_done_runs_count_zero(tmp_path: Path, fake_clock: None) -> None:
    sc = parse_scenario(tiny_scenario(rounds=4, seeds=[0, 1], algorithms=TWO))
    runs = estimate.scenario_runs(sc)
    store = ResultsStore(tmp_path / "results")
    for run in runs[:3]:
        store.start_run(run_record(run.spec, run.seed, run.scenario_hash))
    store.finish_run(runs[0].run_id, "finished")
    store.finish_run(runs[1].run_id, "diverged")  # runs[2] is unfinished: still to do
    est = estimator(tmp_path).estimate(runs, tmp_path / "results")
    assert (est.runs, est.done, [r.run_id for r in est.todo]) == (4, 2, [r.run_id for r in runs[2:]])
    assert est.seconds == 2 * 8.0
    assert estimate.lines(est, estimator(tmp_path))[0].startswith("estimate on cpu: 2 run(s) to do (2 done)")


def test_nothing_to_run_is_one_line(tmp_path: Path, fake_clock: None) -> None:
    sc = parse_scenario(tiny_scenario())
    runs = estimate.scenario_runs(sc)
    store = ResultsStore(tmp_path)
    store.start_run(run_record(runs[0].spec, 0, runs[0].scenario_hash))
    store.finish_run(runs[0].run_id, "finished")
    est = estimator(tmp_path)
    assert estimate.lines(est.estimate(runs, tmp_path), est) == ["estimate on cpu: nothing to run (1 of 1 run(s) done)"]


def test_a_dataset_not_on_disk_gives_one_line(tmp_path: Path) -> None:
    sc = parse_scenario(tiny_scenario(dataset={"name": "mnist"}, model={"name": "mlp", "hidden": [8]}))
    est = estimator(tmp_path)
    lines = estimate.lines(est.estimate(estimate.scenario_runs(sc)), est)
    assert lines == [
        f"no estimate: dataset mnist: not in {tmp_path / 'data'}/MNIST/raw/ (fetch it with --download of "
        f"run, sweep, tune or reproduce into {tmp_path / 'data'}/, or --data-dir to the folder that holds "
        "MNIST/raw/)"
    ]
    assert not (tmp_path / "data").exists()  # nothing downloaded, nothing created


MNIST = {
    "dataset": {"name": "mnist"},
    "model": {"name": "mlp", "hidden": [8]},
    "partition": {"kind": "iid"},
    "clients": {"num": 4, "per_round": 2},
}


def test_the_estimate_prices_the_data_on_disk_and_names_the_rest(tmp_path: Path, fake_clock: None) -> None:
    """MNIST files in the real format are probed (the real loader, on the fake clock); Tiny-ImageNet's
    runs are left out of the total, named with where to get the data."""
    fake_mnist(tmp_path / "data")
    mnist = parse_scenario(tiny_scenario(rounds=4, seeds=[0, 1], **MNIST))
    tiny = parse_scenario(tiny_scenario(name="ti", **{**MNIST, "dataset": {"name": "tiny_imagenet"}}))
    est = estimator(tmp_path)
    result = est.estimate([*estimate.scenario_runs(mnist), *estimate.scenario_runs(tiny)])
    assert [m.name for m in result.missing] == ["tiny_imagenet"] and len(result.lacking) == 1
    assert result.seconds == 2 * (4 * 1.0 + 4 * 1.0)  # the two MNIST runs: 4 rounds and 4 evaluations of 1 s
    lines = estimate.lines(result, est)
    assert lines[0].startswith("estimate on cpu: 3 run(s) to do (0 done) × 11 rounds in all ≥ 16 s")
    assert lines[1].startswith("  probe mnist mlp S=2 fedavg: 1 s/round + 1 s/evaluation (2 run(s) to do, 16 s)")
    assert lines[-2].startswith(
        f"  not priced (1 run(s)): dataset tiny_imagenet: not in {tmp_path / 'data'}/tiny-"
        "imagenet-200/ (no downloader: fetch http://cs231n.stanford.edu/tiny-imagenet-200.zip"
    )
    assert "--download" not in lines[-2]
    assert lines[-1] == "  per dataset: mnist 16 s (2 run(s)); tiny_imagenet not priced (1 run(s))"


def test_stand_in_data_prices_a_dataset_not_on_disk(tmp_path: Path, fake_clock: None) -> None:
    """``--stand-in-data``: MNIST is not on disk; the probe times the run on generated data of its shape and
    size, the total is whole (≈), the probe's line says so, and nothing is written or downloaded."""
    sc = parse_scenario(tiny_scenario(rounds=4, **MNIST))
    est = estimator(tmp_path, stand_in=True)
    result = est.estimate(estimate.scenario_runs(sc))
    assert not result.missing and result.seconds == 4 * 1.0 + 4 * 1.0
    lines = estimate.lines(result, est)
    assert lines[0].startswith("estimate on cpu: 1 run(s) to do (0 done) × 4 rounds ≈ 8 s")
    assert estimate.probe_note(est)[0].endswith(
        "not on disk, probed on generated data of the real shape and size: mnist"
    )
    assert not (tmp_path / "data").exists()
    tiny = parse_scenario(tiny_scenario(name="d", rounds=2))  # digits ships with scikit-learn: no stand-in
    assert not estimator(tmp_path, stand_in=True).estimate(estimate.scenario_runs(tiny)).missing


RATES = {
    "source": "an H200 probe",
    "rates": [
        {"dataset": "digits", "model": "mlp", "per_round": 3, "round_s": 0.3, "eval_s": 0.1},
        {"dataset": "digits", "model": "mlp", "per_round": 3, "round_s": 0.6, "algorithm": "scaffold"},
    ],
}


def test_rates_price_each_class_by_dataset_model_and_s_without_probing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(probe, "probe_run", lambda *a: pytest.fail("probed although rates were given"))
    path = tmp_path / "rates.yaml"
    path.write_text(yaml.safe_dump(RATES))
    raw = tiny_scenario(rounds=10, algorithms=TWO, clients={"num": 12, "per_round": 6})
    other = parse_scenario({**raw, "name": "cnn", "model": {"name": "cnn_fedqvr"}})
    est = estimate.Estimator(RunOptions(device="cpu", data_dir=tmp_path / "none"), rates=estimate.load_rates(path))
    result = est.estimate([*estimate.scenario_runs(parse_scenario(raw)), *estimate.scenario_runs(other)])
    by = {(c.workload.count("cnn_fedqvr"), c.algorithm): c for c in result.classes}
    assert by[0, "fedavg"].cost.round_s == pytest.approx(0.6)  # 0.3 s at S = 3, × 6 / 3
    assert by[0, "scaffold"].cost.round_s == pytest.approx(1.2)  # its own rate, × 6 / 3
    assert by[1, "fedavg"].cost is None and result.seconds == pytest.approx(10 * (0.6 + 0.1) + 10 * 1.2)
    lines = estimate.lines(result, est)
    assert lines[0].startswith("estimate on rates of an H200 probe: 4 run(s) to do (0 done) × 10 rounds ≥ 19 s")
    assert lines[1:] == [
        "  rate digits mlp S=6: 0.6 s/round + 0.1 s/evaluation (1 algorithm(s), 1 run(s) to do, 7 s)",
        "  rate digits mlp S=6: 1.2 s/round (evaluation not in the rate) (1 algorithm(s), 1 run(s) to do, 12 s)",
        "  not estimated (2 run(s); no rate for them): digits cnn_fedqvr S=6 fedavg, digits cnn_fedqvr S=6 scaffold",
    ]


@pytest.mark.parametrize(
    "text, needle",
    [
        ("rates: []", "source: Field required"),
        ("source: x\nrates: [{dataset: mnist, model: tinynn, per_round: 10, round_s: '0.065'}]", "rates.0.round_s"),
        ("source: x\nrates: [{dataset: mnist, model: tinynn, per_round: 10, round_s: 0.1, speed: 2}]", "rates.0.speed"),
        ("[", "not YAML"),
    ],
)
def test_a_bad_rates_file_is_one_line_naming_the_key(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "rates.yaml"
    path.write_text(text)
    with pytest.raises(ValueError) as err:
        estimate.load_rates(path)
    assert str(err.value).startswith(f"--rates {path}: ") and needle in str(err.value) and "\n" not in str(err.value)


def test_classes_beyond_the_limit_are_scaled_from_a_probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    costs = {"fedavg": 1.0, "scaffold": 3.0}
    monkeypatch.setattr(probe, "probe_run", lambda spec, *a: RoundCost(costs[spec.algorithm["name"]], 0.5, 2, "x"))
    raw = tiny_scenario(rounds=10, algorithms=TWO, clients={"num": 8, "per_round": 2})
    narrow = parse_scenario(raw)
    wide = parse_scenario({**raw, "name": "wide", "model": {"name": "mlp", "hidden": [32]}})
    wide4 = parse_scenario(
        {**raw, "name": "wide4", "model": {"name": "mlp", "hidden": [32]}, "clients": {"num": 8, "per_round": 4}}
    )
    est = estimator(tmp_path, max_probes=3)
    est.estimate(estimate.scenario_runs(narrow))  # both algorithms probed on the narrow model
    result = est.estimate([*estimate.scenario_runs(wide), *estimate.scenario_runs(wide4)])
    by = {(c.algorithm, c.per_round): c for c in result.classes}
    assert by["fedavg", 2].source == "probed" and by["fedavg", 2].cost.round_s == 1.0  # the third and last probe
    # another algorithm: × its ratio on the narrow model (3.0 / 1.0); another S: × S / S'
    assert by["scaffold", 2].cost.round_s == pytest.approx(3.0)
    assert by["scaffold", 2].source == "scaled from digits mlp S=2 fedavg"
    assert by["scaffold", 4].cost.round_s == pytest.approx(6.0) and by["fedavg", 4].cost.round_s == pytest.approx(2.0)
    assert by["scaffold", 4].cost.eval_s == 0.5  # evaluation does not depend on S or the algorithm
    assert result.seconds == pytest.approx(10 * (1.0 + 3.0 + 2.0 + 6.0) + 4 * 10 * 0.5)
    assert "3 more class(es) (3 run(s)) scaled" in "\n".join(estimate.lines(result, est))


def test_a_workload_never_probed_makes_the_total_a_lower_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probe, "probe_run", lambda spec, *a: RoundCost(1.0, 0.0, 2, "x"))
    one = parse_scenario(tiny_scenario(rounds=10))
    other = parse_scenario(tiny_scenario(rounds=10, name="wide", model={"name": "mlp", "hidden": [32]}))
    est = estimator(tmp_path, max_probes=1)
    result = est.estimate([*estimate.scenario_runs(one), *estimate.scenario_runs(other)])
    lines = estimate.lines(result, est)
    assert result.seconds == 10.0 and "≥ " in lines[0]
    assert lines[-1].startswith("  not estimated (1 run(s); probe budget spent or probe failed): digits mlp S=3 fedavg")


def test_validate_estimate_writes_nothing(tmp_path: Path, fake_clock: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(tiny_scenario(rounds=6, algorithms=TWO)))
    result = runner.invoke(app, ["validate", str(path), "--estimate", "--device", "cpu"], terminal_width=250)
    assert result.exit_code == 0, result.output
    assert "estimate on cpu: 2 run(s) to do (0 done) × 6 rounds ≈ 24 s" in result.output
    assert "probe: 2 cost class(es) on cpu, 2 timed round(s) each after a warm-up round" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.yaml"]  # no results/, no data/
    assert "estimate on" not in runner.invoke(app, ["validate", str(path)], terminal_width=250).output


@pytest.mark.parametrize(
    "args",
    [
        ["validate", "{path}", "--estimate", "--device", "tpu"],
        ["validate", "{path}", "--estimate", "--probe-budget", "0"],
        ["validate", "{path}", "--estimate", "--probe-budget", "soon"],
        ["reproduce", "gradma", "table1", "--scale", "tiny", "--estimate"],  # --estimate goes with --dry-run
        ["validate", "{path}", "--stand-in-data"],  # --stand-in-data goes with --estimate
        ["reproduce", "gradma", "table1", "--scale", "tiny", "--stand-in-data"],
    ],
)
def test_bad_estimate_flags_exit_2(tmp_path: Path, args: list[str]) -> None:
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(tiny_scenario()))
    result = runner.invoke(app, [a.format(path=path) for a in args])
    assert result.exit_code == 2, result.output
    assert not (tmp_path / "results").exists()


def test_reproduce_dry_run_estimate(tmp_path: Path, fake_clock: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probe, "probe_run", lambda spec, *a: RoundCost(0.5, 0.0, 2, "sequential"))
    out = tmp_path / "store"
    result = runner.invoke(
        app,
        [
            "reproduce",
            "fedqvr",
            "fig5_mnist_tau0.08",
            "--scale",
            "tiny",
            "--dry-run",
            "--estimate",
            "--jobs",
            "2",
            "--out",
            str(out),
        ],
        terminal_width=250,
    )
    assert result.exit_code == 0, result.output
    head = next(line for line in result.output.splitlines() if "estimate on cpu" in line)
    assert head.startswith("fedqvr fig5_mnist_tau0.08: estimate on cpu: ") and "wall with 2 parallel jobs" in head
    assert "probe: " in result.output and not out.exists()


@pytest.mark.slow
def test_reproduce_gradma_paper_prices_every_target_whose_data_is_in_the_data_dir(
    tmp_path: Path, fake_clock: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 24's done-when: MNIST and CIFAR-10 files (real formats) in D, CIFAR-100 and Tiny-ImageNet
    absent: every target is priced from D (probes stubbed: paper-scale rounds are not trained here);
    the runs of the two absent datasets are named, with how to get them."""
    data = tmp_path / "D"
    fake_mnist(data)
    fake_cifar10(data)
    seen = []
    monkeypatch.setattr(
        probe,
        "probe_run",
        lambda spec, seed, cache, options, rounds: (
            seen.append((spec.dataset["name"], cache.data_dir, options.executor, options.chunk))
            or RoundCost(0.1, 0.0, 2, "x")
        ),
    )
    result = runner.invoke(
        app,
        [
            "reproduce",
            "gradma",
            "--scale",
            "paper",
            "--dry-run",
            "--estimate",
            "--data-dir",
            str(data),
            "--out",
            str(tmp_path / "out"),
            "--device",
            "cpu",
            "--chunk",
            "5",
        ],
        terminal_width=250,
    )
    assert result.exit_code == 0, result.output
    heads = {line.split(":")[0]: line for line in result.output.splitlines() if "estimate on cpu" in line}
    assert set(heads) == {"gradma runs", "gradma fig5", "gradma memory"}  # the targets with runs of their own
    assert " ≥ " in heads["gradma runs"] and " ≈ " in heads["gradma fig5"] and " ≈ " in heads["gradma memory"]
    assert "no estimate" not in result.output
    not_priced = [line for line in result.output.splitlines() if line.startswith("  not priced")]
    assert [line.split("dataset ")[1].split(":")[0] for line in not_priced] == ["cifar100", "tiny_imagenet"]
    assert f"fetch it with --download of run, sweep, tune or reproduce into {data}/" in not_priced[0]
    assert "tiny-imagenet-200.zip" in not_priced[1]
    assert {d for d, *_ in seen} == {"mnist", "cifar10"} and {(c, e, k) for _, c, e, k in seen} == {(data, "auto", 5)}
    assert not (tmp_path / "out").exists()


def test_a_tuned_scenario_counts_its_trials_then_its_final_runs(
    tmp_path: Path, fake_clock: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(probe, "probe_run", lambda spec, *a: RoundCost(1.0, 0.0, 2, "x"))
    tune = {"space": {"local.lr": [0.01, 0.1]}, "trials": {"rounds": 2}}
    sc = parse_scenario(tiny_scenario(rounds=5, seeds=[0, 1], tune=tune))
    runs = estimate.scenario_runs(sc)
    assert [r.spec.rounds for r in runs] == [2, 2, 2, 2, 5, 5]  # 2 trials × 2 seeds, then the 2 final runs
    est = estimator(tmp_path)
    result = est.estimate(runs)
    # the lr changes no round's cost; the trials' validation split does: two classes
    assert result.seconds == 4 * 2 + 2 * 5 and [len(c.runs) for c in result.classes] == [4, 2]
    assert estimate.lines(result, est)[0].startswith("estimate on cpu: 6 run(s) to do (0 done) × 18 rounds in all ≈ ")


def test_a_population_probe_prices_each_run_by_its_share_of_a_round(tmp_path: Path, fake_clock: None) -> None:
    """With --population 2, a class of three seeds is probed as a population of two: each timed round (1 s on the
    fake clock) is shared by two runs; alone (the default on a CPU) it costs a run 1 s."""
    sc = parse_scenario(tiny_scenario(rounds=4, seeds=[0, 1, 2]))
    runs = estimate.scenario_runs(sc)
    together = estimate.Estimator(RunOptions(device="cpu", data_dir=tmp_path / "data", population="2"))
    est = together.estimate(runs)
    [c] = est.classes
    assert c.cost is not None and c.cost.round_s == 0.5 and c.cost.executor.startswith("population of 2 runs")
    assert est.seconds == 3 * (4 * 0.5 + 4 * 1.0)
    alone = estimator(tmp_path).estimate(runs)
    assert alone.seconds == 3 * (4 * 1.0 + 4 * 1.0)


def test_a_run_that_trains_alone_is_probed_alone(tmp_path: Path, fake_clock: None) -> None:
    """TARGET's local steps draw from their run's own streams (continual, ``population = False``): each run alone."""
    from tests.continual.common import RAW

    sc = parse_scenario({**RAW, "seeds": [0, 1], "algorithms": [{"name": "target_fl"}]})
    est = estimate.Estimator(RunOptions(device="cpu", data_dir=tmp_path / "data", population="4"))
    [c] = est.estimate(estimate.scenario_runs(sc)).classes
    assert c.cost is not None and c.cost.round_s == 1.0 and not c.cost.executor.startswith("population")
