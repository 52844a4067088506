"""Tuning: an entry's ``tune:`` block (:mod:`fedbench.scenario.tunespec`) expanded into trial runs,
the setting chosen from the store, and the final runs of that setting.

A trial is an ordinary run (same store, run ids, resume and skip through
:func:`~fedbench.sweeps.driver.run_sweep`): the entry's resolved spec with the trial's values set,
the trial rounds, no ``paper`` cell and, under the ``validation`` protocol, a
:class:`~fedbench.scenario.tunespec.ValidationSplit`. Its scenario is named like a grid point,
``<scenario>--tune--<key>-<value>…[.scale]``, so its run id is the hash of everything that changes
its numbers. The candidates of an entry are the cartesian product of a pure grid, or ``budget`` draws
of the sampler (NumPy, the ``("tune", crc(scenario name), crc(entry label))`` stream under the
block's ``seed``): the same scenario and seed propose the same trials.

The scheduler runs them in rungs (:mod:`fedbench.sweeps.halving`): ``grid`` and ``random`` one rung,
every candidate at the trial rounds; ``halving`` successive halving, whose later rungs are known only
from the store (:meth:`TuningPlan.trial_runs`).

:func:`select` scores each trial (:func:`~fedbench.sweeps.halving.trial_scores`: mean over its seeds
of ``top_acc``, ``final_acc`` or ``rounds_to``, on ``val_acc`` under ``validation`` and ``test_acc``
under ``paper``; a diverged run scores worst) and keeps the best of the last rung, ties going to the
earlier trial. The final runs are the chosen settings (every default elsewhere) on the scenario's own
name, rounds and seeds, training on the clients' whole data; entries without a block run as written.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from fedbench.algorithms import ALGORITHMS
from fedbench.scenario import LocalSpec, RunSpec, Scenario, ScenarioError, ServerSpec
from fedbench.scenario.resolve import check_component
from fedbench.scenario.tunespec import Range, TunedFrom, TuneSpec, ValidationSplit
from fedbench.seeding import numpy_stream
from fedbench.store import DONE, ResultsStore
from fedbench.sweeps.grid import SweepRun
from fedbench.sweeps.halving import ladder, ranking, trial_scores
from fedbench.sweeps.trials import EntryPlan, Trial, hash_parts, trial_name


class TuningError(ValueError):
    """Selection cannot be made yet (trials missing or failed); the message lists them."""


@dataclass(frozen=True)
class TuningPlan:
    """Every entry of a scenario with its trials."""

    scenario: Scenario
    entries: tuple[EntryPlan, ...]

    def trial_runs(self, store: ResultsStore | None = None) -> list[SweepRun]:
        """Every trial run known so far, entry by entry, rung by rung, in trial order (a run listed twice
        is kept once): the first rung's without ``store`` (grid and random: the whole search), and each
        later rung's once ``store`` holds every run of the rung below done
        (:func:`~fedbench.sweeps.halving.ladder`)."""
        return self._runs(lambda e: ladder(e, store))

    def projected_trial_runs(self, store: ResultsStore | None = None) -> list[SweepRun]:
        """:meth:`trial_runs`, with stand-ins for the rungs not known yet (the first candidates of the
        rung below): as many runs of each rung's rounds as the search will make, for a cost estimate."""
        return self._runs(lambda e: ladder(e, store, project=True))

    def _runs(self, rungs_of: Any) -> list[SweepRun]:
        runs: dict[str, SweepRun] = {}
        for e in self.entries:
            for rung in rungs_of(e):
                for trial in rung.trials:
                    for run in trial.runs():
                        runs.setdefault(run.run_id, run)
        return list(runs.values())


def rung_batches(known: Callable[[], list[SweepRun]]) -> Iterator[list[SweepRun]]:
    """The runs ``known()`` lists, then, each time the caller has run a batch, the runs it lists anew,
    until none is new: under successive halving a finished rung makes the next one known (read from the
    store each time); a rung with a failed run makes nothing new known, which ends the batches."""
    seen: set[str] = set()
    while runs := [r for r in known() if r.run_id not in seen]:
        yield runs
        seen.update(r.run_id for r in runs)


