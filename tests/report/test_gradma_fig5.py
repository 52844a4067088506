"""GradMA's (β1, β2) grid (Figs. 5/21) and MOON's per-dataset μ: the scenario files say what the claim
reads, the CIFAR-10 block differs from `_table.yaml` only in MOON's μ, and claim 7 can hold and fail."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from fedbench.report.claims import CLAIMS, Numbers, StoreNumbers
from fedbench.scenario import load_scenario, read_yaml

GRADMA = Path(__file__).resolve().parents[2] / "configs" / "gradma"
BETAS = ("0.0", "0.1", "0.3", "0.5", "0.7", "0.9")
FIG5 = {"mnist_w0.01": "mnist_s10_w0.01", "cifar10_w1.0": "cifar10_s10_w1.0"}
SCENARIOS = ("gradma_fig5_betas_mnist_w0.01", "gradma_fig5_betas_cifar10_w1.0")


def cell(b1: str, b2: str) -> str:
    return f"GradMA-S β1={b1} β2={b2}"


@pytest.mark.parametrize("grid,column", FIG5.items())
def test_fig5_files_are_their_table1_column_with_the_grid(grid: str, column: str) -> None:
    for scale in ("paper", "small", "tiny"):
        fig5, col = (
            load_scenario(GRADMA / f"fig5_betas_{grid}.yaml", scale=scale),
            load_scenario(GRADMA / f"{column}.yaml", scale=scale),
        )
        assert (
            fig5.name == f"gradma_fig5_betas_{grid}" + ("" if scale == "paper" else f".{scale}") and fig5.paper is None
        )
        skip = {"name", "description", "paper", "algorithms", "tune"}  # the ablation runs at fixed settings
        assert fig5.model_dump(exclude=skip) == col.model_dump(
            exclude=skip
        )  # same data, model, ω, S = 10, rounds, seeds
    algos = {a.label: a for a in fig5.algorithms}
    assert list(algos) == ["MIFA", "MIFAM", *(cell(b1, b2) for b1 in BETAS for b2 in BETAS)]
    assert fig5.clients.per_round == 10 and algos["MIFAM"].server == {"momentum": 0.5}
    for b1 in BETAS:
        for b2 in BETAS:
            a = algos[cell(b1, b2)]
            assert a.name == "gradma_s" and a.params() == {"beta1": float(b1), "beta2": float(b2), "memory_size": 100}


def moon_mu(path: Path) -> dict[str, float]:
    return {
        a.label: a.params()["mu"] for a in load_scenario(path, scale="tiny").algorithms if a.name in ("moon", "moonm")
    }


def test_moon_mu_follows_moons_paper_per_dataset() -> None:
    base, c10 = read_yaml(GRADMA / "_table.yaml")["algorithms"], read_yaml(GRADMA / "_table_cifar10.yaml")["algorithms"]
    assert [{**a, "mu": None} if a["name"].startswith("moon") else a for a in base] == [
        {**a, "mu": None} if a["name"].startswith("moon") else a for a in c10
    ]  # only MOON's μ differs
    columns = sorted(GRADMA.glob("[a-z]*_s*_w*.yaml"))
    assert len(columns) == 14  # the Table 1 columns
    for path in columns:
        assert moon_mu(path) == (
            {"MOON": 5.0, "MOONM": 5.0} if path.name.startswith("cifar10_") else {"MOON": 1.0, "MOONM": 1.0}
        ), path.name


class Tops(StoreNumbers):
    """Top accuracies (%) per scenario and label, as the store would give them."""

    def __init__(self, tops: dict[str, dict[str, float]]) -> None:
        self.tops, self.name = tops, "ours (test)"

    def scenario_acc(self, scenario: str, which: str = "final") -> pd.Series:
        assert which == "top"
        return pd.Series(self.tops.get(scenario, {}), dtype=float)


def grid(acc) -> dict[str, float]:
    return {"MIFA": 50.0, "MIFAM": 51.0, **{cell(b1, b2): acc(float(b1), float(b2)) for b1 in BETAS for b2 in BETAS}}


def claim7():
    (c,) = [c for c in CLAIMS["gradma"] if c.id == "7"]
    return c.check


def test_claim7_holds_when_the_grid_looks_like_the_papers() -> None:
    paper_like = grid(lambda b1, b2: 60 + 10 * b2 - 5 * (b1 - 0.5) ** 2)  # β2 > 0 better; β2 = 0 still > MIFA(M)
    v = claim7()(Tops({s: paper_like for s in SCENARIOS}))
    assert v.verdict == "holds" and v.short() == "holds (28/28 hold)"
    assert "MNIST ω=0.01: β2 > 0 cells above their β1's β2 = 0 cell (of 30) 30 > half 15" in [c.text for c in v.checks]


def test_claim7_fails_and_is_not_run_or_not_reported() -> None:
    no_memory_gain = grid(lambda b1, b2: 55 - 10 * b2)  # β2 = 0 is the best column
    v = claim7()(Tops({SCENARIOS[0]: no_memory_gain}))
    assert v.verdict == "fails" and v.short() == "fails (12/14 hold; 14 of 28 checked)"  # CIFAR-10 not run
    below_mifa = grid(lambda b1, b2: 49 + 10 * b2)
    assert claim7()(Tops({s: below_mifa for s in SCENARIOS})).verdict == "fails"
    assert claim7()(Tops({})).verdict == "not run"
    assert claim7()(Numbers("gradma")).verdict == "not reported"
    half = grid(lambda b1, b2: 60 + (1 if b1 < 0.5 else -1) * (b2 > 0))  # exactly half the β2 > 0 cells win: not "most"
    texts = [c.text for c in claim7()(Tops({SCENARIOS[0]: half})).checks if not c.ok and c.ok is not None]
    assert texts == ["MNIST ω=0.01: β2 > 0 cells above their β1's β2 = 0 cell (of 30) 15 ≤ half 15"]
