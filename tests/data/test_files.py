"""fedbench.data.missing: which datasets' files are absent under the data dir, in each loader's layout,
and how each is fetched (fake files in the real on-disk formats; nothing read, nothing downloaded)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from fedbench.data import DATASETS, load_dataset, missing, missing_line
from fedbench.data.files import ON_DISK
from tests.data.fakes import fake_cifar10, fake_mnist, write_tiny_imagenet


def test_every_real_dataset_declares_its_files():
    real = {e.name for e in DATASETS if "offline" not in e.tags}
    assert real == set(ON_DISK)


def test_files_in_the_real_format_are_found_and_load(tmp_path: Path):
    fake_mnist(tmp_path)
    fake_mnist(tmp_path, folder="FashionMNIST")
    write_tiny_imagenet(tmp_path, ["n01", "n02"], {"n01": (0, 0, 0), "n02": (255, 255, 255)})
    assert missing(["mnist", "fashion_mnist", "tiny_imagenet", "digits", "synthetic"], tmp_path) == []
    assert load_dataset("mnist", {}, tmp_path, download=False).train.x.shape == (60, 1, 28, 28)
    assert load_dataset("tiny_imagenet", {}, tmp_path, download=False).num_classes == 2


def test_cifar10_pickles_are_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import torchvision.datasets.cifar as cifar

    fake_cifar10(tmp_path)
    assert missing([{"name": "cifar10"}, {"name": "cifar100"}], tmp_path) == missing(["cifar100"], tmp_path)
    monkeypatch.setattr(cifar, "check_integrity", lambda path, md5=None: os.path.isfile(path))  # fake files' md5
    assert len(load_dataset("cifar10", {}, tmp_path, download=False).train) == 15


def test_a_missing_dataset_names_its_folder_files_and_the_download_flag(tmp_path: Path):
    fake_mnist(tmp_path)
    (tmp_path / "MNIST" / "raw" / "t10k-labels-idx1-ubyte").unlink()
    [m] = missing(["mnist", "mnist"], tmp_path)  # each dataset once
    assert (m.name, m.folder, m.absent) == ("mnist", tmp_path / "MNIST" / "raw", ("t10k-labels-idx1-ubyte",))
    assert m.line() == (
        f"dataset mnist: not in {tmp_path}/MNIST/raw/ (pass --download to fetch it into {tmp_path}/, "
        "or --data-dir to the folder that holds MNIST/raw/)"
    )
    assert missing(["mnist"], tmp_path, download=True) == []  # the run fetches it


def test_emnist_files_follow_the_split(tmp_path: Path):
    from tests.data.fakes import images, write_mnist

    for part in ("train", "test"):
        write_mnist(tmp_path / "EMNIST" / "raw", "emnist-letters-", part, images(3, (28, 28)), np.array([1, 2, 3]))
    assert missing([{"name": "emnist", "split": "letters"}], tmp_path) == []
    assert [m.name for m in missing([{"name": "emnist"}], tmp_path)] == ["emnist"]  # balanced, the default


def test_tiny_imagenet_has_no_downloader_and_says_where_to_get_it(tmp_path: Path):
    [m] = missing(["tiny_imagenet"], tmp_path / "d", download=True)
    line = missing_line([m])
    assert "no downloader: fetch http://cs231n.stanford.edu/tiny-imagenet-200.zip and unzip it in" in line
    assert f"so that {tmp_path / 'd' / 'tiny-imagenet-200'}/ holds wnids.txt, train, val/images" in line
    assert "--download" not in line and "\n" not in line
    assert not (tmp_path / "d").exists()  # looking creates nothing
