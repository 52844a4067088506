"""Tuning: an entry's ``tune:`` block (:mod:`fedbench.scenario.tunespec`) expanded into trial runs,
the setting chosen from the store, and the final runs of that setting.

A trial is an ordinary run (same store, run ids, resume and skip through
:func:`~fedbench.sweeps.driver.run_sweep`): the entry's resolved spec with the trial's values set,
the trial rounds, no ``paper`` cell and, under the ``validation`` protocol, a
:class:`~fedbench.scenario.tunespec.ValidationSplit`. Its scenario is named like a grid point,
``<scenario>--tune--<key>-<value>…[.scale]``, so its run id is the hash of everything that changes
its numbers. The trials of an entry are the cartesian product of a pure grid, or ``budget`` draws
of the sampler (NumPy, the ``("tune", crc(scenario name), crc(entry label))`` stream under the
block's ``seed``): the same scenario and seed propose the same trials.

:func:`select` scores each trial (mean over its seeds of ``top_acc``, ``final_acc`` or
``rounds_to``, on ``val_acc`` under ``validation`` and ``test_acc`` under ``paper``; a diverged run
scores worst) and keeps the best, ties going to the earlier trial. The final runs are the chosen
settings (every default elsewhere) on the scenario's own name, rounds and seeds, training on the
clients' whole data; entries without a block run as written.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import math
import zlib
from dataclasses import dataclass
from typing import Any

from fedbench.algorithms import ALGORITHMS
from fedbench.scenario import LocalSpec, RunSpec, Scenario, ScenarioError, ServerSpec
from fedbench.scenario.resolve import check_component
from fedbench.scenario.tunespec import Range, TunedFrom, TuneSpec, ValidationSplit
from fedbench.seeding import numpy_stream
from fedbench.store import DONE, ResultsStore
from fedbench.sweeps.grid import SweepRun, point_name


class TuningError(ValueError):
    """Selection cannot be made yet (trials missing or failed); the message lists them."""


@dataclass(frozen=True)
class Trial:
    """One proposed setting of an entry: its values by dotted key, its spec and seeds."""

    entry: int
    index: int
    values: dict[str, Any]
    spec: RunSpec
    seeds: tuple[int, ...]

    def runs(self) -> list[SweepRun]:
        shash = _hash([self.spec.spec_hash(), *map(str, self.seeds)])
        return [SweepRun(self.spec, seed, shash) for seed in self.seeds]


@dataclass(frozen=True)
class EntryPlan:
    """An algorithm entry with its tune block (None: not tuned) and its trials."""

    index: int
    base: RunSpec
    tune: TuneSpec | None
    trials: tuple[Trial, ...]

    @property
    def label(self) -> str:
        return self.base.label


@dataclass(frozen=True)
class TuningPlan:
    """Every entry of a scenario with its trials."""

    scenario: Scenario
    entries: tuple[EntryPlan, ...]

    def trial_runs(self) -> list[SweepRun]:
        """Every trial's runs, entry by entry, in trial order (a run listed twice is kept once)."""
        runs: dict[str, SweepRun] = {}
        for e in self.entries:
            for trial in e.trials:
                for run in trial.runs():
                    runs.setdefault(run.run_id, run)
        return list(runs.values())


@dataclass(frozen=True)
class Choice:
    """The chosen trial of an entry, with every trial's score (trial order) and the protocol."""

    entry: EntryPlan
    best: Trial | None
    scores: tuple[float, ...]

    @property
    def runner_up(self) -> float | None:
        """The second-best score (None with one trial)."""
        if self.best is None or len(self.scores) < 2:
            return None
        rest = [s for i, s in enumerate(self.scores) if i != self.best.index]
        return _best(rest, self.entry.tune)[1]  # type: ignore[arg-type]


def _hash(parts: list[str]) -> str:
    return hashlib.sha256("|".join(parts).encode()).hexdigest()


def _key(name: str) -> int:
    return zlib.crc32(name.encode())


