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

Permutations are composed on the host, from a NumPy copy of the parts (``torch.randperm`` from one reused
generator, reseeded per permutation; the gather in NumPy, which a small index costs a third of torch's
dispatch): a round plan (:mod:`fedbench.engine.plan`) lays a round's indices out there and moves them to the
device in one copy, and a step-by-step draw (the sequential executor) moves each permutation once; no gather
runs on the device for them (quickstart, a population of 4: 22.9 host→device copies a round a run became 5.0,
benchmarks/README.md).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Hashable

import numpy as np
import torch

from fedbench.engine.device_plan import SHUFFLES, hashed_permutation, key_of, stream_base
from fedbench.engine.pending import to_device
from fedbench.host import host_side
from fedbench.seeding import torch_seed, torch_seeds

Walk = tuple[
    list[list[int]], list[int], list[int], int
]  # [epoch, start, stop] segments, lengths, cursors, cursor after


def epoch_steps(n: int, batch_size: int, epochs: float) -> int:
    """Local steps that make ``epochs`` passes over ``n`` samples (n ≥ 1) at batch min(B, n): ⌈E·n/min(B, n)⌉ (≥ 1)."""
    return max(1, math.ceil(epochs * n / min(batch_size, n)))


class ClientBatcher:
    """Minibatch index streams for every client of a partition."""

    def __init__(
        self,
        parts: list[torch.Tensor],
        batch_size: int,
        seed: int,
        drop_singleton: bool = False,
        task: int | None = None,
        shuffle: str = "host",
    ):
        self.parts = parts
        self.device = parts[0].device if parts else torch.device("cpu")
        self._sizes = [len(p) for p in parts]
        self.sizes = np.asarray(self._sizes, dtype=np.int64)  # n_i, and each part's first place in the parts end to end
        self.starts = np.cumsum(self.sizes) - self.sizes
        # minibatches of one epoch, ⌈n_i / min(B, n_i)⌉ (≥ 1): a round's largest bounds its clients' per-batch tables
        self.epoch_batches = np.array([epoch_steps(n, batch_size, 1) if n else 1 for n in self._sizes], dtype=np.int64)
        # the parts on the host (one copy of them all): a permutation is composed there, and a draw crosses to the
        # device once (:func:`~fedbench.engine.pending.to_device`), instead of a copy and a gather per permutation
        host = torch.cat(parts).cpu().numpy() if parts else np.zeros(0, dtype=np.int64)
        self._host = np.split(host, np.cumsum(self._sizes)[:-1]) if parts else []
        self._generator = torch.Generator()  # reseeded for each permutation (manual_seed resets all its state)
        self._partition: tuple[tuple[int, ...], str] | None = None
        self.batch_size = batch_size
        self.seed = seed
        self.drop_singleton = drop_singleton
        self.stream = ("batches",) if task is None else ("task_batches", task)  # continual: one stream per task
        if shuffle not in SHUFFLES:
            raise ValueError(f"local.shuffle must be one of {SHUFFLES}, got {shuffle!r}")
        self.shuffle = shuffle  # host: torch.randperm per permutation; device: hashed (fedbench.engine.device_plan)
        self.base = stream_base(seed, self.stream) if shuffle == "device" else 0
        # samples each client has consumed (Python ints: drawing batches is on the host's hot path)
        self.cursor = [0] * len(parts)
        self._perm: dict[int, tuple[int, np.ndarray, torch.Tensor | None]] = {}  # client → (epoch, host, device)
        self._seeds: dict[tuple[int, int], int] = {}  # (client, epoch) → its generator's seed, computed ahead
        self._walked: dict[int, tuple[int, int, Walk]] = {}  # client → (cursor, steps, walk): seed_ahead's, for draw

    @property
    def host_parts(self) -> list[np.ndarray]:
        """Each client's training indices on the host (the batcher's one copy: read-only)."""
        return self._host

    @property
    def partition(self) -> tuple[tuple[int, ...], str]:
        """The parts: their sizes and a SHA-256 of their indices (computed once)."""
        if self._partition is None:
            digest = hashlib.sha256(np.concatenate(self._host).tobytes() if self._host else b"").hexdigest()
            self._partition = (tuple(self._sizes), digest)
        return self._partition

    @property
    def fingerprint(self) -> Hashable:
        """What decides every draw but the cursor: the seed, the stream, the shuffle, B, ``drop_singleton`` and the
        parts (:attr:`partition`). Two batchers of one fingerprint and one cursor draw the same batches
        (:func:`~fedbench.engine.population_rows.population_plan` draws them once)."""
        return (self.seed, self.stream, self.shuffle, self.batch_size, self.drop_singleton, *self.partition)

    def batch_size_of(self, client: int) -> int:
        return min(self.batch_size, len(self.parts[client]))

    def steps_for_epochs(self, client: int, epochs: float) -> int:
        """Local steps that make ``epochs`` passes over the client's data: ⌈E·n_i/B⌉ (≥ 1)."""
        return epoch_steps(len(self.parts[client]), self.batch_size, epochs)

    @host_side
    def _permutation(self, client: int, epoch: int) -> np.ndarray:
        """The client's samples in the order of its epoch ``epoch``, composed on the host (a host generator's
        permutation, read as a NumPy view: no device is waited for; under ``shuffle: device`` the hashed one of
        :mod:`~fedbench.engine.device_plan`, which a device plan ranks on the device)."""
        cached = self._perm.get(client)
        if cached is None or cached[0] != epoch:
            if self.shuffle == "device":
                order = hashed_permutation(key_of(self.base, client, epoch), self._sizes[client])
            else:
                seed = self._seeds.pop((client, epoch), None)
                if seed is None:
                    seed = torch_seed(self.seed, *self.stream, client, epoch)
                order = torch.randperm(self._sizes[client], generator=self._generator.manual_seed(seed)).numpy()
            cached = (epoch, self._host[client][order], None)
            self._perm[client] = cached
        return cached[1]

    def _on_device(self, client: int, epoch: int) -> torch.Tensor:
        """:meth:`_permutation` on the parts' device (moved once an epoch)."""
        host = self._permutation(client, epoch)
        epoch_, _, device = self._perm[client]
        if device is None:
            device = to_device(torch.from_numpy(host), self.device)
            self._perm[client] = (epoch_, host, device)
        return device

    def next(self, client: int) -> torch.Tensor:
        """Indices (into the training set) of the client's next minibatch, on the parts' device."""
        (epoch, a, b), *_ = self._advance(client, 1)[0]
        return self._on_device(client, epoch)[a:b]

    def draw(self, client: int, steps: int) -> tuple[np.ndarray, list[int], list[int]]:
        """The client's next ``steps`` minibatches at once, on the host (a round plan lays them out there): their
        indices end to end, each batch's length and the cursor before each (the augmentation key). A batch never
        straddles two epochs (module docstring)."""
        segments, lengths, positions = self._advance(client, steps)
        pieces = [self._permutation(client, e)[a:b] for e, a, b in segments]
        return (pieces[0] if len(pieces) == 1 else np.concatenate(pieces)), lengths, positions

    def _advance(self, client: int, steps: int) -> tuple[list[list[int]], list[int], list[int]]:
        """:meth:`_walk` of the client's next ``steps`` batches (the one :meth:`unseeded` made, if it is of
        this cursor), moving its cursor past them."""
        cursor = self.cursor[client]
        walked = self._walked.pop(client, None)
        walk = walked[2] if walked is not None and walked[:2] == (cursor, steps) else self._walk(client, steps)
        self.cursor[client] = walk[3]
        return walk[0], walk[1], walk[2]

    def _walk(self, client: int, steps: int) -> Walk:
        """Where the client's next ``steps`` batches lie: the [epoch, start, stop] segments of its epochs'
        permutations, each batch's length, the cursor before each, and the cursor after them."""
        n, size = self._sizes[client], min(self.batch_size, self._sizes[client])
        lengths, positions, segments = [], [], []  # segments: [epoch, start, stop] of the epoch's permutation
        cursor = self.cursor[client]
        for _ in range(steps):
            positions.append(cursor)
            epoch, pos = divmod(cursor, n)
            take = min(size, n - pos)
            if take == 1 and n > 1 and self.drop_singleton:
                cursor += 1  # the epoch's lone last sample is skipped
                epoch, pos, take = epoch + 1, 0, size
            cursor += take
            lengths.append(take)
            if segments and segments[-1][0] == epoch and segments[-1][2] == pos:
                segments[-1][2] = pos + take
            else:
                segments.append([epoch, pos, pos + take])
        return segments, lengths, positions, cursor

    def unseeded(self, client: int, steps: int) -> list[int]:
        """The epochs whose permutations the client's next ``steps`` batches need and that have neither been
        composed nor had their seed computed ahead (:func:`seed_ahead`)."""
        cached = self._perm.get(client)
        walk = self._walk(client, steps)
        self._walked[client] = (self.cursor[client], steps, walk)
        epochs = dict.fromkeys(e for e, _, _ in walk[0])
        return [e for e in epochs if not (cached and cached[0] == e) and (client, e) not in self._seeds]

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"cursor": torch.tensor(self.cursor, dtype=torch.int64)}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.cursor = [int(v) for v in state["cursor"].tolist()]
        self._perm.clear()
        self._seeds.clear()
        self._walked.clear()


def seed_ahead(draws: list[tuple[ClientBatcher, list[int], list[int]]]) -> None:
    """Compute together (:func:`~fedbench.seeding.torch_seeds`) the generator seeds of every permutation that
    the draws ``(batcher, clients, steps)`` of a round (of every run of a population) will compose: the same
    seeds one :func:`~fedbench.seeding.torch_seed` call each would give, at a fraction of the host time."""
    groups: dict[tuple[str, int], list[tuple[ClientBatcher, int, int, tuple[int, ...]]]] = {}
    for batcher, clients, steps in draws:
        if batcher.shuffle == "device":
            continue  # hashed permutations: no generator seeds
        name, fixed = batcher.stream[0], tuple(batcher.stream[1:])
        for client, k in zip(clients, steps):
            for epoch in batcher.unseeded(client, k):
                row = (batcher.seed, *fixed, client, epoch)
                groups.setdefault((str(name), len(row)), []).append((batcher, client, epoch, row))
    for (name, _), items in groups.items():
        for (batcher, client, epoch, _), seed in zip(items, torch_seeds(name, [row for *_, row in items])):
            batcher._seeds[(client, epoch)] = seed
