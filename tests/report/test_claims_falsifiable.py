"""Every registered claim can both pass and fail, without training.

Each claim is judged on the paper's own numbers (where the paper prints them, every claim must hold
there) and on synthetic numbers: the paper's cells plus a made-up "world" that satisfies the claims
where the paper prints nothing (curves, ablation figures, store-only metrics), then transformed —
negated (orderings flip), stretched ×100 (differences outgrow tolerances) or offset by +1000
(ratios collapse towards 1). For every claim, some source must give ``holds`` and some ``fails``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

import pandas as pd
import pytest

from fedbench.report.claims import CLAIMS, Check, Numbers, StoreNumbers, Verdict, fewer, judge
from fedbench.report.reference import reference_frame

# Made-up scores (accuracy %) by label where the paper prints none: each claim's ordering holds.
_SCORES = {
    "FedAMS": 90.0,
    "FedCAMS-sign": 89.5,
    "FedCAMS-top1/64": 89.0,
    "FedCAMS-top1/128": 88.0,
    "FedCAMS-top1/256": 87.0,
    "FedAvg": 85.0,
    "FedAdam": 88.0,
    "FedYogi": 88.5,
    "FedAMSGrad": 88.0,
    "FedQVR m=5": 84.0,
    "FedQVR-E": 85.0,
    "FedCAMS": 70.0,
    "FedPAQ": 70.0,
    "C-FLAG": 80.0,
    "EWC-FL": 70.0,
    "MIFA": 70.0,
    "MIFAM": 70.0,
}
# Uplink bits per round and client (small units, so that an offset changes the ratios).
_BITS = {
    "FedAMS": 3200,
    "FedCAMS-sign": 101,
    "FedCAMS-top1/64": 100,
    "FedCAMS-top1/128": 50,
    "FedCAMS-top1/256": 25,
    "FedQVR": 1.0,
    "FedDyn": 10.67,
    "SCAFFOLD": 21.34,
}


def world(where: str, label: str, metric: str = "test_acc") -> float:
    """A value for ``label`` in table or scenario ``where`` under which every claim holds."""
    if metric == "bits_up":
        return _BITS.get(label, 10.67)
    if metric in ("consistency", "client_acc_std"):  # FedMIM C6a/C6b: FedMIM lowest
        return 1.0 if label == "FedMIM" else 2.0 + len(label) / 10
    if m := re.search(r" β1=([\d.]+) β2=([\d.]+)$", label):  # GradMA Fig. 5: β2 > 0 above β2 = 0, above MIFA(M)
        return 80.0 + 10 * float(m.group(2)) + float(m.group(1))
    if where.startswith("fedqvr_fig5_") and label in ("FedQVR", "FedQVR-E"):  # looser τ: higher (8a, 8b)
        tau = float(where.rsplit("tau", 1)[1])
        return (78.0 if label == "FedQVR" else 85.0) + tau
    if m := re.fullmatch(r"cflag_ti_cifar(10|100)_iid--per_task-(\d+)", where):  # C-FLAG Fig. 5: C10 falls, C100 rises
        return 80.0 + (1 if m.group(1) == "100" else -1) * int(m.group(2)) / 100
    if label in _SCORES:
        return _SCORES[label]
    if m := re.search(r" (?:S|E|B|m)=(\d+)$", label):  # more clients, epochs, bits, memory: higher
        return 80.0 + int(m.group(1)) / 10
    if m := re.search(r" a=([\d.]+)$", label):  # smaller a: higher
        return 85.0 - 10 * float(m.group(1))
    return 50.0


class Synthetic(StoreNumbers):
    """The paper's printed cells (a table it prints only as curves: ``world``), and every number through ``f``."""

    def __init__(self, paper: str, f: Callable[[float], float] = lambda v: v) -> None:
        Numbers.__init__(self, paper)
        self.store, self.scale, self.name, self.f = None, "synthetic", "synthetic", f

    def acc(self, table: str) -> pd.DataFrame:
        ref = reference_frame(self.paper, table).copy()
        if ref.isna().all().all():  # curves only; elsewhere a missing cell stays missing (e.g. a crashed run)
            ref = pd.DataFrame({col: {row: world(table, row) for row in ref.index} for col in ref.columns})
        return ref.map(self.f)

    def acc_std(self, table: str) -> pd.DataFrame:
        return self.acc(table) * 0.0

    def run_mean(self, table: str, column: str, metric: str) -> pd.Series:
        rows = reference_frame(self.paper, table).index
        scale = 0.01 if metric == "test_acc" else 1.0  # the store keeps accuracy as a fraction
        return pd.Series({r: self.f(world(table, r, metric) * scale) for r in rows})

    def run_std(self, table: str, column: str, metric: str) -> pd.Series:
        return self.run_mean(table, column, metric) * 0.0

    def scenario_acc(self, scenario: str, which: str = "final") -> pd.Series:
        return pd.Series({label: self.f(world(scenario, label)) for label in _labels(scenario)})

    def scenario_std(self, scenario: str, which: str = "final") -> pd.Series:
        return self.scenario_acc(scenario) * 0.0

    def continual_acc(self, scenario: str) -> pd.Series:
        return self.scenario_acc(scenario)


