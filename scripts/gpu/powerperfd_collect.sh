#!/bin/bash
# Usage: with stripped, xz-compressed powerperf and powerperfd in carry/d22/, as root on the
# GPU machine ($OUT receives the daemon log).
# collect as uid 65534 on the GPU host, with powerperfd as root serving the perf power PMU
# (read_power) when the user may not open it. Reads only: perf counters, NVML getters.
set -u
D=/tmp/pd; rm -rf $D; mkdir -p $D/state $D/runs; chmod 700 $D/state; chmod 755 $D; chown 65534:65534 $D/runs
for b in powerperf powerperfd; do xz -dc carry/d22/$b.xz > $D/$b; chmod 755 $D/$b; done
printf '[[grant]]\nname = "power-readers"\nusers = ["nobody"]\nread = ["energy", "power"]\n' > $D/cfg.toml
echo "perf_event_paranoid: $(cat /proc/sys/kernel/perf_event_paranoid)"
$D/powerperfd --config $D/cfg.toml --socket $D/run/s.sock --state-dir $D/state > $OUT/daemon.log 2>&1 &
DP=$!
for i in $(seq 100); do [ -S $D/run/s.sock ] && break; sleep 0.1; done
NB="setpriv --reuid=65534 --regid=65534 --clear-groups"
cd /tmp
$NB $D/powerperf collect --daemon $D/run/s.sock --interval 100ms -o $D/runs/r1 -- sleep 1 2>&1 | tail -20
echo "== run.toml notes and energy events"; grep -A12 "^notes" $D/runs/r1/run.toml; grep -B2 -A8 'name = "energy' $D/runs/r1/run.toml | head -40
echo "== the same collect as root (direct perf power PMU)"
$D/powerperf collect --interval 100ms -o $D/runs/r2 -- sleep 1 2>&1 | tail -5; grep -B2 -A8 'name = "energy' $D/runs/r2/run.toml | head -20
kill $DP; wait $DP
