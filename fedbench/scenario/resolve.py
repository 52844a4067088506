"""Resolution: a validated :class:`Scenario` becomes one :class:`RunSpec` per algorithm entry.

Each registered component's inline parameters are validated against its registry entry's schema
and each algorithm's declared :class:`~fedbench.algorithms.capabilities.Capabilities` are checked
against the scenario, once; every problem names its YAML path. Server settings resolve in this
order (later wins): :class:`ServerSpec` defaults, the algorithm's declared server defaults (e.g.
``fedadam`` → ``optimizer: adam, lr: 0.1``), the scenario's ``server`` block, the entry's ``server``.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from fedbench.algorithms import ALGORITHMS
from fedbench.algorithms.capabilities import Capabilities
from fedbench.compress import COMPRESSORS
from fedbench.data import DATASETS
from fedbench.data.partition import PARTITIONS
from fedbench.models import MODELS
from fedbench.optim.spec import ServerSpec
from fedbench.registry import Registry, UnknownNameError
from fedbench.scenario.errors import ScenarioError, format_errors
from fedbench.scenario.runspec import Components, RunSpec
from fedbench.scenario.schema import AlgorithmSpec, CompressionSpec, LocalSpec, PrivacySpec, Scenario
from fedbench.scenario.tunespec import Range, TuneSpec
from fedbench.strict import param_problems, strict_params


@dataclass
class Checked:
    """One component after validation: its resolved JSON form (``{key: name, **params}``) and
    its parameter model, or the problems that stopped it."""

    resolved: dict[str, Any]
    model: BaseModel | None
    problems: list[str]


def check_component(registry: Registry, name: str, params: dict, path: str, key: str = "name") -> Checked:
    """Validate ``params`` against the registry entry ``name`` in strict mode (:mod:`fedbench.strict`);
    problems name ``path``. The model is rebuilt from the resolved JSON, exactly what the spec's JSON
    gives back."""
    try:
        entry = registry.get(name)
    except UnknownNameError as exc:
        return Checked({}, None, [f"{path}.{key}: {exc}"])
    bad = param_problems(entry.params, params, path)
    if bad:
        return Checked({}, None, bad)
    try:
        dumped = strict_params(entry.params, params).model_dump(mode="json")
    except ValidationError as exc:
        return Checked({}, None, format_errors(exc, path))
    return Checked({key: name, **dumped}, entry.params.model_validate(dumped), [])


def _server(
    scenario: Scenario, algo: AlgorithmSpec, caps: Capabilities, path: str
) -> tuple[ServerSpec | None, list[str]]:
    """The entry's server settings: declared defaults < scenario ``server`` < entry ``server``."""
    raw = {**caps.server, **scenario.server.model_dump(exclude_unset=True), **algo.server}
    try:
        return ServerSpec.model_validate(raw), []
    except ValidationError as exc:
        return None, format_errors(exc, f"{path}.server")


def _capability_problems(
    scenario: Scenario, algo: AlgorithmSpec, caps: Capabilities, path: str, comp: tuple[CompressionSpec, str]
) -> list[str]:
    """The scenario asks for what the algorithm declares: a non-sgd local optimizer, compression."""
    problems = []
    if scenario.local.optimizer != "sgd" and not caps.local_optimizer:
        supported = ", ".join(e.name for e in ALGORITHMS if e.obj.caps.local_optimizer)
        problems.append(
            f"local.optimizer: {algo.name} ({path}) does not support {scenario.local.optimizer!r} (its local step "
            f"is its own); use sgd, or one of: {supported}"
        )
    spec, comp_path = comp
    if spec.kind != "none" and not caps.compression:
        supported = ", ".join(e.name for e in ALGORITHMS if e.obj.caps.compression)
        problems.append(
            f"{comp_path}.kind: {algo.name} does not support uplink compression; algorithms that do: {supported}"
        )
    return problems


