#!/usr/bin/env bash
# Side-by-side check of `powerperf microbench run` (issue 8): bandwidths against likwid-bench
# (copy, load and the 4-stream `triad` as the issue names them, and copy_sse, stream_sse,
# load_sse: the SSE2 shape our kernels compile to on x86-64) and mbw (element loop and
# memcpy), latencies per cache level against published figures, and the pointer-chase
# curve's steps against the cache sizes sysfs reports. Run by hand:
#
#   apt-get install -y likwid mbw
#   microbench/compare.sh                     # ROUNDS=6 KEEP=dir to keep constants, curve, JSON
#   POWERPERF=target/release/powerperf microbench/compare.sh   # the full run through the binary
#   REPORT_ONLY=dir microbench/compare.sh     # print the report again from a KEEP dir, measuring nothing
#
# Without POWERPERF the full run is the crate's `suite` example (the same code as
# `powerperf microbench run`), built here in release mode.
#
# Fair comparison, item by item:
# - same working set: every array (stream) is PER_KB kB (4x the last-level cache) for both
#   tools; likwid-bench's -w size is the sum over its kernel's streams;
# - same byte counting: likwid-bench counts its kernel's BYTES (copy 16, stream 24, triad 32,
#   load 8 per element: loads plus stores, no write-allocate), as STREAM does; mbw prints
#   MiB copied, counted here as 2 x (read + write);
# - same stores: copy with ordinary stores (ours `copy`, likwid `copy`, `copy_sse`, mbw's
#   element loop) pays a write-allocate read for every line it writes; copy with
#   non-temporal stores (ours `copy_nt`, likwid `copy_mem_sse`) does not, so each is
#   compared with its own kind; mbw's MEMCPY is compared with ours `memcpy`, the same glibc
#   memcpy (which has its own large-copy path) timed by our harness;
# - same pages: THP is `madvise` here, so likwid-bench and mbw (malloc) get 4 KiB pages,
#   with a TLB miss and a prefetch stop every 4 KiB; ours runs on default pages for the
#   comparison and once more on huge pages (what `powerperf microbench run` reports);
# - same layout: arrays whose addresses share their low bits fall into the same cache sets
#   (on a Zen 4 guest that cost our copy a third of its rate when the arrays were 2 MiB
#   apart). Every comparison is made in two layouts: `stag`, array k shifted by k x 520
#   elements (4 KiB + 64 B; ours by default, likwid-bench through its stream offsets
#   `-w S0:SIZE:N-0:S0:0,1:S0:1040`, each stream where its counterpart in ours is), and `4k`, arrays at the same offset in their
#   pages (malloc's page-aligned blocks: plain likwid-bench, mbw; ours with
#   --stagger 512). mbw has no offsets, so it is in the `4k` comparison only;
# - same placement: likwid-bench -w S0:SIZE:N pins N threads to the first N hardware
#   threads; ours pins thread i to allowed CPU i;
# - same scheduling: this 2-vCPU machine is shared, and other sessions' builds take CPU time
#   that nice cannot win back (they are in other cgroups); every tool runs real-time
#   (likwid-bench and mbw under `chrt -r 1`, ours asks for SCHED_RR itself), so wall time
#   is the kernel's own. SCHED_RR, not FIFO: likwid-bench's threads spin in a barrier while
#   its main thread, on the same CPU, still has to start the second thread;
# - same timing: likwid-bench gives one rate over its -i iterations; ours prints the same
#   (all bytes over all rounds' time, `mean`) next to the median of rounds;
# - interleaved: per round, for 1 and for all threads, the tools take turns kernel by
#   kernel, and the order flips every round (ABBA), so drifts in the memory traffic of the
#   other guests hit both alike. The ratio of each round's pair is reported with its spread.
set -euo pipefail

if [[ -n ${REPORT_ONLY:-} ]]; then
    WORK=$REPORT_ONLY
    NCPU=$(awk '$1 ~ /^ours/ {print $3}' "$WORK/runs.txt" | sort -n | tail -1)
else
for t in likwid-bench mbw python3 chrt; do
    command -v "$t" >/dev/null || { echo "Error: $t not found (apt-get install -y likwid mbw python3)" >&2; exit 1; }
