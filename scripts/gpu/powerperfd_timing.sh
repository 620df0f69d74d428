#!/bin/bash
# Usage: build the debug test binaries here (cargo test --test daemon --test daemon_controls
# --no-run), strip and xz them with powerperf and powerperfd into carry/d22/ (names as
# below), tar tests/fixtures and examples/plans into carry/d22/tree.tar.xz, then run this
# on the device machine. The binaries expect the paths they were compiled with.
# powerperfd timing and daemon tests on the idle GPU host's CPUs (no GPU is touched: the
# tests use fixture sysfs trees and the fake GPU). Paths as compiled on the build machine.
set -eu
C=$PWD/carry/d22
mkdir -p /work/wt/d22 /root/.cache/pp-d22/debug
tar -C /work/wt/d22 -xJf $C/tree.tar.xz
for b in powerperf powerperfd; do xz -dc $C/$b.xz > /root/.cache/pp-d22/debug/$b; chmod 755 /root/.cache/pp-d22/debug/$b; done
xz -dc $C/daemon-322a07c0e44e31d0.xz > /tmp/daemon-test; xz -dc $C/daemon_controls-9c93a5c6ddcdfe1a.xz > /tmp/daemon-controls-test
chmod 755 /tmp/daemon-test /tmp/daemon-controls-test
cd /work/wt/d22
nproc; uptime; grep -m1 "model name" /proc/cpuinfo; df -h /tmp | tail -1
for i in 1 2 3; do uptime; /tmp/daemon-test daemon_switch_round_trip --nocapture 2>&1 | grep -E "^\||test result"; done
/tmp/daemon-test the_setting_is_restored_after --nocapture 2>&1 | grep -E "restored|test |result"
/tmp/daemon-controls-test --nocapture 2>&1 | grep -E "restored|skipped|test |result"
