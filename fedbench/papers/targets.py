"""A paper's tables and figures as typed targets: which scenario files to run, with which options per
scale, and which report steps then write the files (``fedbench reproduce``, :mod:`.reproduce`).

A :class:`Target` names its scenario (or grid) files, the client executor per scale and its steps;
``needs`` are targets done first (a table computed from another table's runs). Steps name
scenarios by their file, never by a built name: the name at a scale comes from resolving the
file. Every step writes exactly what the matching ``fedbench`` report command writes::

    Compare("1")                    fedbench compare --paper P --table 1 --scale S
    ScenarioTable(file)             fedbench table --scenario <file's scenario at S>
    Plot(file, x=("round",), ...)   fedbench plot --scenario … --x round [--metric m] [--algorithm a]… [--name n]
    Continual(file | None)          fedbench continual --scenario … (None: each scenario the target runs)
    ContinualSweep(grid)            fedbench continual --sweep GRID --scale S
    Claims()                        fedbench claims --paper P --scale S
    Partitions(files, name)         fedbench partitions FILE... --scale S --name <paper>_<name>_<S>
    Tuning()                        fedbench tuning --paper P --scale S
    Bits(model, …) / Costs()        fedbench bits … --paper P / fedbench costs --paper P

``report_files`` names, without writing, the Markdown tables and PNG figures a step writes: what
``fedbench report --paper P --scale S`` shows, in the targets' order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Protocol

from rich.console import Console

from fedbench.papers import paper_part
from fedbench.report import bits
from fedbench.report.claims import write_claims
from fedbench.report.claims.base import claims_name
from fedbench.report.forgetting import continual_stem, write_continual
from fedbench.report.paper import comparison_stem, write_comparison
from fedbench.report.partition_plot import partition_name, write_partitions
from fedbench.report.plots import figure_name, plot_curves
from fedbench.report.sweep_summary import sweep_stem, write_sweep
from fedbench.report.tables import file_stem, write_tables
from fedbench.report.tuning_table import paper_tuning_stem, write_paper_tuning
from fedbench.scenario import Scenario, load_scenario
from fedbench.store import ResultsStore
from fedbench.sweeps.grid import expand_file

SCALES = ("paper", "small", "tiny")  # the scales every paper's scenario files define


class StepFailed(RuntimeError):
    """A report step whose check did not pass (``bits``/``costs`` disagreeing with the paper)."""


@dataclass(frozen=True)
class Context:
    """Where a target's steps read and write."""

    paper: str
    scale: str
    out: Path
    tables_dir: Path
    figures_dir: Path
    console: Console
    run_files: tuple[str, ...] = ()  # the target's scenario files (for Continual())
    room_files: tuple[str, ...] = ()  # every target's scenario files (for Tuning(): the paper's tuned scenarios)
    data_dir: Path = Path("data")  # real datasets (for Partitions(), which reads a dataset's labels)

    @property
    def store(self) -> ResultsStore:
        return ResultsStore(self.out)


def scenario_names(file: str, scale: str) -> list[str]:
    """The scenario name(s) of a scenario or grid file at ``scale``, in order."""
    return list(dict.fromkeys(p.scenario.name for p in expand_file(file, scale)))


class Step(Protocol):
    """One report command of a target."""

    def describe(self, ctx: Context) -> str:
        """The command it stands for, for ``--dry-run`` and ``--list``."""

    def run(self, ctx: Context) -> list[Path]:
        """Write the files; return their paths."""

    def report_files(self, ctx: Context) -> list[Path]:
        """The Markdown tables and PNG figures ``run`` writes (not its .csv/.tex), without writing them."""


@dataclass(frozen=True)
class Compare:
    """``paper / ours`` in the layout of the paper's table ``table`` (its reference numbers)."""

    table: str

    def describe(self, ctx: Context) -> str:
        return f"compare --paper {ctx.paper} --table {self.table} --scale {ctx.scale}"

    def run(self, ctx: Context) -> list[Path]:
        return write_comparison(ctx.store, ctx.paper, self.table, ctx.tables_dir, ctx.scale)

    def report_files(self, ctx: Context) -> list[Path]:
        return [ctx.tables_dir / f"{comparison_stem(ctx.paper, self.table, ctx.scale)}.md"]


@dataclass(frozen=True)
class ScenarioTable:
    """The accuracy / rounds / bits table of one scenario (a figure's numbers)."""

    file: str

    def describe(self, ctx: Context) -> str:
        return "table " + " ".join(f"--scenario {s}" for s in scenario_names(self.file, ctx.scale))

    def run(self, ctx: Context) -> list[Path]:
        return [p for s in scenario_names(self.file, ctx.scale) for p in write_tables(ctx.store, ctx.tables_dir, s)]

    def report_files(self, ctx: Context) -> list[Path]:
        return [ctx.tables_dir / f"{file_stem(s)}.md" for s in scenario_names(self.file, ctx.scale)]


