"""``fedbench regime`` (fedbench/report/regime.py, regime_reference.py): K from iterations and epochs, S/N,
the twins, the penalty, best and headroom from a store of tiny runs (against the store's own rows), "—"
where runs are missing, the paper's side (regime.yaml) and the command's exit codes."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from fedbench.cli import app
from fedbench.report import regime, regime_reference
from fedbench.report.reference import column_specs, printed_value, reference_table
from fedbench.rooms import paper_names, room_dir
from fedbench.runs import run_scenario
from fedbench.scenario import LocalSpec, parse_scenario
from fedbench.store import DB_NAME, ResultsStore
from tests.factories import tiny_scenario

runner = CliRunner()
DATA = Path("data")  # the tiny scenarios' digits are offline: nothing is read from it
PAPER = {"name": "gradma", "table": "1", "column": "MNIST S=10 ω=0.01"}


def raw_column(**top) -> dict:
    """A tiny table column: FedAvg (tuned) and FedProx, two seeds, a paper cell."""
    algorithms = [
        {"name": "fedavg", "label": "FedAvg", "tune": {"space": {"local.lr": [0.05, 0.1]}}},
        {"name": "fedprox", "label": "FedProx", "mu": 0.01},
    ]
    return tiny_scenario(name="col", algorithms=algorithms, paper=PAPER, **{"seeds": [0, 1], **top})


def column(raw: dict) -> regime.Column:
    return regime.Column(parse_scenario(raw), regime.twins(raw, "col.yaml", None), None)


def test_k_from_iterations_epochs_and_random_epochs() -> None:
    sizes = [10, 40, 33]
    assert regime.steps_per_round(LocalSpec(iterations=7, batch_size=16), sizes) == 7.0
    # ⌈E·n_i/min(B, n_i)⌉: 10 → 1, 40 → 3, 33 → 3
    assert regime.steps_per_round(LocalSpec(epochs=1, batch_size=16), sizes) == pytest.approx(7 / 3)
    assert regime.steps_per_round(LocalSpec(epochs=2, batch_size=16), sizes) == pytest.approx((2 + 5 + 5) / 3)
    # E uniform on {1, 2}: 40 samples → 3 or 5 steps
    assert regime.steps_per_round(LocalSpec(random_epochs=(1, 2), batch_size=16), [40]) == 4.0


def test_k_of_a_scenario_from_its_partition() -> None:
    sc = parse_scenario(tiny_scenario(local={"iterations": 3, "batch_size": 16, "lr": 0.1}))
    assert regime.local_steps(sc, DATA) == 3.0
    # an IID split of digits' 1,347 training samples over 8 clients: 168 or 169 each → ⌈168/16⌉ = ⌈169/16⌉ = 11
    raw = tiny_scenario(partition={"kind": "iid"}, local={"epochs": 1, "batch_size": 16, "lr": 0.1})
    assert regime.local_steps(parse_scenario(raw), DATA) == 11.0
    raw["local"]["epochs"] = 0.5  # ⌈0.5·168/16⌉ = 6, ⌈0.5·169/16⌉ = 6
    assert regime.local_steps(parse_scenario(raw), DATA) == 6.0


def test_participation_ratio_and_signs() -> None:
    r = regime.Regime("ours", "x", "d / m", n=100, s=5, fedavg_iid=90.0, fedavg_noniid=60.5, best=80.0)
    assert r.ratio == 0.05 and r.penalty == 29.5 and r.headroom == 20.0
    cells = dict(zip(regime.HEADERS, regime.cells(r)))
    assert (cells["S/N"], cells["penalty"], cells["headroom"], cells["K"], cells["forgetting"]) == (
        "0.05",
        "+29.50",
        "20.00",
        "—",
        "—",
    )
    assert regime.Regime("ours", "x", "d").ratio is None


def test_twins_differ_from_the_scenario_only_in_name_partition_and_paper() -> None:
    raw = raw_column()
    sc, twin = parse_scenario(raw), regime.twins(raw, "col.yaml", None)
    assert [t.name for t in twin.values()] == ["col--regime-noniid", "col--regime-iid"]
    assert all(len(t.runs) == 1 and t.tune is None and t.paper is None for t in twin.values())
    assert twin["noniid"].seeds == sc.seeds == [0, 1]
    fedavg, noniid, iid = (s.model_dump(mode="json") for s in (sc.runs[0], twin["noniid"].runs[0], twin["iid"].runs[0]))
    assert {k for k in noniid if noniid[k] != iid[k]} == {"scenario", "partition"}
    assert iid["partition"]["kind"] == "iid" and noniid["partition"] == fedavg["partition"]
    assert {k for k in fedavg if fedavg[k] != noniid.get(k)} == {"scenario", "paper"}
    assert regime.twin_name("gradma_mnist_s10_w0.01.tiny", "iid", "tiny") == "gradma_mnist_s10_w0.01--regime-iid.tiny"


def test_a_continual_scenario_twins_on_fine_fl() -> None:
    raw = tiny_scenario(
        {"clients.num": 3, "clients.per_round": 3},
        rounds=4,
        continual={"tasks": 2, "classes_per_task": 3, "rounds_per_task": 2},
        algorithms=[{"name": "ewc_fl", "label": "EWC-FL"}, {"name": "fine_fl", "label": "Fine-FL"}],
    )
    twin = regime.twins(raw, "c.yaml", None)
    assert [t.runs[0].algorithm["name"] for t in twin.values()] == ["fine_fl", "fine_fl"]


def _top(store: ResultsStore, scenario: str) -> dict[str, float]:
    """Each label's mean over seeds of the best test accuracy (%), read straight from the store."""
    runs = store.runs(scenario)
    metrics = store.metrics(runs["run_id"])
    best = metrics.groupby("run_id")["test_acc"].max()
    return {a: 100 * float(np.mean([best[r] for r in g["run_id"]])) for a, g in runs.groupby("algorithm")}


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[regime.Column, ResultsStore]:
    """The column's own runs and both twins, 3 rounds × 2 seeds each, in one store."""
    out = tmp_path_factory.mktemp("regime")
    c = column(raw_column())
    for sc in (c.scenario, *c.twins.values()):
        run_scenario(sc, out, quiet=True)
    return c, ResultsStore(out, read_only=True)


