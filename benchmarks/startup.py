"""Command-line start-up: wall time of each command in a fresh process, cold (the page cache of the
package files is not dropped: "cold" means a new interpreter) and the time a quick-start run takes
to finish its first round after the interpreter starts.

    python -m benchmarks.startup [--repeat 3]

Prints a Markdown table (median of the repeats) for benchmarks/README.md."""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).parents[1]
FEDBENCH = [sys.executable, "-m", "fedbench"]


def wall(args: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def first_round(tmp: Path) -> float:
    """Seconds from process start to the quick start's first recorded round (its store row)."""
    out = tmp / "out"
    start = time.perf_counter()
    proc = subprocess.Popen(
        [*FEDBENCH, "run", "configs/quickstart.yaml", "--out", str(out), "--only", "FedAvg", "--seeds", "0", "--quiet"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    db = out / "fedbench.sqlite"
    while True:
        if db.exists():
            import sqlite3

            try:
                rows = sqlite3.connect(db).execute("SELECT COUNT(*) FROM metrics").fetchone()[0]
            except sqlite3.Error:
                rows = 0
            if rows:
                elapsed = time.perf_counter() - start
                proc.kill()
                proc.wait()
                return elapsed
        if proc.poll() is not None:
            raise RuntimeError("the run ended before a round was recorded")
        time.sleep(0.01)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    repeat = parser.parse_args().repeat
    with tempfile.TemporaryDirectory() as tmp:
        cases = {
            "python -c 'import torch'": [sys.executable, "-c", "import torch"],
            "fedbench --help": [*FEDBENCH, "--help"],
            "fedbench list": [*FEDBENCH, "list"],
            "fedbench validate configs/quickstart.yaml": [*FEDBENCH, "validate", "configs/quickstart.yaml"],
        }
        rows = [(name, statistics.median(wall(args) for _ in range(repeat))) for name, args in cases.items()]
        rows.append(
            (
                "fedbench run configs/quickstart.yaml: first round recorded",
                statistics.median(first_round(Path(tmp) / str(i)) for i in range(repeat)),
            )
        )
    print(f"| command | seconds (median of {repeat}) |\n|---|---|")
    for name, seconds in rows:
        print(f"| `{name}` | {seconds:.2f} |")


if __name__ == "__main__":
    main()
