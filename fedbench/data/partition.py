"""Partition conventions: how a training set is split across N clients.

Every partition is registered in :data:`PARTITIONS` with a strict pydantic model of its parameters
and has the signature::

    fn(labels, num_clients, rng, params, client_ids=None) -> list[np.ndarray]

returning one sorted int64 array of training-set indices per client. All randomness comes from
``rng`` (the scenario's ``"partition"`` stream), so a seed fixes the partition for every algorithm.
"Dir(ω)" means different things in different papers (anchors/frameworks.md §10.2), so the two
Dirichlet conventions are separate entries: ``dirichlet`` (A, per class over clients, GradMA) and
``dirichlet_balanced`` (B, per client over classes with equal sizes, FedDyn / FedMIM / MIFA).
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from fedbench.data.partition_stats import label_histogram, partition_summary
from fedbench.registry import NoParams, Registry

__all__ = ["PARTITIONS", "make_partition", "label_histogram", "partition_summary"]

PARTITIONS: Registry = Registry("partition")


class DirichletParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    omega: float = Field(gt=0, allow_inf_nan=False, description="Dirichlet concentration ω (smaller = more skew)")
    min_samples: int = Field(default=2, ge=0, description="samples every client gets in the seeding pass")


class BalancedDirichletParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    omega: float = Field(gt=0, allow_inf_nan=False, description="Dirichlet concentration ω of the class priors")


class ShardParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    k: int = Field(default=2, ge=1, description="shards per client")
    distinct: bool = Field(default=False, description="force a client's shards to have distinct labels")


def make_partition(
    kind: str,
    labels: np.ndarray,
    num_clients: int,
    rng: np.random.Generator,
    params: dict | BaseModel | None = None,
    client_ids: np.ndarray | None = None,
) -> list[np.ndarray]:
    """Validate ``params`` against partition ``kind``'s model and run it."""
    entry = PARTITIONS.get(kind)
    if not isinstance(params, BaseModel):
        params = entry.params.model_validate(params or {})
    return entry.obj(labels, num_clients, rng, params, client_ids)


# ---------------------------------------------------------------------------------------------
# helpers


def _check(labels: np.ndarray, num_clients: int, kind: str) -> np.ndarray:
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise ValueError(f"partition {kind!r}: labels must be 1-D, got shape {labels.shape}")
    if num_clients < 1:
        raise ValueError(f"partition {kind!r}: clients.num must be ≥ 1, got {num_clients}")
    return labels


def _group(owner: np.ndarray, index: np.ndarray, num_clients: int) -> list[np.ndarray]:
    """Split ``index`` by ``owner`` into one sorted int64 array per client."""
    order = np.lexsort((index, owner))
    counts = np.bincount(owner, minlength=num_clients)
    return [a.astype(np.int64) for a in np.split(index[order], np.cumsum(counts)[:-1])]


# ---------------------------------------------------------------------------------------------
# partitions


@PARTITIONS.register("iid", "uniform random split into equal-as-possible parts (sizes differ by ≤ 1)")
def iid(labels, num_clients, rng, params: NoParams, client_ids=None) -> list[np.ndarray]:
    """Shuffle all indices and cut them into ``num_clients`` contiguous, equal-as-possible pieces."""
    labels = _check(labels, num_clients, "iid")
    if len(labels) < num_clients:
        raise ValueError(f"partition 'iid': {len(labels)} samples cannot fill clients.num={num_clients} clients")
    return [np.sort(p).astype(np.int64) for p in np.array_split(rng.permutation(len(labels)), num_clients)]


