#!/usr/bin/env bash
# Produce the notebooks' inputs with a powerperf binary, then execute every notebook headless
# (nbclient). Exits non-zero if a command or any notebook cell fails.
#
#   notebooks/run_notebooks.sh POWERPERF_BINARY WORKDIR
#
# WORKDIR receives the inputs (runs, training set, model, evaluation, plan), logs/ (the output
# of each powerperf command), executed/ (the notebooks with their outputs) and figures/ (PNG).
# The dataset notebooks read the bundled Titan X data (datasets/titanx-micro.toml and
# datasets/titanx-dvfs/; $POWERPERF_DATA_DIR, when set, replaces the data files).
# Prints one line per notebook: `notebook <name>: ok`.
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 POWERPERF_BINARY WORKDIR" >&2
  exit 2
fi
[ -x "$1" ] || { echo "$0: $1 is not an executable powerperf binary" >&2; exit 2; }
BIN="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
mkdir -p "$2"
WORK="$(cd "$2" && pwd)"
NB="$(cd "$(dirname "$0")" && pwd)"
REPO="$(dirname "$NB")"
mkdir -p "$WORK/logs" "$WORK/executed" "$WORK/figures"

# Python packages (from PyPI; nothing pinned).
if ! python3 -c 'import nbclient, nbformat, ipykernel, polars, pyarrow, matplotlib' 2>/dev/null; then
  echo "installing the notebooks' Python packages (nbclient nbformat ipykernel polars pyarrow matplotlib)"
  python3 -m pip install -q nbclient nbformat ipykernel polars pyarrow matplotlib \
    || python3 -m pip install -q --break-system-packages nbclient nbformat ipykernel polars pyarrow matplotlib
fi
if ! python3 -c 'import tomllib' 2>/dev/null && ! python3 -c 'import tomli' 2>/dev/null; then
  python3 -m pip install -q tomli || python3 -m pip install -q --break-system-packages tomli
fi

# run NAME CMD...: run a command with its output in logs/NAME.log, shown when it fails.
run() {
  local name="$1"; shift
  if ! "$@" >"$WORK/logs/$name.log" 2>&1; then
    echo "failed: $*" >&2
    cat "$WORK/logs/$name.log" >&2
    exit 1
  fi
}

# run_out NAME OUTFILE CMD...: as run, with the command's stdout in OUTFILE.
run_out() {
  local name="$1" out="$2"; shift 2
  if ! "$@" >"$out" 2>"$WORK/logs/$name.log"; then
    echo "failed: $*" >&2
    cat "$WORK/logs/$name.log" >&2
    exit 1
  fi
}

failed=0
# notebook LABEL FILE VAR=VALUE...: execute FILE with the variables set.
notebook() {
  local label="$1" file="$2"; shift 2
  if env "$@" POWERPERF_NB_FIGURES="$WORK/figures/$label" MPLBACKEND=module://matplotlib_inline.backend_inline \
      python3 "$NB/execute_notebook.py" "$NB/$file" "$WORK/executed/$label.ipynb" --cwd "$WORK" \
      >"$WORK/logs/nb-$label.log" 2>&1; then
    echo "notebook $label: ok"
  else
    echo "notebook $label: FAILED (log: $WORK/logs/nb-$label.log, executed copy: $WORK/executed/$label.ipynb)"
    grep -v 'Kernel is running over TCP' "$WORK/logs/nb-$label.log" | sed 's/\x1b\[[0-9;]*m//g' | tail -40
    failed=1
  fi
}

cd "$WORK"

# 1. Runs: a program with marked regions, and a plain shell loop (no regions, no power here).
rm -rf run-regions run-sh
run collect-regions "$BIN" collect --interval 5ms -o run-regions -- python3 "$NB/workload_regions.py" "$REPO/src"
run collect-sh "$BIN" collect -o run-sh -- sh -c 'i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done'
notebook run_tour run_tour.ipynb POWERPERF_NB_RUN="$WORK/run-regions"
notebook run_tour-sh run_tour.ipynb POWERPERF_NB_RUN="$WORK/run-sh"

# 2. The Titan X set (bundled): evaluate, fit, plan.
if [ -n "${POWERPERF_DATA_DIR:-}" ] && [ ! -f "$POWERPERF_DATA_DIR/titanx-dvfs/micro_140.csv" ]; then
  reason="\$POWERPERF_DATA_DIR=$POWERPERF_DATA_DIR has no titanx-dvfs/micro_140.csv (unset it to use the bundled copy)"
  echo "notebook model_evaluation: skipped: $reason"
  echo "notebook plan: skipped: $reason"
else
  rm -rf titanx
  run import "$BIN" import "$REPO/datasets/titanx-micro.toml" -o titanx
  run evaluate "$BIN" evaluate titanx --protocol knob-holdout --train core_freq_mhz=595,861,1164 -o points.csv
  run_out evaluate-json eval.json \
    "$BIN" evaluate titanx --protocol knob-holdout --train core_freq_mhz=595,861,1164 --format json
  notebook model_evaluation model_evaluation.ipynb \
    POWERPERF_NB_EVAL_CSV="$WORK/points.csv" POWERPERF_NB_EVAL_JSON="$WORK/eval.json"

  run fit "$BIN" fit titanx -o titanx.json --cv 10
  workloads=(DRAM SP sp_mul_4)
  run plan "$BIN" plan --model titanx.json "${workloads[@]/#/--workload=}" \
    --objective energy --max-slowdown 5% -o plan.toml
  # The alternatives: the model's predictions at every setting of the set, per planned workload.
  core=$(python3 -c 'import polars as pl; print(",".join(f"{v:g}" for v in pl.read_parquet("titanx/points.parquet")["core_freq_mhz"].unique().sort()))')
  mem=$(python3 -c 'import polars as pl; print(",".join(f"{v:g}" for v in pl.read_parquet("titanx/points.parquet")["mem_freq_mhz"].unique().sort()))')
  rm -f alternatives.csv
  for w in "${workloads[@]}"; do
    run_out "predict-$w" "predict-$w.csv" "$BIN" predict --model titanx.json --workload "$w" \
      --knob "core_freq_mhz=$core" --knob "mem_freq_mhz=$mem" --format csv
    if [ -f alternatives.csv ]; then tail -n +2 "predict-$w.csv" >>alternatives.csv
    else cp "predict-$w.csv" alternatives.csv; fi
  done
  notebook plan plan.ipynb POWERPERF_NB_PLAN="$WORK/plan.toml" POWERPERF_NB_PLAN_ALTERNATIVES="$WORK/alternatives.csv"
fi

exit $failed
