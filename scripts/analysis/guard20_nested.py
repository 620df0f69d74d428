#!/usr/bin/env python3
"""Issue 20 item 3: choose the guard's error model by an inner split of the TRAINING
classes only, then judge the choice on the held-out fold (docs/dvfs.md, "Error models
tried for item 3"). Diagnostic, not product code. Inputs: the dump of
scripts/analysis/guard20_variants.py (same commands), e.g.
  python3 scripts/analysis/guard20_nested.py tab_all.jl err_all.jl

For a judged fold (fadd_* or the others), the training workloads are the other fold's. Their
classes (the prefix list of docs/dvfs.md for the others; fadd_dram, fadd_l1d, fadd_l2d,
fadd_shd, fadd_32p, fadd_64p for fadd_*) are sorted by name and dealt alternately into two
inner halves (fixed before any result was seen). Each error model of the menu (the rows of
guard20_variants.py) is judged on each inner half with the errors of the other half only;
a model qualifies when both inner halves keep their violations within one in twenty; among
those, the one with the largest mean fraction over both inner halves is chosen (none
qualifying: the default). The chosen model is then run on the judged fold with the errors
of all training workloads, as in guard20_variants.py. The judged fold is seen only there.
"""
import json
import sys

import numpy as np

import guard20_variants as g


def cls(w):
    if w.startswith("fadd_"):
        return "_".join(w.split("_")[:2])
    return max((p for p in g.OTHERS if w.startswith(p)), key=len)


def main():
    tables = [json.loads(line) for line in open(sys.argv[1])]
    errors = [json.loads(line) for line in open(sys.argv[2])]
    ref = {}
    for t in tables:
        rc = [x for x in t["c"] if g.same(x[0], t["ref"])][0]
        ref[t["w"]] = (t["t_ref"], rc[1])
    ratio = []
    for e in errors:
        t_ref, tp_ref = ref[e["w"]]
        pred = (1 + e["s"]) * t_ref / tp_ref
        ratio.append(dict(e, e=1 + e["s"] + e["e"] - pred, s=pred - 1))
    menu = []
    for en, errs in (("stored", errors), ("ratio", ratio)):
        for vn, mk in (("pooled", g.pooled), ("near", g.near),
                       ("near-class", lambda e: g.near(e, True)),
                       ("knn400", g.knn(400)), ("kernel b/2", g.kernel(g.B / 2)),
                       ("setting", g.setting(False)), ("setting+class", g.setting(True))):
            for z in (0.0, 1.645):
                if z > 0 and vn not in ("pooled", "near"):
                    continue
                menu.append((f"{en} {vn} z={z:g}", errs, mk, z))

    def run(errs, mk, z, judged_ws, error_ws):
        tj = [t for t in tables if t["w"] in judged_ws]
        ej = [e for e in errs if e["w"] in error_ws]
        o, ix = g.options(tj, mk(ej))
        ch, _ = g.choose(o, z)
        fr, v = g.judge(tj, ix, ch)
        return fr, v, len(tj)

    allw = {t["w"] for t in tables}
    out_fr, out_v = [], 0
    for name, judged in (("fadd_*", g.is_fadd), ("others", g.is_other)):
        held = {w for w in allw if judged(w)}
        train = allw - held
        classes = sorted({cls(w) for w in train})
        a = {w for w in train if classes.index(cls(w)) % 2 == 0}
        b = train - a
        best = None
        for label, errs, mk, z in menu:
            fa, va, na = run(errs, mk, z, a, b)
            fb, vb, nb = run(errs, mk, z, b, a)
            ok = va <= na / 20 and vb <= nb / 20
            score = np.mean(fa + fb)
            print(f"  [{name} held out] inner {label}: {np.mean(fa)*100:.1f} % {va}/{na}, "
                  f"{np.mean(fb)*100:.1f} % {vb}/{nb}{'' if ok else '  (over)'}")
            if ok and (best is None or score > best[0]):
                best = (score, label, errs, mk, z)
        if best is None:
            best = (None,) + tuple(menu[0][:4])
        fr, v, n = run(best[2], best[3], best[4], held, train)
        out_fr += fr
        out_v += v
        print(f"{name}: chosen by the inner split: {best[1]}; judged: "
              f"{np.mean(fr)*100:.1f} % of the oracle, {v}/{n} over")
    print(f"both folds: {np.mean(out_fr)*100:.1f} %, {out_v}/{len(out_fr)} over")


if __name__ == "__main__":
    main()
