"""Full local gradients (fedbench/engine/full_gradient.py): the chunk convention, the batched computation
against a plain autograd loop over the chunks in float64, and the MimeLite BatchNorm crash of a client of
batch_size·k + 1 samples (issue 24: "Expected more than 1 value per channel when training")."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from fedbench.data.base import ArraySplit
from fedbench.engine.full_gradient import chunk_sizes, client_gradients
from fedbench.engine.precision import default_dtype
from fedbench.models import build_model
from fedbench.models.flat import FlatModel


@pytest.mark.parametrize(
    "n, expected",
    [(100, [50, 50]), (101, [50, 51]), (151, [50, 50, 51]), (52, [50, 2]), (51, [51]), (49, [49]), (2, [2]), (1, [1])],
)
def test_a_one_sample_tail_joins_the_chunk_before_it(n: int, expected: list[int]):
    assert chunk_sizes(n, 50) == expected
    assert sum(chunk_sizes(n, 50)) == n


def reference(
    module: torch.nn.Module, point: torch.Tensor, train: ArraySplit, part: torch.Tensor, sizes: list[int], squared: bool
) -> torch.Tensor:
    """Σ_b (n_b/n)·g_b (⊙ g_b) by hand: the chunks in order, a fresh train-mode module copy per chunk."""
    total, start = torch.zeros_like(point), 0
    for n_b in sizes:
        net = copy.deepcopy(module).train()
        torch.nn.utils.vector_to_parameters(point, net.parameters())
        idx = part[start : start + n_b]
        loss = F.cross_entropy(net(train.x[idx]), train.y[idx])
        g = torch.cat([p.reshape(-1) for p in torch.autograd.grad(loss, list(net.parameters()))])
        total += (g * g if squared else g) * n_b / len(part)
        start += n_b
    return total


@pytest.mark.parametrize("squared", [False, True], ids=["gradient", "fisher"])
def test_batched_chunks_equal_an_autograd_loop_with_batchnorm(squared: bool):
    """lenet5_bn without dropout (BatchNorm2d and a BatchNorm1d on [n, 512]); clients of unequal sizes:
    2·B + 1 (the MimeLite crash), B + 2, fewer than B, one sample of two (B − 1 + 1 is not a tail)."""
    B = 8
    with default_dtype(torch.float64):
        torch.manual_seed(0)
        module = build_model("lenet5_bn", {"dropout": 0.0}, (3, 32, 32), 10)
        train = ArraySplit(torch.randn(60, 3, 32, 32), torch.randint(0, 10, (60,)))
        model = FlatModel(module)
        buffers = model.buffers()
        point = model.flatten() + 0.01 * torch.randn(model.dim)
        perm = torch.randperm(60)
        parts = [perm[:17], perm[17:27], perm[27:32], perm[32:34]]
        got = client_gradients(model, buffers, train, parts, point, B, squared=squared)
        for row, part in enumerate(parts):
            expected = reference(module, point, train, part, chunk_sizes(len(part), B), squared)
            torch.testing.assert_close(got[row], expected, rtol=1e-7, atol=1e-10)  # float64: float32 would miss by 1e-8
        assert all(torch.equal(v, model.buffers()[k]) for k, v in buffers.items())  # running statistics untouched


def test_the_old_per_chunk_loop_would_have_crashed_on_that_client():
    """The case itself: a one-sample chunk in train mode is what torch refuses for lenet5_bn's BatchNorm1d."""
    module = build_model("lenet5_bn", {"dropout": 0.0}, (3, 32, 32), 10).train()
    with pytest.raises(ValueError, match="Expected more than 1 value per channel"):
        module(torch.randn(1, 3, 32, 32))


def two_clients() -> tuple[FlatModel, ArraySplit, list[torch.Tensor], torch.Tensor]:
    """An MLP 12-16-4 at its initial point and 40 random samples parted 23 / 17 (in the caller's dtype)."""
    torch.manual_seed(1)
    model = FlatModel(build_model("mlp", {"hidden": [16]}, (12,), 4))
    train = ArraySplit(torch.randn(40, 12), torch.randint(0, 4, (40,)))
    return model, train, [torch.arange(0, 23), torch.arange(23, 40)], model.flatten()


