#!/usr/bin/env bash
# NVML checks on a machine with an NVIDIA GPU (issue 5), read-only: nothing here changes the
# GPU's clocks, power limit or modes.
#   scripts/gpu/nvml_check.sh POWERPERF_BINARY OUTDIR [SECONDS] [REPEATS] [ITERATIONS]
# (SECONDS = 0 skips the energy check)
# 1. energy: a steady load of SECONDS (>= 30) under `collect --nvml on`; report prints the
#    NVML energy counter against the integral of sampled power.
# 2. dilation of plain NVML sampling: a launch-bound program alone and under collect,
#    interleaved REPEATS times each; mean and 95 % CI of the ratio.
set -euo pipefail
pp=$1; out=$2; secs=${3:-35}; reps=${4:-10}; iters=${5:-20000}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,power.draw,clocks.sm,clocks.mem,clocks.max.sm --format=csv
if [ "$secs" != 0 ]; then
  echo "== energy over a ${secs} s load"
  "$pp" collect --nvml on --interval 10ms -o "$out/load" -- python3 "$here/gpu_load.py" "$secs"
  "$pp" report "$out/load" --format json > "$out/load-report.json"
fi
echo "== dilation of NVML sampling (${reps} interleaved runs each way)"
: > "$out/dilation.txt"
python3 "$here/small_kernels.py" 2000 >/dev/null
for i in $(seq "$reps"); do
  a=$(python3 "$here/small_kernels.py" "$iters" | awk '{print $(NF-1)}')
  b=$("$pp" collect -q --nvml on --interval 10ms -o "$out/dil$i" -- python3 "$here/small_kernels.py" "$iters" | awk '{print $(NF-1)}')
  rm -rf "$out/dil$i"
  echo "$a $b" >> "$out/dilation.txt"
done
python3 - "$out/dilation.txt" <<'PY'
import math, sys
rows = [tuple(map(float, l.split())) for l in open(sys.argv[1]) if l.strip()]
r = [b / a for a, b in rows]
n = len(r); m = sum(r) / n
sd = math.sqrt(sum((x - m) ** 2 for x in r) / (n - 1)) if n > 1 else float("nan")
t = {5: 2.776, 10: 2.262, 15: 2.145, 20: 2.093, 30: 2.045, 40: 2.023}.get(n, 1.96)
print(f"alone mean {sum(a for a,_ in rows)/n:.4f} s, under collect mean {sum(b for _,b in rows)/n:.4f} s")
print(f"dilation (under/alone): mean {100*(m-1):+.2f} %, 95 % CI [{100*(m-t*sd/math.sqrt(n)-1):+.2f}, {100*(m+t*sd/math.sqrt(n)-1):+.2f}] %, n={n}")
PY
