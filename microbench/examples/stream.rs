//! STREAM bandwidth alone, for side-by-side runs with likwid-bench and mbw
//! (`microbench/compare.sh`): `stream [REPEATS]` prints `ours <kernel> <threads> <GB/s>` per
//! repeat, on 1 thread and on one pinned thread per allowed CPU, arrays 4x the last-level
//! cache as in `powerperf microbench run`.

use std::path::Path;

use powerperf_microbench::cache::data_caches;
use powerperf_microbench::os::allowed_cpus;
use powerperf_microbench::stream::stream;

fn main() {
    let repeats: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let llc = data_caches(Path::new("/sys"))
        .ok()
        .and_then(|c| c.last().map(|c| c.size_bytes))
        .unwrap_or(32 << 20);
    let elems = ((4 * llc) as usize / 8).max(2 << 20);
    let cpus = allowed_cpus();
    for set in [vec![cpus[0]], cpus.clone()] {
        for r in stream(elems, &set, 1, repeats) {
            let g = &r.gb_per_s;
            println!(
                "ours {} {} median {:.3} min {:.3} max {:.3} n {}",
                r.kernel.name(),
                r.threads,
                g.median,
                g.min,
                g.max,
                g.repeats
            );
        }
        if cpus.len() == 1 {
            break;
        }
    }
}
