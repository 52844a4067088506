"""C-FLAG's paper tables from continual runs: Acc / Forgetting computed from each run's recorded
accuracy matrix (hand-made here), mean ± std over seeds, beside the paper's numbers; and claims."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import pytest

from fedbench.report.claims import check_claims
from fedbench.report.paper import compare, format_comparison
from fedbench.report.reference import reference_frame, reference_text
from fedbench.store import ResultsStore, RunRecord, scale_from_name

# (label, seed, accuracy matrix rows after tasks 1..3) on "Split-CIFAR10 IID"
RUNS = [
    (
        "Fine-FL",
        1,
        [[0.9, 0.0, 0.0], [0.5, 0.9, 0.0], [0.3, 0.4, 0.9]],
    ),  # Acc 0.5333, Fgt ((0.9-0.3)+(0.9-0.4))/2 = 0.55
    ("Fine-FL", 10, [[0.8, 0.0, 0.0], [0.6, 0.8, 0.0], [0.5, 0.5, 0.8]]),  # Acc 0.6, Fgt 0.3
    ("C-FLAG", 1, [[0.9, 0.0, 0.0], [0.9, 0.9, 0.0], [0.85, 0.9, 0.9]]),  # Acc 0.8833, Fgt 0.025
    ("EWC-FL", 1, [[0.9, 0.0, 0.0], [0.7, 0.9, 0.0]]),  # stopped after task 2: left out
]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> ResultsStore:
    store = ResultsStore(tmp_path_factory.mktemp("cflag"))
    for label, seed, rows in RUNS:
        spec = {"algorithm": {"label": label}, "paper": {"name": "cflag", "table": "7", "column": "Split-CIFAR10 IID"}}
        spec_hash = hashlib.sha256(label.encode()).hexdigest()
        rec = RunRecord(
            f"{spec_hash[:16]}-s{seed}",
            "cflag_ti_cifar10_iid.tiny",
            "h" * 64,
            spec_hash,
            label,
            seed,
            json.dumps(spec),
            scale="tiny",
        )
        store.start_run(rec)
        for task, row in enumerate(rows):
            store.record_round(rec.run_id, task + 1, {"test_acc": row[task]}, {"task": task, "task_acc": row})
        store.finish_run(rec.run_id, "finished" if len(rows) == 3 else "running")
    return store


def test_reference_keeps_the_printed_std() -> None:
    assert reference_frame("cflag", "7").loc["C-FLAG", "IID Split-CIFAR10 Acc"] == 89.28
    assert reference_text("cflag", "7").loc["C-FLAG", "IID Split-CIFAR10 Acc"] == "89.28±4.98"
    assert reference_frame("cflag", "3").loc["C-FLAG", "Split-CIFAR10 Fgt"] == 2.26


def test_acc_and_forgetting_from_the_matrices(store: ResultsStore) -> None:
    frame = compare(store, "cflag", "3", "tiny").set_index(["row", "column"])
    assert frame.loc[("Fine-FL", "Split-CIFAR10 Acc"), "value_mean"] == pytest.approx((0.5333333 + 0.6) / 2)
    assert frame.loc[("Fine-FL", "Split-CIFAR10 Fgt"), "value_mean"] == pytest.approx(0.425)
    assert frame.loc[("Fine-FL", "Split-CIFAR10 Fgt"), "value_std"] == pytest.approx(math.sqrt(2 * 0.125**2))
    assert frame.loc[("C-FLAG", "Split-CIFAR10 Fgt"), "value_mean"] == pytest.approx(0.025)
    assert math.isnan(frame.loc[("EWC-FL", "Split-CIFAR10 Acc"), "value_mean"])  # incomplete matrix
    md = format_comparison(compare(store, "cflag", "7", "tiny"), "markdown")
    cells = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]] for line in md.splitlines()[2:]}
    assert cells["C-FLAG"][6] == "89.28±4.98 / 88.33 ± 0.00" and cells["C-FLAG"][7] == "7.23±5.14 / 2.50 ± 0.00"


def test_claims(store: ResultsStore) -> None:
    results = {r.id: r for r in check_claims(store, "cflag", "tiny")}
    assert results["C3"].ours.short() == "holds (1/1 hold; 1 of 6 checked)"  # Fine-FL 42.5 > C-FLAG 2.5
    assert results["C3"].paper.verdict == "holds"
    assert results["C11"].paper.verdict == "not reported"


def test_write_files(store: ResultsStore, tmp_path: Path) -> None:
    from fedbench.report.paper import write_comparison

    paths = write_comparison(store, "cflag", "2", tmp_path)  # Table 2 reads Table 7's runs: the non-IID cells
    assert [p.name for p in paths][0] == "cflag_table2_tiny.md"
    assert "Fine-FL" in paths[0].read_text() and "forgetting (%)" in paths[0].read_text()


def _record_final(store: ResultsStore, scenario: str, label: str, seed: int, acc: float) -> None:
    """A finished 2-task continual run whose final row scores ``acc`` on both tasks (Acc = acc)."""
    spec_hash = hashlib.sha256(f"{scenario}/{label}".encode()).hexdigest()
    rec = RunRecord(
        f"{spec_hash[:16]}-s{seed}",
        scenario,
        "h" * 64,
        spec_hash,
        label,
        seed,
        json.dumps({"algorithm": {"label": label}}),
        scale=scale_from_name(scenario),
    )
    store.start_run(rec)
    for task, row in enumerate([[acc, 0.0], [acc, acc]]):
        store.record_round(rec.run_id, task + 1, {"test_acc": row[task]}, {"task": task, "task_acc": row})
    store.finish_run(rec.run_id, "finished")


# C-FLAG's Acc by memory per task (Fig. 5 right): Split-CIFAR10 falls (150–300 tie, as at the tiny scale where a
# client's whole task fits in memory), Split-CIFAR100 rises.
MEMORY_ACC = {"cifar10": {50: 0.9, 150: 0.8, 200: 0.8, 300: 0.8}, "cifar100": {50: 0.6, 150: 0.62, 200: 0.65, 300: 0.7}}


def _c12(store: ResultsStore):
    return {r.id: r for r in check_claims(store, "cflag", "tiny")}["C12"]


def test_claim_c12_memory_size(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path / "none")
    assert _c12(store).ours.short() == "not run (0 of 8 checked)"
    assert _c12(store).paper.verdict == "not reported"

    store = ResultsStore(tmp_path / "c10")
    for m, acc in MEMORY_ACC["cifar10"].items():
        _record_final(store, f"cflag_ti_cifar10_iid--per_task-{m}.tiny", "C-FLAG", 1, acc)
    assert _c12(store).ours.short() == "holds (4/4 hold; 4 of 8 checked)"  # Split-CIFAR100 not run yet

    for m, acc in MEMORY_ACC["cifar100"].items():
        _record_final(store, f"cflag_ti_cifar100_iid--per_task-{m}.tiny", "C-FLAG", 1, acc)
    c12 = _c12(store).ours
    assert c12.short() == "holds (8/8 hold)"
    assert "Split-CIFAR10 m 150→200: m=200 80.00 ≤ m=150 80.00" in c12.evidence  # a tie passes
    assert "Split-CIFAR10 m 50→300: m=50 90.00 > m=300 80.00" in c12.evidence
    assert "Split-CIFAR100 m 50→300: m=300 70.00 > m=50 60.00" in c12.evidence

    _record_final(store, "cflag_ti_cifar100_iid--per_task-200.tiny", "C-FLAG", 10, 0.55)  # mean 60.00 < 62.00 at 150
    c12 = _c12(store).ours
    assert c12.short() == "fails (7/8 hold)"
    assert "Split-CIFAR100 m 150→200: m=150 62.00 > m=200 60.00" in c12.evidence
