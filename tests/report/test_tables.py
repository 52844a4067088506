"""Summary tables against hand-computed numbers on a synthetic store (no training)."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
from pathlib import Path

import pandas as pd
import pytest
from rich.console import Console

from fedbench.report.tables import fallback_notes, format_table, rich_table, summarize, summary_notes, write_tables
from fedbench.store import ResultsStore, RunRecord

# (algorithm, seed, status, {round: test_acc}, bits_up per round, bits_down per round); 6 rounds, eval every 2.
RUNS = [
    ("FedAvg", 0, "finished", {2: 0.60, 4: 0.85, 6: 0.83}, 100, 50),
    ("FedAvg", 1, "finished", {2: 0.40, 4: 0.75, 6: 0.77}, 200, 100),
    ("SCAFFOLD", 0, "diverged", {2: 0.55}, 100, 100),
    ("SCAFFOLD", 1, "diverged", {2: 0.30}, 100, 100),
    ("FedProx", 0, "finished", {2: 0.70, 4: 0.90, 6: 0.88}, 100, 50),
    ("FedProx", 1, "diverged", {2: 0.65}, 100, 50),
]


def build_store(out: Path, targets: tuple[float, ...] = (0.5, 0.8), scenario: str = "toy") -> ResultsStore:
    """A store with the RUNS above; diverged runs stop after round 3."""
    store = ResultsStore(out)
    for algo, seed, status, accs, up, down in RUNS:
        spec_hash = f"{scenario}{algo}".lower().ljust(64, "0")
        rec = RunRecord(
            f"{spec_hash[:16]}-s{seed}",
            scenario,
            "h" * 64,
            spec_hash,
            algo,
            seed,
            json.dumps({"algorithm": algo, "targets": list(targets)}),
        )
        store.start_run(rec)
        for t in range(1, 4 if status == "diverged" else 7):
            acc = accs.get(t)
            store.record_round(
                rec.run_id,
                t,
                {
                    "test_acc": acc,
                    "test_loss": None if acc is None else 1 - acc,
                    "train_loss": 1.0 / t,
                    "bits_up": up,
                    "bits_down": down,
                    "wall_s": 0.1,
                },
            )
        store.finish_run(rec.run_id, status, "non-finite loss at round 3" if status == "diverged" else None)
    return store


@pytest.fixture
def summary(tmp_path: Path) -> pd.DataFrame:
    store = build_store(tmp_path)
    return summarize(store.runs(), store.metrics())


def test_summary_numbers(summary: pd.DataFrame) -> None:
    assert summary["algorithm"].tolist() == ["FedAvg", "SCAFFOLD", "FedProx"]  # creation order
    fedavg = summary.iloc[0]
    assert (fedavg.seeds, fedavg.finished, fedavg.diverged, fedavg.failed) == (2, 2, 0, 0)
    # top: 0.85, 0.77; final: 0.83, 0.77; sample std (ddof=1)
    assert fedavg.top_acc_mean == pytest.approx(0.81)
    assert fedavg.top_acc_std == pytest.approx(math.sqrt(2 * 0.04**2))
    assert fedavg.final_acc_mean == pytest.approx(0.80)
    assert fedavg.final_acc_std == pytest.approx(math.sqrt(2 * 0.03**2))
    # τ=0.5: seed 0 at round 2 (cum bits 2·150), seed 1 at round 4 (4·300)
    assert (fedavg["rounds_to_0.5"], fedavg["reached_0.5"], fedavg["bits_to_0.5"]) == (3.0, 2, 750.0)
    # τ=0.8: only seed 0, at round 4 (4·150)
    assert (fedavg["rounds_to_0.8"], fedavg["reached_0.8"], fedavg["bits_to_0.8"]) == (4.0, 1, 600.0)

    scaffold = summary.iloc[1]
    assert scaffold.diverged == 2 and math.isnan(scaffold.top_acc_mean) and math.isnan(scaffold.final_acc_mean)
    assert (scaffold["rounds_to_0.5"], scaffold["reached_0.5"], scaffold["bits_to_0.5"]) == (2.0, 1, 400.0)
    assert scaffold["reached_0.8"] == 0 and math.isnan(scaffold["rounds_to_0.8"])

    fedprox = summary.iloc[2]
    assert (fedprox.top_acc_mean, fedprox.top_acc_std, fedprox.final_acc_mean) == (0.90, 0.0, 0.88)


def test_markdown_cells(summary: pd.DataFrame) -> None:
    md = format_table(summary, "markdown")
    lines = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]] for line in md.splitlines()[2:]}
    seeds, status, top, final, r05, b05, r08, b08 = lines["FedAvg"]
    assert (seeds, status, top, final) == ("2", "2 fin.", "81.00 ± 5.66", "80.00 ± 4.24")
    assert (r05, b05, r08, b08) == ("3", "7.50e+02", "4 (1/2)", "6.00e+02 (1/2)")
    assert lines["SCAFFOLD"][1:] == ["2 div.", "—", "—", "2 (1/2)", "4.00e+02 (1/2)", "—", "—"]
    assert lines["FedProx"][2:4] == ["90.00 ± 0.00 (1 div.)", "88.00 ± 0.00 (1 div.)"]
    assert "Rounds to 80%" in md.splitlines()[0]


def test_latex_and_csv(summary: pd.DataFrame) -> None:
    tex = format_table(summary, "latex")
    assert r"\begin{tabular}{lrlrrrrrr}" in tex and r"\end{tabular}" in tex
    scaffold = next(line for line in tex.splitlines() if line.startswith("SCAFFOLD"))
    assert scaffold.split(" & ")[3:5] == ["—", "—"]
    assert r"81.00 $\pm$ 5.66" in tex and r"Rounds to 80\%" in tex

    rows = list(csv.DictReader(io.StringIO(format_table(summary, "csv"))))
    assert rows[1]["algorithm"] == "SCAFFOLD" and rows[1]["top_acc_mean"] == "" and rows[1]["rounds_to_0.8"] == ""
    assert float(rows[0]["top_acc_mean"]) == pytest.approx(0.81) and rows[0]["reached_0.8"] == "1"
    with pytest.raises(ValueError, match="allowed: markdown, latex, csv"):
        format_table(summary, "html")


def test_scenarios_with_different_targets(tmp_path: Path) -> None:
    build_store(tmp_path, scenario="toy")
    store = build_store(tmp_path, targets=(0.5,), scenario="other run")
    summary = summarize(store.runs(), store.metrics())
    assert summary["scenario"].unique().tolist() == ["toy", "other run"]
    assert summary.loc[summary["scenario"] == "other run", "reached_0.8"].isna().all()

    paths = write_tables(store, tmp_path / "tables", None)
    assert [p.name for p in paths] == ["toy.md", "toy.tex", "toy.csv", "other_run.md", "other_run.tex", "other_run.csv"]
    assert "Rounds to 80%" not in paths[3].read_text() and "reached_0.8" not in paths[5].read_text()
    assert paths[0].read_text().startswith("## toy")
    assert [p.name for p in write_tables(store, tmp_path / "t2", "toy")] == ["toy.md", "toy.tex", "toy.csv"]
    with pytest.raises(ValueError, match="scenarios there: toy, other run"):
        write_tables(store, tmp_path / "t3", "missing")


def test_rich_table(summary: pd.DataFrame) -> None:
    console = Console(record=True, width=200)
    console.print(rich_table(summary, "toy"))
    text = console.export_text()
    assert "81.00 ± 5.66" in text and "SCAFFOLD" in text


def test_empty_store(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path)
    assert write_tables(store, tmp_path / "tables", None) == []


def test_server_state_size_is_reported_when_logged(tmp_path: Path) -> None:
    store = build_store(tmp_path)
    assert "Server state" not in format_table(summarize(store.runs(), store.metrics()), "markdown")
    for run_id, mb in zip(store.runs()["run_id"][:2], (2.0, 3.0)):  # FedAvg's two seeds log their state size
        store.record_round(run_id, 1, {"test_acc": None, "bits_up": 100, "bits_down": 50}, {"server_state_mb": mb})
    summary = summarize(store.runs(), store.metrics())
    assert summary.set_index("algorithm").loc["FedAvg", "server_mb"] == 2.5
    md = format_table(summary, "markdown")
    assert "Server state (MB)" in md.splitlines()[0] and md.splitlines()[2].rstrip(" |").endswith("2.5")


def test_qp_fallbacks_are_footnoted_only_when_a_run_logged_some(tmp_path: Path) -> None:
    store = build_store(tmp_path)
    assert fallback_notes(store.runs(), store.metrics()) == []
    runs = store.runs()
    fedavg, fedprox = runs["run_id"][:2], runs["run_id"][4:6]
    for run_id, n in zip([*fedavg, *fedprox], (3, 1000, 0, 0)):  # round 1 of each: a GradMA-style log
        store.record_round(run_id, 1, {"test_acc": None, "bits_up": 100, "bits_down": 50}, {"qp_fallbacks": n})
    assert fallback_notes(store.runs(), store.metrics()) == [
        "FedAvg: 1,003 QP projections fell back (left unprojected)"
    ]
    md, tex = (p.read_text() for p in write_tables(store, tmp_path / "tables", "toy")[:2])
    assert md.endswith("\n_FedAvg: 1,003 QP projections fell back (left unprojected)_\n")
    assert "% FedAvg: 1,003 QP projections fell back (left unprojected)" in tex


# -- issue 24 item 4: a run that is not finished is never pooled into a mean --

FINISHED_ONLY_MD = """## toy

