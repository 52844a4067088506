"""LEAF's natural federated datasets: FEMNIST (writers as clients) and Shakespeare (speaking roles as clients).

Caldas et al. 2018, "LEAF: A Benchmark for Federated Settings". Two on-disk layouts are read under
``root/<name>/``:

- **LEAF's JSON**, what LEAF's ``preprocess.sh`` writes: ``data/train/*.json`` and ``data/test/*.json``, each file
  ``{"users": [...], "num_samples": [...], "user_data": {user: {"x": [...], "y": [...]}}}``. Users keep the order
  of the files (sorted by name) and of each file's ``users`` list.
- **TFF's HDF5 release** (``fed_emnist_{train,test}.h5``, ``shakespeare_{train,test}.h5``), which ``--download``
  fetches from TensorFlow Federated's public bucket (SHA-256 checked) when neither layout is there:
  ``examples/<client>/{pixels,label}`` and ``examples/<client>/snippets``. Clients in sorted order. Reading it needs
  ``h5py`` (``pip install fedbench[leaf]``).

Each training sample carries its client (``DatasetSplits.client_ids``), which the ``natural`` partition uses; the
test set is the union of the test samples of the clients kept (LEAF's ``sample`` split), or of every test user
when the test users are others (LEAF's ``user`` split). ``users: n`` keeps the first n clients.
"""

from __future__ import annotations

import hashlib
import json
import tarfile
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field

from fedbench.data.base import DATASETS, ArraySplit, DatasetSplits
from fedbench.data.vision import DatasetNotFoundError

TFF_BUCKET = "https://storage.googleapis.com/tff-datasets-public/"

LETTERS = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"
"""LEAF's Shakespeare vocabulary (``models/utils/language_utils.py``: 80 characters); a character outside it is
read as index 80 in inputs (the LSTM's embedding has a row for it) and a sample whose target is outside it is
dropped."""

SEQ_LEN = 80  # LEAF's Shakespeare windows: 80 characters, then the next one


@dataclass(frozen=True)
class TffArchive:
    """A TFF HDF5 release: the archive's name, its SHA-256 (TFF's ``load_data``) and the two files it holds."""

    archive: str
    sha256: str
    train: str
    test: str


TFF = {
    "femnist": TffArchive(
        "fed_emnist.tar.bz2",
        "fe1ed5a502cea3a952eb105920bff8cffb32836b5173cb18a57a32c3606f3ea0",
        "fed_emnist_train.h5",
        "fed_emnist_test.h5",
    ),
    "shakespeare": TffArchive(
        "shakespeare.tar.bz2",
        "0285be9906cb5f268092eee4edeeacfc2af4574f2941f7cc2f08a321d7f5c707",
        "shakespeare_train.h5",
        "shakespeare_test.h5",
    ),
}

JSON_PARTS = ("data/train", "data/test")  # LEAF's JSON layout under root/<name>/


class LeafParams(BaseModel):
    """Parameters of ``femnist`` and ``shakespeare``."""

    model_config = ConfigDict(extra="forbid")

    users: int | None = Field(None, ge=1, description="keep the first n clients (default: all); clients.num = n")


Arrays = tuple[np.ndarray, np.ndarray]  # a client's inputs (float32) and labels (int64)
Users = dict[str, Arrays]  # client → its samples, in file order
Decode = Callable[..., Arrays]  # a client's raw fields (LEAF's x and y, or TFF's datasets) → its arrays


def _json_users(folder: Path, decode: Decode) -> Users:
    """Every user of LEAF's JSON files in ``folder`` (sorted file names, then each file's ``users`` order), each
    user's samples decoded to arrays as its file is read (one file's Python objects at a time)."""
    parts: dict[str, list[Arrays]] = {}
    for path in sorted(folder.glob("*.json")):
        blob = json.loads(path.read_text())
        for user in blob["users"]:
            data = blob["user_data"][user]
            parts.setdefault(str(user), []).append(decode(data["x"], data["y"]))
        del blob
    return {u: _joined(p) for u, p in parts.items()}


def _joined(parts: list[Arrays]) -> Arrays:
    return (
        (np.concatenate([x for x, _ in parts]), np.concatenate([y for _, y in parts])) if len(parts) > 1 else parts[0]
    )


def _h5_users(path: Path, fields: tuple[str, ...], decode: Decode) -> Users:
    """Every client of a TFF HDF5 file, sorted: ``fields`` read from ``examples/<client>/`` and decoded."""
    try:
        import h5py
    except ImportError as err:
        raise DatasetNotFoundError(
            f"{path.name}: reading TFF's HDF5 files needs h5py: pip install fedbench[leaf]"
        ) from err
    with h5py.File(path, "r") as f:
        examples = f["examples"]
        return {str(c): decode(*(examples[c][field][()] for field in fields)) for c in sorted(examples.keys())}


