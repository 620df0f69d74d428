#!/usr/bin/env python3
"""Issue 20 item 3: error models for the risk guard, each judged on held-out workload
classes (docs/dvfs.md, "Guards tried for item 3"). Diagnostic, not product code: none of
the variants here is built into powerperf, and none is the default.

The script replays the planner's risk-budget choice (dvfs::guard::risk_choice with
GuardKind::Risk: shares of the predicted oracle, P = share of errors above b - s_pred,
Lagrangian on sum P <= risk * W, the optional spread term z) on the inputs powerperf
itself computed, dumped by a debugging patch (scripts/analysis/guard20_dump.patch, not
part of the product):

  git apply scripts/analysis/guard20_dump.patch && cargo build -p powerperf
  powerperf import datasets/titanx-micro.toml -o titanx
  T=595,633,671,709,747,785,823,861,899,937,975,1013,1050,1088,1126,1164
  PP_DUMP_ERR=err_all.jl PP_DUMP_TAB=tab_all.jl powerperf plan --evaluate titanx \
      --train core_freq_mhz=$T --cv 10 --max-slowdown 5% --format json > /dev/null
  PP_DUMP_ERR=err_3.jl PP_DUMP_TAB=tab_3.jl powerperf plan --evaluate titanx \
      --train core_freq_mhz=595,861,1164 --max-slowdown 5% --format json > /dev/null
  git apply -R scripts/analysis/guard20_dump.patch
  python3 scripts/analysis/guard20_variants.py tab_all.jl err_all.jl
  python3 scripts/analysis/guard20_variants.py tab_3.jl err_3.jl

(PP_DUMP_ERR is appended to: remove it before a run.) Run without --judge-on, the dump
holds every workload's held-out errors and every workload's predictions; the script makes
the two class folds itself: the errors of the fold's own workloads are dropped, exactly as
`--judge-on` does (the K-fold and leave-one-out refits use every workload's points either
way, so the errors are the same ones). The first line of each table is the default guard
and reproduces `plan --evaluate ... --judge-on` (93.6 % 0/59 and 96.1 % 3/81 on the
production path).

Error definitions:
  measured-ref  e = (t - t_pred) / t_ref, s = t_pred / t_ref - 1 (what powerperf stores)
  ratio         e = t / t_ref - t_pred / t_pred_ref, s = t_pred / t_pred_ref - 1: the error
                of the predicted slowdown itself, with t_pred_ref the full model's
                prediction at the maximum setting (the plan's own reference; the held-out
                refit's would differ only by the points of one fold)
Conditioning (which errors give a candidate's P):
  pooled        all (the default)
  near          errors whose s is in (0, b] (risk-near's selection), all when fewer than 20
  knn400        the 400 = 20 / risk errors whose s is nearest the candidate's
  kernel        Gaussian kernel in s, bandwidth b / 2 (weighted empirical tail)
  setting       errors at the candidate's own setting (knobs), all when fewer than 20
  setting+class the same, of the candidate's class (compute-bound or not, as the planner
                classes it on predictions)
  near-class    near, of the candidate's class
"""
import bisect
import json
import math
import sys

import numpy as np

B = 0.05
RISK = 0.05
OTHERS = ("DP,DRAM,INT,L2,SP,Shared,and_,bfe_,brev_,cos_,cvt_,dp_,ex2_,fma_,fmul_,global_,"
          "iadd_,imad_,imax_,imin_,imul_,int_,isad_,lg2_,mov_,or_,rcp_,rsqrt_,shl_,sin_,sp_,"
          "sqrt_,xor_").split(",")


def is_fadd(w):
    return w.startswith("fadd_")


def is_other(w):
    return any(w.startswith(p) for p in OTHERS)


def same(a, b):
    return len(a) == len(b) and all(abs(a[k] - b.get(k, 1e18)) < 1e-9 for k in a)


def key(k):
    return tuple(sorted(k.items()))


def options(tables, pfun):
    """Per workload: (share of predicted oracle, P, predicted slowdown) of each candidate
    predicted within the bound, as dvfs::guard::risk_choice builds them."""
    opts, idx = [], []
    for t in tables:
        rc = [x for x in t["c"] if same(x[0], t["ref"])][0]
        o, ix = [], []
        for i, (k, tt, ee) in enumerate(t["c"]):
            is_ref = same(k, t["ref"])
            s = tt / rc[1] - 1
            if not is_ref and s > B + 1e-12:
                continue
            p = 0.0 if is_ref else pfun(t, i, s)
            o.append([1 - ee / rc[2], p, s])
            ix.append(i)
        best = max([x[0] for x in o] + [0.005])
        for x in o:
            x[0] /= best
        opts.append(o)
        idx.append(ix)
    return opts, idx


def choose(opts, z=0.0):
    """dvfs::evaluate::guard::risk_budget_choice_with_spread."""
    def at(lam):
        idx, tot, var = [], 0.0, 0.0
        for o in opts:
            bi, bv = 0, None
            for i, (g, p, _) in enumerate(o):
                v = (g - lam * p, -p)
                if bv is None or v >= bv:
                    bi, bv = i, v
            idx.append(bi)
            p = o[bi][1]
            tot += p
            var += p * (1 - p)
        return idx, tot, tot + z * math.sqrt(var)
    budget = RISK * len(opts)
    first = at(0.0)
    if first[2] <= budget + 1e-12:
        return first[0], first[1]
    lo, hi = 0.0, 1.0
    while at(hi)[2] > budget + 1e-12 and hi < 1e12:
        lo, hi = hi, hi * 2
    for _ in range(60):
        mid = (lo + hi) / 2
        if at(mid)[2] > budget + 1e-12:
            lo = mid
        else:
            hi = mid
    c = at(hi)
    return c[0], c[1]