@PARTITIONS.register(
    "dirichlet",
    "per-class Dir(ω·1_N) over clients (convention A, GradMA code) with a min_samples seeding pass",
    params=DirichletParams,
)
def dirichlet(labels, num_clients, rng, params: DirichletParams, client_ids=None) -> list[np.ndarray]:
    """Convention A as coded in GradMA's ``data_distributer.py::_split_dataset`` (seed_code.md §1.7).

    In order of the draws from ``rng``:

    1. ``q = Dir(ω·1_N)`` for every class present, a ``[C, N]`` matrix (row c = class c's shares).
    2. Seeding step: ``min_samples`` passes; in each pass clients 0..N−1 in turn receive one sample,
       taken from a class chosen uniformly at random among the classes that still have samples:
       the class's last remaining index in dataset order is popped (GradMA's ``class_idcs[c].pop()``;
       GradMA draws among *all* classes and would crash on an empty one). So every client ends
       with ≥ ``min_samples`` samples. GradMA uses 2 passes; ``min_samples: 0`` is the plain split.
    3. For each class c: shuffle its remaining indices and split them at
       ``floor(cumsum(q_c)[:-1] · n_c)``; piece i goes to client i.

    No rebalancing, no rejection of small clients: at ω = 0.01 most clients hold only their
    ``min_samples`` seeded samples. Every index is used exactly once.
    """
    labels = _check(labels, num_clients, "dirichlet")
    n, m = len(labels), params.min_samples
    if m * num_clients > n:
        raise ValueError(
            f"partition 'dirichlet': min_samples={m} × clients.num={num_clients} = {m * num_clients} "
            f"exceeds the {n} training samples"
        )
    classes = np.unique(labels)
    q = rng.dirichlet(np.full(num_clients, params.omega), size=len(classes))  # [C, N]
    pools = [np.flatnonzero(labels == c) for c in classes]  # dataset order
    left = np.array([len(p) for p in pools])
    owner, index = [], []
    for _ in range(m):  # seeding passes
        for i in range(num_clients):
            live = np.flatnonzero(left)
            c = live[rng.integers(len(live))]
            left[c] -= 1
            owner.append(i)
            index.append(pools[c][left[c]])
    owner_parts, index_parts = [np.asarray(owner, dtype=np.int64)], [np.asarray(index, dtype=np.int64)]
    for c, pool in enumerate(pools):
        rest = rng.permutation(pool[: left[c]])
        cuts = (np.cumsum(q[c])[:-1] * len(rest)).astype(np.int64)
        sizes = np.diff(np.concatenate([[0], np.clip(cuts, 0, len(rest)), [len(rest)]]))
        owner_parts.append(np.repeat(np.arange(num_clients), sizes))
        index_parts.append(rest)
    return _group(np.concatenate(owner_parts), np.concatenate(index_parts), num_clients)


