"""Regime indicators (issue 27): the quantities that decide whether a table column can show the effect
its paper measures, for our scenario at a scale and, where the paper states them, for the paper.

Per scenario (one table column at one scale):

- ``N``, ``S``, ``S/N``: ``clients.num``, ``clients.per_round`` and the participation ratio;
- ``K``, local steps per round: ``local.iterations``; with ``local.epochs`` E, ⌈E·n_i/B_i⌉ (B_i = min(B, n_i),
  as the engine counts them, :meth:`~fedbench.engine.batches.ClientBatcher.steps_for_epochs`) averaged over
  the clients of the first seed's partition (a continual run's first task); with ``local.random_epochs``
  [lo, hi], also averaged over E = lo … hi (each equally likely). It needs the dataset under ``data_dir``;
- FedAvg IID / non-IID: FedAvg's top accuracy (mean over seeds, %) on the *twins* of the scenario (:func:`twins`):
  the scenario as written, and its IID twin, the same with ``partition: {kind: iid}``; the heterogeneity
  penalty is IID − non-IID, in points. A continual scenario's twins are its Fine-FL entry (FedAvg on a task
  stream), and its accuracies are Acc, the average accuracy over the tasks after the last one;
- best: the best method's top accuracy (continual: Acc; mean over seeds, %) among the scenario's own runs in the
  store (its table's runs), and headroom = 100 − best, in points (methods separate only with room below the ceiling);
- forgetting: for a continual scenario, Fine-FL's Forgetting (%, :mod:`fedbench.continual.metrics`, mean over
  the seeds that recorded every task) from the scenario's own runs, else from its non-IID twin (a continual
  scenario's twins are its Fine-FL entry).

A value whose runs (or data) are missing is None and prints as "—": nothing is estimated.

The paper's side is data, ``fedbench/papers/<paper>/regime.yaml`` (:mod:`fedbench.report.regime_reference`);
:func:`paper_regime` lays it out as a row beside ours.
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedbench.report.reference import load_reference
from fedbench.report.regime_reference import paper_best, paper_values
from fedbench.report.tables import DASH, markdown_grid, summarize
from fedbench.rooms import paper_names
from fedbench.scenario import LocalSpec, RunSpec, Scenario, ScenarioError, parse_scenario
from fedbench.scenario.files import apply_scale, read_yaml
from fedbench.store import ResultsStore

TWINS = ("noniid", "iid")  # the twins' kinds, in the order they run
BASELINES = ("fedavg", "fine_fl")  # the twins' algorithm: the scenario's FedAvg entry, or a continual one's Fine-FL
FORGETTING_OF = "fine_fl"  # the algorithm whose forgetting a continual scenario reports


@dataclass(frozen=True)
class Regime:
    """One row of indicators; None where not known. Accuracies, penalty and headroom in percent (points)."""

    source: str  # "ours" or "paper"
    scenario: str
    data: str  # "dataset / model"
    n: int | None = None
    s: int | None = None
    k: float | None = None
    fedavg_iid: float | None = None
    fedavg_noniid: float | None = None
    best: float | None = None
    forgetting: float | None = None

    @property
    def ratio(self) -> float | None:
        return None if self.n is None or self.s is None else self.s / self.n

    @property
    def penalty(self) -> float | None:
        """FedAvg's heterogeneity penalty: IID − non-IID accuracy, in points."""
        return None if self.fedavg_iid is None or self.fedavg_noniid is None else self.fedavg_iid - self.fedavg_noniid

    @property
    def headroom(self) -> float | None:
        return None if self.best is None else 100.0 - self.best


# -- K: local steps per round --


def steps_per_round(local: LocalSpec, sizes: list[int]) -> float:
    """Mean local steps of a sampled client in one round, given the clients' sample counts ``sizes``
    (unused with ``local.iterations``)."""
    if local.iterations is not None:
        return float(local.iterations)
    if local.random_epochs is not None:
        low, high = local.random_epochs
        epochs = [float(e) for e in range(low, high + 1)]
    else:
        assert local.epochs is not None
        epochs = [local.epochs]
    from fedbench.engine.batches import epoch_steps  # the engine's own count (it imports torch)

    steps = [epoch_steps(n, local.batch_size, e) for e in epochs for n in sizes if n > 0]
    return sum(steps) / len(steps)


def client_sizes(spec: RunSpec, seed: int, data_dir: Path) -> list[int] | None:
    """The clients' sample counts in the run's partition (a continual run's first task), loaded on the CPU;
    None when the dataset is not under ``data_dir``."""
    import torch

    from fedbench.data import missing
    from fedbench.engine.setup import DataCache, partition_clients, task_setup

    if missing([spec.dataset], data_dir, False):
        return None
    data = DataCache(data_dir, False, torch.device("cpu")).get(spec)
    parts = partition_clients(spec, data, seed) if spec.continual is None else task_setup(spec, data, seed).parts[0]
    return [len(p) for p in parts]


