//! Analytical DVFS time model with the memory part read from counters, as an alternative to
//! fitting it from two or more clocks ([`super::analytic`]).
//!
//! Moore (2012), "Modeling Performance and Energy Efficiency of Application Codes": a run's
//! time splits into a part that does not scale with the core clock and one that does,
//! `t(f) = t_mem + t_comp·f0/f`, and the non-scaling part is the memory-stall time, estimated
//! from a cycle breakdown: stall cycles ≈ Σ penalty_i × count_i (PerfExpert's LCPI, Burtscher
//! et al. SC10), or, for an accelerator, the fraction of time its memory interface is busy
//! (the CPU-bound / memory-bound decomposition of Choi, Soma, Pedram, "Fine-grained dynamic
//! voltage and frequency scaling for precise energy and performance trade-off based on the
//! ratio of off-chip access to on-chip computation times", DATE 2004).
//!
//! Per (workload, other knobs), at the reference point (its highest training clock `f0`, time
//! `t0`), the counter estimate `M` (seconds) is the sum of [`MemoryTerm`]s:
//!
//! - `fraction`: a rate counter in 0..1 of the run (DCGM `dram_active`): `M = value · t0`;
//! - `ns_per_event`: a count with a clock-independent latency (DRAM, ns): `M = N · ns · 1e-9`;
//! - `cycles_per_event`: a count with a penalty in cycles at `f0` (LCPI): `M = N · c / f0`.
//!
//! Then `t_mem = α·M` (clamped to `[0, t0]`) and `t(f) = t_mem + (t0 − t_mem)·f0/f`. `α = 1`
//! uses the counters as they are; with `calibrate` (default) one `α` shared by every workload
//! is fitted by least squares on the training points at the other clocks (relative error:
//! `t − t0·f0/f = α·M·(1 − f0/f)`, weights `1/t²`), which absorbs a penalty that is only an
//! upper bound (e.g. L1 refills of which only some go to DRAM). In workload holdout the
//! held-out workload has only its baseline point, where `1 − f0/f = 0`: `α` comes from the
//! other workloads, and the held-out workload's curve from its baseline time and counters.
//!
//! ## Bound and bottleneck (`"combine": "max"`, opt-in)
//!
//! The sum above charges all the memory time on top of the compute time, as on an in-order
//! CPU. A GPU overlaps them (Nath & Tullsen, "The CRISP performance model for dynamic voltage
//! and frequency scaling in a GPGPU", MICRO 2015: "the high degree of overlap between memory
//! access and computation"), and the bound-and-bottleneck view (Williams, Waterman &
//! Patterson, "Roofline", CACM 52(4), 2009) makes the run as long as its busiest unit. From the
//! DCGM activity fractions at the reference point (ratios of elapsed time or cycles):
//!
//! - `a`: the engine is active at all (`gr_engine_active`; 1 when the set lacks it). The rest,
//!   `1 − a`, is host-side time (launches, copies, CPU work), independent of the GPU clock;
//! - `m = min(α·M/t0, a)`: the DRAM interface busy (`dram_active`, the memory terms above):
//!   at a fixed memory clock this time does not change with the core clock;
//! - `c = min(max_i u_i, a)`: the busiest arithmetic pipe (`fp64_active`, `fp32_active`,
//!   `fp16_active`, `tensor_active`, or [`AnalyticCountersParams::compute_counters`]): its
//!   busy time is a count of core cycles, ∝ 1/f;
//! - the remainder `a − max(c, m)`, active time with neither unit saturated (issue, latency,
//!   on-chip caches, synchronisation), counted in core cycles, ∝ 1/f.
//!
//! ```text
//! t(f) = t0 · [ (1 − a) + max(c·f0/f, m) + (a − max(c, m))·f0/f ]
//! ```
//!
//! Nothing is fitted (α = 1: with `combine = max` the `calibrate` flag is not used). Without
//! compute counters (`c = 0`) it is the sum form with α = 1 plus the host-side part.
//!
//! ## Base CPI (`"combine": "base_cpi"`, sets with an instructions counter, and cycles where they have one)
//!
//! A CPI stack (Eyerman, Eeckhout, Karkhanis & Smith, "A performance counter architecture
//! for computing accurate CPI components", ASPLOS 2006) splits a core's cycles per
//! instruction into a base part, the cycles the core needs to issue and execute, counted in
//! core cycles and so ∝ 1/f, and miss-event parts whose latency is set outside the core
//! (memory, I/O) and does not scale with the core clock (the split behind DVFS models such as
//! Keramidas, Spiliopoulos & Kaxiras, "Interval-based models for run-time DVFS orchestration
//! in superscalar processors", CF 2010). Without stall counters, one base CPI `β` shared by
//! every workload of the chip is fitted, and a workload's clock-scaled share of its reference
//! time is
//!
//! ```text
//! φ = min(1, C/(f0·t0·n)) · min(1, β·N/C)        (N instructions, C cycles at f0, n threads)
//! t(f) = t0 · [ (1 − φ) + φ·f0/f ]
//! ```
//!
//! The first factor is the share of wall time the core ran (perf's "CPUs utilized", per
//! thread); the rest, time off the core (I/O, sleeping), does not scale. The second is the
//! base share of the cycles run, `β/CPI`. Without a cycles counter `φ = min(1, β·N/(f0·t0·n))`.
//! `β` is fitted by golden-section search on the relative squared error of the training
//! points at the non-reference clocks (in workload holdout: the other workloads' points).
//!
//! **Threads** (since stop 34). On `n > 1` threads the first factor reads a thread's time
//! off the core as time every thread is off it at once ([`ThreadIdle::OffCore`], I/O: it
//! does not scale). A thread may instead be waiting for another one (barriers, load
//! imbalance, a serial section, pipeline stages taking turns): that wait lasts as long as
//! the other thread's work and scales as the busy time does, and the factor becomes
//! `min(1, C/(f0·t0))`, the busy cycles laid end to end on the critical path
//! ([`ThreadIdle::Waits`]; Amdahl's serial section, during which the other threads wait, is
//! the simplest case). Where a training group runs on several threads
//! both readings are fitted and the one with the lower training error is kept.
//!
//! ## Two clocks (`combine = base_cpi` on a core × memory clock grid with DRAM counts)
//!
//! Where the set also has the memory-clock knob `mem_freq_mhz` and DRAM transaction counts
//! ([`DRAM_NAMES`]: nvprof's `dram_read_transactions` + `dram_write_transactions`, or Nsight
//! Compute's `dram__sectors_read.sum` + `dram__sectors_write.sum`), a group spans both clocks
//! (its reference: the highest core clock, and there the highest memory clock `m0`), and the
//! DRAM-bound share of the reference time is read from the traffic `D`:
//!
//! ```text
//! μ = min(1, γ·D/(m0·t0))
//! t(f, m) = t0 · [ (1 − max(φ, μ)) + max(φ·f0/f, μ·m0/m) ]
//! ```
//!
//! A GPU overlaps issue and DRAM transfers, so the run is as long as the busier of the two
//! (the bound and bottleneck above; the `max(sm_del, mem_del)` of Q. Wang & X. Chu, "GPGPU
//! performance estimation with core and memory frequency scaling", IEEE TPDS 31(12), 2020,
//! after Hong & Kim's MWP-CWP model, ISCA 2009): issue time counted in core cycles (∝ 1/f),
//! transfer time in memory-clock cycles (∝ 1/m), and the rest (latency, launches) scales with
//! neither. `γ`, the chip's memory-clock cycles per DRAM transaction (the inverse of its
//! bandwidth in transactions per memory cycle), is fitted beside `β` on the same error: a
//! log grid over both (`[0, top]` each, the max makes the error surface kinked), then nested
//! golden sections in the box of the best grid cell's neighbours. With `μ = 0` (no DRAM traffic) this is the
//! one-clock form. Without a training point at a second memory clock `γ` is not fitted and a
//! setting at another memory clock gets no prediction.
//!
//! Power and energy: power from [`super::analytic`] fitted on the same training points where
//! the group has two or more clocks; a group with only its reference point (workload holdout)
//! gets `P(f) = P(f0) × median_g P_g(f)/P_g(f0)` over the other groups' fitted power curves
//! (with two clocks: `P(f, m) = P(f0, m0) × median_w P_w(f, m)/P_w(f0, m0)` over the other
//! workloads). `E = P·t`.

use super::analytic::{self, AnalyticModel, AnalyticParams};
use super::features::{find_group, knob_key};
use super::memclock::MEM_KNOB;
use super::{Knobs, ModelError, Prediction};
use crate::store::set::{CounterKind, Point, SetMeta};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// How a counter becomes memory time (see the module docs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemoryTermKind {
    /// A rate counter, fraction 0..1 of the run time.
    Fraction,
    /// A count × a clock-independent latency in nanoseconds.
    NsPerEvent(f64),
    /// A count × a penalty in cycles at the reference clock.
    CyclesPerEvent(f64),
}

/// One counter's contribution to the memory time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryTerm {
    pub counter: String,
    pub kind: MemoryTermKind,
}

/// Parameters of the counter-based analytic model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AnalyticCountersParams {
    /// The terms; empty: `dram_active` as a fraction when the set has it.
    pub memory_terms: Vec<MemoryTerm>,
    /// Fit one shared scale α on the training points (else α = 1). Not used with
    /// `combine = max`.
    pub calibrate: bool,
    /// How the memory and compute parts combine: `sum` (default, Moore's
    /// `t_mem + t_comp·f0/f`) or `max` (bound and bottleneck, see the module docs).
    pub combine: Combine,
    /// `combine = max`: the arithmetic-pipe activity counters (fractions 0..1) whose maximum
    /// is the compute bottleneck; empty: those of `fp64_active`, `fp32_active`,
    /// `fp16_active`, `tensor_active` the set has.
    pub compute_counters: Vec<String>,
    /// `combine = max`: the engine-active fraction (host-side time is `1 − a`); `None`:
    /// `gr_engine_active` when the set has it, else `a = 1`.
    pub active_counter: Option<String>,
    /// Power of a workload with only its reference point (workload holdout): `median_ratio`
    /// (default) or `roofline` (see [`PowerTransfer`]).
    pub power_transfer: PowerTransfer,
    /// `combine = base_cpi`: the retired-instructions counter; `None`: the first of
    /// [`INSTRUCTIONS_NAMES`] the set has.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instructions_counter: Option<String>,
    /// `combine = base_cpi` on a set with a memory-clock knob (`mem_freq_mhz`): the DRAM
    /// transaction counts whose sum is the memory traffic (module docs, "Two clocks");
    /// empty: those of [`DRAM_NAMES`] the set has.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dram_counters: Vec<String>,
}

/// How a workload with only its reference point gets its power curve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum PowerTransfer {
    /// `P(f) = P0 × median_g P_g(f)/P_g(f0)` over the other groups' fitted curves.
    #[default]
    MedianRatio,
    /// Dynamic energy per run fixed at a voltage, so dynamic power ∝ `V²/t`:
    /// `P(f) = S(f) + v(f)·(P0 − s)·ρ(f)` with `ρ(f) = t0/t(f)` from the bound-and-bottleneck
    /// form's counters (needs `combine = max`), a chip static curve `S(f)` (`S(f0) = s`) and
    /// voltage factor `v(f)` fitted per clock on the training groups.
    Roofline,
}

/// The chip curves of [`PowerTransfer::Roofline`] for one value of the other knobs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PowerTransferTable {
    pub other_knobs: Knobs,
    /// Static power at the reference clock, W.
    pub static_ref_w: f64,
    /// `[f_mhz, S(f) W, v(f)]`, ascending in f.
    pub rows: Vec<[f64; 3]>,
}

/// How the memory and compute parts of the time combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Combine {
    /// `t = t_mem + t_comp·f0/f` (Moore 2012).
    #[default]
    Sum,
    /// `t = t_host + max(t_comp·f0/f, t_mem) + t_rest·f0/f` (Roofline's bound and bottleneck).
    Max,
    /// `t = t0·[(1 − φ) + φ·f0/f]`, `φ` the base-CPI share of the reference time (module docs).
    BaseCpi,
}

impl AnalyticCountersParams {
    /// The base-CPI form (`combine = base_cpi`) with its default counters, for `auto`'s
    /// resolution where [`base_cpi_applicable`].
    pub fn base_cpi() -> Self {
        Self {
            combine: Combine::BaseCpi,
            ..Self::default()
        }
    }

    /// The bound-and-bottleneck form with its default counters (`combine = max`), for
    /// `auto`'s resolution where [`roofline_applicable`].
    pub fn roofline() -> Self {
        Self {
            combine: Combine::Max,
            ..Self::default()
        }
    }
}

/// Compute-pipe counters `combine = max` takes by default (DCGM profiling fields).
pub const DEFAULT_COMPUTE_COUNTERS: [&str; 4] =
    ["fp64_active", "fp32_active", "fp16_active", "tensor_active"];

/// Engine-active counter `combine = max` takes by default.
pub const DEFAULT_ACTIVE_COUNTER: &str = "gr_engine_active";

/// Whether the bound-and-bottleneck form (`combine = max`) has what it needs on a set with
/// these counters: a memory fraction (`dram_active`) and at least one compute-pipe counter,
/// all rates. For `auto`'s resolution in workload holdout.
pub fn roofline_applicable(meta: &SetMeta) -> bool {
    let has = |name: &str| {
        meta.counters
            .iter()
            .any(|(n, k)| n.eq_ignore_ascii_case(name) && *k == CounterKind::Rate)
    };
    has("dram_active") && DEFAULT_COMPUTE_COUNTERS.iter().any(|c| has(c))
}