@PARTITIONS.register(
    "dirichlet_balanced",
    "per-client Dir(ω·1_C) class priors, equal client sizes n//N (convention B: FedDyn, FedMIM, MIFA)",
    params=BalancedDirichletParams,
)
def dirichlet_balanced(labels, num_clients, rng, params: BalancedDirichletParams, client_ids=None) -> list[np.ndarray]:
    """Convention B: FedDyn ``utils_dataset.py``, FL-Simulator ``dataset.py`` (FedMIM), MIFA, C-FLAG-style
    equal sizes (seed_code.md §3.3, §6.1, §7).

    Each client i draws a class prior ``p_i ~ Dir(ω·1_C)`` (C = number of labels present) and gets
    exactly ``n // N`` samples; the remaining ``n mod N`` samples are left out of every client (as
    FedDyn's ``int(n / N)``). The reference procedure fills clients one sample at a time: pick a random
    client with room, draw a class from its prior, take an unused sample of that class (each class's
    indices are shuffled once and consumed in order). When a class is exhausted its probability is
    set to 0 in every prior and the priors are renormalized — the MIFA-code fix, which terminates and
    never duplicates a sample. (FL-Simulator instead *refills* an exhausted class, so some samples
    are duplicated across clients and others unused; FedDyn redraws and can loop forever.)

    Vectorized form, equal in distribution to the one-by-one procedure with a random draw order:
    each round every non-full client draws the classes of *all* its missing samples at once
    (a multinomial from its renormalized prior); a class asked for more than it has left is granted
    to a uniformly random subset of the competing draws (multivariate hypergeometric) and becomes
    exhausted; ungranted draws are redrawn next round. A round either fills every client or exhausts
    a class, so there are at most C + 1 rounds. If a client's prior has (numerically) no mass left on
    the available classes, its prior on them is redrawn from ``Dir(ω·1)`` — the law of a Dirichlet
    restricted to a subset and renormalized — which matters only for ω ≲ 0.01, where float underflow
    makes most prior entries exactly 0.
    """
    labels = _check(labels, num_clients, "dirichlet_balanced")
    n = len(labels)
    per_client = n // num_clients
    if per_client == 0:
        raise ValueError(f"partition 'dirichlet_balanced': {n} samples cannot fill clients.num={num_clients} clients")
    _, y = np.unique(labels, return_inverse=True)
    num_classes = int(y.max()) + 1
    prior = rng.dirichlet(np.full(num_classes, params.omega), size=num_clients)  # [N, C]
    pools = [rng.permutation(np.flatnonzero(y == c)) for c in range(num_classes)]
    left = np.array([len(p) for p in pools])
    used = np.zeros(num_classes, dtype=np.int64)
    room = np.full(num_clients, per_client)
    owner, index = [], []
    for _ in range(num_classes + 1):
        active = np.flatnonzero(room)
        if active.size == 0:
            break
        live = left > 0
        p = prior[active] * live
        mass = p.sum(axis=1)
        for row in np.flatnonzero(mass < 1e-200):  # underflowed prior: redraw it on the live classes
            fresh = np.zeros(num_classes)
            fresh[live] = rng.dirichlet(np.full(int(live.sum()), params.omega))
            prior[active[row]] = p[row] = fresh
            mass[row] = fresh.sum()
        draws = rng.multinomial(room[active], p / mass[:, None])  # [A, C]
        for c in np.flatnonzero(draws.sum(axis=0) > left):
            draws[:, c] = rng.multivariate_hypergeometric(draws[:, c], int(left[c]))
        for c in np.flatnonzero(draws.sum(axis=0)):
            got = int(draws[:, c].sum())
            owner.append(np.repeat(active, draws[:, c]))
            index.append(pools[c][used[c] : used[c] + got])
            used[c] += got
            left[c] -= got
        room[active] -= draws.sum(axis=1)
    if room.any():  # pragma: no cover - excluded by the argument in the docstring
        raise RuntimeError("partition 'dirichlet_balanced' did not fill every client")
    return _group(np.concatenate(owner), np.concatenate(index), num_clients)


@PARTITIONS.register(
    "classes_per_client",
    "McMahan label-sorted shards: k·N shards, k random shards per client (FedQVR, FedCAMS)",
    params=ShardParams,
)
def classes_per_client(labels, num_clients, rng, params: ShardParams, client_ids=None) -> list[np.ndarray]:
    """McMahan et al.'s pathological non-IID split (FedQVR "[35]", FedCAMS ``sampling.py``).

    Indices are sorted by label (stable sort of a random permutation, so ties are in random order),
    cut into ``k·N`` contiguous shards of equal size (``np.array_split``: sizes differ by ≤ 1, no
    index is dropped), and each client receives ``k`` shards chosen uniformly at random. A shard's
    label is its majority label; a shard straddling a class boundary gives its client one extra
    label, so clients hold ≤ k labels exactly when class counts are multiples of the shard size.

    As in McMahan's code a client may receive two shards of the same label. With ``distinct: true``
    duplicates are removed by swapping shards between clients (each swap removes one duplicate and
    creates none); this is possible iff no label has more than N shards, and a clear error is
    raised otherwise.
    """
    labels = _check(labels, num_clients, "classes_per_client")
    n, k = len(labels), params.k
    num_shards = k * num_clients
    if num_shards > n:
        raise ValueError(
            f"partition 'classes_per_client': k={k} × clients.num={num_clients} = {num_shards} shards "
            f"exceeds the {n} training samples"
        )
    classes, y = np.unique(labels, return_inverse=True)
    perm = rng.permutation(n)
    order = perm[np.argsort(y[perm], kind="stable")]
    shards = np.array_split(order, num_shards)
    shard_label = np.array([np.bincount(y[s]).argmax() for s in shards])
    assign = rng.permutation(num_shards).reshape(num_clients, k)
    if params.distinct:
        assign = _distinct_shards(assign, shard_label, rng, classes)
    return [np.sort(np.concatenate([shards[s] for s in row])).astype(np.int64) for row in assign]


