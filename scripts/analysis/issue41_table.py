#!/usr/bin/env python3
"""docs/models.md's issue-41 table: on every shared set, `auto` beside each candidate
(`scaling`, `neighbors`) and the median-ratio baseline on the same workload-holdout split,
and `auto` on both shared joint splits beside the separable rule. Nothing here computes an
error: every number is `powerperf evaluate --format json`'s own (`versus_baseline`).

    cargo build --release --bin powerperf
    python3 scripts/analysis/issue41_table.py [--bin PATH] [--work DIR] [--only SET,...] [--jobs N]
                                              [--cache DIR]

Sets are imported into --work (default `issue21-sets/`) from the shipped specs when missing.
`auto / best` = auto's MAPE / min(scaling's, neighbors') MAPE on the same split (issue 41's
target: ≤ 1.05 on average over sets and targets, never above 1.15). The last lines give the
choice `auto` made per target, its inner estimate and the outer error (from the protocol
line, issue 41 item 4). With --cache DIR each `evaluate` output is kept as
DIR/SET.{wh,joint}.MODEL.json and read from there when present instead of run again (so rows
whose model did not change between two builds need not be re-run; delete a file to re-run it).
"""
import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(__file__))
from issue21_table import PARSEC_JOINT_CSV, TITANX_JOINT_CSV  # noqa: E402

WH = [
    ("titanx-micro", ["--baseline", "core_freq_mhz=1164,mem_freq_mhz=3505"]),
    ("v100-dcgm-sweep", ["--baseline", "core_freq_mhz=1380"]),
    ("xu3-cbench", ["--baseline", "core_freq_mhz=2000"]),
    ("xu3-parsec-joint", []),
    ("multicore-xeon", []),
    ("multicore-amd", []),
    ("multicore-i7", []),
]
JOINT = [
    ("xu3-parsec-joint", "parsec_joint.csv"),
    ("titanx-micro", "titanx_joint.csv"),
]
MODELS = ["auto", "scaling", "neighbors"]
TARGETS = [("time_s", "time"), ("power_w", "power"), ("energy_j", "energy")]


def evaluate(binary, args):
    t0 = time.time()
    p = subprocess.run([binary, "evaluate", *args, "--format", "json"], capture_output=True, text=True)
    secs = time.time() - t0
    if not p.stdout.strip():
        return None, secs, p.stderr.strip()
    return json.loads(p.stdout), secs, ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(os.environ.get("CARGO_TARGET_DIR", "target"), "release", "powerperf"))
    ap.add_argument("--work", default="issue21-sets")
    ap.add_argument("--only", default="")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--cache", default="")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    for name, text in [("titanx_joint.csv", TITANX_JOINT_CSV), ("parsec_joint.csv", PARSEC_JOINT_CSV)]:
        with open(os.path.join(a.work, name), "w") as f:
            f.write(text)
    only = set(filter(None, a.only.split(",")))
    for s in {x[0] for x in WH} | {x[0] for x in JOINT}:
        d = os.path.join(a.work, s)
        if (not only or s in only) and not os.path.exists(os.path.join(d, "set.toml")):
            subprocess.run([a.bin, "import", f"datasets/{s}.toml", "-o", d], check=True, capture_output=True)
    jobs = []
    for s, extra in WH:
        if only and s not in only:
            continue
        for m in MODELS:
            jobs.append(((s, "wh", m), [os.path.join(a.work, s), "--protocol", "workload-holdout", *extra, "--model", m]))
    for s, csv in JOINT:
        if only and s not in only:
            continue
        jobs.append(((s, "joint", "auto"), [os.path.join(a.work, s), "--protocol", "knob-holdout",
                                            "--train-points", os.path.join(a.work, csv), "--model", "auto"]))
    def run(job):
        (s, proto, m), args = job
        path = os.path.join(a.cache, f"{s}.{proto}.{m}.json") if a.cache else ""
        if path and os.path.exists(path):
            with open(path) as f:
                return json.load(f), float("nan"), "cached"
        out = evaluate(a.bin, args)
        if path and out[0] is not None:
            os.makedirs(a.cache, exist_ok=True)
            with open(path, "w") as f:
                json.dump(out[0], f)
        return out

    with ThreadPoolExecutor(max_workers=a.jobs) as ex:
        outs = dict(zip([k for k, _ in jobs], ex.map(run, jobs)))
    cmds = [f"powerperf evaluate {' '.join(x.replace(a.work + '/', '') for x in args)} --format json   # "
            + (f"{outs[k][1]:.1f} s" if outs[k][2] != "cached" else "from --cache")
            for k, args in jobs]
    print("| set | target | auto | scaling | neighbors | baseline | auto / best of scaling, neighbors | auto's choice (inner estimate beside outer error) |")
    print("|---|---|---|---|---|---|---|---|")
    ratios = []
    for s, _ in WH:
        if only and s not in only:
            continue
        res = {m: outs[(s, "wh", m)][0] for m in MODELS}
        proto = (res["auto"] or {}).get("protocol", "")
        blind = proto.split("beside the outer error: ")[-1] if "beside the outer error: " in proto else ""
        for t, tn in TARGETS:
            mape = {}
            base = None
            for m in MODELS:
                v = ((res[m] or {}).get("versus_baseline") or {}).get(t)
                if v and v["model"]["n"]:
                    mape[m] = v["model"]["mape_pct"]
                    if m == "auto":
                        base = v["baseline"]["mape_pct"]
            if "auto" not in mape:
                continue
            best = min([mape[m] for m in ("scaling", "neighbors") if m in mape] or [float("nan")])
            r = mape["auto"] / best if best == best and best > 0 else float("nan")
            if r == r:
                ratios.append((s, tn, r))
            choice = next((c.strip() for c in blind.split(";") if c.strip().startswith(t + ":")), "")
            fmt = lambda m: f"{mape[m]:.2f}" if m in mape else "–"
            print(f"| {s} | {tn} | {fmt('auto')} | {fmt('scaling')} | {fmt('neighbors')} | "
                  f"{base:.2f} | {r:.3f} | {choice[len(t) + 1:].strip() if choice else '–'} |")
    if ratios:
        mean = sum(r for _, _, r in ratios) / len(ratios)
        worst = max(ratios, key=lambda x: x[2])
        print()
        print(f"auto / best over {len(ratios)} (set, target) pairs: mean {mean:.3f} (target ≤ 1.05), "
              f"max {worst[2]:.3f} on {worst[0]} {worst[1]} (target ≤ 1.15)")
    print()
    print("| joint split | target | auto (joint) | separable rule | ratio |")
    print("|---|---|---|---|---|")
    for s, csv in JOINT:
        if only and s not in only:
            continue
        out = outs[(s, "joint", "auto")][0] or {}
        for t, tn in TARGETS:
            v = (out.get("versus_baseline") or {}).get(t)
            if v and v["model"]["n"]:
                print(f"| {s} ({csv}) | {tn} | {v['model']['mape_pct']:.2f} | {v['baseline']['mape_pct']:.2f} | {v['ratio']:.3f} |")
    print()
    print("\n".join(cmds))


if __name__ == "__main__":
    main()
