"""BatchNorm and dropout of one client row inside the batched executor's vmapped step.

Inside ``torch.func.vmap`` every row is one client training on its padded minibatch ``[B, …]``
with a sample mask ``[B]``. Two layers need that row's context, so :class:`RowLayers` swaps their
``forward`` for the duration of one functional forward pass:

- BatchNorm (``nn.modules.batchnorm._BatchNorm``, train mode): batch statistics over the row's
  real samples only (mask 1), which are exactly the samples the sequential path normalises
  over; the running statistics move as ``torch.nn.BatchNorm`` moves them (momentum, or the
  cumulative average when ``momentum=None``; unbiased variance with n = samples × spatial
  size) and come back as the row's new buffers instead of being written in place, so the caller
  keeps them per client ``[S, …]``. Padded samples leave the layer as zeros, so rows that have
  finished their K_i steps (all padding) stay finite. The statistics are the same sums in
  another order than ATen's kernel: equal to float tolerance, not bit for bit.
- Dropout (``nn.Dropout``, train mode): the keep mask of element e is a counter-based hash of
  (the row's key, the layer, e) — no draw from torch's global generator — so a client's masks
  depend on its own key only, never on which clients share its chunk (chunked rounds equal
  unchunked ones).

In eval mode both layers run their own ``forward``. An objective's forward pass on a batch of its own (e.g.
synthetic samples: :meth:`~fedbench.models.flat.FlatModel.own_batch`) runs with a mask of ones, a dropout key hashed
apart, and BatchNorm running statistics moved on from the minibatch pass's, as the sequential path's second
train-mode pass moves them.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from functools import partial

import torch
from torch import nn

from fedbench.models.flat import Buffers, FlatModel

MASK32 = 0xFFFFFFFF
OWN_BATCH_SALT = 0x5BD1E995  # hashed into a row's dropout key for a pass on an objective's own batch


def _mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    """x·c mod 2³² for x in [0, 2³²), in int64 without overflow (16-bit halves)."""
    low, high = x & 0xFFFF, x >> 16
    return (low * c + (((high * c) & 0xFFFF) << 16)) & MASK32


def mix32(x: torch.Tensor) -> torch.Tensor:
    """A bijective 32-bit integer hash (lowbias32, C. Wellons) on int64 tensors holding 32-bit values."""
    x = x & MASK32
    x = _mul32(x ^ (x >> 16), 0x7FEB352D)
    x = _mul32(x ^ (x >> 15), 0x846CA68B)
    return x ^ (x >> 16)


def hash_uniform(key: torch.Tensor, layer: int, shape: torch.Size) -> torch.Tensor:
    """Uniform [0, 1) float32 values of ``shape``, a function of (key, layer, element index) only."""
    count = torch.arange(math.prod(shape), dtype=torch.int64, device=key.device).view(shape)
    salt = mix32(key ^ mix32(torch.full_like(key, layer + 1)))
    bits = mix32(mix32(count ^ salt) + salt)
    return (bits >> 8).to(torch.float32) * 2.0**-24


class _Row:
    """One row's context during a forward pass: its mask, dropout key and updated buffers; ``moves``: whether a
    pass moves the running statistics that an earlier pass already set (an objective's own batch, below), and
    ``frozen``: whether it moves none (a frozen model's pass on it)."""

    def __init__(
        self,
        mask: torch.Tensor,
        key: torch.Tensor,
        updated: Buffers | None = None,
        moves: bool = False,
        frozen: bool = False,
    ):
        self.mask, self.key = mask, key
        self.updated: Buffers = {} if updated is None else updated
        self.moves, self.frozen = moves, frozen


def _masked_batch_norm(module: nn.modules.batchnorm._BatchNorm, name: str, row: _Row, x: torch.Tensor) -> torch.Tensor:
    """``module``'s train-mode forward over the row's real samples (see the module docstring)."""
    if not module.training:
        return type(module).forward(module, x)
    xf = x.to(torch.promote_types(x.dtype, torch.float32))  # bf16 activations: statistics in float32
    m = row.mask.to(xf.dtype).view(-1, *[1] * (x.dim() - 1))
    dims = [0, *range(2, x.dim())]
    n = row.mask.sum() * math.prod(x.shape[2:])
    mean = (xf * m).sum(dims) / n.clamp(min=1)
    shape = [1, -1, *[1] * (x.dim() - 2)]
    centered = xf - mean.view(shape)
    var = (centered * centered * m).sum(dims) / n.clamp(min=1)
    out = centered * torch.rsqrt(var + module.eps).view(shape)
    if module.affine:
        out = out * module.weight.view(shape) + module.bias.view(shape)
    if module.track_running_stats and module.running_mean is not None:
        _update_running(module, name, row, mean.detach(), var.detach() * n / (n - 1).clamp(min=1))
    return (out * m).to(x.dtype)


def _update_running(
    module: nn.modules.batchnorm._BatchNorm, name: str, row: _Row, mean: torch.Tensor, var: torch.Tensor
) -> None:
    """The running statistics torch's BatchNorm would hold after this batch, into ``row.updated``; the first
    pass through the layer sets them (an objective's later frozen passes, on scratch buffers, leave them), and
    a pass on an objective's own batch that moves them (``row.moves``) moves them on from there."""
    prefix = f"{name}." if name else ""
    if row.frozen or (prefix + "running_mean" in row.updated and not row.moves):
        return
    mean_0 = row.updated.get(prefix + "running_mean", module.running_mean)
    var_0 = row.updated.get(prefix + "running_var", module.running_var)
    tracked = row.updated.get(prefix + "num_batches_tracked", module.num_batches_tracked) + 1
    factor = 1.0 / tracked.to(mean.dtype) if module.momentum is None else module.momentum
    row.updated[prefix + "running_mean"] = (1 - factor) * mean_0 + factor * mean
    row.updated[prefix + "running_var"] = (1 - factor) * var_0 + factor * var
    row.updated[prefix + "num_batches_tracked"] = tracked


def _keyed_dropout(module: nn.Dropout, layer: int, row: _Row, x: torch.Tensor) -> torch.Tensor:
    """Inverted dropout with the row's hashed keep mask."""
    if not module.training or module.p == 0:
        return x
    keep = hash_uniform(row.key, layer, x.shape) >= module.p
    return x * keep.to(x.dtype) / (1 - module.p)


class RowLayers:
    """The model's BatchNorm and dropout layers in their per-row versions while :meth:`logits` runs;
    ``steps`` holds the model's batched step functions (:func:`fedbench.engine.compiled.step_function`).

    The per-row ``forward`` of each such layer is installed once, for the model's lifetime, and
    reads the current row from :attr:`row`; outside :meth:`logits` (``row`` None: evaluation, the
    sequential executor) it is the layer's own ``forward``. Installing them once, rather than
    around every forward pass, leaves ``torch.compile`` a step without module surgery to trace."""

    def __init__(self, model: FlatModel):
        self.model = model
        self.row: _Row | None = None
        modules = list(model.module.named_modules())
        self.norms = [(n, m) for n, m in modules if isinstance(m, nn.modules.batchnorm._BatchNorm)]
        self.drops = [m for _, m in modules if type(m) is nn.Dropout]
        self.norm_names = {n for n, _ in self.norms}
        self.steps: dict[str, Callable] = {}
        if any("forward" in vars(m) for m in [*(m for _, m in self.norms), *self.drops]):
            raise RuntimeError("the model's layers already have per-row forwards: take its RowLayers.of(model)")
        for name, m in self.norms:
            m.forward = partial(self._norm, m, name)
        for layer, m in enumerate(self.drops):
            m.forward = partial(self._dropout, m, layer)
        model.batch_scope = self.own_batch

    @classmethod
    def of(cls, model: FlatModel) -> RowLayers:
        """The model's one :class:`RowLayers`, kept in its ``engine_cache``: its step functions, and a
        compiled one's traces, last across the run's rounds."""
        if "row_layers" not in model.engine_cache:
            model.engine_cache["row_layers"] = cls(model)
        layers = model.engine_cache["row_layers"]
        assert isinstance(layers, RowLayers)
        return layers

    @property
    def has_dropout(self) -> bool:
        return bool(self.drops)

    def _norm(self, module: nn.modules.batchnorm._BatchNorm, name: str, x: torch.Tensor) -> torch.Tensor:
        if self.row is None:
            return type(module).forward(module, x)
        return _masked_batch_norm(module, name, self.row, x)

    def _dropout(self, module: nn.Dropout, layer: int, x: torch.Tensor) -> torch.Tensor:
        if self.row is None:
            return type(module).forward(module, x)
        return _keyed_dropout(module, layer, self.row, x)

    @contextlib.contextmanager
    def own_batch(self, size: int, moves_statistics: bool) -> Iterator[None]:
        """:meth:`~fedbench.models.flat.FlatModel.own_batch` on the current row: a mask of ``size`` ones, the row's
        dropout key hashed apart, and its BatchNorm buffers moved on (``moves_statistics``) or left (outside a
        row: nothing)."""
        row = self.row
        if row is None:
            yield
            return
        key = mix32(row.key ^ OWN_BATCH_SALT)
        self.row = _Row(row.mask.new_ones(size), key, row.updated, moves_statistics, not moves_statistics)
        try:
            yield
        finally:
            self.row = row

    def logits(
        self, flat: torch.Tensor, buffers: Buffers, x: torch.Tensor, mask: torch.Tensor, key: torch.Tensor
    ) -> tuple[torch.Tensor, Buffers]:
        """The row's output and its BatchNorm buffers after this forward (train mode)."""
        return self.within(mask, key, lambda: self.model.logits(flat, buffers, x))

    def within(
        self, mask: torch.Tensor, key: torch.Tensor, forward: Callable[[], torch.Tensor]
    ) -> tuple[torch.Tensor, Buffers]:
        """``forward()`` with the model's BatchNorm and dropout layers in the row's versions (its mask and
        dropout key), and the row's BatchNorm buffers after it."""
        row = self.row = _Row(mask, key)
        try:
            out = forward()
        finally:
            self.row = None
        return out, row.updated
