#!/usr/bin/env python3
"""Issue 20 item 3: run-to-run noise of the Titan X micro measurements at the decisive
candidates (compute-bound kernels at 1088/810 MHz), against their slack to the 5 % bound
(docs/dvfs.md, "Measurement noise at the decisive candidates"). Diagnostic; chooses nothing.

The dataset has no repeated runs (one row per kernel and setting, as upstream's
aggregated_dataset_gtxtitanx.csv), so the noise of one measurement is estimated from
three internal replications that the physics provides:

  mem-ratio   for a compute-bound kernel the time does not depend on the memory clock:
              log t(f, 810) - log t(f, 3505), minus its kernel's mean over the 16 clocks,
              has variance 2 sigma^2 (two independent measurements)
  smooth      for a compute-bound kernel at one memory clock, log t is a smooth function
              of the core clock: residuals of a quadratic in 1/f over the 16 clocks,
              scaled by sqrt(n / (n - 3))
  twins       kernels that differ only by a launch parameter that does not change the
              work (L2_2048_{1,8,32}, L2_512_*, L2_8192_*, Shared_*...): the spread of
              log t across the twins at one setting, about their mean over the settings

  python3 scripts/analysis/titanx_noise.py ../shared/datasets/titanx-dvfs/micro_140.csv
  python3 scripts/analysis/titanx_noise.py ../shared/datasets/titanx-dvfs/micro_140.csv \
      tab_all.jl tab_3.jl   # also: the plan's predictions there (guard20_variants.py dumps)
"""
import csv
import json
import os
import sys
from collections import defaultdict

import numpy as np

B = 0.05


def main():
    t = {}
    for r in csv.DictReader(open(sys.argv[1])):
        t[(r["benchmark"], int(r["mem_clock_mhz"]), int(r["core_clock_mhz"]))] = float(r["time_s"])
    names = sorted({k[0] for k in t})
    clocks = sorted({k[2] for k in t})
    reps = defaultdict(int)
    for k in t:
        reps[k] += 1
    print(f"{len(t)} rows, {len(names)} kernels, {len(clocks)} core clocks x 2 memory clocks; "
          f"settings measured more than once: {sum(v > 1 for v in reps.values())}")
    # the planner's rule (training-data form): compute-bound when t*f grows under 1 % from
    # 595 to 861 MHz at 810 MHz
    cb = [n for n in names if abs(t[(n, 810, 861)] * 861 / (t[(n, 810, 595)] * 595) - 1) < 0.01]
    print(f"compute-bound kernels (t*f within 1 % from 595 to 861 MHz at 810 MHz): {len(cb)}")

    # mem-ratio
    dev = []
    for n in cb:
        lr = np.array([np.log(t[(n, 810, f)] / t[(n, 3505, f)]) for f in clocks])
        dev += list(lr - lr.mean())
    dev = np.array(dev)
    s_ratio = np.sqrt(np.mean(dev ** 2) * 16 / 15 / 2)
    # robust: MAD
    s_ratio_mad = 1.4826 * np.median(np.abs(dev)) / np.sqrt(2)
    # smooth
    res = []
    res1088 = []
    for n in cb:
        for m in (810, 3505):
            x = 1.0 / np.array(clocks, float)
            y = np.log([t[(n, m, f)] for f in clocks])
            c = np.polyfit(x, y, 2)
            r = (y - np.polyval(c, x)) * np.sqrt(16 / 13)
            res += list(r)
            if m == 810:
                res1088.append(r[clocks.index(1088)])
    res = np.array(res)
    # split the smooth residuals into a part common to every compute-bound kernel at one
    # setting (the clock's own deficit: a setting-level effect) and the kernel's own part
    Rm = res.reshape(len(cb), 2, 16)
    common = Rm.mean(axis=0)
    own = Rm - common
    corr = np.sqrt(len(cb) / (len(cb) - 1))
    print("smooth-in-f residuals of the compute-bound kernels, split (relative sd):")
    for j, m in enumerate((810, 3505)):
        print(f"  memory {m} MHz: common part per setting sd {common[j].std(ddof=1) * 100:.3f} % "
              f"(at 1088: {common[j][clocks.index(1088)] * 100:+.3f} %, at 1164: "
              f"{common[j][clocks.index(1164)] * 100:+.3f} %); kernel's own part sd "
              f"{np.sqrt(np.mean(own[:, j] ** 2)) * corr * 100:.3f} % (at 1088: "
              f"{np.sqrt(np.mean(own[:, j, clocks.index(1088)] ** 2)) * corr * 100:.3f} %)")
    s_smooth = np.sqrt(np.mean(res ** 2))
    s_smooth_mad = 1.4826 * np.median(np.abs(res))
    # twins: groups of names equal up to the last '_' field, every member of the same class
    groups = defaultdict(list)
    for n in names:
        if "_" in n:
            groups[n.rsplit("_", 1)[0]].append(n)
    tw = []
    tw_groups = []
    for gname, mem in sorted(groups.items()):
        if len(mem) < 2:
            continue
        logs = np.array([[np.log(t[(n, m, f)]) for m in (810, 3505) for f in clocks] for n in mem])
        # twins must do the same work: same times within 2 % everywhere
        if np.max(np.abs(logs - logs.mean(axis=0))) > 0.02:
            continue
        d = logs - logs.mean(axis=0)
        d = d - d.mean(axis=1, keepdims=True)  # a constant per kernel is not noise
        k, s = logs.shape
        tw += list((d * np.sqrt(k / (k - 1) * s / (s - 1))).ravel())
        tw_groups.append(f"{gname}_* ({len(mem)})")
    tw = np.array(tw)
    s_twin = np.sqrt(np.mean(tw ** 2)) if len(tw) else float("nan")
    print("sigma of one time measurement (relative), three estimates:")
    print(f"  mem-ratio, {len(cb)} compute-bound kernels x 16 clocks: {s_ratio * 100:.3f} % "
          f"(MAD {s_ratio_mad * 100:.3f} %)")
    print(f"  smooth in f, same kernels, both memory clocks: {s_smooth * 100:.3f} % "
          f"(MAD {s_smooth_mad * 100:.3f} %); at 1088/810 MHz alone: "
          f"{np.sqrt(np.mean(np.array(res1088) ** 2)) * 100:.3f} %")
    print(f"  twins ({', '.join(tw_groups)}): {s_twin * 100:.3f} %")
    i88, i64 = clocks.index(1088), clocks.index(1164)
    own88 = np.sqrt(np.mean(own[:, 0, i88] ** 2)) * corr
    own64 = np.sqrt(np.mean(own[:, 1, i64] ** 2)) * corr
    s_slow = np.sqrt(own88 ** 2 + own64 ** 2)
    print(f"noise of a measured slowdown t(1088/810)/t(1164/3505) - 1 (two measurements): "
          f"{s_slow * 100:.2f} % (kernels' own parts {own88 * 100:.3f} % at 1088/810 and "
          f"{own64 * 100:.3f} % at 1164/3505); from the mem-ratio sigma: "
          f"{np.sqrt(2) * s_ratio * 100:.2f} %")
    slow = np.array([t[(n, 810, 1088)] / t[(n, 3505, 1164)] - 1 for n in cb])
    slack = B - slow
    print(f"decisive candidates: {len(cb)} compute-bound kernels at 1088/810 MHz: measured "
          f"slowdown mean {slow.mean() * 100:.2f} %, sd {slow.std(ddof=1) * 100:.2f} %, "
          f"{np.sum(slow > B)} above 5 %")
    print(f"  measured slack to the bound: median |slack| {np.median(np.abs(slack)) * 100:.2f} %; "
          f"within 1 noise sd: {np.sum(np.abs(slack) < s_slow)}, within 2: "
          f"{np.sum(np.abs(slack) < 2 * s_slow)} of {len(cb)}")
    # the part of the spread across kernels that noise explains
    print(f"  spread of the slowdown across those kernels {slow.std(ddof=1) * 100:.2f} % vs "
          f"noise {s_slow * 100:.2f} %: noise explains "
          f"{min(1, s_slow ** 2 / slow.var(ddof=1)) * 100:.0f} % of its variance")
    # chance a kernel whose true slowdown is the class mean lands above the bound
    from math import erf, sqrt
    z = (B - slow.mean()) / s_slow
    print(f"  a kernel at the class mean ({slow.mean() * 100:.2f} %) lands above 5 % with "
          f"probability {0.5 * (1 - erf(z / sqrt(2))):.2f} (normal noise)")
    if len(sys.argv) >= 4:
        predictions(t, cb, sys.argv[2], sys.argv[3])


