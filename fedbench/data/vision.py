"""Real image datasets read from their standard on-disk formats under ``root``.

torchvision reads MNIST, Fashion-MNIST, EMNIST (``root/<Class>/raw``), CIFAR-10/100
(``root/cifar-10-batches-py``, ``root/cifar-100-python``) and SVHN (``root/SVHN``); its
``.data``/``.targets`` arrays are converted whole, without per-sample transforms.
Tiny-ImageNet is parsed from ``root/tiny-imagenet-200`` (no download). Images come back as
float32 NCHW, normalized with the per-channel pixel mean and std of the training split
(exact, from a histogram of the uint8 pixels; e.g. MNIST gives the usual 0.1307 / 0.3081).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field

from fedbench.data.base import DATASETS, ArraySplit, DatasetSplits

TINY_IMAGENET_URL = "http://cs231n.stanford.edu/tiny-imagenet-200.zip"


class DatasetNotFoundError(FileNotFoundError):
    """A real dataset's files are missing (or fail torchvision's checksum) under the data dir."""

    def __str__(self) -> str:  # FileNotFoundError would format (errno, strerror)
        return str(self.args[0])


def pixel_stats(images: np.ndarray) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean and std of uint8 NCHW ``images`` scaled to [0, 1]."""
    values = np.arange(256, dtype=np.float64) / 255.0
    means, stds = [], []
    for c in range(images.shape[1]):
        counts = np.bincount(images[:, c].reshape(-1), minlength=256).astype(np.float64)
        mean = counts @ values / counts.sum()
        means.append(float(mean))
        stds.append(float(np.sqrt(counts @ (values - mean) ** 2 / counts.sum())))
    return tuple(means), tuple(stds)


def normalize(images: np.ndarray, mean: tuple[float, ...], std: tuple[float, ...]) -> torch.Tensor:
    """uint8 NCHW → float32 ``(x / 255 − mean_c) / std_c``."""
    x = torch.from_numpy(np.ascontiguousarray(images)).to(torch.float32).div_(255.0)
    shape = (1, -1) + (1,) * (images.ndim - 2)
    return x.sub_(torch.tensor(mean).view(shape)).div_(torch.tensor(std).view(shape))


def image_splits(
    name: str, train: tuple[np.ndarray, np.ndarray], test: tuple[np.ndarray, np.ndarray], num_classes: int
) -> DatasetSplits:
    """Normalizes uint8 NCHW ``(images, labels)`` pairs with the training split's statistics."""
    mean, std = pixel_stats(train[0])

    def split(images: np.ndarray, labels: np.ndarray) -> ArraySplit:
        return ArraySplit(normalize(images, mean, std), torch.from_numpy(np.asarray(labels, dtype=np.int64)))

    return DatasetSplits(name, split(*train), split(*test), num_classes, tuple(train[0].shape[1:]))


def _not_found(name: str, directory: Path) -> DatasetNotFoundError:
    return DatasetNotFoundError(
        f"dataset {name!r}: files missing or failing their checksum in {directory}; "
        f"pass --download to fetch them there, or point --data-dir at the folder that holds them"
    )


def _torchvision(name: str, cls: Any, root: Path, download: bool, directory: Path, **kwargs: Any) -> tuple[Any, Any]:
    """Train and test torchvision datasets, with a clear error when files are missing."""
    try:
        return (
            cls(str(root), train=True, download=download, **kwargs),
            cls(str(root), train=False, download=download, **kwargs),
        )
    except RuntimeError as err:
        if download:
            raise
        raise _not_found(name, directory) from err


# --- MNIST family ---------------------------------------------------------------------------


def _mnist_like(name: str, cls_name: str, root: Path, download: bool, num_classes: int) -> DatasetSplits:
    from torchvision import datasets

    cls = getattr(datasets, cls_name)
    train, test = _torchvision(name, cls, root, download, Path(root) / cls_name / "raw")
    arrays = [(ds.data.numpy()[:, None], ds.targets.numpy()) for ds in (train, test)]
    return image_splits(name, arrays[0], arrays[1], num_classes)


@DATASETS.register("mnist", "MNIST handwritten digits, 28×28 grayscale, 10 classes (torchvision)")
def mnist(root: Path, download: bool) -> DatasetSplits:
    """MNIST from ``root/MNIST/raw``."""
    return _mnist_like("mnist", "MNIST", root, download, 10)


@DATASETS.register("fashion_mnist", "Fashion-MNIST clothing images, 28×28 grayscale, 10 classes (torchvision)")
def fashion_mnist(root: Path, download: bool) -> DatasetSplits:
    """Fashion-MNIST from ``root/FashionMNIST/raw``."""
    return _mnist_like("fashion_mnist", "FashionMNIST", root, download, 10)


EMNIST_CLASSES = {"balanced": 47, "byclass": 62, "bymerge": 47, "digits": 10, "letters": 26, "mnist": 10}


class EmnistParams(BaseModel):
    """Parameters of ``emnist``."""

    model_config = ConfigDict(extra="forbid")

    split: Literal["balanced", "byclass", "bymerge", "digits", "letters", "mnist"] = Field(
        "balanced", description="EMNIST split; classes: " + ", ".join(f"{k} {n}" for k, n in EMNIST_CLASSES.items())
    )


