//! STREAM bandwidth (McCalpin, "Memory Bandwidth and Machine Balance", IEEE TCCA 1995;
//! `stream.c` v5.10): copy `c = a`, scale `b = s·c`, add `c = a + b`, triad `a = b + s·c`,
//! bytes counted as STREAM counts them (16, 16, 24, 24 per element: reads plus writes, no
//! write-allocate traffic); plus `load` (a sum over `a`, 8 bytes per element), the
//! counterpart of likwid-bench's `load` kernel (likwid `bench/x86-64/load.ptt`: 8 B per
//! element, loads only); and, on x86-64, `copy_nt`: copy with non-temporal stores
//! (`movntpd`, the stores that bypass the caches and skip the write-allocate read, as
//! likwid-bench's `copy_mem_*` kernels and glibc's `memcpy` for copies larger than its
//! non-temporal threshold store; Intel 64 and IA-32 Architectures Optimization Reference
//! Manual, "Non-temporal stores"), 16 bytes per element. One thread per CPU, each pinned where the OS allows and, where
//! permitted, under `SCHED_RR`; each first-touching and working on its own contiguous
//! slice; a round is timed from the first thread's start to the last thread's end, like
//! STREAM's OpenMP version times its parallel loop from outside.

use std::sync::Barrier;

use serde::Serialize;

use crate::os::{monotonic_ns, pin_current_thread, set_realtime, thread_cpu_ns, Buffer, Pages};
use crate::stats::Stat;

/// A STREAM kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamKernel {
    Copy,
    Scale,
    Add,
    Triad,
    /// `sum += a[i]` with 8 independent partial sums: reads only.
    Load,
    /// `c = a` with non-temporal stores (x86-64 only: `_mm_stream_pd`).
    CopyNt,
    /// `c = a` by the C library's `memcpy` (`copy_from_slice`), the copy mbw's `MEMCPY`
    /// test times; not part of [`StreamKernel::ALL`], run where asked for
    /// ([`StreamConfig::memcpy`]).
    Memcpy,
}

impl StreamKernel {
    /// STREAM's four in its order, then `load`, then (x86-64 only) `copy_nt`.
    pub const ALL: &'static [StreamKernel] = &[
        StreamKernel::Copy,
        StreamKernel::Scale,
        StreamKernel::Add,
        StreamKernel::Triad,
        StreamKernel::Load,
        #[cfg(target_arch = "x86_64")]
        StreamKernel::CopyNt,
    ];
    /// Bytes per element as STREAM counts them.
    pub fn bytes_per_elem(self) -> u64 {
        match self {
            StreamKernel::Copy
            | StreamKernel::Scale
            | StreamKernel::CopyNt
            | StreamKernel::Memcpy => 16,
            StreamKernel::Add | StreamKernel::Triad => 24,
            StreamKernel::Load => 8,
        }
    }
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            StreamKernel::Copy => "copy",
            StreamKernel::Scale => "scale",
            StreamKernel::Add => "add",
            StreamKernel::Triad => "triad",
            StreamKernel::Load => "load",
            StreamKernel::CopyNt => "copy_nt",
            StreamKernel::Memcpy => "memcpy",
        }
    }
}

/// How to run [`stream`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamConfig {
    /// Elements (f64) per array, all threads together; each of the three arrays is
    /// `8 × elems` bytes and should be several times the last-level cache.
    pub elems: usize,
    /// Rounds of the kernels run first and not recorded.
    pub warmup: usize,
    /// Recorded rounds (at least 1).
    pub repeats: usize,
    /// Run the measuring threads under `SCHED_RR` priority 1 where the OS permits
    /// ([`crate::os::set_realtime`]), so that other tasks' time slices do not enter
    /// the wall time; where refused, the result says so and the threads run as before.
    pub realtime: bool,
    /// Page size the arrays ask for. [`Pages::Huge`] measures the memory system without
    /// a TLB miss and a prefetch stop at every 4 KiB; [`Pages::Default`] is what STREAM,
    /// likwid-bench and mbw get from `malloc`.
    pub pages: Pages,
    /// Elements by which each array starts later than the one before it in its own
    /// mapping (b by `stagger`, c by `2 × stagger`); [`STAGGER`] unless a comparison
    /// needs another layout (512, 4 KiB: the arrays share their low 12 address bits, as
    /// `malloc`'s page-aligned blocks in mbw and likwid-bench do).
    pub stagger: usize,
    /// Also time [`StreamKernel::Memcpy`], after the kernels of [`StreamKernel::ALL`].
    pub memcpy: bool,
}

