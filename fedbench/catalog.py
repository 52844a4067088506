"""What ``fedbench list`` shows: every registry with one-line descriptions and model sizes
(cells are escaped for rich, so ``[min|z|, max|z|]`` prints as written)."""

from __future__ import annotations

import torch
from rich.markup import escape

from fedbench.algorithms import ALGORITHMS
from fedbench.compress import COMPRESSORS
from fedbench.data import DATASETS
from fedbench.data.partition import PARTITIONS
from fedbench.models import MODELS, build_model, count_parameters
from fedbench.trackers import tracker_rows

# The input each model is usually paired with, for the parameter count shown by `fedbench list`.
REFERENCE_INPUTS: dict[str, tuple[tuple[int, ...], int, str]] = {
    "mlp": ((1, 28, 28), 10, "MNIST"),
    "logreg": ((60,), 10, "Synthetic"),
    "lenet5": ((3, 32, 32), 10, "CIFAR-10"),
    "resnet18": ((3, 32, 32), 10, "CIFAR-10"),
    "cnn1d": ((1, 40), 10, "MNIST-1D"),
    "small_cnn": ((1, 8, 8), 10, "digits"),
    "convmixer": ((3, 32, 32), 10, "CIFAR-10"),
}


# The client availability and straggler models (fedbench/engine/availability.py; keys in docs/scenarios.md).
AVAILABILITY = (
    ("always", "every client can be sampled (plain FL, the default)"),
    ("bernoulli", "client i available with probability p_i each round (p, or p_range: drawn once per client)"),
    ("markov", "an on/off chain per client: stay_on, stay_off (round 1 from the stationary distribution)"),
    ("diurnal", "p_i(t) = p_i·(1 + amplitude·sin(2πt/period)), clipped to [0, 1]"),
)
STRAGGLERS = (
    ("partial", "a fraction of the sampled clients do ⌈u·K_i⌉ of their steps, u uniform in work"),
    ("drop", "a fraction of the sampled clients miss the round"),
)
# The keys of the DP-FedAvg block (fedbench/privacy.py; docs/scenarios.md, "Differential privacy").
PRIVACY = (
    ("clip", "C", "each client update Δ_i is clipped to norm C (.inf: not clipped; adaptive_clip: C's start)"),
    ("noise_multiplier", "z", "N(0, (z·C/S)²) is added to the update average (weights 1/S); 0: no noise, ε = ∞"),
    ("adaptive_clip", "quantile, lr, count_noise", "C ← C·exp(−η_C(b̃ − γ)), b̃ the noised unclipped fraction"),
    ("delta", "δ", "the δ of the reported (ε, δ) (default 1/N^1.1)"),
    ("accountant", "rdp | prv", "Opacus's RDP or PRV accountant, sampling rate q = S/N per round"),
)


def _params_of(entry) -> str:
    fields = entry.params.model_fields
    return (
        ", ".join(
            k if f.is_required() else f"{k}={f.get_default(call_default_factory=True)!r}" for k, f in fields.items()
        )
        or "—"
    )


def catalog() -> dict[str, list[tuple[str, ...]]]:
    """Section → rows; the first row of each section is its header."""
    algos = [("name", "label", "description", "params (defaults)", "server defaults", "compression", "privacy")]
    algos += [
        (
            e.name,
            e.obj.caps.label,
            e.description,
            _params_of(e),
            str(dict(e.obj.caps.server) or "—"),
            "yes" if e.obj.caps.compression else "—",
            "yes" if e.obj.caps.client_dp else "—",
        )
        for e in ALGORITHMS
    ]
    datasets = [("name", "description", "params (defaults)")]
    datasets += [(e.name, e.description, _params_of(e)) for e in DATASETS]
    models = [("name", "description", "params (defaults)", "parameters")]
    for e in MODELS:
        shape, classes, what = REFERENCE_INPUTS.get(e.name, (None, 10, ""))
        size = "—"
        if shape is not None:
            with torch.device("meta"):  # shapes only: no weights are allocated or initialised
                size = f"{count_parameters(build_model(e.name, {}, shape, classes)):,} ({what})"
        models.append((e.name, e.description, _params_of(e), size))
    partitions = [("kind", "description", "params (defaults)")]
    partitions += [(e.name, e.description, _params_of(e)) for e in PARTITIONS]
    compressors = [("kind", "description", "params (defaults)", "unbiased")]
    compressors += [
        (e.name, e.description, _params_of(e), "yes" if e.obj.unbiased else "no (use error feedback)")
        for e in COMPRESSORS
    ]
    axes = [("block", "kind / mode", "description")]
    axes += [("clients.availability", name, text) for name, text in AVAILABILITY]
    axes += [("clients.stragglers", name, text) for name, text in STRAGGLERS]
    takes = ", ".join(e.name for e in ALGORITHMS if e.obj.caps.client_dp)
    privacy = [("key", "value", "description (DP-FedAvg: client-level (ε, δ) differential privacy)")]
    privacy += [(f"privacy.{key}", value, text) for key, value, text in PRIVACY]
    privacy.append(("algorithms", "", f"those that take privacy: {takes}"))
    sections = {
        "algorithms": algos,
        "datasets": datasets,
        "models": models,
        "partitions": partitions,
        "compressors": compressors,
        "clients": axes,
        "trackers": tracker_rows(),
        "privacy": privacy,
    }
    return {name: [tuple(escape(cell) for cell in row) for row in rows] for name, rows in sections.items()}
