"""C-FLAG's claims (notes §9), judged on the task-incremental Tables 2/3 (one 3-seed run set, Table 7)
and the class-incremental Table 8: Acc and Forgetting in percent (ours: mean over the seeds that
recorded every task). The ablation figures (Fig. 3, Fig. 5) print no numbers: their claims read
the sweep points' runs by scenario name and are ``not reported`` on the paper's side. Fig. 5's
left panel (number of clients) gets no claim: the paper states no direction for it."""

from __future__ import annotations

import math

from fedbench.report.claims.base import NOISE_K, Check, Numbers, StoreNumbers, Verdict, claim, close, greater, judge

DATASETS = ("Split-CIFAR10", "Split-CIFAR100", "Split-TinyImageNet")
EWC_TOL = 5.0  # points: "EWC-FL ≈ Fine-FL"; a floor: with seeds, NOISE_K σ of the difference when larger
MEMORY = (50, 150, 200, 300)  # Fig. 5 (right): replay samples per task (configs/sweeps/cflag_fig5_memory*.yaml)


@claim(
    "cflag",
    "C1",
    "IID task-incremental: C-FLAG has the highest Acc and the lowest Forgetting of all methods on "
    "every dataset (Table 3)",
)
def _c1(nums: Numbers) -> Verdict:
    t3, checks = nums.acc("3"), []
    for d in DATASETS:
        acc, fgt = t3[f"{d} Acc"], t3[f"{d} Fgt"]
        for other in t3.index.drop("C-FLAG"):
            checks.append(greater(f"{d} Acc", "C-FLAG", acc["C-FLAG"], other, acc[other]))
            checks.append(greater(f"{d} Fgt", other, fgt[other], "C-FLAG", fgt["C-FLAG"]))
    return judge(checks)


@claim("cflag", "C2", "C-FLAG > Fine-FL and EWC-FL in Acc, IID and non-IID, on every dataset (Tables 2 and 3)")
def _c2(nums: Numbers) -> Verdict:
    checks = []
    for table, setting in (("2", "non-IID"), ("3", "IID")):
        t = nums.acc(table)
        for d in DATASETS:
            acc = t[f"{d} Acc"]
            checks += [greater(f"{setting} {d}", "C-FLAG", acc["C-FLAG"], o, acc[o]) for o in ("Fine-FL", "EWC-FL")]
    return judge(checks)


@claim("cflag", "C3", "IID: C-FLAG forgets less than Fine-FL and EWC-FL on every dataset (Table 3)")
def _c3(nums: Numbers) -> Verdict:
    t3 = nums.acc("3")
    return judge(
        [
            greater(f"{d} Fgt", o, t3.loc[o, f"{d} Fgt"], "C-FLAG", t3.loc["C-FLAG", f"{d} Fgt"])
            for d in DATASETS
            for o in ("Fine-FL", "EWC-FL")
        ]
    )


@claim(
    "cflag",
    "C4",
    f"EWC-FL ≈ Fine-FL: Acc within max({EWC_TOL:g} points, {NOISE_K:g}σ) in every column of Tables 2 and 3",
)
def _c4(nums: Numbers) -> Verdict:
    checks = []
    for table, setting in (("2", "non-IID"), ("3", "IID")):
        t, std = nums.acc(table), nums.acc_std(table)
        for d in DATASETS:
            col = f"{d} Acc"
            checks.append(
                close(
                    f"{setting} {d}",
                    "EWC-FL",
                    t.loc["EWC-FL", col],
                    "Fine-FL",
                    t.loc["Fine-FL", col],
                    EWC_TOL,
                    (std.loc["EWC-FL", col], std.loc["Fine-FL", col]),
                )
            )
    return judge(checks)


@claim("cflag", "C5", "IID Acc > non-IID Acc for every method on every dataset (Table 7)")
def _c5(nums: Numbers) -> Verdict:
    t7 = nums.acc("7")
    return judge(
        [
            greater(f"{d} {m}", "IID", t7.loc[m, f"IID {d} Acc"], "non-IID", t7.loc[m, f"non-IID {d} Acc"])
            for d in DATASETS
            for m in t7.index
        ]
    )


