"""C-FLAG (Keshri, Shah, Prasad): continual FL, Tables 2, 3, 7, 8, Figs. 2–6 and the claims as targets.
Scenario files and every paper-silent choice: configs/cflag/README.md."""

from __future__ import annotations

from fedbench.papers.targets import Claims, Compare, Continual, ContinualSweep, PaperRoom, Plot, Target

D = "configs/cflag"
DATASETS = ("cifar10", "cifar100", "tinyimagenet")
TI_IID = tuple(f"{D}/ti_{d}_iid.yaml" for d in DATASETS)
TI_NONIID = tuple(f"{D}/ti_{d}_noniid.yaml" for d in DATASETS)
CI = tuple(f"{D}/ci_{d}_{h}.yaml" for d in ("cifar10", "cifar100") for h in ("noniid", "iid"))
# Fig. 5 (clients, memory; Split-CIFAR10 and -100) and Fig. 6 (epochs) as grid files: one scenario per point
SWEEPS = tuple(
    f"configs/sweeps/cflag_{g}.yaml"
    for g in ("fig5_clients_cifar10", "fig5_clients_cifar100", "fig5_memory", "fig5_memory_cifar100", "fig6_epochs")
)
FIG4 = (
    *(
        Plot(f"{D}/ti_cifar10_{h}.yaml", metric="cflag.Gamma", algorithms=("C-FLAG",), name="fig4")
        for h in ("noniid", "iid")
    ),
    Plot(f"{D}/fig3_cifar10_zeta1.yaml", metric="cflag.Gamma", algorithms=("C-FLAG",), name="fig4"),  # Fig. 4 at ζ = 1
)

ROOM = PaperRoom(
    "cflag",
    "C-FLAG (Keshri, Shah, Prasad)",
    (
        Target(
            "table2",
            "C-FLAG Table 2 (non-IID, task-incremental): paper / ours, accuracy matrices",
            runs=TI_NONIID,
            steps=(Continual(), Compare("2")),
        ),
        Target(
            "table3",
            "C-FLAG Table 3 (IID, task-incremental): paper / ours, accuracy matrices",
            runs=TI_IID,
            steps=(Continual(), Compare("3")),
        ),
        Target(
            "table7",
            "C-FLAG Table 7 (both, mean ± std) from Tables 2–3's runs",
            needs=("table2", "table3"),
            steps=(Compare("7"),),
        ),
        Target(
            "table8",
            "C-FLAG Table 8 (class-incremental): paper / ours, accuracy matrices",
            runs=CI,
            steps=(Continual(), Compare("8")),
        ),
        Target(
            "figures",
            "C-FLAG Figs. 2–4: per-task accuracy curves, ζ = 1 (Fig. 3), Γ(t) per round (Fig. 4)",
            needs=("table7",),
            runs=(f"{D}/fig3_cifar10_zeta1.yaml",),
            steps=(Continual(), *FIG4),
        ),
        Target(
            "ablations",
            "C-FLAG Figs. 5–6 (sweeps): clients, memory per task, local epochs",
            runs=SWEEPS,
            steps=(Continual(), *(ContinualSweep(g) for g in SWEEPS)),
        ),
        Target("claims", "C-FLAG claims (last: C11, C12 read the figures' runs)", steps=(Claims(),)),
    ),
    first_table="table2",
)  # the paper's first table of results