/// Count counters recognised as retired instructions, in order of preference (perf, ARM PMU,
/// PAPI, LIKWID spellings; then a GPU's warp instructions executed: CUPTI/nvprof's
/// `inst_executed` and Nsight Compute's `smsp__inst_executed.sum` / `sm__inst_executed.sum`,
/// also with `_` for `.`; compared case-insensitively). On a GPU `β` is then the chip's
/// cycles per warp instruction (the inverse of its peak issue rate), fitted like a CPU's.
pub const INSTRUCTIONS_NAMES: [&str; 10] = [
    "instructions",
    "inst_retired",
    "papi_tot_ins",
    "instr_retired_any",
    "inst_retired.any",
    "inst_executed",
    "smsp__inst_executed.sum",
    "smsp__inst_executed_sum",
    "sm__inst_executed.sum",
    "sm__inst_executed_sum",
];

/// The retired-instructions counter of a set (a Count), if it has one.
pub fn instructions_counter(meta: &SetMeta) -> Option<String> {
    super::features::count_counter(meta, &INSTRUCTIONS_NAMES)
}

/// DRAM transaction counts the two-clock base-CPI form sums, in three spellings, by
/// preference: CUPTI/nvprof's 32-byte transactions, then Nsight Compute's 32-byte sectors
/// (with `.` and with `_`). The first spelling the set has any of is taken, so one transfer
/// is never counted twice.
pub const DRAM_NAMES: [[&str; 2]; 3] = [
    ["dram_read_transactions", "dram_write_transactions"],
    ["dram__sectors_read.sum", "dram__sectors_write.sum"],
    ["dram__sectors_read_sum", "dram__sectors_write_sum"],
];

/// The DRAM transaction counters of a set ([`DRAM_NAMES`]; counts), empty without any.
pub fn dram_counters(meta: &SetMeta) -> Vec<String> {
    DRAM_NAMES
        .iter()
        .map(|names| {
            names
                .iter()
                .filter_map(|n| super::features::count_counter(meta, &[n]))
                .collect::<Vec<_>>()
        })
        .find(|found| !found.is_empty())
        .unwrap_or_default()
}

/// Whether the base-CPI form (`combine = base_cpi`) has what it needs: an instructions
/// counter (a count). A cycles counter is used where the set has one (the share of wall
/// time on the core); without it `φ = min(1, β·N/(f0·t0·n))`, as on a GPU sweep with
/// `inst_executed` alone. For `auto`'s resolution in workload holdout.
pub fn base_cpi_applicable(meta: &SetMeta) -> bool {
    instructions_counter(meta).is_some()
}

impl Default for AnalyticCountersParams {
    fn default() -> Self {
        Self {
            memory_terms: Vec::new(),
            calibrate: true,
            combine: Combine::Sum,
            compute_counters: Vec::new(),
            active_counter: None,
            power_transfer: PowerTransfer::MedianRatio,
            instructions_counter: None,
            dram_counters: Vec::new(),
        }
    }
}

/// One (workload, other knobs) group at its reference point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CounterGroup {
    pub workload: String,
    pub other_knobs: Knobs,
    /// Reference clock `f0` (MHz), time `t0` (s) and power `P0` (W) there.
    pub f0_mhz: f64,
    pub t0_s: Option<f64>,
    pub p0_w: Option<f64>,
    /// The counter estimate `M` of memory time at `f0`, seconds.
    pub memory_s: Option<f64>,
    /// `combine = max`: the busiest compute pipe's activity at `f0` (0..1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_fraction: Option<f64>,
    /// `combine = max`: the engine-active fraction at `f0` (0..1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_fraction: Option<f64>,
    /// The memory fraction of the reference time from fraction-kind terms alone (known
    /// without a reliable time), for [`PowerTransfer::Roofline`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_fraction: Option<f64>,
    /// `combine = base_cpi`: retired instructions and cycles at `f0`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cycles: Option<f64>,
    /// Two clocks (`combine = base_cpi` with a memory-clock knob): the reference memory clock
    /// `m0` (MHz) and the DRAM transactions `D` there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem0_mhz: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dram: Option<f64>,
}

/// `combine = base_cpi` on several threads: what a thread's time off the core is (module
/// docs, **Threads**), chosen by the training error where a training group runs on two or
/// more threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ThreadIdle {
    /// Off the core on every thread at once (I/O, sleeping): it does not scale with the
    /// clock; the run share is the per-thread utilisation `min(1, C/(f0·t0·n))`.
    #[default]
    OffCore,
    /// Waiting for another thread (barriers, load imbalance, a serial section): it lasts as
    /// long as that thread's work, so it scales as the busy time does; the run share is
    /// `min(1, C/(f0·t0))`, the busy cycles laid end to end on the critical path.
    Waits,
}

impl ThreadIdle {
    fn is_off_core(&self) -> bool {
        *self == ThreadIdle::OffCore
    }

    /// The thread count the cycles are spread over in the run share `min(1, C/(f0·t0·n))`:
    /// the group's `threads` off the core, 1 (the critical path) for waits.
    fn spread(self, threads: f64) -> f64 {
        match self {
            ThreadIdle::OffCore => threads,
            ThreadIdle::Waits => 1.0,
        }
    }
}

/// The fitted model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AnalyticCountersModel {
    pub freq_knob: String,
    pub memory_terms: Vec<MemoryTerm>,
    /// The shared scale α and how it was set.
    pub alpha: f64,
    pub alpha_source: String,
    pub groups: Vec<CounterGroup>,
    /// The power model (analytic, on the same points), when it could be fitted.
    pub power: Option<AnalyticModel>,
    /// How memory and compute time combine (files before it: `sum`).
    #[serde(default)]
    pub combine: Combine,
    /// `combine = max`: the compute-pipe and engine-active counters used.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compute_counters: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_counter: Option<String>,
    /// [`PowerTransfer::Roofline`]'s chip curves (empty: the median ratio).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub power_transfer: Vec<PowerTransferTable>,
    /// `combine = base_cpi`: the fitted base CPI `β` and the counters used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_cpi: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions_counter: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cycles_counter: Option<String>,
    /// Two clocks: the memory-clock knob (a group then spans its values), the DRAM counters
    /// and `γ`, the memory-clock cycles per DRAM transaction, fitted beside `β`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_knob: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dram_counters: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_cycles_per_transaction: Option<f64>,
    /// `combine = base_cpi`: the reading of a thread's time off the core (absent in files
    /// written before stop 34: `off_core`).
    #[serde(default, skip_serializing_if = "ThreadIdle::is_off_core")]
    pub thread_idle: ThreadIdle,
}

fn split(knobs: &Knobs, freq: &str) -> Knobs {
    knobs
        .iter()
        .filter(|(k, _)| *k != freq)
        .map(|(k, v)| (k.clone(), *v))
        .collect()
}

/// The knobs that key a group: all but the clock knob (and the memory-clock knob with two
/// clocks).
fn group_key(knobs: &Knobs, freq: &str, mem_knob: Option<&str>) -> Knobs {
    let mut o = split(knobs, freq);
    if let Some(m) = mem_knob {
        o.remove(m);
    }
    o
}

/// The set's counters, for an error message.
fn counter_list(meta: &SetMeta) -> String {
    meta.counters.keys().cloned().collect::<Vec<_>>().join(", ")
}

/// `what` counter `name`, named in the params, is not a `kind` (`counter` or `count`) of the
/// set.
fn not_in_set(meta: &SetMeta, what: &str, name: &str, kind: &str) -> ModelError {
    ModelError::NotEnoughData {
        model: "analytic_counters".into(),
        what: format!(
            "{what} counter `{name}` is not a {kind} of the set; its counters: [{}]",
            counter_list(meta)
        ),
    }
}

fn memory_time(p: &Point, terms: &[MemoryTerm], f0_mhz: f64, t0: f64) -> Option<f64> {
    let mut m = 0.0;
    for t in terms {
        let v = *p.counters.get(&t.counter)?;
        m += match t.kind {
            MemoryTermKind::Fraction => v * t0,
            MemoryTermKind::NsPerEvent(ns) => v * ns * 1e-9,
            MemoryTermKind::CyclesPerEvent(c) => v * c / (f0_mhz * 1e6),
        };
    }
    m.is_finite().then_some(m.max(0.0))
}

/// The fractions `(a, c, m)` of a group with memory time `tm` and reference time `t0`.
fn fractions(g: &CounterGroup, tm: f64, t0: f64) -> (f64, f64, f64) {
    let clamp01 = |v: f64| {
        if v.is_finite() {
            v.clamp(0.0, 1.0)
        } else {
            0.0
        }
    };
    let a = g.active_fraction.map_or(1.0, clamp01);
    let m = if t0 > 0.0 { clamp01(tm / t0) } else { 0.0 }.min(a);
    let c = g.compute_fraction.map_or(0.0, clamp01).min(a);
    (a, c, m)
}

/// `t(f)/t0` of the bound-and-bottleneck form at `r = f0/f` (module docs), for a group with
/// memory time `tm` seconds at its reference point.
fn roofline_ratio(g: &CounterGroup, tm: f64, r: f64) -> f64 {
    let Some(t0) = g.t0_s.filter(|t| *t > 0.0) else {
        return 1.0;
    };
    let (a, c, m) = fractions(g, tm, t0);
    (1.0 - a) + (c * r).max(m) + (a - c.max(m)) * r
}

/// `t0/t(f)` of a group from its fractions alone (no time needed), at `r = f0/f`.
fn speed_ratio(g: &CounterGroup, r: f64) -> Option<f64> {
    let m = g.memory_fraction?;
    let clamp01 = |v: f64| {
        if v.is_finite() {
            v.clamp(0.0, 1.0)
        } else {
            0.0
        }
    };
    let a = g.active_fraction.map_or(1.0, clamp01);
    let (m, c) = (m.min(a), g.compute_fraction.map_or(0.0, clamp01).min(a));
    let t = (1.0 - a) + (c * r).max(m) + (a - c.max(m)) * r;
    (t > 0.0 && t.is_finite()).then(|| 1.0 / t)
}

/// The `threads` knob of a group (1 without it or where it is not a count ≥ 1).
fn group_threads(g: &CounterGroup) -> f64 {
    g.other_knobs
        .get("threads")
        .copied()
        .filter(|n| *n >= 1.0 && n.is_finite())
        .unwrap_or(1.0)
}

/// `combine = base_cpi`: the terms `(u, v)` of a group's clock-scaled share
/// `φ = u·min(1, β·v)` (module docs: `u = min(1, C/(f0·t0·n))`, `n` the threads for
/// [`ThreadIdle::OffCore`] and 1 for [`ThreadIdle::Waits`], `v = N/C`; without cycles
/// `u = 1`, `v = N/(f0·t0·n)` with the group's threads); `None` without a positive time,
/// instructions or clock.
fn share_terms(g: &CounterGroup, idle: ThreadIdle) -> Option<(f64, f64)> {
    let t0 = g.t0_s.filter(|t| *t > 0.0 && t.is_finite())?;
    let n_inst = g.instructions.filter(|n| *n > 0.0 && n.is_finite())?;
    let f0 = g.f0_mhz * 1e6;
    if !(f0 > 0.0 && f0.is_finite()) {
        return None;
    }
    let threads = group_threads(g);
    let (u, v) = match g.cycles.filter(|c| *c > 0.0 && c.is_finite()) {
        Some(c) => ((c / (f0 * t0 * idle.spread(threads))).min(1.0), n_inst / c),
        None => (1.0, n_inst / (f0 * t0 * threads)),
    };
    (u.is_finite() && v.is_finite()).then_some((u, v))
}

/// `combine = base_cpi`: the clock-scaled share `φ` of a group's reference time for base CPI
/// `beta` (module docs); `None` without a positive time, instructions or clock.
fn base_share(g: &CounterGroup, beta: f64, idle: ThreadIdle) -> Option<f64> {
    if !(beta.is_finite() && beta >= 0.0) {
        return None;
    }
    let (u, v) = share_terms(g, idle)?;
    let phi = u * (beta * v).min(1.0);
    phi.is_finite().then_some(phi.max(0.0))
}

/// Two clocks: the term `w = D/(m0·t0)` of a group's memory-clock-bound share
/// `μ = min(1, γ·w)`; `None` without a positive time, DRAM count or memory clock.
fn mem_term(g: &CounterGroup) -> Option<f64> {
    let t0 = g.t0_s.filter(|t| *t > 0.0 && t.is_finite())?;
    let d = g.dram.filter(|d| *d >= 0.0 && d.is_finite())?;
    let m0 = g.mem0_mhz.filter(|m| *m > 0.0 && m.is_finite())? * 1e6;
    let w = d / (m0 * t0);
    w.is_finite().then_some(w)
}

/// Two clocks: the memory-clock-bound share `μ = min(1, γ·D/(m0·t0))` of a group's reference
/// time for `gamma` memory-clock cycles per DRAM transaction.
fn mem_share(g: &CounterGroup, gamma: f64) -> Option<f64> {
    if !(gamma.is_finite() && gamma >= 0.0) {
        return None;
    }
    let mu = (gamma * mem_term(g)?).min(1.0);
    mu.is_finite().then_some(mu.max(0.0))
}

/// `t/t0` from the shares at `rc = f0/f` and `rm = m0/m`: one clock (`mu` `None`, at `rm = 1`
/// only) `(1 − φ) + φ·rc`; two clocks `(1 − max(φ, μ)) + max(φ·rc, μ·rm)`.
fn shares_ratio(phi: f64, mu: Option<f64>, rc: f64, rm: f64) -> Option<f64> {
    let r = match mu {
        None if rm == 1.0 => 1.0 - phi + phi * rc,
        None => return None,
        Some(mu) => (1.0 - phi.max(mu)) + (phi * rc).max(mu * rm),
    };
    (r.is_finite() && r > 0.0).then_some(r)
}

