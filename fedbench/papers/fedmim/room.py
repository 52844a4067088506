"""FedMIM (Liu et al.): Tables I–III and Fig. 2 as targets, each with the claims.
Scenario files and every decision the paper leaves open: configs/fedmim/README.md."""

from __future__ import annotations

from fedbench.papers.targets import Claims, Compare, PaperRoom, Plot, Target

D = "configs/fedmim"
DATASETS = ("cifar10", "cifar100", "tiny_imagenet")
TABLE1 = tuple(f"{D}/table1_{d}_{s}.yaml" for d in DATASETS for s in ("iid", "dir0.3", "dir0.1"))
TABLE2 = tuple(f"{D}/table2_{d}_e{e}.yaml" for d in DATASETS for e in (1, 5, 10))
FIG2A = (f"{D}/fig2a_p0.05.yaml", f"{D}/fig2a_p0.2.yaml")
DIR03 = tuple(f"{D}/table1_{d}_dir0.3.yaml" for d in DATASETS)

ROOM = PaperRoom(
    "fedmim",
    "FedMIM (Liu et al.)",
    (
        Target(
            "table1",
            "FedMIM Table I (3 datasets × IID/DIR.3/DIR.1): paper / ours, claims",
            runs=TABLE1,
            steps=(Compare("I"), Claims()),
        ),
        Target(
            "table2",
            "FedMIM Table II (3 datasets × E = 1, 5, 10): paper / ours, claims",
            runs=TABLE2,
            steps=(Compare("II"), Claims()),
        ),
        Target(
            "table3",
            "FedMIM Table III (α/β ablation): paper / ours, claims, curves",
            runs=(f"{D}/table3.yaml",),
            steps=(Compare("III"), Claims(), Plot(f"{D}/table3.yaml")),
        ),
        Target(
            "fig2",
            "FedMIM Fig. 2: (a) accuracy at 5%/20% participation, (b) local consistency (Table I DIR.3 runs)",
            runs=(*FIG2A, *DIR03),
            steps=(*(Plot(f) for f in FIG2A), *(Plot(f, metric="consistency") for f in DIR03)),
        ),
    ),
    first_table="table1",
)
