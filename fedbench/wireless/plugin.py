"""The wireless uplink as a round plug-in (scenario block ``wireless``; FedQVR Sec. V, Alg. 2 lines 3–6).

Right after sampling the sampled devices' channel is drawn (:class:`~fedbench.wireless.uplink.Uplink`):
an algorithm that declares the ``bits`` input (FedQVR-E) gets the allocation of Eq. (30) — devices
below B̲ are removed before training, the others' bit widths are its ``bits`` — and every upload is then
checked against the deadline τ at its bandwidth (W_total/m for fixed-bit algorithms); only those
that arrive enter ``server_update``. ``bits_up`` counts every upload sent, lost ones included
(they used the channel). The round's channel is logged under ``extra["wireless"]``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from fedbench.compress import BITS_PER_FLOAT, bound_bits
from fedbench.engine.federation import InputRequest
from fedbench.engine.local import LocalResult
from fedbench.engine.plugins import Received, RoundPlugin
from fedbench.engine.uploads import aggregation_weights, client_upload_bits
from fedbench.wireless.uplink import RoundRadio, Uplink

if TYPE_CHECKING:
    from fedbench.engine.setup import RunSetup
    from fedbench.scenario import RunSpec


class WirelessUplink(RoundPlugin):
    """FedQVR-E's FDMA uplink around the round: allocation after sampling, deadlines before aggregation."""

    name = "wireless"

    def __init__(self, spec: RunSpec, seed: int, setup: RunSetup):
        assert spec.wireless is not None
        self.spec, self.s = spec, setup
        model = setup.model  # payload d(B+1) + μ, μ = 2·32 bits per parameter tensor (+ fp32 BN buffers)
        overhead = bound_bits(len(model.numels)) + BITS_PER_FLOAT * model.buffer_numel()
        self.uplink = Uplink(spec.wireless, spec.clients.num, seed, model.dim, overhead)
        self.adaptive = "bits" in setup.algorithm.caps.inputs
        self.radio: RoundRadio | None = None

    def after_sampling(self, t: int, clients: np.ndarray) -> np.ndarray:
        """Draw the round's channel; Alg. 2 line 6: devices allocated < B̲ bits neither train nor upload."""
        self.radio = radio = self.uplink.round(t, clients, self.adaptive)
        kept = clients[radio.kept]
        if len(kept) == 0:
            radio.log.update(received=[], lost=[], server_update="skipped: every device was removed")
        return kept

    def provide(self, request: InputRequest) -> dict[str, torch.Tensor]:
        """``bits``: the allocated bit widths of the kept devices (an algorithm that declares them)."""
        radio = self.current()
        if "bits" not in request.wanted or radio.bits is None:
            return {}
        return {"bits": torch.as_tensor(radio.bits[radio.kept], dtype=torch.int64, device=request.clients.device)}

    def select_received(self, received: Received, result: LocalResult) -> Received | None:
        """The uploads meeting τ (Eq. 28), with weights renormalised over them or, for ``zero_fill``,
        the sampled set's (FedQVR N/m). Lost clients are left out of ``server_update``, so their
        per-client state (c_i, error memory) does not move; with none received the model stays."""
        radio = self.current()
        ok = radio.deliver((client_upload_bits(result.uploads) + self.s.model.buffer_numel() * BITS_PER_FLOAT).numpy())
        radio.log["server_update"] = "done" if ok.any() else "skipped: no upload arrived"
        if not ok.any():
            return None
        zero_fill = self.spec.wireless.outage_aggregation == "zero_fill"  # type: ignore[union-attr]
        if ok.all() and not (zero_fill and not radio.kept.all()):
            return received
        return self.received_rows(received, ok, zero_fill)

    def received_rows(self, received: Received, ok: np.ndarray, zero_fill: bool) -> Received:
        """The rows ``ok`` of ``received``; zero_fill weighs them as the sampled set did, lost and
        removed devices counting as zero."""
        device = received.ctx.clients.device
        rows = torch.as_tensor(ok.nonzero()[0], device=device)
        ctx, uploads = received.ctx.select(rows), received.uploads.rows(rows)
        buffers = [received.buffers[i] for i in rows.tolist()]
        if zero_fill:
            radio, sizes = self.current(), ctx.client_sizes()
            sampled, kept = torch.as_tensor(radio.clients, device=device), torch.as_tensor(radio.kept, device=device)
            weights = aggregation_weights(self.spec, sizes[sampled])[kept][rows]
            return Received(ctx, uploads, buffers, weights, weights / weights.sum())
        weights = aggregation_weights(self.spec, ctx.client_sizes()[ctx.clients])
        return Received(ctx, uploads, buffers, weights, weights)

    def round_logs(self, t: int) -> dict[str, Any]:
        """The round's channel: distances, SNRs, bandwidths, widths, who was received or lost."""
        return {"wireless": self.current().log}

    def current(self) -> RoundRadio:
        """This round's channel (drawn by :meth:`after_sampling`)."""
        assert self.radio is not None, "the wireless uplink is used before the round's sampling"
        return self.radio