/// `combine = base_cpi`: `t/t0` at `rc = f0/f` and `rm = m0/m` (module docs), with `gamma`
/// `None` for one clock.
fn base_cpi_ratio(
    g: &CounterGroup,
    beta: f64,
    gamma: Option<f64>,
    idle: ThreadIdle,
    (rc, rm): (f64, f64),
) -> Option<f64> {
    let phi = base_share(g, beta, idle)?;
    let mu = match gamma {
        Some(c) => Some(mem_share(g, c)?),
        None => None,
    };
    shares_ratio(phi, mu, rc, rm)
}

/// [`PowerTransfer::Roofline`]: per value of the other knobs, the static power at the
/// reference clock `s` (a 20-step grid in `[0, 0.95·min P0]`, least relative squared error
/// over the training points) and per clock `S(f)`, `v(f)` by weighted least squares of
/// `P_i(f) = S(f) + v(f)·(P_i0 − s)·ρ_i(f)` over the groups with power there (three or more).
fn fit_power_transfer(
    meta: &SetMeta,
    groups: &[(String, Knobs, Vec<&Point>)],
    fitted: &[CounterGroup],
    freq: &str,
) -> Vec<PowerTransferTable> {
    let mut keys: Vec<&Knobs> = Vec::new();
    for (_, o, _) in groups {
        if !keys.contains(&o) {
            keys.push(o);
        }
    }
    let mut out = Vec::new();
    for o in keys {
        // (clock, P_i(f), P_i0, ρ_i(f)) of the training groups' non-reference points.
        let mut rows: Vec<(f64, f64, f64, f64)> = Vec::new();
        let mut min_p0 = f64::INFINITY;
        for ((w, go, pts), g) in groups.iter().zip(fitted) {
            if go != o || !meta.is_reliable("power_w", w) {
                continue;
            }
            let Some(p0) = g.p0_w.filter(|p| *p > 0.0 && p.is_finite()) else {
                continue;
            };
            let mut any = false;
            for p in pts {
                let f = p.knobs[freq];
                let Some(pw) = p.power_w.filter(|v| *v > 0.0 && v.is_finite()) else {
                    continue;
                };
                if f == g.f0_mhz || f <= 0.0 {
                    continue;
                }
                if let Some(rho) = speed_ratio(g, g.f0_mhz / f) {
                    rows.push((f, pw, p0, rho));
                    any = true;
                }
            }
            if any {
                min_p0 = min_p0.min(p0);
            }
        }
        if rows.is_empty() || !min_p0.is_finite() {
            continue;
        }
        let mut clocks: Vec<f64> = rows.iter().map(|r| r.0).collect();
        clocks.sort_by(f64::total_cmp);
        clocks.dedup();
        let fit_at = |s: f64| -> (f64, Vec<[f64; 3]>) {
            let mut err = 0.0;
            let mut table = Vec::new();
            for &f in &clocks {
                let at: Vec<&(f64, f64, f64, f64)> = rows.iter().filter(|r| r.0 == f).collect();
                if at.len() < 3 {
                    continue;
                }
                let a: Vec<f64> = at.iter().flat_map(|r| [1.0, (r.2 - s) * r.3]).collect();
                let y: Vec<f64> = at.iter().map(|r| r.1).collect();
                let wt: Vec<f64> = at.iter().map(|r| 1.0 / (r.1 * r.1)).collect();
                let Some(b) = super::scaling::weighted_least_squares(&a, 2, &y, &wt) else {
                    continue;
                };
                for r in &at {
                    let e = (b[0] + b[1] * (r.2 - s) * r.3 - r.1) / r.1;
                    err += e * e;
                }
                table.push([f, b[0], b[1]]);
            }
            (err, table)
        };
        let top = 0.95 * min_p0;
        let best = (0..20)
            .map(|k| top * k as f64 / 19.0)
            .map(|s| (s, fit_at(s)))
            .filter(|(_, (e, t))| e.is_finite() && !t.is_empty())
            .min_by(|a, b| a.1 .0.total_cmp(&b.1 .0));
        if let Some((s, (_, table))) = best {
            out.push(PowerTransferTable {
                other_knobs: o.clone(),
                static_ref_w: s,
                rows: table,
            });
        }
    }
    out
}

/// `combine = base_cpi`: the memory-clock knob and DRAM counters of the two-clock form, or
/// `(None, [])` for one clock: the set has no [`MEM_KNOB`] (or no point carries it), or no
/// DRAM count.
///
/// # Errors
/// A DRAM counter named in the params that is not a count of the set.
fn two_clock_counters(
    meta: &SetMeta,
    points: &[Point],
    params: &AnalyticCountersParams,
) -> Result<(Option<String>, Vec<String>), ModelError> {
    let names = if params.dram_counters.is_empty() {
        dram_counters(meta)
    } else {
        if let Some(c) = params
            .dram_counters
            .iter()
            .find(|c| meta.counters.get(*c) != Some(&CounterKind::Count))
        {
            return Err(not_in_set(meta, "DRAM", c, "count"));
        }
        params.dram_counters.clone()
    };
    let carried = points.iter().any(|p| p.knobs.contains_key(MEM_KNOB));
    let known = meta.knobs.iter().any(|k| k == MEM_KNOB);
    Ok(if known && carried && !names.is_empty() {
        (Some(MEM_KNOB.to_string()), names)
    } else {
        (None, Vec::new())
    })
}

/// `combine = base_cpi`: `(β, γ)` minimising the relative squared error of the training
/// points away from their group's reference setting; `γ` only with a memory-clock knob and
/// points at a second memory clock. `β` by golden section in `[0, the largest CPI of the
/// groups that score it]` (beyond it every share that enters the error is clamped); with `γ`
/// (in `[0, γ_top]`, `γ_top` where every such group's `μ` is 1), a log grid over both, then,
/// in the box of the best cell's neighbours, a zoom on `γ` and golden sections (each `γ` its
/// best `β`). `None` without any such point.
///
/// Where a training group that scores them runs on two or more threads and has a cycles
/// count, both readings of [`ThreadIdle`] are fitted and the one with the lower error kept
/// (a tie keeps [`ThreadIdle::OffCore`], the reading before stop 34); elsewhere the two are
/// the same and `OffCore` is returned.
fn fit_base_cpi(
    meta: &SetMeta,
    groups: &[(String, Knobs, Vec<&Point>)],
    fitted: &[CounterGroup],
    freq: &str,
    mem_knob: Option<&str>,
) -> Option<(f64, Option<f64>, ThreadIdle)> {
    let (b, c, e, threaded) =
        fit_base_cpi_with(meta, groups, fitted, freq, mem_knob, ThreadIdle::OffCore)?;
    if threaded {
        if let Some((bw, cw, ew, _)) =
            fit_base_cpi_with(meta, groups, fitted, freq, mem_knob, ThreadIdle::Waits)
        {
            if ew < e {
                return Some((bw, cw, ThreadIdle::Waits));
            }
        }
    }
    Some((b, c, ThreadIdle::OffCore))
}

/// [`fit_base_cpi`] under one reading of a thread's idle time: `(β, γ, error, threaded)`,
/// `threaded` when a group that scores them runs on two or more threads with a cycles count
/// (where the readings differ).
fn fit_base_cpi_with(
    meta: &SetMeta,
    groups: &[(String, Knobs, Vec<&Point>)],
    fitted: &[CounterGroup],
    freq: &str,
    mem_knob: Option<&str>,
    idle: ThreadIdle,
) -> Option<(f64, Option<f64>, f64, bool)> {
    // Per training point away from its reference: t0/t, f0/f, m0/m; its group's φ terms
    // (u, v) and μ's term w (NaN without one) once per group in `blocks`, with the group's
    // range of `pairs` (the points in the same order).
    let mut pairs: Vec<[f64; 3]> = Vec::new();
    let mut blocks: Vec<([f64; 3], std::ops::Range<usize>)> = Vec::new();
    let (mut top, mut top_gamma): (f64, f64) = (0.0, 0.0);
    let mut threaded = false;
    for ((w, _, pts), g) in groups.iter().zip(fitted) {
        let Some(n_inst) = g.instructions.filter(|n| *n > 0.0 && n.is_finite()) else {
            continue;
        };
        let Some(t0) = g.t0_s.filter(|_| meta.is_reliable("time_s", w)) else {
            continue;
        };
        let Some((u, v)) = share_terms(g, idle) else {
            continue;
        };
        let w_mem = mem_term(g).unwrap_or(f64::NAN);
        let busy = g
            .cycles
            .filter(|c| *c > 0.0 && c.is_finite())
            .unwrap_or(t0 * g.f0_mhz * 1e6 * group_threads(g));
        let before = pairs.len();
        let mut other_mem = false;
        for p in pts {
            let f = p.knobs[freq];
            let rm = match (mem_knob, g.mem0_mhz) {
                (Some(k), Some(m0)) => m0 / p.knobs[k],
                _ => 1.0,
            };
            let Some(t) = p.time_s.filter(|t| *t > 0.0 && t.is_finite()) else {
                continue;
            };
            if (f != g.f0_mhz || rm != 1.0)
                && f > 0.0
                && f.is_finite()
                && rm.is_finite()
                && rm > 0.0
            {
                pairs.push([t0 / t, g.f0_mhz / f, rm]);
                other_mem |= rm != 1.0;
            }
        }
        if pairs.len() > before {
            blocks.push(([u, v, w_mem], before..pairs.len()));
        }
        // The brackets end where every group that scores β (γ) is clamped: a group known at
        // its reference point alone (a held-out workload) would only add a flat stretch
        // where golden section cannot tell which way to go.
        if pairs.len() > before {
            threaded |=
                group_threads(g) > 1.0 && g.cycles.is_some_and(|c| c > 0.0 && c.is_finite());
            if busy.is_finite() && busy > 0.0 {
                top = top.max(busy / n_inst);
            }
            if let (true, Some(d), Some(m0)) = (other_mem, g.dram, g.mem0_mhz) {
                let c = m0 * 1e6 * t0 / d;
                if c.is_finite() && c > 0.0 {
                    top_gamma = top_gamma.max(c);
                }
            }
        }
    }
    if pairs.is_empty() || !(top > 0.0 && top.is_finite()) {
        return None;
    }
    // The sum of squared relative errors over `pairs` in their order ([`shares_ratio`]'s
    // terms, a point without a positive finite ratio left out), the group terms φ and μ
    // (and two clocks' `1 − max(φ, μ)`) computed once per group: the same values, summed
    // from `Sum`'s start `−0.0`, as summing each point's `shares_ratio` error.
    let err = |b: f64, c: Option<f64>| {
        let mut sum = -0.0f64;
        for ([u, v, w], range) in &blocks {
            let phi = u * (b * v).min(1.0);
            let mut add = |r: f64, q: f64| {
                if r.is_finite() && r > 0.0 {
                    let e = q * r - 1.0;
                    sum += e * e;
                }
            };
            match c {
                Some(c) if w.is_finite() => {
                    let mu = (c * w).min(1.0);
                    let head = 1.0 - phi.max(mu);
                    for &[q, rc, rm] in &pairs[range.clone()] {
                        add(head + (phi * rc).max(mu * rm), q);
                    }
                }
                Some(_) => {}
                None => {
                    for &[q, rc, rm] in &pairs[range.clone()] {
                        if rm == 1.0 {
                            add(1.0 - phi + phi * rc, q);
                        }
                    }
                }
            }
        }
        sum
    };
    if mem_knob.is_none() || !(top_gamma > 0.0 && top_gamma.is_finite()) {
        let b = analytic::golden_section_min(0.0, top, top * 1e-9, 200, |b| err(b, None));
        return Some((b, None, err(b, None), threaded));
    }
    // Two clocks: a log grid over both (the max makes the error surface kinked, so no single
    // bracket holds one minimum), then nested golden sections in the box of the best grid
    // cell's neighbours, kept where they improve on it.
    const GRID: usize = 17;
    let log_grid = |top: f64| -> Vec<f64> {
        std::iter::once(0.0)
            .chain((0..GRID).map(|i| top * 10f64.powf(-4.0 * (1.0 - i as f64 / (GRID - 1) as f64))))
            .collect()
    };
    let (betas, gammas) = (log_grid(top), log_grid(top_gamma));
    let mut best = (0, 0, f64::INFINITY);
    for (i, b) in betas.iter().enumerate() {
        for (j, c) in gammas.iter().enumerate() {
            let e = err(*b, Some(*c));
            if e < best.2 {
                best = (i, j, e);
            }
        }
    }
    let around = |v: &[f64], i: usize| (v[i.saturating_sub(1)], v[(i + 1).min(v.len() - 1)]);
    let ((blo, bhi), (clo, chi)) = (around(&betas, best.0), around(&gammas, best.1));
    // `β`'s best for a `γ`, to `tol` of `top` (coarser while zooming, where only the order
    // of the scores matters).
    let best_beta_to = |c: f64, tol: f64| {
        let b = analytic::golden_section_min(blo, bhi, top * tol, 200, |b| err(b, Some(c)));
        (b, err(b, Some(c)))
    };
    let best_beta = |c: f64| best_beta_to(c, 1e-8);
    let zoom_score = |c: f64| best_beta_to(c, 1e-6).1;
    // The kinks (a group's μ reaching 1) leave narrow minima beside flat stretches in the box
    // too, where golden section cannot tell which way to go: zoom in first, scanning 9 values
    // of `γ` and keeping the span around the first best (its ends already scored), down to
    // 1e-3 of `γ`, then golden section.
    let (mut lo, mut hi) = (clo, chi);
    let (mut flo, mut fhi) = (zoom_score(lo), zoom_score(hi));
    while hi - lo > hi * 1e-3 + top_gamma * 1e-12 {
        let scan: Vec<f64> = (0..=8)
            .map(|i| lo + (hi - lo) * f64::from(i) / 8.0)
            .collect();
        let scored: Vec<f64> = (0..=8)
            .map(|i| match i {
                0 => flo,
                8 => fhi,
                _ => zoom_score(scan[i]),
            })
            .collect();
        let k = (0..scan.len())
            .min_by(|a, b| scored[*a].total_cmp(&scored[*b]))
            .expect("the scan is never empty");
        let (a, b) = (k.saturating_sub(1), (k + 1).min(8));
        (lo, hi, flo, fhi) = (scan[a], scan[b], scored[a], scored[b]);
    }
    let c = analytic::golden_section_min(lo, hi, hi * 1e-9, 200, |c| best_beta(c).1);
    let (b, e) = best_beta(c);
    Some(if e <= best.2 {
        (b, Some(c), e, threaded)
    } else {
        (betas[best.0], Some(gammas[best.1]), best.2, threaded)
    })
}

