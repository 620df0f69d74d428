"""Issue 5's dilation check on the GPU machine, split by what CUPTI is asked to do
(read-only for the GPU: no clock, power-limit or mode changes).

  python3 dilation.py PP FIXTURE OUTDIR ROUNDS [LAUNCHES]

FIXTURE is rt/examples/cuda/cupti_fixture.cu built with nvcc; its `many N CYCLES` mode
launches N one-warp kernels that spin CYCLES GPU cycles each (0: empty), after 100 warm-up
launches, and prints the launch loop's own wall time (loop_ms). For each kernel length and
each configuration below, ROUNDS runs are interleaved (one of each configuration per round,
in rotating order), so that the machine's drift hits every configuration alike.

Configurations:
  alone            the program by itself
  nvml             collect --nvml on --interval 10ms (no CUDA injection)
  gpu              collect --gpu (default: CUPTI activities + API callbacks)
  gpu-kernel-only  collect --gpu with POWERPERF_CUPTI_KINDS=kernel POWERPERF_CUPTI_API=none:
                   CUPTI's concurrent-kernel records and nothing else
  gpu-api-only     collect --gpu with POWERPERF_CUPTI_KINDS=none: API callbacks only
  gpu-inject-only  collect --gpu with POWERPERF_CUPTI_KINDS=none POWERPERF_CUPTI_API=none:
                   the injection library loaded, CUPTI asked for nothing
  gpu-api-activity collect --gpu with POWERPERF_CUPTI_API=activity: API calls as CUPTI
                   RUNTIME/DRIVER activity records instead of callbacks
  nvml-100ms       collect --nvml on --interval 100ms (only with DILATION_CONFIGS)
  gpu-no-nvml      collect --gpu --nvml off (only with DILATION_CONFIGS)
  gpu-kernel-hw    as gpu-kernel-only, with POWERPERF_CUPTI_HW_TRACE=1 (kernel timestamps
                   from the Hardware Event System, where CUPTI supports it)
  nsys             nsys profile --trace=cuda (another CUPTI client, for reference), if present;
                   empty kernels only (nsys takes seconds per run)

Two times per run: the launch loop (loop_ms, printed by the program) and the whole process
(for `alone` and `nsys` the wall time of the process as Python measures it; under collect
the command's wall time as collect records it in run.toml, `duration_ns`, which excludes
collect's own start-up and post-processing). Dilation = mean over rounds of (configuration /
alone of the same round − 1), with a 95 % t-interval. Writes OUTDIR/dilation.json.
"""
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib

pp, fix, out, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
launches = int(sys.argv[5]) if len(sys.argv) > 5 else 20000
os.makedirs(out, exist_ok=True)
nsys = shutil.which("nsys")

T95 = {5: 2.776, 8: 2.365, 10: 2.262, 12: 2.201, 15: 2.145, 20: 2.093, 25: 2.064, 30: 2.045}


def ci95(xs):
    n = len(xs)
    m = statistics.mean(xs)
    if n < 2:
        return m, m, m
    h = T95.get(n, 2.0) * statistics.stdev(xs) / math.sqrt(n)
    return m, m - h, m + h


CONFIGS = {
    "alone": None,
    "nvml": (["--nvml", "on", "--interval", "10ms"], {}),
    "gpu": (["--gpu"], {}),
    "gpu-kernel-only": (
        ["--gpu"],
        {"POWERPERF_CUPTI_KINDS": "kernel", "POWERPERF_CUPTI_API": "none"},
    ),
    "gpu-api-only": (["--gpu"], {"POWERPERF_CUPTI_KINDS": "none"}),
    "gpu-inject-only": (
        ["--gpu"],
        {"POWERPERF_CUPTI_KINDS": "none", "POWERPERF_CUPTI_API": "none"},
    ),
    "gpu-api-activity": (["--gpu"], {"POWERPERF_CUPTI_API": "activity"}),
    "nvml-100ms": (["--nvml", "on", "--interval", "100ms"], {}),
    "gpu-no-nvml": (["--gpu", "--nvml", "off"], {}),
    "gpu-kernel-hw": (
        ["--gpu"],
        {"POWERPERF_CUPTI_KINDS": "kernel", "POWERPERF_CUPTI_API": "none",
         "POWERPERF_CUPTI_HW_TRACE": "1"},
    ),
}
if nsys:
    CONFIGS["nsys"] = "nsys"