/// Bandwidth of one kernel on `threads` threads.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StreamResult {
    pub kernel: StreamKernel,
    pub threads: usize,
    /// Elements per array (all threads together).
    pub elems: usize,
    /// GB/s (10^9 bytes per second) per recorded round: the kernel's bytes (STREAM's
    /// count, [`StreamKernel::bytes_per_elem`] × `elems`) over the span from the first
    /// thread's start to the last thread's end.
    pub gb_per_s: Stat,
    /// GB/s over all recorded rounds together: all bytes over the sum of the spans (one
    /// rate over all iterations, as likwid-bench reports it).
    pub mean_gb_per_s: f64,
    /// Whether every thread was pinned to its own CPU.
    pub pinned: bool,
    /// Whether every thread ran under `SCHED_RR` ([`StreamConfig::realtime`]).
    pub realtime: bool,
    /// The page size the arrays asked for ([`StreamConfig::pages`]).
    pub pages: Pages,
    /// Recorded rounds in which some thread lost its CPU during the kernel: its CPU time
    /// (`CLOCK_THREAD_CPUTIME_ID`) was below 90 % of its wall time. Such a round's rate
    /// includes another task's time slice.
    pub preempted: usize,
}

/// One thread's record of one kernel run: wall start and end (`CLOCK_MONOTONIC` ns) and
/// the thread's CPU time over the run (ns).
#[derive(Debug, Clone, Copy, Default)]
struct Rec {
    start_ns: u64,
    end_ns: u64,
    cpu_ns: u64,
}

/// The span of one round over all threads' records (earliest start to latest end, ns, at
/// least 1) and whether some thread was off its CPU for more than 10 % of its own run.
/// `None` for no records.
fn round_span(recs: &[Rec]) -> Option<(u64, bool)> {
    let start = recs.iter().map(|r| r.start_ns).min()?;
    let end = recs.iter().map(|r| r.end_ns).max()?;
    let lost = recs
        .iter()
        .any(|r| (r.cpu_ns as f64) < 0.9 * r.end_ns.saturating_sub(r.start_ns) as f64);
    Some((end.saturating_sub(start).max(1), lost))
}

#[inline(never)]
fn kernel(k: StreamKernel, a: &mut [f64], b: &mut [f64], c: &mut [f64], s: f64) {
    match k {
        // An element loop like STREAM's and likwid-bench's, not a memcpy call: compilers
        // turn the plain loop into memcpy, whose non-temporal path for large copies behaves
        // differently; the opaque factor 1.0 keeps it a loop (the multiply costs nothing in
        // a memory-bound loop).
        StreamKernel::Copy => {
            let one = std::hint::black_box(1.0);
            c.iter_mut().zip(a.iter()).for_each(|(c, a)| *c = a * one)
        }
        StreamKernel::Scale => b.iter_mut().zip(c.iter()).for_each(|(b, c)| *b = s * c),
        StreamKernel::Add => c
            .iter_mut()
            .zip(a.iter().zip(b.iter()))
            .for_each(|(c, (a, b))| *c = a + b),
        StreamKernel::Triad => a
            .iter_mut()
            .zip(b.iter().zip(c.iter()))
            .for_each(|(a, (b, c))| *a = b + s * c),
        StreamKernel::Load => {
            let mut acc = [0.0f64; 8];
            let mut it = a.chunks_exact(8);
            for ch in &mut it {
                for (x, y) in acc.iter_mut().zip(ch) {
                    *x += y;
                }
            }
            let tail: f64 = it.remainder().iter().sum();
            std::hint::black_box(acc.iter().sum::<f64>() + tail);
        }
        StreamKernel::CopyNt => copy_nt(c, a),
        StreamKernel::Memcpy => c.copy_from_slice(a),
    }
    std::hint::black_box((a, b, c));
}