/// Fit on mean points.
///
/// # Errors
/// [`ModelError::MissingKnob`] without a clock knob; [`ModelError::NotEnoughData`] when the
/// set has none of the counters of the memory terms (the message names the fix).
pub fn fit(
    meta: &SetMeta,
    points: &[Point],
    params: &AnalyticCountersParams,
) -> Result<AnalyticCountersModel, ModelError> {
    fit_with(meta, points, params, true)
}

/// [`fit`] for a model that is only predicted from, never written or explained (`auto`'s
/// inner cross-validation): the same predictions, its power model without the time curves
/// and effective clocks that no prediction of this model reads
/// ([`analytic::fit_power_only`]).
///
/// # Errors
/// As [`fit`].
pub(crate) fn fit_for_prediction(
    meta: &SetMeta,
    points: &[Point],
    params: &AnalyticCountersParams,
) -> Result<AnalyticCountersModel, ModelError> {
    fit_with(meta, points, params, false)
}

fn fit_with(
    meta: &SetMeta,
    points: &[Point],
    params: &AnalyticCountersParams,
    whole_power_model: bool,
) -> Result<AnalyticCountersModel, ModelError> {
    let freq =
        analytic::freq_knob_of(meta, points, None).ok_or_else(|| ModelError::MissingKnob {
            knob: "core_freq_mhz".into(),
            model: "analytic_counters".into(),
            fix: "use a set with a clock knob".into(),
        })?;
    let base_cpi = params.combine == Combine::BaseCpi;
    let terms = if base_cpi {
        Vec::new()
    } else if params.memory_terms.is_empty() {
        match meta
            .counters
            .iter()
            .find(|(n, k)| n.eq_ignore_ascii_case("dram_active") && **k == CounterKind::Rate)
        {
            Some((n, _)) => vec![MemoryTerm {
                counter: n.clone(),
                kind: MemoryTermKind::Fraction,
            }],
            None => {
                return Err(ModelError::NotEnoughData {
                    model: "analytic_counters".into(),
                    what: format!(
                        "no memory counter given and the set has no `dram_active`; its counters: [{}]. Fix: --params '{{\"analytic_counters\":{{\"memory_terms\":[{{\"counter\":\"l1d_cache_refill\",\"kind\":{{\"ns_per_event\":110}}}}]}}}}' (docs/models.md)",
                        counter_list(meta)
                    ),
                })
            }
        }
    } else {
        params.memory_terms.clone()
    };
    if let Some(t) = terms
        .iter()
        .find(|t| !meta.counters.contains_key(&t.counter))
    {
        return Err(not_in_set(meta, "memory term", &t.counter, "counter"));
    }
    // Base CPI: the instructions and cycles counters.
    let (instructions_counter, cycles_counter) = if base_cpi {
        let inst = match &params.instructions_counter {
            Some(c) if meta.counters.get(c) == Some(&CounterKind::Count) => c.clone(),
            Some(c) => {
                return Err(not_in_set(meta, "instructions", c, "count"))
            }
            None => instructions_counter(meta).ok_or_else(|| ModelError::NotEnoughData {
                model: "analytic_counters".into(),
                what: format!(
                    "combine = base_cpi needs a retired-instructions count ({}); the set's counters: [{}]. Fix: collect `instructions` (perf) or `inst_retired` (ARM PMU), or name it with --params '{{\"analytic_counters\":{{\"combine\":\"base_cpi\",\"instructions_counter\":\"NAME\"}}}}'",
                    INSTRUCTIONS_NAMES.join(", "),
                    counter_list(meta)
                ),
            })?,
        };
        (Some(inst), super::features::cycles_counter(meta))
    } else {
        (None, None)
    };
    // Two clocks: a memory-clock knob the points carry and DRAM transaction counts.
    let (mem_knob, dram_names) = if base_cpi {
        two_clock_counters(meta, points, params)?
    } else {
        (None, Vec::new())
    };
    let group_key = |k: &Knobs| group_key(k, &freq, mem_knob.as_deref());
    // Bound and bottleneck: the compute-pipe and engine-active counters.
    let rate_counter = |name: &str| {
        meta.counters
            .iter()
            .find(|(n, k)| n.eq_ignore_ascii_case(name) && **k == CounterKind::Rate)
            .map(|(n, _)| n.clone())
    };
    let (compute_counters, active_counter) = if params.combine == Combine::Max {
        let compute: Vec<String> = if params.compute_counters.is_empty() {
            DEFAULT_COMPUTE_COUNTERS
                .iter()
                .filter_map(|c| rate_counter(c))
                .collect()
        } else {
            for c in &params.compute_counters {
                if !meta.counters.contains_key(c) {
                    return Err(not_in_set(meta, "compute", c, "counter"));
                }
            }
            params.compute_counters.clone()
        };
        let active = match &params.active_counter {
            Some(c) if !meta.counters.contains_key(c) => {
                return Err(not_in_set(meta, "active", c, "counter"))
            }
            Some(c) => Some(c.clone()),
            None => rate_counter(DEFAULT_ACTIVE_COUNTER),
        };
        (compute, active)
    } else {
        (Vec::new(), None)
    };
    // A fraction counter at the reference point, finite and clamped to 0..1.
    let fraction = |p: &Point, c: &str| {
        p.counters
            .get(c)
            .copied()
            .filter(|v| v.is_finite())
            .map(|v| v.clamp(0.0, 1.0))
    };
    // Groups and their reference points.
    let mut groups: Vec<(String, Knobs, Vec<&Point>)> = Vec::new();
    let with_clocks = |p: &&Point| {
        p.knobs.contains_key(&freq) && mem_knob.as_ref().is_none_or(|m| p.knobs.contains_key(m))
    };
    for p in points.iter().filter(with_clocks) {
        let o = group_key(&p.knobs);
        match groups.iter_mut().find(|g| g.0 == p.workload && g.1 == o) {
            Some(g) => g.2.push(p),
            None => groups.push((p.workload.clone(), o, vec![p])),
        }
    }
    let mut out = Vec::new();
    let (mut sxy, mut sxx) = (0.0, 0.0);
    for (w, o, pts) in &groups {
        // The highest core clock, and there the highest memory clock.
        let mem_of = |p: &Point| mem_knob.as_ref().map_or(0.0, |m| p.knobs[m]);
        let r = pts
            .iter()
            .max_by(|a, b| {
                a.knobs[&freq]
                    .total_cmp(&b.knobs[&freq])
                    .then(mem_of(a).total_cmp(&mem_of(b)))
            })
            .expect("groups are never empty");
        let f0 = r.knobs[&freq];
        let t0 = r
            .time_s
            .filter(|t| *t > 0.0 && meta.is_reliable("time_s", w));
        let m = t0.and_then(|t0| memory_time(r, &terms, f0, t0));
        if let (Some(t0), Some(m)) = (t0, m) {
            for p in pts {
                let (f, Some(t)) = (p.knobs[&freq], p.time_s.filter(|t| *t > 0.0)) else {
                    continue;
                };
                let x = m * (1.0 - f0 / f);
                let y = t - t0 * f0 / f;
                sxy += x * y / (t * t);
                sxx += x * x / (t * t);
            }
        }
        let compute_fraction = compute_counters
            .iter()
            .filter_map(|c| fraction(r, c))
            .reduce(f64::max);
        let active_fraction = active_counter.as_deref().and_then(|c| fraction(r, c));
        let memory_fraction = terms
            .iter()
            .map(|t| match t.kind {
                MemoryTermKind::Fraction => fraction(r, &t.counter),
                _ => None,
            })
            .sum::<Option<f64>>()
            .map(|v| v.clamp(0.0, 1.0));
        out.push(CounterGroup {
            workload: w.clone(),
            other_knobs: o.clone(),
            f0_mhz: f0,
            t0_s: t0,
            p0_w: r.power_w.filter(|_| meta.is_reliable("power_w", w)),
            memory_s: m,
            compute_fraction,
            active_fraction,
            memory_fraction,
            instructions: instructions_counter
                .as_ref()
                .and_then(|c| r.counters.get(c).copied()),
            cycles: cycles_counter
                .as_ref()
                .and_then(|c| r.counters.get(c).copied()),
            mem0_mhz: mem_knob.as_ref().map(|m| r.knobs[m]),
            dram: (!dram_names.is_empty())
                .then(|| {
                    dram_names
                        .iter()
                        .map(|c| r.counters.get(c).copied())
                        .sum::<Option<f64>>()
                })
                .flatten(),
        });
    }
    // Base CPI: β (and with two clocks γ) on the relative squared error of the training
    // points at the non-reference settings.
    let fitted_cpi = if base_cpi {
        fit_base_cpi(meta, &groups, &out, &freq, mem_knob.as_deref())
    } else {
        None
    };
    let (alpha, alpha_source) = if base_cpi {
        (1.0, "not used (combine = base_cpi)".to_string())
    } else if params.combine == Combine::Max {
        (
            1.0,
            "1 (combine = max: the counters as they are, nothing fitted)".to_string(),
        )
    } else if !params.calibrate {
        (
            1.0,
            "1 (calibrate off: the counters as they are)".to_string(),
        )
    } else if sxx > 0.0 {
        (
            (sxy / sxx).max(0.0),
            "least squares over the training points at the non-reference clocks".to_string(),
        )
    } else {
        (
            1.0,
            "1 (no training point at a second clock to calibrate on)".to_string(),
        )
    };
    // Power: the analytic model where a group has two clocks.
    let power_params = AnalyticParams {
        freq_knob: Some(freq.clone()),
        ..AnalyticParams::default()
    };
    let power = if whole_power_model {
        analytic::fit(meta, points, &power_params)
    } else {
        analytic::fit_power_only(meta, points, &power_params)
    }
    .ok();
    let power_transfer =
        if params.power_transfer == PowerTransfer::Roofline && params.combine == Combine::Max {
            fit_power_transfer(meta, &groups, &out, &freq)
        } else {
            Vec::new()
        };
    Ok(AnalyticCountersModel {
        freq_knob: freq,
        memory_terms: terms,
        alpha,
        alpha_source,
        groups: out,
        power,
        power_transfer,
        combine: params.combine,
        compute_counters,
        active_counter,
        base_cpi: fitted_cpi.map(|(b, _, _)| b),
        instructions_counter,
        cycles_counter,
        mem_cycles_per_transaction: fitted_cpi.and_then(|(_, c, _)| c),
        thread_idle: fitted_cpi.map_or(ThreadIdle::OffCore, |(_, _, i)| i),
        dram_counters: dram_names,
        mem_knob,
    })
}

impl AnalyticCountersModel {
    /// Predict `workload` at `knobs`.
    ///
    /// # Errors
    /// A missing clock knob, or no group for the workload at the other knob values.
    pub fn predict(&self, workload: &str, knobs: &Knobs) -> Result<Prediction, ModelError> {
        let f = *knobs
            .get(&self.freq_knob)
            .ok_or_else(|| ModelError::MissingKnob {
                knob: self.freq_knob.clone(),
                model: "analytic_counters".into(),
                fix: format!("pass --knob {}=…", self.freq_knob),
            })?;
        let o = group_key(knobs, &self.freq_knob, self.mem_knob.as_deref());
        let g = find_group(&self.groups, workload, &o, knobs, |g| {
            (g.workload.as_str(), &g.other_knobs)
        })?;
        // A model file is input: a negative or NaN t0 would make f64::clamp panic.
        if let Some(t0) = g.t0_s.filter(|t0| t0.is_nan() || *t0 < 0.0) {
            return Err(ModelError::Inconsistent {
                model: "analytic_counters".into(),
                what: format!("workload `{}`: t0_s = {t0}", g.workload),
            });
        }
        if !(f.is_finite() && f > 0.0) {
            return Err(ModelError::Inconsistent {
                model: "analytic_counters".into(),
                what: format!("{} = {f}: the clock must be positive", self.freq_knob),
            });
        }
        let time_s = match self.combine {
            Combine::Sum => g.t0_s.zip(g.memory_s).map(|(t0, m)| {
                let tm = (self.alpha * m).clamp(0.0, t0);
                tm + (t0 - tm) * g.f0_mhz / f
            }),
            Combine::Max => g
                .t0_s
                .zip(g.memory_s)
                .map(|(t0, m)| t0 * roofline_ratio(g, self.alpha * m, g.f0_mhz / f)),
            Combine::BaseCpi => {
                let rm = match &self.mem_knob {
                    Some(k) => {
                        let m = *knobs.get(k).ok_or_else(|| ModelError::MissingKnob {
                            knob: k.clone(),
                            model: "analytic_counters".into(),
                            fix: format!("pass --knob {k}=…"),
                        })?;
                        if !(m.is_finite() && m > 0.0) {
                            return Err(ModelError::Inconsistent {
                                model: "analytic_counters".into(),
                                what: format!("{k} = {m}: the clock must be positive"),
                            });
                        }
                        g.mem0_mhz.map_or(f64::NAN, |m0| m0 / m)
                    }
                    None => 1.0,
                };
                self.base_cpi.and_then(|b| {
                    let r = base_cpi_ratio(
                        g,
                        b,
                        self.mem_cycles_per_transaction,
                        self.thread_idle,
                        (g.f0_mhz / f, rm),
                    )?;
                    Some(g.t0_s? * r)
                })
            }
        };
        let power_w = self.power_at(g, f, knobs);
        Ok(Prediction {
            time_s,
            power_w,
            energy_j: time_s.zip(power_w).map(|(t, p)| t * p),
        })
    }

