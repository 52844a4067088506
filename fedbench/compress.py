"""Uplink compressors, each returning what the server reconstructs and the exact bits sent.

A compressor acts on the round's client updates ``[S, P]`` (each row one client's whole
flattened update, as in the FedCAMS code) and returns :class:`Compressed` — the decoded rows the
server aggregates and, per client, the payload size in bits:

==============  ==========================================  ===========================
kind            C(x)                                        bits for one vector of size d
==============  ==========================================  ===========================
``none``        x                                           32·d
``sign``        (‖x‖₁/d)·sign(x)  (Karimireddy et al. 2019)  d + 32
``topk``        keep the k = max(⌊r·d⌋, 1) largest |x_j|     64·k (fp32 value + 32-bit index)
``stochastic``  per tensor: |z| rounded at random to one     d·(B+1) + 64·(number of tensors)
                of 2^B levels on [min|z|, max|z|], sign kept  (B bits + sign, fp32 min and max)
==============  ==========================================  ===========================

``stochastic`` is unbiased (FedQVR Sec. III-C, Eqs. 7–8, read on magnitudes); ``sign`` and
``topk`` are biased and need error feedback (FedCAMS). Random draws come from the stream
``("compress", round, client)``. ``stochastic`` can also give each row its own width B_i
(FedQVR-E's per-device allocation, :meth:`StochasticQuantizer.with_bits`); widths of 24 bits or
more are sent unquantized but charged d(B_i+1) + 64·tensors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch
from pydantic import BaseModel, ConfigDict, Field

from fedbench.registry import NoParams, Registry
from fedbench.seeding import torch_stream

BITS_PER_FLOAT = 32


@dataclass
class Compressed:
    """Decoded rows ``value`` [S, P] and the bits each row cost ``bits`` [S]."""

    value: torch.Tensor
    bits: torch.Tensor

    @staticmethod
    def cat(parts: list[Compressed]) -> Compressed:
        return Compressed(torch.cat([p.value for p in parts]), torch.cat([p.bits for p in parts]))


class Compressor:
    """Base: the identity, 32 bits per float."""

    Params: ClassVar[type[BaseModel]] = NoParams
    unbiased: ClassVar[bool] = True

    def __init__(self, params: BaseModel, layout: tuple[int, ...]):
        self.params = params
        self.layout = layout  # sizes of the model's parameter tensors, in flat order

    def payload_bits(self, d: int) -> int:
        """Exact bits of one compressed vector of size ``d`` (the model's own layout for tensors)."""
        return BITS_PER_FLOAT * d

    def encode(self, x: torch.Tensor, gens: list[torch.Generator]) -> torch.Tensor:
        return x

    def __call__(self, x: torch.Tensor, seed: int, round_: int, clients: Sequence[int] | torch.Tensor) -> Compressed:
        gens = [torch_stream(seed, "compress", round_, int(c)) for c in clients] if self.needs_rng else []
        value = self.encode(x, gens)
        bits = torch.full((x.shape[0],), float(self.payload_bits(x.shape[1])), dtype=torch.float64)
        return Compressed(value, bits)

    needs_rng: ClassVar[bool] = False


COMPRESSORS: Registry[type[Compressor]] = Registry("compressor")
COMPRESSORS.register("none", "no compression: 32-bit floats, 32·d bits")(Compressor)


@COMPRESSORS.register("sign", "scaled sign (‖x‖₁/d)·sign(x) of the whole update: d + 32 bits")
class ScaledSign(Compressor):
    """C(x) = (‖x‖₁/d)·sign(x) (FedCAMS §4.2, Remark 4.16); sign(0) = 0 as in the authors' code."""

    unbiased = False

    def payload_bits(self, d: int) -> int:
        return d + BITS_PER_FLOAT

    def encode(self, x: torch.Tensor, gens: list[torch.Generator]) -> torch.Tensor:
        return torch.sign(x) * (x.abs().sum(1, keepdim=True) / x.shape[1])


class TopKParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ratio: float = Field(gt=0, le=1, description="fraction r of coordinates kept (k = max(⌊r·d⌋, 1))")


@COMPRESSORS.register("topk", "top-k by magnitude, k = max(⌊r·d⌋, 1): 64·k bits (value + index)", TopKParams)
class TopK(Compressor):
    """Keep the k largest-magnitude coordinates of each row, zero the rest (FedCAMS §4.2)."""

    Params = TopKParams
    unbiased = False

    def k(self, d: int) -> int:
        return max(int(self.params.ratio * d), 1)

    def payload_bits(self, d: int) -> int:
        return 2 * BITS_PER_FLOAT * self.k(d)

    def encode(self, x: torch.Tensor, gens: list[torch.Generator]) -> torch.Tensor:
        idx = torch.topk(x.abs(), self.k(x.shape[1]), dim=1).indices
        return torch.zeros_like(x).scatter_(1, idx, x.gather(1, idx))


def quantized_payload_bits(d: int, bits: int, tensors: int) -> int:
    """FedQVR Eq. (27): d(B+1) + μ, with μ = 2·32 bits (fp32 min and max of |z|) per tensor."""
    return d * (bits + 1) + bound_bits(tensors)


def bound_bits(tensors: int) -> int:
    """μ: the per-tensor [min|z|, max|z|] bounds a stochastic quantizer sends, 2·32 bits each."""
    return 2 * BITS_PER_FLOAT * tensors


IDENTITY_BITS = 24  # B ≥ this: the grid step (max|z| − min|z|)/(2^B − 1) is below fp32 resolution of max|z|


class StochasticParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    bits: int = Field(
        ge=1, le=IDENTITY_BITS, description="B: magnitude bits per coordinate (2^B levels), plus one sign bit"
    )


def stochastic_quantize(z: torch.Tensor, bits: int, u: torch.Tensor) -> torch.Tensor:
    """Q(z, B) of FedQVR Eqs. 7–8 on magnitudes for one float64 tensor ``z``, uniforms ``u`` (same shape).

    With lo = min|z|, hi = max|z| and step = (hi − lo)/(2^B − 1), |z_j| goes to its upper
    neighbouring level lo + (k+1)·step with probability t_j − k (t_j = (|z_j| − lo)/step, k = ⌊t_j⌋),
    else to lo + k·step, so E[Q(z)] = z; the sign is kept. A tensor with hi = lo is sent exactly,
    and so is any tensor at B ≥ ``IDENTITY_BITS`` (the rounding would be below fp32 resolution).
    """
    mag = z.abs()
    lo, hi = mag.min(), mag.max()
    if bits >= IDENTITY_BITS:
        return z
    levels = 2**bits - 1
    step = (hi - lo) / levels
    t = (mag - lo) / step
    k = torch.floor(t)
    k = torch.clamp(k + (u < t - k).double(), max=levels)
    return torch.where(hi > lo, torch.sign(z) * (lo + k * step), z)  # chosen on the device: no host read


@COMPRESSORS.register(
    "stochastic",
    "unbiased stochastic B-bit quantizer per tensor on [min|z|, max|z|]: d(B+1) + 64·tensors bits",
    StochasticParams,
)
class StochasticQuantizer(Compressor):
    """Q(z, B) of FedQVR Eqs. 7–8 on magnitudes, one (min, max) pair per parameter tensor
    (:func:`stochastic_quantize`); levels are computed in float64.

    :meth:`with_bits` quantizes each row with its own width B_i (FedQVR-E Alg. 2 line 9, widths
    from the bandwidth allocation) and charges d(B_i + 1) + 64·tensors; widths B_i ≥
    ``IDENTITY_BITS`` = 24 are sent unquantized but still charged their B_i (the payload the
    allocation reserved).
    """

    Params = StochasticParams
    needs_rng = True

    def blocks(self, d: int) -> tuple[int, ...]:
        """Parameter-tensor sizes of a d-vector: the layout, or one tensor when none is known."""
        return self.layout or (d,)

    def payload_bits(self, d: int, bits: int | None = None) -> int:
        """d(B+1) + μ with μ = 2·32 bits (fp32 min and max) per tensor; B = the configured width unless given."""
        return quantized_payload_bits(d, self.params.bits if bits is None else bits, len(self.blocks(d)))

    def encode(self, x: torch.Tensor, gens: list[torch.Generator]) -> torch.Tensor:
        return self.quantize_rows(x, [self.params.bits] * x.shape[0], gens)

    def quantize_rows(self, x: torch.Tensor, bits: list[int], gens: list[torch.Generator]) -> torch.Tensor:
        """Row i of ``x`` [S, P] quantized per tensor with B = ``bits[i]``, uniforms from ``gens[i]``."""
        out = torch.empty_like(x)
        for row, (b, gen) in enumerate(zip(bits, gens)):
            u = torch.rand(x.shape[1], generator=gen, dtype=torch.float64).to(x.device)
            start = 0
            for size in self.blocks(x.shape[1]):
                z = x[row, start : start + size].double()
                out[row, start : start + size] = stochastic_quantize(z, b, u[start : start + size]).to(x.dtype)
                start += size
        return out

    def with_bits(
        self, x: torch.Tensor, bits: torch.Tensor, seed: int, round_: int, clients: Sequence[int] | torch.Tensor
    ) -> Compressed:
        """Rows ``x`` [S, P] quantized with per-row widths ``bits`` [S] (integers ≥ 1), same random
        stream as :meth:`__call__`; row i costs d(B_i + 1) + 64·tensors bits."""
        widths = bits.detach().to("cpu", torch.float64).reshape(-1)
        if len(widths) != x.shape[0]:
            raise ValueError(f"need one bit width per row: got {len(widths)} widths for {x.shape[0]} rows")
        if not bool(((widths == widths.round()) & (widths >= 1)).all()):
            raise ValueError(f"bit widths must be integers ≥ 1, got {widths.tolist()}")
        per_row = [int(b) for b in widths.tolist()]
        gens = [torch_stream(seed, "compress", round_, int(c)) for c in clients]
        value = self.quantize_rows(x, per_row, gens)
        cost = torch.tensor([float(self.payload_bits(x.shape[1], b)) for b in per_row], dtype=torch.float64)
        return Compressed(value, cost)


def build_compressor(kind: str, params: dict | BaseModel, layout: tuple[int, ...]) -> Compressor:
    """The registered compressor ``kind`` with validated ``params`` for a model of this layout."""
    entry = COMPRESSORS.get(kind)
    return entry.obj(params if isinstance(params, BaseModel) else entry.params.model_validate(params), layout)
