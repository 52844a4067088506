"""The server optimizer's settings (the scenario's ``server`` block), free of torch so that
scenario files validate without it; :mod:`fedbench.optim.server` applies them."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from fedbench.strict import StrictModel


class ServerSpec(StrictModel):
    """Server optimizer applied to the aggregated model change Δ = Σ w_i (x_i − x).

    ``sgd``: x ← x + lr·m with m = momentum·m + Δ (FedAvg at lr=1, momentum=0; FedAvgM otherwise).
    ``adam``/``yogi``/``amsgrad``: Reddi et al. (2021) Alg. 2, x ← x + lr·m/(√v + eps);
    ``ams``: FedAMS option 1, x ← x + lr·m/√max(v̂, v, eps) (see :mod:`fedbench.optim.server`).
    """

    optimizer: Literal["sgd", "adam", "yogi", "amsgrad", "ams"] = "sgd"
    lr: float = Field(default=1.0, gt=0, description="server learning rate η_g")
    momentum: float = Field(default=0.0, ge=0, lt=1, description="server momentum β (sgd only)")
    beta1: float = Field(default=0.9, ge=0, lt=1)
    beta2: float = Field(default=0.99, ge=0, lt=1)
    eps: float = Field(default=1e-3, gt=0, description="adaptivity τ in m/(√v + τ); the floor of v̂ for ams")
    initial_accumulator: float = Field(default=0.0, ge=0, description="v_0 of adam/yogi/amsgrad")
    bias_correction: bool = False
    weighting: Literal["samples", "uniform"] = Field(
        default="samples", description="aggregation weights: n_i/Σn (samples) or 1/S (uniform)"
    )