@dataclass(frozen=True)
class Choice:
    """The chosen trial of an entry, with every candidate's score (candidate order) at the last rung it
    reached, and that rung (``reached``; empty: every candidate ran the one rung)."""

    entry: EntryPlan
    best: Trial | None
    scores: tuple[float, ...]
    reached: tuple[int, ...] = ()

    @property
    def runner_up(self) -> float | None:
        """The second-best score among the candidates of the chosen one's rung (None when it ran alone)."""
        if self.best is None:
            return None
        b = self.best.index
        rest = [
            s for i, s in enumerate(self.scores) if i != b and (not self.reached or self.reached[i] == self.reached[b])
        ]
        return _best(rest, self.entry.tune)[1] if rest else None  # type: ignore[arg-type]


def _key(name: str) -> int:
    return zlib.crc32(name.encode())


def written(spec: RunSpec, keys: list[str]) -> dict[str, Any] | None:
    """The entry's own values at the searched ``keys`` (``local.<key>``, ``server.<key>``, algorithm
    parameters by name), or None when one is not set (nothing to include)."""
    out: dict[str, Any] = {}
    for key in keys:
        *path, name = key.split(".")
        holder = functools.reduce(lambda node, part: getattr(node, part, None), path, spec)
        value = getattr(holder, name, None) if path else spec.algorithm.get(name)
        if value is None:
            return None
        out[key] = value
    return out


def _holds(tune: TuneSpec, point: dict[str, Any]) -> bool:
    return all(
        space.holds(point[key]) if isinstance(space, Range) else point[key] in space
        for key, space in tune.space.items()
    )


def proposals(scenario: Scenario, i: int, tune: TuneSpec) -> list[dict[str, Any]]:
    """The settings proposed for ``algorithms[i]``: a grid's cartesian product (with a ``budget``
    smaller than the grid: that many distinct grid points, in draw order), or ``budget`` draws of a
    space with ranges (lists drawn as choices; a draw equal to an earlier one is kept once), from the
    ``("tune", crc(scenario), crc(label))`` stream under ``tune.seed``. Under ``include_written``, draws
    that miss the entry's setting as written (when the space holds it) give it their last place: the
    written setting and the first ``budget − 1`` draws."""
    keys = list(tune.space)
    label = scenario.runs[i].label
    rng = numpy_stream(tune.seed, "tune", _key(scenario.name), _key(label))
    out: list[dict[str, Any]]
    grid: list[dict[str, Any]] = []
    if not tune.sampled:
        grid = [dict(zip(keys, values)) for values in itertools.product(*tune.space.values())]
        budget = tune.trial_budget()
        if budget is None or budget >= len(grid):
            return grid
        out = [grid[int(k)] for k in rng.choice(len(grid), size=budget, replace=False)]
    else:
        out = []
        for _ in range(tune.budget or 0):
            point = {}
            for key, space in tune.space.items():
                space = space if isinstance(space, Range) else Range(choice=space)
                point[key] = space.draw(rng)
            if point not in out:
                out.append(point)
    own = written(scenario.runs[i], keys) if tune.include_written else None
    if own is not None and own not in out and _holds(tune, own):
        out[-1] = own if tune.sampled else next(p for p in grid if p == own)  # the grid's own spelling
    return out


def with_values(spec: RunSpec, values: dict[str, Any], where: str) -> RunSpec:
    """``spec`` with ``values`` set (``local.<key>``, ``server.<key>``, algorithm parameters), each
    block validated again and the algorithm's parameter model rebuilt."""
    local = {k.split(".", 1)[1]: v for k, v in values.items() if k.startswith("local.")}
    server = {k.split(".", 1)[1]: v for k, v in values.items() if k.startswith("server.")}
    params = {k: v for k, v in values.items() if "." not in k}
    update: dict[str, Any] = {}
    if local:
        update["local"] = LocalSpec.model_validate({**spec.local.model_dump(), **local})
    if server:
        update["server"] = ServerSpec.model_validate({**spec.server.model_dump(), **server})
    components = spec.components
    if params:
        name = spec.algorithm["name"]
        own = {k: v for k, v in spec.algorithm.items() if k not in ("name", "label")}
        checked = check_component(ALGORITHMS, name, {**own, **params}, where)
        if checked.problems:
            raise ScenarioError(checked.problems, where)
        resolved = {k: v for k, v in checked.resolved.items() if k != "name"}
        update["algorithm"] = {"name": name, "label": spec.label, **resolved}
        components = dataclasses.replace(components, algorithm=checked.model)
    return spec.model_copy(update=update).resolved(spec.scale, components)


