#!/usr/bin/env bash
# Second GPU batch of 2026-11-25 (read-only for the GPU): the NVML locked-clocks dry run
# (issue 7) and where the fixed start-up cost under collect comes from (issue 5): NVML
# sampling at 10 ms and 100 ms, and CUPTI without NVML, on 20,000 kernels of 10,000 cycles.
#   bash scripts/gpu/device_batch2.sh OUTDIR ROUNDS
set -uo pipefail
out=${1:-/tmp/pp-b2}; rounds=${2:-10}
mkdir -p "$out"
[ -x carry/powerperf ] || { gunzip -c carry/powerperf.gz > carry/powerperf && chmod +x carry/powerperf; }
pp=$PWD/carry/powerperf
echo "== NVML dry run"
bash scripts/gpu/nvml_dryrun.sh "$pp" "$out/nvml" 2>&1 | tail -40
nvcc -O2 -arch=sm_90 -o /tmp/fix rt/examples/cuda/cupti_fixture.cu || exit 1
echo "== start-up cost by source"
DILATION_CONFIGS=nvml,nvml-100ms,gpu,gpu-no-nvml DILATION_CYCLES=10000 \
  python3 scripts/gpu/dilation.py "$pp" /tmp/fix "$out" "$rounds" 20000
if [ -n "${OUT:-}" ]; then
  cp "$out/dilation.json" "$OUT/dilation-startup.json"
  cp "$out/nvml/inrange.stderr" "$OUT/nvml-inrange.stderr"
  cp "$out/nvml/outofrange.stderr" "$OUT/nvml-outofrange.stderr"
  cp "$out/nvml/inrange.stdout" "$OUT/nvml-inrange.json"
fi
exit 0
