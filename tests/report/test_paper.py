"""Reference numbers and paper-vs-reproduced tables against hand-computed values (no training)."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import sqlite3
from pathlib import Path

import pandas as pd
import pytest

from fedbench.report.paper import compare, format_comparison, rich_comparison, write_comparison
from fedbench.report.reference import load_reference, reference_frame
from fedbench.store import METRIC_COLUMNS, ResultsStore, RunRecord, scale_from_name

NAN = math.nan
T3, T1 = "fedmim_table3", "fedmim_table1_cifar10"
BASE, BEST = "α=() β=()", "α=(0.6,0.3) β=(0.9,0.1)"

# (scenario, paper table, column, label, seed, status, final test_acc, consistency per round 1..4, client_acc_std at 2, 4)
# Every run evaluates at rounds 2 and 4 (round 2's accuracy is final + 0.08, so "top" ≠ "final"); round 5 has no
# test_acc (nor consistency), so the last *evaluated* round is 4. Diverged/failed runs stop after round 3
# (accuracy only at 2).
RUNS = [
    (f"{T3}.tiny", "III", "CIFAR-10", BASE, 0, "finished", 0.70, (1, 1, 1, 1), (0.1, 0.1)),
    (f"{T3}.tiny", "III", "CIFAR-10", BASE, 1, "finished", 0.72, (1, 1, 1, 1), (0.1, 0.1)),
    (f"{T3}.tiny", "III", "CIFAR-10", "α=(0.9) β=()", 0, "failed", 0.65, (1, 1, 1, 1), (0.1, 0.1)),
    (f"{T3}.tiny", "III", "CIFAR-10", "α=(0.5) β=()", 0, "finished", 0.70, (1, 1, 1, 1), (0.1, 0.1)),
    (f"{T3}.tiny", "III", "CIFAR-10", BEST, 0, "finished", 0.75, (1, 1, 1, 1), (0.1, 0.1)),
    (f"{T3}.tiny", "III", "CIFAR-10", BEST, 1, "diverged", 0.50, (1, math.inf, 1, 1), (0.1, 0.1)),
    (
        f"{T3}.tiny",
        "III",
        "CIFAR-10",
        "α=(0.2) β=()",
        0,
        "finished",
        0.74,
        (1, 1, 1, 1),
        (0.1, 0.1),
    ),  # not in the paper
    (T3, "III", "CIFAR-10", BASE, 0, "finished", 0.80, (1, 1, 1, 1), (0.1, 0.1)),  # paper scale
    (f"{T1}_iid.tiny", "I", "CIFAR-10 IID.", "FedAvg", 0, "finished", 0.60, (1, 1, 1, 1), (0.1, 0.1)),
    (f"{T1}_iid.tiny", "I", "CIFAR-10 IID.", "FedMIM", 0, "finished", 0.66, (1, 1, 1, 1), (0.1, 0.1)),
    (f"{T1}_iid.tiny", "I", "CIFAR-10 IID.", "SCAFFOLD", 0, "finished", 0.64, (1, 1, 1, 1), (0.1, 0.1)),
    (f"{T1}_iid.tiny", "I", "CIFAR-10 IID.", "FedCM", 0, "finished", 0.58, (1, 1, 1, 1), (0.1, 0.1)),
    (f"{T1}_dir0.3.tiny", "I", "CIFAR-10 DIR.3", "FedAvg", 0, "finished", 0.55, (2, 4, 2, 4), (0.10, 0.20)),
    (f"{T1}_dir0.3.tiny", "I", "CIFAR-10 DIR.3", "FedAvg", 1, "finished", 0.55, (2, 2, 2, 2), (0.10, 0.20)),
    (f"{T1}_dir0.3.tiny", "I", "CIFAR-10 DIR.3", "FedMIM", 0, "finished", 0.62, (1, 1, 1, 1), (0.12, 0.12)),
    (f"{T1}_dir0.3.tiny", "I", "CIFAR-10 DIR.3", "FedMIM", 1, "diverged", 0.10, (0.1, math.inf, 0.1, 0.1), (0.0, 0.0)),
    (f"{T1}_dir0.3.tiny", "I", "CIFAR-10 DIR.3", "SCAFFOLD", 0, "finished", 0.56, (1.5, 1.5, 1.5, 1.5), (0.06, 0.10)),
    (f"{T1}_dir0.3.tiny", "I", "CIFAR-10 DIR.3", "FedCM", 0, "finished", 0.57, (2, 2, 2, 2), (0.2, 0.2)),
    (
        f"{T1}_dir0.5.tiny",
        "I",
        "CIFAR-10 DIR.5",
        "FedAvg",
        0,
        "finished",
        0.50,
        (1, 1, 1, 1),
        (0.1, 0.1),
    ),  # extra column
    (f"{T1}_iid.tiny", None, None, "FedAvg", 7, "finished", 0.99, (1, 1, 1, 1), (0.1, 0.1)),  # no paper: ignored
]
OTHER_PAPER = ("gradma_t1.tiny", "III", "CIFAR-10", BASE, 0, "finished", 0.99, (1, 1, 1, 1), (0.1, 0.1))


def add_run(
    store: ResultsStore,
    index: int,
    scenario: str,
    table: str | None,
    column: str | None,
    label: str,
    seed: int,
    status: str,
    final: float,
    consistency,
    client_std,
    paper: str = "fedmim",
) -> list[tuple]:
    """Start and finish the run through the store; return its metric rows (inserted in bulk by the caller)."""
    ref = None if table is None else {"name": paper, "table": table, "column": column}
    spec_hash = hashlib.sha256(f"{scenario}|{label}".encode()).hexdigest()  # seeds share their spec
    rec = RunRecord(
        f"{spec_hash[:16]}-s{seed}",
        scenario,
        "h" * 64,
        spec_hash,
        label,
        seed,
        json.dumps({"algorithm": {"label": label}, "targets": [0.5], "paper": ref}),
        scale=scale_from_name(scenario),
    )
    store.start_run(rec)
    store.finish_run(rec.run_id, status, "boom" if status in ("diverged", "failed") else None)
    bad = status in ("diverged", "failed")
    rows = []
    for t in range(1, 4 if bad else 6):
        acc = {2: final} if bad else {2: final + 0.08, 4: final}
        metrics = {
            "test_acc": acc.get(t),
            "consistency": consistency[t - 1] if t <= 4 else None,
            "client_acc_std": {2: client_std[0], 4: client_std[1]}.get(t),
            "train_loss": 1.0 / t,
            "bits_up": 10,
            "bits_down": 10,
        }
        rows.append((rec.run_id, t, *(metrics.get(c) for c in METRIC_COLUMNS)))
    return rows


def build_paper_store(out: Path) -> ResultsStore:
    """RUNS plus another paper's run; metric rows go in with one transaction (record_round commits each)."""
    store = ResultsStore(out)
    rows = [r for i, run in enumerate(RUNS) for r in add_run(store, i, *run)]
    rows += add_run(store, len(RUNS), *OTHER_PAPER, paper="gradma")  # same table id and column, another paper
    with sqlite3.connect(store.db_path) as conn:
        conn.executemany(
            f"INSERT INTO metrics (run_id, round, {', '.join(METRIC_COLUMNS)}) "
            f"VALUES (?, ?, {', '.join('?' * len(METRIC_COLUMNS))})",
            rows,
        )
    conn.close()
    return store


