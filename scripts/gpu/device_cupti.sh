#!/usr/bin/env bash
# issue 5's CUPTI checks on the GPU machine, in one call (read-only for the GPU). Expects in
# carry/: powerperf.gz (stripped release binary, gzip: the binary alone is over the 64 MiB
# carry limit), libpowerperf_rt.so, libpowerperf_rt_cuda.so.
#   bash scripts/gpu/device_cupti.sh OUTDIR REPEATS
set -uo pipefail
out=${1:-/tmp/pp-cupti}; reps=${2:-10}
mkdir -p "$out"
[ -x carry/powerperf ] || { gunzip -c carry/powerperf.gz > carry/powerperf && chmod +x carry/powerperf; }
pp=$PWD/carry/powerperf
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv
nvcc -O2 -arch=sm_90 -o /tmp/lk scripts/gpu/long_kernels.cu || exit 1
nvcc -O2 -arch=sm_90 -o /tmp/fix rt/examples/cuda/cupti_fixture.cu || exit 1
echo "== 0. collect --gpu on the fixture program, report"
"$pp" collect --gpu -q -o "$out/fix" -- /tmp/fix && "$pp" report "$out/fix" | sed -n '/GPU activity/,$p'
python3 scripts/gpu/cupti_checks.py "$pp" "$out/checks" /tmp/lk /tmp/fix "$reps"
echo "== 3. 20,000 tiny kernels with POWERPERF_CUPTI_API=runtime (no driver-domain callbacks)"
POWERPERF_CUPTI_API=runtime python3 - "$pp" /tmp/fix "$reps" <<'PY'
import re, statistics, subprocess, sys, tempfile, os, math
pp, fix, reps = sys.argv[1], sys.argv[2], int(sys.argv[3])
def ms(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    m = re.search(r"loop_ms=([0-9.]+)", r.stdout)
    return float(m.group(1)) if m else float("nan")
a, u = [], []
for i in range(reps):
    with tempfile.TemporaryDirectory() as d:
        x = ms([fix, "many", "20000"]); y = ms([pp, "collect", "--gpu", "-q", "-o", os.path.join(d, "r"), "--", fix, "many", "20000"])
    a.append(x); u.append(y)
r = [100 * (y / x - 1) for x, y in zip(a, u)]
m = statistics.mean(r); h = 2.262 * statistics.stdev(r) / math.sqrt(len(r))
print(f"alone {statistics.mean(a):.2f} ms, under {statistics.mean(u):.2f} ms: dilation {m:+.2f} % CI [{m-h:+.2f}, {m+h:+.2f}]")
PY
echo "== 4. PyTorch training loop with NVTX ranges under collect --gpu --nvml on"
"$pp" collect --gpu --nvml on --interval 10ms -q -o "$out/train" -- python3 scripts/gpu/train_nvtx.py 3 40
"$pp" report "$out/train" | sed -n '/Regions/,$p' | head -80
"$pp" report "$out/train" --format json > "$out/train-report.json"
"$pp" report "$out/train" --html "$out/train.html" --plot "$out/plots" 2>&1 | tail -3
ls -la "$out/train" "$out/plots"
cp "$out/train/gpu_activity.parquet" "$out/train-gpu_activity.parquet" 2>/dev/null
# What comes back ($OUT: at most 8 files).
if [ -n "${OUT:-}" ]; then
  cp "$out/checks/cupti_checks.json" "$out/train-report.json" "$out/train.html" "$OUT/" 2>/dev/null
  cp "$out/plots/gpu_streams.svg" "$OUT/" 2>/dev/null
  "$pp" report "$out/fix" --format json > "$OUT/fix-report.json"
fi
