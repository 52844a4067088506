"""What each way of running the batched step costs on this machine, measured: ``--compile auto``'s choice.

The compiled step (:mod:`fedbench.engine.compiled`) saves a fixed time a step and costs its compilation once per
model and chunk shape: 5–35 s on this project's CPU from an empty cache, 23–70 s and more on an H200, where
ResNet-18-BN had not compiled after 70 s. ``auto`` measures it against the eager step, on the run's own model and
one chunk's shape, and takes it where its saving over the run's local steps repays the compilation
:data:`PAYBACK` times over; else the step stays eager::

    steps × (eager_s − mode_s) ≥ PAYBACK × setup_s(mode)

(:func:`priced_choice`). The graphed step (:mod:`fedbench.engine.graphed`, CUDA only: the eager kernels replayed,
set up by a capture of a few steps) is priced by the same rule, and between two modes that pay the larger net
saving wins; but ``auto`` measures it only once :data:`AUTO_GRAPHS` is set, after its capture has passed the CUDA
tests on a GPU (until then ``--compile graphs`` asks for it). Measuring the eager step costs :data:`PRICE_CALLS`
calls of it, so a run of fewer than :data:`~fedbench.engine.compiled.MIN_PRICED_STEPS` local steps is not measured
and stays eager. Compiling is measured only where it could pay, where the run's eager steps take longer than
:data:`PAYBACK` × :data:`COMPILE_FLOOR_S`. A mode whose gradients differ from the eager step's (beyond
:data:`AGREE_RTOL` of their norm), or that fails to build, is never taken. The measuring draws nothing from the
run's streams (its batch is the first training samples, its mask ones, its dropout keys zero), and the steps it
built are the ones the run then calls: a compilation taken is not paid twice.

The prices are kept in ``<out>/compile-cache/step-prices.json`` (:class:`PriceBook`), keyed by the device, the torch
version, the model's architecture and the step's input shapes, so later runs into the same results folder decide
from them without measuring. A run records the step it took in its checkpoints (``"step"``), and an ``auto`` run
resumed takes that step again, so its numbers do not depend on timings taken after it began.
``--compile on|off|graphs`` pins the choice.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

from fedbench.engine.compiled import COMPILE_CACHE, STEP_WORDS, StepMode, step_function, use_compile_cache
from fedbench.engine.graphed import signature

PAYBACK = 2.0  # a mode's saving over the run must repay its set-up this many times over
PRICE_CALLS = 4  # calls of a step to price it: the first (set-up, lazy initialisation) and three timed ones
COMPILE_FLOOR_S = 5.0  # the least compilation measured (the tiny MLP, this project's CPU, warm cache)
# A mode agrees with the eager step when its gradients are within this of the eager ones' norm: a broken step is
# off by the order of the gradient itself, while float32's rounding alone moved ResNet-18-BN's compiled gradient by
# 1.8e-3 of its norm on this project's CPU (1.2e-14 in float64; S = 2, batch 16).
AGREE_RTOL = 2e-2
PRICES_FILE = "step-prices.json"  # under <out>/compile-cache/
# Whether auto measures the graphed step on CUDA: not until its capture of the vmapped step has passed
# tests/engine/test_gpu.py on a GPU (benchmarks/gpu_population.sh runs them); a capture gone wrong must not
# reach the runs that never asked for it.
AUTO_GRAPHS = False


@dataclass(frozen=True)
class Price:
    """One way of running the step: seconds a step once set up, seconds to set it up (the first call less a
    step: compilation, capture), whether its outputs agree with the eager step's, and why it failed to build."""

    step_s: float
    setup_s: float = 0.0
    agrees: bool = True
    failed: str = ""


Prices = Mapping[str, Price]  # by mode: "eager", and where measured "compiled", "graphed"


def priced_choice(prices: Prices, steps: int, source: str = "measured") -> tuple[StepMode, str]:
    """The step for a run of ``steps`` local steps at ``prices`` (``source``: measured now, or known from the
    price book), and why: the run log's words."""
    eager = prices["eager"].step_s
    best: tuple[float, StepMode, str] = (0.0, "eager", "")
    refused = []
    for mode, setup in (("graphed", "capture"), ("compiled", "compile")):
        price = prices.get(mode)
        if price is None:
            if mode == "compiled":
                refused.append(f"compiled not measured: {cheap_choice(eager, steps) or 'not asked'}")
            continue
        if not price.agrees:
            refused.append(f"{mode} {price.failed or 'disagreed with eager'}")
            continue
        saved = steps * (eager - price.step_s)
        terms = (
            f"{mode} {eager * 1e3:.2f} → {price.step_s * 1e3:.2f} ms a step saves {saved:,.1f} s over {steps:,} steps "
            f"against {price.setup_s:.1f} s to {setup}"
        )
        if saved >= PAYBACK * price.setup_s and saved - price.setup_s > best[0]:
            best = (saved - price.setup_s, mode, terms)
        else:
            refused.append(terms)
    _, mode, terms = best
    said = terms if mode != "eager" else "; ".join(refused)
    return mode, f"step {STEP_WORDS[mode]} (auto, {source}: {said})"


def cheap_choice(eager_s: float, steps: int) -> str | None:
    """Why compiling is not even measured for a run whose ``steps`` eager steps take ``eager_s`` each (None: it
    could pay, measure it)."""
    total = steps * eager_s
    if total < PAYBACK * COMPILE_FLOOR_S:
        return f"its {steps:,} eager steps take {total:.1f} s, less than {PAYBACK:g} × {COMPILE_FLOOR_S:g} s to compile"
    return None