/// `dst = src` with non-temporal stores: scalar stores up to a 16-byte boundary of `dst`,
/// `movntpd` for the aligned body, an `sfence` so the stores are globally visible before
/// the kernel's end is stamped, scalar stores for the tail.
#[cfg(target_arch = "x86_64")]
fn copy_nt(dst: &mut [f64], src: &[f64]) {
    use std::arch::x86_64::{_mm_loadu_pd, _mm_sfence, _mm_stream_pd};
    let n = dst.len().min(src.len());
    let head = (dst.as_ptr().align_offset(16)).min(n);
    dst[..head].copy_from_slice(&src[..head]);
    let body = (n - head) / 2 * 2;
    let (d, s) = (dst[head..].as_mut_ptr(), src[head..].as_ptr());
    // SAFETY: SSE2 is part of x86-64; `d` is 16-byte aligned (align_offset above), and
    // every index `i + 1 < body <= n - head` is inside both slices.
    unsafe {
        let mut i = 0;
        while i < body {
            _mm_stream_pd(d.add(i), _mm_loadu_pd(s.add(i)));
            i += 2;
        }
        _mm_sfence();
    }
    dst[head + body..n].copy_from_slice(&src[head + body..n]);
}

/// [`StreamKernel::ALL`] lists `CopyNt` on x86-64 only.
#[cfg(not(target_arch = "x86_64"))]
fn copy_nt(_dst: &mut [f64], _src: &[f64]) {
    unreachable!("copy_nt is measured on x86-64 only")
}

/// The default [`StreamConfig::stagger`]: elements by which array k of a, b, c is
/// shifted against the one before (4096 + 64 bytes). Without it, arrays in mappings aligned to 2 MiB put a[i], b[i] and c[i] in the
/// same cache sets. On a Zen 4 guest (2026-11-26) that cost copy 17 against 26-27 GB/s
/// and add and triad 19-20 against 27-28 GB/s on one thread; STREAM's `OFFSET` exists for
/// the same reason (McCalpin, stream.c, "OFFSET").
pub const STAGGER: usize = 520;

