"""Small fake dataset files in each real dataset's on-disk format (no network): what the loaders of
fedbench/data/vision.py read, and what fedbench.data.missing looks for."""

from __future__ import annotations

import pickle
import struct
from pathlib import Path

import numpy as np
from PIL import Image

RNG = np.random.default_rng(0)


def images(n: int, shape: tuple[int, ...]) -> np.ndarray:
    return RNG.integers(0, 256, (n, *shape), dtype=np.uint8)


def write_idx(path: Path, array: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    path.write_bytes(header + array.astype(np.uint8).tobytes())


def write_mnist(raw: Path, prefix: str, part: str, pixels: np.ndarray, labels: np.ndarray) -> None:
    write_idx(raw / f"{prefix}{part}-images-idx3-ubyte", pixels)
    write_idx(raw / f"{prefix}{part}-labels-idx1-ubyte", labels)


def fake_mnist(data_dir: Path, train: int = 60, test: int = 20, folder: str = "MNIST") -> None:
    """MNIST-format files (``train``/``test`` random 28×28 images, labels 0–9) in ``data_dir/<folder>/raw``."""
    for part, n in (("train", train), ("t10k", test)):
        write_mnist(data_dir / folder / "raw", "", part, images(n, (28, 28)), RNG.integers(0, 10, n))


def pickle_file(path: Path, obj: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(obj))


def cifar_rows(images_nchw: np.ndarray) -> np.ndarray:
    return images_nchw.reshape(len(images_nchw), 3 * 32 * 32)  # R plane, G plane, B plane, row-major


def fake_cifar10(data_dir: Path, per_batch: int = 3) -> None:
    """CIFAR-10's python pickles (five training batches, a test batch, the meta file); torchvision's md5
    check fails on them (tests/data/test_vision.py's ``md5_skipped`` lets them load)."""
    base = data_dir / "cifar-10-batches-py"
    for name in [*(f"data_batch_{i}" for i in range(1, 6)), "test_batch"]:
        pickle_file(
            base / name,
            {"data": cifar_rows(images(per_batch, (3, 32, 32))), "labels": RNG.integers(0, 10, per_batch).tolist()},
        )
    pickle_file(base / "batches.meta", {"label_names": [f"c{i}" for i in range(10)]})


def write_tiny_imagenet(root: Path, wnids: list[str], colors: dict[str, tuple[int, int, int]]) -> None:
    """The layout of tiny-imagenet-200.zip unzipped in ``root``: two training images per class, one
    validation image per class (the first grayscale)."""
    base = root / "tiny-imagenet-200"
    base.mkdir(parents=True)
    (base / "wnids.txt").write_text("\n".join(wnids) + "\n")
    for wnid in wnids:
        folder = base / "train" / wnid / "images"
        folder.mkdir(parents=True)
        for i in range(2):
            Image.new("RGB", (64, 64), colors[wnid]).save(folder / f"{wnid}_{i}.JPEG", quality=95)
        (base / "train" / wnid / f"{wnid}_boxes.txt").write_text("")
    (base / "val" / "images").mkdir(parents=True)
    lines = []
    for i, wnid in enumerate(wnids):
        image = Image.new("L", (64, 64), colors[wnid][0]) if i == 0 else Image.new("RGB", (64, 64), colors[wnid])
        image.save(base / "val" / "images" / f"val_{i}.JPEG", quality=95)
        lines.append(f"val_{i}.JPEG\t{wnid}\t0\t0\t63\t63")
    (base / "val" / "val_annotations.txt").write_text("\n".join(lines) + "\n")


# --- LEAF (FEMNIST, Shakespeare): LEAF's JSON and TFF's HDF5 ---------------------------------------------------


def write_leaf_json(folder: Path, users: dict[str, tuple[list, list]], files: int = 2) -> None:
    """LEAF's JSON layout (what ``preprocess.sh`` writes): the users spread over ``files`` files in ``folder``."""
    import json

    folder.mkdir(parents=True, exist_ok=True)
    names = list(users)
    for k in range(files):
        mine = names[k::files]
        blob = {
            "users": mine,
            "num_samples": [len(users[u][1]) for u in mine],
            "user_data": {u: {"x": users[u][0], "y": users[u][1]} for u in mine},
        }
        (folder / f"all_data_{k}_niid_0_keep_0_train_9.json").write_text(json.dumps(blob))


def femnist_users(n_users: int, per_user: int, seed: int = 0) -> dict[str, tuple[list, list]]:
    """``f0000_00`` … writers, each with ``per_user`` flat 784-vectors in [0, 1] and labels 0–61."""
    rng = np.random.default_rng(seed)
    return {
        f"f{i:04d}_{i % 100:02d}": (
            rng.random((per_user, 784)).round(3).tolist(),
            rng.integers(0, 62, per_user).tolist(),
        )
        for i in range(n_users)
    }


def fake_femnist(data_dir: Path, n_users: int = 6, train: int = 5, test: int = 2) -> None:
    """FEMNIST in LEAF's JSON layout under ``data_dir/femnist/data/{train,test}`` (LEAF's sample split)."""
    tr, te = femnist_users(n_users, train, 1), femnist_users(n_users, test, 2)
    write_leaf_json(data_dir / "femnist" / "data" / "train", tr)
    write_leaf_json(data_dir / "femnist" / "data" / "test", te)


LINES = "To be, or not to be, that is the question:\nWhether 'tis nobler in the mind to suffer"


def shakespeare_users(n_users: int, per_user: int, offset: int = 0) -> dict[str, tuple[list, list]]:
    """Roles ``THE_PLAY_ROLE<i>`` with LEAF's examples: 80-character windows of a text and the next character."""
    text = (LINES + "\n") * 20
    out = {}
    for i in range(n_users):
        starts = [(offset + 7 * i + 3 * j) % (len(text) - 81) for j in range(per_user)]
        out[f"THE_PLAY_ROLE{i}"] = ([text[s : s + 80] for s in starts], [text[s + 80] for s in starts])
    return out


def fake_shakespeare(data_dir: Path, n_users: int = 5, train: int = 6, test: int = 2) -> None:
    """Shakespeare in LEAF's JSON layout under ``data_dir/shakespeare/data/{train,test}``."""
    write_leaf_json(data_dir / "shakespeare" / "data" / "train", shakespeare_users(n_users, train))
    write_leaf_json(data_dir / "shakespeare" / "data" / "test", shakespeare_users(n_users, test, offset=500))


def write_tff_h5(path: Path, clients: dict[str, dict[str, object]]) -> None:
    """TFF's HDF5 client data: ``examples/<client>/<field>`` datasets (pixels, label or snippets)."""
    import h5py

    path.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(path, "w") as f:
        for client, fields in clients.items():
            group = f.create_group(f"examples/{client}")
            for field, values in fields.items():
                group.create_dataset(field, data=values)
