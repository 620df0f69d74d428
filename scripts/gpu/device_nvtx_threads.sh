#!/usr/bin/env bash
# Issue 20, item 5: GPU kernels in NVTX regions across threads, checked on the GPU machine in
# one call (read-only for the GPU: no clock, power-limit or mode changes). Expects in CARRY
# (default carry/): powerperf (or powerperf.gz: stripped release binary), libpowerperf_rt.so,
# libpowerperf_rt_cuda.so, and train_nvtx.py (a copy of scripts/gpu/train_nvtx.py).
#   CARRY=carry/regions20 bash carry/regions20/device_nvtx_threads.sh OUTDIR
# Writes to $OUT (when set): the text and JSON reports of the training loop, its run.toml,
# and a small recording (gpu_activity/<pid>.bin + region_events/<pid>.tsv) for the CI test.
set -uo pipefail
out=${1:-/tmp/pp-nvtx}
mkdir -p "$out"
c=$PWD/${CARRY:-carry}
# the CUDA injection library is looked for beside the binary
[ -x "$c/powerperf" ] || { gunzip -c "$c/powerperf.gz" > "$c/powerperf" && chmod +x "$c/powerperf"; } || exit 1
pp=$c/powerperf
export POWERPERF_RT_LIB=$c/libpowerperf_rt.so
train=$c/train_nvtx.py; [ -f "$train" ] || train=scripts/gpu/train_nvtx.py
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv
python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))"
"$pp" --version
echo "== 1. PyTorch training loop with NVTX ranges under collect --gpu --nvml on"
"$pp" collect --gpu --nvml on --interval 10ms -q -o "$out/train" -- python3 "$train" 3 40
"$pp" report "$out/train" > "$out/train-report.txt" 2>&1
sed -n '/GPU activity/,$p' "$out/train-report.txt" | head -60
"$pp" report "$out/train" --format json > "$out/train-report.json"
sed -n '/\[gpu_attribution/,/^$/p' "$out/train/run.toml"
grep -n "region rule" "$out/train/run.toml"
echo "== 2. a small recording for the CI fixture (1 epoch x 2 steps, smaller layers)"
"$pp" collect --gpu --nvml off -q -o "$out/small" -- python3 "$train" 1 2 512
"$pp" report "$out/small" | sed -n '/GPU activity/,$p' | tail -12
ls -la "$out/small" "$out/small/gpu_activity" "$out/small/region_events"
if [ -n "${OUT:-}" ]; then
  cp "$out/train-report.txt" "$out/train-report.json" "$OUT/"
  cp "$out/train/run.toml" "$OUT/train-run.toml"
  mkdir -p "$OUT/small"
  cp "$out/small/run.toml" "$OUT/small/run.toml"
  cp "$out/small"/gpu_activity/*.bin "$OUT/small/" 2>/dev/null
  cp "$out/small"/region_events/*.tsv "$OUT/small/" 2>/dev/null
  ls -la "$OUT" "$OUT/small"
fi