def _sync(device: torch.device) -> Callable[[], None]:
    return (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)


def timed_calls(step: Callable[..., Any], inputs: tuple[Any, ...], sync: Callable[[], None]) -> tuple[Price, Any]:
    """:data:`PRICE_CALLS` calls of ``step``: its price (the median of the timed calls; the first call less that)
    and its first outputs."""
    sync()
    start = time.perf_counter()
    out = step(*inputs)
    sync()
    first = time.perf_counter() - start
    times = []
    for _ in range(PRICE_CALLS - 1):
        start = time.perf_counter()
        step(*inputs)
        sync()
        times.append(time.perf_counter() - start)
    each = statistics.median(times)
    return Price(each, max(first - each, 0.0)), out


def agrees(out: Any, eager: Any) -> bool:
    """Whether a mode's gradients (the first output) are the eager step's, to :data:`AGREE_RTOL` of their norm."""
    got, want = tree_flatten(out)[0][0], tree_flatten(eager)[0][0]
    if not bool(torch.isfinite(got).all()):
        return False
    return float(torch.linalg.vector_norm(got - want)) <= AGREE_RTOL * float(torch.linalg.vector_norm(want)) + 1e-12


def measure(
    layers: Any, inputs: tuple[Any, ...], steps: int, device: torch.device, out: Path | None, graphs: bool = False
) -> dict[str, Price]:
    """The prices of the step of ``layers``' model on ``inputs`` (one chunk's), for a run of ``steps`` local steps:
    eager always; graphed on CUDA where ``graphs``; compiled where :func:`cheap_choice` says it could pay (its
    graphs cached under ``out``). A mode that fails to build is priced as disagreeing, and a warning says why."""
    sync = _sync(device)
    layers.model.module.train()
    eager, eager_out = timed_calls(step_function(layers, "eager"), inputs, sync)
    prices = {"eager": eager}

    def price(mode: StepMode) -> Price:
        try:
            timed, out = timed_calls(step_function(layers, mode), inputs, sync)
        except Exception as exc:  # a step that cannot be built here is never taken; the run goes on eager
            layers.steps.pop(mode, None)
            failed = f"failed ({type(exc).__name__}: {exc})"
            warnings.warn(f"--compile auto: the {mode} step {failed}", RuntimeWarning, stacklevel=2)
            return Price(eager.step_s, 0.0, agrees=False, failed=failed)
        return Price(timed.step_s, timed.setup_s, agrees(out, eager_out))

    if graphs and device.type == "cuda":
        prices["graphed"] = price("graphed")
    if cheap_choice(eager.step_s, steps) is None:
        if out is not None:
            use_compile_cache(out)
        prices["compiled"] = price("compiled")
    return prices


def price_key(layers: Any, inputs: tuple[Any, ...], device: torch.device) -> str:
    """What a price depends on: the device, torch, the model's architecture and the step's input shapes."""
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu×{torch.get_num_threads()}"
    parts = [name, torch.__version__, repr(layers.model.module), repr(signature(inputs))]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


class PriceBook:
    """Measured prices kept in ``<out>/compile-cache/step-prices.json`` (in memory only when ``out`` is None), read
    afresh at each look-up (another process may have added some) and written whole through a temporary file."""

    def __init__(self, out: Path | None = None):
        self.out = out
        self.path = None if out is None else Path(out) / COMPILE_CACHE / PRICES_FILE
        self.memory: dict[str, dict[str, dict]] = {}

    def _read(self) -> dict[str, dict[str, dict]]:
        if self.path is None or not self.path.exists():
            return dict(self.memory)
        try:
            return {**json.loads(self.path.read_text()), **self.memory}
        except (OSError, ValueError):
            return dict(self.memory)

    def get(self, key: str) -> dict[str, Price] | None:
        found = self._read().get(key)
        return None if found is None else {mode: Price(**p) for mode, p in found.items()}

    def put(self, key: str, prices: Mapping[str, Price]) -> None:
        self.memory[key] = {mode: asdict(p) for mode, p in prices.items()}
        if self.path is None:
            return
        book = self._read()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(book, indent=1, sort_keys=True))
        os.replace(tmp, self.path)


def priced_step(
    layers: Any, inputs: tuple[Any, ...], steps: int, device: torch.device, book: PriceBook
) -> tuple[StepMode, str]:
    """A run's ``auto`` choice (:func:`priced_choice`): at the prices in ``book`` where they are known (measured
    with compiling, or where compiling could not pay this run either), else measured on ``inputs`` (one chunk's)
    and added to it. The compiled and graphed steps the choice did not take are dropped (their graphs' memory
    freed)."""
    key = price_key(layers, inputs, device)
    known = book.get(key)
    if known is not None and not AUTO_GRAPHS:
        known.pop("graphed", None)  # priced by a benchmark, or by a later fedbench: not taken by this one
    if known is not None and ("compiled" in known or cheap_choice(known["eager"].step_s, steps) is not None):
        mode, why = priced_choice(known, steps, "known prices")
    else:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            prices = measure(layers, inputs, steps, device, book.out, AUTO_GRAPHS)
        book.put(key, prices)
        mode, why = priced_choice(prices, steps)
    for other in ("compiled", "graphed"):
        if other != mode:
            layers.steps.pop(other, None)
    return mode, why