def predictions(t, cb, tab_all, tab_3):
    """The plan's predicted slowdown at 1088/810 MHz against the measured one, per fold
    (evaluation data: describes, chooses nothing)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import guard20_variants as g
    tabs = {}
    for name, path in (("all", tab_all), ("3", tab_3)):
        tabs[name] = {r["w"]: r for r in map(json.loads, open(path))}
    k = {"core_freq_mhz": 1088.0, "mem_freq_mhz": 810.0}

    def pred(tab):
        ref = [x for x in tab["c"] if g.same(x[0], tab["ref"])][0]
        return [x for x in tab["c"] if g.same(x[0], k)][0][1] / ref[1] - 1

    for fold in ("fadd_*", "others"):
        rows, oracle = [], 0
        for n in cb:
            if n.startswith("fadd_") != (fold == "fadd_*"):
                continue
            ta = tabs["all"][n]
            meas = [p for p in ta["pts"] if g.same(p[0], k)][0][1] / ta["t_ref"] - 1
            within = [p for p in ta["pts"] if p[1] / ta["t_ref"] - 1 <= B + 1e-12]
            oracle += g.same(min(within, key=lambda p: p[2])[0], k)
            rows.append((meas, pred(ta), pred(tabs["3"][n])))
        r = np.array(rows)
        over = r[:, 0] > B
        print(f"{fold}: {len(r)} compute-bound kernels, measured oracle at 1088/810 MHz: "
              f"{oracle}; predicted vs measured slowdown there: corr "
              f"{np.corrcoef(r[:, 0], r[:, 1])[0, 1]:.2f} (every setting, residual sd "
              f"{(r[:, 0] - r[:, 1]).std() * 100:.2f} %), "
              f"{np.corrcoef(r[:, 0], r[:, 2])[0, 1]:.2f} (3 clocks); measured above 5 %: "
              f"{over.sum()}, of them predicted above: {(over & (r[:, 1] > B)).sum()}, "
              f"predicted above in all: {(r[:, 1] > B).sum()}")


if __name__ == "__main__":
    main()
