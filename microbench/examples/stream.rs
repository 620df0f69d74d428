//! STREAM bandwidth alone, for side-by-side runs with likwid-bench and mbw
//! (`microbench/compare.sh`). Prints one line per kernel:
//! `ours <kernel> <threads> mean <GB/s> median <GB/s> min <GB/s> max <GB/s> n <rounds>
//! preempted <rounds> realtime <bool>`, where `mean` is all bytes over all recorded rounds'
//! time (one rate over all iterations, as likwid-bench reports it).
//!
//! `stream [--repeats N] [--bytes PER_ARRAY] [--threads 1|all] [--no-realtime]
//! [--pages huge|default|small] [--stagger ELEMS] [--memcpy]`: by default 5 recorded rounds after one warm-up, arrays 4x
//! the last-level cache on transparent huge pages (as `powerperf microbench run`), one
//! thread and then one pinned thread per allowed CPU, under SCHED_RR where permitted;
//! array k starts k × ELEMS elements into its mapping (default `STAGGER`, 520);
//! `--memcpy` also times the C library's memcpy (mbw's `MEMCPY` test).

use std::path::Path;

use powerperf_microbench::cache::data_caches;
use powerperf_microbench::os::{allowed_cpus, Pages};
use powerperf_microbench::stream::{stream, StreamConfig, STAGGER};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let after = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let repeats: usize = after("--repeats").and_then(|s| s.parse().ok()).unwrap_or(5);
    let llc = data_caches(Path::new("/sys"))
        .ok()
        .and_then(|c| c.last().map(|c| c.size_bytes))
        .unwrap_or(32 << 20);
    let bytes: u64 = after("--bytes")
        .and_then(|s| s.parse().ok())
        .unwrap_or(4 * llc);
    let elems = (bytes as usize / 8).max(1 << 10);
    let cpus = allowed_cpus();
    let sets = match after("--threads").as_deref() {
        Some("1") => vec![vec![cpus[0]]],
        Some("all") => vec![cpus.clone()],
        _ if cpus.len() == 1 => vec![cpus.clone()],
        _ => vec![vec![cpus[0]], cpus.clone()],
    };
    let cfg = StreamConfig {
        elems,
        warmup: 1,
        repeats,
        realtime: !args.iter().any(|a| a == "--no-realtime"),
        pages: match after("--pages").as_deref() {
            Some("small") => Pages::Small,
            Some("default") => Pages::Default,
            _ => Pages::Huge,
        },
        stagger: after("--stagger")
            .and_then(|s| s.parse().ok())
            .unwrap_or(STAGGER),
        memcpy: args.iter().any(|a| a == "--memcpy"),
    };
    for set in sets {
        for r in stream(&cfg, &set) {
            let g = &r.gb_per_s;
            println!(
                "ours {} {} mean {:.3} median {:.3} min {:.3} max {:.3} n {} preempted {} realtime {}",
                r.kernel.name(),
                r.threads,
                r.mean_gb_per_s,
                g.median,
                g.min,
                g.max,
                g.repeats,
                r.preempted,
                r.realtime
            );
        }
    }
}
