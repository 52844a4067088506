"""TARGET's server-side data generation (Zhang et al., ICCV 2023; the authors' ``GlobalSynthesizer``,
``zj-jayzhang/Federated-Class-Continual-Learning`` ``methods/target.py``).

When a task ends, the server holds the global model T (the teacher, eval mode, its global BatchNorm
statistics) and builds a pool of synthetic inputs for the old classes C_old (the classes of every task
so far) in R = ``synthesis_rounds`` rounds. Round r:

1. A fast copy G' of the generator G and fresh noise z ~ N(0, I) ``[b, nz]`` with labels ŷ drawn
   uniformly from C_old take ``generator_steps`` Adam steps (G' at ``lr_generator``, z at ``lr_noise``,
   betas 0.5 / 0.999) on

       L_gen = λ_ce · CE(T(x̂)_old, ŷ) + λ_bn · L_bn + λ_adv · L_adv,      x̂ = G'(z),
       L_bn  = Σ_l ‖σ̂²_l − σ²_l(x̂)‖₂ + ‖μ̂_l − μ_l(x̂)‖₂                     (DeepInversion; T's BatchNorm layers l)
       L_adv = −mean_b 1{argmax S(x̂)_b = argmax T(x̂)_b} · KL(T(x̂)_b ‖ S(x̂)_b)  (from round ``warmup`` on)

   with logits restricted to C_old (the teacher of the authors' code has only those outputs), μ_l, σ²_l
   the batch mean and biased variance of layer l's input over every axis but the channel's and
   μ̂_l, σ̂²_l its running statistics. With ``bn_momentum`` m > 0, from the second round on the batch
   statistics are first mixed with their average over the earlier rounds, (1 − m)·μ_l + m·μ̄_l (same for
   σ²), and μ̄_l ← m·μ̄_l + (1 − m)·μ_l at the end of each round. A model without BatchNorm has no
   L_bn (the term is 0: there are no statistics to match). The batch x̂ of the lowest L_gen among the
   steps (evaluated before each step) joins the pool. G itself moves once per round by first-order
   MAML: one Adam step (lr ``lr_generator``·steps, betas 0.5 / 0.999) along the sum of G''s gradients
   over the round's steps.
2. From round ``warmup`` + 1 on (0-based r ≥ ``warmup``), the student S (the model's architecture,
   freshly initialised) takes ``student_steps`` SGD steps (momentum, weight decay, learning rate on a
   cosine schedule of ``student_cosine_epochs`` rounds down to ``student_lr_min``) on
   τ²·KL(softmax(T/τ) ‖ softmax(S/τ)) over batches of ``student_batch`` pool samples, logits on C_old,
   S in train mode (its own BatchNorm statistics, starting from T's).

The pool keeps the first ``pool_size`` samples in generation order. As in the authors' code, L_adv
starts in round ``warmup`` (1-based) and the student one round later; with the CIFAR-100 defaults
(10 rounds, warmup 20) neither ever runs, and the pool is 10 batches of 256.

Randomness: the generator's and the student's initialisation come from the ``("target_generator",
task)`` and ``("target_student_init", task)`` streams, each round's z and ŷ from ``("target_noise",
task, r)`` and each student batch from ``("target_student", task, r, k)``; everything runs in the
teacher's dtype on its device (draws are made on the CPU and moved). No augmentation (the authors
crop and flip 32×32 images). The authors' generator ends in a Sigmoid (pixels in [0, 1]) followed by
the dataset's normalisation; here it ends in lo + (hi − lo)·sigmoid(·) with [lo, hi] the range of the
training inputs as the engine holds them (normalised; ``TaskData.input_range``, the domain's public
bounds as the authors' pixel range and normalisation constants are), so that the synthetic inputs stay
in the data's domain: an unbounded output lets L_adv grow without limit (measured on Split-digits:
L_gen reached −10²¹³).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Literal

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field
from torch import nn

from fedbench.models.flat import FlatModel
from fedbench.seeding import torch_stream

NORMS = (nn.modules.batchnorm._BatchNorm, nn.GroupNorm, nn.LayerNorm)


class SynthesisParams(BaseModel):
    """The server's generator, pool and student knobs (defaults: the authors' CIFAR-100 settings)."""

    model_config = ConfigDict(extra="forbid")
    pool_size: int = Field(default=8000, ge=1, description="synthetic samples kept per task, at most (--nums)")
    synthesis_rounds: int = Field(default=10, ge=1, description="generator rounds per task end (syn_round)")
    generator_steps: int = Field(default=10, ge=1, description="Adam steps of the fast generator per round (g_steps)")
    synthesis_batch: int = Field(default=256, ge=2, description="synthetic samples per round (synthesis_batch_size)")
    warmup: int = Field(default=20, ge=0, description="rounds before the adversarial term and the student (warmup)")
    student_steps: int = Field(default=400, ge=0, description="student SGD steps per round after warmup (kd_steps)")
    student_batch: int = Field(default=256, ge=1, description="pool samples per student step (sample_batch_size)")
    noise_dim: int = Field(default=256, ge=1, description="generator noise dimension nz")
    generator_width: int = Field(default=64, ge=1, description="generator width (ngf)")
    generator: Literal["auto", "conv", "mlp"] = Field(
        default="auto", description="generator architecture: the authors' conv net, an MLP, or conv where it fits"
    )
    lr_generator: float = Field(default=0.002, gt=0, description="Adam lr of the fast generator (lr_g)")
    lr_noise: float = Field(default=0.01, gt=0, description="Adam lr of the noise z (lr_z)")
    lam_ce: float = Field(default=0.5, ge=0, description="weight of the teacher's cross-entropy in L_gen (oh)")
    lam_bn: float = Field(default=10.0, ge=0, description="weight of BatchNorm-statistics matching in L_gen (bn)")
    lam_adv: float = Field(default=1.0, ge=0, description="weight of the adversarial term in L_gen (adv)")
    bn_momentum: float = Field(default=0.9, ge=0, lt=1, description="momentum of the matched statistics (bn_mmt)")
    student_lr: float = Field(default=0.2, gt=0, description="student SGD learning rate")
    student_lr_min: float = Field(default=2e-4, ge=0, description="cosine schedule's floor (eta_min)")
    student_cosine_epochs: int = Field(default=200, ge=1, description="cosine schedule's length in rounds (T_max)")
    student_momentum: float = Field(default=0.9, ge=0, lt=1, description="student SGD momentum")
    student_weight_decay: float = Field(default=1e-4, ge=0, description="student SGD weight decay")
    student_temperature: float = Field(default=20.0, gt=0, description="temperature τ of the student's KL (T)")


class Bounded(nn.Module):
    """lo + (hi − lo)·sigmoid(x): the generator's last layer (module docstring)."""

    def __init__(self, lo: float, hi: float):
        super().__init__()
        self.lo, self.hi = lo, hi

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lo + (self.hi - self.lo) * torch.sigmoid(x)


