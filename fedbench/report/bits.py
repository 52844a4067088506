"""Communication-bit tables computed from a model's size and the compressors' payload formulas,
without training (FedCAMS Tables 1 and 2, per client that takes part in all T rounds).

For a compressor with upload size b(d) bits and an uncompressed 32·d-bit broadcast:

* uncompressed: 32·d·2T (FedAMS: full model both ways)
* one-way compression: b(d)·T + 32·d·T (compressed uplink, full downlink: the FedCAMS setting)
* two-way compression: b(d)·2T (both directions compressed; analysed, never run, in the paper)
"""

from __future__ import annotations

import pandas as pd

from fedbench.compress import COMPRESSORS, build_compressor
from fedbench.models import build_model, count_parameters

# Table 1 of FedCAMS: the formula of each column for each compressor's payload b(d).
PAYLOAD_FORMULAS = {
    "none": "32d",
    "sign": "(32 + d)",
    "topk": "32 × 2k",
    "stochastic": "(d(B+1) + 64L)",
}


def parse_compressor(text: str) -> tuple[str, dict[str, float]]:
    """``sign`` or ``topk:ratio=1/64`` or ``stochastic:bits=2`` → (kind, params); fractions allowed."""
    kind, _, rest = text.partition(":")
    params: dict[str, float] = {}
    for item in filter(None, rest.split(",")):
        key, _, value = item.partition("=")
        num, _, den = value.partition("/")
        params[key.strip()] = float(num) / float(den) if den else float(value)
    COMPRESSORS.get(kind)  # unknown kinds fail here with the list of known ones
    return kind, params


def label_of(kind: str, params: dict[str, float]) -> str:
    if kind == "topk":
        return f"Top-k with r = 1/{round(1 / params['ratio'])}"
    if kind == "sign":
        return "Scaled sign"
    if kind == "stochastic":
        return f"Stochastic {int(params['bits'])}-bit"
    return "Uncompressed"


def bits_table(
    model: str,
    input_shape: tuple[int, ...],
    num_classes: int,
    rounds: int,
    compressors: list[tuple[str, dict[str, float]]],
    model_params: dict | None = None,
) -> tuple[int, pd.DataFrame]:
    """(d, table): per-client bits over ``rounds`` rounds for each compressor (FedCAMS Table 2 layout)."""
    module = build_model(model, model_params or {}, input_shape, num_classes)
    d = count_parameters(module)
    layout = tuple(p.numel() for p in module.parameters() if p.requires_grad)
    rows = []
    for kind, params in compressors:
        up = build_compressor(kind, params, layout).payload_bits(d)
        rows.append(
            {
                "Method": label_of(kind, params),
                "Uncompressed": 32 * d * 2 * rounds,
                "One-way Compression": (up + 32 * d) * rounds,
                "Two-way Compression": up * 2 * rounds,
            }
        )
    return d, pd.DataFrame(rows).set_index("Method")


def formula_table(compressors: list[tuple[str, dict[str, float]]]) -> pd.DataFrame:
    """FedCAMS Table 1: the closed forms behind :func:`bits_table`."""
    rows = []
    for kind, params in compressors:
        b = PAYLOAD_FORMULAS[kind]
        rows.append(
            {
                "Method": label_of(kind, params).split(" with")[0],
                "Uncompressed": "32d × 2T",
                "One-way Compression": f"{b} × T + 32d × T",
                "Two-way Compression": f"{b} × 2T",
            }
        )
    return pd.DataFrame(rows).drop_duplicates().set_index("Method")