def judge(tables, idx, chosen):
    """dvfs::evaluate::judge: measured gain over the measured oracle within the bound."""
    fr, viol = [], 0
    for t, ix, ci in zip(tables, idx, chosen):
        k = t["c"][ix[ci]][0]
        m = [p for p in t["pts"] if same(p[0], k)][0]
        within = [p for p in t["pts"] if p[1] / t["t_ref"] - 1 <= B + 1e-12]
        orc = min(within, key=lambda p: p[2]) if within else [t["ref"], t["t_ref"], t["e_ref"]]
        g, og = 1 - m[2] / t["e_ref"], 1 - orc[2] / t["e_ref"]
        viol += m[1] / t["t_ref"] - 1 > B + 1e-12
        if og >= 0.005:
            fr.append(g / og)
    return fr, viol


def tail(v, slack):
    return (len(v) - bisect.bisect_right(v, slack)) / len(v)


def cand_cb(t, i):
    """The planner's class on predictions (dvfs::guard::predicted_compute_bound)."""
    k = t["c"][i][0]
    rest = {n: x for n, x in k.items() if n != "core_freq_mhz"}
    tf = sorted((c[0]["core_freq_mhz"], c[1]) for c in t["c"]
                if same({n: x for n, x in c[0].items() if n != "core_freq_mhz"}, rest))
    (f1, t1), (f2, t2) = tf[0], tf[1]
    return abs(t1 * f1 / (t2 * f2) - 1) <= 0.01


def pooled(errs):
    v = sorted(e["e"] for e in errs)
    return lambda t, i, s: tail(v, B - s)


def near(errs, cls=False):
    def sel(keep):
        v = sorted(e["e"] for e in errs if keep(e) and 0 < e["s"] <= B + 1e-12)
        return v
    base = sel(lambda e: True)
    if len(base) < 20:
        base = sorted(e["e"] for e in errs)
    per = {c: sel(lambda e, c=c: e["cb"] == c) for c in (True, False)}

    def pf(t, i, s):
        v = base
        if cls:
            vc = per[cand_cb(t, i)]
            v = vc if len(vc) >= 20 else base
        return tail(v, B - s)
    return pf


def knn(k):
    def mk(errs):
        S = np.array([e["s"] for e in errs])
        E = np.array([e["e"] for e in errs])

        def pf(t, i, s):
            j = np.argsort(np.abs(S - s), kind="stable")[:min(k, len(S))]
            return float(np.mean(E[j] > B - s))
        return pf
    return mk


def kernel(h):
    def mk(errs):
        S = np.array([e["s"] for e in errs])
        E = np.array([e["e"] for e in errs])

        def pf(t, i, s):
            w = np.exp(-0.5 * ((S - s) / h) ** 2)
            return float(np.sum(w * (E > B - s)) / np.sum(w))
        return pf
    return mk


def setting(cls):
    def mk(errs):
        d = {}
        for e in errs:
            d.setdefault(key(e["k"]), []).append(e)
        allv = sorted(e["e"] for e in errs)

        def pf(t, i, s):
            es = d.get(key(t["c"][i][0]), [])
            if cls:
                c = cand_cb(t, i)
                es2 = [e for e in es if e["cb"] == c]
                if len(es2) >= 20:
                    es = es2
            v = sorted(e["e"] for e in es) if len(es) >= 20 else allv
            return tail(v, B - s)
        return pf
    return mk


def main():
    tables = [json.loads(line) for line in open(sys.argv[1])]
    errors = [json.loads(line) for line in open(sys.argv[2])]
    ref = {}
    for t in tables:
        rc = [x for x in t["c"] if same(x[0], t["ref"])][0]
        ref[t["w"]] = (t["t_ref"], rc[1])
    ratio = []
    for e in errors:
        t_ref, tp_ref = ref[e["w"]]
        measured = 1 + e["s"] + e["e"]
        predicted = (1 + e["s"]) * t_ref / tp_ref
        ratio.append(dict(e, e=measured - predicted, s=predicted - 1))
    variants = [("pooled", pooled), ("near", near), ("near-class", lambda e: near(e, True)),
                ("knn400", knn(int(20 / RISK))), ("kernel b/2", kernel(B / 2)),
                ("setting", setting(False)), ("setting+class", setting(True))]
    print(f"{len(tables)} workloads, {len(errors)} errors; folds: fadd_* "
          f"({sum(is_fadd(t['w']) for t in tables)}), others "
          f"({sum(is_other(t['w']) for t in tables)})")
    print("| error | conditioning | z | fadd_* (errors from others) | others (errors from fadd_*) "
          "| both folds |")
    print("|---|---|---|---|---|---|")
    for ename, errs in (("measured-ref", errors), ("ratio", ratio)):
        for z in (0.0, 1.645):
            for vname, mk in variants:
                if z > 0 and vname not in ("pooled", "near"):
                    continue
                cells, allfr, allv = [], [], 0
                for judged in (is_fadd, is_other):
                    tj = [t for t in tables if judged(t["w"])]
                    ej = [e for e in errs if not judged(e["w"])]
                    o, ix = options(tj, mk(ej))
                    ch, expected = choose(o, z)
                    fr, v = judge(tj, ix, ch)
                    allfr += fr
                    allv += v
                    cells.append(f"{np.mean(fr) * 100:.1f} % {v}/{len(tj)} (E {expected:.2f})")
                print(f"| {ename} | {vname} | {z:g} | {cells[0]} | {cells[1]} | "
                      f"{np.mean(allfr) * 100:.1f} % {allv}/{len(allfr)} |")


if __name__ == "__main__":
    main()
