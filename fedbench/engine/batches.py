"""Per-client minibatches drawn by indexing device-resident data.

Each client walks through a fresh permutation of its own samples every local epoch; the
permutation for (client i, epoch e) comes from the stream ``("batches", i, e)`` (in a continual
run ``("task_batches", task, i, e)``, with a fresh batcher per task), and the only
state is one cursor per client (samples consumed so far), so a run resumed from a checkpoint
draws exactly the batches an uninterrupted run would. A batch never straddles two epochs: the
last batch of an epoch holds the remaining ``n_i mod B`` samples — unless that remainder is a
single sample and ``drop_singleton`` is set (``local.drop_singleton_batch``): then that sample is
skipped for this epoch (as some papers' code does, docs/scenarios.md), because BatchNorm cannot train on a
batch of one.
"""

from __future__ import annotations

import math

import torch

from fedbench.seeding import torch_stream


class ClientBatcher:
    """Minibatch index streams for every client of a partition."""

    def __init__(
        self,
        parts: list[torch.Tensor],
        batch_size: int,
        seed: int,
        drop_singleton: bool = False,
        task: int | None = None,
    ):
        self.parts = parts
        self.batch_size = batch_size
        self.seed = seed
        self.drop_singleton = drop_singleton
        self.stream = ("batches",) if task is None else ("task_batches", task)  # continual: one stream per task
        self.cursor = torch.zeros(len(parts), dtype=torch.int64)
        self._perm: dict[int, tuple[int, torch.Tensor]] = {}

    def batch_size_of(self, client: int) -> int:
        return min(self.batch_size, len(self.parts[client]))

    def steps_for_epochs(self, client: int, epochs: float) -> int:
        """Local steps that make ``epochs`` passes over the client's data: ⌈E·n_i/B⌉ (≥ 1)."""
        n = len(self.parts[client])
        return max(1, math.ceil(epochs * n / self.batch_size_of(client)))

    def _permutation(self, client: int, epoch: int) -> torch.Tensor:
        cached = self._perm.get(client)
        if cached is None or cached[0] != epoch:
            part = self.parts[client]
            order = torch.randperm(len(part), generator=torch_stream(self.seed, *self.stream, client, epoch))
            cached = (epoch, part[order.to(part.device)])
            self._perm[client] = cached
        return cached[1]

    def next(self, client: int) -> torch.Tensor:
        """Indices (into the training set) of the client's next minibatch."""
        n = len(self.parts[client])
        epoch, pos = divmod(int(self.cursor[client]), n)
        take = min(self.batch_size_of(client), n - pos)
        if take == 1 and n > 1 and self.drop_singleton:
            self.cursor[client] += 1  # the epoch's lone last sample is skipped
            epoch, pos, take = epoch + 1, 0, self.batch_size_of(client)
        self.cursor[client] += take
        return self._permutation(client, epoch)[pos : pos + take]

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"cursor": self.cursor.clone()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.cursor = state["cursor"].clone()
        self._perm.clear()