@DATASETS.register(
    "emnist",
    "EMNIST handwritten characters, 28×28 grayscale, 10–62 classes by split (torchvision)",
    params=EmnistParams,
)
def emnist(root: Path, download: bool, *, split: str) -> DatasetSplits:
    """EMNIST from ``root/EMNIST/raw``, transposed upright; ``letters`` labels 1..26 shifted to 0..25."""
    from torchvision import datasets

    train, test = _torchvision("emnist", datasets.EMNIST, root, download, Path(root) / "EMNIST" / "raw", split=split)
    shift = 1 if split == "letters" else 0
    arrays = [(ds.data.numpy().transpose(0, 2, 1)[:, None], ds.targets.numpy() - shift) for ds in (train, test)]
    return image_splits("emnist", arrays[0], arrays[1], EMNIST_CLASSES[split])


# --- CIFAR and SVHN -------------------------------------------------------------------------


def _cifar(name: str, cls_name: str, folder: str, root: Path, download: bool, num_classes: int) -> DatasetSplits:
    from torchvision import datasets

    train, test = _torchvision(name, getattr(datasets, cls_name), root, download, Path(root) / folder)
    arrays = [(ds.data.transpose(0, 3, 1, 2), np.asarray(ds.targets)) for ds in (train, test)]  # NHWC → NCHW
    return image_splits(name, arrays[0], arrays[1], num_classes)


@DATASETS.register("cifar10", "CIFAR-10 natural images, 32×32 RGB, 10 classes (torchvision)")
def cifar10(root: Path, download: bool) -> DatasetSplits:
    """CIFAR-10 from ``root/cifar-10-batches-py``."""
    return _cifar("cifar10", "CIFAR10", "cifar-10-batches-py", root, download, 10)


@DATASETS.register("cifar100", "CIFAR-100 natural images, 32×32 RGB, 100 fine classes (torchvision)")
def cifar100(root: Path, download: bool) -> DatasetSplits:
    """CIFAR-100 (fine labels) from ``root/cifar-100-python``."""
    return _cifar("cifar100", "CIFAR100", "cifar-100-python", root, download, 100)


@DATASETS.register("svhn", "SVHN street-view house numbers, 32×32 RGB, 10 classes (torchvision; no 'extra')")
def svhn(root: Path, download: bool) -> DatasetSplits:
    """SVHN train/test from ``root/SVHN/{train,test}_32x32.mat`` (torchvision already maps label 10 → 0)."""
    from torchvision import datasets

    directory = Path(root) / "SVHN"
    try:
        train, test = (datasets.SVHN(str(directory), split=s, download=download) for s in ("train", "test"))
    except RuntimeError as err:
        if download:
            raise
        raise _not_found("svhn", directory) from err
    return image_splits("svhn", (train.data, train.labels), (test.data, test.labels), 10)


# --- Tiny-ImageNet --------------------------------------------------------------------------


def _read_images(paths: list[Path]) -> np.ndarray:
    """uint8 NCHW array of 64×64 RGB images (grayscale ones converted)."""
    from PIL import Image

    out = np.empty((len(paths), 64, 64, 3), dtype=np.uint8)
    for i, path in enumerate(paths):
        with Image.open(path) as image:
            pixels = np.asarray(image.convert("RGB"))
        if pixels.shape != (64, 64, 3):
            raise ValueError(f"tiny_imagenet: {path} is {pixels.shape[1]}×{pixels.shape[0]}, expected 64×64")
        out[i] = pixels
    return out.transpose(0, 3, 1, 2)


@DATASETS.register("tiny_imagenet", "Tiny-ImageNet, 64×64 RGB, 200 classes; val set as test (manual download)")
def tiny_imagenet(root: Path, download: bool) -> DatasetSplits:
    """Tiny-ImageNet from ``root/tiny-imagenet-200``: ``train/<wnid>/images/*.JPEG`` for training,
    ``val/images`` labelled by ``val/val_annotations.txt`` for test; class index = position of
    the wnid in sorted ``wnids.txt`` (torchvision's ImageFolder order)."""
    base = Path(root) / "tiny-imagenet-200"
    required = [base / "wnids.txt", base / "train", base / "val" / "images", base / "val" / "val_annotations.txt"]
    missing = [str(p.relative_to(root)) for p in required if not p.exists()]
    if missing:
        raise DatasetNotFoundError(
            f"dataset 'tiny_imagenet': {', '.join(missing)} not found under {root}; automatic download is "
            f"not supported{' (--download has no effect)' if download else ''}: fetch {TINY_IMAGENET_URL} "
            f"and unzip it in {root} so that {base} holds wnids.txt, train/ and val/"
        )
    wnids = sorted(line.strip() for line in (base / "wnids.txt").read_text().splitlines() if line.strip())
    index = {wnid: i for i, wnid in enumerate(wnids)}
    train_paths, train_labels = [], []
    for wnid in wnids:
        files = sorted((base / "train" / wnid / "images").glob("*.JPEG"))
        train_paths += files
        train_labels += [index[wnid]] * len(files)
    test_paths, test_labels = [], []
    for line in (base / "val" / "val_annotations.txt").read_text().splitlines():
        if line.strip():
            filename, wnid = line.split("\t")[:2]
            if wnid not in index:
                raise ValueError(f"tiny_imagenet: val_annotations.txt names {wnid!r} for {filename}, not in wnids.txt")
            test_paths.append(base / "val" / "images" / filename)
            test_labels.append(index[wnid])
    if not train_paths or not test_paths:
        raise DatasetNotFoundError(f"dataset 'tiny_imagenet': no training or validation images found in {base}")
    train = (_read_images(train_paths), np.array(train_labels, dtype=np.int64))
    test = (_read_images(test_paths), np.array(test_labels, dtype=np.int64))
    return image_splits("tiny_imagenet", train, test, len(wnids))