@claim("cflag", "C6", "C-FLAG > NCCL-FL in Acc on Split-CIFAR100, IID and non-IID (Table 7)")
def _c6(nums: Numbers) -> Verdict:
    t7 = nums.acc("7")
    return judge(
        [
            greater(
                f"{s} Split-CIFAR100",
                "C-FLAG",
                t7.loc["C-FLAG", f"{s} Split-CIFAR100 Acc"],
                "NCCL-FL",
                t7.loc["NCCL-FL", f"{s} Split-CIFAR100 Acc"],
            )
            for s in ("non-IID", "IID")
        ]
    )


@claim("cflag", "C13", "Class-incremental, non-IID Split-CIFAR10: C-FLAG has the best Acc (Table 8)")
def _c13(nums: Numbers) -> Verdict:
    t8 = nums.acc("8")
    acc = t8["non-IID Split-CIFAR10 Acc"]
    return judge(
        [greater("non-IID Split-CIFAR10", "C-FLAG", acc["C-FLAG"], o, acc[o]) for o in t8.index if o != "C-FLAG"]
    )


@claim("cflag", "C11", "Fig. 3: C-FLAG > EWC-FL in Acc on task-incremental Split-CIFAR10 at every ζ ∈ {0.1, 1, 1e5}")
def _c11(nums: Numbers) -> Verdict:
    if not isinstance(nums, StoreNumbers):
        return Verdict("not reported", note="Fig. 3 is a figure without numbers")
    t7 = nums.acc("7")
    checks = [
        greater(
            f"ζ = {z}",
            "C-FLAG",
            t7.loc["C-FLAG", f"{s} Split-CIFAR10 Acc"],
            "EWC-FL",
            t7.loc["EWC-FL", f"{s} Split-CIFAR10 Acc"],
        )
        for z, s in (("0.1", "non-IID"), ("1e5", "IID"))
    ]
    acc = nums.continual_acc("cflag_fig3_cifar10_zeta1")
    checks.insert(
        1, greater("ζ = 1", "C-FLAG", acc.get("C-FLAG", float("nan")), "EWC-FL", acc.get("EWC-FL", float("nan")))
    )
    return judge(checks)


def _not_above(context: str, left: str, a: float, right: str, b: float) -> Check:
    """The check ``a ≤ b`` written with its numbers (a tie passes: see C12)."""
    if math.isnan(a) or math.isnan(b):
        return Check(f"{context}: {left} vs {right} missing", None)
    ok = bool(a <= b)
    return Check(f"{context}: {left} {a:.2f} {'≤' if ok else '>'} {right} {b:.2f}", ok)


@claim(
    "cflag",
    "C12",
    "Fig. 5 (right), rated weak (notes: report, don't gate): as C-FLAG's memory per task grows "
    "over {50, 150, 200, 300}, Acc decreases on task-incremental Split-CIFAR10 and increases on Split-CIFAR100 "
    "(IID): no step the other way, and Acc at 300 below (C10) / above (C100) Acc at 50",
)
def _c12(nums: Numbers) -> Verdict:
    """Ties between neighbouring points pass: at a scale where a client's whole task already fits in
    the smaller memory the two points are the same run."""
    if not isinstance(nums, StoreNumbers):
        return Verdict("not reported", note="Fig. 5 is a figure without numbers")
    checks = []
    for data, name, falls in (("cifar10", "Split-CIFAR10", True), ("cifar100", "Split-CIFAR100", False)):
        acc = {m: nums.continual_acc(f"cflag_ti_{data}_iid--per_task-{m}").get("C-FLAG", math.nan) for m in MEMORY}
        for small, large in zip(MEMORY, MEMORY[1:]):
            below, above = (large, small) if falls else (small, large)  # the side the claim expects lower
            checks.append(_not_above(f"{name} m {small}→{large}", f"m={below}", acc[below], f"m={above}", acc[above]))
        below, above = (MEMORY[-1], MEMORY[0]) if falls else (MEMORY[0], MEMORY[-1])
        checks.append(greater(f"{name} m {MEMORY[0]}→{MEMORY[-1]}", f"m={above}", acc[above], f"m={below}", acc[below]))
    return judge(checks)
