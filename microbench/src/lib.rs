//! powerperf microbenchmarks: workload kernels for training runs, and the measurements of
//! machine constants (latencies, bandwidths, penalties; [`suite::run_suite`]).
//!
//! Kernels run on `threads` OS threads, each on its own slice of the data, for a fixed
//! amount of work, so that the run time responds to thread count and frequency like a real
//! program. STREAM kernels follow McCalpin's definitions (copy: a = b; triad: a = b + s·c).

use std::time::{Duration, Instant};

pub mod cache;
pub mod chase;
mod error;
pub mod ops;
pub mod os;
pub mod stats;
pub mod stream;
pub mod suite;

pub use error::MicrobenchError;
pub use suite::{run_suite, Report, SuiteConfig};

/// A workload kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// STREAM triad `a[i] = b[i] + s * c[i]` over arrays larger than the caches: memory bound.
    Triad,
    /// Independent chains of dependent fused multiply-adds: compute bound.
    Fma,
    /// Half the work of each, one after the other.
    Mixed,
}

impl std::str::FromStr for Kernel {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "triad" => Ok(Kernel::Triad),
            "fma" => Ok(Kernel::Fma),
            "mixed" => Ok(Kernel::Mixed),
            _ => Err(format!("unknown kernel `{s}` (known: triad, fma, mixed)")),
        }
    }
}

/// What a kernel run did.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelResult {
    pub kernel: Kernel,
    pub threads: usize,
    pub elapsed: Duration,
    /// Bytes moved by STREAM kernels (24 bytes per triad element: two loads, one store).
    pub bytes: u64,
    /// Floating-point operations (2 per FMA, 2 per triad element).
    pub flops: u64,
    /// A checksum of the results, printed so the work cannot be optimised away.
    pub checksum: f64,
}

fn triad(threads: usize, elems_per_thread: usize, reps: usize) -> (u64, u64, f64) {
    let sums: Vec<f64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    let mut a = vec![0.0f64; elems_per_thread];
                    let b: Vec<f64> = (0..elems_per_thread).map(|i| (i + t) as f64).collect();
                    let c: Vec<f64> = (0..elems_per_thread).map(|i| (i % 7) as f64).collect();
                    let scalar = 3.0;
                    for _ in 0..reps {
                        for ((ai, bi), ci) in a.iter_mut().zip(&b).zip(&c) {
                            *ai = bi + scalar * ci;
                        }
                        std::hint::black_box(&mut a);
                    }
                    a.iter().step_by(4096).sum::<f64>()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or(0.0))
            .collect()
    });
    let n = (threads * elems_per_thread * reps) as u64;
    (24 * n, 2 * n, sums.iter().sum())
}

fn fma(threads: usize, iters_per_thread: u64) -> (u64, f64) {
    let sums: Vec<f64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    // Eight independent chains keep the FMA pipes busy.
                    let mut x = [1.0f64 + t as f64 * 1e-3; 8];
                    let (m, a) = (std::hint::black_box(0.999_999), std::hint::black_box(1e-7));
                    for _ in 0..iters_per_thread {
                        for v in x.iter_mut() {
                            *v = v.mul_add(m, a);
                        }
                    }
                    x.iter().sum::<f64>()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or(0.0))
            .collect()
    });
    (2 * 8 * iters_per_thread * threads as u64, sums.iter().sum())
}

/// Run `kernel` on `threads` threads with a total amount of work set by `scale` (1.0 is
/// about 0.5 s of one core of a current server). The total work is fixed, so more threads
/// finish sooner where the machine scales.
pub fn run_kernel(kernel: Kernel, threads: usize, scale: f64) -> KernelResult {
    let threads = threads.max(1);
    let start = Instant::now();
    // 4 Mi elements × 24 B = 96 MiB per pass over the three arrays: larger than any L3 here.
    let total_elems = 4 * 1024 * 1024;
    let per_thread = total_elems / threads;
    let triad_reps = ((12.0 * scale).round() as usize).max(1);
    let fma_iters = ((150_000_000.0 * scale) as u64 / threads as u64).max(1);
    let (bytes, flops, checksum) = match kernel {
        Kernel::Triad => triad(threads, per_thread, triad_reps),
        Kernel::Fma => {
            let (f, c) = fma(threads, fma_iters);
            (0, f, c)
        }
        Kernel::Mixed => {
            let (b, f1, c1) = triad(threads, per_thread, (triad_reps / 2).max(1));
            let (f2, c2) = fma(threads, fma_iters / 2);
            (b, f1 + f2, c1 + c2)
        }
    };
    KernelResult {
        kernel,
        threads,
        elapsed: start.elapsed(),
        bytes,
        flops,
        checksum,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_do_the_stated_work() {
        let r = run_kernel(Kernel::Triad, 2, 0.1);
        assert_eq!(r.bytes, 24 * 4 * 1024 * 1024);
        assert!(r.checksum.is_finite() && r.checksum > 0.0);
        let f = run_kernel(Kernel::Fma, 1, 0.01);
        assert_eq!(f.flops, 2 * 8 * 1_500_000);
        assert!(f.checksum.is_finite());
    }

    #[test]
    fn kernel_names_parse() {
        assert_eq!("mixed".parse::<Kernel>(), Ok(Kernel::Mixed));
        assert!("nope".parse::<Kernel>().is_err());
    }
}
