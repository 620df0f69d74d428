#!/usr/bin/env python3
"""Issue 20 item 3: the pre-registered error model for the *count* (`risk-count`,
docs/dvfs.md, "An error model for the count"), replayed on the guard's inputs as powerperf
computes them (the dumps of scripts/analysis/guard20_variants.py, same commands):

  python3 scripts/analysis/guard20_count.py tab_all.jl err_all.jl   # production path
  python3 scripts/analysis/guard20_count.py tab_3.jl err_3.jl       # 3-clock split
  python3 scripts/analysis/guard20_count.py --selftest              # synthetic checks

Diagnostic, not product code. The model, every constant fixed in the pre-registration:

1. setting-level common part: blocks (setting, class) of the training errors with at least
   MIN_BLOCK errors; method-of-moments between-block variance tau^2, each block's mean
   shrunk toward the grand mean (empirical Bayes, Efron & Morris 1975): d = (1 - B)(mean - grand)
2. workload part conditioned on the predicted slowdown: the K = 20 / risk training errors
   nearest in s_pred, each minus its block's d; p_j(delta) = share above b - s_j - delta
3. the count: each plan block (chosen setting, predicted class) draws delta uniformly from
   the training blocks' d (a bootstrap of whole settings); violations independent given
   the draws; R replicates from SEED, common random numbers across choices
4. budget: the (1 - risk) quantile of the count at most risk * W
5. choice: Lagrangian on the mean P with the smallest lambda meeting 4, then one greedy
   pass (workloads by the share they would gain, each to its best candidate that fits)
"""
import json
import sys

import numpy as np

import guard20_variants as g

B = g.B
RISK = g.RISK
K = int(round(20 / RISK))
MIN_BLOCK = 20
R = 2000
SEED = 20
LEVEL = 1 - RISK


def block_effects(errs):
    """Shrunk effect d of every block (setting, class) with >= MIN_BLOCK errors; the pool
    of effects (array) and tau^2."""
    blocks = {}
    for e in errs:
        blocks.setdefault((g.key(e["k"]), e["cb"]), []).append(e["e"])
    big = {b: np.array(v) for b, v in blocks.items() if len(v) >= MIN_BLOCK}
    if not big:
        return {}, np.array([0.0]), 0.0
    means = {b: v.mean() for b, v in big.items()}
    samp = {b: v.var(ddof=1) / len(v) for b, v in big.items()}
    mv = np.array(list(means.values()))
    grand = mv.mean()
    tau2 = max(0.0, (mv.var(ddof=1) if len(mv) > 1 else 0.0) - np.mean(list(samp.values())))
    d = {}
    for b in big:
        shrink = 1.0 if tau2 == 0 else samp[b] / (samp[b] + tau2)
        d[b] = (1 - shrink) * (means[b] - grand)
    return d, np.array([d[b] for b in sorted(d)]), tau2


class Model:
    def __init__(self, errs):
        self.d, self.pool, self.tau2 = block_effects(errs)
        self.S = np.array([e["s"] for e in errs])
        self.Rres = np.array([e["e"] - self.d.get((g.key(e["k"]), e["cb"]), 0.0) for e in errs])

    def pvec(self, s):
        """p_j(delta) for every delta of the pool."""
        j = np.argsort(np.abs(self.S - s), kind="stable")[:min(K, len(self.S))]
        r = self.Rres[j]
        return np.array([np.mean(r > B - s - dl) for dl in self.pool])


def options(tables, model):
    """Per workload: candidates predicted within the bound, each (share, Pbar, pvec, block)."""
    out, idx = [], []
    zero = np.zeros(len(model.pool))
    for t in tables:
        rc = [x for x in t["c"] if g.same(x[0], t["ref"])][0]
        o, ix = [], []
        for i, (k, tt, ee) in enumerate(t["c"]):
            is_ref = g.same(k, t["ref"])
            s = tt / rc[1] - 1
            if not is_ref and s > B + 1e-12:
                continue
            pv = zero if is_ref else model.pvec(s)
            o.append([1 - ee / rc[2], float(pv.mean()), pv, (g.key(k), g.cand_cb(t, i))])
            ix.append(i)
        best = max([x[0] for x in o] + [0.005])
        for x in o:
            x[0] /= best
        out.append(o)
        idx.append(ix)
    return out, idx


