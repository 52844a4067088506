"""Local work of all S sampled clients as one batched computation (the fast path).

Client parameters are stacked ``[S, P]``; every local step draws each active client's minibatch
by indexing the device-resident data, pads the batches to a common size with a mask, and takes
all S gradients in one ``torch.func.vmap``-ed forward/backward. Clients that have finished
their K_i steps are frozen by masking, so heterogeneous step counts cost nothing extra but
idle rows. The algorithm's hooks already work on ``[S, P]`` rows, so they run unchanged.

Batches, their order and the clipping/weight-decay convention are those of the sequential
path (:mod:`fedbench.engine.local`), which stays the reference: a test runs every registered
algorithm both ways and requires the same numbers to float tolerance. Models with buffers
(BatchNorm) need per-client running statistics and take the sequential path.
"""

from __future__ import annotations

import torch
from torch.func import grad_and_value, vmap

from fedbench.algorithms.base import Algorithm, RoundContext
from fedbench.data.base import ArraySplit
from fedbench.engine.batches import ClientBatcher
from fedbench.models.flat import FlatModel
from fedbench.engine.local import LocalConfig, LocalResult


class BatchedOracle:
    """Minibatch gradients of all rows at once: row i on client i's padded, masked batch; with a
    ``memory_mask`` (``replay_apart``) the masked samples are the step's replay draw, left out of
    ``grad`` and differentiated by ``memory`` (as the sequential oracle)."""

    def __init__(
        self, model: FlatModel, x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor, cfg: LocalConfig,
        memory_mask: torch.Tensor | None = None,
    ):
        self.model, self.x, self.y, self.cfg = model, x, y, cfg
        self.mask = mask if memory_mask is None else mask - memory_mask
        self.memory_mask = memory_mask
        self.first_loss: torch.Tensor | None = None
        self._grad = vmap(grad_and_value(self._loss), randomness="different")  # own dropout masks per client

    def _loss(self, flat: torch.Tensor, x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        logits = self.model.masked(self.model.logits(flat, {}, x), y)
        per_sample = torch.nn.functional.cross_entropy(logits, y, reduction="none")
        return (per_sample * mask).sum() / mask.sum().clamp(min=1)

    def __call__(self, points: torch.Tensor) -> torch.Tensor:
        self.model.module.train()
        grads, losses = self._grad(points, self.x, self.y, self.mask)
        if self.first_loss is None:
            self.first_loss = losses.detach()
        return self.cfg.finish(grads, points)

    def memory(self, points: torch.Tensor) -> torch.Tensor:
        """∇f_I(z) of every row on its replay draw; exact zero rows for rows without one."""
        if self.memory_mask is None:
            return torch.zeros_like(points)
        self.model.module.train()
        grads, _ = self._grad(points, self.x, self.y, self.memory_mask)
        drawn = (self.memory_mask.sum(1) > 0).unsqueeze(1)
        return torch.where(drawn, self.cfg.finish(grads, points), torch.zeros_like(points))


def padded_batches(
    train: ArraySplit, batcher: ClientBatcher, clients: list[int], active: list[bool], cfg: LocalConfig
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Each active client's next minibatch, zero-padded to a common size: x [S, B, …], y [S, B],
    mask [S, B], and under ``cfg.replay_apart`` the mask [S, B] of the replay-draw samples (else None)."""
    batches = [cfg.batch_parts(train, batcher, c) if on else None for c, on in zip(clients, active)]
    size = max(len(b[1]) for b in batches if b is not None)
    x = train.x.new_zeros((len(clients), size, *train.x.shape[1:]))
    y = train.y.new_zeros((len(clients), size))
    mask = train.x.new_zeros((len(clients), size))
    memory = train.x.new_zeros((len(clients), size)) if cfg.replay_apart else None
    for row, b in enumerate(batches):
        if b is not None:
            n = len(b[1])
            x[row, :n], y[row, :n], mask[row, :n] = b[0], b[1], 1.0
            if memory is not None:
                memory[row, b[2] : n] = 1.0
    return x, y, mask, memory


def run_clients_batched(
    algo: Algorithm,
    ctx: RoundContext,
    steps: list[int],
    model: FlatModel,
    train: ArraySplit,
    batcher: ClientBatcher,
    cfg: LocalConfig,
) -> LocalResult:
    """Train the round's S clients together from ``ctx.start``; client i stops after ``steps[i]`` steps."""
    clients = ctx.clients.tolist()
    x = ctx.start
    loss_sum = x.new_zeros(len(clients))
    k_of = torch.tensor(steps, device=x.device)
    for k in range(max(steps)):
        active = [k < s for s in steps]
        xb, yb, mask, memory = padded_batches(train, batcher, clients, active, cfg)
        oracle = BatchedOracle(model, xb, yb, mask, cfg, memory)
        moved = algo.local_step(ctx, x, oracle)
        on = (k_of > k).unsqueeze(1)
        x = torch.where(on, moved, x)
        loss_sum += torch.where(on.squeeze(1), oracle.first_loss, 0.0)
    return LocalResult(algo.upload(ctx, x), x, [{} for _ in clients], loss_sum / k_of.to(loss_sum.dtype))
