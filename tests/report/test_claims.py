"""Claims judged on the synthetic store of test_paper.py and on the paper's numbers, checked by hand."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from fedbench.report.claims import (
    CLAIMS,
    Check,
    Numbers,
    StoreNumbers,
    Verdict,
    check_claims,
    claim,
    close,
    greater,
    judge,
    tolerance,
    write_claims,
)
from fedbench.store import ResultsStore


@pytest.fixture
def results(paper_store: ResultsStore) -> dict[str, object]:
    return {r.id: r for r in check_claims(paper_store, "fedmim", "tiny")}


def test_paper_verdicts(results) -> None:
    paper = {k: r.paper.short() for k, r in results.items()}
    assert paper == {
        "C1": "holds (9/9 hold)",
        "C2": "holds (42/42 hold)",
        "C3": "holds (18/18 hold)",
        "C4a": "holds (27/27 hold)",
        "C4b": "holds (33/33 hold)",
        "C5": "holds (42/42 hold)",
        "C6a": "not reported",
        "C6b": "not reported",
        "C7a": "holds (8/8 hold)",
    }
    # C5 compares E = 10 with E = 1 and E = 5 (the text's claim); the one rising pair of Table II (notes §4),
    # SCAFFOLD on CIFAR-100 E = 1 → 5, is not a check; SCAFFOLD's E = 10 is below both.
    c5 = [c.text for c in results["C5"].paper.checked if c.text.startswith("SCAFFOLD CIFAR-100")]
    assert c5 == ["SCAFFOLD CIFAR-100: E = 1 48.35 > E = 10 43.25", "SCAFFOLD CIFAR-100: E = 5 48.85 > E = 10 43.25"]
    assert "CIFAR-10 drop: FedAdam 11.44 > FedCM 8.31" in results["C3"].paper.evidence  # 83.19−71.75 vs 85.62−77.31
    assert "TinyImagenet DIR.1: FedMIM 34.83 > FedAvg 27.93" in results["C1"].paper.evidence
    assert "Fig. 2b" in results["C6a"].paper.note


def test_reproduced_verdicts(results) -> None:
    ours = {k: r.ours for k, r in results.items()}
    # C1: FedMIM 66 > FedAvg 60 (IID), 62 > 55 (DIR.3; FedMIM's diverged seed left out); 7 columns not run.
    assert ours["C1"].short() == "holds (2/2 hold; 2 of 9 checked)"
    assert [c.text for c in ours["C1"].checked] == [
        "CIFAR-10 IID.: FedMIM 66.00 > FedAvg 60.00",
        "CIFAR-10 DIR.3: FedMIM 62.00 > FedAvg 55.00",
    ]
    assert ours["C2"].short() == "holds (4/4 hold; 4 of 42 checked)"  # IID > DIR.3 for the 4 methods run
    assert ours["C3"].verdict == "not run" and ours["C4b"].verdict == "not run" and ours["C5"].verdict == "not run"
    # C4a: FedCM 58 ≤ FedAvg 60 at IID is the one failure.
    assert ours["C4a"].short() == "fails (5/6 hold; 6 of 27 checked)"
    assert [c.text for c in ours["C4a"].checked if not c.ok] == ["CIFAR-10 IID.: FedCM 58.00 ≤ FedAvg 60.00"]
    # C6a: mean over rounds then seeds: FedAvg (3 + 2)/2, FedMIM 1 (its diverged seed, with an inf, left out), ...
    assert [c.text for c in ours["C6a"].checked] == [
        "CIFAR-10 DIR.3: FedMIM 1, SCAFFOLD 1.5, FedCM 2, FedAvg 2.5 → FedMIM lowest"
    ]
    assert ours["C6a"].short() == "holds (1/1 hold; 1 of 3 checked)"
    # C6b: client_acc_std at the evaluated rounds: SCAFFOLD (6+10)/2 = 8 pp < FedMIM 12 pp.
    assert [c.text for c in ours["C6b"].checked] == [
        "CIFAR-10 DIR.3: SCAFFOLD 8 pp, FedMIM 12 pp, FedAvg 15 pp, FedCM 20 pp → FedMIM not lowest"
    ]
    assert ours["C6b"].verdict == "fails"
    # C7a: α=(0.5) 70 ≤ 71 = mean(70, 72) fails; the best row 75 > 71; α=(0.9)'s only seed failed: not checked.
    assert ours["C7a"].short() == "fails (1/2 hold; 2 of 8 checked)"


def test_scale_selection_and_write(paper_store: ResultsStore, tmp_path: Path) -> None:
    store = paper_store
    with pytest.raises(ValueError, match="scales tiny, paper; choose one"):
        check_claims(store, "fedmim")
    at_paper = {r.id: r.ours.verdict for r in check_claims(store, "fedmim", "paper")}
    assert set(at_paper.values()) == {"not run"}  # only α=() β=() of Table III runs at the paper scale

    path = write_claims(store, "fedmim", tmp_path / "tables", "tiny")
    text = path.read_text()
    assert path.name == "fedmim_claims_tiny.md" and text.startswith("# FedMIM claims, tiny scale")
    assert (
        "| C1 | FedMIM > FedAvg in every Table I column | holds (2/2 hold; 2 of 9 checked) | holds (9/9 hold) |" in text
    )
    assert "- CIFAR-10 IID.: FedCM 58.00 ≤ FedAvg 60.00" in text and "only orderings are comparable" in text

    empty = ResultsStore(tmp_path / "empty")
    assert write_claims(empty, "fedmim", tmp_path / "t2").name == "fedmim_claims_paper.md"
    with pytest.raises(ValueError, match="no claims registered for paper .nope."):
        check_claims(empty, "nope")


def test_judge_and_registry(monkeypatch, paper_store: ResultsStore) -> None:
    assert judge([Check("a", True), Check("b", None)]).short() == "holds (1/1 hold; 1 of 2 checked)"
    assert judge([Check("a", True), Check("b", False)]).verdict == "fails"
    assert judge([Check("b", None)]).short() == "not run (0 of 1 checked)"
    assert Verdict("not reported", note="x").short() == "not reported"

    # A new claim registers with the decorator and is judged on both sources (patched registry: no leak).
    monkeypatch.setattr("fedbench.report.claims.base.CLAIMS", {k: list(v) for k, v in CLAIMS.items()})

    @claim("fedmim", "X1", "FedMIM > FedAvg at CIFAR-10 IID.")
    def _x1(nums: Numbers) -> Verdict:
        iid = nums.acc("I")["CIFAR-10 IID."]
        return judge([greater("IID", "FedMIM", iid["FedMIM"], "FedAvg", iid["FedAvg"])])

    last = check_claims(paper_store, "fedmim", "tiny")[-1]
    assert (last.id, last.ours.evidence, last.paper.evidence) == (
        "X1",
        "IID: FedMIM 66.00 > FedAvg 60.00",
        "IID: FedMIM 86.39 > FedAvg 82.16",
    )
    assert [c.id for c in CLAIMS["fedmim"]][-1] == "C7a"


def test_std_over_seeds_and_noise_tolerances(paper_store: ResultsStore) -> None:
    ours = StoreNumbers(paper_store, "fedmim", "tiny")
    std = ours.acc_std("III")["CIFAR-10"]
    assert std["α=() β=()"] == pytest.approx(math.sqrt(2))  # final 70 and 72 %: sample std 1.41 points
    assert std["α=(0.5) β=()"] == 0.0 and math.isnan(std["α=(0.9) β=()"])  # one seed; its only seed failed
    assert ours.run_std("I", "CIFAR-10 DIR.3", "consistency")["FedAvg"] == pytest.approx(math.sqrt(0.5))  # means 3, 2
    assert Numbers("fedmim").acc_std("I").isna().all().all()  # the paper prints no std here
    assert Numbers("cflag").acc_std("7").loc["C-FLAG", "IID Split-CIFAR10 Acc"] == 4.98  # "89.28±4.98"

    assert tolerance(2.0) == (2.0, "stated 2") and tolerance(2.0, 0.5, math.nan)[0] == 2.0
    tol, why = tolerance(2.0, 1.2, 1.0)
    assert tol == pytest.approx(2 * math.sqrt(1.2**2 + 1.0**2)) and why == "2σ = 3.12 > stated 2"
    wide = close("IID", "FedCAMS-sign", 85.0, "FedAMS", 88.0, 2.0, (1.2, 1.0))
    assert wide.ok and wide.text == "IID: FedCAMS-sign 85.00 − FedAMS 88.00 = -3.00 within ±3.12 (2σ = 3.12 > stated 2)"
    assert close("IID", "a", 85.0, "b", 88.0, 2.0).ok is False  # no std: the stated 2 points
    assert close("IID", "a", 85.0, "b", 88.0, 2.0, (0.0, 0.0)).text.endswith("outside ±2.00 (stated 2 ≥ 2σ = 0.00)")
    assert (
        close("c", "a", 90.0, "b", 80.0, 1.0, side="above").ok
        and not close("c", "a", 80.0, "b", 90.0, 1.0, side="above").ok
    )
    assert (
        close("c", "a", 80.0, "b", 90.0, 1.0, side="below").ok
        and not close("c", "a", 90.0, "b", 80.0, 1.0, side="below").ok
    )
    assert close("c", "a", math.nan, "b", 1.0, 1.0).ok is None
