"""local.optimizer: adam against torch.optim.Adam (an independent implementation), per client and
reset every round; sgd is the plain step bit for bit."""

import torch

from fedbench.optim.client import LocalAdam, LocalOptimizer, build_local_optimizer
from tests.optim import named


def quadratic_grad(x: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a * (x - b)  # ∇ ½ Σ a (x − b)²


def test_adam_matches_torch_optim_adam_per_client_and_resets_each_round():
    torch.manual_seed(0)
    a, b = torch.rand(2, 3) + 0.5, torch.randn(2, 3)
    opt = LocalAdam(0.8, 0.95, 1e-6)
    x = torch.randn(2, 3, dtype=torch.float64)
    ref = [x[i].clone().requires_grad_(True) for i in range(2)]
    for _ in range(2):  # two rounds: fresh moments each round
        state = opt.init(x)  # the engine starts every round's carry afresh
        torch_opts = [torch.optim.Adam([r], lr=0.05, betas=(0.8, 0.95), eps=1e-6) for r in ref]
        for _ in range(6):
            x, state = opt.step(x, quadratic_grad(x, a, b), state, 0.05)
            for i, (r, o) in enumerate(zip(ref, torch_opts)):
                o.zero_grad()
                r.grad = quadratic_grad(r.detach(), a[i], b[i])
                o.step()
        torch.testing.assert_close(x, torch.stack([r.detach() for r in ref]), rtol=1e-12, atol=1e-12)
        assert named(state)["k"].tolist() == [6.0, 6.0]


def test_sgd_is_the_plain_step_and_the_builder_checks_names():
    x, d = torch.randn(2, 4), torch.randn(2, 4)
    sgd = LocalOptimizer()
    stepped, state = sgd.step(x, d, sgd.init(x), 0.1)
    assert torch.equal(stepped, x - 0.1 * d) and named(state) == {}
    adam = build_local_optimizer("adam", (0.5, 0.6), 1e-3)
    assert (adam.beta1, adam.beta2, adam.eps) == (0.5, 0.6, 1e-3) and build_local_optimizer("sgd").name == "sgd"
