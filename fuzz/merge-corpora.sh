#!/bin/sh
# Reduce each grown corpus to the inputs that keep its coverage (-set_cover_merge=1);
# run after long-run.sh, with the same CARGO_TARGET_DIR.
#
#   fuzz/merge-corpora.sh [TARGET...]
set -eu
cd "$(dirname "$0")"
targets=${*:-"run_toml set_toml set_parquet model_json plan_toml import_spec region_events cupti_bin"}
bin="${CARGO_TARGET_DIR:-/root/.cache/powerperf/fuzz-target}/x86_64-unknown-linux-gnu/release"
for t in $targets; do
    rm -rf "corpus/$t.min" && mkdir -p "corpus/$t.min"
    nice -n 19 "$bin/$t" -set_cover_merge=1 -timeout=10 -rss_limit_mb=2048 \
        "corpus/$t.min" "seeds/$t" "corpus/$t" >/dev/null 2>&1
    rm -rf "corpus/$t" && mv "corpus/$t.min" "corpus/$t"
    echo "$t: $(ls "corpus/$t" | wc -l) inputs, $(du -sk --apparent-size "corpus/$t" | cut -f1) KB"
done