class Count:
    """The simulated count of violations of a choice, with common random numbers."""

    def __init__(self, opts, npool):
        rng = np.random.default_rng(SEED)
        keys = sorted({x[3] for o in opts for x in o})
        self.M = {k: rng.integers(0, npool, R) for k in keys}
        self.U = rng.random((R, len(opts)))
        self.opts = opts

    def column(self, w, c):
        x = self.opts[w][c]
        return self.U[:, w] < x[2][self.M[x[3]]]

    def matrix(self, choice):
        return np.stack([self.column(w, c) for w, c in enumerate(choice)], axis=1)

    @staticmethod
    def quantile(counts):
        return float(np.quantile(counts, LEVEL, method="inverted_cdf"))


def lagrange(opts, feasible):
    def at(lam):
        ch = []
        for o in opts:
            bi, bv = 0, None
            for i, x in enumerate(o):
                v = (x[0] - lam * x[1], -x[1])
                if bv is None or v >= bv:
                    bi, bv = i, v
            ch.append(bi)
        return ch
    c0 = at(0.0)
    if feasible(c0):
        return c0
    lo, hi = 0.0, 1.0
    while not feasible(at(hi)) and hi < 1e12:
        lo, hi = hi, hi * 2
    for _ in range(60):
        mid = (lo + hi) / 2
        if feasible(at(mid)):
            hi = mid
        else:
            lo = mid
    return at(hi)


def choose(opts, npool, budget_on="quantile", greedy=True):
    W = len(opts)
    budget = RISK * W
    if budget_on == "mean":
        ch = lagrange(opts, lambda c: sum(opts[w][i][1] for w, i in enumerate(c)) <= budget + 1e-12)
        return ch, Count(opts, npool)
    cnt = Count(opts, npool)
    ch = lagrange(opts, lambda c: cnt.quantile(cnt.matrix(c).sum(axis=1)) <= budget + 1e-12)
    if greedy:
        V = cnt.matrix(ch)
        N = V.sum(axis=1)
        gain = [max(x[0] for x in opts[w]) - opts[w][ch[w]][0] for w in range(W)]
        for w in sorted(range(W), key=lambda w: -gain[w]):
            cur = opts[w][ch[w]][0]
            for i in sorted(range(len(opts[w])), key=lambda i: -opts[w][i][0]):
                if opts[w][i][0] <= cur:
                    break
                col = cnt.column(w, i)
                N2 = N - V[:, w] + col
                if cnt.quantile(N2) <= budget + 1e-12:
                    V[:, w] = col
                    N = N2
                    ch[w] = i
                    break
    return ch, cnt


def run(tables, errs, judged, **kw):
    tj = [t for t in tables if judged(t["w"])]
    ej = [e for e in errs if not judged(e["w"])]
    model = Model(ej)
    o, ix = options(tj, model)
    ch, cnt = choose(o, len(model.pool), **kw)
    n = cnt.matrix(ch).sum(axis=1)
    fr, v = g.judge(tj, ix, ch)
    e_mean = sum(o[w][c][1] for w, c in enumerate(ch))
    blocks = {}
    for w, c in enumerate(ch):
        if o[w][c][1] > 0:
            blocks[o[w][c][3]] = blocks.get(o[w][c][3], 0) + 1
    return dict(fr=fr, v=v, W=len(tj), E=e_mean, q=cnt.quantile(n), tau2=model.tau2,
                npool=len(model.pool), nerr=len(ej), blocks=blocks)


