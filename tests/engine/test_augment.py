import pytest
import torch

from fedbench.engine.augment import augment_batch


def test_off_is_identity_and_keys_make_it_deterministic():
    x = torch.randn(6, 3, 5, 5)
    assert augment_batch(x, False, 0, 0, 1, 2) is x
    a = augment_batch(x, True, 2, seed=0, client=1, position=2)
    assert torch.equal(a, augment_batch(x, True, 2, 0, 1, 2))
    assert not torch.equal(a, augment_batch(x, True, 2, 0, 1, 3))
    assert a.shape == x.shape


def test_flip_only_flips_whole_images():
    x = torch.randn(64, 1, 4, 4)
    out = augment_batch(x, True, 0, 0, 0, 0)
    flipped = [torch.equal(o, xi.flip(-1)) and not torch.equal(o, xi) for o, xi in zip(out, x)]
    kept = [torch.equal(o, xi) for o, xi in zip(out, x)]
    assert all(f or k for f, k in zip(flipped, kept)) and 10 < sum(flipped) < 54


def test_crop_is_a_shifted_window_of_the_zero_padded_image():
    x = torch.arange(2 * 1 * 4 * 4, dtype=torch.float32).reshape(2, 1, 4, 4) + 1
    out = augment_batch(x, False, 1, 3, 0, 0)
    padded = torch.nn.functional.pad(x, (1, 1, 1, 1))
    for b in range(2):
        windows = [padded[b, :, i : i + 4, j : j + 4] for i in range(3) for j in range(3)]
        assert any(torch.equal(out[b], w) for w in windows)


def test_non_image_batches_are_rejected():
    with pytest.raises(ValueError, match="image batches"):
        augment_batch(torch.randn(4, 60), True, 0, 0, 0, 0)