def proposals(scenario: Scenario, i: int, tune: TuneSpec) -> list[dict[str, Any]]:
    """The settings proposed for ``algorithms[i]``: a grid's cartesian product (with a ``budget``
    smaller than the grid: that many distinct grid points, in draw order), or ``budget`` draws of a
    space with ranges (lists drawn as choices; a draw equal to an earlier one is kept once), from the
    ``("tune", crc(scenario), crc(label))`` stream under ``tune.seed``."""
    keys = list(tune.space)
    label = scenario.runs[i].label
    rng = numpy_stream(tune.seed, "tune", _key(scenario.name), _key(label))
    if not tune.sampled:
        grid = [dict(zip(keys, values)) for values in itertools.product(*tune.space.values())]
        budget = tune.trial_budget()
        if budget is None or budget >= len(grid):
            return grid
        return [grid[int(k)] for k in rng.choice(len(grid), size=budget, replace=False)]
    out: list[dict[str, Any]] = []
    for _ in range(tune.budget or 0):
        point = {}
        for key, space in tune.space.items():
            space = space if isinstance(space, Range) else Range(choice=space)
            point[key] = space.draw(rng)
        if point not in out:
            out.append(point)
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


def _trial_spec(scenario: Scenario, base: RunSpec, tune: TuneSpec, values: dict[str, Any]) -> RunSpec:
    """A trial's spec: ``values`` set, the trial rounds, no paper cell, the validation split if asked."""
    scale = base.scale
    prefix = scenario.name.removesuffix(f".{scale}") if scale != "paper" else scenario.name
    spec = with_values(base, values, f"tune of {base.label}")
    validation = ValidationSplit(fraction=tune.validation_fraction) if tune.protocol == "validation" else None
    update = {
        "scenario": point_name(f"{prefix}--tune", values, scale),
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
        if tune is not None:
            seeds = tuple(tune.trials.seeds or scenario.seeds)
            for k, values in enumerate(proposals(scenario, i, tune)):
                trials.append(Trial(i, k, values, _trial_spec(scenario, base, tune, values), seeds))
        entries.append(EntryPlan(i, base, tune, tuple(trials)))
    return TuningPlan(scenario, tuple(entries))


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


def _best(scores: list[float], tune: TuneSpec) -> tuple[int, float]:
    """Index and score of the best trial (lowest rounds_to, else highest accuracy); ties: the earlier."""
    sign = -1.0 if tune.select.metric == "rounds_to" else 1.0
    best = max(range(len(scores)), key=lambda k: (sign * scores[k], -k))
    return best, scores[best]


def select(store: ResultsStore, tuning: TuningPlan) -> list[Choice]:
    """The chosen trial of every tuned entry (an entry without a block: ``best`` None). Raises
    :class:`TuningError` naming the trial runs that are not finished or diverged."""
    missing = [r for r in tuning.trial_runs() if store.status(r.run_id) not in DONE]
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
        worst = math.inf if e.tune.select.metric == "rounds_to" else -math.inf
        scores = []
        for trial in e.trials:
            per_seed = []
            for run in trial.runs():
                if store.status(run.run_id) == "diverged":
                    per_seed.append(worst)
                else:
                    per_seed.append(run_score(_accuracy(store.metrics([run.run_id]), e.tune.protocol), e.tune))
            scores.append(sum(per_seed) / len(per_seed))
        choices.append(Choice(e, e.trials[_best(scores, e.tune)[0]], tuple(scores)))
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
    )
    return spec.model_copy(update={"tuned": tuned}).resolved(spec.scale, spec.components)


def final_runs(tuning: TuningPlan, choices: list[Choice]) -> list[SweepRun]:
    """The scenario's runs with each tuned entry's chosen values (its own name, rounds and seeds)."""
    sc = tuning.scenario
    specs = [c.entry.base if c.best is None else tuned_spec(c) for c in choices]
    shash = _hash([s.spec_hash() for s in specs] + [str(s) for s in sc.seeds])  # scenario_hash's formula
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


def plan_lines(tuning: TuningPlan) -> list[str]:
    """The trials and the runs they imply (``fedbench validate`` and ``fedbench tune --dry-run``)."""
    sc = tuning.scenario
    trials = sum(len(e.trials) for e in tuning.entries)
    lines = [
        f"tuning: {trials} trial(s), {len(tuning.trial_runs())} trial run(s), then "
        f"{len(sc.runs) * len(sc.seeds)} final run(s) of the chosen settings (seeds {sc.seeds}, {sc.rounds} rounds)"
    ]
    for e in tuning.entries:
        if e.tune is None:
            lines.append(f"  {e.label}: not tuned")
            continue
        t = e.tune
        grid = t.grid_size()
        searched = f" ({len(e.trials)} of {grid} settings, {100 * len(e.trials) / grid:.0f} %)" if grid else ""
        lines.append(
            f"  {e.label}: {len(e.trials)} trial(s){searched} × seeds {list(e.trials[0].seeds) if e.trials else []} "
            f"of {e.trials[0].spec.rounds if e.trials else '?'} rounds, {t.protocol} protocol, {t.select.describe()}"
        )
    return lines
