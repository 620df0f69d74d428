#!/usr/bin/env bash
# Everything issue 5 checks on the GPU machine, in one call (read-only for the GPU: no
# clock, power-limit or mode changes). Expects the release binaries in carry/:
#   carry/powerperf, carry/libpowerperf_rt.so
#   bash scripts/gpu/device_run.sh OUTDIR
set -uo pipefail
out=${1:-${OUT:-/tmp/pp-gpu}}
mkdir -p "$out"
pp=$PWD/carry/powerperf
export POWERPERF_RT_LIB=$PWD/carry/libpowerperf_rt.so
here=scripts/gpu
echo "== machine"; nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,power.draw,power.limit,clocks.sm,clocks.max.sm --format=csv
python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda)"
echo "== 1. NVML energy counter vs integral of sampled power, 35 s load"
bash $here/nvml_check.sh "$pp" "$out/nvml" 35 10
"$pp" report "$out/nvml/load" | tail -n 25
echo "== 2. PyTorch training loop with NVTX ranges (no code change): regions and energy"
"$pp" collect --nvml on --interval 10ms -o "$out/train" -- python3 $here/train_nvtx.py 3 40
"$pp" report "$out/train" | sed -n '/Regions/,$p'
"$pp" report "$out/train" --format json > "$out/train-report.json"
echo "== 3. nvml off: the same run reports no GPU columns"
"$pp" collect -q --nvml off -o "$out/off" -- python3 -c "print('ok')"; "$pp" report "$out/off" --format json | python3 -c "import json,sys; d=json.load(sys.stdin); print('gpus in report:', d['gpus'])"
