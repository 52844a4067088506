"""Pre-flight: what a scenario's runs would fail on in their first second, checked before a results
store is touched, so that bad input ends in one line and nothing written (not in failed runs).

- the device exists (:func:`~fedbench.engine.setup.check_device`: ``cuda`` without CUDA, ``cuda:N``
  beyond the GPUs, ``mps`` without MPS);
- the clients fit the training set: ``clients.num`` ≤ its samples, and the partition's own capacity
  (``dirichlet``'s ``min_samples`` × ``clients.num``, ``classes_per_client``'s shards, ``natural``'s
  client ids, ...), by running the partition itself on the dataset's labels;
- LEAF's natural clients: ``clients.num`` = ``dataset.users`` (:func:`natural_users_problems`);
- a task stream fits the classes (``continual.tasks`` × ``continual.classes_per_task``), by splitting
  the labels into tasks as the run does, then partitioning each task.

The labels come without downloading or reading real data: a real dataset's labels are stood in for
by its declared sizes (:mod:`fedbench.data.sizes`; balanced classes, so no check is stricter than the
run's own), offline datasets are loaded (cheap; nothing is written). A dataset of neither kind is
not checked here. Capacity does not depend on the seed; the partition stream of seed 0 is used.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedbench.continual.tasks import split_tasks
from fedbench.data import DATASETS, load_dataset
from fedbench.data.leaf import TFF as NATURAL_CLIENTS
from fedbench.data.partition import make_partition
from fedbench.data.sizes import known_sizes
from fedbench.engine.setup import check_device
from fedbench.scenario import RunSpec
from fedbench.seeding import numpy_stream


class PreflightError(ValueError):
    """Runs that cannot start on this data or device; its message is one line per problem."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("\n".join(problems))


@dataclass(frozen=True)
class Labels:
    """What the partition and the task split see of a dataset: its labels (real or stood in for)."""

    name: str
    train: np.ndarray
    test: np.ndarray
    classes: int
    client_ids: np.ndarray | None = None


def dataset_labels(dataset: dict, params, data_dir: Path) -> Labels | None:
    """The labels of a resolved ``dataset`` block: balanced stand-ins of its declared sizes, or an
    offline dataset's own; None for a dataset of neither kind."""
    name = dataset["name"]
    sizes = known_sizes(dataset)
    if sizes is not None:
        stand_in = np.arange(max(sizes.train, sizes.test)) % sizes.classes
        return Labels(name, stand_in[: sizes.train], stand_in[: sizes.test], sizes.classes)
    if "offline" not in DATASETS.get(name).tags:
        return None
    try:
        data = load_dataset(name, params, data_dir, download=False)
    except (ImportError, OSError):  # the run says what is missing
        return None
    return Labels(name, data.train.y.numpy(), data.test.y.numpy(), data.num_classes, data.client_ids)


def run_problems(spec: RunSpec, labels: Labels) -> list[str]:
    """What the run would fail on when it splits ``labels`` into clients (and tasks), one line each."""
    n, clients = len(labels.train), spec.clients.num
    if clients > n:
        return [
            f"clients.num: {clients} clients but dataset {labels.name} has {n} training samples, so some "
            f"client would hold no data; use at most {n} clients"
        ]
    pieces = [(np.arange(n), "")]
    if spec.continual is not None:
        c = spec.continual
        try:
            stream = split_tasks(
                labels.train, labels.test, labels.classes, c.tasks, c.classes_per_task, c.class_order, c.mode, 0
            )
        except ValueError as exc:
            return [f"{exc} (dataset {labels.name})"]
        pieces = [(idx, f" in continual task {j}") for j, idx in enumerate(stream.train)]
    for indices, where in pieces:
        ids = None if labels.client_ids is None else labels.client_ids[indices]
        try:
            make_partition(
                spec.partition["kind"],
                labels.train[indices],
                clients,
                numpy_stream(0, "partition"),
                spec.components.partition,
                ids,
            )
        except ValueError as exc:
            return [f"{exc} (dataset {labels.name}{where})"]
    return []


def natural_users_problems(spec: RunSpec) -> list[str]:
    """A LEAF dataset (its clients are its files' users) split naturally: ``clients.num`` must be the
    ``dataset.users`` it keeps (without ``users``, the count is known only from the files, at load time)."""
    users = spec.dataset.get("users") if spec.dataset["name"] in NATURAL_CLIENTS else None
    if users is None or spec.partition["kind"] != "natural" or users == spec.clients.num:
        return []
    return [
        f"clients.num: {spec.clients.num} clients, but dataset {spec.dataset['name']} keeps {users} writers or roles "
        f"(dataset.users), each a client of the natural partition; set clients.num to {users}"
    ]


def preflight(runs: Iterable[RunSpec], device: str, data_dir: Path) -> None:
    """Raise :class:`PreflightError` (a ValueError) naming each problem of ``runs`` on ``device`` with the
    data of ``data_dir`` (module docstring); nothing is written, nothing is downloaded."""
    try:
        check_device(device)
    except ValueError as exc:
        raise PreflightError([str(exc)]) from None
    problems: list[str] = []
    loaded: dict[str, Labels | None] = {}
    seen: set[str] = set()
    for spec in runs:
        data_key = json.dumps(spec.dataset, sort_keys=True)
        split_key = json.dumps(
            [
                spec.dataset,
                spec.partition,
                spec.clients.num,
                None if spec.continual is None else spec.continual.model_dump(mode="json"),
            ],
            sort_keys=True,
        )
        if split_key in seen:
            continue
        seen.add(split_key)
        if data_key not in loaded:
            loaded[data_key] = dataset_labels(spec.dataset, spec.components.dataset, Path(data_dir))
        labels = loaded[data_key]
        if labels is not None:
            problems += [p for p in run_problems(spec, labels) if p not in problems]
        problems += [p for p in natural_users_problems(spec) if p not in problems]
    if problems:
        raise PreflightError(problems)