def selftest():
    """Synthetic checks with known answers (no Titan X data)."""
    # 1. block effects: 30 blocks of 50 errors, true block sd 0.01, within sd 0.002
    rng = np.random.default_rng(1)
    errs = []
    for b in range(30):
        u = rng.normal(0, 0.01)
        for _ in range(50):
            errs.append({"e": u + rng.normal(0, 0.002), "s": 0.03, "k": {"f": float(b)},
                         "cb": True, "w": "x"})
    d, pool, tau2 = block_effects(errs)
    assert 0.5e-4 < tau2 < 2e-4, tau2  # true 1e-4
    assert len(pool) == 30
    # no block effect -> tau2 0 and every d 0
    errs0 = [dict(e, e=rng.normal(0, 0.002)) for e in errs]
    _, pool0, tau20 = block_effects(errs0)
    assert tau20 < 2e-6 and np.all(np.abs(pool0) < 5e-4), (tau20, pool0)
    # 2. count quantile: 20 workloads each with one risky candidate p=0.5 in one block,
    #    no block effect (pool [0]) -> count ~ Binomial(20, 0.5); q95 = 14
    opts = [[[0.0, 0.0, np.array([0.0]), ("ref", False)],
             [1.0, 0.5, np.array([0.5]), ("k", True)]] for _ in range(20)]
    cnt = Count(opts, 1)
    q = cnt.quantile(cnt.matrix([1] * 20).sum(axis=1))
    assert q == 14, q
    # 3. perfectly correlated: pool {0, 1} (p = 0 or 1 by the block draw) -> count is 0 or W
    opts = [[[0.0, 0.0, np.array([0.0, 0.0]), ("ref", False)],
             [1.0, 0.5, np.array([0.0, 1.0]), ("k", True)]] for _ in range(20)]
    cnt = Count(opts, 2)
    n = cnt.matrix([1] * 20).sum(axis=1)
    assert set(np.unique(n)) <= {0, 20}
    # the budget (1 of 20) allows one workload on that block (its count is 0 or 1), not two;
    # but a spread over separate blocks with p = 0.01 each: 20 workloads with independent
    # p = 0.01 -> q95 of Binomial(20, 0.01) = 1 <= 1: all may go
    ch, _ = choose(opts, 2)
    assert sum(ch) == 1, ch
    opts = [[[0.0, 0.0, np.array([0.0]), ("ref", False)],
             [1.0, 0.01, np.array([0.01]), (f"k{w}", True)]] for w in range(20)]
    ch, _ = choose(opts, 1)
    assert ch == [1] * 20, ch
    # 4. greedy spread: two settings with correlated risk; stacking all on one breaks the
    #    budget, so some stay safe
    opts = [[[0.0, 0.0, np.array([0.0, 0.0]), ("ref", False)],
             [1.0, 0.05, np.array([0.0, 0.1]), ("a", True)],
             [0.9, 0.05, np.array([0.0, 0.1]), ("b", True)]] for _ in range(40)]
    ch, cnt = choose(opts, 2)
    n = cnt.matrix(ch).sum(axis=1)
    assert cnt.quantile(n) <= RISK * 40
    print("selftest ok")


def main():
    if sys.argv[1:] == ["--selftest"]:
        selftest()
        return
    tables = [json.loads(line) for line in open(sys.argv[1])]
    errors = [json.loads(line) for line in open(sys.argv[2])]
    print(f"{len(tables)} workloads, {len(errors)} errors; K={K}, min block {MIN_BLOCK}, "
          f"R={R}, seed {SEED}, level {LEVEL:g}")
    rows = (("risk-count (pre-registered)", dict()),
            ("diagnostic: same, no greedy pass", dict(greedy=False)),
            ("diagnostic: same errors, budget on the mean", dict(budget_on="mean")))
    print("| model | fadd_* (errors from others) | others (errors from fadd_*) | both folds |")
    print("|---|---|---|---|")
    detail = []
    for name, kw in rows:
        cells, allfr, allv = [], [], 0
        for fname, judged in (("fadd_*", g.is_fadd), ("others", g.is_other)):
            r = run(tables, errors, judged, **kw)
            allfr += r["fr"]
            allv += r["v"]
            cells.append(f"{np.mean(r['fr']) * 100:.1f} % {r['v']}/{r['W']} "
                         f"(E {r['E']:.2f}, q95 {r['q']:g})")
            detail.append((name, fname, r))
        print(f"| {name} | {cells[0]} | {cells[1]} | {np.mean(allfr) * 100:.1f} % "
              f"{allv}/{len(allfr)} |")
    for name, fname, r in detail:
        top = sorted(r["blocks"].items(), key=lambda x: -x[1])[:4]
        print(f"  {name}, {fname}: {r['nerr']} errors, {r['npool']} block effects, "
              f"tau {np.sqrt(r['tau2']) * 100:.3f} %; risky plan blocks "
              + ", ".join(f"{dict(k[0]).get('core_freq_mhz'):g}/{dict(k[0]).get('mem_freq_mhz', dict(k[0]))}"
                          f"{' cb' if k[1] else ''}: {c}" for k, c in top))


if __name__ == "__main__":
    main()