@dataclass(frozen=True)
class Plot:
    """Curves of one scenario: ``metric`` against each axis of ``x``, only ``algorithms`` (in that
    order) when given, ``name`` inserted in the file name."""

    file: str
    x: tuple[str, ...] = ("round",)
    metric: str = "test_acc"
    algorithms: tuple[str, ...] = ()
    name: str | None = None

    def describe(self, ctx: Context) -> str:
        extra = "".join(f" --algorithm {a!r}" for a in self.algorithms) + (f" --name {self.name}" if self.name else "")
        return " ; ".join(
            f"plot --scenario {s} --x {x} --metric {self.metric}{extra}"
            for s in scenario_names(self.file, ctx.scale)
            for x in self.x
        )

    def run(self, ctx: Context) -> list[Path]:
        algorithms = list(self.algorithms) or None
        return [
            p
            for s in scenario_names(self.file, ctx.scale)
            for x in self.x
            for p in plot_curves(ctx.store, ctx.figures_dir, s, x, self.metric, algorithms, self.name)
        ]

    def report_files(self, ctx: Context) -> list[Path]:
        return [
            ctx.figures_dir / figure_name(s, x, self.metric, self.name)
            for s in scenario_names(self.file, ctx.scale)
            for x in self.x
        ]


@dataclass(frozen=True)
class Partitions:
    """One figure of the partitions the runs of ``files`` use (seed 0), a panel per file (GradMA's Fig. 8)."""

    files: tuple[str, ...]
    name: str

    def _stem(self, ctx: Context) -> str:
        return f"{ctx.paper}_{self.name}_{ctx.scale}"

    def describe(self, ctx: Context) -> str:
        return f"partitions {' '.join(self.files)} --scale {ctx.scale} --name {self._stem(ctx)}"

    def run(self, ctx: Context) -> list[Path]:
        specs = [load_scenario(f, (), ctx.scale).runs[0] for f in self.files]
        return [write_partitions(specs, ctx.figures_dir, self._stem(ctx), data_dir=ctx.data_dir)]

    def report_files(self, ctx: Context) -> list[Path]:
        return [ctx.figures_dir / partition_name(self._stem(ctx))]


@dataclass(frozen=True)
class Continual:
    """Acc / Forgetting table, accuracy-matrix heat map and per-task curve of a continual scenario;
    ``file=None``: of every scenario the target runs."""

    file: str | None = None

    def _names(self, ctx: Context) -> list[str]:
        files = ctx.run_files if self.file is None else (self.file,)
        return list(dict.fromkeys(s for f in files for s in scenario_names(f, ctx.scale)))

    def describe(self, ctx: Context) -> str:
        return " ; ".join(f"continual --scenario {s}" for s in self._names(ctx))

    def run(self, ctx: Context) -> list[Path]:
        return [p for s in self._names(ctx) for p in write_continual(ctx.store, ctx.tables_dir, ctx.figures_dir, s)]

    def report_files(self, ctx: Context) -> list[Path]:
        return [
            p
            for s in self._names(ctx)
            for p in (
                ctx.tables_dir / f"{continual_stem(s)}.md",
                ctx.figures_dir / f"{continual_stem(s)}_matrix.png",
                ctx.figures_dir / f"{continual_stem(s)}_curve.png",
            )
        ]


@dataclass(frozen=True)
class ContinualSweep:
    """A continual grid file's points in one table and figure: Acc and Forgetting against the varied value."""

    file: str

    def describe(self, ctx: Context) -> str:
        return f"continual --sweep {self.file} --scale {ctx.scale}"

    def run(self, ctx: Context) -> list[Path]:
        return write_sweep(ctx.store, self.file, ctx.scale, ctx.tables_dir, ctx.figures_dir)

    def report_files(self, ctx: Context) -> list[Path]:
        stem = sweep_stem(self.file, ctx.scale)
        return [ctx.tables_dir / f"{stem}.md", ctx.figures_dir / f"{stem}.png"]


def tuned_scenarios(files: tuple[str, ...], scale: str) -> list[Scenario]:
    """The scenarios of ``files`` (a room's run files) that are tuned at ``scale``, in order."""
    return [p.scenario for f in dict.fromkeys(files) for p in expand_file(f, scale) if p.scenario.tuned]


