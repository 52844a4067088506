"""The house rules issue 17 set, checked: small functions where the data path runs, arrows pointing down."""

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
DATA_PATH = [
    *sorted((ROOT / "fedbench/scenario").glob("*.py")),
    ROOT / "fedbench/engine/runner.py",
    ROOT / "fedbench/engine/plugins.py",
    ROOT / "fedbench/engine/axes.py",
    ROOT / "fedbench/engine/task_stream.py",
    ROOT / "fedbench/wireless/plugin.py",
    ROOT / "fedbench/engine/probe.py",
    ROOT / "fedbench/estimate.py",
]


@pytest.mark.parametrize("path", DATA_PATH, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_function_of_scenario_resolution_or_the_round_loop_is_over_50_lines(path):
    tree = ast.parse(path.read_text())
    long = [
        (n.name, n.end_lineno - n.lineno + 1)
        for n in ast.walk(tree)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > 50
    ]
    assert not long, long


def modules_of(package: str) -> list[str]:
    """Every module of a package under fedbench/ (``fedbench.report.*``), by its files."""
    folder = ROOT.joinpath(*package.split("."))
    names = [".".join(p.relative_to(ROOT).with_suffix("").parts) for p in sorted(folder.rglob("*.py"))]
    return [n.removesuffix(".__init__") for n in names]


@pytest.mark.parametrize(
    "module, forbidden",
    [
        ("fedbench.engine.*", ("fedbench.wireless", "fedbench.papers", "fedbench.report", "fedbench.cli")),
        ("fedbench.report.*", ("fedbench.papers", "fedbench.cli")),
        ("fedbench.rooms", ("fedbench.papers", "fedbench.report", "fedbench.engine", "torch")),
        ("fedbench.engine.runner", ("fedbench.report", "fedbench.papers", "fedbench.cli")),
        ("fedbench.engine.probe", ("fedbench.report", "fedbench.papers", "fedbench.cli", "fedbench.sweeps")),
        ("fedbench.estimate", ("fedbench.report", "fedbench.papers", "fedbench.cli")),
        ("fedbench.optim.spec", ("torch",)),
        ("fedbench.sweeps.grid", ("fedbench.engine", "fedbench.report")),
        ("fedbench.sweeps.tuning", ("fedbench.engine", "fedbench.report")),
        ("fedbench.sweeps.halving", ("fedbench.engine", "fedbench.report")),
        ("fedbench.sweeps.trials", ("fedbench.engine", "fedbench.report")),
        ("fedbench.trackers.*", ("torch", "mlflow", "tensorboard", "fedbench.engine", "fedbench.cli")),  # lazy
    ],
)
def test_arrows_point_down(module, forbidden):
    """Importing ``module`` (``package.*``: every module of it) loads nothing of ``forbidden``."""
    modules = modules_of(module.removesuffix(".*")) if module.endswith(".*") else [module]
    code = (
        f"import sys; {'; '.join(f'import {m}' for m in modules)}; "
        f"print(sorted(m for m in sys.modules if m.startswith({forbidden!r})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert out.strip() == "[]", out


def imported_names(path: Path) -> set[str]:
    """The modules ``path``'s import statements name (``from a import b``: ``a`` and ``a.b``), anywhere in it."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
    return names


@pytest.mark.parametrize(
    "folder, forbidden",
    [("fedbench/engine", ("fedbench.wireless", "fedbench.papers")), ("fedbench/report", ("fedbench.papers",))],
)
def test_no_module_imports_up_textually(folder, forbidden):
    """Not even a function-local import: the engine reaches the wireless plug-in by entry point
    (engine/axes.py), the report reaches the rooms by name (fedbench/rooms.py)."""
    up = {
        str(p.relative_to(ROOT)): sorted(n for n in imported_names(p) if n.startswith(forbidden))
        for p in sorted((ROOT / folder).rglob("*.py"))
    }
    assert not {k: v for k, v in up.items() if v}


GENERIC_ENGINE = sorted(p for p in (ROOT / "fedbench/engine").glob("*.py"))


def _named_things() -> re.Pattern:
    """Every registered algorithm's name and label, every paper room's name, the papers' methods; a label
    in capitals (TARGET) only as written, so that an English word in code (``Thread(target=…)``) is not one."""
    from fedbench.algorithms import ALGORITHMS
    from fedbench.rooms import paper_names

    acronyms = {e.obj.caps.label for e in ALGORITHMS if e.obj.caps.label.isupper()}
    words = {w for e in ALGORITHMS for w in (e.name, e.obj.caps.label)} - acronyms | set(paper_names())
    words |= {
        "GradMA",
        "C-FLAG",
        "FedMIM",
        "FedCAMS",
        "FedQVR",
        "FedAMS",
        "MIFA",
        "MOON",
        "EWC",
        "iCaRL",
        "LwF",
        "NCCL",
        "SAM",
        "qp_fallbacks",
    }
    alternatives = "|".join(sorted(map(re.escape, words), key=len, reverse=True))
    exact = "|".join(sorted(map(re.escape, acronyms), key=len, reverse=True))
    return re.compile(rf"(?<![A-Za-z0-9_])((?i:{alternatives})|{exact})(?![A-Za-z0-9_])")


@pytest.mark.parametrize("path", GENERIC_ENGINE, ids=lambda p: str(p.relative_to(ROOT)))
def test_generic_engine_modules_name_no_paper_and_no_algorithm(path):
    """The round loop, executors and providers know no algorithm's maths: an algorithm's needs reach
    them as declared inputs and diagnostics (issue 25), so no engine module — code, docstring or
    comment — names an algorithm, its label or a paper."""
    hits = [
        (i, m.group(0))
        for i, line in enumerate(path.read_text().splitlines(), 1)
        for m in _named_things().finditer(line)
    ]
    assert not hits, hits


def test_the_name_scan_finds_names():
    """The scan above is not vacuous: it finds the names where they belong."""
    assert _named_things().search((ROOT / "fedbench/algorithms/gradma.py").read_text())
    assert _named_things().search("the wireless uplink of FedQVR-E") and not _named_things().search(
        "plain FL, a fedavg_x"
    )
    assert _named_things().search("TARGET's generator") and not _named_things().search("Thread(target=beat)")
