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
from collections.abc import Iterator
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


Users = dict[str, tuple[list[Any], list[Any]]]  # user → (x, y), in file order


def _json_users(folder: Path) -> Users:
    """Every user of LEAF's JSON files in ``folder`` (sorted file names, then each file's ``users`` order)."""
    out: Users = {}
    for path in sorted(folder.glob("*.json")):
        blob = json.loads(path.read_text())
        for user in blob["users"]:
            data = blob["user_data"][user]
            xs, ys = out.setdefault(str(user), ([], []))
            xs.extend(data["x"])
            ys.extend(data["y"])
    return out


def _h5_users(path: Path, fields: tuple[str, ...]) -> Users:
    """Every client of a TFF HDF5 file, sorted: ``fields`` read from ``examples/<client>/``."""
    try:
        import h5py
    except ImportError as err:
        raise DatasetNotFoundError(
            f"{path.name}: reading TFF's HDF5 files needs h5py: pip install fedbench[leaf]"
        ) from err
    out: Users = {}
    with h5py.File(path, "r") as f:
        examples = f["examples"]
        for client in sorted(examples.keys()):
            group = examples[client]
            values = [group[field][()] for field in fields]
            out[str(client)] = (list(values[0]), list(values[1]) if len(values) > 1 else [])
    return out


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


def _splits_of(name: str, root: Path, download: bool, fields: tuple[str, ...]) -> tuple[Users, Users]:
    """The (train, test) users of ``name`` from LEAF's JSON, else TFF's HDF5 (fetched with ``download``)."""
    folder = Path(root) / name
    if all((folder / part).is_dir() and any((folder / part).glob("*.json")) for part in JSON_PARTS):
        return _json_users(folder / JSON_PARTS[0]), _json_users(folder / JSON_PARTS[1])
    tff = TFF[name]
    if download and not all((folder / f).exists() for f in (tff.train, tff.test)):
        _fetch(name, folder)
    if all((folder / f).exists() for f in (tff.train, tff.test)):
        return _h5_users(folder / tff.train, fields), _h5_users(folder / tff.test, fields)
    raise DatasetNotFoundError(
        f"dataset {name!r}: neither LEAF's JSON ({folder}/data/train/*.json, data/test/*.json) nor TFF's HDF5 "
        f"({folder}/{tff.train}, {tff.test}); pass --download to fetch TFF's, or point --data-dir at the folder "
        f"that holds {name}/"
    )


def _kept(name: str, train: Users, test: Users, users: int | None) -> tuple[list[str], Iterator[tuple[str, Any]]]:
    """The clients kept (the first ``users``) and the test users whose samples form the test set."""
    kept = list(train)[:users] if users is not None else list(train)
    if users is not None and users > len(train):
        raise ValueError(f"dataset {name!r}: users={users}, but the training files hold {len(train)} clients")
    shared = [u for u in kept if u in test]
    test_users = shared if shared else list(test)  # LEAF's user split: the test users are others
    if not test_users or not kept:
        raise DatasetNotFoundError(f"dataset {name!r}: no training or test users found")
    return kept, ((u, test[u]) for u in test_users)


def _client_ids(train: Users, kept: list[str]) -> np.ndarray:
    return np.concatenate([np.full(len(train[u][1]), i, dtype=np.int64) for i, u in enumerate(kept)])


# --- FEMNIST ----------------------------------------------------------------------------------


def _images(rows: list[Any]) -> np.ndarray:
    """``[n, 1, 28, 28]`` float32 in [0, 1] from LEAF's flat 784-vectors or TFF's 28×28 arrays."""
    return np.asarray(rows, dtype=np.float32).reshape(-1, 1, 28, 28)


