"""FedCAMS claims judged on a synthetic tiny-scale store and on the paper's numbers, checked by hand."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import pytest

from fedbench.report.claims import CLAIMS, check_claims, within, write_claims
from fedbench.store import ResultsStore, RunRecord

R18, CM = "CIFAR-10 ResNet-18", "CIFAR-10 ConvMixer-256-8"

# (table, column, label, seed, status, test_acc at rounds 2 and 4, bits_up per round); rounds 1–4, S = 10.
RUNS = [
    ("fig4_5", R18, "FedAMS", 1, "finished", (0.80, 0.90), 3200),
    ("fig4_5", R18, "FedCAMS-sign", 1, "finished", (0.80, 0.89), 101),  # uplink × 32 = 1.01
    ("fig4_5", R18, "FedCAMS-top1/64", 1, "finished", (0.80, 0.85), 100),  # × 32 = 1.00
    ("fig4_5", R18, "FedCAMS-top1/128", 1, "finished", (0.80, 0.86), 50),  # × 64 = 1.00; beats 1/64
    ("fig4_5", R18, "FedCAMS-top1/256", 1, "finished", (0.70, 0.80), 30),  # × 128 = 1.20
    ("fig4_5", R18, "FedCAMS-top1/256", 2, "diverged", (0.10, math.nan), 30),  # left out of accuracy
    ("fig4_5", CM, "FedAMS", 1, "finished", (0.80, 0.90), 3200),
    ("fig4_5", CM, "FedCAMS-sign", 1, "finished", (0.80, 0.85), 100),  # 5 points below FedAMS
    ("3", "CIFAR-10", "FedAMS ε=1e-1", 1, "finished", (0.80, 0.905), 3200),
    ("3", "CIFAR-10", "FedAMS ε=1e-2", 1, "finished", (0.80, 0.910), 3200),
    ("3", "CIFAR-10", "FedAMS ε=1e-3", 1, "finished", (0.80, 0.912), 3200),
    ("3", "CIFAR-10", "FedAMS ε=1e-4", 1, "finished", (0.80, 0.900), 3200),  # spread 1.2 points
    ("fig2_6", R18, "FedAMS S=5", 1, "finished", (0.50, 0.80), 1600),  # mean 65
    ("fig2_6", R18, "FedAMS S=10", 1, "finished", (0.60, 0.80), 3200),  # mean 70
    ("fig2_6", R18, "FedAMS S=20", 1, "finished", (0.70, 0.80), 6400),  # mean 75
    ("fig2_6", R18, "FedCAMS-sign S=5", 1, "finished", (0.60, 0.80), 50),  # mean 70
    ("fig2_6", R18, "FedCAMS-sign S=10", 1, "finished", (0.50, 0.85), 100),  # mean 67.5, final higher
    ("fig3", R18, "FedAMS E=1", 1, "finished", (0.40, 0.70), 3200),  # not a paper row (tiny grid)
    ("fig3", R18, "FedAMS E=3", 1, "finished", (0.60, 0.70), 3200),
    ("fig1", R18, "FedAvg", 1, "finished", (0.80, 0.85), 3200),
    ("fig1", R18, "FedAdam", 1, "finished", (0.70, 0.80), 3200),
    ("fig1", R18, "FedYogi", 1, "finished", (0.80, 0.91), 3200),
    ("fig1", R18, "FedAMSGrad", 1, "finished", (0.70, 0.80), 3200),
    ("fig1", R18, "FedAMS", 1, "finished", (0.80, 0.905), 3200),
    ("fig1", CM, "FedAvg", 1, "finished", (0.60, 0.70), 3200),
    ("fig1", CM, "FedAdam", 1, "finished", (0.70, 0.80), 3200),
    ("fig1", CM, "FedYogi", 1, "finished", (0.70, 0.80), 3200),
    ("fig1", CM, "FedAMSGrad", 1, "finished", (0.60, 0.65), 3200),
    ("fig1", CM, "FedAMS", 1, "finished", (0.70, 0.80), 3200),
]


def build_fedcams_store(out: Path) -> ResultsStore:
    store = ResultsStore(out)
    for table, column, label, seed, status, (acc2, acc4), bits_up in RUNS:
        spec = {
            "algorithm": {"label": label},
            "clients": {"num": 100, "per_round": 10},
            "targets": [0.8],
            "paper": {"name": "fedcams", "table": table, "column": column},
        }
        spec_hash = hashlib.sha256(f"{table}|{column}|{label}".encode()).hexdigest()  # seeds share their spec
        rec = RunRecord(
            f"{spec_hash[:16]}-s{seed}",
            f"fedcams_{table}_{column[-5:]}.tiny",
            "h" * 64,
            spec_hash,
            label,
            seed,
            json.dumps(spec),
            scale="tiny",
        )
        store.start_run(rec)
        for t in range(1, 5):
            acc = {2: acc2, 4: acc4}.get(t)
            store.record_round(
                rec.run_id,
                t,
                {
                    "test_acc": None if acc is None or math.isnan(acc) else acc,
                    "bits_up": bits_up,
                    "bits_down": 3200,
                    "train_loss": 1.0 / t,
                },
            )
        store.finish_run(rec.run_id, status)
    return store


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    store = build_fedcams_store(tmp_path_factory.mktemp("fedcams"))
    return {r.id: r for r in check_claims(store, "fedcams", "tiny")}


def test_registered_claims() -> None:
    assert [c.id for c in CLAIMS["fedcams"]] == ["B1", "C1", "C2", "C3", "C4", "C5", "C6", "C7", "C8"]
    assert [c.id for c in CLAIMS["fedcams"] if c.kind == "accounting"] == ["B1"]  # reported apart
    assert [c.id for c in CLAIMS["fedmim"]][0] == "C1"  # FedMIM's registry is untouched


def test_paper_verdicts(results) -> None:
    paper = {k: r.paper.short() for k, r in results.items()}
    assert paper == {
        "B1": "holds (4/4 hold)",
        "C1": "not reported",
        "C2": "not reported",
        "C3": "holds (1/1 hold)",
        "C4": "holds (5/5 hold)",
        "C5": "not reported",
        "C6": "not reported",
        "C7": "not reported",
        "C8": "not reported",
    }
    # Table 2: sign's uplink 1.12e10/2 over FedAMS's 3.58e11/2, × 32; top-k 1/256: 2.79e9/3.58e11 × 128.
    assert (
        "Table 2 Scaled sign: uplink / FedAMS's × 32 = 1.0011 within [0.9500, 1.0500]" in results["B1"].paper.evidence
    )
    assert "Top-k with r = 1/256: uplink / FedAMS's × 128 = 0.9975" in results["B1"].paper.evidence
    # Table 3: 90.94 − 90.30 = 0.64 points.
    assert results["C3"].paper.evidence == (
        "CIFAR-10 (6 of 6 ε): max FedAMS ε=1e-3 90.94 − min FedAMS ε=1e-8 90.30 = 0.64 ≤ 1.00 (stated 1)"
    )  # the paper prints no std
    assert "CIFAR-10: ε=1e-3 90.94 > ε=1e-4 90.72" in results["C4"].paper.evidence
    assert "curves only" in results["C1"].paper.note


def test_reproduced_verdicts(results) -> None:
    ours = {k: r.ours for k, r in results.items()}
    # B1: top-k 1/256's 30 bits × 128 / 3200 = 1.2 fails; ConvMixer has no top-k runs.
    assert ours["B1"].short() == "fails (4/5 hold; 5 of 8 checked)"
    assert [c.text for c in ours["B1"].checked if not c.ok] == [
        f"{R18}: FedCAMS-top1/256 uplink / FedAMS's × 128 = 1.2000 outside [0.9500, 1.0500]"
    ]
    assert "BatchNorm" in ours["B1"].note
    # C1: 1/64 85 ≤ 1/128 86 fails, 1/128 86 > 1/256 80 (the diverged seed left out).
    assert ours["C1"].short() == "fails (1/2 hold; 2 of 4 checked)"
    assert [c.text for c in ours["C1"].checked] == [
        f"{R18}: top1/64 85.00 ≤ top1/128 86.00",
        f"{R18}: top1/128 86.00 > top1/256 80.00",
    ]
    # C2: −1 within ±2 for ResNet, −5 for ConvMixer.
    assert ours["C2"].short() == "fails (1/2 hold)"
    assert (
        ours["C2"].checked[1].text
        == f"{CM}: FedCAMS-sign 85.00 − FedAMS 90.00 = -5.00 outside ±2.00 (stated 2 ≥ 2σ = 0.00)"
    )
    # C3: 91.2 − 90.0 = 1.2 > 1 point (two ε not run); C4: 1e-3 beats the three others run.
    assert ours["C3"].short() == "fails (0/1 hold)"
    assert "CIFAR-10 (4 of 6 ε): max FedAMS ε=1e-3 91.20 − min FedAMS ε=1e-4 90.00 = 1.20 > 1.00" in ours["C3"].evidence
    assert ours["C4"].short() == "holds (3/3 hold; 3 of 5 checked)"
    # C5: mean accuracy over rounds: FedAMS 65 < 70 < 75; FedCAMS-sign S=10 67.5 < S=5 70; ConvMixer not run.
    assert ours["C5"].short() == "fails (2/3 hold; 3 of 4 checked)"
    assert f"{R18} FedCAMS-sign mean acc.: S=10 67.50 ≤ S=5 70.00" in ours["C5"].evidence
    # C6: the tiny grid's E=1 row (not a paper row) still counts: 55 < 65.
    assert ours["C6"].evidence == f"{R18} FedAMS mean acc.: E=3 65.00 > E=1 55.00"
    # C7: ResNet 90.5 − FedYogi 91 = −0.5 ≥ −1; ConvMixer 0 ≥ −1; Fig. 7 not run.
    assert ours["C7"].short() == "holds (2/2 hold; 2 of 4 checked)"
    assert (
        f"{R18}: FedAMS 90.50 − best other FedYogi 91.00 = -0.50 ≥ -1.00 (stated 1 ≥ 2σ = 0.00)" in ours["C7"].evidence
    )
    # C8: FedAMSGrad 65 ≤ FedAvg 70 on ConvMixer.
    assert ours["C8"].short() == "fails (3/4 hold; 4 of 8 checked)"


def test_write_and_within(results, tmp_path: Path) -> None:
    store = build_fedcams_store(tmp_path / "store")
    path = write_claims(store, "fedcams", tmp_path / "tables")
    text = path.read_text()
    assert path.name == "fedcams_claims_tiny.md" and text.startswith("# FedCAMS claims, tiny scale")
    assert "| C3 | FedAMS is insensitive to ε" in text
    assert within("x", "v =", 0.5, 0.0, 1.0).ok and within("x", "v =", 2.0, 0.0, 1.0).ok is False
    assert within("x", "v =", math.nan, 0.0, 1.0).ok is None
    assert within("x", "v =", -0.5, -1.0, math.inf).text == "x: v = -0.50 ≥ -1.00"


def test_reference_numbers_match_the_notes() -> None:
    from fedbench.report.reference import load_reference, reference_frame

    t3 = reference_frame("fedcams", "3")["CIFAR-10"]
    assert t3.to_dict() == {
        "FedAMS ε=1e-1": 90.45,
        "FedAMS ε=1e-2": 90.51,
        "FedAMS ε=1e-3": 90.94,
        "FedAMS ε=1e-4": 90.72,
        "FedAMS ε=1e-6": 90.49,
        "FedAMS ε=1e-8": 90.30,
    }
    t2 = reference_frame("fedcams", "2", ("bits",))
    assert t2.loc["Top-k with r = 1/128"].tolist() == [3.58e11, 1.82e11, 5.59e9]
    t1 = reference_frame("fedcams", "1", ("formula",))
    assert t1.loc["Top-k", "One-way Compression"] == "≈ 32(2k + d) × T"
    tables = load_reference("fedcams")["tables"]
    assert list(tables) == ["1", "2", "3", "fig1", "fig2_6", "fig3", "fig4_5", "fig7"]
    assert all(reference_frame("fedcams", f).isna().all().all() for f in ("fig1", "fig2_6", "fig3", "fig4_5", "fig7"))
