//! The clock × thread-count interaction of time from the CPI stack at the cross point
//! (`"contention": true`, the default).
//!
//! Moore's (2012) split per thread count `n`, `t(n, f) = t_mem(n) + t_comp(n)·b/f`, in CPI
//! terms `CPI(n, f) = CPI_core + CPI_mem(n, f)`: the core part (cycles per instruction of the
//! pipeline itself) is a property of the code and the core, the same at every thread count;
//! more threads add stall cycles of contention for the shared L2 and DRAM (the cause of
//! poor concurrency scaling in Curtis-Maury et al.'s prediction-based concurrency
//! throttling, IEEE TPDS 19(10), 2008), and stall time does not scale with the core clock.
//! So where a thread count `n` has one training clock `b` (a cross: a clock sweep at the
//! reference thread count `r` plus one point across), its memory share at `b` is
//!
//! ```text
//! φ_n = (φ_r·CPI_r + max(0, CPI_n − CPI_r)) / max(CPI_n, CPI_r)
//! t(n, f) = t(n, b) · ((1 − φ_n)·b/f + φ_n)
//! ```
//!
//! with `CPI = cycles / instructions` from the counters at `(n, b)` and `(r, b)`, and `φ_r`
//! the memory share of the Moore curve `t(r, f)·f = A + M·f` fitted to the reference sweep
//! (`φ_r = M / (A/b + M)`). A CPI that falls with more threads (less contention, e.g. a
//! larger share of cache per thread) leaves the memory share as it is: the separable rule on
//! the Moore curve. It needs a cycles and an instruction counter; without them, or where
//! the thread count has two or more training clocks, the main effects apply.

use super::{Group, INSTRUCTION_COUNTERS};
use crate::models::threads::THREADS_KNOB;
use serde::{Deserialize, Serialize};

/// Cycle counters, in order.
const CYCLE_COUNTERS: [&str; 3] = ["cpu_cycles", "cycles", "cpu-cycles"];

/// One thread count's time curve from its single training clock.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContentionCurve {
    pub threads: f64,
    /// The training clock `b`, MHz, and the time there, s.
    pub b_mhz: f64,
    pub t_b_s: f64,
    /// The memory share at `b` (`φ_n`), and the reference thread count's (`φ_r`).
    pub phi: f64,
    pub phi_ref: f64,
    /// `CPI_n` and `CPI_r` at `b`.
    pub cpi: f64,
    pub cpi_ref: f64,
    /// The clock range of the reference sweep (no extrapolation beyond it).
    pub clock_range_mhz: (f64, f64),
}

impl ContentionCurve {
    /// Time at clock `f`, `None` outside the reference sweep's clocks.
    pub fn time(&self, f: f64) -> Option<f64> {
        let (lo, hi) = self.clock_range_mhz;
        (f >= lo - 1e-9 && f <= hi + 1e-9 && f > 0.0)
            .then(|| self.t_b_s * ((1.0 - self.phi) * self.b_mhz / f + self.phi))
    }
}

fn cpi(p: &powerperf_format::set::Point) -> Option<f64> {
    let c = CYCLE_COUNTERS
        .iter()
        .find_map(|c| p.counters.get(*c).copied())?;
    let i = INSTRUCTION_COUNTERS
        .iter()
        .find_map(|c| p.counters.get(*c).copied())?;
    (c > 0.0 && i > 0.0).then(|| c / i)
}

/// The contention curves of one workload group whose varied knobs are exactly the clock
/// knob `clock` and `threads` (empty otherwise, or without the counters).
pub(super) fn curves(g: &Group, clock: &str) -> Vec<ContentionCurve> {
    let mut out = Vec::new();
    if g.levels.len() != 2 || !g.levels.contains_key(THREADS_KNOB) || !g.levels.contains_key(clock)
    {
        return out;
    }
    let at = |n: f64| -> Vec<&powerperf_format::set::Point> {
        g.points
            .iter()
            .filter(|p| (p.knobs[THREADS_KNOB] - n).abs() < 1e-9)
            .copied()
            .collect()
    };
    // The reference thread count: most clocks, ties to fewer threads.
    let Some(r) = g.levels[THREADS_KNOB]
        .iter()
        .copied()
        .max_by(|a, b| at(*a).len().cmp(&at(*b).len()).then(b.total_cmp(a)))
    else {
        return out;
    };
    let sweep = at(r);
    if sweep.len() < 2 {
        return out;
    }
    // Moore's curve t·f = A + M·f by least squares over the sweep.
    let xs: Vec<(f64, f64)> = sweep
        .iter()
        .filter_map(|p| Some((p.knobs[clock], p.time_s? * p.knobs[clock])))
        .collect();
    if xs.len() < 2 {
        return out;
    }
    let n = xs.len() as f64;
    let mx = xs.iter().map(|x| x.0).sum::<f64>() / n;
    let my = xs.iter().map(|x| x.1).sum::<f64>() / n;
    let sxx: f64 = xs.iter().map(|x| (x.0 - mx).powi(2)).sum();
    if sxx <= 0.0 {
        return out;
    }
    let m = xs.iter().map(|x| (x.0 - mx) * (x.1 - my)).sum::<f64>() / sxx;
    let a = my - m * mx;
    let lo = xs.iter().map(|x| x.0).fold(f64::INFINITY, f64::min);
    let hi = xs.iter().map(|x| x.0).fold(0.0, f64::max);
    for &nt in &g.levels[THREADS_KNOB] {
        let pts = at(nt);
        if nt == r || pts.len() != 1 {
            continue;
        }
        let p = pts[0];
        let b = p.knobs[clock];
        let Some(rb) = sweep.iter().find(|q| (q.knobs[clock] - b).abs() < 1e-9) else {
            continue;
        };
        let (Some(cn), Some(cr), Some(tb)) = (cpi(p), cpi(rb), p.time_s) else {
            continue;
        };
        let phi_r = (m / (a / b + m)).clamp(0.0, 1.0);
        let phi = if cn > cr {
            (phi_r * cr + (cn - cr)) / cn
        } else {
            phi_r
        };
        if !(phi.is_finite() && tb > 0.0) {
            continue;
        }
        out.push(ContentionCurve {
            threads: nt,
            b_mhz: b,
            t_b_s: tb,
            phi,
            phi_ref: phi_r,
            cpi: cn,
            cpi_ref: cr,
            clock_range_mhz: (lo, hi),
        });
    }
    out
}
