#!/usr/bin/env bash
# Issue 40: a PyTorch training loop with NVTX ranges, collected with --gpu on the GPU machine
# and exported in the three formats (read-only for the GPU: no clock, power-limit or mode
# changes). Expects in CARRY (default .devcarry-40/): bins.tgz (powerperf, the release
# binary, with libpowerperf_rt.so and libpowerperf_rt_cuda.so beside it, and OTF2's
# libopen-trace-format2.so.10, which needs only libc), train_nvtx.py (a copy of
# scripts/gpu/train_nvtx.py).
#   CARRY=.devcarry-40 bash .devcarry-40/device_export.sh
# Writes to $OUT: the report, the Perfetto trace, the Chrome trace (gzipped), the OTF2
# archive (a .tgz), the run directory (a .tgz) and the export times and sizes.
set -uo pipefail
c=$PWD/${CARRY:-.devcarry-40}
w=/tmp/pp-export
rm -rf "$w" && mkdir -p "$w" && tar xzf "$c/bins.tgz" -C "$w" || exit 1
pp=$w/powerperf
export POWERPERF_RT_LIB=$w/libpowerperf_rt.so
export POWERPERF_OTF2_LIBRARY=$w/libopen-trace-format2.so.10
out=${OUT:-$w/out}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv
python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))"
"$pp" --version
echo "== collect: 2 epochs x 10 steps, width 2048, --gpu --nvml on, 10 ms"
"$pp" collect --gpu --nvml on --interval 10ms -q -o "$w/train" -- python3 "$c/train_nvtx.py" 2 10 2048
"$pp" report "$w/train" > "$out/report.txt" 2>&1
sed -n '/Regions/,/^$/p;/GPU activity/,+25p' "$out/report.txt" | head -70
echo "== run directory: $(du -sb "$w/train" | cut -f1) bytes"
for spec in "perfetto train.pftrace" "chrome train.json.gz" "chrome train.json" "otf2 train-otf2"; do
  set -- $spec
  s=$(date +%s%N)
  "$pp" export "$w/train" --format "$1" -o "$w/$2" || echo "export --format $1 FAILED"
  echo "export $1 -> $2: $(du -sb "$w/$2" | cut -f1) bytes in $(( ($(date +%s%N) - s) / 1000000 )) ms"
done 2>&1 | tee "$out/export-times.txt"
cp "$w/train.pftrace" "$w/train.json.gz" "$out/"
tar czf "$out/train-otf2.tgz" -C "$w" train-otf2
tar czf "$out/train-run.tgz" -C "$w" train
ls -la "$out"