def _fetch(name: str, folder: Path) -> None:
    """Downloads TFF's archive for ``name`` into ``folder``, checks its SHA-256 and extracts its two HDF5 files."""
    tff = TFF[name]
    folder.mkdir(parents=True, exist_ok=True)
    archive = folder / tff.archive
    if not archive.exists():
        partial = archive.with_suffix(".part")
        urllib.request.urlretrieve(TFF_BUCKET + tff.archive, partial)  # noqa: S310 (a fixed https URL)
        partial.rename(archive)
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    if digest != tff.sha256:
        archive.unlink()
        raise DatasetNotFoundError(f"dataset {name!r}: {tff.archive} has SHA-256 {digest}, expected {tff.sha256}")
    with tarfile.open(archive, "r:bz2") as tar:
        for member in tar.getmembers():
            name_in_folder = Path(member.name).name  # flat in folder, whatever the archive's own folders
            source = tar.extractfile(member) if member.isfile() and name_in_folder in (tff.train, tff.test) else None
            if source is not None:
                (folder / name_in_folder).write_bytes(source.read())


def _splits_of(
    name: str, root: Path, download: bool, json_decode: Decode, fields: tuple[str, ...], h5_decode: Decode
) -> tuple[Users, Users]:
    """The (train, test) users of ``name`` from LEAF's JSON, else TFF's HDF5 (fetched with ``download``)."""
    folder = Path(root) / name
    if all((folder / part).is_dir() and any((folder / part).glob("*.json")) for part in JSON_PARTS):
        return tuple(_json_users(folder / part, json_decode) for part in JSON_PARTS)  # type: ignore[return-value]
    tff = TFF[name]
    if download and not all((folder / f).exists() for f in (tff.train, tff.test)):
        _fetch(name, folder)
    if all((folder / f).exists() for f in (tff.train, tff.test)):
        return _h5_users(folder / tff.train, fields, h5_decode), _h5_users(folder / tff.test, fields, h5_decode)
    raise DatasetNotFoundError(
        f"dataset {name!r}: neither LEAF's JSON ({folder}/data/train/*.json, data/test/*.json) nor TFF's HDF5 "
        f"({folder}/{tff.train}, {tff.test}); pass --download to fetch TFF's, or point --data-dir at the folder "
        f"that holds {name}/"
    )


def _kept(name: str, train: Users, test: Users, users: int | None) -> tuple[list[str], list[str]]:
    """The clients kept (the first ``users``) and the test users whose samples form the test set."""
    kept = list(train)[:users] if users is not None else list(train)
    if users is not None and users > len(train):
        raise ValueError(f"dataset {name!r}: users={users}, but the training files hold {len(train)} clients")
    shared = [u for u in kept if u in test]
    test_users = shared if shared else list(test)  # LEAF's user split: the test users are others
    if not test_users or not kept:
        raise DatasetNotFoundError(f"dataset {name!r}: no training or test users found")
    return kept, test_users


