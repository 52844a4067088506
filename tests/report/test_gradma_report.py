"""GradMA's paper tables and claims on a hand-built tiny store: Table 1 (top accuracy), Table 2
(rounds to ac on the seed-mean curve, '(2×)' rows, '-' for never) and the claims' verdicts."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import pytest

from fedbench.report.claims import check_claims
from fedbench.report.paper import compare, format_comparison, write_comparison
from fedbench.report.reference import column_specs, reference_frame
from fedbench.store import ResultsStore, RunRecord

W001 = "MNIST S=10 ω=0.01"
C10 = "CIFAR-10 S=10 ω=0.1"
# (column, label, seed, status, test_acc per round 1..4)
RUNS = [
    (W001, "FedAvg", 0, "finished", (0.10, 0.30, 0.40, 0.44)),  # mean curve never reaches 0.45
    (W001, "FedAvg", 1, "finished", (0.20, 0.30, 0.40, 0.45)),
    (W001, "GradMA-S", 0, "finished", (0.40, 0.50, 0.70, 0.80)),  # seed 0 reaches 45% at round 2,
    (W001, "GradMA-S", 1, "finished", (0.20, 0.30, 0.50, 0.70)),  # seed 1 at round 3; mean at round 3
    (W001, "FedAvgM", 0, "finished", (0.30, 0.46, 0.50, 0.52)),
    (W001, "MIFA", 0, "finished", (0.30, 0.40, 0.60, 0.60)),
    (W001, "MIFAM", 0, "finished", (0.30, 0.40, 0.60, 0.65)),
    (W001, "Scaffold", 0, "diverged", (0.50, math.nan, math.nan, math.nan)),  # left out: '—'
    (W001, "MimeLite", 0, "finished", (0.50, 0.55, 0.60, 0.60)),
]


def build_store(out: Path) -> ResultsStore:
    store = ResultsStore(out)
    for column, label, seed, status, accs in RUNS:
        spec = {
            "algorithm": {"label": label},
            "clients": {"num": 100, "per_round": 10},
            "targets": [0.45],
            "paper": {"name": "gradma", "table": "1", "column": column},
        }
        spec_hash = hashlib.sha256(f"{column}|{label}".encode()).hexdigest()  # seeds share their spec
        rec = RunRecord(
            f"{spec_hash[:16]}-s{seed}",
            "gradma_mnist_s10_w0.01.tiny",
            "h" * 64,
            spec_hash,
            label,
            seed,
            json.dumps(spec),
            scale="tiny",
        )
        store.start_run(rec)
        for t, acc in enumerate(accs, start=1):
            if math.isnan(acc):
                break
            store.record_round(
                rec.run_id, t, {"test_acc": acc, "bits_up": 100.0, "bits_down": 100.0, "train_loss": 1.0}
            )
        store.finish_run(rec.run_id, status)
    return store


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> ResultsStore:
    return build_store(tmp_path_factory.mktemp("gradma"))


def test_reference_numbers() -> None:
    t1, t2 = reference_frame("gradma", "1"), reference_frame("gradma", "2")
    assert t1.shape == (16, 14) and t2.shape == (16, 14)
    assert (
        t1.loc["GradMA", W001] == 77.97
        and t1.loc["FedAvg", W001] == 46.19
        and t1.loc["Scaffold", "CIFAR-100 ω=0.1 S=5"] == 32.22
    )
    assert (
        t2.loc["GradMA-S", "CIFAR-10 S=10 ω=0.1 ac=45%"] == 101
        and t2.loc["FedAvg", "CIFAR-100 ω=0.1 S=50 ac=60%"] == 1071
    )
    assert math.isinf(t2.loc["Scaffold", "MNIST S=10 ω=0.1 ac=95%"]) and t2.loc["GradMA"].isna().all()
    specs = {c.name: c for c in column_specs("gradma", "2")}
    assert (specs["MNIST S=10 ω=0.01 ac=45%"].setting, specs["MNIST S=10 ω=0.01 ac=45%"].target) == (W001, 0.45)


def test_table1_top_accuracy(store: ResultsStore) -> None:
    frame = compare(store, "gradma", "1", "tiny").set_index(["row", "column"])
    assert frame.loc[("GradMA-S", W001), "value_mean"] == pytest.approx(0.75)  # mean of the seeds' maxima
    md = format_comparison(compare(store, "gradma", "1", "tiny"), "markdown")
    cells = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]] for line in md.splitlines()[2:]}
    assert (
        cells["FedAvg"][2] == "46.19 / 44.50 ± 0.71" and cells["Scaffold"][2] == "50.86 / —"
    )  # the only seed diverged


def test_table2_rounds_on_the_seed_mean_curve(store: ResultsStore, tmp_path: Path) -> None:
    frame = compare(store, "gradma", "2", "tiny").set_index(["row", "column"])
    col = "MNIST S=10 ω=0.01 ac=45%"
    assert frame.loc[("GradMA-S", col), "value_mean"] == 3.0  # mean curve 0.30, 0.40, 0.60 → round 3
    assert math.isinf(frame.loc[("FedAvg", col), "value_mean"])  # mean 0.445 at round 4: never
    assert frame.loc[("FedAvgM", col), "value_mean"] == 2.0
    assert math.isnan(frame.loc[("Scaffold", col), "value_mean"])  # no usable seed
    paths = write_comparison(store, "gradma", "2", tmp_path)
    md = paths[0].read_text()
    lines = {
        line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
        for line in md.splitlines()
        if line.startswith("| ")
    }
    assert lines["GradMA-S"][2] == "38 / 3" and lines["FedAvg"][2] == "493 / -"
    assert lines["MimeLite (2×)"][2] == "277 / 1" and lines["Scaffold (2×)"][2] == "60 / —"
    assert lines["GradMA"][2] == "— / —"  # the paper's GradMA row is lost; nothing invented
    assert "CIFAR-100 columns are ω = 0.1" in md


def test_claims_on_the_store(store: ResultsStore) -> None:
    results = {r.id: r for r in check_claims(store, "gradma", "tiny")}
    assert results["1b"].ours.short() == "holds (5/5 hold)"  # 75 > 60, 65 > 52, 52 > 44.5
    assert results["4"].ours.short() == "fails (1/2 hold; 2 of 4 checked)"  # 3 < never (FedAvg); 3 ≥ 2 (FedAvgM)
    assert results["1a"].ours.short() == "holds (1/1 hold; 1 of 18 checked)"  # only GradMA-S 75 > FedAvg 44.5 has runs
    assert results["6"].ours.verdict == "not run" and results["6"].paper.verdict == "not reported"
    # 3b prints the two numbers it compares and the margin apart (the paper's GradMA is 98.39, not 98.39 + 0.5).
    assert (
        results["3b"].paper.checked[0].text
        == "MNIST S=10 ω=1.0: GradMA 98.39 − GradMA-S 98.38 = 0.01 ≥ -0.50 (stated 0.5)"
    )
    assert results["3b"].ours.verdict == "not run"  # no GradMA run in this store


def test_figs_9_to_20_are_one_full_figure_per_table_1_column(tmp_path: Path) -> None:
    """The ``curves`` target: every method's curve (no --algorithm selection), one figure per column."""
    from fedbench.papers.gradma.room import COLUMNS, ROOM
    from fedbench.papers.targets import Context, Plot

    target = ROOM.target("curves")
    assert target.needs == ("runs",) and all(isinstance(s, Plot) for s in target.steps)
    assert [Path(s.file).stem for s in target.steps] == list(COLUMNS)
    assert all(s.algorithms == () and s.name == "full" for s in target.steps)
    ctx = Context("gradma", "tiny", tmp_path, tmp_path, tmp_path, None)  # type: ignore[arg-type]
    files = [p.name for s in target.steps for p in s.report_files(ctx)]
    assert files[0] == "gradma_mnist_s10_w1.0.tiny_full_acc_vs_rounds.png" and len(set(files)) == len(COLUMNS)
