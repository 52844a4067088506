"""Tuned runs in the tables: the rows whose runs carry a tuning (``spec.tuned``, written by
:func:`fedbench.sweeps.tuning.tuned_spec`) are marked :data:`MARK`, and a note under the table says
how their settings were chosen (the tuning table lists the values and scores)."""

from __future__ import annotations

import json

import pandas as pd

MARK = "†"
_ON = {
    "paper": "on the test set (paper protocol)",
    "validation": "on the clients' held-out validation split (validation protocol)",
}


def _tuned(spec_json: str) -> dict | None:
    return json.loads(spec_json).get("tuned")


def tuned_labels(runs: pd.DataFrame) -> set[str]:
    """The algorithm labels with at least one tuned run."""
    return {a for a, s in zip(runs["algorithm"], runs["spec_json"]) if _tuned(s) is not None}


def tuning_notes(runs: pd.DataFrame) -> list[str]:
    """One line per way of tuning found in ``runs`` (protocol, metric, trial rounds and seeds, halving's
    rungs): the marked methods and how many settings each compared; none when no run is tuned."""
    ways: dict[tuple, dict[str, set[int]]] = {}
    for label, spec_json in zip(runs["algorithm"], runs["spec_json"]):
        t = _tuned(spec_json)
        if t is not None:
            rungs = tuple(r for r, _ in t.get("rungs") or ())  # successive halving's rung rounds
            key = (t["protocol"], t["metric"], t["rounds"], tuple(t["seeds"]), rungs)
            ways.setdefault(key, {}).setdefault(label, set()).add(int(t["trials"]))
    lines = []
    for (protocol, metric, rounds, seeds, rungs), labels in ways.items():
        counts = sorted(set().union(*labels.values()))
        n = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}–{counts[-1]}"
        halving = f" (successive halving, rungs of {', '.join(map(str, rungs))} rounds)" if rungs else ""
        lines.append(
            f"{MARK} tuned ({', '.join(labels)}): each setting chosen among {n} trial settings{halving} by {metric} "
            f"{_ON[protocol]}, trials of {rounds} rounds × seed(s) {', '.join(map(str, seeds))}; "
            "the chosen values and scores are in the tuning table"
        )
    return lines


def with_marks(marks: dict[str, str], tuned: set[str]) -> dict[str, str]:
    """A table's row marks (``{"SCAFFOLD": "(2×)"}``) with :data:`MARK` put first on each tuned row."""
    return {**marks, **{r: f"{MARK} {marks.get(r, '')}".strip() for r in tuned}}
