"""Issue 5's checks of `collect --gpu` on the GPU machine (read-only for the GPU: no clock,
power-limit or mode changes; ncu runs with --clock-control none).

  python3 cupti_checks.py PP OUT LONG_KERNELS FIXTURE_PROGRAM REPEATS

1. kernel times: per kernel name, the sum of CUPTI kernel durations under `collect --gpu`
   against ncu's gpu__time_duration.sum of a separate run of the same program;
2. dilation: a program of 20,000 tiny kernels, its launch loop timed by itself, alone and
   under `collect --gpu` (REPEATS interleaved pairs), and a GPU-bound program alone and under
   plain NVML sampling (`collect --nvml on`, 10 ms);
prints every number and writes OUT/cupti_checks.json.
"""
import csv
import io
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile

pp, out, lk, fix, reps = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
os.makedirs(out, exist_ok=True)
res = {}


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        print("FAILED:", " ".join(cmd), r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    return r


def loop_ms(text):
    m = re.search(r"loop_ms=([0-9.]+)", text)
    return float(m.group(1)) if m else float("nan")


def ci95(xs):
    """Mean and 95 % confidence interval (t distribution) of xs."""
    n = len(xs)
    m = statistics.mean(xs)
    if n < 2:
        return m, m, m
    t = {5: 2.776, 10: 2.262, 15: 2.145, 20: 2.093, 30: 2.045}.get(n, 2.0)
    h = t * statistics.stdev(xs) / math.sqrt(n)
    return m, m - h, m + h


# 1. Kernel times against ncu.
N, CYC = 10, 20_000_000
run_dir = os.path.join(out, "long")
r = run([pp, "collect", "--gpu", "-q", "-o", run_dir, "--", lk, str(N), str(CYC)])
print("collect --gpu:", r.stdout.strip())
rep = json.loads(run([pp, "report", run_dir, "--format", "json"]).stdout)
ga = rep.get("gpu_activity") or {}
cupti = {}
for k in ga.get("kernels", []):
    name = "spin_a" if "spin_a" in k["name"] else "spin_b" if "spin_b" in k["name"] else k["name"]
    cupti[name] = (k["count"], k["time_s"] * 1e9)
r = run(["ncu", "--clock-control", "none", "--metrics", "gpu__time_duration.sum", "--csv",
         "--print-units", "base", lk, str(N), str(CYC)])
ncu = {}
text = r.stdout
start = text.find('"ID"')
for row in csv.DictReader(io.StringIO(text[start:])):
    if row.get("Metric Name") != "gpu__time_duration.sum":
        continue
    kn = row["Kernel Name"]
    name = "spin_a" if "spin_a" in kn else "spin_b" if "spin_b" in kn else kn
    unit = row.get("Metric Unit", "nsecond")
    v = float(row["Metric Value"].replace(",", ""))
    v *= {"nsecond": 1, "ns": 1, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6, "second": 1e9}.get(unit, 1)
    c, t = ncu.get(name, (0, 0.0))
    ncu[name] = (c + 1, t + v)
res["kernel_times"] = {}
print("\n== 1. kernel time per name: collect --gpu (CUPTI) vs ncu --clock-control none")
print(f"{'kernel':<10} {'launches':>9} {'CUPTI ms':>12} {'ncu ms':>12} {'diff %':>8}")
for name in sorted(set(cupti) | set(ncu)):
    c = cupti.get(name, (0, float("nan")))
    n = ncu.get(name, (0, float("nan")))
    d = 100 * (c[1] - n[1]) / n[1] if n[1] else float("nan")
    res["kernel_times"][name] = {"cupti_launches": c[0], "ncu_launches": n[0],
                                  "cupti_ns": c[1], "ncu_ns": n[1], "diff_pct": d}
    print(f"{name:<10} {c[0]:>4}/{n[0]:<4} {c[1]/1e6:>12.3f} {n[1]/1e6:>12.3f} {d:>8.3f}")

# 2a. Dilation of 20,000 tiny kernels under collect --gpu.
def pairs(alone_cmd, under_cmd, label):
    a, u = [], []
    for i in range(reps):
        order = [("alone", alone_cmd), ("under", under_cmd)]
        if i % 2:
            order.reverse()
        for which, cmd in order:
            with tempfile.TemporaryDirectory() as d:
                c = [x.replace("{DIR}", os.path.join(d, "r")) for x in cmd]
                ms = loop_ms(run(c).stdout)
            (a if which == "alone" else u).append(ms)
    ratios = [100 * (y / x - 1) for x, y in zip(a, u)]
    m, lo, hi = ci95(ratios)
    print(f"\n== {label}")
    print(f"alone  loop ms: mean {statistics.mean(a):.3f}  sd {statistics.stdev(a):.3f}  {[round(x, 2) for x in a]}")
    print(f"under  loop ms: mean {statistics.mean(u):.3f}  sd {statistics.stdev(u):.3f}  {[round(x, 2) for x in u]}")
    print(f"dilation (paired): mean {m:+.2f} %, 95 % CI [{lo:+.2f}, {hi:+.2f}] over {reps} pairs")
    return {"alone_ms": a, "under_ms": u, "dilation_pct": m, "ci95": [lo, hi]}


res["dilation_gpu"] = pairs([fix, "many", "20000"],
                            [pp, "collect", "--gpu", "-q", "-o", "{DIR}", "--", fix, "many", "20000"],
                            "2a. 20,000 tiny kernels: alone vs collect --gpu (CUPTI activity + API callbacks)")
res["dilation_nvml"] = pairs([lk, "50", "4000000"],
                             [pp, "collect", "--nvml", "on", "--no-nvtx", "-q", "-o", "{DIR}", "--", lk, "50", "4000000"],
                             "2b. GPU-bound loop (100 kernels, ~300 ms): alone vs collect --nvml on (10 ms sampling)")
with open(os.path.join(out, "cupti_checks.json"), "w") as f:
    json.dump(res, f, indent=1)
