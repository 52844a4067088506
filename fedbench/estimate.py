"""Know the cost before starting: a set of runs' hours on this device, from a short timed probe.

Runs are grouped into cost classes: the same workload (dataset, model, clients, local work, batch,
evaluation, compression, continual and wireless blocks; the learning rates and server settings
never change a round's cost), algorithm and clients per round S. Runs the store holds done count
zero. The classes are probed (:func:`fedbench.engine.probe.probe_run`) in the order that covers
most with fewest probes: first one per workload, then one per algorithm, then the rest by rounds,
until :attr:`Estimator.max_probes` probes or :attr:`Estimator.budget_s` seconds are spent. A class
not probed borrows the probe of its workload (its algorithm's if probed, else any), its round time
scaled by S and, from another algorithm, by the two algorithms' ratio where a workload has both; a
workload never probed leaves its runs out of the total, which is then a lower bound.

A class's run of T rounds with E evaluations costs ``T·round_s + E·eval_s``. Where ``--population``
trains runs together on this device (:mod:`fedbench.engine.population`), a class of several runs is
probed as one population of up to :data:`POPULATION_PROBE` of its runs, and ``round_s`` is each run's
share of a population round. The hours are those
of one run after another; with J parallel jobs the wall time is about hours/J. Datasets are read
offline only: the runs of a dataset not on disk (:func:`fedbench.data.missing`) are left out of the
total, each such dataset named with how to get it, and the rest is priced; with ``stand_in``
(``--stand-in-data``) a real dataset not on disk is probed on generated data of its shape, size and classes
(:mod:`fedbench.data.stand_in`: a round costs the same on any pixels), so a machine without the datasets prices
every run.

Instead of probing, :class:`Rates` (``--rates FILE``) give seconds per round measured elsewhere,
per dataset and model at S clients per round (optionally per algorithm); a class takes the rate of
its dataset and model (its algorithm's if given, else the nearest S), scaled by S. No data is read
then, and a class no rate covers is left out of the total, which is then a lower bound.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fedbench.data import DatasetNotFoundError, MissingDataset, missing
from fedbench.data.stand_in import can_stand_in
from fedbench.engine import probe
from fedbench.engine.population import population_key, population_size
from fedbench.engine.probe import RoundCost, evaluations
from fedbench.engine.setup import DataCache, resolve_device
from fedbench.options import RunOptions
from fedbench.scenario import RunSpec, Scenario, scenario_hash
from fedbench.store import DONE, read_statuses
from fedbench.sweeps.grid import SweepRun

MAX_PROBES = 24  # cost classes probed at most per command
BUDGET_S = 60.0  # seconds of probing at most per command (a probe begun is finished)
PROBE_ROUNDS = 2  # steady-state rounds timed per class, after one warm-up round
POPULATION_PROBE = 16  # runs a probe trains as one population at most (their share of a round is the class's cost)


def workload(spec: RunSpec) -> str:
    """What a round's cost depends on besides the algorithm and S (canonical JSON)."""
    local = spec.local.model_dump(mode="json", exclude={"lr", "lr_decay", "weight_decay"})
    blocks = {k: getattr(spec, k) is not None for k in ("wireless", "validation")}
    continual = spec.continual.model_dump(mode="json") if spec.continual else None
    what = {
        "dataset": spec.dataset,
        "model": spec.model,
        "clients": spec.clients.num,
        "local": local,
        "eval": [spec.eval.batch_size, spec.eval.client_spread],
        "compression": spec.compression,
        "continual": continual,
        **blocks,
    }
    return json.dumps(what, sort_keys=True, default=str)


@dataclass
class CostClass:
    """Runs that cost the same per round: their workload, algorithm, S and the runs still to do."""

    workload: str
    algorithm: str
    per_round: int
    executor: str
    runs: list[SweepRun] = field(default_factory=list)
    cost: RoundCost | None = None
    source: str = ""  # "probed", or what the cost was scaled from

    @property
    def key(self) -> tuple[str, str, int, str]:
        return self.workload, self.algorithm, self.per_round, self.executor

    @property
    def rounds(self) -> int:
        return sum(r.spec.rounds for r in self.runs)

    @property
    def seconds(self) -> float | None:
        if self.cost is None:
            return None
        return sum(r.spec.rounds * self.cost.round_s + evaluations(r.spec) * self.cost.eval_s for r in self.runs)

    def describe(self) -> str:
        spec = self.runs[0].spec
        return f"{spec.dataset['name']} {spec.model['name']} S={self.per_round} {self.algorithm}"