class ConvGenerator(nn.Module):
    """The authors' generator for ``(C, H, W)`` inputs (H, W divisible by 4): Linear(nz → 2w·H/4·W/4) →
    BN → up×2 → conv3 (2w) → BN → LeakyReLU(0.2) → up×2 → conv3 (w) → BN → LeakyReLU(0.2) → conv3 (C) →
    :class:`Bounded`."""

    def __init__(self, noise_dim: int, width: int, shape: tuple[int, ...], bounds: tuple[float, float]):
        super().__init__()
        c, h, w = shape
        self.start = (h // 4, w // 4)
        self.l1 = nn.Linear(noise_dim, 2 * width * self.start[0] * self.start[1])
        self.conv_blocks = nn.Sequential(
            nn.BatchNorm2d(2 * width),
            nn.Upsample(scale_factor=2),
            nn.Conv2d(2 * width, 2 * width, 3, padding=1, bias=False),
            nn.BatchNorm2d(2 * width),
            nn.LeakyReLU(0.2),
            nn.Upsample(scale_factor=2),
            nn.Conv2d(2 * width, width, 3, padding=1, bias=False),
            nn.BatchNorm2d(width),
            nn.LeakyReLU(0.2),
            nn.Conv2d(width, c, 3, padding=1),
            Bounded(*bounds),
        )

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.conv_blocks(self.l1(z).view(len(z), -1, *self.start))


def mlp_generator(noise_dim: int, width: int, shape: tuple[int, ...], bounds: tuple[float, float]) -> nn.Module:
    """Inputs of any shape: Linear(nz → w) → BN → LeakyReLU(0.2) → Linear(w → w) → BN → LeakyReLU(0.2)
    → Linear(w → ∏shape) → :class:`Bounded`, reshaped to ``shape`` (the conv generator's layers, fully connected)."""
    return nn.Sequential(
        nn.Linear(noise_dim, width),
        nn.BatchNorm1d(width),
        nn.LeakyReLU(0.2),
        nn.Linear(width, width),
        nn.BatchNorm1d(width),
        nn.LeakyReLU(0.2),
        nn.Linear(width, math.prod(shape)),
        Bounded(*bounds),
        nn.Unflatten(1, shape),
    )


def build_generator(params: SynthesisParams, shape: tuple[int, ...], bounds: tuple[float, float]) -> nn.Module:
    """``generator: conv`` (images whose sides divide by 4), ``mlp``, or ``auto`` (conv where it fits)."""
    fits = len(shape) == 3 and shape[1] % 4 == 0 and shape[2] % 4 == 0
    kind = ("conv" if fits else "mlp") if params.generator == "auto" else params.generator
    if kind == "conv":
        if not fits:
            raise ValueError(
                f"target_fl: generator 'conv' needs (C, H, W) inputs with H, W divisible by 4, got {shape}"
            )
        return ConvGenerator(params.noise_dim, params.generator_width, shape, bounds)
    return mlp_generator(params.noise_dim, params.generator_width, shape, bounds)


@torch.no_grad()
def initialise(module: nn.Module, gen: torch.Generator) -> nn.Module:
    """PyTorch's default initialisation drawn from ``gen``: weights and biases of layers with a weight
    matrix U(±1/√fan_in), normalisation layers scale 1 and shift 0 (``module`` on the CPU)."""
    for layer in module.modules():
        weight, bias = getattr(layer, "weight", None), getattr(layer, "bias", None)
        if isinstance(layer, NORMS):
            if weight is not None:
                weight.fill_(1.0)
            if bias is not None:
                bias.zero_()
        elif isinstance(weight, torch.Tensor) and weight.dim() >= 2:
            bound = 1.0 / math.sqrt(weight[0].numel())
            weight.uniform_(-bound, bound, generator=gen)
            if bias is not None:
                bias.uniform_(-bound, bound, generator=gen)
    return module


class BatchNormMatch:
    """L_bn (module docstring) of the forward passes made inside :meth:`recording`, over the BatchNorm
    layers of ``module`` that keep running statistics (forward hooks, removed by :meth:`close`)."""

    def __init__(self, module: nn.Module, momentum: float):
        layers = [m for m in module.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
        self.index = {id(m): i for i, m in enumerate(layers) if m.track_running_stats}
        self.momentum = momentum
        self.average: list[tuple[torch.Tensor, torch.Tensor]] | None = None  # μ̄_l, σ̄²_l over earlier rounds
        self.last: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self.terms: list[torch.Tensor] = []
        self.active = False
        self.handles = [m.register_forward_hook(self.hook) for m in layers if id(m) in self.index]

    def hook(self, module: nn.Module, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
        if not self.active:
            return
        h = inputs[0]
        dims = [0, *range(2, h.dim())]
        mean, var = h.mean(dims), h.var(dims, correction=0)
        i = self.index[id(module)]
        self.last[i] = (mean.detach(), var.detach())
        if self.average is not None and self.momentum > 0:
            mean = (1 - self.momentum) * mean + self.momentum * self.average[i][0]
            var = (1 - self.momentum) * var + self.momentum * self.average[i][1]
        running_mean, running_var = module.running_mean, module.running_var
        assert isinstance(running_mean, torch.Tensor) and isinstance(running_var, torch.Tensor)
        self.terms.append(torch.linalg.vector_norm(running_var - var) + torch.linalg.vector_norm(running_mean - mean))

    @contextmanager
    def recording(self) -> Iterator[None]:
        self.terms, self.active = [], True
        try:
            yield
        finally:
            self.active = False

    def loss(self, like: torch.Tensor) -> torch.Tensor:
        """Σ_l of the last recorded pass (0 without BatchNorm layers)."""
        return torch.stack(self.terms).sum() if self.terms else like.new_zeros(())

    def end_round(self) -> None:
        """μ̄_l ← m·μ̄_l + (1 − m)·μ_l of the round's last pass (the first round's stats as they are)."""
        if self.momentum <= 0 or not self.last:
            return
        last = [self.last[i] for i in sorted(self.last)]
        if self.average is None:
            self.average = last
        else:
            m = self.momentum
            self.average = [(m * a + (1 - m) * b, m * c + (1 - m) * d) for (a, c), (b, d) in zip(self.average, last)]

    def close(self) -> None:
        for handle in self.handles:
            handle.remove()


def kl_rows(teacher: torch.Tensor, student: torch.Tensor) -> torch.Tensor:
    """KL(softmax(teacher) ‖ softmax(student)) per row ``[b]``."""
    log_t = F.log_softmax(teacher, dim=1)
    return (log_t.exp() * (log_t - F.log_softmax(student, dim=1))).sum(1)


def student_init(model: FlatModel, seed: int, task: int, like: torch.Tensor) -> torch.Tensor:
    """A fresh ``[P]`` point of the model's architecture (:func:`initialise`, stream ``("target_student_init", task)``)."""
    fresh = initialise(copy.deepcopy(model.module).cpu(), torch_stream(seed, "target_student_init", task))
    return torch.cat([p.detach().reshape(-1) for p in fresh.parameters()]).to(like.device, like.dtype)


class Synthesizer:
    """One task end's data generation (module docstring): ``run()`` → (pool ``[M, *shape]``, logs)."""

    def __init__(
        self,
        params: SynthesisParams,
        model: FlatModel,
        teacher: torch.Tensor,
        buffers: Mapping[str, torch.Tensor],
        shape: tuple[int, ...],
        bounds: tuple[float, float],
        classes: torch.Tensor,
        seed: int,
        task: int,
    ):
        self.p, self.model, self.teacher, self.shape = params, model, teacher.detach(), tuple(shape)
        self.buffers = dict(buffers)
        self.classes, self.seed, self.task = classes.to(teacher.device), seed, task
        dtype, device = teacher.dtype, teacher.device
        self.generator = initialise(
            build_generator(params, self.shape, bounds), torch_stream(seed, "target_generator", task)
        )
        self.generator.to(device, dtype).train()
        self.meta = torch.optim.Adam(
            self.generator.parameters(), lr=params.lr_generator * params.generator_steps, betas=(0.5, 0.999)
        )
        self.student = student_init(model, seed, task, teacher)
        self.student_buffers = {k: v.clone() for k, v in self.buffers.items()}
        self.velocity = torch.zeros_like(self.student)
        self.cosine_steps = 0
        self.parts: list[torch.Tensor] = []

    def run(self) -> tuple[torch.Tensor, dict[str, Any]]:
        was_training = self.model.module.training
        self.bn = BatchNormMatch(self.model.module, self.p.bn_momentum)
        logs: dict[str, Any] = {}
        try:
            for r in range(self.p.synthesis_rounds):
                logs["target_generator_loss"] = self.synthesis_round(r)
                if r >= self.p.warmup and self.p.student_steps > 0:
                    logs["target_student_loss"] = self.student_round(r)
        finally:
            self.bn.close()
            self.model.module.train(was_training)
        pool = self.pool()
        return pool, {"target_pool": len(pool), **logs}

    def pool(self) -> torch.Tensor:
        if not self.parts:
            return self.teacher.new_zeros((0, *self.shape))
        return torch.cat(self.parts)[: self.p.pool_size]

    def teacher_logits(self, x: torch.Tensor) -> torch.Tensor:
        self.model.module.eval()
        with self.bn.recording():
            return self.model.logits(self.teacher, self.buffers, x)[:, self.classes]

    def synthesis_round(self, r: int) -> float:
        """Step 1 of the module docstring; the best batch joins the pool; returns its L_gen."""
        p, dtype, device = self.p, self.teacher.dtype, self.teacher.device
        draw = torch_stream(self.seed, "target_noise", self.task, r)
        z = torch.randn(p.synthesis_batch, p.noise_dim, generator=draw, dtype=dtype).to(device).requires_grad_(True)
        labels = torch.randint(len(self.classes), (p.synthesis_batch,), generator=draw).to(device)  # ŷ's column
        fast = copy.deepcopy(self.generator)
        groups: list[dict[str, Any]] = [{"params": list(fast.parameters())}, {"params": [z], "lr": p.lr_noise}]
        inner = torch.optim.Adam(groups, lr=p.lr_generator, betas=(0.5, 0.999))
        meta_grads = [torch.zeros_like(q) for q in self.generator.parameters()]
        adversarial = r + 1 >= p.warmup and p.lam_adv > 0
        best, best_loss = None, math.inf
        for _ in range(p.generator_steps):
            x = fast(z)
            loss = self.generator_loss(x, labels, adversarial)
            if best is None or loss.item() < best_loss:
                best, best_loss = x.detach().clone(), loss.item()
            inner.zero_grad()
            loss.backward()
            for acc, q in zip(meta_grads, fast.parameters()):
                if q.grad is not None:
                    acc.add_(q.grad)
            inner.step()
        self.bn.end_round()
        for q, g in zip(self.generator.parameters(), meta_grads):
            q.grad = g
        self.meta.step()
        assert best is not None
        self.parts.append(best)
        return best_loss

    def generator_loss(self, x: torch.Tensor, labels: torch.Tensor, adversarial: bool) -> torch.Tensor:
        """L_gen of the module docstring at the batch ``x``; ``labels`` are positions in the old classes."""
        p = self.p
        t_out = self.teacher_logits(x)
        loss = p.lam_ce * F.cross_entropy(t_out, labels) + p.lam_bn * self.bn.loss(t_out)
        if adversarial:
            s_out = self.model.logits(self.student, self.student_buffers, x)[:, self.classes]  # eval mode
            agree = (s_out.argmax(1) == t_out.argmax(1)).to(x.dtype)
            loss = loss - p.lam_adv * (kl_rows(t_out, s_out) * agree).mean()
        return loss

    def student_round(self, r: int) -> float:
        """Step 2 of the module docstring: ``student_steps`` momentum-SGD steps; returns the last loss."""
        p, pool = self.p, self.pool()
        lr = (
            p.student_lr_min
            + (p.student_lr - p.student_lr_min)
            * (1 + math.cos(math.pi * self.cosine_steps / p.student_cosine_epochs))
            / 2
        )
        tau, loss = p.student_temperature, torch.zeros(())
        for k in range(p.student_steps):
            draw = torch_stream(self.seed, "target_student", self.task, r, k)
            x = pool[torch.randperm(len(pool), generator=draw)[: p.student_batch].to(pool.device)]
            self.model.module.eval()
            with torch.no_grad():
                t_out = self.model.logits(self.teacher, self.buffers, x)[:, self.classes]
            self.model.module.train()
            point = self.student.detach().requires_grad_(True)
            s_out = self.model.logits(point, self.student_buffers, x)[:, self.classes]
            loss = tau * tau * kl_rows(t_out / tau, s_out / tau).mean()
            (grad,) = torch.autograd.grad(loss, point)
            self.velocity = p.student_momentum * self.velocity + grad + p.student_weight_decay * self.student
            self.student = self.student - lr * self.velocity
        self.cosine_steps += 1
        return float(loss.detach())
