"""Dataset sizes known without loading the data: the training and test sample counts and the
classes of each real dataset's standard split (as torchvision and the Tiny-ImageNet archive ship
them), and MNIST-1D's from its parameters. The pre-flight checks (:mod:`fedbench.engine.preflight`)
read them, so a scenario that cannot fit its data is refused before anything is read or written."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fedbench.data.vision import EMNIST_CLASSES


@dataclass(frozen=True)
class Sizes:
    """A dataset's training and test sample counts and its number of classes."""

    train: int
    test: int
    classes: int


REAL = {
    "mnist": Sizes(60_000, 10_000, 10),
    "fashion_mnist": Sizes(60_000, 10_000, 10),
    "cifar10": Sizes(50_000, 10_000, 10),
    "cifar100": Sizes(50_000, 10_000, 100),
    "svhn": Sizes(73_257, 26_032, 10),  # no 'extra'
    "tiny_imagenet": Sizes(100_000, 10_000, 200),  # the val set is the test set
}
EMNIST = {  # Cohen et al. 2017, Table II
    split: Sizes(train, test, EMNIST_CLASSES[split])
    for split, (train, test) in {
        "balanced": (112_800, 18_800),
        "byclass": (697_932, 116_323),
        "bymerge": (697_932, 116_323),
        "digits": (240_000, 40_000),
        "letters": (124_800, 20_800),
        "mnist": (60_000, 10_000),
    }.items()
}


def known_sizes(dataset: dict[str, Any]) -> Sizes | None:
    """The sizes of a resolved ``dataset`` block (``{name, **params}``), or None when they are only
    known by loading it (``digits``, ``synthetic``: offline and cheap)."""
    name = dataset["name"]
    if name == "emnist":
        return EMNIST[dataset.get("split", "balanced")]
    if name == "mnist1d":  # the package's own split: int(n · train_split) training samples, 10 classes
        n = int(dataset.get("num_samples", 5000))
        train = int(n * float(dataset.get("train_split", 0.8)))
        return Sizes(train, n - train, 10)
    return REAL.get(name)
