"""Client-level differential privacy as a round plug-in (``privacy``): DP-FedAvg with an Opacus accountant.

DP-FedAvg (McMahan et al. 2018, "Learning Differentially Private Recurrent Language Models", Alg. 1), on the
``[S, P]`` rows of model changes Δ_i that reach the server (``Upload.sent["delta"]`` of an algorithm declaring
``Capabilities.client_dp``), before its ``server_update``:

    Δ̂_i = Δ_i · min(1, C/‖Δ_i‖)                                   (ClipFn; a zero row stays zero, C = ∞ keeps Δ_i)
    Δ   = (1/S) Σ_i Δ̂_i + N(0, σ² I),   σ = z_Δ·C/S                (the fixed-denominator estimator f̃_f)

The weights are 1/S for every received row whatever ``server.weighting`` says: data-size weights n_i/Σn
would make a client's influence, hence the sensitivity, depend on its data; with weights 1/S it is C/S. S is
``clients.per_round`` even when stragglers drop out (fewer rows k < S, each still weighted 1/S). The noise is
added to the average by adding (S/k)·ξ, ξ ~ N(0, σ² I), to every received row, so that the algorithm's own
Σ_i w_i Δ̂_i gives the average plus ξ and its server optimizer (FedAvgM, FedAdam, ...) is post-processing.
Draws come from the ``("privacy", t)`` stream on the model's device.

Adaptive clipping (Andrew et al. 2021, "Differentially Private Learning with Adaptive Clipping", Alg. 1):
each received client reports b_i = 1[‖Δ_i‖ ≤ C]; the server forms the noised fraction
b̃ = (Σ_i (b_i − ½) + N(0, σ_b²))/S + ½ (the ½ shift halves the count's sensitivity; for k = S it is the
paper's (Σ b_i + N(0, σ_b²))/S), drawn from the ``("privacy_count", t)`` stream, and moves C geometrically
toward the γ-quantile of the norms: C ← C·exp(−η_C(b̃ − γ)). The two releases compose to one Gaussian
mechanism of multiplier (z_Δ⁻² + (2σ_b)⁻²)^(−1/2) (the paper's Sec. 3), so for a given
``noise_multiplier`` z the updates are noised with z_Δ = (z⁻² − (2σ_b)⁻²)^(−1/2) > z and the accountant
counts z; without adaptive clipping z_Δ = z.

Accounting: each round is one sampled Gaussian mechanism of noise multiplier z and sampling rate
q = S/N (the client-level analysis of McMahan et al., who treat the round's sample as Poisson with rate q;
fedbench samples exactly S without replacement, the usual approximation). The (ε, δ) after round t comes
from Opacus (``opacus.accountants.RDPAccountant`` or ``PRVAccountant``, ``privacy.accountant``), never from
fedbench's own maths; δ is ``privacy.delta``, by default 1/N^1.1 (below 1/N, as a guarantee over N clients
needs). z = 0 is no guarantee: ε = ∞. Each round's logs record ``epsilon``, the ``clip`` C it used, the
``noise_std`` σ and how many rows were ``clipped``; the accountant's steps and the adaptive C are checkpointed.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import TYPE_CHECKING, Any

import torch

from fedbench.algorithms.base import Upload
from fedbench.engine.local import LocalResult
from fedbench.engine.plugins import Received, RoundPlugin
from fedbench.seeding import numpy_stream, torch_stream

if TYPE_CHECKING:
    from fedbench.engine.setup import RunSetup
    from fedbench.scenario import RunSpec


def clip_rows(rows: torch.Tensor, clip: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row Δ_i of ``rows`` ``[S, P]`` scaled to norm at most C: Δ_i·min(1, C/‖Δ_i‖) (McMahan et al. 2018,
    Alg. 1 ClipFn), and the norms ‖Δ_i‖ ``[S]`` before clipping. A zero row stays zero; C = ∞ multiplies by 1."""
    norms = torch.linalg.vector_norm(rows, dim=1)
    scale = torch.clamp(clip / norms, max=1.0)  # ‖Δ_i‖ = 0: C/0 = ∞ → 1
    return rows * scale[:, None], norms


def update_noise_multiplier(z: float, count_noise: float | None) -> float:
    """The updates' noise multiplier z_Δ for an overall z: z without adaptive clipping (``count_noise`` None),
    else (z⁻² − (2σ_b)⁻²)^(−1/2) (Andrew et al. 2021, Sec. 3); 0 for z = 0 (needs z < 2σ_b otherwise)."""
    if count_noise is None or z == 0:
        return z
    return (z**-2 - (2 * count_noise) ** -2) ** -0.5