def classes_of(runs: Iterable[SweepRun], executor: str) -> list[CostClass]:
    """The runs grouped into cost classes, in order of first appearance."""
    found: dict[tuple[str, str, int, str], CostClass] = {}
    for run in runs:
        spec = run.spec
        c = CostClass(workload(spec), spec.algorithm["name"], spec.clients.per_round, executor)
        found.setdefault(c.key, c).runs.append(run)
    return list(found.values())


def probe_order(classes: Sequence[CostClass]) -> list[CostClass]:
    """One class per workload (its largest), then one per algorithm, then the rest, largest first."""
    largest = sorted(classes, key=lambda c: -c.rounds)
    per_workload = list({c.workload: c for c in reversed(largest)}.values())
    per_algorithm = list({c.algorithm: c for c in reversed(largest)}.values())
    order: dict[tuple, CostClass] = {}
    for c in [
        *sorted(per_workload, key=lambda c: -c.rounds),
        *sorted(per_algorithm, key=lambda c: -c.rounds),
        *largest,
    ]:
        order.setdefault(c.key, c)
    return list(order.values())


def algorithm_ratio(algorithm: str, other: str, probed: Sequence[CostClass]) -> float:
    """Round time of ``algorithm`` over ``other``'s where both were probed on one workload and S (else 1)."""
    seen = {(p.workload, p.per_round, p.algorithm): p.cost.round_s for p in probed if p.cost is not None}
    for (w, s, a), round_s in seen.items():
        if a == other and (w, s, algorithm) in seen and round_s > 0:
            return seen[(w, s, algorithm)] / round_s
    return 1.0


def borrow(c: CostClass, probed: Sequence[CostClass]) -> None:
    """Give an unprobed class the cost of a probed one of its workload (its algorithm's, nearest S,
    first): the round time scaled by S and, for another algorithm, by :func:`algorithm_ratio`."""
    same = [p for p in probed if p.workload == c.workload and p.executor == c.executor and p.cost is not None]
    if not same:
        return
    src = min(same, key=lambda p: (p.algorithm != c.algorithm, abs(p.per_round - c.per_round)))
    assert src.cost is not None
    round_s = src.cost.round_s * c.per_round / src.per_round * algorithm_ratio(c.algorithm, src.algorithm, probed)
    c.cost = RoundCost(round_s, src.cost.eval_s, 0, src.cost.executor)
    c.source = f"scaled from {src.describe()}"


def scenario_runs(sc: Scenario) -> list[SweepRun]:
    """A scenario's runs, a tuned one's trial runs first (:func:`fedbench.sweeps.tuning.plan`; every rung of
    a successive halving, with stand-ins for its survivors), then its final runs as its entries are
    written, marked tuned (the chosen values change no round's cost)."""
    from fedbench.sweeps.tuning import plan, projected_final_runs

    if sc.tuned:
        tuning = plan(sc)
        return tuning.projected_trial_runs() + projected_final_runs(tuning, None)
    shash = scenario_hash(sc)
    return [SweepRun(spec, seed, shash) for spec in sc.runs for seed in sc.seeds]


class Rate(BaseModel):
    """Seconds per round of ``model`` on ``dataset`` at ``per_round`` clients per round (and per
    evaluation), measured elsewhere; for every algorithm unless ``algorithm`` names one."""

    model_config = ConfigDict(extra="forbid", strict=True)

    dataset: str
    model: str
    per_round: int = Field(gt=0)
    round_s: float = Field(gt=0)
    eval_s: float = Field(0.0, ge=0)
    algorithm: str | None = None
    note: str = ""  # where the number comes from


class Rates(BaseModel):
    """A ``--rates`` file: ``source`` (what measured them) and the ``rates``."""

    model_config = ConfigDict(extra="forbid", strict=True)

    source: str
    rates: list[Rate] = Field(min_length=1)