# DILATION_CONFIGS=alone,nvml,... and DILATION_CYCLES=0,10000 narrow the run.
if os.environ.get("DILATION_CONFIGS"):
    keep = os.environ["DILATION_CONFIGS"].split(",")
    CONFIGS = {k: v for k, v in CONFIGS.items() if k in keep or k == "alone"}
else:
    CONFIGS.pop("nvml-100ms")
    CONFIGS.pop("gpu-no-nvml")
CYCLES = [int(c) for c in os.environ.get("DILATION_CYCLES", "0,10000,40000").split(",")]


def one(name, prog, tmp):
    cfg = CONFIGS[name]
    env = dict(os.environ)
    if cfg is None or cfg == "nsys":
        cmd = prog
        if cfg == "nsys":
            cmd = [nsys, "profile", "--trace=cuda", "--sample=none", "--cpuctxsw=none",
                   "-o", os.path.join(tmp, "nsys"), "--force-overwrite=true"] + prog
        t0 = time.monotonic()
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
        wall = time.monotonic() - t0
    else:
        args, extra = cfg
        env.update(extra)
        run_dir = os.path.join(tmp, "run")
        cmd = [pp, "collect", "-q", "-o", run_dir] + args + ["--"] + prog
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
        wall = float("nan")
        try:
            with open(os.path.join(run_dir, "run.toml"), "rb") as f:
                wall = tomllib.load(f)["run"]["duration_ns"] / 1e9
        except Exception as e:  # noqa: BLE001 - reported below
            print("no run.toml:", e)
        shutil.rmtree(run_dir, ignore_errors=True)
    m = re.search(r"loop_ms=([0-9.]+)", r.stdout)
    if r.returncode != 0 or not m:
        print("FAILED", name, r.returncode, r.stdout[-800:], r.stderr[-800:])
        return float("nan"), float("nan")
    return float(m.group(1)), wall


results = {"launches": launches, "rounds": rounds, "nsys": nsys, "by_cycles": {}}
for cycles in CYCLES:
    names = [n for n in CONFIGS if n != "nsys" or cycles == 0]
    prog = [fix, "many", str(launches), str(cycles)]
    loops = {n: [] for n in names}
    walls = {n: [] for n in names}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            order = names[r % len(names):] + names[: r % len(names)]
            for n in order:
                lm, w = one(n, prog, tmp)
                loops[n].append(lm)
                walls[n].append(w)
    block = {}
    print(f"\n== {launches} kernels of {cycles} spin cycles, {rounds} interleaved rounds")
    print(f"{'config':<17} {'loop ms (median)':>17} {'loop dilation % [95% CI]':>30} "
          f"{'process s (median)':>19} {'process dilation % [95% CI]':>30}")
    for n in names:
        entry = {
            "loop_ms": loops[n],
            "process_s": walls[n],
            "loop_ms_median": statistics.median(loops[n]),
            "process_s_median": statistics.median(walls[n]),
        }
        line = f"{n:<17} {entry['loop_ms_median']:>17.2f}"
        if n != "alone":
            dl = [100 * (u / a - 1) for u, a in zip(loops[n], loops["alone"])
                  if not (math.isnan(u) or math.isnan(a))]
            dw = [100 * (u / a - 1) for u, a in zip(walls[n], walls["alone"])
                  if not (math.isnan(u) or math.isnan(a))]
            ml, lo, hi = ci95(dl)
            mw, wlo, whi = ci95(dw)
            entry["loop_dilation_pct"] = [ml, lo, hi]
            entry["process_dilation_pct"] = [mw, wlo, whi]
            line += f" {ml:>+10.2f} [{lo:+.2f}, {hi:+.2f}]".rjust(31)
            line += f" {entry['process_s_median']:>19.3f}"
            line += f" {mw:>+10.2f} [{wlo:+.2f}, {whi:+.2f}]".rjust(31)
        else:
            line += " " * 31 + f" {entry['process_s_median']:>19.3f}"
        print(line)
        block[n] = entry
    results["by_cycles"][str(cycles)] = block
    sys.stdout.flush()

with open(os.path.join(out, "dilation.json"), "w") as f:
    json.dump(results, f, indent=1)