class Accountant:
    """The (ε, δ) spent by ``steps`` rounds of one sampled Gaussian mechanism (multiplier z, rate q), from
    Opacus's ``rdp`` or ``prv`` accountant (imported here: opacus is the ``fedbench[privacy]`` extra)."""

    def __init__(self, kind: str, z: float, q: float, delta: float):
        from opacus.accountants import PRVAccountant, RDPAccountant

        self.kind, self.z, self.q, self.delta = kind, z, q, delta
        self.opacus = RDPAccountant() if kind == "rdp" else PRVAccountant()

    @property
    def steps(self) -> int:
        """Rounds accounted so far."""
        return sum(n for _, _, n in self.opacus.history)

    def step(self) -> None:
        """One more round."""
        self.opacus.step(noise_multiplier=self.z, sample_rate=self.q)

    def restore(self, steps: int) -> None:
        """Back to ``steps`` rounds accounted (a checkpoint's)."""
        self.opacus.history = [(self.z, self.q, steps)] if steps else []

    def epsilon(self) -> float:
        """ε of the rounds so far at δ (0 before any; ∞ for z = 0). Opacus's note that its best RDP order is
        the smallest it tries (a loose bound, at small z) is silenced: ε is an upper bound either way."""
        if not self.steps:
            return 0.0
        if self.z == 0:
            return math.inf
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Optimal order is the", category=UserWarning)
            return float(self.opacus.get_epsilon(delta=self.delta))


class DPFedAvg(RoundPlugin):
    """Clipped, uniformly weighted, noised client updates and their (ε, δ) (module docstring)."""

    name = "privacy"

    def __init__(self, spec: RunSpec, seed: int, setup: RunSetup | None):
        p = spec.privacy
        assert p is not None and p.delta is not None  # resolution fills δ
        if setup is not None and setup.model.buffer_numel():
            raise ValueError(
                f"privacy: model {spec.model['name']} has BatchNorm buffers, which the clients would send unclipped "
                "and unnoised; use a model without them (e.g. GroupNorm)"
            )
        self.spec, self.seed, self.per_round = p, seed, spec.clients.per_round
        adaptive = p.adaptive_clip
        self.z_update = update_noise_multiplier(p.noise_multiplier, adaptive.count_noise if adaptive else None)
        self.accountant = Accountant(
            p.accountant, p.noise_multiplier, spec.clients.per_round / spec.clients.num, p.delta
        )
        self.clip = p.clip  # C of the next round (adaptive clipping moves it)
        self.logged: dict[str, Any] = {}

    def noise_std(self, clip: float) -> float:
        """σ = z_Δ·C/S, the std of the noise on the average of the clipped updates."""
        return 0.0 if self.z_update == 0 else self.z_update * clip / self.per_round

    def select_received(self, received: Received, result: LocalResult) -> Received | None:
        t, rows = received.ctx.round, received.uploads.sent["delta"]
        k, s, clip = len(rows), self.per_round, self.clip
        clipped, norms = clip_rows(rows, clip)
        std = self.noise_std(clip)
        if std > 0:
            gen = torch_stream(self.seed, "privacy", t, device=rows.device)
            xi = torch.randn(rows.shape[1], generator=gen, device=rows.device, dtype=rows.dtype) * std
            clipped = clipped + (s / k) * xi  # Σ_i (1/S)(Δ̂_i + (S/k)ξ) = (1/S)Σ_i Δ̂_i + ξ
        unclipped = int((norms <= clip).sum())
        a = self.spec.adaptive_clip
        if a is not None:
            assert a.count_noise is not None
            noise = (
                float(numpy_stream(self.seed, "privacy_count", t).normal(0.0, a.count_noise)) if a.count_noise else 0.0
            )
            fraction = (unclipped - k / 2 + noise) / s + 0.5
            self.clip = clip * math.exp(-a.lr * (fraction - a.quantile))
        self.accountant.step()
        self.logged = {"clip": clip, "noise_std": std, "clipped": k - unclipped}
        uploads = Upload({**received.uploads.sent, "delta": clipped}, received.uploads.kept)
        return dataclasses.replace(received, uploads=uploads, weights=torch.full_like(received.weights, 1.0 / s))

    def round_logs(self, t: int) -> dict[str, Any]:
        logged, self.logged = self.logged, {}
        return {"epsilon": self.accountant.epsilon(), **logged}

    def run_logs(self) -> dict[str, Any]:
        return {"delta": self.accountant.delta, "noise_multiplier_updates": self.z_update}

    def state_dict(self) -> dict[str, Any] | None:
        return {"clip": self.clip, "steps": self.accountant.steps}

    def load_state_dict(self, payload: dict[str, Any]) -> None:
        self.clip = float(payload["clip"])
        self.accountant.restore(int(payload["steps"]))
