"""Datasets: the registry, offline and real loaders, and :func:`load_dataset`.

Importing this package registers every loader in :data:`DATASETS`; heavy dependencies
(torchvision, scikit-learn, mnist1d) are imported only when a loader runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel

from fedbench.data import leaf, offline, vision  # noqa: F401  (registration)
from fedbench.data.base import DATASETS, ArraySplit, DatasetSplits
from fedbench.data.files import MissingDataset, missing, missing_line
from fedbench.data.vision import DatasetNotFoundError

__all__ = [
    "DATASETS",
    "ArraySplit",
    "DatasetSplits",
    "DatasetNotFoundError",
    "MissingDataset",
    "load_dataset",
    "missing",
    "missing_line",
]


def load_dataset(name: str, params: dict[str, Any] | BaseModel | None, root: Path, download: bool) -> DatasetSplits:
    """Validates ``params`` with the entry's pydantic model and runs its loader.

    Raises :class:`~fedbench.registry.UnknownNameError` for an unregistered ``name`` and
    :class:`pydantic.ValidationError` for bad ``params`` (unknown keys are rejected).
    """
    entry = DATASETS.get(name)
    validated = params if isinstance(params, BaseModel) else entry.params.model_validate(params or {})
    splits = entry.obj(Path(root), download, **validated.model_dump())
    _check(name, splits)
    return splits


def _check(name: str, splits: DatasetSplits) -> None:
    """The contract of :class:`DatasetSplits`, checked once per load."""
    for part, split in (("train", splits.train), ("test", splits.test)):
        x, y = split.x, split.y
        if x.dtype != torch.float32 or y.dtype != torch.int64 or tuple(x.shape[1:]) != splits.input_shape:
            raise TypeError(
                f"dataset {name!r} {part}: got x {x.dtype} {tuple(x.shape)}, y {y.dtype}; expected x float32 "
                f"[n, {', '.join(map(str, splits.input_shape))}] and y int64"
            )
        if len(x) != len(y) or len(y) == 0:
            raise ValueError(f"dataset {name!r} {part}: {len(x)} inputs and {len(y)} labels; expected equal, > 0")
        if int(y.min()) < 0 or int(y.max()) >= splits.num_classes:
            raise ValueError(
                f"dataset {name!r} {part}: labels span {int(y.min())}..{int(y.max())}; "
                f"expected 0..{splits.num_classes - 1}"
            )
    if splits.client_ids is not None and len(splits.client_ids) != len(splits.train):
        raise ValueError(f"dataset {name!r}: {len(splits.client_ids)} client_ids for {len(splits.train)} samples")