@pytest.fixture
def store(paper_store: ResultsStore) -> ResultsStore:  # paper_store: tests/report/conftest.py
    return paper_store


def md_cells(md: str) -> dict[str, list[str]]:
    return {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]] for line in md.splitlines()[2:]}


def test_reference_numbers_match_the_notes() -> None:
    t1, t2, t3 = (reference_frame("fedmim", t) for t in ("I", "II", "III"))
    assert (t1.shape, t2.shape, t3.shape) == ((7, 9), (7, 9), (9, 1))
    assert t1.loc["FedMIM", "TinyImagenet DIR.1"] == 34.83
    assert t1.loc["FedAdam", "CIFAR-10 DIR.1"] == 71.75 and t1.loc["FedCM", "CIFAR-100 IID."] == 51.14
    assert t2.loc["SCAFFOLD", "CIFAR-100 E = 5"] == 48.85 and t2.loc["FedMIM", "CIFAR-100 E = 1"] == 55.77
    assert t2.loc["FedAdam", "TinyImagenet E = 10"] == 21.89
    assert t3.loc[BEST, "CIFAR-10"] == 84.98 and t3.loc[BASE, "CIFAR-10"] == 81.61
    assert t3.loc["α=(0.6,0.3) β=(0.1,0.9)", "CIFAR-10"] == 84.04
    assert list(t1.index) == ["FedAvg", "FedAdam", "SCAFFOLD", "FedCM", "FedDyn", "FedSAM", "FedMIM"]
    assert list(t1.columns)[:3] == ["CIFAR-10 IID.", "CIFAR-10 DIR.3", "CIFAR-10 DIR.1"]
    assert list(t2.columns)[-1] == "TinyImagenet E = 10"
    assert list(t3.index) == [
        BASE,
        "α=(0.9) β=()",
        "α=(0.5) β=()",
        "α=(0.8,0.1) β=()",
        "α=(0.6,0.3) β=()",
        "α=(0.3,0.6) β=()",
        BEST,
        "α=(0.6,0.3) β=(0.5,0.5)",
        "α=(0.6,0.3) β=(0.1,0.9)",
    ]
    ref = load_reference("fedmim")
    assert {t["metric"] for t in ref["tables"].values()} == {"final_acc"}
    assert ref["tables"]["III"]["caption"] == "SELECTION OF α_j AND β_j."
    assert ref["tables"]["I"]["caption"].startswith("Test accuracy (%) after 1000 communication rounds")
    with pytest.raises(ValueError, match="available: cflag, fedcams, fedmim, fedqvr, gradma"):
        load_reference("nope")
    with pytest.raises(ValueError, match="tables: I, II, III"):
        reference_frame("fedmim", "IV")