/// Run the kernels of [`StreamKernel::ALL`] `cfg.warmup + cfg.repeats` times on three arrays of `cfg.elems`
/// f64 each, split over `cpus.len()` threads (thread `i` pinned to `cpus[i]`, each
/// first-touching and working on its own contiguous slice). Every thread stamps its own
/// start and end of each kernel between barriers; a round's time is the span from the
/// earliest start to the latest end, so threads that do not overlap (one CPU's worth of
/// time for two threads) are not counted as running in parallel. STREAM's OpenMP version
/// times the same span from outside the parallel region. Returns one result per kernel,
/// in [`StreamKernel::ALL`] order, then memcpy where asked for.
pub fn stream(cfg: &StreamConfig, cpus: &[usize]) -> Vec<StreamResult> {
    let elems = cfg.elems.max(1);
    let threads = cpus.len().max(1);
    let chunk = elems.div_ceil(threads);
    // Each array is its own 2 MiB-aligned mapping, so a[i], b[i] and c[i] would share
    // their low 21 address bits and fall into the same cache sets; array k starts
    // k × stagger elements into its mapping instead (STREAM's OFFSET).
    let st = cfg.stagger;
    let mut ab: Buffer<f64> = Buffer::zeroed(elems, cfg.pages);
    let mut bb: Buffer<f64> = Buffer::zeroed(elems + st, cfg.pages);
    let mut cb: Buffer<f64> = Buffer::zeroed(elems + 2 * st, cfg.pages);
    let a = &mut ab[..elems];
    let b = &mut bb[st..st + elems];
    let c = &mut cb[2 * st..2 * st + elems];
    // One party per slice (fewer than `threads` only for arrays shorter than `threads`).
    let barrier = Barrier::new(elems.div_ceil(chunk));
    let rounds = cfg.warmup + cfg.repeats.max(1);
    let kernels: Vec<StreamKernel> = StreamKernel::ALL
        .iter()
        .copied()
        .chain(cfg.memcpy.then_some(StreamKernel::Memcpy))
        .collect();
    let kernels = &kernels;
    type Rows = Vec<Vec<Rec>>;
    let per_thread: Vec<(Rows, bool, bool)> = std::thread::scope(|sc| {
        let handles: Vec<_> = a
            .chunks_mut(chunk)
            .zip(b.chunks_mut(chunk))
            .zip(c.chunks_mut(chunk))
            .enumerate()
            .map(|(t, ((a, b), c))| {
                let barrier = &barrier;
                let cpu = cpus.get(t).copied();
                let realtime = cfg.realtime;
                sc.spawn(move || {
                    let pinned = cpu.map(|c| pin_current_thread(c).is_ok()).unwrap_or(false);
                    let rt = realtime && set_realtime(1).is_ok();
                    // First touch by the owner, as STREAM initialises: a=1, b=2, c=0.
                    a.iter_mut().for_each(|x| *x = 1.0);
                    b.iter_mut().for_each(|x| *x = 2.0);
                    c.iter_mut().for_each(|x| *x = 0.0);
                    let mut rows: Rows = Vec::with_capacity(rounds);
                    for _ in 0..rounds {
                        let mut row = vec![Rec::default(); kernels.len()];
                        for (i, k) in kernels.iter().enumerate() {
                            barrier.wait();
                            let (t0, c0) = (monotonic_ns(), thread_cpu_ns());
                            kernel(*k, a, b, c, 3.0);
                            let (t1, c1) = (monotonic_ns(), thread_cpu_ns());
                            row[i] = Rec {
                                start_ns: t0,
                                end_ns: t1,
                                cpu_ns: c1.saturating_sub(c0),
                            };
                            barrier.wait();
                        }
                        rows.push(row);
                    }
                    (rows, pinned, rt)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    let pinned = per_thread.iter().all(|t| t.1);
    let realtime = per_thread.iter().all(|t| t.2);
    kernels
        .iter()
        .enumerate()
        .map(|(i, &k)| {
            let bytes = (k.bytes_per_elem() * elems as u64) as f64;
            let mut spans = Vec::new();
            let mut preempted = 0;
            for round in cfg.warmup..rounds {
                let recs: Vec<Rec> = per_thread
                    .iter()
                    .filter_map(|t| t.0.get(round).map(|r| r[i]))
                    .collect();
                let Some((span, lost)) = round_span(&recs) else {
                    continue;
                };
                preempted += usize::from(lost);
                spans.push(span as f64);
            }
            let samples: Vec<f64> = spans.iter().map(|ns| bytes / ns).collect();
            let total_ns: f64 = spans.iter().sum();
            StreamResult {
                kernel: k,
                threads,
                elems,
                gb_per_s: Stat::from_samples(&samples),
                mean_gb_per_s: bytes * spans.len() as f64 / total_ns,
                pinned,
                realtime,
                pages: cfg.pages,
                preempted,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn span_covers_threads_that_do_not_overlap() {
        let r = |start_ns, end_ns, cpu_ns| Rec {
            start_ns,
            end_ns,
            cpu_ns,
        };
        // Two threads taking turns on one CPU: 100 ns each, one after the other. Each
        // thread's own time is 100 ns; the round took 200 ns.
        assert_eq!(
            round_span(&[r(0, 100, 100), r(100, 200, 100)]),
            Some((200, false))
        );
        // Overlapping: the span is the union's extent.
        assert_eq!(
            round_span(&[r(10, 110, 100), r(0, 100, 100)]),
            Some((110, false))
        );
        // A thread with 50 ns of CPU time in 100 ns of wall time lost its CPU.
        assert_eq!(round_span(&[r(0, 100, 50)]), Some((100, true)));
        assert_eq!(round_span(&[]), None);
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn copy_nt_copies_every_element_at_any_alignment() {
        let src: Vec<f64> = (0..37).map(|i| i as f64 + 0.5).collect();
        for off in 0..3 {
            for len in [0, 1, 2, 3, 17, 34] {
                let mut dst = vec![-1.0; 40];
                copy_nt(&mut dst[off..off + len], &src[..len]);
                assert_eq!(&dst[off..off + len], &src[..len], "off {off} len {len}");
                assert!(dst[..off].iter().all(|&x| x == -1.0));
                assert!(dst[off + len..].iter().all(|&x| x == -1.0));
            }
        }
    }

    #[test]
    fn small_stream_runs_on_two_threads() {
        let cfg = StreamConfig {
            elems: 1 << 16,
            warmup: 1,
            repeats: 2,
            realtime: false,
            pages: Pages::Huge,
            stagger: STAGGER,
            memcpy: true,
        };
        let r = stream(&cfg, &[0, 0]);
        assert_eq!(r.len(), StreamKernel::ALL.len() + 1);
        assert_eq!(r.last().map(|r| r.kernel), Some(StreamKernel::Memcpy));
        for x in &r {
            assert_eq!(x.threads, 2);
            assert!(x.gb_per_s.median > 0.0, "{x:?}");
        }
    }
}