def _trial_spec(base: RunSpec, tune: TuneSpec, values: dict[str, Any]) -> RunSpec:
    """A trial's spec: ``values`` set, the trial rounds, no paper cell, the validation split if asked."""
    scale = base.scale
    spec = with_values(base, values, f"tune of {base.label}")
    validation = ValidationSplit(fraction=tune.validation_fraction) if tune.protocol == "validation" else None
    update = {
        "scenario": trial_name(base, values),
        "rounds": tune.trials.rounds or base.rounds,
        "paper": None,
        "validation": validation,
    }
    return spec.model_copy(update=update).resolved(scale, spec.components)


def plan(scenario: Scenario) -> TuningPlan:
    """Every entry of ``scenario`` with its trials (none for an entry without a tune block)."""
    entries = []
    for i, base in enumerate(scenario.runs):
        tune = scenario.tune_of(i)
        trials: list[Trial] = []
        rungs: list[tuple[int, int]] = []
        if tune is not None:
            seeds = tuple(tune.trials.seeds or scenario.seeds)
            for k, values in enumerate(proposals(scenario, i, tune)):
                trials.append(Trial(i, k, values, _trial_spec(base, tune, values), seeds))
            rungs = tune.rungs(len(trials), tune.trials.rounds or base.rounds)
        entries.append(EntryPlan(i, base, tune, tuple(trials), tuple(rungs)))
    return TuningPlan(scenario, tuple(entries))


def _best(scores: list[float], tune: TuneSpec) -> tuple[int, float]:
    """Index and score of the best trial; ties: the earlier."""
    best = ranking(scores, tune)[0]
    return best, scores[best]


def select(store: ResultsStore, tuning: TuningPlan) -> list[Choice]:
    """The chosen trial of every tuned entry (an entry without a block: ``best`` None): the best of its
    last rung. Raises :class:`TuningError` naming the trial runs that are not finished or diverged."""
    ladders = {e.index: ladder(e, store) for e in tuning.entries}  # read once: they score the rungs below
    missing = [r for r in tuning._runs(lambda e: ladders[e.index]) if store.status(r.run_id) not in DONE]
    if missing:
        listed = ", ".join(f"{r.describe()} ({store.status(r.run_id) or 'not run'})" for r in missing[:5])
        raise TuningError(
            f"{len(missing)} trial run(s) are not done: {listed}{', …' if len(missing) > 5 else ''}; "
            "run `fedbench tune` again to resume them"
        )
    choices = []
    for e in tuning.entries:
        if e.tune is None:
            choices.append(Choice(e, None, ()))
            continue
        rungs = ladders[e.index]
        assert len(rungs) == len(e.rungs), "every trial run is done, so every rung is known"
        last = trial_scores(store, rungs[-1].trials, e.tune)
        assert last is not None
        scores, reached = [math.nan] * len(e.trials), [0] * len(e.trials)
        for k, rung in enumerate(rungs):
            for trial, score in zip(rung.trials, last if rung is rungs[-1] else rung.scores or ()):
                scores[trial.index], reached[trial.index] = score, k
        best = rungs[-1].trials[_best(list(last), e.tune)[0]]
        choices.append(Choice(e, best, tuple(scores), tuple(reached) if len(rungs) > 1 else ()))
    return choices