done

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
NCPU=$(nproc)
ROUNDS=${ROUNDS:-6}
ITER=${ITER:-10}   # likwid-bench -i and our recorded rounds per run
RT="chrt -r 1"
if [[ $(id -u) != 0 ]]; then
    echo "note: not root, so no real-time scheduling; other tasks' CPU time enters every tool's wall time" >&2
    RT=""
fi

echo "== machine"
lscpu | grep -E '^(Model name|Vendor ID|CPU family|Model|CPU\(s\)|L1d|L2|L3|Hypervisor)' | sed 's/  */ /g'
for d in /sys/devices/system/cpu/cpu0/cache/index*; do
    echo "sysfs $(basename "$d"): L$(cat "$d/level") $(cat "$d/type") $(cat "$d/size") shared with CPUs $(cat "$d/shared_cpu_list")"
done
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
likwid-bench -h 2>&1 | head -1 || true

MB_TARGET=${MB_TARGET:-${CARGO_TARGET_DIR:-/root/.cache/pp-mb-target}}
CARGO_TARGET_DIR=$MB_TARGET cargo build -q --release -p powerperf-microbench --example stream --example suite
STREAM_BIN=$MB_TARGET/release/examples/stream
SUITE_BIN=$MB_TARGET/release/examples/suite

LLC=$(python3 -c "
import glob
s=0
for d in glob.glob('/sys/devices/system/cpu/cpu0/cache/index*'):
    v=open(d+'/size').read().strip(); m={'K':1<<10,'M':1<<20,'G':1<<30}
    s=max(s, int(v[:-1])*m[v[-1]] if v[-1] in m else int(v))
print(s)")
PER_KB=$((4 * LLC / 1000))
MBW_MIB=$((PER_KB * 1000 / 1048576))
echo "== bandwidth: $ROUNDS rounds; arrays of $PER_KB kB; likwid-bench -i $ITER, ours $ITER rounds after 1 warm-up; mbw -n 3 on $MBW_MIB MiB; real-time: ${RT:-no}"

likwid() { # kernel streams threads round layout(stag|4k)
    local out w="S0:$(($2 * PER_KB))kB:$3" tool=likwid
    if [[ $5 == stag ]]; then
        # Offsets (elements) that give each stream the place of its counterpart in ours:
        # a at 0, b at STAGGER, c at 2 x STAGGER. likwid-bench's copy kernels read STR0 and
        # write STR1 (ours: c = a); its stream kernel writes STR0 = STR1 * s + STR2 (ours:
        # a = b + s * c); its 4-stream triad has no counterpart and gets 0, 1, 2, 3 x STAGGER.
        tool=likwid-stag
        case $1 in
            copy*) w+="-0:S0:0,1:S0:$((2 * STAGGER))" ;;
            *) w+="-0:S0:0"; for ((i = 1; i < $2; i++)); do w+=",$i:S0:$((i * STAGGER))"; done ;;
        esac
    fi
    if ! out=$(timeout 120 $RT likwid-bench -t "$1" -w "$w" -i "$ITER" 2>&1); then
        echo "likwid-bench -t $1 -w $w failed: $(echo "$out" | tail -2)" >&2; return 0
    fi
    echo "$out" | awk -F: -v t="$tool" -v k="$1" -v n="$3" -v r="$4" '/^MByte\/s/ {gsub(/[ \t]/,"",$2); print t, k, n, r, $2 / 1000}' >>"$WORK/runs.txt"
}
likwid_all() { # threads round layout; order flips with the round
    local ks=(copy:2 copy_sse:2 copy_mem_sse:2 stream_sse:3 triad:4 load:1 load_sse:1) i
    local order; order=$(seq 0 $((${#ks[@]} - 1)))
    (( $2 % 2 == 0 )) && order=$(seq $((${#ks[@]} - 1)) -1 0)
    for i in $order; do likwid "${ks[$i]%:*}" "${ks[$i]#*:}" "$1" "$2" "$3"; done
}
ours() { # threads(1|all) round pages(default|huge) stagger tag [--memcpy]
    timeout 120 $RT "$STREAM_BIN" --threads "$1" --repeats "$ITER" --bytes $((PER_KB * 1000)) --pages "$3" --stagger "$4" ${6:-} |
        awk -v r="$2" -v t="ours-$5" '{print t, $2, $3, r, $5, $7, $15, $13}' >>"$WORK/runs.txt"
}
mbw_run() { # round
    timeout 120 $RT mbw -q -n 3 -t0 -t1 "$MBW_MIB" 2>&1 |
        awk -v r="$1" '/^AVG/ {for (i=1;i<=NF;i++) if ($i=="Copy:") print "mbw", $3, 1, r, 2 * $(i+1) * 1.048576 / 1000}' >>"$WORK/runs.txt"
}
# Two layouts, each tool in both where it can be: `stag`, array k shifted by k x STAGGER
# elements (ours by default, likwid-bench through its stream offsets) and `4k`, arrays that
# share their low 12 address bits (likwid-bench's and mbw's page-aligned malloc blocks;
# ours with --stagger 512). mbw has no offsets, so it is compared in the `4k` layout only.
STAGGER=520
for round in $(seq "$ROUNDS"); do
    for n in 1 "$NCPU"; do
        t=$([[ $n == 1 ]] && echo 1 || echo all)
        steps=("likwid_all $n $round stag" "ours $t $round default $STAGGER default"
               "likwid_all $n $round 4k" "ours $t $round default 512 4k --memcpy"
               "ours $t $round huge $STAGGER huge")
        [[ $n == 1 ]] && steps+=("mbw_run $round")
        order=$(seq 0 $((${#steps[@]} - 1)))
        (( round % 2 == 0 )) && order=$(seq $((${#steps[@]} - 1)) -1 0)   # ABBA
        for i in $order; do ${steps[$i]}; done
        [[ $NCPU == 1 ]] && break
    done
    echo "round $round done (load average $(cut -d' ' -f1 /proc/loadavg))"
done

echo "== full run"
T0=$(date +%s.%N)
if [[ -n ${POWERPERF:-} ]]; then
    echo "\$ $POWERPERF microbench run --format json --curve curve.csv -o constants.toml"
    "$POWERPERF" microbench run --format json --curve "$WORK/curve.csv" -o "$WORK/constants.toml" >"$WORK/ours.json"
else
    echo "\$ $SUITE_BIN --json --curve curve.csv -o constants.toml   (= powerperf microbench run --format json)"
    "$SUITE_BIN" --json --curve "$WORK/curve.csv" -o "$WORK/constants.toml" >"$WORK/ours.json"
fi
echo "full run wall time $(python3 -c "print(f'{$(date +%s.%N) - $T0:.1f}')") s; load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
if [[ -n ${KEEP:-} ]]; then
    mkdir -p "$KEEP" && cp "$WORK/constants.toml" "$WORK/curve.csv" "$WORK/ours.json" "$WORK/runs.txt" "$KEEP/"
    echo "kept constants.toml, curve.csv, ours.json, runs.txt in $KEEP"
fi
fi # REPORT_ONLY

python3 - "$WORK/ours.json" "$WORK/runs.txt" "$NCPU" <<'PY'
import json, statistics, sys
r = json.load(open(sys.argv[1]))
ncpu = int(sys.argv[3])
runs = {}      # (tool, kernel, threads) -> {round: GB/s}
pre = {}       # (kernel, threads) -> [(preempted rounds, rounds) per run]
for line in open(sys.argv[2]):
    f = line.split()
    tool, k, n, rnd, v = f[0], f[1].lower(), int(f[2]), int(f[3]), float(f[4])
    runs.setdefault((tool, k, n), {})[rnd] = v
    if tool.startswith("ours"):
        pre.setdefault((k, n), []).append((int(f[6]), int(f[7])))
print(f"\ncore clock {r['core_clock_ghz']['median']:.3f} GHz (dependent-add chain); full run took {r['elapsed_s']:.1f} s")
print("\n## Bandwidth, GB/s (10^9 B/s), interleaved rounds\n")
print("| layout | ours | likwid-bench / mbw | threads | ours median (min-max) | theirs median (min-max) | ratio of medians | per-round ratio median (min-max) | within 10 % |")
print("|---|---|---|---|---|---|---|---|---|")
pairs = [("copy", "likwid", "copy", "-t copy, scalar (16 B/elem)"),
         ("copy", "likwid", "copy_sse", "-t copy_sse (16 B/elem)"),
         ("triad", "likwid", "stream_sse", "-t stream_sse: STREAM triad A=B*s+C (24 B/elem)"),
         ("triad", "likwid", "triad", "-t triad: A=B*C+D, 4 streams, scalar (32 B/elem)"),
         ("load", "likwid", "load", "-t load, scalar (8 B/elem)"),
         ("load", "likwid", "load_sse", "-t load_sse (8 B/elem)"),
         ("copy_nt", "likwid", "copy_mem_sse", "-t copy_mem_sse: SSE, non-temporal stores (16 B/elem)"),
         ("copy", "mbw", "dumb", "-t1 DUMB: scalar element loop (2 x MiB/s)"),
         ("memcpy", "mbw", "memcpy", "-t0 MEMCPY: glibc memcpy (2 x MiB/s)")]
# (layout, our run's tag, likwid-bench's tag, whether mbw belongs): `stag` is the layout
# powerperf measures in (each array shifted by 4 KiB + 64 B); `4k` is mbw's and plain
# likwid-bench's (page-aligned blocks); `huge` is `powerperf microbench run` itself (huge
# pages, staggered) against likwid-bench staggered on 4 KiB pages: shown, not counted.
layouts = [("stag", "ours-default", "likwid-stag", False),
           ("4k", "ours-4k", "likwid", True),
           ("huge", "ours-huge", "likwid-stag", False)]
within = {}
def fmt(xs):
    return f"{statistics.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})"
for lay, ours_tag, lk_tag, with_mbw in layouts:
    for n in sorted({n for (_, _, n) in runs}):
        for ok, tool, tk, what in pairs:
            if tool == "mbw" and not with_mbw:
                continue
            mine = runs.get((ours_tag, ok, n))
            theirs = runs.get((lk_tag if tool == "likwid" else tool, tk, n))
            if not mine or not theirs:
                continue
            common = sorted(set(mine) & set(theirs))
            per = [mine[i] / theirs[i] for i in common]
            rm = statistics.median(mine.values()) / statistics.median(theirs.values())
            ok10 = abs(rm - 1) <= 0.10
            within.setdefault(lay, []).append(ok10)
            print(f"| {lay} | {ok} | {tool} {what} | {n} | {fmt(list(mine.values()))} | {fmt(list(theirs.values()))} | {rm:.2f} | {fmt(per)} | {'yes' if ok10 else 'no'} |")
# The reference tools against each other on the same operation and pages: where they differ
# by more than 10 %, no third measurement can be within 10 % of both.
print("\nThe reference tools against each other (same pages, `4k` layout):\n")
print("| operation | threads | A | B | A median | B median | A / B |")
print("|---|---|---|---|---|---|---|")
for n in sorted({n for (_, _, n) in runs}):
    for what, a, b in [("copy, scalar element loop", ("likwid", "copy"), ("mbw", "dumb")),
                       ("copy, SSE loop against glibc memcpy", ("likwid", "copy_sse"), ("mbw", "memcpy")),
                       ("copy, scalar: plain against stream offsets", ("likwid", "copy"), ("likwid-stag", "copy")),
                       ("copy, SSE: plain against stream offsets", ("likwid", "copy_sse"), ("likwid-stag", "copy_sse")),
                       ("triad: 4-stream scalar against STREAM triad (SSE)", ("likwid", "triad"), ("likwid", "stream_sse"))]:
        ra, rb = runs.get((a[0], a[1], n)), runs.get((b[0], b[1], n))
        if ra and rb:
            ma, mb = statistics.median(ra.values()), statistics.median(rb.values())
            print(f"| {what} | {n} | {a[0]} {a[1]} | {b[0]} {b[1]} | {ma:.2f} | {mb:.2f} | {ma / mb:.2f} |")
print()
for lay, v in within.items():
    note = " (huge pages against 4 KiB pages: not like for like, not counted)" if lay == "huge" else ""
    print(f"within 10 % in layout {lay}: {sum(v)} of {len(v)} pairs{note}")
print("\nOurs: one rate per run over its rounds (all bytes over all rounds' time, as likwid-bench")
print("reports); rounds in which a thread lost its CPU (CPU time below 90 % of wall time):")
print(", ".join(f"{k} {n}t {sum(p for p, _ in v)}/{sum(m for _, m in v)}" for (k, n), v in sorted(pre.items())) + ".")
print("Pages: `stag` and `4k` use no madvise, what likwid-bench and mbw get from malloc (with THP")
print("`madvise`: 4 KiB pages); `huge` = MADV_HUGEPAGE, as `powerperf microbench run` measures.")
print("\nThe full run's own STREAM figures (median of rounds, min-max, preempted rounds):\n")
for b in r["bandwidth"]:
    g = b["gb_per_s"]
    print(f"- {b['kernel']} {b['threads']} thread(s): {g['median']:.2f} ({g['min']:.2f}-{g['max']:.2f}) GB/s, {b['preempted']} of {g['repeats']} preempted{', SCHED_RR' if b['realtime'] else ''}")

# Published load-to-use latencies; the processor is chosen from /proc/cpuinfo (family, model).
fam, model = r["cpu"]["family"], r["cpu"]["model"]
if fam == 25 and model is not None and model < 0x10:
    # SOG19h = AMD, "Software Optimization Guide for AMD Family 19h Processors", pub. 56665
    # rev. 3.00 (Nov 2020), cache sections; AT21 = AnandTech, "AMD 3rd Gen EPYC Milan
    # Review" (2021-03-15, anandtech.com/show/16529), memory latency tests.
    cpu = "AMD Zen 3 (family 19h model 01h: EPYC 7003 Milan)"
    pub = {
        "L1_dlat": ("4 cycles (integer loads)", "SOG19h"),
        "L2_lat": ("12 cycles", "SOG19h"),
        "L3_lat": ("46 cycles average", "SOG19h"),
        "mem_lat": ("about 100 ns and more (bare metal, DDR4-3200, NPS1)", "AT21"),
    }
elif fam == 25:
    # CC22 = Chips and Cheese, "AMD's Zen 4, Part 2: Memory Subsystem and Conclusion"
    # (2022-11-08); CC23 = Chips and Cheese, "Genoa-X: Server V-Cache Round 2" (2023-07-17);
    # SOG4 = AMD, "Software Optimization Guide for the AMD Zen4 Microarchitecture" (pub. 57647).
    cpu = "AMD Zen 4 (family 19h model 11h: EPYC 9004 Genoa)"
    pub = {
        "L1_dlat": ("4 cycles", "CC22; SOG4"),
        "L2_lat": ("14 cycles", "CC22; SOG4"),
        "L3_lat": ("about 50 cycles", "CC22, CC23"),
        "mem_lat": ("about 110-120 ns", "CC23"),
    }
else:
    # No published figures on file for this processor (e.g. an Intel host): say so rather
    # than compare with another processor's.
    cpu = f"family {fam} model {model}: no published figures on file for this processor"
    pub = {k: ("not on file", "-") for k in ("L1_dlat", "L2_lat", "L3_lat", "mem_lat")}
print(f"\n## Latency per level, ours against published for {cpu}\n")
print("| level | ours ns | ours cycles (min-max) | working set | published | source |")
print("|---|---|---|---|---|---|")
for v in r["values"]:
    if v["constant"] in pub:
        c = v["cycles"]
        p, src = pub[v["constant"]]
        print(f"| {v['name']} | {v['ns']['median']:.2f} | {c['median']:.1f} ({c['min']:.1f}-{c['max']:.1f}) | {v['how']} | {p} | {src} |")

def human(n):
    for u, s in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= s:
            x = n / s
            return f"{x:.0f} {u}" if x == int(x) else f"{x:.1f} {u}"
    return f"{n} B"

print("\n## Curve steps against sysfs cache sizes\n")
print("| cache | sysfs size | curve flat up to | half-way to next level at | step at sysfs size (flat end within 2x) |")
print("|---|---|---|---|---|")
for s in r["steps"]:
    hw = human(s["half_way_bytes"]) if s["half_way_bytes"] else "-"
    print(f"| L{s['level']} | {human(s['sysfs_bytes'])} | {human(s['last_flat_bytes'])} | {hw} | {'yes' if s['at_sysfs_size'] else 'no'} |")

print("\n## Latency curve (every second point)\n")
print("| size | ns | cycles |")
print("|---|---|---|")
for p in r["curve"][::2]:
    print(f"| {human(p['size_bytes'])} | {p['ns_per_load']:.2f} | {p['cycles_per_load']:.1f} |")

print("\n## Other values\n")
print("| quantity | ns | cycles | constant | how |")
print("|---|---|---|---|---|")
for v in r["values"]:
    if v["constant"] not in pub:
        print(f"| {v['name']} | {v['ns']['median']:.3f} | {v['cycles']['median']:.2f} | {v['constant']} | {v['how']} |")
for n, why in r["skipped"]:
    print(f"skipped: {n}: {why}")
PY