def _gathered(users: Users, names: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The samples of ``names`` in order: inputs, labels, and each sample's position in ``names``."""
    x = np.concatenate([users[u][0] for u in names])
    y = np.concatenate([users[u][1] for u in names])
    ids = np.concatenate([np.full(len(users[u][1]), i, dtype=np.int64) for i, u in enumerate(names)])
    return x, y, ids


# --- FEMNIST ----------------------------------------------------------------------------------


def _femnist_arrays(pixels: Any, labels: Any) -> Arrays:
    """``[n, 1, 28, 28]`` float32 in [0, 1] and int64 labels, from LEAF's flat 784-vectors or TFF's 28×28 arrays."""
    return np.asarray(pixels, dtype=np.float32).reshape(-1, 1, 28, 28), np.asarray(labels, dtype=np.int64)


@DATASETS.register(
    "femnist",
    "LEAF FEMNIST: handwritten characters, 28×28 grayscale, 62 classes, writers as clients (3,550 in LEAF)",
    params=LeafParams,
)
def femnist(root: Path, download: bool, *, users: int | None) -> DatasetSplits:
    """FEMNIST from ``root/femnist``; pixels (LEAF's and TFF's: 1.0 is the background) standardized with the
    training split's mean and std; ``client_ids`` = the writer of each training sample."""
    train, test = _splits_of("femnist", root, download, _femnist_arrays, ("pixels", "label"), _femnist_arrays)
    kept, test_users = _kept("femnist", train, test, users)
    x, y, ids = _gathered(train, kept)
    tx, ty, _ = _gathered(test, test_users)
    mean, std = float(x.mean(dtype=np.float64)), float(x.std(dtype=np.float64))
    scale = std if std > 0 else 1.0

    def split(images: np.ndarray, labels: np.ndarray) -> ArraySplit:
        return ArraySplit(torch.from_numpy((images - mean) / scale).float(), torch.from_numpy(labels))

    return DatasetSplits("femnist", split(x, y), split(tx, ty), 62, (1, 28, 28), client_ids=ids)


# --- Shakespeare ------------------------------------------------------------------------------

OOV = len(LETTERS)  # the index of a character outside LETTERS
_TABLE = np.full(128, OOV, dtype=np.int64)  # ASCII code point → index in LETTERS (every letter is ASCII)
_TABLE[[ord(c) for c in LETTERS]] = np.arange(len(LETTERS))


def _indices(codes: np.ndarray) -> np.ndarray:
    """Unicode code points → indices in :data:`LETTERS`, :data:`OOV` for any other character."""
    return np.where(codes < 128, _TABLE[np.minimum(codes, 127)], OOV)


def encode(text: str) -> list[int]:
    """LEAF's ``word_to_indices``, with index 80 for a character outside :data:`LETTERS` (LEAF's ``find`` gives −1)."""
    return _indices(np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)).tolist()


def _kept_targets(x: np.ndarray, y: np.ndarray) -> Arrays:
    """Indices ``[n, L]`` as float32 (exact) and targets ``[n]``, without the samples whose target is out of
    the vocabulary."""
    keep = y != OOV
    return x[keep].astype(np.float32), y[keep]


def _leaf_examples(xs: list[str], ys: list[str]) -> Arrays:
    """One role's LEAF examples (80-character strings and the next character), vectorized: the strings as a
    fixed-width unicode array viewed as code points."""
    if not xs:
        return np.zeros((0, SEQ_LEN), np.float32), np.zeros(0, np.int64)
    lengths = {len(x) for x in xs}
    if len(lengths) > 1:
        raise ValueError(f"dataset 'shakespeare': input sequences of lengths {sorted(lengths)}; expected one length")
    width = lengths.pop()
    codes = np.asarray(xs, dtype=f"<U{width}").view(np.uint32).reshape(len(xs), width)
    targets = np.array([ord(c) if len(c) == 1 else 0x110000 for c in ys], dtype=np.int64)
    return _kept_targets(_indices(codes), _indices(targets))


def _role_windows(snippets: Any) -> Arrays:
    """LEAF's examples of one role from TFF's snippets: the role's text (snippets joined by a newline) cut into
    every window of 80 characters, each followed by its next character (LEAF's ``txt_to_data``)."""
    text = "\n".join(s.decode() if isinstance(s, bytes) else str(s) for s in snippets)
    codes = _indices(np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32))
    if len(codes) <= SEQ_LEN:
        return np.zeros((0, SEQ_LEN), np.float32), np.zeros(0, np.int64)
    windows = np.lib.stride_tricks.sliding_window_view(codes, SEQ_LEN + 1)
    return _kept_targets(windows[:, :SEQ_LEN], windows[:, SEQ_LEN])


@DATASETS.register(
    "shakespeare",
    "LEAF Shakespeare: next character after 80, 80 classes, speaking roles as clients (1,129 in LEAF)",
    params=LeafParams,
)
def shakespeare(root: Path, download: bool, *, users: int | None) -> DatasetSplits:
    """Shakespeare from ``root/shakespeare``: inputs are the 80 characters' indices in :data:`LETTERS` (float32,
    exact; the ``char_lstm`` model embeds them), targets the next character's index; ``client_ids`` = the role."""
    train, test = _splits_of("shakespeare", root, download, _leaf_examples, ("snippets",), _role_windows)
    kept, test_users = _kept("shakespeare", train, test, users)
    x, y, ids = _gathered(train, kept)
    tx, ty, _ = _gathered(test, test_users)
    if len(x) == 0 or len(tx) == 0:
        raise DatasetNotFoundError("dataset 'shakespeare': no training or test sequences found")
    return DatasetSplits(
        "shakespeare",
        ArraySplit(torch.from_numpy(x), torch.from_numpy(y)),
        ArraySplit(torch.from_numpy(tx), torch.from_numpy(ty)),
        len(LETTERS),
        (x.shape[1],),
        client_ids=ids,
    )