def local_steps(sc: Scenario, data_dir: Path) -> float | None:
    """K of the scenario's first entry (every entry shares ``local``'s amount of work), None without its data."""
    spec = sc.runs[0]
    if spec.local.iterations is not None:
        return float(spec.local.iterations)
    sizes = client_sizes(spec, sc.seeds[0], data_dir)
    return None if sizes is None else steps_per_round(spec.local, sizes)


# -- the twins: FedAvg on the scenario as written and on an IID split of the same data --


def twin_name(name: str, kind: str, scale: str | None) -> str:
    """``gradma_mnist_s10_w0.01.tiny`` → ``gradma_mnist_s10_w0.01--regime-iid.tiny``: its own scenario name,
    so the twins never mix with the table's runs; the scale stays last (:func:`fedbench.store.scale_from_name`)."""
    suffix = f".{scale}" if scale not in (None, "paper") else ""
    return f"{name.removesuffix(suffix)}--regime-{kind}{suffix}"


def _baseline(entries: list[Any]) -> dict[str, Any]:
    """The scenario's FedAvg entry (its Fine-FL one in a continual table) as written, without a ``tune`` block."""
    for name in BASELINES:
        for entry in entries:
            if isinstance(entry, dict) and entry.get("name") == name:
                return {k: v for k, v in entry.items() if k != "tune"}
    return {"name": "fedavg", "label": "FedAvg"}


def twins(raw: dict[str, Any], source: str, scale: str | None) -> dict[str, Scenario]:
    """The twins of a raw scenario (as read, ``extends`` applied) at ``scale``, by kind: only its FedAvg
    entry, no ``tune`` or ``paper`` block (they fill no table cell), and for ``iid`` an IID partition;
    nothing else changes."""
    scaled = apply_scale(raw, scale, source)
    out = {}
    for kind in TWINS:
        twin = copy.deepcopy(scaled)
        twin.pop("tune", None)
        twin.pop("paper", None)
        twin["name"] = twin_name(str(scaled.get("name")), kind, scale)
        twin["algorithms"] = [_baseline(list(scaled.get("algorithms") or []))]
        if kind == "iid":
            twin["partition"] = {"kind": "iid"}
        out[kind] = parse_scenario(twin, source, [], None, at_scale=scale or "paper")
    return out


# -- what the store holds --


def _accuracies(store, scenario: str, continual: bool) -> dict[str, float]:
    """Each algorithm label's accuracy (%) in the store's scenario: its mean top accuracy over its usable seeds,
    or in a continual scenario its mean Acc (average accuracy after the last task) over its complete seeds."""
    if store is None:
        return {}
    runs = store.runs(scenario)
    if runs.empty:
        return {}
    if continual:
        from fedbench.report.forgetting import continual_summary

        summary, column = continual_summary(store, scenario), "acc_mean"
    else:
        summary, column = summarize(runs, store.metrics(runs["run_id"])), "top_acc_mean"
    return {str(a): 100.0 * float(v) for a, v in zip(summary["algorithm"], summary[column]) if not math.isnan(v)}


def _forgetting(store, scenario: str) -> float | None:
    """Fine-FL's mean Forgetting (%) in the store's continual scenario; None without a complete Fine-FL run."""
    from fedbench.report.forgetting import continual_summary

    runs = store.runs(scenario) if store is not None else None
    if runs is None or runs.empty:
        return None
    labels = {str(a) for a, s in zip(runs["algorithm"], runs["spec_json"]) if _algorithm(s) == FORGETTING_OF}
    summary = continual_summary(store, scenario)
    values = [float(v) for a, v in zip(summary["algorithm"], summary["forget_mean"]) if a in labels]
    values = [v for v in values if not math.isnan(v)]
    return 100.0 * values[0] if values else None


def _algorithm(spec_json: str) -> str:
    return str(json.loads(spec_json)["algorithm"]["name"])


def _only(accuracies: dict[str, float]) -> float | None:
    """A twin's FedAvg accuracy (its single entry)."""
    return next(iter(accuracies.values()), None)


def _data(sc: Scenario) -> str:
    spec = sc.runs[0]
    return f"{spec.dataset['name']} / {spec.model['name']}"


def measure(sc: Scenario, twin: dict[str, Scenario], store, data_dir: Path) -> Regime:
    """Our indicators for one scenario: from its spec, its data (K) and the store (None: no store)."""
    continual = sc.runs[0].continual is not None
    iid, noniid = (_only(_accuracies(store, twin[k].name, continual)) for k in ("iid", "noniid"))
    best = max(_accuracies(store, sc.name, continual).values(), default=None)
    forgetting = None
    if continual:  # the table's Fine-FL, else the non-IID twin's (Fine-FL as written)
        forgetting = _forgetting(store, sc.name)
        forgetting = _forgetting(store, twin["noniid"].name) if forgetting is None else forgetting
    return Regime(
        "ours",
        sc.name,
        _data(sc),
        sc.clients.num,
        sc.clients.per_round,
        local_steps(sc, data_dir),
        iid,
        noniid,
        best,
        forgetting,
    )


