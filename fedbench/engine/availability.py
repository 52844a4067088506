"""Client availability and stragglers as round plug-ins (``clients.availability``, ``clients.stragglers``).

:class:`ClientAvailability` decides which of the N clients can be sampled in round t and samples the
round's S among them (fewer when fewer are available; none: an idle round), on the run's sampling
stream. The models (:class:`~fedbench.scenario.schema.AvailabilitySpec`): ``always``; ``bernoulli``,
client i available with probability p_i each round independently; ``markov``, an on/off chain per
client (stay on with probability a, stay off with probability b; round 1 drawn from the stationary
P(on) = (1 − b)/(2 − a − b)); ``diurnal``, p_i(t) = p_i·(1 + A·sin(2πt/T)) clipped to [0, 1]. p_i is
one ``p`` or drawn once per client, uniformly in ``p_range``, from the ``("availability_p",)`` stream;
round t's draws come from the ``("availability", t)`` stream, so a run and its resume see the same
clients (the Markov state is checkpointed).

:class:`Stragglers` makes a ``fraction`` of each round's sampled clients (drawn from the
``("stragglers", t)`` stream) do ⌈u·K_i⌉ of their K_i local steps, u uniform in ``work``
(``partial``), or miss the round (``drop``: they train and send nothing).

They log the round's realised participation: ``available`` (clients that could be sampled) and
``sampled`` (clients sampled among them), and ``participants`` (clients that trained, after stragglers
who miss the round).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from fedbench.engine.plugins import RoundPlugin
from fedbench.seeding import numpy_stream

if TYPE_CHECKING:
    from fedbench.engine.setup import RunSetup
    from fedbench.scenario import RunSpec


class ClientAvailability(RoundPlugin):
    """Round t's available clients, and S sampled among them (module docstring)."""

    name = "availability"

    def __init__(self, spec: RunSpec, seed: int, setup: RunSetup):
        a = spec.clients.availability
        assert a is not None
        self.spec, self.seed, self.n = a, seed, spec.clients.num
        if a.p_range is not None:
            lo, hi = a.p_range
            self.p = numpy_stream(seed, "availability_p").uniform(lo, hi, size=self.n)
        else:
            self.p = np.full(self.n, a.p if a.p is not None else 1.0)
        self.on: np.ndarray | None = None  # markov: the state after the last round drawn
        self.drawn = 0  # the last round whose availability was drawn
        self.count = self.sampled = 0

    def available(self, t: int) -> np.ndarray:
        """Round t's availability ``[N]`` (bool); a Markov chain is advanced from round ``drawn`` to t."""
        a = self.spec
        if a.kind == "always":
            return np.ones(self.n, dtype=bool)
        if a.kind == "bernoulli":
            return numpy_stream(self.seed, "availability", t).random(self.n) < self.p
        if a.kind == "diurnal":
            assert a.period is not None and a.amplitude is not None
            p_t = np.clip(self.p * (1 + a.amplitude * math.sin(2 * math.pi * t / a.period)), 0.0, 1.0)
            return numpy_stream(self.seed, "availability", t).random(self.n) < p_t
        assert a.stay_on is not None and a.stay_off is not None
        while self.drawn < t:
            self.drawn += 1
            u = numpy_stream(self.seed, "availability", self.drawn).random(self.n)
            if self.on is None:
                stationary = (1 - a.stay_off) / (2 - a.stay_on - a.stay_off)  # stay_off < 1: positive
                self.on = u < stationary
            else:
                self.on = np.where(self.on, u < a.stay_on, u >= a.stay_off)
        assert self.on is not None
        return self.on.copy()

    def choose_clients(self, t: int, sample: Callable[[np.ndarray], np.ndarray]) -> np.ndarray | None:
        available = self.available(t)
        chosen = sample(np.flatnonzero(available))
        self.count, self.sampled = int(available.sum()), len(chosen)
        return chosen

    def round_logs(self, t: int) -> dict[str, Any]:
        return {"available": self.count, "sampled": self.sampled}

    def state_dict(self) -> dict[str, Any] | None:
        if self.spec.kind != "markov":
            return None
        return {"drawn": self.drawn, "on": None if self.on is None else torch.as_tensor(self.on)}

    def load_state_dict(self, payload: dict[str, Any]) -> None:
        self.drawn = int(payload["drawn"])
        self.on = None if payload["on"] is None else payload["on"].cpu().numpy().astype(bool)


class Stragglers(RoundPlugin):
    """A ``fraction`` of each round's sampled clients do part of their local work, or miss the round."""

    name = "stragglers"

    def __init__(self, spec: RunSpec, seed: int, setup: RunSetup):
        s = spec.clients.stragglers
        assert s is not None
        self.spec, self.seed = s, seed
        self.participants = 0

    def draw(self, t: int, count: int) -> tuple[np.ndarray, np.ndarray]:
        """Which of round t's ``count`` sampled clients straggle (rows, sorted) and their work fractions u."""
        rng = numpy_stream(self.seed, "stragglers", t)
        k = math.ceil(self.spec.fraction * count) if count else 0
        rows = np.sort(rng.choice(count, size=k, replace=False)) if k else np.zeros(0, dtype=np.int64)
        lo, hi = self.spec.work
        return rows, rng.uniform(lo, hi, size=k)

    def after_sampling(self, t: int, clients: np.ndarray) -> np.ndarray:
        if self.spec.mode == "drop":
            rows, _ = self.draw(t, len(clients))
            keep = np.ones(len(clients), dtype=bool)
            keep[rows] = False
            clients = clients[keep]
        self.participants = len(clients)
        return clients

    def local_steps(self, t: int, clients: list[int], steps: list[int]) -> list[int]:
        if self.spec.mode != "partial":
            return steps
        rows, work = self.draw(t, len(clients))
        steps = list(steps)
        for row, u in zip(rows.tolist(), work.tolist()):
            steps[row] = max(1, math.ceil(u * steps[row]))
        return steps

    def round_logs(self, t: int) -> dict[str, Any]:
        return {"participants": self.participants}