| Algorithm   |   Seeds | Status         |          Top acc. (%) |        Final acc. (%) |   Rounds to 50% |    Bits to 50% |   Rounds to 80% |    Bits to 80% |
|-------------|---------|----------------|-----------------------|-----------------------|-----------------|----------------|-----------------|----------------|
| FedAvg      |       2 | 2 fin.         |          81.00 ± 5.66 |          80.00 ± 4.24 |               3 |       7.50e+02 |         4 (1/2) | 6.00e+02 (1/2) |
| SCAFFOLD    |       2 | 2 div.         |                     — |                     — |         2 (1/2) | 4.00e+02 (1/2) |               — |              — |
| FedProx     |       2 | 1 fin., 1 div. | 90.00 ± 0.00 (1 div.) | 88.00 ± 0.00 (1 div.) |               2 |       3.00e+02 |         4 (1/2) | 6.00e+02 (1/2) |

_mean ± std over seeds (std: sample, ddof=1; 0 for one seed); (k/n): k of n seeds reached the target_
"""
FINISHED_ONLY_SHA256 = {  # the bytes written before unfinished runs were set apart (commit 08bd0fc)
    "toy.csv": "7db824df50d8cb4024525a418e879bb4a93a41f2bffcbd9acdeefdc037e4eb06",
    "toy.md": "e2df7a898085b902685743191211375b8ba261c74bea26746d9b29ea2b0d8e07",
    "toy.tex": "1d156187af773302dd69166298c98995d774292c9b941d40fac48803eb80468a",
}


def test_tables_of_done_runs_keep_their_bytes(tmp_path: Path) -> None:
    paths = write_tables(build_store(tmp_path / "s"), tmp_path / "t", None)
    assert (tmp_path / "t" / "toy.md").read_text(encoding="utf-8") == FINISHED_ONLY_MD
    assert {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in paths} == FINISHED_ONLY_SHA256


def test_a_run_not_finished_is_shown_apart_with_its_round(tmp_path: Path) -> None:
    store = build_store(tmp_path / "s")
    spec_hash = "toyfedavg".ljust(64, "0")
    rec = RunRecord(
        f"{spec_hash[:16]}-s2",
        "toy",
        "h" * 64,
        spec_hash,
        "FedAvg",
        2,
        json.dumps({"algorithm": "FedAvg", "targets": [0.5, 0.8], "rounds": 6}),
    )
    store.start_run(rec)  # killed in round 4: far better numbers so far, which a mean must not take in
    for t in (1, 2, 3):
        store.record_round(rec.run_id, t, {"test_acc": 0.99 if t == 2 else None, "bits_up": 1, "bits_down": 1})
    runs, metrics = store.runs(), store.metrics()
    fedavg = summarize(runs, metrics).iloc[0]
    assert (fedavg.seeds, fedavg.finished, fedavg.running) == (3, 2, 1)
    assert (fedavg.top_acc_mean, fedavg.final_acc_mean) == (pytest.approx(0.81), pytest.approx(0.80))
    assert (fedavg["rounds_to_0.5"], fedavg["reached_0.5"], fedavg["bits_to_0.5"]) == (3.0, 2, 750.0)
    md = format_table(summarize(runs, metrics), "markdown")
    cells = next([c.strip() for c in line.split("|")[2:-1]] for line in md.splitlines() if "FedAvg" in line)
    assert cells[:6] == ["3", "2 fin., 1 run.", "81.00 ± 5.66 (1 unfin.)", "80.00 ± 4.24 (1 unfin.)", "3", "7.50e+02"]
    assert cells[6] == "4 (1/2)"  # of the two done seeds
    assert (
        summary_notes(runs, metrics)[0] == "FedAvg seed 2: not finished, round 3 of 6 recorded; left out of the means"
    )
    written = write_tables(store, tmp_path / "t", None)[0].read_text(encoding="utf-8")
    assert "_FedAvg seed 2: not finished, round 3 of 6 recorded; left out of the means_" in written