@dataclass(frozen=True)
class Tuning:
    """The paper's tuning table at the scale: per method and column, the chosen values, the trial
    count, the best and runner-up scores (nothing when no scenario is tuned at the scale)."""

    def describe(self, ctx: Context) -> str:
        return f"tuning --paper {ctx.paper} --scale {ctx.scale}"

    def run(self, ctx: Context) -> list[Path]:
        return write_paper_tuning(
            ctx.store, ctx.paper, ctx.scale, tuned_scenarios(ctx.room_files, ctx.scale), ctx.tables_dir
        )

    def report_files(self, ctx: Context) -> list[Path]:
        tuned = tuned_scenarios(ctx.room_files, ctx.scale)
        return [ctx.tables_dir / f"{paper_tuning_stem(ctx.paper, ctx.scale)}.md"] if tuned else []


@dataclass(frozen=True)
class Claims:
    """The paper's claims judged on this scale's runs and on the paper's numbers."""

    def describe(self, ctx: Context) -> str:
        return f"claims --paper {ctx.paper} --scale {ctx.scale}"

    def run(self, ctx: Context) -> list[Path]:
        return [write_claims(ctx.store, ctx.paper, ctx.tables_dir, ctx.scale)]

    def report_files(self, ctx: Context) -> list[Path]:
        return [ctx.tables_dir / claims_name(ctx.paper, ctx.scale)]


def _checked(paths: list[Path], passes: bool, verdict: str) -> list[Path]:
    """The written paths of a checked analytic table; :class:`StepFailed` (after writing) unless it passes."""
    if not passes:
        raise StepFailed(verdict)
    return paths


@dataclass(frozen=True)
class Bits:
    """Communication bits per client from a model's size (no training), checked against the paper."""

    model: str
    input: str
    classes: int
    rounds: int
    compressors: tuple[str, ...]

    def describe(self, ctx: Context) -> str:
        return (
            f"bits {self.model} --input {self.input} --classes {self.classes} --rounds {self.rounds} "
            + " ".join(f"--compressor {c}" for c in self.compressors)
            + f" --paper {ctx.paper}"
        )

    def run(self, ctx: Context) -> list[Path]:
        result = bits.bits_report(self.model, self.input, self.classes, self.rounds, list(self.compressors), ctx.paper)
        return _checked(bits.write_bits(result, ctx.tables_dir), result.agrees, bits.verdict(result))

    def report_files(self, ctx: Context) -> list[Path]:
        return [ctx.tables_dir / f"{bits.bits_stem(ctx.paper, self.model, self.rounds)}.md"]


@dataclass(frozen=True)
class Costs:
    """The paper's communication-cost columns from model sizes (its room's ``costs`` module)."""

    def describe(self, ctx: Context) -> str:
        return f"costs --paper {ctx.paper}"

    def run(self, ctx: Context) -> list[Path]:
        costs = paper_part(ctx.paper, "costs")
        result = costs.costs_report(ctx.paper)
        return _checked(costs.write_costs(result, ctx.tables_dir), result.passes, costs.verdict(result))

    def report_files(self, ctx: Context) -> list[Path]:
        return [ctx.tables_dir / f"{ctx.paper}_costs.md"]  # the room's costs.write_costs


@dataclass(frozen=True)
class Target:
    """One table or figure (or a group of them) of a paper."""

    name: str
    help: str
    runs: tuple[str, ...] = ()  # scenario or grid files, relative to the repository root, in run order
    steps: tuple[Step, ...] = ()
    needs: tuple[str, ...] = ()  # targets of the same paper done first
    client_executor: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))  # scale → executor

    def executor_at(self, scale: str) -> str:
        """The client-training path at ``scale`` (``fedbench run --executor``; default auto)."""
        return self.client_executor.get(scale, "auto")


@dataclass(frozen=True)
class PaperRoom:
    """A paper's targets, in the order ``fedbench reproduce <paper>`` does them all; ``first_table``
    is the target ``fedbench reproduce --first-tables`` (``make reproduce-table1``) does of it
    (default: the first target).

    ``make reproduce-<name>-<target>`` wraps ``fedbench reproduce <name> <target>`` (the Makefile's
    one pattern rule), so a target's name holds no ``-``."""

    name: str
    title: str
    targets: tuple[Target, ...]
    first_table: str = ""

    def __post_init__(self) -> None:
        names = [t.name for t in self.targets]
        if not names or len(set(names)) != len(names) or any("-" in n or not n for n in names):
            raise ValueError(f"room {self.name}: targets need unique names without '-'; got {', '.join(names)}")
        object.__setattr__(self, "first_table", self.target(self.first_table or names[0]).name)

    def target(self, name: str) -> Target:
        """The target called ``name``; a ValueError names it and the known ones."""
        for t in self.targets:
            if t.name == name:
                return t
        raise ValueError(f"unknown target {name!r} of {self.name}; known: {', '.join(t.name for t in self.targets)}")

    @property
    def run_files(self) -> tuple[str, ...]:
        """Every target's scenario files, each once, in target order."""
        return tuple(dict.fromkeys(f for t in self.targets for f in t.runs))
