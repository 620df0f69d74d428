#!/bin/bash
# powerperfd's read path on a GPU machine (issue 22): NVML power/energy and the perf power
# PMU through the daemon, and the GPU controls refused by the policy. powerperfd opens NVML
# writable; this script grants no gpu.* write, so no NVML setter can be reached: the project
# never changes the lent GPU's clocks or power limit (the controls are tested on --fake-gpu).
set -u
# Usage: bash scripts/gpu/powerperfd_reads.sh [powerperfd.xz], as root on the GPU machine ($OUT
# receives the daemon log). Read-only: NVML getters, perf counter reads, nvidia-smi queries.
OUT=${OUT:-/tmp}
D=/tmp/pd; rm -rf $D; mkdir -p $D/state; chmod 700 $D/state; chmod 755 $D
xz -dc "${1:-carry/d22/powerperfd.xz}" > $D/powerperfd; chmod 755 $D/powerperfd
cat > $D/cfg.toml <<'T'
[[grant]]
name = "gpu-users"
users = ["nobody"]
read = ["energy", "power"]
T
echo "== before"; nvidia-smi --query-gpu=name,power.limit,power.min_limit,power.max_limit,clocks.sm,clocks.max.sm,power.draw --format=csv
ls /sys/bus/event_source/devices/ ; ls /sys/bus/event_source/devices/power/events 2>&1 | head
RUST_LOG=powerperfd=debug $D/powerperfd --config $D/cfg.toml --socket $D/run/s.sock --state-dir $D/state --sysfs-root / > $OUT/daemon.log 2>&1 &
DP=$!
for i in $(seq 100); do [ -S $D/run/s.sock ] && break; sleep 0.1; done
R="$D/powerperfd request --socket $D/run/s.sock"
NB="setpriv --reuid=65534 --regid=65534 --clear-groups"
echo "== root: status, read_power x2 (0.5 s apart through two sessions)"
$R '{"op":"status"}' '{"op":"read_power"}'
sleep 0.5
$R '{"op":"read_power"}' '{"op":"read_energy"}'
echo "== nobody (granted reads, no gpu.* write): read_power, and the GPU controls (refused by the policy)"
$NB $R '{"op":"read_power"}'
$NB $R '{"op":"set_gpu_power_limit","gpu":0,"watts":300}'
$NB $R '{"op":"set_gpu_locked_clocks","gpu":0,"min_mhz":1200}'
$NB $R '{"op":"set_gpu_locked_clocks","gpu":0,"min_mhz":99999}'
echo "== uid 4243 (no grant): read_power"
setpriv --reuid=4243 --regid=4243 --clear-groups $R '{"op":"read_power"}'
echo "== the journal holds no save:"; cat $D/state/powerperfd-journal.jsonl
kill $DP; wait $DP
echo "== after"; nvidia-smi --query-gpu=name,power.limit,clocks.sm,clocks.max.sm --format=csv
