"""FedPAQ (Reisizadeh, Mokhtari, Hassani, Jadbabaie, Pedarsani 2020, AISTATS): periodic averaging
with quantized uploads."""

from fedbench.algorithms.base import ALGORITHMS, Algorithm


@ALGORITHMS.register(
    "fedpaq",
    "FedPAQ: local SGD, quantized model change Q(x_i − x), server averages the quantized changes",
    label="FedPAQ",
    server={"weighting": "uniform"},
    compression=True,
    vmap_server=True,
)
class FedPAQ(Algorithm):
    """FedPAQ Alg. 1: each sampled client runs K_i local SGD steps from x and uploads
    Q(x_i − x) with the scenario's compressor (unbiased ``stochastic`` in the FedQVR comparison,
    B = 2); the server sets x ← x + η_g·(1/r)Σ_{i∈S} Q(x_i − x). The paper averages uniformly
    over the r sampled clients with η_g = 1, the registered defaults; the server block can
    change both. With the ``none`` compressor it is FedAvg with uniform weights.
    """