def _privacy(
    scenario: Scenario, algo: AlgorithmSpec, caps: Capabilities, path: str
) -> tuple[PrivacySpec | None, list[str]]:
    """The entry's DP-FedAvg block (its own, else the scenario's; ``false``: none) with its defaults filled in
    (δ = 1/N^1.1, σ_b = S/20), or the problems that stop it, each naming the block's YAML path: an algorithm
    whose upload is not a model delta averaged by the server (``Capabilities.client_dp``), an axis that breaks
    the accountant's uniform sampling of S of N clients or sends more than the clipped update (availability,
    wireless, continual), an adaptive σ_b too small for z (z_Δ needs z < 2σ_b), opacus missing."""
    own = algo.privacy is not None
    spec = algo.privacy if own else scenario.privacy
    if spec is None or spec is False:
        return None, []
    where = f"{path}.privacy" if own else "privacy"
    n, s = scenario.clients.num, scenario.clients.per_round
    problems = []
    if not caps.client_dp:
        takes = ", ".join(e.name for e in ALGORITHMS if e.obj.caps.client_dp)
        problems.append(
            f"{where}: {algo.name} does not upload a model delta that the server averages, so DP-FedAvg cannot "
            f"clip and noise it; algorithms that take privacy: {takes}"
        )
    availability = scenario.clients.availability
    blocks = [
        ("clients.availability", availability is not None and availability.kind != "always"),
        ("wireless", scenario.wireless is not None),
        ("continual", scenario.continual is not None),
    ]
    for block, present in blocks:
        if present:
            problems.append(
                f"{where}: not supported with {block} (the accountant assumes S of all N clients sampled "
                "uniformly each round, and only the clipped, noised updates leaving the clients)"
            )
    adaptive = spec.adaptive_clip
    if adaptive is not None and adaptive.count_noise is None:
        adaptive = adaptive.model_copy(update={"count_noise": s / 20})
    if adaptive is not None and spec.noise_multiplier > 0:
        assert adaptive.count_noise is not None
        if not spec.noise_multiplier < 2 * adaptive.count_noise:
            problems.append(
                f"{where}.adaptive_clip.count_noise: σ_b = {adaptive.count_noise:g} leaves no noise for the updates "
                f"at noise_multiplier {spec.noise_multiplier:g}: z_Δ = (z⁻² − (2σ_b)⁻²)^(−1/2) needs z < 2σ_b "
                f"(σ_b is S/20 = {s / 20:g} unless given)"
            )
    if importlib.util.find_spec("opacus") is None:
        problems.append(f"{where}: needs opacus, the accountant (pip install 'fedbench[privacy]')")
    delta = spec.delta if spec.delta is not None else 1 / n**1.1
    return spec.model_copy(update={"delta": delta, "adaptive_clip": adaptive}), problems


def _space_values(value: list[Any] | Range) -> list[Any]:
    """The values of a space entry to check: a grid's or a choice's values, a range's two bounds."""
    if isinstance(value, list):
        return value
    return list(value.choice or value.uniform or value.log_uniform or ())


def _rounds_problems(tune: TuneSpec, rounds: int, where: str) -> list[str]:
    """``trials.rounds`` ≤ the scenario's ``rounds``; ``halving.min_rounds`` ≤ the trial rounds."""
    problems = []
    if tune.trials.rounds is not None and tune.trials.rounds > rounds:
        problems.append(
            f"{where}.trials.rounds: {tune.trials.rounds} exceeds the scenario's rounds ({rounds}); "
            "a trial is a shortened run, so trials.rounds ≤ rounds"
        )
    trial_rounds = tune.trials.rounds or rounds
    if tune.halving is not None and tune.halving.min_rounds > trial_rounds:
        problems.append(
            f"{where}.halving.min_rounds: {tune.halving.min_rounds} exceeds the trial rounds ({trial_rounds}); "
            "rung 0 runs min_rounds, the last rung the trial rounds"
        )
    return problems


def tune_problems(scenario: Scenario, i: int, server: ServerSpec, path: str) -> list[str]:
    """The ``tune`` block of ``algorithms[i]`` (its own or the scenario's) can run: its trials are no
    longer than the scenario (``trials.rounds`` ≤ ``rounds``, ``halving.min_rounds`` ≤ the trial rounds), each space key is one the entry takes (``local.<key>``, ``server.<key>``, an algorithm parameter) and each of its
    values (a range: both bounds) passes that key's own validation. Problems name the YAML path."""
    algo = scenario.algorithms[i]
    where = f"algorithms[{i}].tune" if algo.tune else "tune"
    try:
        tune = scenario.tune_of(i)
    except ValidationError as exc:
        return format_errors(exc, where)
    if tune is None:
        return []
    if scenario.continual is not None:
        return [f"{where}: tuning a continual scenario is not supported yet"]
    entry = f"algorithms[{i}] ({algo.name})"
    fields = set(ALGORITHMS.get(algo.name).params.model_fields)
    base = {"local": scenario.local.model_dump(), "server": server.model_dump()}
    schemas: dict[str, type[BaseModel]] = {"local": LocalSpec, "server": ServerSpec}
    problems = _rounds_problems(tune, scenario.rounds, where)
    for key, value in tune.space.items():
        head, _, rest = key.partition(".")
        at = f"{where}.space.{key}"
        if head in schemas and rest and rest not in schemas[head].model_fields:
            problems.append(f"{at}: {head} has no key {rest!r}; allowed: {', '.join(schemas[head].model_fields)}")
            continue
        if not (head in schemas and rest) and ("." in key or key not in fields):
            problems.append(
                f"{at}: {entry} cannot take {key!r}; use local.<key>, server.<key> or a parameter of "
                f"{algo.name} ({', '.join(sorted(fields)) or 'it has none'})"
            )
            continue
        for v in _space_values(value):
            if head in schemas and rest:
                try:
                    schemas[head].model_validate({**base[head], rest: v})
                except ValidationError as exc:
                    problems += [f"{at}: {line.split(': ', 1)[-1]} (value {v!r})" for line in format_errors(exc)]
            else:
                bad = check_component(ALGORITHMS, algo.name, {**algo.params(), key: v}, at).problems
                problems += [f"{at}: {line.split(': ', 1)[-1]} (value {v!r})" for line in bad]
    return problems