def test_indicators_from_a_store(trained) -> None:
    c, store = trained
    r = regime.measure(c.scenario, c.twins, store, DATA)
    table = _top(store, "col")
    iid, noniid = _top(store, "col--regime-iid")["FedAvg"], _top(store, "col--regime-noniid")["FedAvg"]
    assert (r.n, r.s, r.ratio, r.k) == (8, 3, 3 / 8, 3.0)
    assert r.fedavg_iid == pytest.approx(iid) and r.fedavg_noniid == pytest.approx(noniid)
    assert r.penalty == pytest.approx(iid - noniid)
    assert r.best == pytest.approx(max(table.values())) and r.headroom == pytest.approx(100 - max(table.values()))
    assert r.forgetting is None  # not a continual scenario


def test_missing_runs_give_dashes(trained, tmp_path: Path) -> None:
    c, store = trained
    r = regime.measure(c.scenario, c.twins, None, DATA)  # no store
    assert (r.fedavg_iid, r.fedavg_noniid, r.penalty, r.best, r.headroom) == (None,) * 5
    assert r.n == 8 and r.k == 3.0  # from the spec alone
    only_table = tmp_path / "only_table"
    run_scenario(c.scenario, only_table, quiet=True, only=["FedAvg"])
    r = regime.measure(c.scenario, c.twins, ResultsStore(only_table, read_only=True), DATA)
    assert r.penalty is None and r.fedavg_iid is None and r.best is not None
    cells = dict(zip(regime.HEADERS, regime.cells(r)))
    assert cells["FedAvg IID"] == cells["penalty"] == "—"


def _matrix(store: ResultsStore, scenario: str) -> np.ndarray:
    """The accuracy matrix of the scenario's one run, from its logs (row i: after task i)."""
    rows = {}
    for extra in store.metrics(store.runs(scenario)["run_id"])["extra"].dropna():
        logs = json.loads(extra)
        if "task_acc" in logs:
            rows[logs["task"]] = logs["task_acc"]
    return np.array([rows[i] for i in sorted(rows)])


def test_forgetting_of_fine_fl(tmp_path: Path) -> None:
    raw = tiny_scenario(
        {"clients.num": 3, "clients.per_round": 3},
        name="cl",
        rounds=4,
        continual={"tasks": 2, "classes_per_task": 3, "rounds_per_task": 2},
        algorithms=[{"name": "fine_fl", "label": "Fine-FL"}],
    )
    sc, twin = parse_scenario(raw), regime.twins(raw, "cl.yaml", None)
    assert regime.measure(sc, twin, None, DATA).forgetting is None
    run_scenario(sc, tmp_path / "table", quiet=True)
    store = ResultsStore(tmp_path / "table", read_only=True)
    a, r = _matrix(store, "cl"), regime.measure(sc, twin, store, DATA)
    # Forgetting (1/(S−1)) Σ_{i<S} (a_ii − a_Si) with S = 2; best: the table's Acc, the last row's mean
    assert r.forgetting == pytest.approx(100 * (a[0, 0] - a[1, 0])) and r.best == pytest.approx(100 * a[1].mean())
    assert r.fedavg_noniid is None
    run_scenario(twin["noniid"], tmp_path / "twin", quiet=True)  # without the table's runs: the twin's Fine-FL
    store = ResultsStore(tmp_path / "twin", read_only=True)
    a, r = _matrix(store, "cl--regime-noniid"), regime.measure(sc, twin, store, DATA)
    assert r.forgetting == pytest.approx(100 * (a[0, 0] - a[1, 0]))
    assert r.fedavg_noniid == pytest.approx(100 * a[1].mean()) and r.best is None  # continual: Acc, not top


