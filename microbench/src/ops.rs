//! Core-side measurements: the core clock (a chain of dependent integer adds, one cycle
//! each on every current x86-64 and AArch64 core), floating-point latencies (dependent
//! chains), branch and branch-mispredict cost, and the overhead of reading the clock and a
//! perf_event counter. Each returns nanoseconds per operation; the caller converts to cycles
//! with the measured clock. Work is timed on the thread's CPU time ([`CpuTimer`]), so time
//! lost to other tasks on a shared machine is left out (the overheads' CPU time includes the
//! kernel time of their system calls).

use std::hint::black_box;

use crate::chase::SplitMix64;
use crate::os::{monotonic_ns, TaskClock};
use crate::stats::{measure, CpuTimer, Stat};
use crate::MicrobenchError;

/// Dependent adds per loop iteration in [`core_clock_ghz`].
const ADDS: u64 = 64;

#[cfg(target_arch = "x86_64")]
fn add_chain(iters: u64) -> u64 {
    let mut x: u64 = 0;
    let one: u64 = black_box(1);
    let n = iters;
    // SAFETY: register-only arithmetic and a counted loop.
    unsafe {
        std::arch::asm!(
            "2:",
            ".rept 64",
            "add {x}, {one}",
            ".endr",
            "dec {n}",
            "jnz 2b",
            x = inout(reg) x,
            one = in(reg) one,
            n = inout(reg) n => _,
            options(nomem, nostack),
        );
    }
    x
}

#[cfg(target_arch = "aarch64")]
fn add_chain(iters: u64) -> u64 {
    let mut x: u64 = 0;
    let one: u64 = black_box(1);
    let n = iters;
    // SAFETY: register-only arithmetic and a counted loop.
    unsafe {
        std::arch::asm!(
            "2:",
            ".rept 64",
            "add {x}, {x}, {one}",
            ".endr",
            "subs {n}, {n}, #1",
            "b.ne 2b",
            x = inout(reg) x,
            one = in(reg) one,
            n = inout(reg) n => _,
            options(nomem, nostack),
        );
    }
    x
}

/// The core clock in GHz: `iters × 64` dependent register adds (latency 1 cycle: AMD
/// Software Optimization Guide for family 19h, Intel Optimization Reference Manual
/// appendix, Arm Cortex optimisation guides) divided by their wall time. Unlike the TSC this
/// follows turbo and DVFS.
///
/// # Errors
/// [`MicrobenchError::Unavailable`] on architectures other than x86-64 and AArch64.
pub fn core_clock_ghz(
    sample_ns: f64,
    warmup: usize,
    repeats: usize,
) -> Result<Stat, MicrobenchError> {
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    {
        let iters = ((sample_ns * 3.0 / ADDS as f64) as u64).max(1000);
        Ok(measure(warmup, repeats, || {
            let t = CpuTimer::start();
            black_box(add_chain(iters));
            (iters * ADDS) as f64 / t.elapsed_ns()
        }))
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        let _ = (sample_ns, warmup, repeats, ADDS);
        Err(MicrobenchError::Unavailable(
            "the add-chain clock is written for x86-64 and AArch64 only".into(),
        ))
    }
}

/// A floating-point operation whose latency is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FpOp {
    Add,
    Mul,
    Fma,
    Div,
    Sqrt,
}

const UNROLL: u64 = 8;

macro_rules! chain {
    ($n:expr, $x:ident, $step:expr) => {{
        for _ in 0..$n {
            $x = $step;
            $x = $step;
            $x = $step;
            $x = $step;
            $x = $step;
            $x = $step;
            $x = $step;
            $x = $step;
        }
        $x
    }};
}

fn fp_chain(op: FpOp, n: u64) -> f64 {
    let mut x = black_box(1.5f64);
    let y = black_box(1.000_000_1f64);
    let z = black_box(1e-12f64);
    match op {
        // IEEE addition is not associative: the compiler keeps the chain as written.
        FpOp::Add => chain!(n, x, x + z),
        FpOp::Mul => chain!(n, x, x * y),
        FpOp::Fma => fma_chain(n, x, y, z),
        FpOp::Div => chain!(n, x, x / y),
        FpOp::Sqrt => chain!(n, x, x.sqrt()),
    }
}