def _spec(
    scenario: Scenario,
    shared: dict[str, Checked],
    algorithm: dict,
    compression: dict,
    server: ServerSpec,
    privacy: PrivacySpec | None = None,
) -> RunSpec:
    """The :class:`RunSpec` of one entry (its JSON and hash are frozen: see runspec.py)."""
    return RunSpec(
        scenario=scenario.name,
        dataset=shared["dataset"].resolved,
        model=shared["model"].resolved,
        clients=scenario.clients,
        partition=shared["partition"].resolved,
        local=scenario.local,
        rounds=scenario.rounds,
        eval=scenario.eval,
        compression=compression,
        algorithm=algorithm,
        server=server,
        targets=scenario.targets,
        checkpoint_every=scenario.checkpoint_every,
        paper=scenario.paper,
        wireless=scenario.wireless,
        continual=scenario.continual,
        privacy=privacy,
        blowup=scenario.blowup,
    )


def _entry(
    scenario: Scenario, i: int, shared: dict[str, Checked], labels: set[str], scale: str
) -> tuple[RunSpec | None, list[str]]:
    """Resolve ``algorithms[i]``; returns its spec (None when it cannot be built) and its problems."""
    algo, path = scenario.algorithms[i], f"algorithms[{i}]"
    checked = check_component(ALGORITHMS, algo.name, algo.params(), path)
    if checked.problems:
        return None, checked.problems
    caps = ALGORITHMS.capabilities(algo.name)
    label = algo.label or caps.label
    problems = [f"{path}.label: {label!r} is used twice; give each entry a distinct label"] if label in labels else []
    labels.add(label)
    server, p = _server(scenario, algo, caps, path)
    if server is None:
        return None, problems + p
    problems += tune_problems(scenario, i, server, path)
    comp = (algo.compression, f"{path}.compression") if algo.compression else (scenario.compression, "compression")
    compression = check_component(COMPRESSORS, comp[0].kind, comp[0].params(), comp[1], "kind")
    problems += _capability_problems(scenario, algo, caps, path, comp) + compression.problems
    privacy, p = _privacy(scenario, algo, caps, path)
    problems += p
    algorithm = {"name": algo.name, "label": label, **{k: v for k, v in checked.resolved.items() if k != "name"}}
    spec = _spec(scenario, shared, algorithm, compression.resolved, server, privacy)
    models = {k: c.model for k, c in shared.items() if c.model is not None}
    if problems or len(models) < len(shared) or compression.model is None or checked.model is None:
        return spec, problems
    return spec.resolved(scale, Components(**models, compression=compression.model, algorithm=checked.model)), problems


def resolve_runs(scenario: Scenario, scale: str = "paper", source: str = "scenario") -> tuple[RunSpec, ...]:
    """One :class:`RunSpec` per algorithm entry, every default filled in, at ``scale``; raises
    :class:`ScenarioError` listing every problem of the scenario."""
    shared = {
        "dataset": check_component(DATASETS, scenario.dataset.name, scenario.dataset.params(), "dataset"),
        "model": check_component(MODELS, scenario.model.name, scenario.model.params(), "model"),
        "partition": check_component(
            PARTITIONS, scenario.partition.kind, scenario.partition.params(), "partition", "kind"
        ),
    }
    problems = [p for c in shared.values() for p in c.problems]
    specs: list[RunSpec] = []
    labels: set[str] = set()
    for i in range(len(scenario.algorithms)):
        spec, p = _entry(scenario, i, shared, labels, scale)
        problems += p
        if spec is not None:
            specs.append(spec)
    if problems:
        raise ScenarioError(problems, source)
    return tuple(specs)
