#!/bin/bash
# Overhead of `collect --pc-sampling cpu` (docs/pc-sampling.md): N interleaved runs of
# tests/fixtures/pc/hot_cold.c at scale S under plain `collect` and under
# `collect --pc-sampling cpu`; prints per run the wall time of collect, the program's
# run.duration_ns, its task-clock total and powerperf's run.self_cpu_ns, in ms.
#
#   scripts/pc_sampling_overhead.sh [N=5] [S=2]
#   POWERPERF=target/release/powerperf scripts/pc_sampling_overhead.sh
set -euo pipefail
N=${1:-5}; S=${2:-2}
PP=${POWERPERF:-target/debug/powerperf}
LIB=$(dirname "$PP")
W=$(mktemp -d)
gcc -O2 -g -pthread -I rt/include tests/fixtures/pc/hot_cold.c -L "$LIB" -lpowerperf_rt \
    -Wl,-rpath,"$(cd "$LIB" && pwd)" -o "$W/hot_cold"
val() { grep -A6 "$2" "$1/run.toml" | grep "^$3 = " | head -1 | awk '{print $3}'; }
for i in $(seq "$N"); do
  for mode in off cpu; do
    d=$W/$mode-$i
    args=(); [ "$mode" = cpu ] && args=(--pc-sampling cpu)
    s=$(date +%s%N)
    "$PP" collect -q --nvml off "${args[@]}" -o "$d" -- "$W/hot_cold" "$S"
    e=$(date +%s%N)
    dur=$(grep '^duration_ns' "$d/run.toml" | awk '{print $3}')
    self=$(grep '^self_cpu_ns' "$d/run.toml" | awk '{print $3}')
    tc=$(val "$d" 'name = "task-clock"' total)
    echo "$mode $i wall_ms=$(( (e - s) / 1000000 )) prog_ms=$(( dur / 1000000 )) task_clock_ms=$(( ${tc%.*} / 1000000 )) self_cpu_ms=$(( self / 1000000 ))"
  done
done
rm -rf "$W"
