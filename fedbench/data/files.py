"""Where each real dataset's files sit under ``--data-dir``, how to get them, and which are missing.

:func:`missing` looks for the files the loaders of :mod:`fedbench.data.vision` read, without
reading them (so it takes milliseconds and never downloads): a command calls it before it touches
a results store, and the estimate before it probes. A file that exists but fails torchvision's
checksum is found at load time instead. Offline datasets (``digits``, ``mnist5k``, ``mnist1d``,
``synthetic``) are never missing. docs/datasets.md lists the same layouts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedbench.data.base import DATASETS
from fedbench.data.leaf import JSON_PARTS, TFF
from fedbench.data.vision import TINY_IMAGENET_URL

IDX = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


@dataclass(frozen=True)
class OnDisk:
    """A real dataset's folder under the data dir and the files its loader reads there (formatted
    with the dataset's parameters, e.g. EMNIST's ``{split}``); ``download``: torchvision fetches
    them with ``--download``, else ``fetch`` says how to get them by hand."""

    folder: str
    files: tuple[str, ...]
    download: bool = True
    fetch: str = ""
    instead: tuple[str, ...] = ()  # another complete layout in the same folder (LEAF: TFF's HDF5 beside LEAF's JSON)


ON_DISK: dict[str, OnDisk] = {
    "mnist": OnDisk("MNIST/raw", IDX),
    "fashion_mnist": OnDisk("FashionMNIST/raw", IDX),
    "emnist": OnDisk(
        "EMNIST/raw",
        tuple(
            f"emnist-{{split}}-{part}-{kind}-ubyte"
            for part in ("train", "test")
            for kind in ("images-idx3", "labels-idx1")
        ),
    ),
    "cifar10": OnDisk("cifar-10-batches-py", (*(f"data_batch_{i}" for i in range(1, 6)), "test_batch", "batches.meta")),
    "cifar100": OnDisk("cifar-100-python", ("train", "test", "meta")),
    "svhn": OnDisk("SVHN", ("train_32x32.mat", "test_32x32.mat")),
    **{
        name: OnDisk(
            name, JSON_PARTS, instead=(tff.train, tff.test), fetch="LEAF's JSON (preprocess.sh) in {folder}/data/"
        )
        for name, tff in TFF.items()
    },
    "tiny_imagenet": OnDisk(
        "tiny-imagenet-200",
        ("wnids.txt", "train", "val/images", "val/val_annotations.txt"),
        download=False,
        fetch=f"no downloader: fetch {TINY_IMAGENET_URL} and unzip it in {{data_dir}}",
    ),
}


@dataclass(frozen=True)
class MissingDataset:
    """A dataset whose files are not under the data dir: its name, the folder looked in, the files
    absent there, and how to get them."""

    name: str
    folder: Path
    absent: tuple[str, ...]
    how: str

    def line(self) -> str:
        """``dataset mnist: not in data/MNIST/raw/ (pass --download to fetch it into data/, ...)``; a
        dataset whose files are there but unreadable: the loader's own message (``how``)."""
        return f"dataset {self.name}: not in {self.folder}/ ({self.how})" if self.absent else self.how


def _blocks(datasets: Iterable[str | Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each distinct dataset block (a name, or a scenario's ``dataset:`` mapping), keyed canonically."""
    found: dict[str, dict[str, Any]] = {}
    for d in datasets:
        block = {"name": d} if isinstance(d, str) else dict(d)
        found.setdefault(repr(sorted(block.items(), key=str)), block)
    return found


def missing(
    datasets: Iterable[str | Mapping[str, Any]], data_dir: Path, download: bool = False, probing: bool = False
) -> list[MissingDataset]:
    """The datasets among ``datasets`` (names, or ``dataset:`` blocks with their parameters) whose
    files are not under ``data_dir``, in first-seen order. With ``download``, a dataset torchvision
    can fetch is not missing (the run fetches it); Tiny-ImageNet, which it cannot, still is.
    ``probing``: the hint is for an estimate, which never downloads (see :func:`how`)."""
    data_dir, out, seen = Path(data_dir), [], set()
    for block in _blocks(datasets).values():
        name = block["name"]
        where = ON_DISK.get(name)
        if where is None or (download and where.download):
            continue
        params = DATASETS.get(name).params.model_validate({k: v for k, v in block.items() if k != "name"})
        folder = data_dir / where.folder
        absent = tuple(f for f in (f.format(**params.model_dump()) for f in where.files) if not (folder / f).exists())
        if where.instead and all((folder / f).exists() for f in where.instead):
            absent = ()
        if absent and (name, folder) not in seen:
            seen.add((name, folder))
            out.append(MissingDataset(name, folder, absent, how(name, data_dir, probing)))
    return out


def how(name: str, data_dir: Path, probing: bool = False) -> str:
    """How to get dataset ``name`` into ``data_dir``, naming only options that exist: ``--download``
    of the command that runs (``probing``: the estimate's commands, which never download, point to the
    commands that do)."""
    where = ON_DISK[name]
    if not where.download:
        return (
            where.fetch.format(data_dir=data_dir)
            + f" so that {data_dir / where.folder}/ holds "
            + ", ".join(where.files)
        )
    fetch = "fetch it with --download of run, sweep, tune or reproduce" if probing else "pass --download to fetch it"
    if where.instead:  # LEAF: TFF's HDF5 release is what --download fetches, LEAF's own JSON is read as well
        folder = data_dir / where.folder
        return (
            f"{fetch} (TFF's {' and '.join(where.instead)}) into {folder}/, put {where.fetch.format(folder=folder)}"
            f"train/ and data/test/, or --data-dir to the folder that holds {where.folder}/"
        )
    return f"{fetch} into {data_dir}/, or --data-dir to the folder that holds {where.folder}/"


def missing_line(found: list[MissingDataset]) -> str:
    """One line for every missing dataset (``found`` not empty)."""
    return "; ".join(m.line() for m in found)
