#!/usr/bin/env bash
# NVML locked-clocks dry run on a real GPU (docs/dvfs.md, "NVML locked clocks").
# Usage: scripts/gpu/nvml_dryrun.sh PATH/TO/powerperf [OUTDIR]
#
# Changes NOTHING on the GPU: powerperf's dry run only calls NVML getters (device count and
# name, supported memory and graphics clocks, current/application/max clocks, API
# restriction) and prints the nvmlDeviceSetGpuLockedClocks / nvmlDeviceResetGpuLockedClocks
# calls it would make. This script calls no setter either: only `nvidia-smi -q` (read-only)
# before and after, to show the clocks are unchanged. Never add -lgc, -lmc, -pl, -ac, -rgc,
# -r or -pm here.
set -u
PP=${1:?usage: $0 PATH/TO/powerperf [OUTDIR]}
OUT=${2:-${OUT:-nvml-dryrun-out}}
HERE=$(cd "$(dirname "$0")/../.." && pwd)
PLAN=$HERE/examples/plans/gpu-static.toml
mkdir -p "$OUT"
rc=0
nvidia-smi -q -d CLOCK > "$OUT/clocks-before.txt" 2>&1 || echo "nvidia-smi -q failed (see $OUT/clocks-before.txt)"

echo "== in-range plan ($PLAN): expect the reads, the set and reset calls, exit 0"
"$PP" apply --dry-run --plan "$PLAN" --format json -- true > "$OUT/inrange.stdout" 2> "$OUT/inrange.stderr"
echo "exit $?" | tee "$OUT/inrange.rc"
cat "$OUT/inrange.stderr"

echo "== out-of-range plan (SM clock 5000 MHz): expect a refusal naming the supported range, exit 1"
sed 's/^core_freq_mhz = 1200.0/core_freq_mhz = 5000.0/' "$PLAN" > "$OUT/gpu-out-of-range.toml"
"$PP" apply --dry-run --plan "$OUT/gpu-out-of-range.toml" -- echo "SHOULD NOT RUN" > "$OUT/outofrange.stdout" 2> "$OUT/outofrange.stderr"
orc=$?
echo "exit $orc" | tee "$OUT/outofrange.rc"
cat "$OUT/outofrange.stderr" "$OUT/outofrange.stdout"
[ "$orc" -ne 0 ] || { echo "FAIL: out-of-range plan was not refused"; rc=1; }
grep -q "SHOULD NOT RUN" "$OUT/outofrange.stdout" && { echo "FAIL: command ran"; rc=1; }

nvidia-smi -q -d CLOCK > "$OUT/clocks-after.txt" 2>&1
# Clocks move with load; the lines that must not change are the locked/application settings.
for f in before after; do
  grep -iE "Applications Clocks|Default Applications|Locked|Max Clocks" -A3 "$OUT/clocks-$f.txt" > "$OUT/settings-$f.txt" || true
done
if diff "$OUT/settings-before.txt" "$OUT/settings-after.txt" > "$OUT/settings.diff"; then
  echo "clock settings unchanged (nvidia-smi -q -d CLOCK, application/locked/max sections)"
else
  echo "FAIL: clock settings differ:"; cat "$OUT/settings.diff"; rc=1
fi
grep -q "nvmlDeviceSetGpuLockedClocks(device 0, minGpuClockMHz 1200, maxGpuClockMHz 1200)" "$OUT/inrange.stderr" \
  || { echo "FAIL: set call not printed"; rc=1; }
grep -q "nvmlDeviceGetSupportedGraphicsClocks" "$OUT/inrange.stderr" \
  || { echo "FAIL: supported clocks not read (NVML not reachable?)"; rc=1; }
echo "result: $([ $rc -eq 0 ] && echo PASS || echo FAIL) (outputs in $OUT)"
exit $rc