# -- the paper's side --


def paper_regime(sc: Scenario, written: Scenario | None) -> Regime | None:
    """The paper's row for a scenario whose ``paper`` block names a reference table with a regime entry or an
    accuracy metric; ``written``: the scenario as written (its dataset and model are the paper's)."""
    ref = sc.paper
    if ref is None or ref.table is None or ref.column is None:
        return None
    paper, table, column = ref.name, str(ref.table), str(ref.column)
    if paper not in paper_names() or table not in load_reference(paper)["tables"]:
        return None  # a paper or table without reference numbers
    stated, best = paper_values(paper, table, column), paper_best(paper, table, column)
    if not stated and best is None:
        return None

    def num(key: str) -> float | None:
        return None if key not in stated else float(stated[key])

    n, s = num("N"), num("S")
    return Regime(
        "paper",
        f"{paper} Table {table}, {column}",
        _data(written) if written is not None else DASH,
        None if n is None else int(n),
        None if s is None else int(s),
        num("K"),
        num("fedavg_iid"),
        num("fedavg_noniid"),
        best,
        num("forgetting"),
    )


# -- the command: columns in, rows out --


@dataclass(frozen=True)
class Column:
    """One table column: the scenario at the scale, its twins, and the file as written (the paper's data)."""

    scenario: Scenario
    twins: dict[str, Scenario]
    written: Scenario | None


def load_column(path: Path, scale: str | None) -> Column:
    """The column of a scenario file at ``scale``; a bad file or scale raises :class:`ScenarioError`."""
    raw = read_yaml(path)
    sc = parse_scenario(raw, str(path), [], scale)
    try:
        written = sc if scale in (None, "paper") else parse_scenario(raw, str(path), [], None)
    except ScenarioError:  # the paper's data only labels the paper's row
        written = None
    return Column(sc, twins(raw, str(path), scale), written)


def regime_rows(columns: list[Column], store: ResultsStore | None, data_dir: Path) -> list[Regime]:
    """Per column, the paper's row (where it states something) and ours."""
    rows = []
    for c in columns:
        paper = paper_regime(c.scenario, c.written)
        rows += [*([paper] if paper else []), measure(c.scenario, c.twins, store, data_dir)]
    return rows


# -- the table --

HEADERS = [
    "scenario",
    "source",
    "data / model",
    "N",
    "S",
    "S/N",
    "K",
    "FedAvg IID",
    "FedAvg non-IID",
    "penalty",
    "best top acc.",
    "headroom",
    "forgetting",
]
NOTE = (
    "Accuracies in %, penalty and headroom in points. K: local steps per round (mean over clients); FedAvg IID / "
    "non-IID: FedAvg's top accuracy (mean over seeds) on the scenario's IID twin and on the scenario as written "
    "(`--regime-iid` / `--regime-noniid` runs; continual scenarios: Fine-FL's Acc; paper: as its table prints "
    "them); penalty = IID − non-IID; best top acc.: the best method among the scenario's runs in the store "
    "(continual: best Acc; paper: the best printed value of the column); headroom = 100 − best; forgetting: "
    "Fine-FL's (continual scenarios). —: not measured (no run) or not stated by the paper."
)


def _num(value: float | None, digits: int = 2, sign: bool = False) -> str:
    """``value`` with ``digits`` decimals (a sign with ``sign``), "—" for None."""
    return DASH if value is None else f"{value:{'+' if sign else ''}.{digits}f}"


def _steps(k: float | None) -> str:
    """K as an integer when it is one (``local.iterations``), else to one decimal (a mean over clients)."""
    return DASH if k is None else f"{k:.0f}" if float(k).is_integer() else f"{k:.1f}"


def cells(r: Regime) -> list[str]:
    return [
        r.scenario,
        r.source,
        r.data,
        _num(r.n, 0),
        _num(r.s, 0),
        _num(r.ratio, 2),
        _steps(r.k),
        _num(r.fedavg_iid),
        _num(r.fedavg_noniid),
        _num(r.penalty, sign=True),
        _num(r.best),
        _num(r.headroom),
        _num(r.forgetting),
    ]


def markdown(rows: list[Regime]) -> str:
    """The indicators as a Markdown table, the definitions under it."""
    return markdown_grid(HEADERS, [cells(r) for r in rows], ["left"] * 3 + ["right"] * 10) + f"\n{NOTE}\n"
