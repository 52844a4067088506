"""The ``tune:`` block: how an algorithm entry's hyper-parameters are searched before its final runs.

::

    tune:                                   # on the scenario (every entry) or on one entry (wins there)
      space:                                # dotted keys of the entry → a grid (list) or a range
        local.lr: [0.001, 0.01, 0.1]        # a list: every value (the grid is the cartesian product)
        server.lr: {log_uniform: [0.1, 10]} # a range: drawn by the seeded sampler, ``budget`` trials
        mu: {choice: [0.01, 0.1, 1]}        # an algorithm parameter by its name
      budget: 8                             # trials drawn when the space has a range (grids need none)
      budget_fraction: 0.25                 # or, on a grid: that share of each entry's own grid (at least 1)
      include_written: true                 # the entry's own setting is one of the drawn candidates (default)
      seed: 0                               # the sampler's seed (same scenario and seed → same trials)
      scheduler: halving                    # grid | random | halving (absent: grid, or random with a budget)
      halving: {min_rounds: 2, eta: 3}      # halving: rung k runs min_rounds·eta^k rounds, keeps the top 1/eta
      trials: {seeds: [0], rounds: 20}      # what each trial runs (default: the scenario's seeds, rounds)
      select: {metric: top_acc, max_drop: 0.05}  # top_acc | final_acc | rounds_to (with target); max_drop:
                                            # a trial run ending more than that below its top counts its final
      protocol: validation                  # validation (held-out split of each client) | paper (test set)
      validation_fraction: 0.1

An entry's own block is laid over the scenario's (:func:`merge_tune`): its ``space`` keys are added
to the scenario's (its values win), its ``trials`` keys replace those given, every other key it gives
replaces the scenario's; ``tune: false`` on an entry leaves that entry untuned, on the scenario every
entry (a scale overlay switches tuning off with it). A ``budget`` on a pure grid draws that many
distinct grid points (random search over the grid), the same count for every entry whatever its grid;
``budget_fraction`` draws ⌈f·|grid|⌉ of each entry's own grid, so a method with a larger grid is searched
as widely as one with a small grid. With ``include_written`` (the default), a draw that misses the
entry's setting as written (the paper's stated values, when the space holds them) gives its last place
to it, so a search never ranks only settings other than the one the scenario states.

``scheduler`` says how the candidates (the settings above: the grid, or the budget's draws) are run.
Absent, it is today's rule, and it changes no trial: ``grid`` for a pure grid without a budget (every
point), ``random`` otherwise (the seeded draws). Given, ``grid`` insists on the whole grid (no range,
no budget) and ``random`` on a budget; ``halving`` is successive halving (Jamieson & Talwalkar 2016)
over the candidates with the trial's rounds as the resource, rung by rung as :meth:`HalvingSpec.rungs`
states; each rung's runs are ordinary trial runs, and the survivors are chosen from the store by the
``select`` metric (:mod:`fedbench.sweeps.halving`). Optuna's ``SuccessiveHalvingPruner`` is not used:
it is the asynchronous variant (a trial is judged against the peers that reached its rung so far, so
the outcome depends on which run finished first) and it prunes inside a running trial through
``trial.report``; fedbench's trials are store runs of fixed rounds, run in parallel and resumed by run
id, so the synchronous schedule is computed here from the store, the same whatever the order.

The block changes no run of the scenario itself (``fedbench run`` ignores it, and no spec's JSON or
hash holds it); its trials are runs of their own (:mod:`fedbench.sweeps.tuning`). Keys an entry can
take (checked with their values by :func:`fedbench.scenario.resolve.tune_problems`): ``local.<key>``
and ``server.<key>`` of those blocks' schemas, and the entry's algorithm parameters by name.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from fedbench.strict import Seed, StrictModel

PROTOCOLS = ("validation", "paper")
METRICS = ("top_acc", "final_acc", "rounds_to")


class Range(StrictModel):
    """A searched range: exactly one of ``log_uniform: [lo, hi]``, ``uniform: [lo, hi]``, ``choice: [...]``."""

    log_uniform: tuple[float, float] | None = None
    uniform: tuple[float, float] | None = None
    choice: list[Any] | None = None

    @model_validator(mode="after")
    def _one(self) -> Range:
        given = [k for k in ("log_uniform", "uniform", "choice") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"a range is exactly one of log_uniform, uniform, choice; got {given or 'none'}")
        if self.choice is not None and not self.choice:
            raise ValueError("choice: expected a non-empty list of values, got []")
        for kind in ("log_uniform", "uniform"):
            bounds = getattr(self, kind)
            if bounds is not None and bounds[0] > bounds[1]:
                raise ValueError(f"{kind}: low must be ≤ high, got {list(bounds)}")
        if self.log_uniform is not None and self.log_uniform[0] <= 0:
            raise ValueError(f"log_uniform: bounds must be > 0, got {list(self.log_uniform)}")
        return self

    def draw(self, rng: Any) -> Any:
        """One value from ``rng`` (a NumPy Generator); a number drawn from a range is kept to three
        significant digits (readable run names), within the bounds."""
        if self.choice is not None:
            return self.choice[int(rng.integers(len(self.choice)))]
        if self.uniform is not None:
            lo, hi = self.uniform
            value = float(rng.uniform(lo, hi))
        else:
            assert self.log_uniform is not None  # _one: exactly one of the three is given
            lo, hi = self.log_uniform
            value = float(math.exp(rng.uniform(math.log(lo), math.log(hi))))
        return min(max(float(f"{value:.3g}"), lo), hi)

    def holds(self, value: Any) -> bool:
        """True when ``value`` could be drawn: one of the choices, or a number within the bounds."""
        if self.choice is not None:
            return value in self.choice
        lo, hi = self.uniform if self.uniform is not None else self.log_uniform  # type: ignore[misc]
        return isinstance(value, int | float) and not isinstance(value, bool) and lo <= value <= hi


def _space_value(value: Any) -> list[Any] | Range:
    """A space entry: a non-empty list (a grid) or a :class:`Range` (errors land on ``space.<key>``)."""
    if isinstance(value, Range):
        return value
    if isinstance(value, list):
        if not value:
            raise ValueError("expected a non-empty list of values")
        return value
    if not isinstance(value, dict):
        raise ValueError(
            "expected a list of values or a range ({log_uniform: [1e-3, 1e-1]}, {uniform: [0, 1]} "
            "or {choice: [0.1, 1]})"
        )
    try:
        return Range.model_validate(value)
    except ValidationError as exc:
        err = exc.errors()[0]
        if err["type"] == "extra_forbidden":
            raise ValueError(
                f"unknown range {err['loc'][0]!r}; a range is one of log_uniform, uniform, choice"
            ) from None
        where = ".".join(str(p) for p in err["loc"])
        raise ValueError(f"{where + ': ' if where else ''}{err['msg'].removeprefix('Value error, ')}") from None


SpaceValue = Annotated[Any, AfterValidator(_space_value)]


class TrialsSpec(StrictModel):
    """What each trial runs (absent keys: the scenario's own)."""

    seeds: list[Seed] | None = Field(default=None, min_length=1)
    rounds: int | None = Field(default=None, ge=1)


class SelectSpec(StrictModel):
    """The selection metric (mean over the trial seeds; ties go to the earlier trial)."""

    metric: Literal["top_acc", "final_acc", "rounds_to"] = "top_acc"
    target: float | None = Field(default=None, description="accuracy in (0, 1] for rounds_to")
    max_drop: float | None = Field(
        default=None,
        ge=0,
        lt=1,
        description="top_acc: a trial run whose final accuracy is more than this below its top scores its final",
    )

    @field_validator("target")
    @classmethod
    def _in_unit(cls, target: float | None) -> float | None:
        if target is not None and not 0 < target <= 1:
            raise ValueError("must lie in (0, 1] (accuracy as a fraction)")
        return target

    @model_validator(mode="after")
    def _target(self) -> SelectSpec:
        if self.metric == "rounds_to" and self.target is None:
            raise ValueError("metric rounds_to needs a target in (0, 1]")
        if self.max_drop is not None and self.metric != "top_acc":
            raise ValueError(f"max_drop guards top_acc only, not {self.metric}")
        return self

    def describe(self) -> str:
        """``top_acc``, ``rounds_to 0.8``, ``top_acc max_drop 0.05``: the metric as the tables and records say it."""
        target = f" {self.target:g}" if self.target is not None else ""
        return self.metric + target + (f" max_drop {self.max_drop:g}" if self.max_drop is not None else "")


class HalvingSpec(StrictModel):
    """Successive halving on the trials' rounds (``scheduler: halving``)."""

    min_rounds: int = Field(ge=1, description="rounds of rung 0 (at most the trial rounds)")
    eta: int = Field(default=3, ge=2, description="each rung keeps the top 1/eta of its candidates (at least one)")

    def rungs(self, candidates: int, rounds: int) -> list[tuple[int, int]]:
        """(rounds, candidates) of each rung: rung k runs ``min_rounds·eta^k`` rounds, capped at the trial
        ``rounds``, with the top ⌊n/eta⌋ (at least one) of the rung below, until a rung at ``rounds``; a
        lone survivor goes straight to ``rounds`` (there is nothing left to compare below it)."""
        out: list[tuple[int, int]] = []
        n, r = candidates, self.min_rounds
        while True:
            r = rounds if n == 1 else min(r, rounds)
            out.append((r, n))
            if r >= rounds:
                return out
            n, r = max(1, n // self.eta), r * self.eta


class TuneSpec(StrictModel):
    """A ``tune:`` block (see the module docstring)."""

    space: dict[str, SpaceValue] = Field(min_length=1, description="dotted key → list (grid) or range")
    budget: int | None = Field(default=None, ge=1, description="trials drawn when the space holds a range")
    budget_fraction: float | None = Field(default=None, gt=0, le=1, description="on a grid: this share of it")
    seed: int = Field(default=0, ge=0, description="the sampler's seed")
    include_written: bool = Field(default=True, description="the entry's setting as written is a drawn candidate")
    scheduler: Literal["grid", "random", "halving"] | None = Field(
        default=None, description="how the candidates run (absent: grid, or random with a budget)"
    )
    halving: HalvingSpec | None = Field(default=None, description="scheduler halving: its rungs")
    trials: TrialsSpec = Field(default_factory=TrialsSpec)
    select: SelectSpec = Field(default_factory=SelectSpec)
    protocol: Literal["validation", "paper"] = "validation"
    validation_fraction: float = Field(default=0.1, gt=0, lt=1)

    @model_validator(mode="after")
    def _checks(self) -> TuneSpec:
        if self.sampled and self.budget is None:
            raise ValueError("budget: a space with a range needs a budget ≥ 1 (the number of trials drawn)")
        if self.budget is not None and self.budget_fraction is not None:
            raise ValueError("budget and budget_fraction: give one (a count, or a share of each entry's grid)")
        if self.sampled and self.budget_fraction is not None:
            raise ValueError("budget_fraction: a share of a grid; a space with a range needs a budget (a count)")
        drawn = self.budget is not None or self.budget_fraction is not None
        if self.scheduler == "grid" and (self.sampled or drawn):
            what = "a range" if self.sampled else "a budget" if self.budget is not None else "a budget_fraction"
            raise ValueError(
                f"scheduler: grid runs every point of a grid of lists, got {what}; "
                "draws are scheduler random (or halving)"
            )
        if self.scheduler == "random" and not drawn:
            raise ValueError("scheduler: random draws budget (or budget_fraction) settings; give one")
        if self.scheduler == "halving" and self.halving is None:
            raise ValueError("halving: scheduler halving needs halving: {min_rounds: r0, eta: 3}")
        if self.halving is not None and self.scheduler != "halving":
            raise ValueError(f"halving: given with scheduler {self.scheduler or 'absent'}; set scheduler: halving")
        return self

    @property
    def search(self) -> Literal["grid", "random", "halving"]:
        """The scheduler in effect: the one given, else ``grid`` for a pure grid run whole (no budget,
        or one that covers it), else ``random`` (the seeded draws)."""
        if self.scheduler is not None:
            return self.scheduler
        budget, grid = self.trial_budget(), self.grid_size()
        return "grid" if grid is not None and (budget is None or budget >= grid) else "random"

    def rungs(self, candidates: int, rounds: int) -> list[tuple[int, int]]:
        """(rounds, candidates) of each rung: one rung of every candidate at ``rounds`` (grid, random),
        or successive halving's (:meth:`HalvingSpec.rungs`)."""
        return [(rounds, candidates)] if self.halving is None else self.halving.rungs(candidates, rounds)

    def grid_size(self) -> int | None:
        """The number of settings of a pure grid (None when a range is searched)."""
        return None if self.sampled else math.prod(len(v) for v in self.space.values())

    def trial_budget(self) -> int | None:
        """How many grid points are drawn (None: the whole grid, or a sampled space's ``budget``)."""
        grid = self.grid_size()
        if grid is not None and self.budget_fraction is not None:
            return max(1, math.ceil(self.budget_fraction * grid - 1e-9))
        return self.budget

    @property
    def sampled(self) -> bool:
        """True when a range is searched (the sampler draws ``budget`` trials), false for a pure grid."""
        return any(isinstance(v, Range) for v in self.space.values())


class EntryTune(StrictModel):
    """An algorithm entry's ``tune:`` block: any key of :class:`TuneSpec`, laid over the scenario's
    block by :func:`merge_tune` (alone, it must give a ``space``)."""

    space: dict[str, SpaceValue] = Field(default_factory=dict, description="keys added to the scenario's space")
    budget: int | None = Field(default=None, ge=1)
    budget_fraction: float | None = Field(default=None, gt=0, le=1)
    seed: int | None = Field(default=None, ge=0)
    include_written: bool | None = None
    scheduler: Literal["grid", "random", "halving"] | None = None
    halving: HalvingSpec | None = None
    trials: TrialsSpec | None = None
    select: SelectSpec | None = None
    protocol: Literal["validation", "paper"] | None = None
    validation_fraction: float | None = Field(default=None, gt=0, lt=1)


def merge_tune(base: TuneSpec | None, entry: EntryTune) -> TuneSpec:
    """``entry`` laid over ``base``: space keys added (the entry's win), ``trials`` key by key, every
    other key the entry gives replaces the base's; an entry's ``scheduler: grid`` drops the base's
    budgets and ``halving`` block, ``scheduler: random`` its ``halving`` block. Raises ``ValidationError`` for a
    merged block that cannot run (no space; a range without a budget)."""
    merged: dict[str, Any] = base.model_dump(exclude_unset=True) if base is not None else {}
    merged["space"] = {**(base.space if base is not None else {}), **entry.space}
    if entry.trials is not None:
        merged["trials"] = {**merged.get("trials", {}), **entry.trials.model_dump(exclude_unset=True)}
    for one, other in (("budget", "budget_fraction"), ("budget_fraction", "budget")):
        if getattr(entry, one) is not None:  # the entry's kind of budget replaces the scenario's
            merged.pop(other, None)
    dropped = {"grid": ("budget", "budget_fraction", "halving"), "random": ("halving",)}.get(entry.scheduler or "", ())
    for key in dropped:  # an entry's scheduler drops what the scenario's block gave only for another
        merged.pop(key, None)
    for key in (
        "budget",
        "budget_fraction",
        "seed",
        "include_written",
        "scheduler",
        "halving",
        "select",
        "protocol",
        "validation_fraction",
    ):
        if getattr(entry, key) is not None:
            value = getattr(entry, key)
            merged[key] = value.model_dump() if key in ("select", "halving") else value
    return TuneSpec.model_validate(merged)


def _tag(value: Any) -> str:
    return "tune off" if value is False else "tune block"


# ``tune:`` on a scenario or an entry: a block, or ``false`` (errors name the block's keys: the
# tags, which hold a space, are left out of error paths by fedbench.scenario.errors)
ScenarioTune = Annotated[
    Annotated[TuneSpec, Tag("tune block")] | Annotated[Literal[False], Tag("tune off")], Discriminator(_tag)
]
EntryTuneField = Annotated[
    Annotated[EntryTune, Tag("tune block")] | Annotated[Literal[False], Tag("tune off")], Discriminator(_tag)
]


class TunedFrom(StrictModel):
    """A final run's record of its tuning (a :class:`RunSpec` field: tuned runs are runs of their
    own, marked in the tables): the chosen values, how many trials were compared, the protocol and
    the selection metric, the trials' rounds and seeds."""

    values: dict[str, Any]
    trials: int = Field(ge=1, description="settings compared")
    protocol: Literal["validation", "paper"]
    metric: str = Field(description="the selection metric, e.g. top_acc or rounds_to 0.8")
    rounds: int = Field(ge=1, description="rounds of each trial run")
    seeds: list[int] = Field(description="seeds of each trial")
    rungs: list[tuple[int, int]] | None = Field(
        default=None, description="successive halving: (rounds, candidates) of each rung (absent: one rung)"
    )

    @model_serializer(mode="wrap")
    def _omit_one_rung(self, handler: Any) -> dict[str, Any]:
        """No ``rungs`` key without halving: a tuned run of one rung keeps the JSON and hash it had."""
        data = handler(self)
        if self.rungs is None:
            data.pop("rungs", None)
        return data


class ValidationSplit(StrictModel):
    """A run's held-out validation split: ``fraction`` of each client's training samples, stratified
    by label, from the client's ``("validation", client)`` stream (a :class:`RunSpec` field: it
    changes the numbers, so it is part of the run's identity)."""

    fraction: float = Field(gt=0, lt=1)