@DATASETS.register(
    "femnist",
    "LEAF FEMNIST: handwritten characters, 28×28 grayscale, 62 classes, writers as clients (3,550 in LEAF)",
    params=LeafParams,
)
def femnist(root: Path, download: bool, *, users: int | None) -> DatasetSplits:
    """FEMNIST from ``root/femnist``; pixels (LEAF's and TFF's: 1.0 is the background) standardized with the
    training split's mean and std; ``client_ids`` = the writer of each training sample."""
    train, test = _splits_of("femnist", root, download, ("pixels", "label"))
    kept, test_users = _kept("femnist", train, test, users)
    x = _images([row for u in kept for row in train[u][0]])
    y = np.asarray([label for u in kept for label in train[u][1]], dtype=np.int64)
    pairs = list(test_users)
    tx = _images([row for _, (xs, _) in pairs for row in xs])
    ty = np.asarray([label for _, (_, ys) in pairs for label in ys], dtype=np.int64)
    mean, std = float(x.mean(dtype=np.float64)), float(x.std(dtype=np.float64))
    scale = std if std > 0 else 1.0

    def split(images: np.ndarray, labels: np.ndarray) -> ArraySplit:
        return ArraySplit(torch.from_numpy((images - mean) / scale).float(), torch.from_numpy(labels))

    return DatasetSplits("femnist", split(x, y), split(tx, ty), 62, (1, 28, 28), client_ids=_client_ids(train, kept))


# --- Shakespeare ------------------------------------------------------------------------------


def encode(text: str) -> list[int]:
    """LEAF's ``word_to_indices``, with index 80 for a character outside :data:`LETTERS` (LEAF's ``find`` gives −1)."""
    return [LETTERS.find(c) if c in LETTERS else len(LETTERS) for c in text]


def _windows(snippets: list[Any]) -> tuple[list[str], list[str]]:
    """LEAF's examples of one role from TFF's snippets: the role's text (snippets joined by a newline) cut into
    every window of 80 characters, each followed by its next character (LEAF's ``txt_to_data``)."""
    text = "\n".join(s.decode() if isinstance(s, bytes) else str(s) for s in snippets)
    starts = range(len(text) - SEQ_LEN)
    return [text[i : i + SEQ_LEN] for i in starts], [text[i + SEQ_LEN] for i in starts]


def _sequences(xs: list[str], ys: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """``[n, L]`` character indices as float32 and ``[n]`` int64 targets; samples whose target is out of the
    vocabulary are dropped."""
    keep = [i for i, c in enumerate(ys) if len(c) == 1 and c in LETTERS]
    lengths = {len(xs[i]) for i in keep}
    if len(lengths) > 1:
        raise ValueError(f"dataset 'shakespeare': input sequences of lengths {sorted(lengths)}; expected one length")
    width = lengths.pop() if lengths else SEQ_LEN
    x = np.asarray([encode(xs[i]) for i in keep], dtype=np.float32).reshape(len(keep), width)
    return x, np.asarray([LETTERS.index(ys[i]) for i in keep], dtype=np.int64)


@DATASETS.register(
    "shakespeare",
    "LEAF Shakespeare: next character after 80, 80 classes, speaking roles as clients (1,129 in LEAF)",
    params=LeafParams,
)
def shakespeare(root: Path, download: bool, *, users: int | None) -> DatasetSplits:
    """Shakespeare from ``root/shakespeare``: inputs are the 80 characters' indices in :data:`LETTERS` (float32,
    exact; the ``char_lstm`` model embeds them), targets the next character's index; ``client_ids`` = the role."""
    train, test = _splits_of("shakespeare", root, download, ("snippets",))
    if train and not next(iter(train.values()))[1]:  # TFF's snippets: LEAF's windows first
        train = {u: _windows(xs) for u, (xs, _) in train.items()}
        test = {u: _windows(xs) for u, (xs, _) in test.items()}
    kept, test_users = _kept("shakespeare", train, test, users)
    parts = [_sequences(*train[u]) for u in kept]
    x, y = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
    ids = np.concatenate([np.full(len(p[1]), i, dtype=np.int64) for i, p in enumerate(parts)])
    tests = [_sequences(xs, ys) for _, (xs, ys) in test_users]
    tx, ty = np.concatenate([t[0] for t in tests]), np.concatenate([t[1] for t in tests])
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