def tuned_spec(choice: Choice) -> RunSpec:
    """The entry's spec with the chosen values, marked :class:`TunedFrom` (a run of its own)."""
    tune, best = choice.entry.tune, choice.best
    assert tune is not None and best is not None
    spec = with_values(choice.entry.base, best.values, choice.entry.label)
    metric = tune.select.describe()
    tuned = TunedFrom(
        values=best.values,
        trials=len(choice.scores),
        protocol=tune.protocol,
        metric=metric,
        rounds=best.spec.rounds,
        seeds=list(best.seeds),
        rungs=list(choice.entry.rungs) if tune.halving is not None else None,
    )
    return spec.model_copy(update={"tuned": tuned}).resolved(spec.scale, spec.components)


def final_runs(tuning: TuningPlan, choices: list[Choice]) -> list[SweepRun]:
    """The scenario's runs with each tuned entry's chosen values (its own name, rounds and seeds)."""
    sc = tuning.scenario
    specs = [c.entry.base if c.best is None else tuned_spec(c) for c in choices]
    shash = hash_parts([s.spec_hash() for s in specs] + [str(s) for s in sc.seeds])  # scenario_hash's formula
    return [SweepRun(spec, seed, shash) for spec in specs for seed in sc.seeds]


def projected_final_runs(tuning: TuningPlan, store: ResultsStore | None) -> list[SweepRun]:
    """The final runs for a cost estimate: the chosen settings' when ``store`` holds every trial done,
    else each tuned entry as written, marked tuned (a run id no store holds: still to do; the chosen
    values change no round's cost)."""
    if store is not None:
        try:
            return final_runs(tuning, select(store, tuning))
        except TuningError:
            pass
    as_written = [
        Choice(e, dataclasses.replace(e.trials[0], values={}) if e.trials else None, (0.0,) * len(e.trials))
        for e in tuning.entries
    ]
    return final_runs(tuning, as_written)


def plan_lines(tuning: TuningPlan, store: ResultsStore | None = None) -> list[str]:
    """The trials and the runs they imply (``fedbench validate`` and ``fedbench tune --dry-run``); under
    halving each entry's rungs (candidates × rounds, trial-rounds) and, with ``store``, how far it got."""
    sc = tuning.scenario
    trials = sum(len(e.trials) for e in tuning.entries)
    lines = [
        f"tuning: {trials} trial(s), {len(tuning.projected_trial_runs())} trial run(s), then "
        f"{len(sc.runs) * len(sc.seeds)} final run(s) of the chosen settings (seeds {sc.seeds}, {sc.rounds} rounds)"
    ]
    for e in tuning.entries:
        if e.tune is None:
            lines.append(f"  {e.label}: not tuned")
            continue
        t = e.tune
        grid = t.grid_size()
        notes = [f"{len(e.trials)} of {grid} settings, {100 * len(e.trials) / grid:.0f} %"] if grid else []
        if e.drawn and t.include_written and written(e.base, list(t.space)) in [x.values for x in e.trials]:
            notes.append("the written one among them")
        searched = f" ({', '.join(notes)})" if notes else ""
        seeds = list(e.trials[0].seeds) if e.trials else []
        if t.halving is None:
            lines.append(
                f"  {e.label}: {len(e.trials)} trial(s){searched} × seeds {seeds} "
                f"of {e.trials[0].spec.rounds if e.trials else '?'} rounds, {t.protocol} protocol, {t.select.describe()}"
            )
            continue
        rounds = e.rungs[-1][0]
        whole = len(e.trials) * rounds
        lines.append(
            f"  {e.label}: successive halving of {len(e.trials)} candidate(s){searched} × seeds {seeds}, "
            f"rungs {' → '.join(f'{n}×{r}' for r, n in e.rungs)} (candidates × rounds, top 1/{t.halving.eta} kept): "
            f"{e.trial_rounds()} trial-rounds per seed (every candidate at {rounds} rounds: {whole}, "
            f"{100 * e.trial_rounds() / whole:.0f} %), {t.protocol} protocol, {t.select.describe()}"
        )
        if store is not None:
            reached = ladder(e, store)  # the rungs below its last are done
            lines.append(
                f"    at rung {len(reached)} of {len(e.rungs)}: {len(reached[-1].trials)} candidate(s) of "
                f"{reached[-1].rounds} rounds"
            )
    return lines
