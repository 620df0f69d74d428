//! Memory latency by pointer chasing (McVoy & Staelin, lmbench `lat_mem_rd`, USENIX 1996):
//! a random cyclic permutation of the cache lines of a working set, one dependent load per
//! step, so that each load waits for the previous one and no prefetcher can guess the next
//! address. Also the data-TLB miss penalty: the same chase over one line per 4 KiB page
//! against the same number of lines packed into few pages.

use crate::os::{Buffer, Pages};
use crate::stats::{measure, CpuTimer, Stat};

/// Cache-line size assumed for the chase (bytes); one `usize` link per line.
pub const LINE_BYTES: usize = 64;
const LINE_WORDS: usize = LINE_BYTES / std::mem::size_of::<usize>();

/// A small deterministic generator (SplitMix64, Steele et al. 2014) for permutations.
#[derive(Debug, Clone)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (n > 0; the modulo bias is below 2^-40 for the sizes used here).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// Link the words at `slots` (word indices into `buf`) into one random cycle (Sattolo's
/// algorithm: every slot is visited once per lap). Returns the start slot.
pub fn link_cycle(buf: &mut [usize], slots: &mut [usize], rng: &mut SplitMix64) -> usize {
    let n = slots.len();
    for i in (1..n).rev() {
        let j = rng.below(i);
        slots.swap(i, j);
    }
    for i in 0..n {
        buf[slots[i]] = slots[(i + 1) % n];
    }
    slots[0]
}

/// Follow `steps` links from `start`; returns where it stopped (so the loads are live).
#[inline(never)]
pub fn chase(buf: &[usize], start: usize, steps: usize) -> usize {
    let mut p = start;
    for _ in 0..steps / 8 {
        p = buf[p];
        p = buf[p];
        p = buf[p];
        p = buf[p];
        p = buf[p];
        p = buf[p];
        p = buf[p];
        p = buf[p];
    }
    for _ in 0..steps % 8 {
        p = buf[p];
    }
    p
}

/// Nanoseconds per load of chases of `steps` loads from `start`, summarised over `repeats`
/// after one warm-up lap of at most `warm` loads.
pub fn time_chase(buf: &[usize], start: usize, steps: usize, warm: usize, repeats: usize) -> Stat {
    std::hint::black_box(chase(buf, start, warm));
    let mut p = start;
    measure(0, repeats, || {
        let t = CpuTimer::start();
        p = chase(buf, p, steps);
        let ns = t.elapsed_ns();
        std::hint::black_box(p);
        ns / steps as f64
    })
}

/// A working-set buffer for latency chases, reused across sizes.
pub struct ChaseBuffer {
    buf: Buffer<usize>,
    rng: SplitMix64,
}

impl ChaseBuffer {
    /// A buffer for working sets up to `max_bytes`, on transparent huge pages where the
    /// kernel allows (so that the TLB adds little to cache latencies, as in Chips and
    /// Cheese's latency test; lmbench uses whatever pages malloc gives).
    pub fn new(max_bytes: usize) -> ChaseBuffer {
        ChaseBuffer {
            buf: Buffer::zeroed(max_bytes / std::mem::size_of::<usize>(), Pages::Huge),
            rng: SplitMix64(0x5eed),
        }
    }

    /// Latency in ns per load over a working set of `bytes` (rounded down to whole lines,
    /// at least 2), each sample about `sample_ns` long.
    pub fn latency(&mut self, bytes: usize, sample_ns: f64, repeats: usize) -> Stat {
        let lines = (bytes / LINE_BYTES).clamp(2, self.buf.len() / LINE_WORDS);
        let mut slots: Vec<usize> = (0..lines).map(|l| l * LINE_WORDS).collect();
        let start = link_cycle(&mut self.buf, &mut slots, &mut self.rng);
        drop(slots);
        // Calibrate the sample length on a short chase (also a first warm-up).
        let probe = 20_000usize;
        let t = CpuTimer::start();
        let p = chase(&self.buf, start, probe);
        let est = (t.elapsed_ns() / probe as f64).max(0.1);
        let steps = ((sample_ns / est) as usize).max(1000);
        time_chase(&self.buf, p, steps, lines.min(4 * steps), repeats)
    }
}

/// Data-TLB miss penalty in ns: the latency of a chase over `pages` 4 KiB pages, one line
/// per page (the line's offset in its page skewed so the lines spread over cache sets),
/// minus that of a chase over as many lines packed into `pages / 64` pages. Both sets of
/// lines are the same size, so the caches behave alike and the difference is the page
/// walk after a miss in every TLB level. Returns (penalty, strided, packed) as Stats of ns;
/// the penalty's spread is that of the strided chase.
pub fn tlb_penalty(pages: usize, sample_ns: f64, repeats: usize) -> (Stat, Stat, Stat) {
    const PAGE: usize = 4096;
    let words_per_page = PAGE / std::mem::size_of::<usize>();
    let lines_per_page = PAGE / LINE_BYTES;
    let mut buf: Buffer<usize> = Buffer::zeroed(pages * words_per_page, Pages::Small);
    let mut rng = SplitMix64(0x71b);
    let steps = (sample_ns / 5.0) as usize;
    let mut run = |slots: &mut Vec<usize>, buf: &mut Buffer<usize>| {
        let start = link_cycle(buf, slots, &mut rng);
        time_chase(buf, start, steps.max(1000), 2 * slots.len(), repeats)
    };
    let mut strided: Vec<usize> = (0..pages)
        .map(|p| p * words_per_page + (p % lines_per_page) * LINE_WORDS)
        .collect();
    let s = run(&mut strided, &mut buf);
    // Clear links so the packed chase starts from a clean buffer.
    buf.iter_mut().for_each(|w| *w = 0);
    let mut packed: Vec<usize> = (0..pages).map(|l| l * LINE_WORDS).collect();
    let k = run(&mut packed, &mut buf);
    let mut pen = s.clone();
    for v in [
        &mut pen.median,
        &mut pen.min,
        &mut pen.max,
        &mut pen.q1,
        &mut pen.q3,
    ] {
        *v -= k.median;
    }
    pen.outliers.iter_mut().for_each(|v| *v -= k.median);
    (pen, s, k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sattolo_gives_one_cycle_through_every_slot() {
        let mut buf = vec![0usize; 64 * LINE_WORDS];
        let mut slots: Vec<usize> = (0..64).map(|l| l * LINE_WORDS).collect();
        let start = link_cycle(&mut buf, &mut slots, &mut SplitMix64(1));
        let mut seen = std::collections::BTreeSet::new();
        let mut p = start;
        for _ in 0..64 {
            assert!(seen.insert(p), "slot {p} visited twice");
            p = buf[p];
        }
        assert_eq!(p, start, "the cycle closes after 64 steps");
        assert_eq!(chase(&buf, start, 64), start);
    }
}
