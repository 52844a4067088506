"""What an algorithm is and needs, declared once where it is registered.

The catalogue (``fedbench list``), the scenario validator and the engine all read this one
declaration: nothing about an algorithm's needs lives in class flags, untyped registration
extras or string keys shared between modules.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping


@dataclass(frozen=True)
class Capabilities:
    """One algorithm's declaration.

    Scenario side: its table ``label``, its ``server`` defaults (keys of
    :class:`~fedbench.optim.spec.ServerSpec`, overridden by the scenario), whether it accepts an
    uplink ``compression`` block, a ``local_optimizer`` other than sgd, and per-device bit widths
    from the wireless allocation (``adaptive_bits``, FedQVR-E).

    Engine side: ``full_gradient`` fills ``RoundContext.full_grad`` = ∇f_i(x_t) on all local data
    before local work; ``memory_gradient`` fills ``memory_grad`` = ∇f_i†(x_t) on a replay draw and
    ``memory_size``; ``replay_per_step`` joins a replay draw to every local minibatch (ER), kept
    apart from it with ``replay_apart`` (NCCL-FL: ``grad.memory(z)``); ``batchable = False``
    (a custom local loss) always takes the sequential client executor.
    """

    label: str
    server: Mapping[str, Any] = field(default_factory=dict)
    compression: bool = False
    local_optimizer: bool = False
    adaptive_bits: bool = False
    full_gradient: bool = False
    memory_gradient: bool = False
    replay_per_step: bool = False
    replay_apart: bool = False
    batchable: bool = True

    def __post_init__(self) -> None:
        if self.replay_apart and not self.replay_per_step:
            raise ValueError(f"{self.label}: replay_apart needs replay_per_step")
