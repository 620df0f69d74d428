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
use powerperf_format::set::{CounterKind, Point, SetMeta};
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
    fitting::fit_with(meta, points, params, true)
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
    fitting::fit_with(meta, points, params, false)
}

mod fitting;
mod predict;

#[cfg(test)]
mod tests;
