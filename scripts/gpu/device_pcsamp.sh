#!/usr/bin/env bash
# GPU PC sampling checks on the GPU machine, in one call (read-only for the GPU: no clock,
# power-limit or mode changes; ncu only with --clock-control none). Expects in carry/:
# powerperf.gz (stripped release binary, gzip), libpowerperf_rt.so, libpowerperf_rt_cuda.so.
#   bash scripts/gpu/device_pcsamp.sh OUTDIR REPEATS
set -uo pipefail
out=${1:-/tmp/pp-pcs}; reps=${2:-3}
mkdir -p "$out"
[ -x carry/powerperf ] || { gunzip -c carry/powerperf.gz > carry/powerperf && chmod +x carry/powerperf; }
pp=$PWD/carry/powerperf
lib=$PWD/carry/libpowerperf_rt_cuda.so
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv
nvcc -O2 -lineinfo -arch=sm_90 -o /tmp/sk scripts/gpu/stall_kernels.cu || exit 1
echo "== 1. fixture: a small run recorded by the injection alone (format 2 with PC frames)"
rm -rf "$out/fix"; mkdir -p "$out/fix"
POWERPERF_RUN_DIR="$out/fix" CUDA_INJECTION64_PATH="$lib" POWERPERF_CUPTI_PC_SAMPLING=1 \
  POWERPERF_CUPTI_PC_PERIOD=12 /tmp/sk 1 0.05
ls -la "$out/fix" "$out/fix/gpu_activity" "$out/fix/cubins" 2>&1 | head -20
echo "== 2. collect --pc-sampling gpu (continuous, CUPTI's default period), report"
"$pp" collect --pc-sampling gpu --nvml on -q -o "$out/pc" -- /tmp/sk 3
"$pp" report "$out/pc" | sed -n '/GPU activity/,$p'
"$pp" report "$out/pc" --format json > "$out/pc-report.json"
grep -i "pc sampling\|pc samples\|CUPTI" "$out/pc/run.toml" | head -20
echo "== 3. period 2^10, and kernel-serialised mode"
"$pp" collect --pc-sampling gpu --gpu-pc-period 10 --nvml on -q -o "$out/pc10" -- /tmp/sk 3
"$pp" report "$out/pc10" | sed -n '/GPU PC sampling/,$p' | head -12
"$pp" collect --pc-sampling gpu --gpu-pc-serialized --nvml on -q -o "$out/pcser" -- /tmp/sk 3
"$pp" report "$out/pcser" | sed -n '/GPU PC sampling/,$p' | head -12
echo "== 4. dilation: $reps interleaved runs alone / collect --gpu / --pc-sampling gpu"
for i in $(seq "$reps"); do
  echo "alone $(/tmp/sk 3)"
  echo "gpu $("$pp" collect --gpu -q -o "$out/d-gpu" -- /tmp/sk 3)"
  echo "pc $("$pp" collect --pc-sampling gpu -q -o "$out/d-pc" -- /tmp/sk 3)"
  echo "pc10 $("$pp" collect --pc-sampling gpu --gpu-pc-period 10 -q -o "$out/d-pc10" -- /tmp/sk 3)"
done | tee "$out/dilation.txt"
echo "== 5. ncu --clock-control none --section WarpStateStats (one launch each)"
for k in chase barrier fma_chain; do
  m=""; for r in long_scoreboard barrier membar wait short_scoreboard math_pipe_throttle mio_throttle lg_throttle not_selected selected no_instruction branch_resolving dispatch_stall misc; do
    m="$m,smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio"; done
  echo "== ncu $k"
  timeout 120 ncu --clock-control none --section WarpStateStats --metrics "${m#,}" -k "regex:^${k}\$" --launch-count 1 /tmp/sk 1 2>&1 \
    | grep -E "stalled|Warp Cycles|Error|error" | head -24
done > "$out/ncu.txt" 2>&1
cat "$out/ncu.txt" | head -60
if [ -n "${OUT:-}" ]; then
  cp "$out"/fix/gpu_activity/*.bin "$OUT/fixture_pcsamp.bin" 2>/dev/null
  cp "$out/pc-report.json" "$out/dilation.txt" "$out/ncu.txt" "$OUT/" 2>/dev/null
  "$pp" report "$out/pc" > "$OUT/pc-report.txt" 2>&1
  { "$pp" report "$out/pc10"; "$pp" report "$out/pcser"; } > "$OUT/pc-variants.txt" 2>&1
  cp "$out/pc/run.toml" "$OUT/pc-run.toml"
fi
