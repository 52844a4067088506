"""Round plug-ins: an axis beyond plain FL (a wireless uplink, a continual task stream) as hooks
around the round loop (:class:`~fedbench.engine.runner.RoundLoop`), which it does not own.

Where each hook runs in round t (every default is plain FL: no logs, nothing changed)::

    fed = stage(t, fed)                 → the clients' data for round t (a continual run's task)
    begin_round(t)                      → logs, recorded last in the round's extra
    η_l = learning_rate(t, default)     (each plug-in may replace the default decayed rate)
    clients = choose_clients(t, sample) (the first plug-in's, else S of all N); after_sampling(t, clients)
                                        → the clients that train (none: an idle round)
    steps = local_steps(t, clients, steps) → each client's K_i local steps
    provide(request) → engine inputs it owns (``bits``, ``memory_grad``; :mod:`fedbench.engine.inputs`)
    local work (LocalConfig from local_config(cfg), once per run)
    received = select_received(received, result) → which uploads reach server_update (None: none)
    round_logs(t)                       → logs after the algorithm's own (idle rounds too)
    evaluate(t, due, x, buffers)        → (accuracy, loss) in place of the test-set score, or None
    after_evaluation(t, state, buffers, cfg) → (state, logs) (e.g. a task's end)
    run_logs()                          → logs of round 1, once per run
    state_dict() / load_state_dict()    checkpoint entry ``name`` (restored before the stage and its batcher cursor)

Plug-ins run in the order they are attached (:mod:`fedbench.engine.axes`); a plug-in's state
between rounds is its own, every random draw it makes comes from a named stream, and what it
changes of the round it returns — a new federation, inputs, received uploads, state — (never mutating the context, uploads or algorithm state it got).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from fedbench.algorithms.base import Logs, RoundContext, Upload
from fedbench.engine.federation import Federation, Gradients, InputRequest
from fedbench.engine.local import LocalConfig, LocalResult
from fedbench.models.flat import Buffers


@dataclass(frozen=True)
class Received:
    """What reaches ``server_update``: the received rows' context, their decoded
    :class:`~fedbench.algorithms.base.Upload` and BatchNorm buffers, the aggregation weights ``[k]``
    and the weights of the buffers' average ``[k]`` (summing to one)."""

    ctx: RoundContext
    uploads: Upload
    buffers: list[Buffers]
    weights: torch.Tensor
    buffer_weights: torch.Tensor


class RoundPlugin:
    """One axis of a run as hooks around the plain round; every default leaves the round as it is."""

    name: str = "plugin"  # the plug-in's checkpoint entry

    def stage(self, t: int, fed: Federation) -> Federation:
        """The clients' data for round t, given the current one: ``fed`` itself, or a new
        :class:`~fedbench.engine.federation.Federation` (the loop then trains on it from this round on)."""
        return fed

    def begin_round(self, t: int) -> dict[str, Any]:
        """Prepare round t before sampling; logs recorded last (they override same-named keys)."""
        return {}

    def learning_rate(self, t: int, default: float) -> float:
        """The local learning rate η_l of round t, given the loop's (or an earlier plug-in's)."""
        return default

    def local_config(self, cfg: LocalConfig) -> LocalConfig:
        """The run's local-work settings with this plug-in's contribution (once per run)."""
        return cfg

    def choose_clients(self, t: int, sample: Callable[[np.ndarray], np.ndarray]) -> np.ndarray | None:
        """The clients sampled in round t (ids on the host), or None for the loop's S of all N;
        ``sample(eligible)`` draws the loop's S (fewer when fewer are eligible) from the client ids
        ``eligible``, on the sampling stream."""
        return None

    def local_steps(self, t: int, clients: list[int], steps: list[int]) -> list[int]:
        """Each sampled client's local steps K_i in round t, given the loop's (or an earlier plug-in's)."""
        return steps

    def after_sampling(self, t: int, clients: np.ndarray) -> np.ndarray:
        """The sampled clients that train and upload (ids on the host; a subset, in order; empty: an idle
        round)."""
        return clients

    def provide(self, request: InputRequest) -> dict[str, torch.Tensor | Gradients]:
        """The engine inputs this plug-in provides for the round's clients (``[S, ...]`` each, or the
        :class:`~fedbench.engine.federation.Gradients` the engine computes for one), of ``request.wanted``; the
        engine's providers fill the rest (:mod:`fedbench.engine.inputs`)."""
        return {}

    def select_received(self, received: Received, result: LocalResult) -> Received | None:
        """The uploads that reach the server, out of ``received`` (None: none; the model stays)."""
        return received

    def round_logs(self, t: int) -> dict[str, Any]:
        """Logs of round t after the algorithm's ``server_update`` logs (also on idle rounds)."""
        return {}

    def evaluate(
        self, t: int, due: bool, x: torch.Tensor, buffers: Buffers
    ) -> tuple[float, float] | tuple[torch.Tensor, torch.Tensor] | None:
        """(accuracy, loss) to record instead of the test-set score (floats, or 0-d tensors the round reads with
        its metrics), or None for the loop's."""
        return None

    def after_evaluation(self, t: int, state: Any, buffers: Buffers, cfg: LocalConfig) -> tuple[Any, Logs]:
        """Work after round t's evaluation: the algorithm's state afterwards (e.g. after a task's
        end) and its logs."""
        return state, {}

    def run_logs(self) -> dict[str, Any]:
        """Logs recorded once per run, with round 1's."""
        return {}

    def state_dict(self) -> dict[str, Any] | None:
        """What a checkpoint keeps under ``name`` (None: nothing)."""
        return None

    def load_state_dict(self, payload: dict[str, Any]) -> None:
        """Back to the checkpointed state (before the loop restores the batcher's cursor)."""
