"""Blow-up flags: runs that finished with finite numbers that are nonetheless suspect.

A run is flagged when its train or test loss exceeds ``loss_factor`` × its first value, or when
its last evaluated accuracy lies within ``chance_margin`` of chance (1/classes, from the partition
logged at round 1) after an earlier accuracy at least 2·``chance_margin`` above it. Continual runs are
not flagged: their evaluation set grows with the tasks, so neither their loss nor their chance level
is comparable across rounds. Thresholds: the scenario's ``blowup`` block.

A run recorded finished by a fedbench that did not yet stop runs whose train loss exceeds
:data:`~fedbench.store.DIVERGED_LOSS_FACTOR` × ln C (they diverge now) is flagged for that, continual
or not."""

from __future__ import annotations

import json
import math

import pandas as pd

from fedbench.store import DIVERGED_LOSS_FACTOR

DEFAULTS = {"loss_factor": 1e3, "chance_margin": 0.05}


def _loss_reason(m: pd.DataFrame, factor: float) -> str | None:
    for col in ("train_loss", "test_loss"):
        values = m[col].dropna() if col in m.columns else pd.Series(dtype="float64")
        if len(values) > 1 and values.iloc[0] > 0 and values.max() > factor * values.iloc[0]:
            return f"{col} reached {values.max():.3g}, {values.max() / values.iloc[0]:.3g}× its first value"
    return None


def _classes(m: pd.DataFrame) -> int | None:
    """Number of classes from the partition logged with round 1 (None for stores written before it was logged)."""
    first = m["extra"].iloc[0] if "extra" in m.columns and len(m) else None
    if not isinstance(first, str):
        return None
    classes = (json.loads(first).get("partition") or {}).get("num_classes")
    return int(classes) if classes else None


def _chance_reason(m: pd.DataFrame, margin: float) -> str | None:
    classes, acc = _classes(m), m["test_acc"].dropna()
    if classes is None or len(acc) < 2:
        return None
    chance = 1 / classes
    if acc.iloc[-1] <= chance + margin and (acc.iloc[:-1] >= chance + 2 * margin).any():
        return f"accuracy fell to {100 * acc.iloc[-1]:.1f}% (chance {100 * chance:.1f}%) after {100 * acc.max():.1f}%"
    return None


def _divergence_reason(m: pd.DataFrame) -> str | None:
    """A train loss beyond the bound runs now diverge at (recorded finished by an older fedbench)."""
    classes, train = _classes(m), m["train_loss"].dropna() if "train_loss" in m.columns else pd.Series(dtype="float64")
    if classes is None or train.empty or not train.max() > DIVERGED_LOSS_FACTOR * math.log(classes):
        return None
    return f"train_loss reached {train.max():.3g}, above {DIVERGED_LOSS_FACTOR:g} × ln {classes} (a divergence now)"


def blowup_reason(spec_json: str, status: str, m: pd.DataFrame) -> str | None:
    """Why a finished run is flagged (one line), or None. ``m``: its metrics rows."""
    if status != "finished" or m.empty:
        return None
    spec = json.loads(spec_json)
    limits = {**DEFAULTS, **(spec.get("blowup") or {})}
    m = m.sort_values("round")
    if (reason := _divergence_reason(m)) is not None:
        return reason
    if spec.get("continual"):
        return None  # the evaluated tasks change along the stream: neither the loss nor chance is comparable
    return _loss_reason(m, float(limits["loss_factor"])) or _chance_reason(m, float(limits["chance_margin"]))


def blowups(runs: pd.DataFrame, metrics: pd.DataFrame) -> dict[str, str]:
    """run_id → reason for every flagged run of ``runs``."""
    by_run = {rid: part for rid, part in metrics.groupby("run_id", sort=False)}
    flags = {}
    for rid, status, spec_json in zip(runs["run_id"], runs["status"], runs["spec_json"]):
        reason = blowup_reason(spec_json, status, by_run.get(rid, metrics.iloc[0:0]))
        if reason is not None:
            flags[rid] = reason
    return flags


def blowup_notes(runs: pd.DataFrame, flags: dict[str, str]) -> list[str]:
    """One footnote line per flagged run: algorithm, seed and reason."""
    rows = runs[runs["run_id"].isin(list(flags))]
    return [
        f"{a} seed {s}: blow-up flagged, {flags[r]}" for r, a, s in zip(rows["run_id"], rows["algorithm"], rows["seed"])
    ]


def is_flagged(value: object) -> bool:
    return isinstance(value, (int, float)) and not math.isnan(value) and value > 0
