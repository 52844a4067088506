import torch

from fedbench.models import build_model, count_parameters


def test_convmixer_256_8_matches_the_fedcams_parameter_counts():
    assert count_parameters(build_model("convmixer", {}, (3, 32, 32), 10)) == 594_186
    assert count_parameters(build_model("convmixer", {}, (3, 32, 32), 100)) == 617_316


def test_small_convmixer_runs_on_digits_shaped_input():
    model = build_model("convmixer", {"dim": 16, "depth": 2, "kernel_size": 3, "patch_size": 2}, (1, 8, 8), 10)
    assert model(torch.randn(4, 1, 8, 8)).shape == (4, 10)
