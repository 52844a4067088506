"""C-FLAG's claims (notes §9), judged on the task-incremental Tables 2/3 (one 3-seed run set, Table 7)
and the class-incremental Table 8: Acc and Forgetting in percent (ours: mean over the seeds that
recorded every task)."""

from __future__ import annotations

from fedbench.report.claims.base import NOISE_K, Numbers, StoreNumbers, Verdict, claim, close, greater, judge

DATASETS = ("Split-CIFAR10", "Split-CIFAR100", "Split-TinyImageNet")
EWC_TOL = 5.0  # points: "EWC-FL ≈ Fine-FL"; a floor: with seeds, NOISE_K σ of the difference when larger


@claim("cflag", "C1", "IID task-incremental: C-FLAG has the highest Acc and the lowest Forgetting of all methods on "
       "every dataset (Table 3)")
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
    return judge([greater(f"{d} Fgt", o, t3.loc[o, f"{d} Fgt"], "C-FLAG", t3.loc["C-FLAG", f"{d} Fgt"])
                  for d in DATASETS for o in ("Fine-FL", "EWC-FL")])


@claim("cflag", "C4", f"EWC-FL ≈ Fine-FL: Acc within max({EWC_TOL:g} points, {NOISE_K:g}σ) in every column of "
       "Tables 2 and 3")
def _c4(nums: Numbers) -> Verdict:
    checks = []
    for table, setting in (("2", "non-IID"), ("3", "IID")):
        t, std = nums.acc(table), nums.acc_std(table)
        for d in DATASETS:
            col = f"{d} Acc"
            checks.append(close(f"{setting} {d}", "EWC-FL", t.loc["EWC-FL", col], "Fine-FL", t.loc["Fine-FL", col], EWC_TOL,
                                (std.loc["EWC-FL", col], std.loc["Fine-FL", col])))
    return judge(checks)


@claim("cflag", "C5", "IID Acc > non-IID Acc for every method on every dataset (Table 7)")
def _c5(nums: Numbers) -> Verdict:
    t7 = nums.acc("7")
    return judge([greater(f"{d} {m}", "IID", t7.loc[m, f"IID {d} Acc"], "non-IID", t7.loc[m, f"non-IID {d} Acc"])
                  for d in DATASETS for m in t7.index])


@claim("cflag", "C6", "C-FLAG > NCCL-FL in Acc on Split-CIFAR100, IID and non-IID (Table 7)")
def _c6(nums: Numbers) -> Verdict:
    t7 = nums.acc("7")
    return judge([greater(f"{s} Split-CIFAR100", "C-FLAG", t7.loc["C-FLAG", f"{s} Split-CIFAR100 Acc"], "NCCL-FL",
                          t7.loc["NCCL-FL", f"{s} Split-CIFAR100 Acc"]) for s in ("non-IID", "IID")])


@claim("cflag", "C13", "Class-incremental, non-IID Split-CIFAR10: C-FLAG has the best Acc (Table 8)")
def _c13(nums: Numbers) -> Verdict:
    t8 = nums.acc("8")
    acc = t8["non-IID Split-CIFAR10 Acc"]
    return judge([greater("non-IID Split-CIFAR10", "C-FLAG", acc["C-FLAG"], o, acc[o]) for o in t8.index if o != "C-FLAG"])


@claim("cflag", "C11", "Fig. 3: C-FLAG > EWC-FL in Acc on task-incremental Split-CIFAR10 at every ζ ∈ {0.1, 1, 1e5}")
def _c11(nums: Numbers) -> Verdict:
    if not isinstance(nums, StoreNumbers):
        return Verdict("not reported", note="Fig. 3 is a figure without numbers")
    t7 = nums.acc("7")
    checks = [greater(f"ζ = {z}", "C-FLAG", t7.loc["C-FLAG", f"{s} Split-CIFAR10 Acc"], "EWC-FL",
                      t7.loc["EWC-FL", f"{s} Split-CIFAR10 Acc"]) for z, s in (("0.1", "non-IID"), ("1e5", "IID"))]
    acc = nums.continual_acc("cflag_fig3_cifar10_zeta1")
    checks.insert(1, greater("ζ = 1", "C-FLAG", acc.get("C-FLAG", float("nan")), "EWC-FL", acc.get("EWC-FL", float("nan"))))
    return judge(checks)
