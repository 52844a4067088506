"""The house rules issue 17 set, checked: small functions where the data path runs, arrows pointing down."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
DATA_PATH = [
    *sorted((ROOT / "fedbench/scenario").glob("*.py")),
    ROOT / "fedbench/engine/runner.py", ROOT / "fedbench/engine/plugins.py", ROOT / "fedbench/engine/axes.py",
    ROOT / "fedbench/engine/continual.py", ROOT / "fedbench/wireless/plugin.py",
    ROOT / "fedbench/engine/probe.py", ROOT / "fedbench/estimate.py",
]


@pytest.mark.parametrize("path", DATA_PATH, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_function_of_scenario_resolution_or_the_round_loop_is_over_50_lines(path):
    tree = ast.parse(path.read_text())
    long = [(n.name, n.end_lineno - n.lineno + 1) for n in ast.walk(tree)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > 50]
    assert not long, long


@pytest.mark.parametrize("module, forbidden", [
    ("fedbench.engine.runner", ("fedbench.report", "fedbench.papers", "fedbench.cli")),
    ("fedbench.engine.probe", ("fedbench.report", "fedbench.papers", "fedbench.cli", "fedbench.sweeps")),
    ("fedbench.estimate", ("fedbench.report", "fedbench.papers", "fedbench.cli")),
    ("fedbench.optim.spec", ("torch",)),
    ("fedbench.sweeps.grid", ("fedbench.engine", "fedbench.report")),
    ("fedbench.sweeps.tuning", ("fedbench.engine", "fedbench.report")),
])
def test_arrows_point_down(module, forbidden):
    code = f"import sys, {module}; print(sorted(m for m in sys.modules if m.startswith({forbidden!r})))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert out.strip() == "[]", out