    /// `combine = max`: the fractions `(a, c, m)` of a group (host-side complement, compute
    /// bottleneck, memory), as [`roofline_ratio`] uses them; `None` without a reference time.
    pub fn roofline_fractions(&self, g: &CounterGroup) -> Option<(f64, f64, f64)> {
        let (t0, m) = g.t0_s.zip(g.memory_s)?;
        Some(fractions(g, self.alpha * m, t0))
    }

    fn power_at(&self, g: &CounterGroup, f: f64, knobs: &Knobs) -> Option<f64> {
        let pm = self.power.as_ref()?;
        // The power model's groups are keyed by every knob but the core clock.
        let at_setting = split(knobs, &self.freq_knob);
        let own = pm
            .groups
            .iter()
            .find(|a| a.workload == g.workload && a.other_knobs == at_setting)
            .is_some_and(|a| a.power.is_some());
        if own {
            return pm.predict(&g.workload, knobs).ok()?.power_w;
        }
        // Only the reference point.
        let p0 = g.p0_w?;
        if let Some(tab) = self
            .power_transfer
            .iter()
            .find(|t| t.other_knobs == g.other_knobs)
        {
            // The chip curves between the two nearest fitted clocks (none beyond them).
            let rows = &tab.rows;
            let i = rows.partition_point(|r| r[0] < f);
            let at = if rows.get(i).is_some_and(|r| r[0] == f) {
                Some((rows[i][1], rows[i][2]))
            } else if i > 0 && i < rows.len() {
                let (lo, hi) = (rows[i - 1], rows[i]);
                let u = (f - lo[0]) / (hi[0] - lo[0]);
                Some((lo[1] + u * (hi[1] - lo[1]), lo[2] + u * (hi[2] - lo[2])))
            } else if f == g.f0_mhz {
                return Some(p0);
            } else {
                None
            };
            let rho = speed_ratio(g, g.f0_mhz / f);
            if let (Some((sf, vf)), Some(rho)) = (at, rho) {
                return Some(sf + vf * (p0 - tab.static_ref_w) * rho);
            }
            return None;
        }
        // Scale P0 by the median ratio of the other workloads: power at the setting asked
        // for over power at the group's reference setting.
        let mut reference = knobs.clone();
        reference.insert(self.freq_knob.clone(), g.f0_mhz);
        if let (Some(k), Some(m0)) = (&self.mem_knob, g.mem0_mhz) {
            reference.insert(k.clone(), m0);
        }
        // One power group per (workload, other knobs): each workload at most once. Each
        // workload's groups at `knobs` and at the reference are what `pm.predict` would find
        // for them (the first group with the workload and the other knobs), looked up in one
        // pass over the groups instead of one search per workload and call.
        let first_at = |point: &Knobs| -> Option<(f64, BTreeMap<&str, &analytic::AnalyticGroup>)> {
            let clock = *point.get(&pm.freq_knob)?;
            let other = analytic::other_knobs(point, &pm.freq_knob);
            let mut by_workload = BTreeMap::new();
            for a in pm.groups.iter().filter(|a| a.other_knobs == other) {
                by_workload.entry(a.workload.as_str()).or_insert(a);
            }
            Some((clock, by_workload))
        };
        let ((f_at, at), (f_ref, at_ref)) = (first_at(knobs)?, first_at(&reference)?);
        let mut ratios: Vec<f64> = pm
            .groups
            .iter()
            .filter(|a| a.power.is_some() && a.other_knobs == at_setting)
            .filter_map(|a| {
                let w = a.workload.as_str();
                let pf = pm.predict_group(at.get(w)?, f_at).power_w?;
                let pr = pm.predict_group(at_ref.get(w)?, f_ref).power_w?;
                (pr > 0.0).then(|| pf / pr)
            })
            .collect();
        if ratios.is_empty() {
            return None;
        }
        ratios.sort_by(f64::total_cmp);
        Some(p0 * ratios[ratios.len() / 2])
    }

    /// `combine = base_cpi`'s part of [`Self::explain`].
    fn explain_base_cpi(&self) -> String {
        let mut s = format!(
            "analytic DVFS model, base CPI from counters (CPI stack: Eyerman et al. ASPLOS 2006): t(f) = t0·[(1 − φ) + φ·f0/f], φ = {}·min(1, β·N/C)\nclock knob: {}\ninstructions: {}, cycles: {}\nβ (base CPI, fitted on the training points at the non-reference clocks) = {}\n",
            match self.thread_idle {
                ThreadIdle::OffCore => "min(1, C/(f0·t0·n))",
                ThreadIdle::Waits => "min(1, C/(f0·t0)) (idle threads: waits on the busy ones, chosen by the training error over off-core time)",
            },
            self.freq_knob,
            self.instructions_counter.as_deref().unwrap_or("-"),
            self.cycles_counter.as_deref().unwrap_or("none (φ from time)"),
            self.base_cpi
                .map_or("not fitted (no training point at a second clock)".into(), |b| {
                    format!("{b:.4}")
                }),
        );
        let two = self.mem_knob.is_some();
        if let Some(k) = &self.mem_knob {
            s += &format!(
                "two clocks (bound and bottleneck over the core and memory clocks; Wang & Chu, IEEE TPDS 2020): t(f, m) = t0·[(1 − max(φ, μ)) + max(φ·f0/f, μ·m0/m)], μ = min(1, γ·D/(m0·t0))\nmemory clock knob: {k}\nDRAM transactions D: {}\nγ (memory-clock cycles per DRAM transaction, fitted with β) = {}\n",
                self.dram_counters.join(" + "),
                self.mem_cycles_per_transaction
                    .map_or("not fitted (no training point at a second memory clock): no prediction at another memory clock".into(), |c| format!("{c:.4}")),
            );
        }
        s += "workload                         other knobs            f0_mhz      t0_s       CPI      φ";
        s += if two { "  m0_mhz      μ\n" } else { "\n" };
        for g in &self.groups {
            let cpi = g.cycles.zip(g.instructions).map(|(c, n)| c / n);
            let phi = self
                .base_cpi
                .and_then(|b| base_share(g, b, self.thread_idle));
            s += &format!(
                "{:<32} {:<22} {:>7} {:>9} {:>9} {:>6}",
                g.workload,
                knob_key(&g.other_knobs),
                g.f0_mhz,
                g.t0_s.map_or("-".into(), |v| format!("{v:.4}")),
                cpi.map_or("-".into(), |v| format!("{v:.3}")),
                phi.map_or("-".into(), |v| format!("{v:.3}")),
            );
            if two {
                let mu = self
                    .mem_cycles_per_transaction
                    .and_then(|c| mem_share(g, c));
                s += &format!(
                    " {:>7} {:>6}",
                    g.mem0_mhz.map_or("-".into(), |v| format!("{v}")),
                    mu.map_or("-".into(), |v| format!("{v:.3}")),
                );
            }
            s += "\n";
        }
        s
    }

