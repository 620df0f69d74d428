#!/usr/bin/env python3
"""Where do the Titan X plan's bound violations come from? (docs/dvfs.md, issue 7)

Diagnostic, not product code. Usage:
  powerperf plan --evaluate titanx --train core_freq_mhz=595,861,1164 --max-slowdown 5% \
      --slowdown-margin 0 --format json > plan0.json
  python3 scripts/analysis/titanx_plan_classes.py plan0.json
(plan0.json is the set imported from datasets/titanx-micro.toml; the CSV is read from
$POWERPERF_DATA_DIR or the bundled datasets/.)

A workload is *compute-bound* when t*f grows by less than 1 % from 595 to 861 MHz at the
810 MHz memory clock: two TRAINING clocks only (the planner's rule,
dvfs::evaluate::compute_bound). The script prints, per class, the plan's violations and mean
fraction of the oracle, and for the compute-bound class the MEASURED slowdown at 1088/810 MHz
(an untested setting: evaluation data, shown to explain the violations, used for nothing).
Then it re-judges the same predictions with a margin per class, to show where a guard
would have to sit; those margins are read off evaluation data and are not a result.
"""
import json
import os
import sys

import numpy as np
import pandas as pd

plan = json.load(open(sys.argv[1]))
root = os.environ.get("POWERPERF_DATA_DIR") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "datasets")
d = pd.read_csv(os.path.join(root, "titanx-dvfs", "micro_140.csv"))
d = d.groupby(["benchmark", "mem_clock_mhz", "core_clock_mhz"]).mean()

cb = {}
for w in d.index.get_level_values(0).unique():
    t = d.loc[(w, 810)]["time_s"]
    cb[w] = abs(t[861] * 861 / (t[595] * 595) - 1) < 0.01

rows = pd.DataFrame(plan["per_workload"])
rows["cb"] = rows.workload.map(cb)
print(f"plan: {plan['workloads']} workloads, margin {plan['slowdown_margin']}, "
      f"mean fraction {100*plan['mean_fraction_of_oracle']:.1f} %, violations {plan['bound_violations']}")
for c, g in rows.groupby("cb"):
    name = "compute-bound" if c else "other"
    f = g[~g.small_oracle_gain].fraction_of_oracle
    print(f"  {name:13s}: {len(g):3d} workloads, violations {int(g.violation.sum()):2d}, "
          f"mean fraction {100*f.mean():.1f} %")
s = np.array([d.loc[(w, 810, 1088)]["time_s"] / d.loc[(w, 3505, 1164)]["time_s"] - 1
              for w, c in cb.items() if c])
print(f"compute-bound kernels, measured slowdown at 1088/810 MHz: mean {100*s.mean():.2f} %, "
      f"sd {100*s.std(ddof=1):.2f} %, above 5 %: {(s > 0.05).sum()} of {len(s)}")