def _labels(scenario: str) -> list[str]:
    """The labels the claims read from an ablation scenario (as its config names them)."""
    if scenario.startswith("fedqvr_fig4_m5"):
        return ["FedQVR m=5"]
    if scenario.startswith("fedqvr_fig1_bits"):
        return [f"FedQVR B={b}" for b in (1, 2, 4, 8)]
    if scenario.startswith("fedqvr_fig1_a"):
        return [f"FedQVR a={a}" for a in (0.1, 0.3, 0.5, 0.7, 0.9)]
    if scenario.startswith("fedqvr_fig5"):
        return ["FedQVR-E", "FedQVR", "FedCAMS", "FedPAQ"]
    if scenario.startswith("gradma_fig5_betas"):
        betas = ("0.0", "0.1", "0.3", "0.5", "0.7", "0.9")
        return ["MIFA", "MIFAM", *(f"GradMA-S β1={b1} β2={b2}" for b1 in betas for b2 in betas)]
    if scenario.startswith("gradma_fig6_memory"):
        return [f"GradMA-S m={m}" for m in (0, 10, 20, 40, 60, 80, 100)]
    if scenario.startswith("cflag_fig3"):
        return ["C-FLAG", "EWC-FL"]
    if scenario.startswith("cflag_ti_") and "--per_task-" in scenario:
        return ["C-FLAG"]
    raise AssertionError(f"no synthetic labels for scenario {scenario!r}: add them to _labels")


TRANSFORMS = {
    "identity": lambda v: v,
    "negated": lambda v: -v,
    "stretched": lambda v: 100 * v,
    "offset": lambda v: v + 1000,
}
ALL = [(paper, c) for paper, claims in CLAIMS.items() for c in claims]


@pytest.mark.parametrize("paper, claim", ALL, ids=[f"{p}-{c.id}" for p, c in ALL])
def test_every_claim_can_hold_and_fail(paper: str, claim) -> None:
    on_paper = claim.check(Numbers(paper))
    assert on_paper.verdict in ("holds", "not reported"), f"the paper's own numbers: {on_paper.short()}"
    verdicts = {name: claim.check(Synthetic(paper, f)) for name, f in TRANSFORMS.items()}
    assert verdicts["identity"].verdict == "holds", verdicts["identity"].evidence
    unchecked = [c.text for c in verdicts["identity"].checks if c.ok is None]
    assert all("FedCOMGATE" in t for t in unchecked), unchecked  # only the paper's crashed FedCOMGATE HLU cells
    assert "fails" in {v.verdict for v in verdicts.values()}, {k: v.short() for k, v in verdicts.items()}


def test_every_claim_is_covered() -> None:
    assert {p for p, _ in ALL} == {"cflag", "fedcams", "fedmim", "fedqvr", "gradma"}
    kinds = {(p, c.id) for p, c in ALL if c.kind == "accounting"}
    assert kinds == {("fedcams", "B1"), ("fedqvr", "3b")}


def test_inconclusive_rounds_to_target() -> None:
    both = fewer("MNIST", "GradMA-S", math.inf, "FedAvg", math.inf)
    assert both.ok is None and both.inconclusive and "neither reached" in both.text
    assert fewer("MNIST", "GradMA-S", 40, "FedAvg", math.inf).ok is True
    assert fewer("MNIST", "GradMA-S", math.inf, "FedAvg", 40).ok is False  # FedAvg reached it, GradMA-S did not

    assert judge([both, both]).short() == "inconclusive (2 inconclusive)"
    mixed = judge([both, Check("b", True), Check("c", None)])
    assert mixed.verdict == "holds" and mixed.short() == "holds (1/1 hold; 1 inconclusive; 2 of 3 checked)"
    assert judge([both, Check("b", False)]).verdict == "fails"
    assert judge([Check("c", None)]).verdict == "not run"

    # GradMA 4 on numbers where GradMA-S and FedAvg never reach ac in one column.
    class Never(Synthetic):
        def acc(self, table: str) -> pd.DataFrame:
            frame = super().acc(table)
            if table == "2":
                frame.loc[["GradMA-S", "FedAvg"], "MNIST S=10 ω=0.01 ac=45%"] = math.inf
            return frame

    gradma4 = next(c for c in CLAIMS["gradma"] if c.id == "4").check(Never("gradma"))
    assert gradma4.short() == "fails (2/3 hold; 1 inconclusive)"  # GradMA-S never < FedAvgM's rounds fails
    assert "GradMA-S never, FedAvg never (rounds): neither reached the target, inconclusive" in gradma4.evidence


def test_verdict_states() -> None:
    from fedbench.report.claims import VERDICTS

    assert VERDICTS == ("holds", "fails", "inconclusive", "not run", "not reported")
    assert Verdict("inconclusive", (Check("x", None, inconclusive=True),)).inconclusive[0].text == "x"
