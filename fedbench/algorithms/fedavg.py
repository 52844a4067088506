"""FedAvg and its server-optimizer family: FedAvgM, FedAdam, FedYogi, FedAMSGrad.

They share one client procedure (plain local SGD, upload Δ_i = x_i − x) and differ only in the
server optimizer applied to Δ = Σ w_i Δ_i, so they are one class registered under five names
with different server defaults (:mod:`fedbench.optim` has the update equations).
"""

from fedbench.algorithms.base import ALGORITHMS, Algorithm

ALGORITHMS.register(
    "fedavg",
    "FedAvg (McMahan et al. 2017): local SGD, weighted model averaging",
    label="FedAvg",
    compression=True,
    local_optimizer=True,
    client_dp=True,
    vmap_server=True,
)(Algorithm)
for _name, _label, _server, _what in [
    ("fedavgm", "FedAvgM", {"optimizer": "sgd", "momentum": 0.9}, "server momentum (Hsu et al. 2019)"),
    ("fedadam", "FedAdam", {"optimizer": "adam", "lr": 0.1}, "server Adam (Reddi et al. 2021)"),
    ("fedyogi", "FedYogi", {"optimizer": "yogi", "lr": 0.1}, "server Yogi (Reddi et al. 2021)"),
    (
        "fedamsgrad",
        "FedAMSGrad",
        {"optimizer": "amsgrad", "lr": 0.1},
        "server AMSGrad (Tong et al. 2020; FedAMS option 2)",
    ),
    (
        "fedams",
        "FedAMS",
        {"optimizer": "ams", "lr": 1.0, "eps": 1e-3, "weighting": "uniform"},
        "server AMS max-stabilization (FedAMS option 1, Wang et al. 2022)",
    ),
]:
    ALGORITHMS.register(
        _name,
        f"FedAvg with {_what}",
        label=_label,
        server=_server,
        compression=True,
        local_optimizer=True,
        client_dp=True,
        vmap_server=True,
    )(type(_label, (Algorithm,), {"__doc__": f"FedAvg with {_what}; server defaults {_server}."}))
