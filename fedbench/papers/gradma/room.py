"""GradMA (Luo et al., CVPR 2023): Tables 1–2, Figs. 1–20 and the claims as targets.
Scenario files and every paper-silent choice: configs/gradma/README.md."""

from __future__ import annotations

from types import MappingProxyType

from fedbench.papers.targets import Claims, Compare, PaperRoom, Partitions, Plot, ScenarioTable, Target, Tuning

D = "configs/gradma"
COLUMNS = (
    "mnist_s10_w1.0",
    "mnist_s10_w0.1",
    "mnist_s10_w0.01",
    "mnist_s5_w0.01",
    "mnist_s50_w0.01",
    "cifar10_s10_w1.0",
    "cifar10_s10_w0.1",
    "cifar10_s10_w0.01",
    "cifar100_s5_w0.1",
    "cifar100_s10_w0.1",
    "cifar100_s50_w0.1",
    "tiny_imagenet_s5_w0.01",
    "tiny_imagenet_s5_w1.0",
    "tiny_imagenet_s10_w1.0",
)
# the two S = 50 columns first, so that two processes finish together
ORDER = tuple(c for c in COLUMNS if "_s50_" in c) + tuple(c for c in COLUMNS if "_s50_" not in c)
# tiny: all S clients in one vmapped step (3× faster than client by client for GradMA on the CPU; MOON's and FedMLB's
# own losses too, 1.7–2.9×); other scales: auto.
BATCHED_AT_TINY = MappingProxyType({"tiny": "batched"})
# Figs. 1–4: the paper's selected curves, two panels each (the two datasets its caption names; the paper does not
# say which columns, configs/gradma/README.md lists ours), drawn from Table 1's runs.
_FIG1 = ("FedAvg", "FedProx", "FedMLB", "MOON", "Scaffold", "GradMA-W")
_FIG2 = ("FedAvgM", "MIFA", "MIFAM", "GradMA-S")
_FIG3 = ("FedProxM", "FedMLBM", "MOONM", "FedDyn", "MimeLite", "GradMA")
_FIG4 = ("GradMA", "GradMA-S", "GradMA-W")
PANELS = (
    ("fig1", "mnist_s10_w0.01", _FIG1),
    ("fig1", "cifar10_s10_w0.1", _FIG1),
    ("fig2", "cifar100_s10_w0.1", _FIG2),
    ("fig2", "tiny_imagenet_s10_w1.0", _FIG2),
    ("fig3", "cifar10_s10_w0.1", _FIG3),
    ("fig3", "cifar100_s10_w0.1", _FIG3),
    ("fig4", "cifar10_s10_w0.01", _FIG4),
    ("fig4", "tiny_imagenet_s10_w1.0", _FIG4),
)
# Figs. 5/21: GradMA-S over (β1, β2) ∈ {0, .1, .3, .5, .7, .9}², with MIFA and MIFAM; the curves drawn are a selection.
FIG5 = tuple(f"{D}/fig5_betas_{s}.yaml" for s in ("mnist_w0.01", "cifar10_w1.0"))
FIG5_CURVES = (
    "MIFA",
    "MIFAM",
    "GradMA-S β1=0.0 β2=0.0",
    "GradMA-S β1=0.5 β2=0.0",
    "GradMA-S β1=0.5 β2=0.5",
    "GradMA-S β1=0.5 β2=0.9",
)
# Fig. 8: the partitions of Table 1's columns, one panel per (dataset, ω) the table has (S does not change them).
FIG8 = tuple(f"{D}/{c}.yaml" for c in COLUMNS if "_s10_" in c or c == "tiny_imagenet_s5_w0.01")
MEMORY = tuple(f"{D}/fig6_memory_{s}.yaml" for s in ("mnist_w0.1", "mnist_w0.01", "cifar10_w1.0"))

ROOM = PaperRoom(
    "gradma",
    "GradMA (Luo et al., CVPR 2023)",
    (
        Target(
            "runs",
            "Table 1's runs: 14 columns × 16 methods × seeds, each method tuned per column (its tuning table)",
            runs=tuple(f"{D}/{c}.yaml" for c in ORDER),
            client_executor=BATCHED_AT_TINY,
            steps=(Tuning(),),
        ),
        Target("table1", "GradMA Table 1 (top accuracy): paper / ours", needs=("runs",), steps=(Compare("1"),)),
        Target(
            "table2",
            "GradMA Table 2 (rounds to ac, Table 1's runs): paper / ours",
            needs=("runs",),
            steps=(Compare("2"),),
        ),
        Target(
            "figures",
            "GradMA Figs. 1–4 (selected accuracy curves of Table 1's runs)",
            needs=("runs",),
            steps=tuple(Plot(f"{D}/{col}.yaml", algorithms=labels, name=fig) for fig, col, labels in PANELS),
        ),
        Target(
            "curves",
            "GradMA Figs. 9–20: every method's test-accuracy curve, one figure per Table 1 column",
            needs=("runs",),
            steps=tuple(Plot(f"{D}/{c}.yaml", name="full") for c in COLUMNS),
        ),
        Target(
            "fig5",
            "GradMA Figs. 5/21: GradMA-S over the (β1, β2) grid (top-accuracy tables, selected curves)",
            runs=FIG5,
            client_executor=BATCHED_AT_TINY,
            steps=tuple(s for f in FIG5 for s in (ScenarioTable(f), Plot(f, algorithms=FIG5_CURVES, name="fig5"))),
        ),
        Target(
            "memory",
            "GradMA Figs. 6–7: GradMA-S vs memory size m (top-accuracy tables and curves)",
            runs=MEMORY,
            client_executor=BATCHED_AT_TINY,
            steps=tuple(s for f in MEMORY for s in (ScenarioTable(f), Plot(f))),
        ),
        Target(
            "fig8",
            "GradMA Fig. 8: which classes each client holds, for each (dataset, ω) of Table 1 (no training)",
            steps=(Partitions(FIG8, "fig8"),),
        ),
        Target("claims", "GradMA claims on the scale's runs and the paper's numbers", steps=(Claims(),)),
    ),
    first_table="table1",
)