def test_scale_from_name() -> None:
    assert scale_from_name("fedmim_table1_cifar10_dir0.3.tiny") == "tiny"
    assert scale_from_name("fedmim_table1_cifar10_dir0.3") == "paper"
    assert (scale_from_name("x.small"), scale_from_name("quickstart")) == ("small", "paper")


def test_compare_table3_numbers(store: ResultsStore) -> None:
    frame = compare(store, "fedmim", "III", "tiny")
    assert frame["scale"].unique().tolist() == ["tiny"]
    assert frame["row"].tolist() == [*reference_frame("fedmim", "III").index, "α=(0.2) β=()"]
    base = frame.set_index("row").loc[BASE]
    assert base["paper_pct"] == 81.61 and base["value_mean"] == pytest.approx(0.71)  # final, not top (0.79)
    assert base["value_std"] == pytest.approx(math.sqrt(2 * 0.01**2))
    assert (base["seeds"], base["finished"], base["scenarios"]) == (2, 2, "fedmim_table3.tiny")
    best = frame.set_index("row").loc[BEST]
    assert (best["value_mean"], best["value_std"], best["diverged"]) == (pytest.approx(0.75), 0.0, 1)

    cells = md_cells(format_comparison(frame, "markdown"))
    assert cells[BASE] == ["81.61 / 71.00 ± 1.41"]
    assert cells["α=(0.9) β=()"] == ["84.14 / —"]  # the only seed failed
    assert cells["α=(0.5) β=()"] == ["83.53 / 70.00 ± 0.00"]
    assert cells["α=(0.8,0.1) β=()"] == ["84.29 / —"]  # not run
    assert cells[BEST] == ["84.98 / 75.00 ± 0.00 (1 div.)"]
    assert list(cells)[-1] == "α=(0.2) β=()" and cells["α=(0.2) β=()"] == ["— / 74.00 ± 0.00"]

    tex = format_comparison(frame, "latex")
    assert r"$\alpha$=(0.6,0.3) $\beta$=(0.9,0.1) & 84.98 / 75.00 $\pm$ 0.00 (1 div.) \\" in tex
    assert r"\begin{tabular}{lr}" in tex
    rows = list(csv.DictReader(io.StringIO(format_comparison(frame, "csv"))))
    assert (rows[0]["row"], float(rows[0]["paper_pct"])) == (BASE, 81.61)
    assert float(rows[0]["value_mean"]) == pytest.approx(0.71)
    assert rows[1]["value_mean"] == "" and rows[1]["failed"] == "1"
    with pytest.raises(ValueError, match="allowed: markdown, latex, csv"):
        format_comparison(frame, "html")


