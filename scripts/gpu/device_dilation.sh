#!/usr/bin/env bash
# issue 5's dilation check, split by what CUPTI records, and the API-record modes compared
# (read-only for the GPU: no clock, power-limit or mode changes). Expects in carry/:
# powerperf.gz (stripped release binary, gzip), libpowerperf_rt.so, libpowerperf_rt_cuda.so.
#   bash scripts/gpu/device_dilation.sh OUTDIR ROUNDS
set -uo pipefail
out=${1:-/tmp/pp-dil}; rounds=${2:-10}
mkdir -p "$out"
[ -x carry/powerperf ] || { gunzip -c carry/powerperf.gz > carry/powerperf && chmod +x carry/powerperf; }
pp=$PWD/carry/powerperf
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv
nvcc -O2 -arch=sm_90 -o /tmp/fix rt/examples/cuda/cupti_fixture.cu || exit 1
echo "== API records by callbacks (default) and as activity records, same programs"
for mode in default activity; do
  POWERPERF_CUPTI_API=$mode "$pp" collect --gpu -q -o "$out/fix-$mode" -- /tmp/fix
  "$pp" report "$out/fix-$mode" --format json > "$out/fix-$mode.json"
  POWERPERF_CUPTI_API=$mode POWERPERF_CUPTI_HW_TRACE=1 "$pp" collect --gpu --nvml on -q \
    -o "$out/train-$mode" -- python3 scripts/gpu/train_nvtx.py 2 40 > /dev/null
  "$pp" report "$out/train-$mode" --format json > "$out/train-$mode.json"
  "$pp" report "$out/train-$mode" | sed -n '/GPU/,$p' | head -40
  grep -i "hwtrace\|HW_TRACE\|EnableRuntimeApi" "$out/train-$mode/run.toml" | head -3
done
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
for prog in ("fix", "train"):
    a = json.load(open(f"{out}/{prog}-default.json")); b = json.load(open(f"{out}/{prog}-activity.json"))
    ga, gb = a.get("gpu_activity") or {}, b.get("gpu_activity") or {}
    print(prog, "api_calls", ga.get("api_calls"), gb.get("api_calls"))
    for k in ("metrics", "regions"):
        print(" ", k, "default:", json.dumps(ga.get(k))[:900])
        print(" ", k, "activity:", json.dumps(gb.get(k))[:900])
PY
python3 scripts/gpu/dilation.py "$pp" /tmp/fix "$out" "$rounds" 20000
if [ -n "${OUT:-}" ]; then
  cp "$out/dilation.json" "$out/fix-default.json" "$out/fix-activity.json" \
     "$out/train-default.json" "$out/train-activity.json" "$OUT/" 2>/dev/null
fi
exit 0
