#!/bin/sh
# Long fuzz runs of the file-reader targets outside CI (fuzz/README.md): build with nightly
# and the cargo-fuzz flags (the manual recipe), then run each target for SECONDS (default
# 600) at the lowest priority, one process, on its corpus and seeds; then reduce each
# corpus with -set_cover_merge=1. Logs go to $LOGS (default /tmp/powerperf-fuzz-logs).
#
#   fuzz/long-run.sh [SECONDS] [TARGET...]     (SKIP_BUILD=1: run what is built)
set -eu
cd "$(dirname "$0")"
secs=${1:-600}
[ $# -gt 0 ] && shift
targets=${*:-"run_toml set_toml set_parquet model_json plan_toml import_spec region_events cupti_bin"}
: "${CARGO_TARGET_DIR:=/root/.cache/powerperf/fuzz-target}"
export CARGO_TARGET_DIR
logs=${LOGS:-/tmp/powerperf-fuzz-logs}
mkdir -p "$logs"
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Zsanitizer=address"
bins=""
for t in $targets; do bins="$bins --bin $t"; done
# shellcheck disable=SC2086
[ -n "${SKIP_BUILD:-}" ] || nice -n 19 cargo +nightly build --release --target x86_64-unknown-linux-gnu $bins
bin="$CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/release"
for t in $targets; do
    mkdir -p "corpus/$t" "artifacts/$t"
    start=$(date +%s)
    nice -n 19 "$bin/$t" "corpus/$t" "seeds/$t" -max_total_time="$secs" -timeout=10 \
        -rss_limit_mb=2048 -max_len=65536 -artifact_prefix="artifacts/$t/" \
        -print_final_stats=1 >"$logs/$t.log" 2>&1 || echo "$t: exit $? (see $logs/$t.log)"
    end=$(date +%s)
    echo "$t: wall $((end - start)) s; $(grep -h '^Done' "$logs/$t.log" || echo 'no Done line')"
done