def load_rates(path: Path) -> Rates:
    """The rates of a YAML file; a ValueError (one line) names the file and the first bad key."""
    import yaml

    try:
        return Rates.model_validate(yaml.safe_load(Path(path).read_text()))
    except OSError as exc:
        raise ValueError(f"--rates {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise ValueError(f"--rates {path}: not YAML ({str(exc).splitlines()[0]})") from None
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        raise ValueError(f"--rates {path}: {where}: {err['msg']}") from None


def rated(c: CostClass, rates: Rates) -> RoundCost | None:
    """The class's cost from the rate of its dataset and model (its algorithm's first, then the
    nearest S), the round time scaled by S; None when no rate covers it."""
    spec = c.runs[0].spec
    fits = [
        r
        for r in rates.rates
        if (r.dataset, r.model) == (spec.dataset["name"], spec.model["name"]) and r.algorithm in (None, c.algorithm)
    ]
    if not fits:
        return None
    rate = min(fits, key=lambda r: (r.algorithm is None, abs(r.per_round - c.per_round)))
    return RoundCost(rate.round_s * c.per_round / rate.per_round, rate.eval_s, 0, "rate")


@dataclass
class Estimate:
    """One set of runs: how many, how many done, the cost classes of the others, and the datasets
    not on disk (their classes are not priced)."""

    runs: int
    done: int
    classes: list[CostClass]
    missing: list[MissingDataset] = field(default_factory=list)

    @property
    def todo(self) -> list[SweepRun]:
        return [r for c in self.classes for r in c.runs]

    @property
    def seconds(self) -> float:
        """Seconds of the runs to do that have a cost (see :attr:`unknown` and :attr:`lacking`)."""
        return sum(c.seconds or 0.0 for c in self.classes)

    @property
    def lacking(self) -> list[CostClass]:
        """The classes whose dataset is not on disk."""
        names = {m.name for m in self.missing}
        return [c for c in self.classes if c.cost is None and c.runs[0].spec.dataset["name"] in names]

    @property
    def unknown(self) -> list[CostClass]:
        """The classes not priced for another reason (probe budget spent, probe failed, no rate)."""
        lacking = {id(c) for c in self.lacking}
        return [c for c in self.classes if c.cost is None and id(c) not in lacking]


class Estimator:
    """Probes shared by every estimate of one command (a class is probed once), under one budget,
    as ``options`` run (device, data dir, client executor, chunk, compile, client state, threads);
    datasets are read offline, never downloaded; nothing is written. With ``rates``, nothing is
    probed or read: classes are priced from the rates."""

    def __init__(
        self,
        options: RunOptions = RunOptions(),
        budget_s: float = BUDGET_S,
        max_probes: int = MAX_PROBES,
        rounds: int = PROBE_ROUNDS,
        rates: Rates | None = None,
        stand_in: bool = False,
    ):
        self.options, self.rates, self.stand_in = options, rates, stand_in
        self.cache = DataCache(options.data_dir, False, resolve_device(options.device))
        self.data_dir, self.budget_s, self.max_probes, self.rounds = options.data_dir, budget_s, max_probes, rounds
        self.spent = 0.0
        self.costs: dict[tuple, RoundCost] = {}
        self.probed: list[CostClass] = []  # the classes probed, each once, in order
        self.failed: dict[str, str] = {}  # class → why its probe failed
        self.missing: dict[str, MissingDataset] = {}  # datasets not on disk, by name

    @property
    def device(self) -> str:
        return str(self.cache.device)

    @property
    def where(self) -> str:
        """What the seconds are of: this device, or the rates' source."""
        return f"rates of {self.rates.source}" if self.rates is not None else self.device

    def estimate(
        self, runs: Sequence[SweepRun], out_dir: Path | None = None, options: RunOptions | None = None
    ) -> Estimate:
        """The runs' estimate as ``options`` (default: the estimator's) run them; those ``out_dir``'s
        store holds done count zero (read only)."""
        options = options or self.options
        status = read_statuses(out_dir, [r.run_id for r in runs]) if out_dir is not None else {}
        classes = classes_of([r for r in runs if status.get(r.run_id) not in DONE], options.executor)
        done = sum(status.get(r.run_id) in DONE for r in runs)
        if self.rates is not None:
            for c in classes:
                c.cost = rated(c, self.rates)
                c.source = "rate" if c.cost is not None else ""
            return Estimate(len(runs), done, classes)
        lacking = self.look_for_data(classes)
        for c in probe_order([c for c in classes if c.runs[0].spec.dataset["name"] not in lacking]):
            self.probe(c, options)
        for c in classes:
            if c.cost is None:
                borrow(c, self.probed)
        names = {c.runs[0].spec.dataset["name"] for c in classes if c.cost is None}
        return Estimate(len(runs), done, classes, [m for n, m in self.missing.items() if n in names])

    def look_for_data(self, classes: Sequence[CostClass]) -> set[str]:
        """The names of the classes' datasets not on disk (:func:`fedbench.data.missing`), remembered; under
        ``stand_in`` those with a generated stand-in are probed on it instead (the cache's ``stand_ins``)."""
        blocks = {c.runs[0].spec.dataset["name"]: c.runs[0].spec.dataset for c in classes}
        for m in missing(list(blocks.values()), self.data_dir, probing=True):
            if self.stand_in and m.name in blocks and can_stand_in(blocks[m.name]):
                self.cache.stand_ins.add(m.name)
            else:
                self.missing.setdefault(m.name, m)
        return set(self.missing)

    def probe(self, c: CostClass, options: RunOptions | None = None) -> None:
        """Time the class's first run, unless probed already, its dataset is missing, or the budget is spent."""
        if c.key in self.costs:
            c.cost, c.source = self.costs[c.key], "probed"
            return
        run, name = c.runs[0], c.runs[0].spec.dataset["name"]
        if name in self.missing or len(self.costs) >= self.max_probes or self.spent >= self.budget_s:
            return
        start = probe.CLOCK()
        options = options or self.options
        together = self.population(c, options)
        try:
            if together > 1:
                c.cost = probe.probe_population(run.spec, together, self.cache, options, self.rounds)
            else:
                c.cost = probe.probe_run(run.spec, run.seed, self.cache, options, self.rounds)
        except DatasetNotFoundError as exc:  # present but unreadable (a checksum, a truncated file)
            self.missing[name] = MissingDataset(name, self.data_dir, (), str(exc))
        except Exception as exc:  # a probe never stops the command: the class is left unestimated
            self.failed[c.describe()] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        self.spent += probe.CLOCK() - start
        if c.cost is not None:
            self.costs[c.key], c.source = c.cost, "probed"
            self.probed.append(c)

    def population(self, c: CostClass, options: RunOptions) -> int:
        """How many of the class's runs a probe trains together: as many as ``--population`` lets one
        population hold on this device (:func:`~fedbench.engine.population.population_size`), at most
        :data:`POPULATION_PROBE`, of the class's runs that share the first's population key; one for runs that
        train alone."""
        size, _ = population_size(options, self.cache.device)
        key = population_key(c.runs[0].spec, c.runs[0].seed)
        if size <= 1 or key is None:
            return 1
        sharing = sum(population_key(r.spec, r.seed) == key for r in c.runs)
        return min(size, sharing, POPULATION_PROBE)


def duration(seconds: float) -> str:
    """``3.1 h``, ``0.42 h (25 min)``, ``4 min``, ``36 s``."""
    hours = seconds / 3600
    if hours >= 1:
        return f"{hours:.1f} h"
    near = f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"
    return f"{hours:.2f} h ({near})" if hours >= 0.05 else near


def _rounds_text(runs: Sequence[SweepRun]) -> str:
    rounds = {r.spec.rounds for r in runs}
    return f"{rounds.pop():,} rounds" if len(rounds) == 1 else f"{sum(r.spec.rounds for r in runs):,} rounds in all"


def _runs_of(classes: Sequence[CostClass]) -> int:
    return sum(len(c.runs) for c in classes)


def lines(est: Estimate, estimator: Estimator, jobs: int = 1) -> list[str]:
    """The estimate's first line (``estimate on cpu: 16 run(s) to do (4 done) × 40 rounds ≈ 0.42 h``),
    then each probed class with its timings, the classes scaled or not priced, and each dataset not
    on disk with how to get it; one line when nothing can be priced for want of data."""
    todo = est.todo
    if not todo:
        return [f"estimate on {estimator.where}: nothing to run ({est.done} of {est.runs} run(s) done)"]
    if est.missing and len(est.lacking) == len(est.classes):
        return ["no estimate: " + "; ".join(m.line() for m in est.missing)]
    head = f"estimate on {estimator.where}: {len(todo):,} run(s) to do ({est.done} done) × {_rounds_text(todo)} "
    if all(c.cost is None for c in est.classes):
        return [head.rstrip() + ": not priced", *_class_lines(est, estimator.rates is not None)]
    head += total(est)
    if jobs > 1:
        head += f", {total(est, jobs)} wall with {jobs} parallel jobs"
    return [head, *_class_lines(est, estimator.rates is not None)]


def total(est: Estimate, jobs: int = 1) -> str:
    """``≈ 3.1 h``, or ``≥ 3.1 h`` when some runs are not priced; with ``jobs``, the wall time."""
    return ("≥ " if est.unknown or est.lacking else "≈ ") + duration(est.seconds / jobs)


def _dataset(c: CostClass) -> str:
    return c.runs[0].spec.dataset["name"]


def _rate_lines(classes: Sequence[CostClass]) -> list[str]:
    """The rated classes, one line per rate applied (dataset, model, S; every algorithm at once)."""
    groups: dict[tuple, list[CostClass]] = {}
    for c in classes:
        assert c.cost is not None
        spec = c.runs[0].spec
        groups.setdefault(
            (spec.dataset["name"], spec.model["name"], c.per_round, c.cost.round_s, c.cost.eval_s), []
        ).append(c)
    out = []
    for (dataset, model, s, round_s, eval_s), group in groups.items():
        evaluation = f" + {eval_s:.3g} s/evaluation" if eval_s else " (evaluation not in the rate)"
        out.append(
            f"  rate {dataset} {model} S={s}: {round_s:.3g} s/round{evaluation} ({len(group)} algorithm(s), "
            f"{_runs_of(group):,} run(s) to do, {duration(sum(c.seconds or 0.0 for c in group))})"
        )
    return out


def per_dataset(est: Estimate) -> str:
    """``per dataset: mnist 12 h (9,000 run(s)); cifar100 not priced (4,356 run(s))``."""
    parts = []
    for name in dict.fromkeys(_dataset(c) for c in est.classes):
        mine = [c for c in est.classes if _dataset(c) == name]
        priced = [c for c in mine if c.cost is not None]
        text = (
            f"{name} {duration(sum(c.seconds or 0.0 for c in priced))} ({_runs_of(priced):,} run(s))"
            if priced
            else name
        )
        if len(priced) < len(mine):
            text += f"{',' if priced else ''} not priced ({_runs_of(mine) - _runs_of(priced):,} run(s))"
        parts.append(text)
    return "per dataset: " + "; ".join(parts)


def _class_lines(est: Estimate, from_rates: bool) -> list[str]:
    """The probed, rated, scaled and unpriced classes of an estimate, a line each or a line per kind,
    then the hours per dataset where there are several."""
    out = []
    for c in (c for c in est.classes if c.source == "probed"):
        assert c.cost is not None
        out.append(
            f"  probe {c.describe()}: {c.cost.round_s:.3g} s/round + {c.cost.eval_s:.3g} s/evaluation "
            f"({len(c.runs)} run(s) to do, {duration(c.seconds or 0.0)})"
        )
    out += _rate_lines([c for c in est.classes if c.source == "rate"])
    borrowed = [c for c in est.classes if c.cost is not None and c.source not in ("probed", "rate")]
    if borrowed:
        out.append(
            f"  {len(borrowed)} more class(es) ({_runs_of(borrowed)} run(s)) scaled from a "
            "probe of the same data and model (by S, and by the algorithms' ratio on another workload)"
        )
    if est.unknown:
        names = ", ".join(c.describe() for c in est.unknown[:3]) + (", …" if len(est.unknown) > 3 else "")
        why = "no rate for them" if from_rates else "probe budget spent or probe failed"
        out.append(f"  not estimated ({_runs_of(est.unknown):,} run(s); {why}): {names}")
    for m in est.missing:
        runs = _runs_of([c for c in est.lacking if _dataset(c) == m.name])
        out.append(f"  not priced ({runs:,} run(s)): {m.line()}")
    if len({_dataset(c) for c in est.classes}) > 1:
        out.append("  " + per_dataset(est))
    return out


def probe_note(estimator: Estimator) -> list[str]:
    """What was probed (classes, rounds each, seconds spent, limits, failures, stand-in data) in one line; none
    when nothing was (no runs to do, a dataset missing, or rates instead of probes)."""
    if not estimator.costs and not estimator.failed:
        return []
    after = "".join(f"; probe of {k} failed: {v}" for k, v in estimator.failed.items())
    if estimator.cache.stand_ins:
        after += (
            f"; not on disk, probed on generated data of the real shape and size: "
            f"{', '.join(sorted(estimator.cache.stand_ins))}"
        )
    executors = "; ".join(sorted({c.executor for c in estimator.costs.values()}))
    return [
        f"probe: {len(estimator.costs)} cost class(es) on {estimator.device}, {estimator.rounds} timed round(s) "
        f"each after a warm-up round, {estimator.spent:.1f} s (limits: {estimator.max_probes} classes, "
        f"{estimator.budget_s:.0f} s)" + (f"; client executor {executors}" if executors else "") + after
    ]
