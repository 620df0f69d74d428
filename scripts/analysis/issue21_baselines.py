#!/usr/bin/env python3
"""Naive baselines of issue 21 on the same split as `powerperf evaluate`, from a set written
by `powerperf import` (its points.parquet and set.toml), and the model's error from the
per-point CSV of `powerperf evaluate … -o points.csv` beside it.

  knob SET KNOB=A,B,C POINTS.csv|-     per-workload polynomial in the knob through the training
                                     values (degree = values − 1, at most 2: the "naive
                                     quadratic through the same three clocks")
  workload SET KNOB=B POINTS.csv     median-ratio transfer: y_w(k) = y_w(b) · median over the
                                     other workloads v of y_v(k) / y_v(b)

Scores: MAPE per target over the held-out points that have a measurement, skipping targets
the set marks unreliable for a workload (as `evaluate` does). Needs pyarrow and numpy.
This is a measurement aid for docs/models.md, not product code (issue 21 item 3 puts the
baselines into `evaluate` itself).
"""
import csv, sys, tomllib, statistics
from collections import defaultdict
import numpy as np
import pyarrow.parquet as pq

TARGETS = ["time_s", "power_w", "energy_j"]


def load(set_dir):
    meta = tomllib.load(open(f"{set_dir}/set.toml", "rb"))
    unreliable = defaultdict(set)
    for u in meta.get("unreliable", []):
        for w in u["workloads"]:
            unreliable[u["target"]].add(w)
    t = pq.read_table(f"{set_dir}/points.parquet").to_pydict()
    knobs = meta["knobs"]
    acc = defaultdict(lambda: defaultdict(list))
    for i in range(len(t["workload"])):
        key = (t["workload"][i], tuple(t[k][i] for k in knobs))
        for y in TARGETS:
            v = t[y][i]
            if v is not None:
                acc[key][y].append(v)
    pts = {}
    for key, d in acc.items():
        m = {y: (sum(v) / len(v) if v else None) for y, v in d.items()}
        if m.get("energy_j") is None and m.get("time_s") and m.get("power_w"):
            m["energy_j"] = m["time_s"] * m["power_w"]
        pts[key] = m
    return knobs, unreliable, pts


def score(preds, pts, unreliable):
    out = {}
    for y in TARGETS:
        e = [abs(p[y] / pts[k][y] - 1) * 100 for k, p in preds.items()
             if p.get(y) is not None and pts[k].get(y) and k[0] not in unreliable[y]]
        if e:
            out[y] = (float(np.mean(e)), len(e))
    return out


def model_score(csv_path, knobs, unreliable):
    rows = list(csv.DictReader(open(csv_path)))
    out = {}
    for y in TARGETS:
        e = [abs(float(r[f"predicted_{y}"]) / float(r[f"measured_{y}"]) - 1) * 100 for r in rows
             if r[f"predicted_{y}"] and r[f"measured_{y}"] and float(r[f"measured_{y}"]) != 0
             and r["workload"] not in unreliable[y]]
        if e:
            out[y] = (float(np.mean(e)), len(e))
    return out, None


def main():
    mode, set_dir, spec, points_csv = sys.argv[1:5]
    knobs, unreliable, pts = load(set_dir)
    name, vals = spec.split("=")
    vals = [float(v) for v in vals.split(",")]
    ki = knobs.index(name)
    # "-": no model CSV, the baseline alone.
    model = model_score(points_csv, knobs, unreliable)[0] if points_csv != "-" else {}
    preds = {}
    if mode == "knob":
        by_w = defaultdict(dict)
        for (w, kv), m in pts.items():
            by_w[(w, kv[:ki] + kv[ki + 1:])][kv[ki]] = m
        for (w, other), curve in by_w.items():
            train = [x for x in curve if x in vals]
            for x, m in curve.items():
                if x in vals:
                    continue
                key = (w, other[:ki] + (x,) + other[ki:])
                p = {}
                for y in TARGETS:
                    xs = [t for t in train if curve[t].get(y) is not None]
                    if len(xs) < 2:
                        continue
                    c = np.polyfit(xs, [curve[t][y] for t in xs], min(2, len(xs) - 1))
                    p[y] = float(np.polyval(c, x))
                preds[key] = p
    else:
        # The baseline setting: this knob at b, every other knob at its maximum (evaluate's
        # default --baseline for the knobs not named).
        b = vals[0]
        top = [max(kv[j] for _, kv in pts) for j in range(len(knobs))]
        workloads = sorted({w for w, _ in pts})
        for (w, kv), m in pts.items():
            base_kv = tuple(b if j == ki else top[j] for j in range(len(knobs)))
            if kv == base_kv:
                continue
            if (w, base_kv) not in pts:
                continue
            p = {}
            for y in TARGETS:
                r = [pts[(v, kv)][y] / pts[(v, base_kv)][y] for v in workloads
                     if v != w and (v, kv) in pts and (v, base_kv) in pts
                     and pts[(v, kv)].get(y) and pts[(v, base_kv)].get(y)
                     and v not in unreliable[y]]
                if r and pts[(w, base_kv)].get(y) is not None:
                    p[y] = pts[(w, base_kv)][y] * statistics.median(r)
            preds[(w, kv)] = p
    base = score(preds, pts, unreliable)
    print(f"{'target':<9} {'model %':>9} {'n':>5} {'baseline %':>11} {'n':>5} {'ratio':>6}")
    for y in TARGETS:
        if y in model or y in base:
            mm, mn = model.get(y, (float('nan'), 0))
            bb, bn = base.get(y, (float('nan'), 0))
            print(f"{y:<9} {mm:>9.2f} {mn:>5} {bb:>11.2f} {bn:>5} {mm / bb:>6.3f}")


if __name__ == "__main__":
    main()