#[cfg(target_arch = "x86_64")]
fn fma_chain(n: u64, x: f64, y: f64, z: f64) -> f64 {
    #[target_feature(enable = "fma")]
    unsafe fn inner(n: u64, mut x: f64, y: f64, z: f64) -> f64 {
        chain!(n, x, x.mul_add(y, z))
    }
    if std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU has FMA.
        unsafe { inner(n, x, y, z) }
    } else {
        f64::NAN
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn fma_chain(n: u64, mut x: f64, y: f64, z: f64) -> f64 {
    chain!(n, x, x.mul_add(y, z))
}

/// Latency of `op` in ns: a dependent chain of `8·n` operations over its wall time.
///
/// # Errors
/// [`MicrobenchError::Unavailable`] for FMA on an x86-64 CPU without FMA3 (the library
/// call would be timed, not the instruction).
pub fn fp_latency_ns(
    op: FpOp,
    sample_ns: f64,
    warmup: usize,
    repeats: usize,
) -> Result<Stat, MicrobenchError> {
    if op == FpOp::Fma && fp_chain(op, 1).is_nan() {
        return Err(MicrobenchError::Unavailable("the CPU has no FMA3".into()));
    }
    let per = match op {
        FpOp::Div | FpOp::Sqrt => 5.0,
        _ => 1.5,
    };
    let n = ((sample_ns / per / UNROLL as f64) as u64).max(100);
    Ok(measure(warmup, repeats, || {
        let t = CpuTimer::start();
        black_box(fp_chain(op, n));
        t.elapsed_ns() / (n * UNROLL) as f64
    }))
}

#[inline(never)]
fn branchy(data: &[u8]) -> (u64, u64) {
    let (mut a, mut b) = (0u64, 0u64);
    for &d in data {
        if d != 0 {
            // An empty volatile asm block: the compiler may not speculate it, so this stays
            // a conditional branch (no cmov).
            #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
            // SAFETY: empty.
            unsafe {
                std::arch::asm!("", options(nomem, nostack, preserves_flags))
            };
            a += 1;
        } else {
            b += 3;
        }
    }
    (a, b)
}

/// Branch cost in ns per iteration of a loop (one load, one conditional branch, one add)
/// over `len` bytes: `(predictable, random)`. Predictable: every branch taken; random: taken
/// with probability ½, so about half mispredict and the mispredict penalty is
/// `2 × (random − predictable)`.
pub fn branch_ns(len: usize, sample_ns: f64, warmup: usize, repeats: usize) -> (Stat, Stat) {
    let mut rng = SplitMix64(0xb7a);
    let predictable = vec![1u8; len];
    let random: Vec<u8> = (0..len).map(|_| (rng.next_u64() & 1) as u8).collect();
    let reps = ((sample_ns / len as f64) as usize).max(1);
    let time = |data: &[u8]| {
        measure(warmup, repeats, || {
            let t = CpuTimer::start();
            for _ in 0..reps {
                black_box(branchy(black_box(data)));
            }
            t.elapsed_ns() / (reps * len) as f64
        })
    };
    (time(&predictable), time(&random))
}

/// Overhead of one `clock_gettime(CLOCK_MONOTONIC)` call, in ns (back-to-back calls).
pub fn timer_overhead_ns(calls: usize, warmup: usize, repeats: usize) -> Stat {
    measure(warmup, repeats, || {
        let t = CpuTimer::start();
        for _ in 0..calls {
            black_box(monotonic_ns());
        }
        t.elapsed_ns() / calls as f64
    })
}

/// Overhead of one `read(2)` of a perf_event task-clock counter, in ns.
///
/// # Errors
/// [`MicrobenchError::Unavailable`] with the reason (and fix) when perf_event_open fails.
pub fn counter_read_ns(
    reads: usize,
    warmup: usize,
    repeats: usize,
) -> Result<Stat, MicrobenchError> {
    let c = TaskClock::open().map_err(MicrobenchError::Unavailable)?;
    Ok(measure(warmup, repeats, || {
        let t = CpuTimer::start();
        for _ in 0..reads {
            black_box(c.read());
        }
        t.elapsed_ns() / reads as f64
    }))
}
