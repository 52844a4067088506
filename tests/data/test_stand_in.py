"""Generated stand-ins (fedbench/data/stand_in.py): the real loaders' input shapes (read from fake files in the
real on-disk formats), the known sizes and classes, balanced labels, and the same data every call."""

from pathlib import Path

import pytest
import torch

import fedbench.data.stand_in as stand_ins
from fedbench.data import load_dataset
from fedbench.data.sizes import Sizes, known_sizes
from fedbench.data.stand_in import SHAPES, can_stand_in, stand_in
from tests.data.fakes import fake_cifar10, fake_mnist, write_tiny_imagenet
from tests.data.test_vision import md5_skipped  # noqa: F401  (a fixture)


@pytest.mark.parametrize(
    ("name", "write"),
    [
        ("mnist", fake_mnist),
        ("cifar10", fake_cifar10),
        ("tiny_imagenet", lambda d: write_tiny_imagenet(d, ["n01", "n02"], {"n01": (0, 0, 0), "n02": (9, 9, 9)})),
    ],
)
def test_a_stand_in_has_the_real_loaders_input_shape(tmp_path: Path, md5_skipped, name, write):  # noqa: F811
    write(tmp_path)
    assert load_dataset(name, None, tmp_path, False).input_shape == SHAPES[name]


def test_every_stand_in_has_known_sizes():
    for name in SHAPES:
        block = {"name": name, **({"split": "balanced"} if name == "emnist" else {})}
        assert can_stand_in(block) and known_sizes(block) is not None
    assert not can_stand_in({"name": "digits"}) and not can_stand_in({"name": "femnist"})


def test_a_stand_in_is_seeded_data_of_the_known_sizes_with_balanced_labels(monkeypatch):
    monkeypatch.setattr(stand_ins, "known_sizes", lambda block: Sizes(120, 30, 10))
    a, b = stand_in({"name": "cifar100"}), stand_in({"name": "cifar100"})
    assert a.train.x.shape == (120, 3, 32, 32) and a.test.x.shape == (30, 3, 32, 32) and a.num_classes == 10
    assert a.train.x.dtype == torch.float32 and 0 <= float(a.train.x.min()) and float(a.train.x.max()) < 1
    assert torch.bincount(a.train.y, minlength=10).tolist() == [12] * 10
    assert torch.equal(a.train.x, b.train.x) and torch.equal(a.test.y, b.test.y)