    /// What was fitted, for `fit --explain`.
    pub fn explain(&self) -> String {
        let form = match self.combine {
            Combine::Sum => "t(f) = t_mem + (t0 − t_mem)·f0/f, t_mem = α·M".to_string(),
            Combine::Max => format!(
                "bound and bottleneck (Roofline; CRISP): t(f) = t0·[(1 − a) + max(c·f0/f, m) + (a − max(c, m))·f0/f], m = α·M/t0, c = max of [{}], a = {}",
                self.compute_counters.join(", "),
                self.active_counter.as_deref().unwrap_or("1 (no active counter)")
            ),
            Combine::BaseCpi => return self.explain_base_cpi(),
        };
        let mut s = format!(
            "analytic DVFS model, memory part from counters (Moore 2012; Choi et al. 2004): {form}\nclock knob: {}\nmemory terms: {}\nα = {:.4} ({})\n",
            self.freq_knob,
            self.memory_terms
                .iter()
                .map(|t| format!("{} {:?}", t.counter, t.kind))
                .collect::<Vec<_>>()
                .join(" + "),
            self.alpha,
            self.alpha_source
        );
        for t in &self.power_transfer {
            s += &format!(
                "power of a workload with only its reference point (other knobs {}): P(f) = S(f) + v(f)·(P0 − {:.2} W)·t0/t(f), S and v fitted at {} clocks\n",
                knob_key(&t.other_knobs),
                t.static_ref_w,
                t.rows.len()
            );
        }
        let max = self.combine == Combine::Max;
        s += "workload                         other knobs            f0_mhz      t0_s    M_s  t_mem/t0";
        s += if max { "        c        a\n" } else { "\n" };
        for g in &self.groups {
            let frac = g
                .t0_s
                .zip(g.memory_s)
                .map(|(t0, m)| (self.alpha * m).clamp(0.0, t0) / t0);
            s += &format!(
                "{:<32} {:<22} {:>7} {:>9} {:>9} {:>8}\n",
                g.workload,
                knob_key(&g.other_knobs),
                g.f0_mhz,
                g.t0_s.map_or("-".into(), |v| format!("{v:.4}")),
                g.memory_s.map_or("-".into(), |v| format!("{v:.4}")),
                frac.map_or("-".into(), |v| format!("{v:.3}")),
            );
            if max {
                s.pop();
                s += &format!(
                    " {:>8} {:>8}\n",
                    g.compute_fraction.map_or("-".into(), |v| format!("{v:.3}")),
                    g.active_fraction.map_or("-".into(), |v| format!("{v:.3}")),
                );
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> SetMeta {
        let mut m = SetMeta::default();
        m.counters.insert("dram_active".into(), CounterKind::Rate);
        m.counters.insert("misses".into(), CounterKind::Count);
        m
    }

    /// A workload with t(f) = tm + tc·1000/f; its counters report the memory fraction
    /// `tm/t` (dram_active) and `tm / 100 ns` misses; P = 20 + 30·(f/1000)^3.
    fn pt(w: &str, f: f64, tm: f64, tc: f64) -> Point {
        let t = tm + tc * 1000.0 / f;
        Point {
            workload: w.into(),
            knobs: [("core_freq_mhz".to_string(), f)].into_iter().collect(),
            time_s: Some(t),
            power_w: Some(20.0 + 30.0 * (f / 1000.0f64).powi(3)),
            counters: [
                ("dram_active".to_string(), tm / t),
                ("misses".to_string(), tm / 100e-9),
            ]
            .into_iter()
            .collect(),
            ..Point::default()
        }
    }

    fn k(f: f64) -> Knobs {
        [("core_freq_mhz".to_string(), f)].into_iter().collect()
    }

    #[test]
    fn one_reference_point_and_exact_counters_give_the_curve() {
        // α = 1: only the reference point, nothing to calibrate on.
        let m = fit(
            &meta(),
            &[pt("a", 1000.0, 2.0, 3.0)],
            &AnalyticCountersParams::default(),
        )
        .unwrap();
        assert_eq!(m.alpha, 1.0);
        let t = m.predict("a", &k(500.0)).unwrap().time_s.unwrap();
        assert!((t - 8.0).abs() < 1e-12, "{t}");
    }

    #[test]
    fn known_answer_with_ns_latency_and_calibration() {
        // Counters that over-count memory time by 2× (e.g. refills of which half reach DRAM):
        // uncalibrated predictions are off, the calibrated α is 0.5 and exact.
        let mut pts = Vec::new();
        for (w, tm, tc) in [("a", 2.0, 3.0), ("b", 0.5, 4.0), ("c", 3.0, 0.5)] {
            for f in [500.0, 1000.0] {
                let mut p = pt(w, f, tm, tc);
                *p.counters.get_mut("misses").unwrap() *= 2.0;
                pts.push(p);
            }
        }
        let terms = vec![MemoryTerm {
            counter: "misses".into(),
            kind: MemoryTermKind::NsPerEvent(100.0),
        }];
        let raw = fit(
            &meta(),
            &pts,
            &AnalyticCountersParams {
                memory_terms: terms.clone(),
                calibrate: false,
                ..AnalyticCountersParams::default()
            },
        )
        .unwrap();
        let cal = fit(
            &meta(),
            &pts,
            &AnalyticCountersParams {
                memory_terms: terms,
                calibrate: true,
                ..AnalyticCountersParams::default()
            },
        )
        .unwrap();
        assert!((cal.alpha - 0.5).abs() < 1e-9, "{}", cal.alpha);
        let want = 0.5 + 4.0 * 1000.0 / 700.0;
        let t_cal = cal.predict("b", &k(700.0)).unwrap().time_s.unwrap();
        let t_raw = raw.predict("b", &k(700.0)).unwrap().time_s.unwrap();
        assert!((t_cal - want).abs() < 1e-9, "{t_cal} vs {want}");
        assert!((t_raw - want).abs() > 0.1);
        // Power comes from the analytic curve (two clocks, cube law): exact.
        let p = cal.predict("b", &k(700.0)).unwrap().power_w.unwrap();
        assert!((p - (20.0 + 30.0 * 0.7f64.powi(3))).abs() < 1e-6, "{p}");
    }

    #[test]
    fn cycles_per_event_term() {
        // 1e9 events × 2 cycles at 1000 MHz = 2 s of memory time.
        let mut p = pt("a", 1000.0, 2.0, 3.0);
        p.counters.insert("misses".into(), 1e9);
        let m = fit(
            &meta(),
            &[p],
            &AnalyticCountersParams {
                memory_terms: vec![MemoryTerm {
                    counter: "misses".into(),
                    kind: MemoryTermKind::CyclesPerEvent(2.0),
                }],
                calibrate: true,
                ..AnalyticCountersParams::default()
            },
        )
        .unwrap();
        assert!((m.groups[0].memory_s.unwrap() - 2.0).abs() < 1e-12);
    }

    #[test]
    fn no_memory_counter_names_the_fix() {
        let e = fit(
            &SetMeta::default(),
            &[pt("a", 1000.0, 1.0, 1.0)],
            &AnalyticCountersParams::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("memory_terms") && e.contains("docs/models.md"),
            "{e}"
        );
    }

    fn meta_gpu() -> SetMeta {
        let mut m = meta();
        m.counters.insert("fp64_active".into(), CounterKind::Rate);
        m.counters.insert("fp32_active".into(), CounterKind::Rate);
        m.counters
            .insert("gr_engine_active".into(), CounterKind::Rate);
        m
    }

    /// A GPU workload measured at `f`: host time `th`, compute-pipe time `tc` at 1000 MHz
    /// (∝ 1/f), DRAM time `tm` (fixed), the rest `tr` at 1000 MHz (∝ 1/f); the run lasts
    /// `th + max(tc·1000/f, tm) + tr·1000/f` and its DCGM fractions are the busy times over
    /// that. P = 20 + 30·(f/1000)^3.
    fn gpu_pt(w: &str, f: f64, th: f64, tc: f64, tm: f64, tr: f64) -> Point {
        let r = 1000.0 / f;
        let t = th + (tc * r).max(tm) + tr * r;
        Point {
            workload: w.into(),
            knobs: k(f),
            time_s: Some(t),
            power_w: Some(20.0 + 30.0 * (f / 1000.0f64).powi(3)),
            counters: [
                ("dram_active".to_string(), tm / t),
                ("fp64_active".to_string(), tc * r / t),
                ("fp32_active".to_string(), 0.1 * tc * r / t),
                ("gr_engine_active".to_string(), (t - th) / t),
            ]
            .into_iter()
            .collect(),
            ..Point::default()
        }
    }

    fn max_params() -> AnalyticCountersParams {
        AnalyticCountersParams::roofline()
    }

    /// (workload, host, compute, memory, rest) seconds at 1000 MHz: compute-bound,
    /// memory-bound at 1000 MHz that turns compute-bound below 600 MHz, host-heavy.
    const GPU_WORKLOADS: [(&str, f64, f64, f64, f64); 3] = [
        ("dgemm", 0.0, 3.0, 1.5, 0.2),
        ("stream", 0.1, 1.2, 2.0, 0.3),
        ("histo", 4.0, 0.2, 0.1, 0.5),
    ];

    #[test]
    fn bound_and_bottleneck_known_answer_from_one_point() {
        for (w, th, tc, tm, tr) in GPU_WORKLOADS {
            let m = fit(
                &meta_gpu(),
                &[gpu_pt(w, 1000.0, th, tc, tm, tr)],
                &max_params(),
            )
            .unwrap();
            assert_eq!(m.alpha, 1.0);
            assert_eq!(m.combine, Combine::Max);
            assert_eq!(m.active_counter.as_deref(), Some("gr_engine_active"));
            for f in [1000.0, 800.0, 600.0, 500.0, 300.0] {
                let want = gpu_pt(w, f, th, tc, tm, tr).time_s.unwrap();
                let got = m.predict(w, &k(f)).unwrap().time_s.unwrap();
                assert!(
                    (got - want).abs() < 1e-9 * want,
                    "{w} at {f}: {got} vs {want}"
                );
            }
        }
        // The sum form charges the overlapped memory time again: off for the compute-bound one.
        let (w, th, tc, tm, tr) = GPU_WORKLOADS[0];
        let sum = fit(
            &meta_gpu(),
            &[gpu_pt(w, 1000.0, th, tc, tm, tr)],
            &AnalyticCountersParams::default(),
        )
        .unwrap();
        let want = gpu_pt(w, 500.0, th, tc, tm, tr).time_s.unwrap();
        let got = sum.predict(w, &k(500.0)).unwrap().time_s.unwrap();
        assert!((got - want).abs() > 0.1 * want, "{got} vs {want}");
    }

    #[test]
    fn bound_and_bottleneck_in_workload_holdout_is_exact_and_fits_nothing() {
        use crate::models::{eval, FitParams, ModelKind};
        let mut pts = Vec::new();
        for (w, th, tc, tm, tr) in GPU_WORKLOADS {
            for f in [400.0, 700.0, 1000.0] {
                pts.push(gpu_pt(w, f, th, tc, tm, tr));
            }
        }
        let params = FitParams {
            analytic_counters: max_params(),
            ..FitParams::default()
        };
        let e = eval::workload_holdout(
            ModelKind::AnalyticCounters,
            &meta_gpu(),
            &pts,
            &k(1000.0),
            &params,
        );
        assert_eq!(e.results.len(), 6);
        assert_results_exact(&e.results, &pts, &["time_s"], 1e-9);
    }

    #[test]
    fn bound_and_bottleneck_degenerate_input_gives_no_panic() {
        let mut p = gpu_pt("a", 1000.0, 0.5, 1.0, 2.0, 0.1);
        // Out-of-range and non-finite fractions are clamped or dropped.
        p.counters.insert("fp64_active".into(), f64::NAN);
        p.counters.insert("fp32_active".into(), 7.0);
        p.counters.insert("gr_engine_active".into(), -3.0);
        let m = fit(&meta_gpu(), std::slice::from_ref(&p), &max_params()).unwrap();
        assert_eq!(m.groups[0].compute_fraction, Some(1.0));
        assert_eq!(m.groups[0].active_fraction, Some(0.0));
        // a = 0: all host time, the same at every clock.
        let t = m.predict("a", &k(500.0)).unwrap().time_s.unwrap();
        assert!((t - p.time_s.unwrap()).abs() < 1e-12, "{t}");
        // A zero, negative or NaN clock is an error, not a panic or an infinity.
        for f in [0.0, -100.0, f64::NAN] {
            assert!(m.predict("a", &k(f)).is_err(), "{f}");
        }
        // No compute counter in the set: c = 0, the sum form with α = 1 and the host part.
        let mut meta = meta();
        meta.counters
            .insert("gr_engine_active".into(), CounterKind::Rate);
        assert!(!roofline_applicable(&meta));
        assert!(roofline_applicable(&meta_gpu()));
        let q = gpu_pt("b", 1000.0, 0.0, 1.0, 2.0, 1.0);
        let m = fit(&meta, std::slice::from_ref(&q), &max_params()).unwrap();
        assert_eq!(m.groups[0].compute_fraction, None);
        let t0 = q.time_s.unwrap();
        let t = m.predict("b", &k(500.0)).unwrap().time_s.unwrap();
        let md = q.counters["dram_active"];
        assert!((t - t0 * (md + (1.0 - md) * 2.0)).abs() < 1e-12, "{t}");
        // Zero reference time: t stays 0, no NaN.
        let mut z = gpu_pt("c", 1000.0, 0.0, 1.0, 1.0, 0.0);
        z.time_s = Some(0.0);
        let m = fit(&meta_gpu(), &[z], &max_params()).unwrap();
        assert_eq!(m.predict("c", &k(500.0)).unwrap().time_s, None);
        // An unknown compute or active counter names the set's counters.
        for params in [
            AnalyticCountersParams {
                compute_counters: vec!["nope".into()],
                ..max_params()
            },
            AnalyticCountersParams {
                active_counter: Some("nope".into()),
                ..max_params()
            },
        ] {
            let e = fit(&meta_gpu(), std::slice::from_ref(&p), &params)
                .unwrap_err()
                .to_string();
            assert!(e.contains("nope") && e.contains("dram_active"), "{e}");
        }
    }

    /// P_i(f) = S(f) + v(f)·D_i·t_i(f0)/t_i(f), S(f0) = 0 and v(f0) = 1 (so P_i0 = D_i and
    /// the static grid's first value is exact), times from the bound-and-bottleneck form:
    /// a held-out workload's time and power follow from its baseline point alone.
    fn roofline_world() -> Vec<Point> {
        let sf = |f: f64| 15.0 * (1.0 - f / 1000.0);
        let vf = |f: f64| (0.6 + 0.4 * f / 1000.0).powi(2);
        let mut pts = Vec::new();
        let mut work = GPU_WORKLOADS.to_vec();
        work.push(("lbm", 0.3, 0.4, 1.8, 0.6));
        for (i, &(w, th, tc, tm, tr)) in work.iter().enumerate() {
            let d = 100.0 + 40.0 * i as f64;
            let t0 = gpu_pt(w, 1000.0, th, tc, tm, tr).time_s.unwrap();
            for f in [400.0, 550.0, 700.0, 850.0, 1000.0] {
                let mut p = gpu_pt(w, f, th, tc, tm, tr);
                p.power_w = Some(sf(f) + vf(f) * d * t0 / p.time_s.unwrap());
                pts.push(p);
            }
        }
        pts
    }

    /// `e` is `auto`'s stack with no failure, `n` results, `choice` on its protocol line, and
    /// exact (within 10⁻⁶) on `targets` against `pts`.
    fn assert_stack_exact(
        e: &crate::models::eval::Evaluation,
        pts: &[Point],
        n: usize,
        choice: &str,
        targets: &[&str],
    ) {
        assert_eq!(e.kind, crate::models::ModelKind::Stack);
        assert!(e.failures.is_empty(), "{:?}", e.failures);
        assert_eq!(e.results.len(), n);
        assert!(
            e.summary.protocol.contains(choice),
            "{}",
            e.summary.protocol
        );
        assert_results_exact(&e.results, pts, targets, 1e-6);
    }

    /// Every result's `targets` equal the measured value of the same point of `pts` within
    /// the relative tolerance `tol`.
    fn assert_results_exact(
        results: &[crate::models::eval::PointResult],
        pts: &[Point],
        targets: &[&str],
        tol: f64,
    ) {
        for r in results {
            let p = pts
                .iter()
                .find(|p| p.workload == r.workload && p.knobs == r.knobs)
                .unwrap();
            for t in targets {
                let got = r.predicted.target(t).unwrap();
                let want = crate::models::eval::measured(p).target(t).unwrap();
                assert!(
                    (got - want).abs() < tol * want,
                    "{} {t}: {got} vs {want}",
                    r.workload
                );
            }
        }
    }

    #[test]
    fn auto_stack_keeps_an_exact_physical_form_and_never_sees_the_held_out_points() {
        // `auto` on a set with DCGM fractions stacks the physical form with the neighbours
        // per target (models::stack). On data the physical form describes exactly, its inner
        // score is 0 for time and power, so it is chosen and the predictions are exact; and
        // poisoning a held-out workload's other points changes neither the choice nor them.
        use crate::models::{eval, FitParams, ModelKind};
        let pts = roofline_world();
        let run = |pts: &[Point]| {
            eval::workload_holdout(
                ModelKind::Auto,
                &meta_gpu(),
                pts,
                &k(1000.0),
                &FitParams::default(),
            )
        };
        let e = run(&pts);
        assert_stack_exact(
            &e,
            &pts,
            16,
            "time_s: analytic_counters ×4; power_w: analytic_counters ×4",
            &["time_s", "power_w"],
        );
        let mut poisoned = pts.clone();
        for p in poisoned
            .iter_mut()
            .filter(|p| p.workload == "stream" && p.knobs["core_freq_mhz"] != 1000.0)
        {
            p.time_s = Some(1e9);
            p.power_w = Some(1e-3);
            p.counters.insert("dram_active".into(), 0.01);
        }
        let b = run(&poisoned);
        let pick = |e: &crate::models::eval::Evaluation| e.predictions_of("stream");
        assert_eq!(pick(&e).len(), 4);
        assert_eq!(pick(&e), pick(&b));
    }

    #[test]
    fn stack_model_file_predicts_a_workload_known_at_its_baseline_point() {
        // `--model stack` on a set where `stream` has only its 1000 MHz point: the choice by
        // the other workloads, `stream` exact from that point; the model file round-trips.
        use crate::models::{fit_kind, FitParams, Fitted, ModelKind};
        let all = roofline_world();
        let pts: Vec<Point> = all
            .iter()
            .filter(|p| p.workload != "stream" || p.knobs["core_freq_mhz"] == 1000.0)
            .cloned()
            .collect();
        let m = fit_kind(ModelKind::Stack, &meta_gpu(), &pts, &FitParams::default()).unwrap();
        let Fitted::Stack(s) = &m else {
            panic!("{m:?}")
        };
        assert_eq!(s.choice["time_s"], "analytic_counters");
        assert_eq!(s.choice["power_w"], "analytic_counters");
        assert!(s.physical.is_some() && s.neighbors.is_some() && s.notes.is_empty());
        assert!(
            m.explain().contains("time_s: analytic_counters 0.00 %")
                && m.explain().contains("energy_j: not scored -> scaling"),
            "{}",
            m.explain()
        );
        let back: Fitted = serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
        assert_eq!(back, m);
        // The common response (the null model) is scored beside the others and, where chosen,
        // predicts as the `scaling` fit without features; a file without the member (before
        // stop 32) reads and falls back to the physical form.
        let common = s.common.as_ref().expect("common-response member");
        assert!(common.targets.iter().all(|t| t.features.is_empty()));
        // Issue 41's candidates: `scaling` (the reference) and its mean with the neighbours.
        assert!(
            ["scaling", "blend"]
                .iter()
                .all(|c| s.inner_mape_pct["time_s"].contains_key(*c)),
            "{:?}",
            s.inner_mape_pct
        );
        assert!(
            s.inner_mape_pct["time_s"].contains_key("common_response"),
            "{:?}",
            s.inner_mape_pct
        );
        let mut forced = s.clone();
        forced
            .choice
            .insert("time_s".into(), "common_response".into());
        let q = &all.iter().find(|p| p.workload == "stream").unwrap().knobs;
        assert_eq!(
            forced.predict("stream", q).unwrap().time_s,
            common.predict("stream", q).unwrap().time_s
        );
        // A file written before stop 32 has neither the common response nor (issue 41) the
        // `scaling` member.
        forced.common = None;
        forced.scaling = None;
        let mut v = serde_json::to_value(&forced).unwrap();
        assert!(v.get("common").is_none() && v.get("scaling").is_none());
        v.as_object_mut().unwrap().remove("common");
        let old: crate::models::stack::StackModel = serde_json::from_value(v).unwrap();
        assert_eq!(
            old.predict("stream", q).unwrap().time_s,
            s.physical
                .as_ref()
                .unwrap()
                .predict("stream", q)
                .unwrap()
                .time_s
        );
        for p in all.iter().filter(|p| p.workload == "stream") {
            let got = back.predict("stream", &p.knobs).unwrap();
            for (g, w) in [(got.time_s, p.time_s), (got.power_w, p.power_w)] {
                let (g, w) = (g.unwrap(), w.unwrap());
                assert!((g - w).abs() < 1e-6 * w, "{:?}: {g} vs {w}", p.knobs);
            }
        }
        // One point: the neighbours cannot be fitted, the stack keeps the physical member
        // and says why; no point at all: the physical member's error, no panic.
        let one = fit_kind(
            ModelKind::Stack,
            &meta_gpu(),
            &pts[..1],
            &FitParams::default(),
        );
        let Ok(Fitted::Stack(s1)) = &one else {
            panic!("{one:?}")
        };
        assert!(
            s1.neighbors.is_none() && s1.notes[0].starts_with("neighbors:"),
            "{s1:?}"
        );
        let w = &pts[0].workload;
        assert!(one.unwrap().predict(w, &k(700.0)).unwrap().time_s.is_some());
        let e = fit_kind(ModelKind::Stack, &meta_gpu(), &[], &FitParams::default());
        assert!(e.is_err(), "{e:?}");
    }

    fn meta_cpu() -> SetMeta {
        let mut m = SetMeta::default();
        m.knobs = vec!["core_freq_mhz".into(), "threads".into()];
        m.counters.insert("cpu_cycles".into(), CounterKind::Count);
        m.counters.insert("inst_retired".into(), CounterKind::Count);
        m
    }

    /// A CPU workload with `n` instructions at base CPI 1.2, `ts` s of stall (cycles counted,
    /// clock-independent) and `ti` s off the core (not counted) on `threads` threads:
    /// t(f) = ti + n·1.2/(f·threads) + ts, C = n·1.2 + ts·f·threads; P = 0.2 + (f/1000)^2.
    fn cpu_pt(w: &str, f: f64, threads: f64, n: f64, ts: f64, ti: f64) -> Point {
        let hz = f * 1e6;
        let t = ti + n * 1.2 / (hz * threads) + ts;
        Point {
            workload: w.into(),
            knobs: [
                ("core_freq_mhz".to_string(), f),
                ("threads".to_string(), threads),
            ]
            .into_iter()
            .collect(),
            time_s: Some(t),
            power_w: Some(0.2 + (f / 1000.0f64).powi(2)),
            counters: [
                ("inst_retired".to_string(), n),
                ("cpu_cycles".to_string(), n * 1.2 + ts * hz * threads),
            ]
            .into_iter()
            .collect(),
            ..Point::default()
        }
    }

    const CPU_WORKLOADS: [(&str, f64, f64, f64); 5] = [
        ("bitcount", 3e10, 0.5, 0.0),
        ("crc32", 2e10, 20.0, 0.5),
        ("rijndael", 4e10, 5.0, 15.0),
        ("qsort", 1e10, 2.0, 1.0),
        ("dijkstra", 5e9, 3.0, 0.2),
    ];

    fn cpu_world(threads: &[f64]) -> Vec<Point> {
        let mut pts = Vec::new();
        for &(w, n, ts, ti) in &CPU_WORKLOADS {
            for &th in threads {
                for f in [1000.0, 1500.0, 2000.0] {
                    pts.push(cpu_pt(w, f, th, n, ts, ti));
                }
            }
        }
        pts
    }

    #[test]
    fn base_cpi_known_answer_from_one_point() {
        // β is recovered from the other workloads' clocks, and a workload known at 2000 MHz
        // alone gets its exact curve from its own cycles and instructions, on 1 and 2 threads.
        let all = cpu_world(&[1.0, 2.0]);
        let pts: Vec<Point> = all
            .iter()
            .filter(|p| p.workload != "crc32" || p.knobs["core_freq_mhz"] == 2000.0)
            .cloned()
            .collect();
        let m = fit(&meta_cpu(), &pts, &AnalyticCountersParams::base_cpi()).unwrap();
        assert!((m.base_cpi.unwrap() - 1.2).abs() < 1e-6, "{:?}", m.base_cpi);
        assert_eq!(m.instructions_counter.as_deref(), Some("inst_retired"));
        assert_eq!(m.cycles_counter.as_deref(), Some("cpu_cycles"));
        // Off-core time on every thread at once (`ti`): the per-thread reading is exact.
        assert_eq!(m.thread_idle, ThreadIdle::OffCore);
        for p in all.iter().filter(|p| p.workload == "crc32") {
            let got = m.predict("crc32", &p.knobs).unwrap().time_s.unwrap();
            let want = p.time_s.unwrap();
            assert!(
                (got - want).abs() < 1e-6 * want,
                "{:?}: {got} vs {want}",
                p.knobs
            );
        }
        assert!(m.explain().contains("β (base CPI"), "{}", m.explain());
        // The model file round-trips; older files (no base-CPI fields) still read.
        let back: AnalyticCountersModel =
            serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
        assert_eq!(back, m);
    }

    /// The workloads of [`CPU_WORKLOADS`] as pipelines whose threads take turns (one stage
    /// hands each buffer to the next): on any thread count one thread runs at a time, so the
    /// time is the one-thread time, `t(f) = ti + n·1.2/f + ts`, and the cycles are
    /// `C = n·1.2 + ts·f`; the idle thread waits for the busy one.
    fn turn_world() -> Vec<Point> {
        let mut pts = Vec::new();
        for &(w, n, ts, ti) in &CPU_WORKLOADS {
            for th in [1.0, 2.0] {
                for f in [1000.0, 1500.0, 2000.0] {
                    let mut p = cpu_pt(w, f, 1.0, n, ts, ti);
                    p.knobs.insert("threads".into(), th);
                    pts.push(p);
                }
            }
        }
        pts
    }

    #[test]
    fn base_cpi_reads_idle_threads_as_waiting_where_that_fits_the_training_points() {
        // Per thread, a 2-thread run is half idle; read as off-core time (not scaling) that
        // would halve the clock-scaled share. The training points choose the other reading:
        // β, and a held-out workload's curve from its one point, exact on 1 and 2 threads.
        let all = turn_world();
        let pts: Vec<Point> = all
            .iter()
            .filter(|p| p.workload != "rijndael" || p.knobs["core_freq_mhz"] == 2000.0)
            .cloned()
            .collect();
        let m = fit(&meta_cpu(), &pts, &AnalyticCountersParams::base_cpi()).unwrap();
        assert_eq!(m.thread_idle, ThreadIdle::Waits);
        assert!((m.base_cpi.unwrap() - 1.2).abs() < 1e-6, "{:?}", m.base_cpi);
        for p in all.iter().filter(|p| p.workload == "rijndael") {
            let got = m.predict("rijndael", &p.knobs).unwrap().time_s.unwrap();
            let want = p.time_s.unwrap();
            assert!(
                (got - want).abs() < 1e-6 * want,
                "{:?}: {got} vs {want}",
                p.knobs
            );
        }
        assert!(m.explain().contains("waits"), "{}", m.explain());
        let text = serde_json::to_string(&m).unwrap();
        assert!(text.contains("\"thread_idle\":\"waits\""), "{text}");
        let back: AnalyticCountersModel = serde_json::from_str(&text).unwrap();
        assert_eq!(back, m);
        // One thread only: the two readings are the same, and the field stays out of the file.
        let one: Vec<Point> = pts
            .iter()
            .filter(|p| p.knobs["threads"] == 1.0)
            .cloned()
            .collect();
        let m1 = fit(&meta_cpu(), &one, &AnalyticCountersParams::base_cpi()).unwrap();
        assert_eq!(m1.thread_idle, ThreadIdle::OffCore);
        assert!(!serde_json::to_string(&m1).unwrap().contains("thread_idle"));
    }

    #[test]
    fn base_cpi_without_instructions_names_the_fix_and_bad_counts_do_not_panic() {
        let mut meta = meta_cpu();
        meta.counters.remove("inst_retired");
        let e = fit(
            &meta,
            &cpu_world(&[1.0]),
            &AnalyticCountersParams::base_cpi(),
        )
        .unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("retired-instructions") && msg.contains("instructions_counter"),
            "{msg}"
        );
        // Zero, negative and NaN counts and times: no prediction or a finite one, no panic.
        let mut pts = cpu_world(&[1.0]);
        for (i, p) in pts.iter_mut().enumerate() {
            match i % 4 {
                0 => {
                    p.counters.insert("inst_retired".into(), 0.0);
                }
                1 => {
                    p.counters.insert("cpu_cycles".into(), f64::NAN);
                }
                2 => p.time_s = Some(-1.0),
                _ => {}
            }
        }
        let m = fit(&meta_cpu(), &pts, &AnalyticCountersParams::base_cpi()).unwrap();
        for p in &pts {
            if let Ok(pr) = m.predict(&p.workload, &p.knobs) {
                if let Some(t) = pr.time_s {
                    assert!(t.is_finite() && t > 0.0, "{t}");
                }
            }
        }
    }

    #[test]
    fn auto_stack_takes_base_cpi_on_a_cpu_clock_sweep_and_scores_its_fallback() {
        // A clock sweep with cycles and instructions: `auto` in workload holdout is the stack
        // with the base-CPI form, chosen and exact on data it describes exactly. With two
        // thread counts the stack scores what it takes where the form has no prediction.
        use crate::models::{eval, FitParams, ModelKind};
        let base: Knobs = [
            ("core_freq_mhz".to_string(), 2000.0),
            ("threads".to_string(), 1.0),
        ]
        .into_iter()
        .collect();
        let pts = cpu_world(&[1.0]);
        let e = eval::workload_holdout(
            ModelKind::Auto,
            &meta_cpu(),
            &pts,
            &base,
            &FitParams::default(),
        );
        assert_stack_exact(&e, &pts, 10, "time_s: analytic_counters ×5", &["time_s"]);
        assert!(crate::models::stack::auto_applies(&meta_cpu(), &pts));
        // Two thread counts: the form predicts along the clock at the baseline's thread count
        // (exact there); at the other thread count the stack takes the neighbours or the
        // common response, chosen on the training workloads' points there (every workload's
        // time halves from 1 to 2 threads but for its stall and off-core time, so neither is
        // exact), and every point is predicted.
        let two = cpu_world(&[1.0, 2.0]);
        assert!(crate::models::stack::auto_applies(&meta_cpu(), &two));
        let e = eval::workload_holdout(
            ModelKind::Auto,
            &meta_cpu(),
            &two,
            &base,
            &FitParams::default(),
        );
        assert_eq!(e.kind, ModelKind::Stack);
        assert!(e.failures.is_empty(), "{:?}", e.failures);
        assert_eq!(e.results.len(), 25);
        assert!(
            e.summary
                .protocol
                .contains("(where the physical form has no prediction:"),
            "{}",
            e.summary.protocol
        );
        let same_threads: Vec<_> = e
            .results
            .iter()
            .filter(|r| r.knobs["threads"] == 1.0)
            .cloned()
            .collect();
        assert_eq!(same_threads.len(), 10);
        assert_results_exact(&same_threads, &two, &["time_s"], 1e-6);
        let m = crate::models::stack::fit(&meta_cpu(), &two, &FitParams::default()).unwrap();
        assert!(
            ["neighbors", "common_response"].contains(&m.fallback["time_s"].as_str()),
            "{m:?}"
        );
        assert!(m
            .explain()
            .contains("time_s where the physical form has no prediction"));
        // Issue 41's rule: at a thread count the form does not model, the fallback's member
        // predicts, whatever the choice where the form predicts (even `scaling`, the
        // reference, or the blend): a workload known at its baseline point alone, predicted
        // at 2 threads.
        let q = two.iter().find(|p| p.knobs["threads"] == 2.0).unwrap();
        let known: Vec<Point> = two
            .iter()
            .filter(|p| {
                p.workload != q.workload || crate::models::features::same_knobs(&p.knobs, &base)
            })
            .cloned()
            .collect();
        let mut at_base = FitParams::default();
        at_base.scaling.baseline = Some(base.clone());
        let m = crate::models::stack::fit(&meta_cpu(), &known, &at_base).unwrap();
        let phys = m.physical.as_ref().unwrap().predict(&q.workload, &q.knobs);
        assert!(
            phys.map_or(true, |p| p.time_s.is_none()),
            "the form models it"
        );
        let member = match m.fallback["time_s"].as_str() {
            "neighbors" => m.neighbors.as_ref(),
            _ => m.common.as_ref(),
        }
        .unwrap();
        let want = member.predict(&q.workload, &q.knobs).unwrap().time_s;
        assert!(want.is_some());
        for c in ["scaling", "blend", "analytic_counters", "neighbors"] {
            let mut forced = m.clone();
            forced.choice.insert("time_s".into(), c.into());
            let got = forced.predict(&q.workload, &q.knobs).unwrap().time_s;
            assert_eq!(got, want, "{c}");
        }
        let back: crate::models::stack::StackModel =
            serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
        assert_eq!(back, m);
    }

    /// A GPU sweep with warp instructions executed (`inst_executed`) and no cycles counter:
    /// a kernel issues `n` warp instructions at 0.02 cycles each chip-wide (peak 50 per
    /// cycle) and waits `tm` s on memory: t(f) = tm + 0.02·n/f.
    fn gpu_inst_world() -> (SetMeta, Vec<Point>) {
        let mut meta = SetMeta::default();
        meta.knobs = vec!["core_freq_mhz".into(), "mem_freq_mhz".into()];
        meta.counters
            .insert("inst_executed".into(), CounterKind::Count);
        meta.counters
            .insert("achieved_occupancy".into(), CounterKind::Rate);
        let kernels = [
            ("sgemm", 6e8, 0.002),
            ("stream", 1e8, 0.05),
            ("spmv", 3e8, 0.01),
            ("stencil", 4e8, 0.004),
            ("nbody", 8e8, 0.0),
            ("bfs", 2e8, 0.02),
        ];
        let mut pts = Vec::new();
        for (i, &(w, n, tm)) in kernels.iter().enumerate() {
            for f in [600.0, 800.0, 1000.0, 1200.0] {
                pts.push(Point {
                    workload: w.into(),
                    knobs: [
                        ("core_freq_mhz".to_string(), f),
                        ("mem_freq_mhz".to_string(), 715.0),
                    ]
                    .into_iter()
                    .collect(),
                    time_s: Some(tm + 0.02 * n / (f * 1e6)),
                    power_w: Some(40.0 + 60.0 * (f / 1200.0)),
                    counters: [
                        ("inst_executed".to_string(), n),
                        ("achieved_occupancy".to_string(), 0.3 + 0.1 * i as f64),
                    ]
                    .into_iter()
                    .collect(),
                    ..Point::default()
                });
            }
        }
        (meta, pts)
    }

    #[test]
    fn gpu_warp_instructions_without_cycles_take_the_base_cpi_stack() {
        // `inst_executed` alone (nvprof's warp instructions, no cycles counter): the base-CPI
        // form applies with φ = β·N/(f0·t0), β = 0.02 is recovered from the other kernels,
        // and `auto` in workload holdout is the stack, exact on every held-out point.
        use crate::models::{eval, FitParams, ModelKind};
        let (meta, pts) = gpu_inst_world();
        assert_eq!(
            instructions_counter(&meta).as_deref(),
            Some("inst_executed")
        );
        assert!(crate::models::stack::auto_applies(&meta, &pts));
        let train: Vec<Point> = pts
            .iter()
            .filter(|p| p.workload != "spmv" || p.knobs["core_freq_mhz"] == 1200.0)
            .cloned()
            .collect();
        let m = fit(&meta, &train, &AnalyticCountersParams::base_cpi()).unwrap();
        assert!(
            (m.base_cpi.unwrap() - 0.02).abs() < 1e-8,
            "{:?}",
            m.base_cpi
        );
        assert_eq!(m.cycles_counter, None);
        let base: Knobs = [
            ("core_freq_mhz".to_string(), 1200.0),
            ("mem_freq_mhz".to_string(), 715.0),
        ]
        .into_iter()
        .collect();
        let e = eval::workload_holdout(ModelKind::Auto, &meta, &pts, &base, &FitParams::default());
        assert_stack_exact(&e, &pts, 18, "time_s: analytic_counters ×6", &["time_s"]);
    }

    /// A core × memory clock grid with nvprof's counts: the six kernels of
    /// [`crate::models::synthetic`] (t = max(0.02·n/f, 0.125·d/m) + lat).
    fn gpu_two_clock_world() -> (SetMeta, Vec<Point>) {
        use crate::models::synthetic::{gpu_kernel_point, nvprof_meta, KERNELS};
        let mut pts = Vec::new();
        for (w, n, d, lat) in KERNELS {
            for m in [500.0, 700.0, 900.0] {
                for f in [600.0, 800.0, 1000.0, 1200.0] {
                    let p = 40.0 + 60.0 * (f / 1200.0) + 20.0 * (m / 900.0);
                    pts.push(gpu_kernel_point(w, (n, d, lat), f, m, p));
                }
            }
        }
        (nvprof_meta(), pts)
    }

    #[test]
    fn two_clock_known_answer_recovers_beta_and_gamma_and_predicts_every_memory_clock() {
        // β = 0.02 and γ = 0.125 come back from the other kernels' grids, and a kernel known
        // at its baseline point alone is predicted exactly over the whole core × memory grid:
        // `auto` in workload holdout is the stack with the two-clock form on every point.
        use crate::models::{eval, FitParams, ModelKind};
        let (meta, pts) = gpu_two_clock_world();
        assert_eq!(
            dram_counters(&meta),
            vec!["dram_read_transactions", "dram_write_transactions"]
        );
        let base: Knobs = [
            ("core_freq_mhz".to_string(), 1200.0),
            ("mem_freq_mhz".to_string(), 900.0),
        ]
        .into_iter()
        .collect();
        let train: Vec<Point> = pts
            .iter()
            .filter(|p| p.workload != "spmv" || p.knobs == base)
            .cloned()
            .collect();
        let m = fit(&meta, &train, &AnalyticCountersParams::base_cpi()).unwrap();
        assert_eq!(m.mem_knob.as_deref(), Some("mem_freq_mhz"));
        assert!(
            (m.base_cpi.unwrap() - 0.02).abs() < 1e-6,
            "{:?}",
            m.base_cpi
        );
        let gamma = m.mem_cycles_per_transaction.unwrap();
        assert!((gamma - 0.125).abs() < 1e-5, "{gamma}");
        for p in pts.iter().filter(|p| p.workload == "spmv") {
            let t = m.predict("spmv", &p.knobs).unwrap().time_s.unwrap();
            let want = p.time_s.unwrap();
            assert!(
                ((t - want) / want).abs() < 1e-5,
                "{:?}: {t} vs {want}",
                p.knobs
            );
        }
        assert!(
            m.explain().contains("γ (memory-clock cycles"),
            "{}",
            m.explain()
        );
        let back: AnalyticCountersModel =
            serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
        assert_eq!(back, m);
        let e = eval::workload_holdout(ModelKind::Auto, &meta, &pts, &base, &FitParams::default());
        assert_stack_exact(&e, &pts, 66, "time_s: analytic_counters ×6", &["time_s"]);
    }

    #[test]
    fn two_clock_form_without_a_second_memory_clock_refuses_other_memory_clocks() {
        // Trained at one memory clock, γ cannot be fitted: the model says so and gives no
        // time at another memory clock (never a silent μ = 0), while the trained clock keeps
        // its predictions. A setting without the memory knob names it.
        let (meta, pts) = gpu_two_clock_world();
        let train: Vec<Point> = pts
            .iter()
            .filter(|p| p.knobs["mem_freq_mhz"] == 900.0)
            .cloned()
            .collect();
        let m = fit(&meta, &train, &AnalyticCountersParams::base_cpi()).unwrap();
        assert_eq!(m.mem_cycles_per_transaction, None);
        assert!(m.explain().contains("not fitted"), "{}", m.explain());
        let at = |f: f64, mem: f64| {
            let k: Knobs = [
                ("core_freq_mhz".to_string(), f),
                ("mem_freq_mhz".to_string(), mem),
            ]
            .into_iter()
            .collect();
            m.predict("bfs", &k).unwrap().time_s
        };
        assert_eq!(at(800.0, 500.0), None);
        assert!(at(800.0, 900.0).is_some());
        // A DRAM counter named in the params must be a count of the set.
        let named = AnalyticCountersParams {
            dram_counters: vec!["dram_bytes".into()],
            ..AnalyticCountersParams::base_cpi()
        };
        let e = fit(&meta, &train, &named).unwrap_err().to_string();
        assert!(e.contains("DRAM counter `dram_bytes`"), "{e}");
        let only_core: Knobs = [("core_freq_mhz".to_string(), 800.0)].into_iter().collect();
        assert!(matches!(
            m.predict("bfs", &only_core),
            Err(ModelError::MissingKnob { .. })
        ));
    }

    #[test]
    fn roofline_power_transfer_known_answer_in_workload_holdout() {
        // roofline_world(): the median ratio misses the power the roofline transfer gets.
        use crate::models::{eval, FitParams, ModelKind};
        let pts = roofline_world();
        let run = |pt: PowerTransfer| {
            let params = FitParams {
                analytic_counters: AnalyticCountersParams {
                    power_transfer: pt,
                    ..AnalyticCountersParams::roofline()
                },
                ..FitParams::default()
            };
            eval::workload_holdout(
                ModelKind::AnalyticCounters,
                &meta_gpu(),
                &pts,
                &k(1000.0),
                &params,
            )
        };
        let (roof, median) = (
            run(PowerTransfer::Roofline),
            run(PowerTransfer::MedianRatio),
        );
        assert_eq!(roof.results.len(), 16);
        assert_results_exact(&roof.results, &pts, &["power_w"], 1e-6);
        let mut worst_median = 0.0f64;
        for m in &median.results {
            let want = m.measured.power_w.unwrap();
            worst_median = worst_median.max((m.predicted.power_w.unwrap() / want - 1.0).abs());
        }
        assert!(worst_median > 0.01, "{worst_median}");
        // dgemm with only its reference point: exact between the fitted clocks, no power
        // beyond them rather than an extrapolation, none without the memory fraction.
        let part: Vec<Point> = pts
            .iter()
            .filter(|p| p.workload != "dgemm" || p.knobs["core_freq_mhz"] == 1000.0)
            .cloned()
            .collect();
        let m = fit(
            &meta_gpu(),
            &part,
            &AnalyticCountersParams {
                power_transfer: PowerTransfer::Roofline,
                ..AnalyticCountersParams::roofline()
            },
        )
        .unwrap();
        assert_eq!(m.power_transfer.len(), 1);
        let want = pts
            .iter()
            .find(|p| p.workload == "dgemm" && p.knobs["core_freq_mhz"] == 700.0)
            .unwrap()
            .power_w
            .unwrap();
        let got = m.predict("dgemm", &k(700.0)).unwrap().power_w.unwrap();
        assert!((got - want).abs() < 1e-6 * want, "{got} vs {want}");
        assert!(m.predict("dgemm", &k(625.0)).unwrap().power_w.is_some());
        assert_eq!(m.predict("dgemm", &k(300.0)).unwrap().power_w, None);
        let mut broken = m.clone();
        for g in broken.groups.iter_mut() {
            g.memory_fraction = None;
        }
        assert_eq!(broken.predict("dgemm", &k(700.0)).unwrap().power_w, None);
    }

    #[test]
    fn model_files_without_the_new_fields_read_as_the_sum_form() {
        let (w, th, tc, tm, tr) = GPU_WORKLOADS[1];
        let m = fit(
            &meta_gpu(),
            &[gpu_pt(w, 1000.0, th, tc, tm, tr)],
            &AnalyticCountersParams::default(),
        )
        .unwrap();
        let mut v = serde_json::to_value(&m).unwrap();
        let o = v.as_object_mut().unwrap();
        assert!(o.remove("combine").is_some());
        assert!(!o.contains_key("compute_counters") && !o.contains_key("active_counter"));
        let back: AnalyticCountersModel = serde_json::from_value(v).unwrap();
        assert_eq!(back, m);
        assert_eq!(back.combine, Combine::Sum);
        let p: AnalyticCountersParams =
            serde_json::from_str(r#"{"combine":"max","compute_counters":["fp64_active"]}"#)
                .unwrap();
        assert_eq!(p.combine, Combine::Max);
        assert!(p.calibrate);
    }

    #[test]
    fn held_out_counters_never_reach_the_prediction() {
        // Workload holdout from 1000 MHz: poisoning b's other points (targets and counters)
        // changes nothing.
        use crate::models::{eval, FitParams, ModelKind};
        let mut clean = Vec::new();
        for (w, tm, tc) in [("a", 2.0, 3.0), ("b", 0.5, 4.0), ("c", 3.0, 0.5)] {
            for f in [500.0, 700.0, 1000.0] {
                clean.push(pt(w, f, tm, tc));
            }
        }
        let mut poisoned = clean.clone();
        for p in poisoned
            .iter_mut()
            .filter(|p| p.workload == "b" && p.knobs["core_freq_mhz"] != 1000.0)
        {
            p.time_s = Some(1e9);
            p.power_w = Some(1e9);
            p.counters.insert("dram_active".into(), 0.99);
        }
        let base = k(1000.0);
        let run = |pts: &[Point]| {
            eval::workload_holdout(
                ModelKind::AnalyticCounters,
                &meta(),
                pts,
                &base,
                &FitParams::default(),
            )
        };
        let (a, b) = (run(&clean), run(&poisoned));
        let pick = |e: &crate::models::eval::Evaluation| e.predictions_of("b");
        assert_eq!(pick(&a).len(), 2);
        assert_eq!(pick(&a), pick(&b));
        // Exact counters: b's time is right from its baseline point alone.
        for r in a.results.iter().filter(|r| r.workload == "b") {
            let f = r.knobs["core_freq_mhz"];
            let want = 0.5 + 4.0 * 1000.0 / f;
            assert!((r.predicted.time_s.unwrap() - want).abs() < 1e-9);
        }
    }
}
