"""What an algorithm is and needs, declared once where it is registered.

The catalogue (``fedbench list``), the scenario validator and the engine all read this one
declaration: nothing about an algorithm's needs lives in class flags, untyped registration
extras or string keys shared between modules.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

INPUTS = ("full_grad", "memory_grad", "memory_size", "bits")
"""The engine inputs an algorithm may declare (``Capabilities.inputs``), each ``[S, ...]`` per round:
``full_grad`` = ∇f_i(x_t) on all of client i's data before local work; ``memory_grad`` = ∇f_i†(x_t)
on a replay-memory draw and ``memory_size`` its memory's size (zeros without a memory); ``bits`` the
bit widths of a bandwidth allocation (absent without one). Who provides each:
:mod:`fedbench.engine.inputs`."""


@dataclass(frozen=True)
class Capabilities:
    """One algorithm's declaration.

    Scenario side: its table ``label``, its ``server`` defaults (keys of
    :class:`~fedbench.optim.spec.ServerSpec`, overridden by the scenario), whether it accepts an
    uplink ``compression`` block and a ``local_optimizer`` other than sgd.

    Engine side: ``inputs``, the engine inputs of :data:`INPUTS` it reads from ``ctx.inputs``;
    ``replay_per_step`` joins a replay draw to every local minibatch (ER), kept apart from it with
    ``replay_apart`` (``grad.memory(z)``); ``batchable = False`` (a local loss that cannot run on the
    batched executor's padded rows) always takes the sequential client executor; ``population = False`` (local
    hooks that draw from their run's own seeded host streams, which the hooks a population shares cannot key by
    run: TARGET's synthetic batches) trains on the batched rows too, but each run alone; ``diagnostics`` maps a log
    key of ``server_update`` to what a non-zero count of it means, which the round loop warns about once per run (e.g. QP blocks left
    unprojected); ``row_lr`` says that its ``local_init`` and ``local_step`` use ``ctx.lr`` only
    against ``[S, P]`` rows, so that a population (:mod:`fedbench.engine.population`) may hand each
    run's rows its own η_l as an ``[R·S, 1]`` column (tests/engine/test_population.py checks it);
    with ``row_lr = False`` only runs of one η_l train together. ``client_dp``: its upload ``sent["delta"]``
    is each client's model change Δ_i and its ``server_update`` moves the model along Σ_i w_i Δ_i (through
    its server optimizer, post-processing), so DP-FedAvg (``privacy``, :mod:`fedbench.privacy`) may
    clip the rows, fix the weights to 1/S and noise the average. ``row_params`` names the parameters
    that may differ between the runs of a population: read by the server side only (each run keeps
    its own algorithm) or by the local hooks only against ``[S, P]`` rows (each run's value on its rows,
    an ``[R·S, 1]`` column); the same test checks each. ``vmap_server``: its ``server_update`` is a pure
    tensor function of its arguments (its ``[N, P]`` client tables, if any, changed only through their own
    operations and returned, nothing read to the host), so a population updates the servers of its runs as one
    ``torch.func.vmap`` call (:mod:`fedbench.engine.population_server`; tests/engine/test_population_server.py
    checks it). ``joint_server``: its class's
    ``server_updates`` computes the server updates of several runs together (GradMA's QP_g over the runs' rows,
    read to the host once), so a population hands it its runs of the class at once. ``own_loss``: its local steps
    differentiate its own loss (``grad(z, objective=…)``, a :class:`~fedbench.models.flat.Objective`), which the
    batched executor runs eager: ``--compile`` has no step of it to price or compile.
    """

    label: str
    server: Mapping[str, Any] = field(default_factory=dict)
    compression: bool = False
    local_optimizer: bool = False
    inputs: tuple[str, ...] = ()
    replay_per_step: bool = False
    replay_apart: bool = False
    batchable: bool = True
    population: bool = True
    row_lr: bool = True
    row_params: tuple[str, ...] = ()
    client_dp: bool = False
    vmap_server: bool = False
    joint_server: bool = False
    own_loss: bool = False
    diagnostics: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.replay_apart and not self.replay_per_step:
            raise ValueError(f"{self.label}: replay_apart needs replay_per_step")
        unknown = sorted(set(self.inputs) - set(INPUTS))
        if unknown:
            raise ValueError(f"{self.label}: unknown engine input(s) {unknown}; known: {', '.join(INPUTS)}")
