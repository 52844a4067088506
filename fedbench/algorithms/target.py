"""TARGET: federated class-continual learning via exemplar-free distillation (Zhang, Chen, Zhuang, Lyu,
ICCV 2023), a baseline of C-FLAG's Table 8.

**Server, at each task's end** (the authors' ``data_generation``; :mod:`~fedbench.algorithms.target_synthesis`): the
global model T is kept as the old model θ_old, and a generator trained by data-free distillation from
T (cross-entropy on sampled old-class labels, BatchNorm-statistics matching, an adversarial term
against a student S that learns T by KL on the synthetic data) fills a pool of ``pool_size`` synthetic
inputs of the old classes, sent to every client. Nothing is generated after the last task.

**Client, during a later task** (the authors' ``_local_finetune``): each local step
pairs the current minibatch (x, y) with ``synthetic_batch`` pool samples x̂ and minimises

    CE over the current task's classes (x, y) + λ_KD · Σ_{old heads h} mean_b −Σ_{c∈h} softmax(θ_old(x̂)_h/T)_c · log softmax(θ(x̂)_h/T)_c,

where the cross-entropy sees only the classes the sample may be predicted as (the engine's head) minus
the old classes (the authors: ``CE(logits[:, known:], y − known)``), and the distillation is LwF's
(:func:`~fedbench.algorithms.lwf.distillation`: one head over the old classes in class-incremental
mode, as the authors' ``_KD_loss``; one per old task in task-incremental mode), T = 2 and λ_KD = 25
(the authors' ``--kd``; no T² factor). The soft cross-entropy is KL(θ_old ‖ θ) plus the old model's entropy:
the same gradient, and the authors' form. During task 0 there are no old classes: plain masked
cross-entropy, i.e. Fine-FL's step exactly.

Choices where the paper and code leave room (C-9, C-12 in ``configs/cflag/README.md``; the generator's: C-11):

- Each step draws its ``synthetic_batch`` pool samples without replacement from the
  ``("target_synthetic", round, client, step)`` stream. The authors zip the real loader with a
  shuffled synthetic loader of batch ``nums / ⌈50000/(N·tasks·B)⌉`` (500 on CIFAR-100, 5 clients, 5
  tasks, B = 128: the default), which also cuts a local epoch to the synthetic loader's length; here
  local epochs keep their length.
- θ_old and the pool are client state (free per round); the pool's download, N·M·∏shape floats once
  per task, is logged as ``synthetic_bits_down`` at the task's end, outside the per-round counters.
  Per round TARGET costs FedAvg's bits (model down, Δ up).
- The old model runs on the synthetic batch in train mode with scratch BatchNorm buffers, as LwF-FL's
  and MOON's frozen models (the authors: eval mode); without BatchNorm (mlp) the two are the same.
  The model's own pass over x̂ uses the step's buffers, as the authors' ``model(syn_input)`` in train mode.
- A sample whose label is an old class (a replay draw under ``memory.replay: per_step``) keeps its own
  class in its cross-entropy (the authors' code has no such sample).
- Local steps go through ``local.optimizer`` (C-8: the same optimizer for every method; the authors use
  SGD with momentum 0.9 and weight decay 5e-4 at lr 0.01).
- The loss is an :class:`~fedbench.models.flat.Objective` with one row per client (θ_old, the old heads, the
  step's synthetic batch), so it trains on either client executor: client by client the heads' columns are
  gathered (LwF's :func:`~fedbench.algorithms.lwf.distillation`); on the batched executor's padded rows the
  heads are masks over the K classes (:func:`~fedbench.algorithms.lwf.masked_distillation`), the cross-entropy
  averages over each row's real samples, and the synthetic pass runs as a batch of the objective's own
  (:meth:`~fedbench.models.flat.FlatModel.own_batch`: BatchNorm over all its samples, moving the running
  statistics on as the sequential pass does). Its draws are keyed by the run's seed, so its runs train alone,
  not in populations (``population = False``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import torch
from pydantic import ConfigDict, Field

from fedbench.algorithms.base import ALGORITHMS, Algorithm, GradFn, Logs, RoundContext, TaskData
from fedbench.algorithms.lwf import LwFState, distillation, keep_old_model, masked_distillation
from fedbench.algorithms.state import extend, state
from fedbench.algorithms.target_synthesis import SynthesisParams, Synthesizer
from fedbench.compress import BITS_PER_FLOAT
from fedbench.models.flat import MASKED_LOGIT, Buffers, FlatModel, RowFields, cross_entropy, one_hot
from fedbench.seeding import torch_stream


class TargetParams(SynthesisParams):
    """Defaults: the authors' CIFAR-100 settings (``methods/target.py``, ``main.py``); the server's generator
    and student knobs are :class:`~fedbench.algorithms.target_synthesis.SynthesisParams`."""

    model_config = ConfigDict(extra="forbid")
    kd: float = Field(default=25.0, ge=0, description="weight λ_KD of the clients' distillation loss (--kd 25)")
    temperature: float = Field(default=2.0, gt=0, description="the clients' distillation temperature (2)")
    synthetic_batch: int = Field(default=500, ge=1, description="pool samples per local step (8000 / 16 iters)")


@state
class TargetState(LwFState):
    """LwF-FL's θ_old and old heads, plus the synthetic pool."""

    synthetic: torch.Tensor  # the pool [M, *input_shape] ([0] before the first task end)


class Held(NamedTuple):
    old_model: torch.Tensor  # [S, P]
    heads: torch.Tensor  # [S, K]
    synthetic: torch.Tensor  # [S, M, *input_shape]


