"""FedAMS / FedCAMS (Wang, Lin, Chen, ICML 2022): Tables 1–3, Figs. 1–7 and the claims as targets.
Scenario files and the decisions behind them: configs/fedcams/README.md."""

from __future__ import annotations

from fedbench.papers.targets import Bits, Claims, Compare, PaperRoom, Plot, Target, Tuning

D = "configs/fedcams"
# FedCAMS Table 2's rows (Table 1 is their formulas), for ResNet-18 on CIFAR-10 over T = 500 rounds
TABLE2_COMPRESSORS = ("sign", "topk:ratio=1/64", "topk:ratio=1/128", "topk:ratio=1/256")
BITS = Bits("resnet18", "3x32x32", 10, 500, TABLE2_COMPRESSORS)


def curves(file: str, uplink: bool = False) -> tuple[Plot, ...]:
    """Test accuracy and training loss against rounds; with compressed runs also against the uplink
    bits per client (footnote 6)."""
    x = ("round", "uplink") if uplink else ("round",)
    return tuple(Plot(file, x, metric) for metric in ("test_acc", "train_loss"))


def figure(name: str, help: str, files: tuple[str, ...], plotted: tuple[str, ...], uplink: bool = False) -> Target:
    """A figure: its files run in order (files in a subfolder share one scenario name), the tuning
    table (where the scale tunes them, App. E.1), its final-accuracy table ``name`` and the curves of
    each scenario in ``plotted``."""
    paths = tuple(f"{D}/{f}.yaml" for f in files)
    plots = tuple(p for f in plotted for p in curves(f"{D}/{f}.yaml", uplink))
    return Target(name, help, runs=paths, steps=(Tuning(), Compare(name), *plots))


_PARTICIPATION = tuple(f"fig2_6_participation/{m}_s{s}" for m in ("resnet18", "convmixer") for s in (5, 10, 20))
FIGURES = (
    figure(
        "fig1",
        "FedCAMS Fig. 1: FedAMS vs adaptive baselines, CIFAR-10",
        ("fig1_cifar10_resnet18", "fig1_cifar10_convmixer"),
        ("fig1_cifar10_resnet18", "fig1_cifar10_convmixer"),
    ),
    figure(
        "fig2_6",
        "FedCAMS Figs. 2/6: participation S = 5, 10, 20",
        _PARTICIPATION,
        ("fig2_6_participation/resnet18_s5", "fig2_6_participation/convmixer_s5"),
        uplink=True,
    ),
    figure(
        "fig3",
        "FedCAMS Fig. 3: local epochs E = 3, 10, 30, 100",
        tuple(f"fig3_local_epochs/e{e}" for e in (3, 10, 30, 100)),
        ("fig3_local_epochs/e3",),
    ),
    figure(
        "fig4_5",
        "FedCAMS Figs. 4/5: compressors, ResNet-18 and ConvMixer",
        ("fig4_compressors_cifar10_resnet18", "fig5_compressors_cifar10_convmixer"),
        ("fig4_compressors_cifar10_resnet18", "fig5_compressors_cifar10_convmixer"),
        uplink=True,
    ),
    figure(
        "fig7",
        "FedCAMS Fig. 7: CIFAR-100",
        ("fig7_cifar100_resnet18", "fig7_cifar100_convmixer"),
        ("fig7_cifar100_resnet18", "fig7_cifar100_convmixer"),
    ),
)

ROOM = PaperRoom(
    "fedcams",
    "FedAMS / FedCAMS (Wang, Lin, Chen, ICML 2022)",
    (
        Target(
            "table1", "FedCAMS Table 1 (bit formulas), the paper's beside ours (written with Table 2)", steps=(BITS,)
        ),
        Target(
            "table2", "FedCAMS Table 2 from ResNet-18's size: the paper's 12 values and ours, to 3 s.f.", steps=(BITS,)
        ),
        Target(
            "table3",
            "FedCAMS Table 3 (FedAMS's ε ablation): paper / ours",
            runs=(f"{D}/table3_eps.yaml",),
            steps=(Compare("3"),),
        ),
        *FIGURES,
        Target(
            "figures", "FedCAMS Figs. 1–7: runs, final-accuracy tables, curves", needs=tuple(f.name for f in FIGURES)
        ),
        Target("claims", "FedCAMS claims on the scale's runs and the paper's numbers", steps=(Claims(),)),
    ),
    first_table="table1",
)  # analytic: bits, no training
