#!/bin/bash
# powerperfd's GPU numbering on a real NVIDIA node with an AMD/Intel GPU beside it (issue 43):
# NVML's GPUs first, then the hwmon GPUs of --sysfs-root (here a copy of the xe fixture,
# tests/fixtures/sysfs/xe). Only the fixture's GPU (GPU 1) is ever set; the NVIDIA GPU
# (GPU 0) gets `check` requests only, which call NVML getters and change nothing (the
# project never changes the lent GPU: nvidia-smi's power limit and clocks are printed
# before and after). Also: the daemon SIGKILLed mid-session and restarted restores the
# fixture from its journal, with NVML open.
# Usage: bash scripts/gpu/powerperfd_sysfs_gpus.sh [powerperfd.xz], as root on the GPU machine,
# from the repository root ($OUT receives the daemon log). The binary: strip and xz
# target/debug/powerperfd into carry/d43c/ (ignored). Run on a machine without NVML (there the
# xe fixture is GPU 0 and the GPU 1 requests are refused as "does not exist") and on an H200
# (2026-11-29): NVML GPU 0 checked only, its power limit and clocks the same before and after;
# GPU 1 set, then byte-identical after the session and after the SIGKILL and restart.
set -u
OUT=${OUT:-/tmp}
D=/tmp/pd43; rm -rf $D; mkdir -p $D/state $D/root; chmod 700 $D/state; chmod 755 $D
xz -dc "${1:-carry/d43c/powerperfd.xz}" > $D/powerperfd; chmod 755 $D/powerperfd
cp -r tests/fixtures/sysfs/xe/. $D/root/
cat > $D/cfg.toml <<'T'
[[grant]]
name = "gpu-users"
users = ["nobody"]
write = ["gpu.power_limit", "gpu.locked_clocks"]
[grant.ranges]
"gpu.power_limit" = [100, 300]
"gpu.locked_clocks" = [300, 1600]
T
Q="nvidia-smi --query-gpu=name,power.limit,power.min_limit,power.max_limit,clocks.sm,clocks.max.sm --format=csv"
echo "== before"; $Q
start() {
  # A SIGKILLed daemon leaves its socket behind: remove it, so that the wait below is for
  # the new daemon's socket (bound after its journal restore), not the old file.
  rm -f $D/run/s.sock
  RUST_LOG=powerperfd=debug $D/powerperfd --config $D/cfg.toml --socket $D/run/s.sock --state-dir $D/state --sysfs-root $D/root >> $OUT/daemon.log 2>&1 &
  DP=$!
  for i in $(seq 100); do [ -S $D/run/s.sock ] && break; sleep 0.1; done
}
start
R="$D/powerperfd request --socket $D/run/s.sock"
NB="setpriv --reuid=65534 --regid=65534 --clear-groups"
X=$D/root/sys/class/hwmon/hwmon2
echo "== the daemon's GPU controls:"; grep -m1 "signals and controls" $OUT/daemon.log | grep -o "gpu=.*power_pmu"
echo "== check only (nothing is written): GPU 0 (NVML) and GPU 1 (xe fixture), GPU 2 (none)"
$NB $R '{"op":"check","request":{"op":"set_gpu_power_limit","gpu":0,"watts":250}}'
$NB $R '{"op":"check","request":{"op":"set_gpu_power_limit","gpu":1,"watts":250}}'
$NB $R '{"op":"check","request":{"op":"set_gpu_power_limit","gpu":2,"watts":250}}'
echo "== GPU 1: power1_max 250 W and gt clocks [900, 1200] in one session, then the session ends"
(sleep 1) | $NB $R --hold '{"op":"set_gpu_power_limit","gpu":1,"watts":250}' '{"op":"set_gpu_locked_clocks","gpu":1,"min_mhz":900,"max_mhz":1200}' &
HP=$!
sleep 0.5; echo "during: power1_max $(cat $X/power1_max), tile0 min/max $(cat $X/device/tile0/gt0/freq0/min_freq)/$(cat $X/device/tile0/gt0/freq0/max_freq)"
wait $HP; sleep 0.3
diff -r tests/fixtures/sysfs/xe $D/root && echo "after the session: the tree is byte-identical to the fixture"
echo "== the daemon SIGKILLed mid-session, restarted"
(sleep 3) | $NB $R --hold '{"op":"set_gpu_power_limit","gpu":1,"watts":200}' &
HP=$!
sleep 0.5; echo "during: power1_max $(cat $X/power1_max)"
kill -9 $DP; wait $DP 2>/dev/null
echo "daemon killed: power1_max $(cat $X/power1_max)"
start
diff -r tests/fixtures/sysfs/xe $D/root && echo "after the restart: the tree is byte-identical to the fixture (restored from the journal)"
wait $HP
kill $DP; wait $DP
echo "== after"; $Q