def test_compare_scales_and_extra_columns(store: ResultsStore) -> None:
    both = compare(store, "fedmim", "III")
    assert list(dict.fromkeys(both["scale"])) == ["tiny", "paper"]
    with pytest.raises(ValueError, match="scales tiny, paper"):
        format_comparison(both, "markdown")
    paper_scale = md_cells(format_comparison(both[both["scale"] == "paper"], "markdown"))
    assert paper_scale[BASE] == ["81.61 / 80.00 ± 0.00"] and paper_scale[BEST] == ["84.98 / —"]
    assert "α=(0.2) β=()" in paper_scale  # extra rows appear at every scale (with — where not run)

    t1 = compare(store, "fedmim", "I", "tiny")
    md = format_comparison(t1, "markdown")
    header = [c.strip() for c in md.splitlines()[0].split("|")[1:-1]]
    assert header == ["Method", *reference_frame("fedmim", "I").columns, "CIFAR-10 DIR.5"]
    cells = md_cells(md)
    assert cells["FedAvg"][:2] == ["82.16 / 60.00 ± 0.00", "80.19 / 55.00 ± 0.00"]
    assert cells["FedAvg"][2] == "75.92 / —" and cells["FedAvg"][-1] == "— / 50.00 ± 0.00"
    assert cells["FedMIM"][1] == "84.39 / 62.00 ± 0.00 (1 div.)" and cells["FedAdam"][-1] == "— / —"
    # The run without a paper reference (0.99) and the other paper's run are not counted.
    assert t1.set_index(["row", "column"]).loc[("FedAvg", "CIFAR-10 IID."), "seeds"] == 1

    (terminal,) = rich_comparison(t1, "fedmim", "I")  # the terminal shows only the columns with runs
    assert [c.header for c in terminal.columns] == ["Method", "CIFAR-10 IID.", "CIFAR-10 DIR.3", "CIFAR-10 DIR.5"]

    empty = compare(store, "fedmim", "II")
    assert empty["scale"].isna().all() and len(empty) == 63 and empty["value_mean"].isna().all()
    assert md_cells(format_comparison(empty, "markdown"))["FedAvg"][0] == "82.76 / —"
    with pytest.raises(ValueError, match="tables: I, II, III"):
        compare(store, "fedmim", "IV")


def test_write_comparison(store: ResultsStore, tmp_path: Path) -> None:
    paths = write_comparison(store, "fedmim", "III", tmp_path / "tables")
    assert [p.name for p in paths] == [
        f"fedmim_tableIII_{s}.{e}" for s in ("tiny", "paper") for e in ("md", "tex", "csv")
    ]
    tiny, paper = paths[0].read_text(), paths[3].read_text()
    assert tiny.startswith("## FedMIM Table III, tiny scale: paper / ours")
    assert "SELECTION OF α_j AND β_j." in tiny and "81.61 / 71.00 ± 1.41" in tiny
    assert "substitute datasets/models" in tiny and "only the orderings are comparable" in tiny
    assert "substitute" not in paper and "81.61 / 80.00 ± 0.00" in paper
    assert [p.name for p in write_comparison(store, "fedmim", "III", tmp_path / "t2", "paper")] == [
        "fedmim_tableIII_paper.md",
        "fedmim_tableIII_paper.tex",
        "fedmim_tableIII_paper.csv",
    ]
    assert write_comparison(store, "fedmim", "II", tmp_path / "t3") == []
    assert pd.read_csv(paths[2])["scale"].unique().tolist() == ["tiny"]


def test_a_run_not_finished_is_left_out_of_paper_cells(tmp_path: Path) -> None:
    """Issue 24: a seed still training (or killed) never enters ``ours``; the cell says so."""
    store = build_paper_store(tmp_path / "s")
    rows = add_run(store, 99, f"{T3}.tiny", "III", "CIFAR-10", BASE, 2, "running", 0.99, (1, 1, 1, 1), (0.1, 0.1))
    with sqlite3.connect(store.db_path) as conn:
        conn.executemany(
            f"INSERT INTO metrics (run_id, round, {', '.join(METRIC_COLUMNS)}) "
            f"VALUES (?, ?, {', '.join('?' * len(METRIC_COLUMNS))})",
            rows[:3],
        )
    base = compare(store, "fedmim", "III", "tiny").set_index("row").loc[BASE]
    assert (base["value_mean"], base["seeds"], base["running"]) == (pytest.approx(0.71), 3, 1)
    frame = compare(store, "fedmim", "III", "tiny")
    assert md_cells(format_comparison(frame, "markdown"))[BASE] == ["81.61 / 71.00 ± 1.41 (1 unfin.)"]
