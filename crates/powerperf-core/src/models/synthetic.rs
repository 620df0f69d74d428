//! Known-answer data for tests and benchmarks, never for measured data: a synthetic GPU
//! kernel that follows analytic-counters' two-clock base-CPI form exactly (docs/models.md,
//! **two clocks**), so a model's error on it has a known floor of zero.
//!
//! A kernel issues `n` warp instructions at 0.02 core cycles each chip-wide (a peak of 50 per
//! cycle), moves `d` DRAM transactions of 32 bytes over a 256-byte-per-memory-cycle
//! interface (0.125 memory cycles each), overlaps the two, and waits `lat` seconds on
//! neither: `t(f, m) = max(0.02·n/f, 0.125·d/m) + lat` (f, m in Hz).

use powerperf_format::set::{CounterKind, Point, SetMeta};

/// Core cycles per warp instruction (`β`) of the synthetic chip.
pub const BETA: f64 = 0.02;
/// Memory-clock cycles per DRAM transaction (`γ`): 32-byte transactions, 256 bytes per cycle.
pub const GAMMA: f64 = 32.0 / 256.0;

/// Six kernels `(name, n, d, lat)`, from issue-bound (`nbody`, `sgemm`) to transfer-bound
/// (`stream`), with `spmv` and `bfs` crossing over on a grid of clocks.
pub const KERNELS: [(&str, f64, f64, f64); 6] = [
    ("sgemm", 6e8, 2e6, 0.001),
    ("stream", 1e8, 9e7, 0.0005),
    ("spmv", 3e8, 3e7, 0.004),
    ("stencil", 4e8, 2e7, 0.002),
    ("nbody", 8e8, 1e5, 0.0),
    ("bfs", 2e8, 4e7, 0.01),
];

/// The kernel's time (s) at core clock `fc_mhz` and memory clock `fm_mhz`, and the issue and
/// transfer shares of it.
pub fn gpu_kernel(n: f64, d: f64, lat: f64, fc_mhz: f64, fm_mhz: f64) -> (f64, f64, f64) {
    let tc = BETA * n / (fc_mhz * 1e6);
    let tm = GAMMA * d / (fm_mhz * 1e6);
    let t = tc.max(tm) + lat;
    (t, tc / t, tm / t)
}

/// A set's metadata with the two clock knobs and nvprof's counts (`inst_executed`,
/// `dram_read_transactions`, `dram_write_transactions`).
pub fn nvprof_meta() -> SetMeta {
    let mut meta = SetMeta {
        knobs: vec!["core_freq_mhz".into(), "mem_freq_mhz".into()],
        ..SetMeta::default()
    };
    for c in [
        "inst_executed",
        "dram_read_transactions",
        "dram_write_transactions",
    ] {
        meta.counters.insert(c.into(), CounterKind::Count);
    }
    meta
}

/// The kernel's point at `(fc_mhz, fm_mhz)` with power `power_w`: the time of
/// [`gpu_kernel`] and nvprof's counts (the transactions split 7:3 into reads and writes).
pub fn gpu_kernel_point(
    workload: &str,
    (n, d, lat): (f64, f64, f64),
    fc_mhz: f64,
    fm_mhz: f64,
    power_w: f64,
) -> Point {
    Point {
        workload: workload.into(),
        knobs: [
            ("core_freq_mhz".to_string(), fc_mhz),
            ("mem_freq_mhz".to_string(), fm_mhz),
        ]
        .into_iter()
        .collect(),
        time_s: Some(gpu_kernel(n, d, lat, fc_mhz, fm_mhz).0),
        power_w: Some(power_w),
        counters: [
            ("inst_executed".to_string(), n),
            ("dram_read_transactions".to_string(), 0.7 * d),
            ("dram_write_transactions".to_string(), 0.3 * d),
        ]
        .into_iter()
        .collect(),
        ..Point::default()
    }
}
