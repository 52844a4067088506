"""The README's 'Adding an algorithm' example is real code: it registers and runs."""

import re
from pathlib import Path

import numpy as np

from fedbench.algorithms import ALGORITHMS
from tests.algorithms.toy import Quadratics, make_algorithm, run_rounds


def test_readme_algorithm_example_registers_and_runs():
    text = Path(__file__).parents[1].joinpath("README.md").read_text()
    block = next(b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "myalgo" in b)
    if "myalgo" not in ALGORITHMS:
        exec(compile(block, "README.md", "exec"), {})
    fed = Quadratics()
    algo, _ = make_algorithm("myalgo", fed, beta=0.5)
    state = run_rounds(algo, fed, np.zeros(3), [[0, 1], [1, 2]], [2, 2, 2, 2], 0.05)
    assert np.isfinite(state["x"].numpy()).all() and state["h"][1].abs().sum() > 0