@dataclass(frozen=True)
class TargetObjective(RowFields):
    """CE over the current task's classes + λ_KD·KD on a synthetic batch (module docstring), one row per client
    ``[S, …]``: θ_old [S, P], the old heads [S, K] (or [S, 0] before any task has ended) and the step's pool
    samples [S, b, …] (b may be 0); ``count`` bounds the head ids (the stream's task count)."""

    rows: ClassVar[tuple[str, ...]] = ("old_model", "heads", "synthetic")
    old_model: torch.Tensor
    heads: torch.Tensor
    synthetic: torch.Tensor
    kd: float
    temperature: float
    count: int = 1

    def __call__(
        self,
        model: FlatModel,
        point: torch.Tensor,
        buffers: Buffers,
        x: torch.Tensor,
        y: torch.Tensor,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        logits = model.logits(point, buffers, x)
        if self.heads.shape[-1] == 0:  # no task has ended: no old classes
            return cross_entropy(model.masked(logits, y), y, mask)
        allowed = (self.heads < 0).unsqueeze(0).expand_as(logits)
        if model.label_mask is not None:
            allowed = allowed & model.label_mask[y]
        allowed = allowed | one_hot(y, logits.shape[-1])
        loss = cross_entropy(logits.masked_fill(~allowed, MASKED_LOGIT), y, mask)
        if self.synthetic.shape[0] == 0 or self.kd == 0:
            return loss
        with model.own_batch(len(self.synthetic), moves_statistics=True):
            new = model.logits(point, buffers, self.synthetic)
        with model.own_batch(len(self.synthetic), moves_statistics=False):
            teacher = model.frozen_logits(self.old_model, buffers, self.synthetic)
        if mask is None:
            return loss + self.kd * distillation(new, teacher, self.heads, self.temperature)
        return loss + self.kd * masked_distillation(new, teacher, self.heads, self.temperature, self.count, None)


@ALGORITHMS.register(
    "target_fl",
    "TARGET: clients distill the previous task's global model on synthetic data from a server-side generator",
    TargetParams,
    label="TARGET",
    compression=True,
    local_optimizer=True,
    population=False,  # each step's synthetic draw is keyed by the run's seed
    own_loss=True,
)
class Target(Algorithm):
    """Local steps on CE + λ_KD·KD on synthetic data; FedAvg server; generator and pool at task ends."""

    params: TargetParams

    def init_state(self, x0: torch.Tensor) -> TargetState:
        heads = torch.zeros(0, dtype=torch.int64, device=x0.device)
        pool = x0.new_zeros(0)
        return extend(super().init_state(x0), TargetState, old_model=x0.clone(), heads=heads, synthetic=pool)

    def client_state(self, state: TargetState, clients: torch.Tensor) -> Held:
        """θ_old, the old heads and the pool, held by every client (free; module docstring)."""
        rows = len(clients)
        pool = state.synthetic
        return Held(state.old_model.expand(rows, -1), state.heads.expand(rows, -1), pool.expand(rows, *pool.shape))

    def objective(self, ctx: RoundContext, step: int) -> TargetObjective:
        """Step ``step``'s loss of each client row: θ_old, the old heads, and ``synthetic_batch`` pool samples drawn
        without replacement from the client's ``("target_synthetic", round, client, step)`` stream (none before a
        pool exists or while no class is old)."""
        held, p = ctx.held, self.params
        pool = held.synthetic  # [S, M, …]: every client holds the same pool
        batch = pool[:, :0]
        if pool.shape[1] and held.heads.shape[-1]:
            draws = [
                torch.randperm(
                    pool.shape[1], generator=torch_stream(self.ctx.seed, "target_synthetic", ctx.round, i, step)
                )
                for i in ctx.client_ids()
            ]
            index = torch.stack([d[: p.synthetic_batch] for d in draws])
            if pool.device.type == "cuda":  # pinned: the copy does not wait for the device's queue
                index = index.pin_memory()
            batch = pool[0][index.to(pool.device, non_blocking=True)]
        return TargetObjective(held.old_model, held.heads, batch, p.kd, p.temperature, max(self.ctx.tasks, 1))

    def local_step(self, ctx: RoundContext, x: torch.Tensor, carry: Any, grad: GradFn) -> tuple[torch.Tensor, Any]:
        return self.ctx.local_optimizer.step(x, grad(x, self.objective(ctx, grad.step)), carry, ctx.lr)

    def end_task(self, state: TargetState, data: TaskData) -> tuple[TargetState, Logs]:
        """θ_old ← x, the old heads now include the task's classes; a new pool unless it was the last task."""
        state = keep_old_model(state, data, "target_fl")
        assert data.stream is not None  # keep_old_model refused a TaskData without it
        x, heads = state.x, state.heads
        if data.task + 1 >= data.stream.num_tasks:
            return state, {}
        if data.model is None or not data.input_shape or data.input_range is None:
            raise ValueError(
                "target_fl's end_task needs the model, the input shape and range (TaskData.model, input_shape, input_range)"
            )
        classes = (heads >= 0).nonzero().squeeze(1)
        synth = Synthesizer(
            self.params,
            data.model,
            x,
            data.buffers,
            data.input_shape,
            data.input_range,
            classes,
            self.ctx.seed,
            data.task,
        )
        pool, logs = synth.run()
        bits = self.ctx.num_clients * pool.numel() * BITS_PER_FLOAT
        return dataclasses.replace(state, synthetic=pool), {"synthetic_bits_down": bits, **logs}