def test_paper_side_and_the_table(trained) -> None:
    c, _ = trained
    paper = regime.paper_regime(c.scenario, None)
    assert paper is not None
    assert (paper.n, paper.s, paper.k, paper.fedavg_noniid, paper.fedavg_iid) == (100, 10, 5.0, 46.19, None)
    assert paper.best == 77.97 and paper.headroom == pytest.approx(22.03)  # GradMA's row of the column
    for ref in ({"name": "nope", "table": "1", "column": "x"}, {**PAPER, "table": "9"}):  # no reference numbers
        assert regime.paper_regime(parse_scenario(tiny_scenario(paper=ref)), None) is None
    text = regime.markdown([paper])
    assert "| gradma Table 1, MNIST S=10 ω=0.01 | paper" in text and "22.03" in text


@pytest.mark.parametrize("paper", [p for p in paper_names() if (room_dir(p) / regime_reference.REGIME_FILE).is_file()])
def test_regime_files_agree_with_the_reference(paper: str) -> None:
    """Every room's regime.yaml reads (known columns and keys), and its FedAvg numbers (a continual table's
    Fine-FL Acc and Forget) are the reference's cells of the setting."""
    data = regime_reference.read_regime(paper)
    for table, entry in data["tables"].items():
        ref = reference_table(paper, table)
        label = "FedAvg" if "FedAvg" in ref["rows"] else "Fine-FL"
        for col, values in (entry.get("columns") or {}).items():
            if "fedavg_noniid" in values:
                assert values["fedavg_noniid"] == _cell(paper, table, label, col, regime_reference.BEST_METRICS), col
            if "forgetting" in values:
                assert values["forgetting"] == _cell(paper, table, label, col, ("cl_forget",)), col
            if "fedavg_iid" in values and label == "Fine-FL":  # the same dataset's IID setting
                iid = col.replace("non-IID", "IID")
                assert values["fedavg_iid"] == _cell(paper, table, label, iid, ("cl_acc",)), col


def _cell(paper: str, table: str, label: str, setting: str, metrics: tuple[str, ...]) -> float:
    """The reference's printed number for ``label`` in the column of ``setting`` whose metric is one of ``metrics``."""
    i = next(i for i, c in enumerate(column_specs(paper, table)) if c.setting == setting and c.metric in metrics)
    return printed_value(reference_table(paper, table)["rows"][label][i])


def test_a_bad_regime_file_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    room = tmp_path / "gradma_copy"
    room.mkdir()
    (room / "reference.yaml").write_text((room_dir("gradma") / "reference.yaml").read_text(encoding="utf-8"))
    (room / "regime.yaml").write_text(yaml.safe_dump({"tables": {"1": {"columns": {"MNIST": {"S": 10}}}}}))
    monkeypatch.setenv("FEDBENCH_ROOMS", str(tmp_path))
    with pytest.raises(ValueError, match="not a column of its reference table"):
        regime_reference.read_regime("gradma_copy")
    (room / "regime.yaml").write_text(yaml.safe_dump({"tables": {"1": {"all": {"rounds": 10}}}}))
    with pytest.raises(ValueError, match="expected a number under one of N, S, K"):
        regime_reference.read_regime("gradma_copy")


def test_the_command(tmp_path: Path) -> None:
    path = tmp_path / "col.yaml"
    raw = raw_column(scales={"tiny": {"rounds": 2}}, seeds=[0])
    path.write_text(yaml.safe_dump(raw, allow_unicode=True), encoding="utf-8")
    out = tmp_path / "results"
    result = runner.invoke(app, ["regime", str(path), "--out", str(out)], terminal_width=250)
    assert result.exit_code == 0, result.output
    assert not (out / DB_NAME).exists()  # reading only: no store is created
    assert "| col " in result.output and "| paper" in result.output

    result = runner.invoke(app, ["regime", str(path), "--scale", "tiny", "--out", str(out), "--run-twins"])
    assert result.exit_code == 0, result.output
    store = ResultsStore(out, read_only=True)
    assert sorted(set(store.runs()["scenario"])) == ["col--regime-iid.tiny", "col--regime-noniid.tiny"]
    row = next(line for line in result.output.splitlines() if line.startswith("| col.tiny"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    iid, noniid, penalty = (float(cells[regime.HEADERS.index(h)]) for h in ("FedAvg IID", "FedAvg non-IID", "penalty"))
    assert math.isclose(penalty, iid - noniid, abs_tol=0.011)
    assert cells[regime.HEADERS.index("best top acc.")] == "—"  # the table's own runs are not in the store


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["missing.yaml"], "missing.yaml"),
        (["{col}", "--scale", "huge"], "unknown scale"),
        (["{col}", "--run-twins", "--device", "cuda:9"], "--device"),
    ],
)
def test_bad_input_exits_2_and_writes_nothing(tmp_path: Path, args: list[str], says: str) -> None:
    path = tmp_path / "col.yaml"
    path.write_text(yaml.safe_dump(raw_column(), allow_unicode=True), encoding="utf-8")
    out = tmp_path / "results"
    result = runner.invoke(app, ["regime", *[a.format(col=path) for a in args], "--out", str(out)], terminal_width=250)
    assert result.exit_code == 2 and says in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1 and not out.exists()
