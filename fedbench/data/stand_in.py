"""Generated stand-ins of real datasets, for timing only (``--estimate --stand-in-data``).

A round's cost depends on the data's shape, sample count and classes (through the partition, each client's
n_i and so its K_i), not on the pixel values. A probe of a dataset not on disk (a GPU machine without
internet, or before a download) can therefore time the run on generated data of the real split's shape, size
and classes: uniform pixels in [0, 1) and balanced labels in a seeded order. Nothing learns from them, so only
the estimate's probe uses them; the store never sees a round trained on them.
"""

from __future__ import annotations

from typing import Any

import torch

from fedbench.data.base import ArraySplit, DatasetSplits
from fedbench.data.sizes import known_sizes

SHAPES: dict[str, tuple[int, ...]] = {  # each real dataset's input shape, as its loader returns it
    "mnist": (1, 28, 28),
    "fashion_mnist": (1, 28, 28),
    "emnist": (1, 28, 28),
    "cifar10": (3, 32, 32),
    "cifar100": (3, 32, 32),
    "svhn": (3, 32, 32),
    "tiny_imagenet": (3, 64, 64),
}


def can_stand_in(dataset: dict[str, Any]) -> bool:
    """Whether a resolved ``dataset`` block has a generated stand-in (its shape and sizes known)."""
    return dataset["name"] in SHAPES and known_sizes(dataset) is not None


def stand_in(dataset: dict[str, Any]) -> DatasetSplits:
    """Generated data of the ``dataset`` block's shape, train and test sizes and classes (seeded: the same
    every call)."""
    sizes, shape = known_sizes(dataset), SHAPES[dataset["name"]]
    if sizes is None:
        raise ValueError(f"dataset {dataset['name']!r} has no known sizes to stand in for")
    gen = torch.Generator().manual_seed(0)

    def split(n: int) -> ArraySplit:
        return ArraySplit(torch.rand(n, *shape, generator=gen), torch.randperm(n, generator=gen) % sizes.classes)

    return DatasetSplits(dataset["name"], split(sizes.train), split(sizes.test), sizes.classes, shape)