def test_a_single_client_below_one_chunk_and_many_calls_agree_with_one_call(monkeypatch: pytest.MonkeyPatch):
    """Rows split over several vmapped calls (CHUNK_SAMPLES) give what one call gives; one row runs."""
    import fedbench.engine.full_gradient as fg

    with default_dtype(torch.float64):
        model, train, parts, point = two_clients()
        whole = client_gradients(model, {}, train, parts, point, 5)
        monkeypatch.setattr(fg, "CHUNK_SAMPLES", 5)  # two rows per call
        torch.testing.assert_close(client_gradients(model, {}, train, parts, point, 5), whole, rtol=1e-12, atol=0)
        one = client_gradients(model, {}, train, [torch.arange(3)], point, 5)
        expected = reference(model.module, point, train, torch.arange(3), [3], False)
        torch.testing.assert_close(one[0], expected, rtol=1e-9, atol=1e-12)


def test_rows_a_call_are_the_samples_bound_or_what_the_device_holds_for_local_steps(monkeypatch: pytest.MonkeyPatch):
    """``rows`` (the executor's rows at once) raises the rows a vmapped call takes above CHUNK_SAMPLES' share, to
    the same gradients in fewer calls; below it, it changes nothing."""
    import fedbench.engine.full_gradient as fg

    assert fg.rows_per_call(50) == 81 and fg.rows_per_call(50, 16) == 81 and fg.rows_per_call(50, 1000) == 1000
    assert fg.rows_per_call(5000) == 2
    with default_dtype(torch.float64):
        model, train, parts, point = two_clients()
        monkeypatch.setattr(fg, "CHUNK_SAMPLES", 5)  # one row of 5 samples a call: two, at least
        calls = []
        step = fg.step_function
        monkeypatch.setattr(fg, "step_function", lambda layers: lambda *a: calls.append(1) or step(layers)(*a))
        few, few_calls = client_gradients(model, {}, train, parts, point, 5), len(calls)
        many = client_gradients(model, {}, train, parts, point, 5, rows=8)
        torch.testing.assert_close(many, few, rtol=1e-12, atol=0)
    assert (few_calls, len(calls) - few_calls) == (5, 2)  # 9 rows (5 + 4 chunks): two a call, then eight


def test_dropout_masks_follow_each_clients_key():
    """With dropout the gradient depends on the client's key only: the same key gives the same gradient
    whatever client shares the call, another key another gradient."""
    torch.manual_seed(2)
    model = FlatModel(build_model("mlp", {"hidden": [32], "dropout": 0.5}, (12,), 4))
    train = ArraySplit(torch.randn(30, 12), torch.randint(0, 4, (30,)))
    parts, point = [torch.arange(0, 15), torch.arange(15, 30)], model.flatten()
    both = client_gradients(model, {}, train, parts, point, 4, keys=torch.tensor([7, 9]))
    alone = client_gradients(model, {}, train, parts[1:], point, 4, keys=torch.tensor([9]))
    torch.testing.assert_close(both[1], alone[0])
    other = client_gradients(model, {}, train, parts[1:], point, 4, keys=torch.tensor([10]))
    assert not torch.allclose(other[0], alone[0])


@pytest.mark.parametrize(
    "name, params", [("tinynn", {"hidden": (8, 6)}), ("mlp", {"hidden": [16], "dropout": 0.3})], ids=["bn", "dropout"]
)
def test_several_runs_clients_at_once_are_each_runs_own(name: str, params: dict):
    """A population's runs (each its own point, BatchNorm buffers, clients and dropout keys) computed as one
    batched call give what each run's call gives (float64, 1e-12), a run of one two-sample client included."""
    from fedbench.engine.full_gradient import runs_client_gradients

    with default_dtype(torch.float64):
        torch.manual_seed(3)
        model = FlatModel(build_model(name, params, (12,), 4))
        train = ArraySplit(torch.randn(70, 12), torch.randint(0, 4, (70,)))
        runs = []
        clients = [[torch.arange(0, 17), torch.arange(17, 21)], [torch.arange(21, 70)], [torch.arange(5, 7)]]
        for r, parts in enumerate(clients):
            buffers = {k: v + 0.1 * r if v.is_floating_point() else v for k, v in model.buffers().items()}
            point = model.flatten() + 0.05 * r * torch.randn(model.dim)
            runs.append((buffers, parts, point, torch.arange(len(parts)) + 11 * r))
        together = runs_client_gradients(model, train, runs, 5)
        for (buffers, parts, point, keys), got in zip(runs, together):
            alone = client_gradients(model, buffers, train, parts, point, 5, keys=keys)
            torch.testing.assert_close(got, alone, rtol=1e-12, atol=1e-14)