def _distinct_shards(
    assign: np.ndarray, shard_label: np.ndarray, rng: np.random.Generator, classes: np.ndarray
) -> np.ndarray:
    """Swap shards between clients until no client holds two shards of one label."""
    num_clients, k = assign.shape
    counts = np.bincount(shard_label)
    worst = int(counts.argmax())
    if counts[worst] > num_clients:
        raise ValueError(
            f"partition 'classes_per_client' with distinct: true is impossible: label {classes[worst]} fills "
            f"{counts[worst]} of the {k * num_clients} shards, more than clients.num={num_clients}, so some "
            f"client must hold two of its shards; lower k, change clients.num, or set distinct: false"
        )
    assign = assign.copy()
    for _ in range(20 * assign.size):
        lab = shard_label[assign]
        srt = np.sort(lab, axis=1)
        bad = np.flatnonzero((srt[:, 1:] == srt[:, :-1]).any(axis=1))
        if bad.size == 0:
            return assign
        i = int(rng.choice(bad))
        row = lab[i]
        a = next(b for b in range(k) if (row[:b] == row[b]).any())  # a repeated slot of client i
        others = np.delete(row, a)
        ok = ~np.isin(lab, others) & ((lab == row[a]).sum(axis=1) == 0)[:, None]
        ok[i] = False
        cand = np.argwhere(ok)
        if cand.size == 0:  # stuck: random swap with another client
            cand = np.argwhere(np.arange(num_clients)[:, None] != np.full((1, k), i))
        j, b = cand[rng.integers(len(cand))]
        assign[i, a], assign[j, b] = assign[j, b], assign[i, a]
    # Fallback (rare): deal label-sorted shards round-robin over randomly ordered clients; no label
    # has more than N shards, so its consecutive shards land on distinct clients.
    shard_order = rng.permutation(assign.size)
    shard_order = shard_order[np.argsort(shard_label[shard_order], kind="stable")]
    clients = rng.permutation(num_clients)
    out = np.empty_like(assign)
    for pos, s in enumerate(shard_order):
        out[clients[pos % num_clients], pos // num_clients] = s
    return out


@PARTITIONS.register(
    "natural", "the dataset's own per-sample client ids, e.g. Synthetic(α,β) (clients.num = number of ids)"
)
def natural(labels, num_clients, rng, params: NoParams, client_ids=None) -> list[np.ndarray]:
    """Client i gets the samples whose id is the i-th smallest distinct id; ``rng`` is unused."""
    labels = _check(labels, num_clients, "natural")
    if client_ids is None:
        raise ValueError(
            "partition 'natural' needs a dataset with per-sample client ids (e.g. synthetic); "
            "this dataset has none — use iid, dirichlet, dirichlet_balanced or classes_per_client"
        )
    ids = np.asarray(client_ids)
    if ids.shape != labels.shape:
        raise ValueError(f"partition 'natural': client_ids shape {ids.shape} does not match labels {labels.shape}")
    distinct, owner = np.unique(ids, return_inverse=True)
    if len(distinct) != num_clients:
        raise ValueError(
            f"partition 'natural': clients.num must equal the dataset's number of distinct client ids "
            f"({len(distinct)}), got clients.num={num_clients}"
        )
    return _group(owner.astype(np.int64), np.arange(len(labels), dtype=np.int64), num_clients)
