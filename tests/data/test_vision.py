"""Real-dataset loaders against small fake files in each dataset's on-disk format (no network)."""

from __future__ import annotations

import os

import numpy as np
import pytest
import scipy.io
import torch

from fedbench.data import DATASETS, DatasetNotFoundError, DatasetSplits, load_dataset
from tests.data.fakes import RNG, cifar_rows, images as _images, pickle_file, write_mnist, write_tiny_imagenet


def _unnormalize(x: torch.Tensor, train_nchw: np.ndarray) -> np.ndarray:
    """x · std_c + mean_c with the training split's per-channel stats computed independently."""
    pixels = train_nchw.astype(np.float64) / 255
    mean, std = pixels.mean(axis=(0, 2, 3)), pixels.std(axis=(0, 2, 3))
    return x.double().numpy() * std[None, :, None, None] + mean[None, :, None, None]


def _assert_round_trip(splits: DatasetSplits, train: tuple, test: tuple, num_classes: int) -> None:
    """``train``/``test`` are the expected (uint8 NCHW images, labels)."""
    assert splits.num_classes == num_classes and splits.input_shape == train[0].shape[1:]
    for split, (images, labels) in ((splits.train, train), (splits.test, test)):
        assert split.x.dtype == torch.float32 and split.y.dtype == torch.int64
        assert split.x.shape == images.shape
        np.testing.assert_allclose(_unnormalize(split.x, train[0]), images / 255, atol=1e-5)
        np.testing.assert_array_equal(split.y.numpy(), labels)


@pytest.fixture
def md5_skipped(monkeypatch):
    """torchvision checks CIFAR/SVHN md5 sums; fake files only need to exist."""
    import torchvision.datasets.cifar as cifar
    import torchvision.datasets.svhn as svhn

    for module in (cifar, svhn):
        monkeypatch.setattr(module, "check_integrity", lambda path, md5=None: os.path.isfile(path))


# --- idx (MNIST, Fashion-MNIST, EMNIST) -----------------------------------------------------


@pytest.mark.parametrize("name, folder", [("mnist", "MNIST"), ("fashion_mnist", "FashionMNIST")])
def test_mnist_like_round_trip(tmp_path, name, folder):
    train = (_images(12, (28, 28)), RNG.integers(0, 10, 12))
    test = (_images(5, (28, 28)), RNG.integers(0, 10, 5))
    write_mnist(tmp_path / folder / "raw", "", "train", *train)
    write_mnist(tmp_path / folder / "raw", "", "t10k", *test)
    splits = load_dataset(name, {}, tmp_path, download=False)
    _assert_round_trip(splits, (train[0][:, None], train[1]), (test[0][:, None], test[1]), 10)


@pytest.mark.parametrize("split, classes, low", [("letters", 26, 1), ("balanced", 47, 0), ("digits", 10, 0)])
def test_emnist_orientation_and_labels(tmp_path, split, classes, low):
    upright = {part: _images(n, (28, 28)) for part, n in (("train", 10), ("test", 4))}
    upright["train"][0] = 0
    upright["train"][0, 2, 20] = 255  # row 2, column 20 of the upright glyph
    labels = {part: RNG.integers(low, low + classes, len(upright[part])) for part in upright}
    for part in upright:  # EMNIST's raw files store every image transposed
        raw_images = upright[part].transpose(0, 2, 1)
        write_mnist(tmp_path / "EMNIST" / "raw", f"emnist-{split}-", part, raw_images, labels[part])
    splits = load_dataset("emnist", {"split": split}, tmp_path, download=False)
    expected = {part: (upright[part][:, None], labels[part] - low) for part in upright}
    _assert_round_trip(splits, expected["train"], expected["test"], classes)
    assert int(splits.train.x[0, 0].flatten().argmax()) == 2 * 28 + 20


def test_emnist_rejects_unknown_split(tmp_path):
    with pytest.raises(Exception, match="balanced"):
        load_dataset("emnist", {"split": "bogus"}, tmp_path, download=False)


# --- CIFAR-10/100 pickles -------------------------------------------------------------------


def test_cifar10_round_trip(tmp_path, md5_skipped):
    base = tmp_path / "cifar-10-batches-py"
    batches = [(_images(3, (3, 32, 32)), RNG.integers(0, 10, 3)) for _ in range(5)]
    for i, (images, labels) in enumerate(batches, 1):
        pickle_file(base / f"data_batch_{i}", {"data": cifar_rows(images), "labels": labels.tolist()})
    test = (_images(4, (3, 32, 32)), RNG.integers(0, 10, 4))
    pickle_file(base / "test_batch", {"data": cifar_rows(test[0]), "labels": test[1].tolist()})
    pickle_file(base / "batches.meta", {"label_names": [f"c{i}" for i in range(10)]})
    splits = load_dataset("cifar10", {}, tmp_path, download=False)
    train = (np.concatenate([b[0] for b in batches]), np.concatenate([b[1] for b in batches]))
    _assert_round_trip(splits, train, test, 10)


