#!/usr/bin/env python3
"""Times supervised PCA written with scikit-learn, scipy and numpy on the data that
`fit-speed-bench` (src/bin/fit-speed-bench.rs) wrote, for the ratio it prints.

    python3 scripts/fit_speed_sklearn.py X.npy Y.npy [--repeats 3] [--rho-min 0.3]
        [--coef-min-frac 0.05] [--variance-kept 0.9] [--per-component 2] [--max-features 8]

X.npy: float64 (n_samples, n_features); Y.npy: float64 (n_samples,). The pipeline follows
powerperf's `fit_spca_matrix` step by step (shared/DESIGN.md, "Supervised PCA"):

0. StandardScaler (population standard deviation); constant columns dropped.
1-2. Spearman rho of each column with y: average ranks (scipy.stats.rankdata, axis=0, the
   ranking scipy.stats.spearmanr uses), Pearson of the ranks; drop |rho| < rho_min.
3-4. LinearRegression on the kept standardised columns; drop |coef| < coef_min_frac x largest.
5. PCA (full SVD) of the remaining columns; leading components up to variance_kept.
6. per_component largest |loadings| per leading component (at most max_features);
   LinearRegression on them.

(powerperf's step 0 also drops collinear columns; the synthetic data has none, so that check
is left out here, which can only make scikit-learn's time smaller.)

Prints the run times and, last, `seconds=<median> kept=<c03,c10,...>` (column j is `cJJ`,
the names the bench uses). Times: median of --repeats runs after one warm-up run, wall clock
(time.perf_counter), loading the files not included.
"""

import argparse
import os
import statistics
import time

import numpy as np
from scipy.stats import rankdata
from sklearn.decomposition import PCA
from sklearn.linear_model import LinearRegression
from sklearn.preprocessing import StandardScaler


def spca(x, y, a):
    z = StandardScaler().fit_transform(x)
    sd = x.std(axis=0)
    cand = np.flatnonzero(sd > 0)
    # 1-2. Spearman.
    rx = rankdata(x[:, cand], axis=0)
    ry = rankdata(y)
    rx -= rx.mean(axis=0)
    ry -= ry.mean()
    rho = (rx.T @ ry) / np.sqrt((rx * rx).sum(axis=0) * (ry @ ry))
    cur = cand[np.abs(rho) >= a.rho_min]
    if cur.size == 0:
        cur = cand[[np.argmax(np.abs(rho))]]
    # 3-4. Regression, negligible coefficients dropped.
    coef = LinearRegression().fit(z[:, cur], y).coef_
    cur = cur[np.abs(coef) >= a.coef_min_frac * np.abs(coef).max()]
    # 5-6. PCA, largest loadings of the leading components.
    if cur.size > 1:
        pca = PCA(svd_solver="full").fit(z[:, cur])
        cum = np.cumsum(pca.explained_variance_ratio_)
        lead = int(np.searchsorted(cum, a.variance_kept) + 1)
        chosen = []
        for comp in pca.components_[: min(lead, cur.size)]:
            for i in np.argsort(-np.abs(comp), kind="stable")[: a.per_component]:
                if len(chosen) < a.max_features and i not in chosen:
                    chosen.append(int(i))
        cur = cur[chosen]
    final = LinearRegression().fit(z[:, cur], y)
    return cur, final


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("x")
    p.add_argument("y")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--rho-min", type=float, default=0.3)
    p.add_argument("--coef-min-frac", type=float, default=0.05)
    p.add_argument("--variance-kept", type=float, default=0.9)
    p.add_argument("--per-component", type=int, default=2)
    p.add_argument("--max-features", type=int, default=8)
    a = p.parse_args()
    x = np.load(a.x)
    y = np.load(a.y)
    times = []
    for r in range(a.repeats + 1):
        t = time.perf_counter()
        cur, _ = spca(x, y, a)
        s = time.perf_counter() - t
        if r > 0:
            times.append(s)
    print(
        f"scikit-learn {__import__('sklearn').__version__}, numpy {np.__version__}, "
        f"{os.cpu_count()} cpus: {x.shape[0]} x {x.shape[1]}, runs (s): "
        + " ".join(f"{t:.3f}" for t in times)
    )
    kept = ",".join(f"c{j:02d}" for j in cur)
    print(f"seconds={statistics.median(times):.4f} kept={kept}")


if __name__ == "__main__":
    main()
