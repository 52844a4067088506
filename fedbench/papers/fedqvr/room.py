"""FedQVR / FedQVR-E (Wang et al.): Table I, Figs. 1–5 and the claims as targets.
Scenario files and every paper-silent choice: configs/fedqvr/README.md."""

from __future__ import annotations

from fedbench.papers.targets import Claims, Compare, Costs, PaperRoom, Plot, ScenarioTable, Target

D = "configs/fedqvr"
TABLE1 = tuple(f"{D}/table1_{c}.yaml" for c in ("cifar10", "cifar10_hlu", "mnist", "mnist_hlu"))
FIG1_4 = tuple(
    f"{D}/{s}.yaml"
    for s in (
        "fig1_bits_cifar10",
        "fig1_a_cifar10",
        "fig1_bits_mnist",
        "fig1_a_mnist",
        "fig4_m5_cifar10",
        "fig4_m5_cifar10_hlu",
    )
)
# Figs. 2–3: Table I's runs, one panel per case, each drawn against rounds and uplink bits per client
_FIG2 = ("FedQVR", "FedAvg", "SCAFFOLD", "FedDyn", "FedAdam")
_FIG3 = ("FedQVR", "FedPAQ", "FedCOMGATE", "FedCAMS")
PANELS = (("fig2", "cifar10", _FIG2), ("fig2", "mnist", _FIG2), ("fig3", "cifar10", _FIG3), ("fig3", "mnist", _FIG3))
# Fig. 5: FedQVR-E vs the fixed-bit baselines as the delay limit τ tightens, one target per (dataset, τ)
FIG5 = tuple(
    f"fig5_{s}"
    for s in ("cifar10_tau0.6", "cifar10_tau0.8", "cifar10_tau1", "mnist_tau0.048", "mnist_tau0.064", "mnist_tau0.08")
)


def fig5_target(name: str) -> Target:
    """One delay limit of Fig. 5: its runs, their table and curves."""
    file = f"{D}/{name}.yaml"
    return Target(
        name,
        f"FedQVR Fig. 5, {name.removeprefix('fig5_')}: table and curves",
        runs=(file,),
        steps=(ScenarioTable(file), Plot(file)),
    )


ROOM = PaperRoom(
    "fedqvr",
    "FedQVR / FedQVR-E (Wang et al.)",
    (
        Target(
            "table1",
            "FedQVR Table I (ACC, #R, #C; CIFAR-10 and MNIST, ± HLU): paper / ours",
            runs=TABLE1,
            steps=(Compare("I-CIFAR-10"), Compare("I-MNIST")),
        ),
        Target(
            "costs",
            "FedQVR Table I's #C columns from the model sizes and the paper's #R (no training)",
            steps=(Costs(),),
        ),
        Target(
            "figures",
            "FedQVR Figs. 1–4 (B and a sweeps, baselines, m = 5 / HLU)",
            needs=("table1",),
            runs=FIG1_4,
            steps=(
                *(
                    Plot(f"{D}/table1_{case}.yaml", ("round", "uplink"), algorithms=labels, name=fig)
                    for fig, case, labels in PANELS
                ),
                *(Plot(f) for f in FIG1_4),
                *(ScenarioTable(f) for f in FIG1_4 if "fig4_" in f),  # Fig. 4's m = 5 numbers (claim 6)
            ),
        ),
        *(fig5_target(name) for name in FIG5),
        Target(
            "fig5", "FedQVR Fig. 5: FedQVR-E vs FedQVR and the quantized baselines under delay limits τ", needs=FIG5
        ),
        Target("claims", "FedQVR claims on the scale's runs and the paper's numbers", steps=(Claims(),)),
    ),
    first_table="table1",
)
