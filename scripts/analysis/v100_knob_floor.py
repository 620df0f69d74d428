#!/usr/bin/env python3
"""How far can ANY model get on the V100 power knob holdout (train 510/945/1380 MHz)?

Diagnostic for docs/models.md (issue 6), not product code. Reads the shared dataset
(the bundled datasets/v100-dcgm-sweep/spec_21apps.csv, or $POWERPERF_DATA_DIR) and prints:
  1. the dense-sweep noise floor: each point predicted from its two neighbouring clocks
     (7.5 MHz away), in sample;
  2. per application, an affine fit a + b*g(f) through the three training clocks, where g is
     the best shape SHARED by all 21 applications, learned from ALL 117 clocks (cheating:
     it sees the held-out clocks), scored at the 114 held-out clocks;
  3. the same with the three training values replaced by a cubic fitted to all 117 clocks
     of the application (denoised training points, cheating twice).
Needs numpy and pandas.
"""
import os
import numpy as np
import pandas as pd

root = os.environ.get("POWERPERF_DATA_DIR") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "datasets")
d = pd.read_csv(os.path.join(root, "v100-dcgm-sweep", "spec_21apps.csv"))
P = d.pivot_table(index="application", columns="sm_app_clock", values="power_usage")
F = P.columns.values.astype(float)
X = P.values
train = np.isin(F, [510, 945, 1380])

# 1. neighbour interpolation (dense floor)
e = []
for x in X:
    for k in range(1, len(F) - 1):
        w = (F[k] - F[k - 1]) / (F[k + 1] - F[k - 1])
        e.append(abs(x[k - 1] * (1 - w) + x[k + 1] * w - x[k]) / x[k])
e = np.array(e)
print(f"1. neighbour interpolation, in sample: MAPE {100*e.mean():.2f} %, median {100*np.median(e):.2f} %")

# 2. best shared shape g from all clocks: alternating least squares of X ~ a + b g
g = (F / F.max()) ** 2.5
for _ in range(100):
    A = np.vstack([np.ones_like(g), g]).T
    a, b = np.linalg.lstsq(A, X.T, rcond=None)[0]
    g = ((X - a[:, None]) * b[:, None]).sum(0) / (b ** 2).sum()


def score(Y):
    errs = []
    for y, x in zip(Y, X):
        A = np.vstack([np.ones(train.sum()), g[train]]).T
        c = np.linalg.lstsq(A, y[train], rcond=None)[0]
        errs.append((np.abs(c[0] + c[1] * g - x) / x)[~train])
    errs = np.concatenate(errs)
    return 100 * errs.mean(), 100 * np.median(errs)


m, med = score(X)
print(f"2. shared shape from all clocks, affine per application through the 3 training clocks: MAPE {m:.2f} %, median {med:.2f} %")
smooth = np.array([np.polyval(np.polyfit(F, x, 3), F) for x in X])
m, med = score(smooth)
print(f"3. the same with denoised training values (cubic on all clocks): MAPE {m:.2f} %, median {med:.2f} %")
