//! STREAM bandwidth (McCalpin, "Memory Bandwidth and Machine Balance", IEEE TCCA 1995;
//! `stream.c` v5.10): copy `c = a`, scale `b = s·c`, add `c = a + b`, triad `a = b + s·c`,
//! bytes counted as STREAM counts them (16, 16, 24, 24 per element: reads plus writes, no
//! write-allocate traffic); plus `load` (a sum over `a`, 8 bytes per element), the
//! counterpart of likwid-bench's `load` kernel. One thread per CPU, each pinned where the OS allows, each
//! first-touching and working on its own contiguous slice, timed between barriers like
//! STREAM's OpenMP version.

use std::sync::Barrier;
use std::time::Instant;

use serde::Serialize;

use crate::os::{pin_current_thread, Buffer, Pages};
use crate::stats::Stat;

/// A STREAM kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StreamKernel {
    Copy,
    Scale,
    Add,
    Triad,
    /// `sum += a[i]` with 8 independent partial sums: reads only.
    Load,
}

impl StreamKernel {
    /// STREAM's four in its order, then `load`.
    pub const ALL: [StreamKernel; 5] = [
        StreamKernel::Copy,
        StreamKernel::Scale,
        StreamKernel::Add,
        StreamKernel::Triad,
        StreamKernel::Load,
    ];
    /// Bytes per element as STREAM counts them.
    pub fn bytes_per_elem(self) -> u64 {
        match self {
            StreamKernel::Copy | StreamKernel::Scale => 16,
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
        }
    }
}

/// Bandwidth of one kernel on `threads` threads.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StreamResult {
    pub kernel: StreamKernel,
    pub threads: usize,
    /// Elements per array (all threads together).
    pub elems: usize,
    /// GB/s (10^9 bytes per second) over the repeats.
    pub gb_per_s: Stat,
    /// Whether every thread was pinned to its own CPU.
    pub pinned: bool,
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
    }
    std::hint::black_box((a, b, c));
}

/// Run the five kernels `warmup + repeats` times on arrays of `elems` f64 each, split over
/// `cpus.len()` threads (thread `i` pinned to `cpus[i]`). Returns one result per kernel.
pub fn stream(elems: usize, cpus: &[usize], warmup: usize, repeats: usize) -> Vec<StreamResult> {
    let threads = cpus.len().max(1);
    let chunk = elems.div_ceil(threads);
    let mut a: Buffer<f64> = Buffer::zeroed(elems, Pages::Huge);
    let mut b: Buffer<f64> = Buffer::zeroed(elems, Pages::Huge);
    let mut c: Buffer<f64> = Buffer::zeroed(elems, Pages::Huge);
    let barrier = Barrier::new(threads);
    let rounds = warmup + repeats.max(1);
    let (times, pinned): (Vec<[f64; StreamKernel::ALL.len()]>, Vec<bool>) =
        std::thread::scope(|sc| {
            let handles: Vec<_> = a
                .chunks_mut(chunk)
                .zip(b.chunks_mut(chunk))
                .zip(c.chunks_mut(chunk))
                .enumerate()
                .map(|(t, ((a, b), c))| {
                    let barrier = &barrier;
                    let cpu = cpus.get(t).copied();
                    sc.spawn(move || {
                        let pinned = cpu.map(|c| pin_current_thread(c).is_ok()).unwrap_or(false);
                        // First touch by the owner, as STREAM initialises: a=1, b=2, c=0.
                        a.iter_mut().for_each(|x| *x = 1.0);
                        b.iter_mut().for_each(|x| *x = 2.0);
                        c.iter_mut().for_each(|x| *x = 0.0);
                        let mut times = Vec::with_capacity(rounds);
                        for _ in 0..rounds {
                            let mut row = [0.0; StreamKernel::ALL.len()];
                            for (i, k) in StreamKernel::ALL.iter().enumerate() {
                                barrier.wait();
                                let t0 = Instant::now();
                                kernel(*k, a, b, c, 3.0);
                                barrier.wait();
                                row[i] = t0.elapsed().as_secs_f64();
                            }
                            times.push(row);
                        }
                        (times, pinned)
                    })
                })
                .collect();
            let mut all_pinned = true;
            let mut first = Vec::new();
            for (i, h) in handles.into_iter().enumerate() {
                let (t, p) = h.join().unwrap_or_default();
                all_pinned &= p;
                if i == 0 {
                    first = t;
                }
            }
            (first, vec![all_pinned])
        });
    let pinned = pinned.iter().all(|&p| p);
    StreamKernel::ALL
        .iter()
        .enumerate()
        .map(|(i, &k)| {
            let bytes = (k.bytes_per_elem() * elems as u64) as f64;
            let samples: Vec<f64> = times[warmup.min(times.len())..]
                .iter()
                .map(|row| bytes / row[i] * 1e-9)
                .collect();
            StreamResult {
                kernel: k,
                threads,
                elems,
                gb_per_s: Stat::from_samples(&samples),
                pinned,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_stream_runs_on_two_threads() {
        let r = stream(1 << 16, &[0, 0], 1, 2);
        assert_eq!(r.len(), 5);
        for x in &r {
            assert_eq!(x.threads, 2);
            assert!(x.gb_per_s.median > 0.0, "{x:?}");
        }
    }
}
