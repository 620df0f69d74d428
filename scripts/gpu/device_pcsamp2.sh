#!/usr/bin/env bash
# Second GPU PC sampling call: clean run directories, the SM clock while kernels ran
# (GSAMP:EXP), where the dilation of the chase kernel lies (cumulative time per repetition).
#   bash scripts/gpu/device_pcsamp2.sh OUTDIR
set -uo pipefail
out=${1:-/tmp/pp-pcs2}; rm -rf "$out"; mkdir -p "$out"
[ -x carry/powerperf ] || { gunzip -c carry/powerperf.gz > carry/powerperf && chmod +x carry/powerperf; }
pp=$PWD/carry/powerperf
nvcc -O2 -lineinfo -arch=sm_90 -o /tmp/sk scripts/gpu/stall_kernels.cu || exit 1
export STALL_KERNELS_VERBOSE=1
echo "== alone"; /tmp/sk 5
echo "== collect --pc-sampling gpu --nvml on"
"$pp" collect --pc-sampling gpu --nvml on --interval 10ms -q -o "$out/pc" -- /tmp/sk 5
"$pp" report "$out/pc" | sed -n '/GPU activity/,$p'
echo "== collect --pc-sampling gpu --gpu-pc-period 12 --nvml on"
"$pp" collect --pc-sampling gpu --gpu-pc-period 12 --nvml on --interval 10ms -q -o "$out/pc12" -- /tmp/sk 5
"$pp" report "$out/pc12" | sed -n '/GPU PC sampling/,/^$/p'
if [ -n "${OUT:-}" ]; then
  "$pp" report "$out/pc" --format json > "$OUT/pc-report.json"
  "$pp" report "$out/pc" > "$OUT/pc-report.txt" 2>&1
  "$pp" report "$out/pc12" > "$OUT/pc12-report.txt" 2>&1
  cp "$out/pc/run.toml" "$OUT/pc-run.toml"
  cp "$out/pc/gpu_pc_samples.parquet" "$out/pc/gpu_pc_sampling.parquet" "$OUT/"
fi