def test_cifar100_round_trip_uses_fine_labels(tmp_path, md5_skipped):
    base = tmp_path / "cifar-100-python"
    parts = {part: (_images(n, (3, 32, 32)), RNG.integers(0, 100, n)) for part, n in (("train", 6), ("test", 3))}
    for part, (images, fine) in parts.items():
        batch = {"data": cifar_rows(images), "fine_labels": fine.tolist(), "coarse_labels": (fine // 5).tolist()}
        pickle_file(base / part, batch)
    pickle_file(base / "meta", {"fine_label_names": [f"f{i}" for i in range(100)]})
    splits = load_dataset("cifar100", {}, tmp_path, download=False)
    _assert_round_trip(splits, parts["train"], parts["test"], 100)


# --- SVHN .mat ------------------------------------------------------------------------------


def test_svhn_round_trip_maps_label_10_to_0(tmp_path, md5_skipped):
    expected = {}
    for part, n in (("train", 7), ("test", 3)):
        images = _images(n, (3, 32, 32))
        digits = RNG.integers(0, 10, n)
        digits[0] = 0
        (tmp_path / "SVHN").mkdir(exist_ok=True)
        mat = {"X": images.transpose(2, 3, 1, 0), "y": np.where(digits == 0, 10, digits)[:, None].astype(np.uint8)}
        scipy.io.savemat(tmp_path / "SVHN" / f"{part}_32x32.mat", mat)  # X is [H, W, C, N]
        expected[part] = (images, digits)
    splits = load_dataset("svhn", {}, tmp_path, download=False)
    _assert_round_trip(splits, expected["train"], expected["test"], 10)


# --- Tiny-ImageNet folder -------------------------------------------------------------------


def test_tiny_imagenet_folder(tmp_path):
    wnids = ["n09999999", "n01443537", "n02124075"]  # wnids.txt is not sorted
    colors = {"n09999999": (250, 10, 10), "n01443537": (10, 250, 10), "n02124075": (10, 10, 250)}
    write_tiny_imagenet(tmp_path, wnids, colors)
    splits = load_dataset("tiny_imagenet", {}, tmp_path, download=False)
    order = sorted(wnids)
    assert splits.num_classes == 3 and splits.input_shape == (3, 64, 64)
    assert splits.train.y.tolist() == [0, 0, 1, 1, 2, 2]
    assert splits.test.y.tolist() == [order.index(w) for w in wnids]
    solid = {w: np.broadcast_to(np.array(colors[w], np.uint8)[:, None, None], (3, 64, 64)) for w in wnids}
    train_pixels = np.stack([solid[w] for w in order for _ in range(2)])
    means = _unnormalize(splits.train.x, train_pixels).mean(axis=(2, 3)) * 255
    np.testing.assert_allclose(means, train_pixels[:, :, 0, 0], atol=3)
    gray = _unnormalize(splits.test.x[:1], train_pixels)[0].mean(axis=(1, 2)) * 255  # grayscale → RGB
    np.testing.assert_allclose(gray, [colors[wnids[0]][0]] * 3, atol=3)


def test_tiny_imagenet_missing_folder_explains_manual_download(tmp_path):
    with pytest.raises(DatasetNotFoundError) as err:
        load_dataset("tiny_imagenet", {}, tmp_path, download=True)
    message = str(err.value)
    assert "http://cs231n.stanford.edu/tiny-imagenet-200.zip" in message
    assert str(tmp_path) in message and "not supported" in message


# --- missing files --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, folder",
    [
        ("mnist", "MNIST/raw"),
        ("fashion_mnist", "FashionMNIST/raw"),
        ("emnist", "EMNIST/raw"),
        ("cifar10", "cifar-10-batches-py"),
        ("cifar100", "cifar-100-python"),
        ("svhn", "SVHN"),
    ],
)
def test_missing_files_name_dataset_directory_and_flag(tmp_path, name, folder):
    with pytest.raises(DatasetNotFoundError) as err:
        load_dataset(name, {}, tmp_path, download=False)
    message = str(err.value)
    assert f"'{name}'" in message and str(tmp_path / folder) in message and "--download" in message


def test_real_datasets_registered_without_offline_flag():
    for name in ("mnist", "fashion_mnist", "emnist", "cifar10", "cifar100", "svhn", "tiny_imagenet"):
        entry = DATASETS.get(name)
        assert entry.description and "offline" not in entry.tags
    with pytest.raises(Exception, match="extra"):
        DATASETS.get("mnist").params.model_validate({"split": "x"})
