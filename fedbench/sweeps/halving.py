"""Successive halving (Jamieson & Talwalkar 2016): an entry's candidates run in rungs (:class:`Rung`,
:func:`ladder`), each rung's survivors chosen from the store.

``grid`` and ``random`` make one rung, every candidate at the trial rounds. ``halving`` makes the rungs
of :meth:`~fedbench.scenario.tunespec.HalvingSpec.rungs`: rung 0 runs every candidate for ``min_rounds``
rounds, rung k+1 the top ⌊n/eta⌋ (at least one) of rung k's n candidates for ``min_rounds·eta^(k+1)``
rounds, capped at the trial rounds; the rung at the trial rounds is the last, and a lone survivor goes
straight to it. A rung below the trial rounds runs under ``<scenario>--tune-<r>rounds--<key>-<value>…``
(its own name and hash), the last rung under the trial's own name (the run a grid search of that
candidate makes).

A trial's score (:func:`trial_scores`) is the mean over its seeds of :func:`run_score`; a diverged run
scores worst, so it is never promoted. Ties go to the earlier candidate (:func:`ranking`: grid or draw
order). Rung k+1 is known only once every run of rung k is done in the store, so the runs of a tuning
are found rung by rung from the store (:meth:`~fedbench.sweeps.tuning.TuningPlan.trial_runs`): an
interrupted tuning resumes where it stopped and promotes what an uninterrupted one would have, whatever
order parallel runs finished in. Optuna is not used (its ``SuccessiveHalvingPruner`` is the
asynchronous variant, which judges a trial against the peers that reached its rung so far, and it prunes
inside a running trial; see docs/tuning.md).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from fedbench.scenario.tunespec import TuneSpec
from fedbench.store import DONE, ResultsStore
from fedbench.sweeps.trials import EntryPlan, Trial


@dataclass(frozen=True)
class Rung:
    """One rung of an entry's search: its rounds, its trials (candidate order), and their scores
    (None until every run of the rung is done, or when not needed)."""

    rounds: int
    trials: tuple[Trial, ...]
    scores: tuple[float, ...] | None


def _accuracy(metrics: Any, protocol: str) -> list[tuple[int, float]]:
    """(round, accuracy) of one run's rows: ``val_acc`` from the round logs, or ``test_acc``."""
    out = []
    for rnd, test_acc, extra in zip(metrics["round"], metrics["test_acc"], metrics["extra"]):
        value = (json.loads(extra) if extra else {}).get("val_acc") if protocol == "validation" else test_acc
        if value is not None and not math.isnan(value):
            out.append((int(rnd), float(value)))
    return out


def run_score(series: list[tuple[int, float]], tune: TuneSpec) -> float:
    """One run's score: best or last accuracy, or the first round reaching the target (inf: never). With
    ``select.max_drop``, a run whose last accuracy is more than that below its best scores its last: a
    setting that collapsed late is not chosen on the top it reached before."""
    metric = tune.select.metric
    if metric == "rounds_to":
        return next((float(r) for r, a in series if a >= (tune.select.target or 1.0)), math.inf)
    if not series:
        return -math.inf
    top, last = max(a for _, a in series), series[-1][1]
    if metric == "top_acc" and tune.select.max_drop is not None and top - last > tune.select.max_drop:
        return last
    return top if metric == "top_acc" else last


def ranking(scores: list[float] | tuple[float, ...], tune: TuneSpec) -> list[int]:
    """Positions of ``scores`` best first (lowest rounds_to, else highest accuracy); ties: the earlier."""
    sign = -1.0 if tune.select.metric == "rounds_to" else 1.0
    return sorted(range(len(scores)), key=lambda k: (-sign * scores[k], k))


def trial_scores(store: ResultsStore, trials: tuple[Trial, ...], tune: TuneSpec) -> tuple[float, ...] | None:
    """Each trial's score, the mean over its seeds of :func:`run_score` (a diverged run: the worst
    score); None while a run is not done (finished or diverged)."""
    runs = [trial.runs() for trial in trials]
    if any(store.status(run.run_id) not in DONE for rs in runs for run in rs):
        return None
    worst = math.inf if tune.select.metric == "rounds_to" else -math.inf
    scores = []
    for rs in runs:
        per_seed = [
            worst
            if store.status(run.run_id) == "diverged"
            else run_score(_accuracy(store.metrics([run.run_id]), tune.protocol), tune)
            for run in rs
        ]
        scores.append(sum(per_seed) / len(per_seed))
    return tuple(scores)


def ladder(entry: EntryPlan, store: ResultsStore | None, project: bool = False) -> list[Rung]:
    """The rungs of ``entry`` known from ``store``: rung 0 runs every candidate; rung k+1 the top
    ``entry.rungs[k+1]`` candidates of rung k by :func:`trial_scores` (ties to the earlier candidate),
    in candidate order, known once every run of rung k is done. Stops at the first rung not done, or
    (``project``) goes on with stand-ins, the first candidates of the rung below. Scores are read for
    the rungs below the last only (:func:`~fedbench.sweeps.tuning.select` scores the last)."""
    out: list[Rung] = []
    tune, survivors = entry.tune, entry.trials
    for k, (rounds, _) in enumerate(entry.rungs):  # an untuned entry has none
        assert tune is not None
        trials = tuple(entry.at_rung(t, k) for t in survivors)
        below_last = k + 1 < len(entry.rungs)
        scores = trial_scores(store, trials, tune) if store is not None and below_last else None
        out.append(Rung(rounds, trials, scores))
        if not below_last or (scores is None and not project):
            break
        keep = entry.rungs[k + 1][1]
        top = range(keep) if scores is None else sorted(ranking(scores, tune)[:keep])
        survivors = tuple(survivors[j] for j in top)
    return out
