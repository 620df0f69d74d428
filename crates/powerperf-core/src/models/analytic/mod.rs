//! The analytical DVFS model: time, power and energy against the core clock, per workload
//! and per setting of every other knob (e.g. the memory clock).
//!
//! # Time (Moore 2012, extended with an overlap exponent)
//!
//! Moore (2012) splits run time into a part that does not scale with the core clock and a part
//! that does: `t(f) = t_mem + t_comp · f0/f`. Real kernels overlap memory and compute time to a
//! varying degree, so powerperf fits the family
//!
//! `t(f) = ((t_comp · f_ref/f)^p + t_mem^p)^(1/p)`
//!
//! per (workload, other knobs). `p = 1` is Moore's additive model (no overlap); `p → ∞` is
//! the roofline bound `max(t_comp·f_ref/f, t_mem)` (Williams, Waterman, Patterson, CACM 2009:
//! a kernel runs at the slower of its compute and memory limits, full overlap). For each `p` on
//! a grid (`overlap_grid`) `t^p` is linear in `(f_ref/f)^p`, so `(t_comp^p, t_mem^p)` is a weighted
//! least-squares fit (weights `1/t^(2p)`: relative error); the `p` with the smallest relative
//! squared error on the training clocks wins, ties going to the smaller `p` (with two clocks every
//! `p` fits exactly and Moore's `p = 1` is kept).
//!
//! **Effective clock.** A GPU may not reach a requested clock (the Titan X at 1164 MHz runs
//! ≈ 2.3 % slower than its 1126 MHz trend in compute-bound kernels). With three or more
//! training clocks, the compute-bound groups (those whose `t·f` agrees within
//! `calibration_tolerance` at the two lowest training clocks) give the effective clock of every
//! higher training clock. [`Calibration::Ratio`] takes `f / median(t(f)·f / (t(f2)·f2))`; but a
//! part of the time that does not scale with the clock (launch overheads, a small `t_mem`)
//! makes `t·f` grow with `f` as well, and the ratio reads that growth as a clock deficit (on the
//! Titan X, `t·f` of the compute-bound kernels grows 0.35 % from 595 to 861 MHz). The default,
//! [`Calibration::Joint`], fits the effective clocks jointly with Moore's curve
//! `t = t_mem + t_comp·f_ref/f_eff` of every compute-bound group (least relative squared error),
//! so that part stays in `t_mem` (`joint_calibration`). Only the training clocks are
//! corrected, only in the time model, and only from training points; other clocks are taken
//! as requested (their deficits are irregular: fitted on all 16 Titan X clocks, the clocks
//! from 671 to 1126 MHz run 0.6–4.3 MHz below nominal in no monotone pattern, and 1164 MHz
//! 26 MHz below, so the three training clocks do not determine them).
//!
//! # Power (Moore 2012: P ≈ P_static + c·V²·f)
//!
//! With the supply voltage following the clock as a power law, `V(f) ∝ f^γ`, the dynamic term
//! becomes `c·V²·f ∝ f^(1+2γ)`, so per group `P(f) = P_static + c·(f/f_ref)^k` with `k = 1+2γ`.
//! The voltage–frequency curve belongs to the chip, not the workload, so `k` is one parameter
//! shared by all groups, fitted (golden-section search on `power_exponent_range`) to the
//! relative squared error of all groups at the training clocks; `P_static` and `c` are per-group
//! weighted least squares. With two clocks per group there is no residual degree of freedom
//! and `k` falls back to `default_power_exponent` (3: `V ∝ f`, the textbook cube law), unless
//! `shared_static_power` asks for one `P_static` shared by all groups (then `k` is fitted).
//!
//! **Per-group exponent** ([`PowerShape::PowerLawPerGroup`], the default since stop 29):
//! where the shared `k` would be fitted, each group with three or more training clocks fits
//! its own `k` in `power_exponent_range` instead (three parameters per group, as a quadratic
//! through the same clocks); groups with two clocks keep the shared `k`. The chip's
//! voltage curve is shared, but a workload's power is not all dynamic `c·V²·f`: leakage
//! grows with voltage and with the temperature the workload's own power sets (Hong & Kim,
//! ISCA 2010), and power in parts the core clock does not drive flattens the curve, so the
//! effective exponent differs between workloads. Held out (docs/models.md): Titan X power
//! 1.44 → 1.20 %, V100 3.85 → 3.38 %, against the per-workload quadratic's 1.46 and 3.60 %.
//!
//! With a voltage table (`voltage_table`, the chip's operating points `[[MHz, V], …]`), the
//! dynamic term is Moore's `c·V(f)²·f` directly, with `V` interpolated from the table.
//!
//! **Voltage floor** ([`PowerShape::VoltageFloor`], `"power_shape": "voltage_floor"`, opt-in
//! since issue 21). A GPU or CPU
//! runs its low clocks at its minimum supply voltage and raises the voltage only above a knee
//! clock (Mei, Wang, Chu, "A survey and measurement study of GPU DVFS on energy conservation",
//! Digital Communications and Networks 3(2), 2017: measured core voltage flat at the low core
//! clocks of NVIDIA Fermi and Maxwell GPUs; Guerreiro, Ilic, Roma, Tomás, "Modeling and
//! decoupling the GPU power consumption for cross-domain DVFS", IEEE TPDS 30(11), 2019). With
//! `V(f) = V_0·max(1, f/f_knee)` the dynamic term is `c·f·max(1, f/f_knee)²`: linear in `f`
//! below the knee, cubic above. `f_knee` belongs to the chip, like `k`, and takes `k`'s place
//! as the one shared shape parameter, fitted the same way (three or more training clocks);
//! with two clocks per group, a fixed `power_exponent` or a voltage table, the power law
//! above applies. It is not the default: with three training clocks both shapes fit the
//! training points equally (each has one shared parameter for the one shape number three
//! clocks determine), and measured on held-out clocks it wins on the V100 and loses on the
//! Titan X, whose power rises faster than the cube (fitted k ≈ 3.9) over its whole range.
//!
//! # Energy
//!
//! `E(f) = P(f) · t(f)` (Moore 2012: energy is power integrated over time).

use super::features::{find_group, knob_key};
use super::{Knobs, ModelError, Prediction};
use powerperf_format::set::{Point, SetMeta};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

mod power;
mod predict;
use power::{fit_power_model, PowerFit};

/// Knob names recognised as the core clock, in order of preference.
pub const FREQ_KNOBS: [&str; 2] = ["core_freq_mhz", "gpu_sm_clock_mhz"];

/// Parameters of the analytical model, with their defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AnalyticParams {
    /// The clock knob (MHz); `None`: the first of [`FREQ_KNOBS`] the set has.
    pub freq_knob: Option<String>,
    /// Candidate overlap exponents `p` of the time model (default 1 … 32).
    pub overlap_grid: Vec<f64>,
    /// Estimate effective clocks of the training settings (see the module docs).
    pub calibrate_clock: bool,
    /// How the effective clocks are estimated (see [`Calibration`]).
    pub calibration: Calibration,
    /// Relative agreement of `t·f` at the two lowest clocks that marks a group compute-bound.
    pub calibration_tolerance: f64,
    /// Fewest compute-bound groups needed to estimate an effective clock.
    pub calibration_min_groups: usize,
    /// A fixed power exponent `k`; `None`: fitted.
    pub power_exponent: Option<f64>,
    /// `k` when it cannot be fitted (no residual degrees of freedom).
    pub default_power_exponent: f64,
    /// Search range of `k`.
    pub power_exponent_range: (f64, f64),
    /// Supply voltage against clock, `[[MHz, V], …]` (e.g. the chip's operating-point table);
    /// when given, the dynamic power term is `V(f)²·f` (linear interpolation, linear
    /// extrapolation from the end segments) instead of `(f/f_ref)^k`.
    pub voltage_table: Option<Vec<(f64, f64)>>,
    /// With two clocks per group, share one `P_static` over all groups so that `k` can be
    /// fitted (off by default: on the XU3 set it measured worse than the default `k`).
    pub shared_static_power: bool,
    /// The voltage curve behind the dynamic term when no voltage table is given and the
    /// shape can be fitted (three or more training clocks): see [`PowerShape`].
    pub power_shape: PowerShape,
}

/// The voltage curve `V(f)` of the dynamic power term `c·V(f)²·f` when the chip's table is
/// not given (see the module's **Power**).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum PowerShape {
    /// `V ∝ f^γ`: dynamic power `∝ f^k`, `k = 1 + 2γ` fitted, one `k` shared by all groups
    /// (the default before stop 29; `"power_shape":"power_law"`).
    PowerLaw,
    /// The power law with its own `k` per group (the default): where a group has three or
    /// more training clocks, `P = P_static + c·(f/f_ref)^k` with `k` fitted on that group's
    /// points within `power_exponent_range` (three parameters per group, as the naive
    /// quadratic through the same clocks has); groups with two clocks keep the shared `k`.
    /// Measured on held-out clocks it beats both the shared `k` and the quadratic on the
    /// Titan X and the V100 (docs/models.md).
    #[default]
    PowerLawPerGroup,
    /// A voltage floor: `V(f) = V_0·max(1, f/f_knee)`, the supply voltage at its minimum up to
    /// a knee clock and proportional to the clock above it; dynamic power `∝ f` below the knee
    /// and `∝ f³` above. `f_knee` (one per chip) is fitted between the lowest and highest
    /// training clocks. Opt-in (issue 21): on the V100 knob holdout it beats the power law,
    /// on the Titan X it loses to it (docs/models.md), and with three training clocks the
    /// training points cannot tell the two apart.
    VoltageFloor,
}

impl Default for AnalyticParams {
    fn default() -> Self {
        Self {
            freq_knob: None,
            overlap_grid: vec![1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0, 32.0],
            calibrate_clock: true,
            calibration: Calibration::Joint,
            calibration_tolerance: 0.01,
            calibration_min_groups: 5,
            power_exponent: None,
            default_power_exponent: 3.0,
            power_exponent_range: (1.0, 6.0),
            voltage_table: None,
            shared_static_power: false,
            power_shape: PowerShape::PowerLawPerGroup,
        }
    }
}

/// How the effective clock of each higher training clock is estimated from the compute-bound
/// groups (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Calibration {
    /// `f / median(t(f)·f / (t(f2)·f2))`: the ratio of `t·f` against the second-lowest clock.
    /// A part of the time that does not scale with the clock (`t_mem`, launch overheads) makes
    /// `t·f` grow with `f` too, and is read as a clock deficit.
    Ratio,
    /// Jointly with Moore's curve of every compute-bound group: the effective clocks of the
    /// higher training clocks minimise the relative squared error of `t = t_mem + t_comp·f_ref/f_eff`
    /// (per-group `t_comp`, `t_mem ≥ 0`), so the non-scaling part is not mistaken for a deficit.
    #[default]
    Joint,
}

/// `t(f) = ((t_comp·f_ref/f)^p + t_mem^p)^(1/p)`, seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimeCurve {
    /// Clock-scaled time at `f_ref`, seconds.
    pub t_comp_s: f64,
    /// Time that does not scale with the core clock, seconds.
    pub t_mem_s: f64,
    /// Overlap exponent `p` (1: Moore's additive model).
    pub overlap_p: f64,
    /// Relative root-mean-square residual at the training clocks.
    pub train_rel_rms: f64,
}

impl TimeCurve {
    /// Time at clock `f_mhz` (already mapped to its effective clock), seconds.
    pub fn at(&self, f_ref_mhz: f64, f_mhz: f64) -> f64 {
        let tc = self.t_comp_s * f_ref_mhz / f_mhz;
        let tm = self.t_mem_s;
        let m = tc.max(tm);
        if m <= 0.0 {
            return 0.0;
        }
        let p = self.overlap_p;
        m * pow_p(pow_p(tc / m, p) + pow_p(tm / m, p), 1.0 / p)
    }
}

/// `x^p`, with `x` itself at `p = 1` (IEEE 754 `pow(x, 1)` is `x` exactly, so the values are
/// those of `powf`; the sum form `p = 1` is the hot path of the clock calibration).
fn pow_p(x: f64, p: f64) -> f64 {
    if p == 1.0 {
        x
    } else {
        x.powf(p)
    }
}

/// `P(f) = P_static + c·D(f)`, watts, with `D` the model's dynamic term relative to `f_ref`:
/// `(f/f_ref)^k` (`k` the model's `power_exponent`), the voltage table's `V²f`, or the
/// voltage floor's `f·max(1, f/f_knee)²` (the model's `voltage_knee_mhz`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PowerCurve {
    pub p_static_w: f64,
    pub c_w: f64,
    /// This group's own exponent `k` ([`PowerShape::PowerLawPerGroup`]); absent: the
    /// model's shared dynamic term (and in files written before stop 29).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exponent: Option<f64>,
    /// Relative root-mean-square residual at the training clocks.
    pub train_rel_rms: f64,
}

/// One (workload, other knob values) curve.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AnalyticGroup {
    pub workload: String,
    /// Knob values other than the clock knob (e.g. `mem_freq_mhz`).
    pub other_knobs: Knobs,
    /// Training clocks of this group, MHz.
    pub train_freqs_mhz: Vec<f64>,
    pub time: Option<TimeCurve>,
    pub power: Option<PowerCurve>,
    /// Why a target has no curve (unreliable, too few clocks), if so.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// A training clock and the clock the time model uses for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EffectiveClock {
    pub nominal_mhz: f64,
    pub effective_mhz: f64,
    /// Compute-bound groups the estimate is the median of.
    pub groups: usize,
}

/// The fitted analytical model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AnalyticModel {
    pub params: AnalyticParams,
    /// The clock knob, MHz.
    pub freq_knob: String,
    /// Reference clock of the curves (highest training clock), MHz.
    pub f_ref_mhz: f64,
    /// Power exponent `k` shared by all groups.
    pub power_exponent: f64,
    /// How `k` was chosen.
    pub power_exponent_source: String,
    /// Whether `P_static` is per group or one value shared by all groups.
    #[serde(default)]
    pub static_power: String,
    /// The knee of the voltage floor, MHz, when the dynamic term is
    /// `f·max(1, f/f_knee)²` ([`PowerShape::VoltageFloor`]); absent: `(f/f_ref)^k` or the
    /// voltage table (model files written before issue 21 have none and keep their `k`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub voltage_knee_mhz: Option<f64>,
    /// Effective clocks of training settings (empty when not calibrated).
    pub effective_clocks: Vec<EffectiveClock>,
    /// Why calibration was or was not applied.
    pub calibration_note: String,
    pub groups: Vec<AnalyticGroup>,
}

/// The clock knob of a set: `params.freq_knob`, else the first of [`FREQ_KNOBS`] present.
pub fn freq_knob_of(meta: &SetMeta, points: &[Point], wanted: Option<&str>) -> Option<String> {
    if let Some(w) = wanted {
        return Some(w.to_string());
    }
    FREQ_KNOBS
        .iter()
        .find(|k| {
            meta.knobs.iter().any(|m| m == *k) || points.iter().any(|p| p.knobs.contains_key(**k))
        })
        .map(|k| k.to_string())
}

pub(crate) fn other_knobs(knobs: &Knobs, freq: &str) -> Knobs {
    knobs
        .iter()
        .filter(|(k, _)| *k != freq)
        .map(|(k, v)| (k.clone(), *v))
        .collect()
}

/// Weighted least squares `y ≈ a·x + b`; `None` when singular.
fn wls2(x: &[f64], y: &[f64], w: &[f64]) -> Option<(f64, f64)> {
    let (mut sw, mut sx, mut sy, mut sxx, mut sxy) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for i in 0..x.len() {
        sw += w[i];
        sx += w[i] * x[i];
        sy += w[i] * y[i];
        sxx += w[i] * x[i] * x[i];
        sxy += w[i] * x[i] * y[i];
    }
    let det = sw * sxx - sx * sx;
    if det.abs() <= 1e-300 * (sw * sxx).abs().max(1e-300) || det == 0.0 {
        return None;
    }
    let a = (sw * sxy - sx * sy) / det;
    let b = (sxx * sy - sx * sxy) / det;
    Some((a, b))
}

/// Fit the time curve of one group; `pts` are (clock used by the model, time).
fn fit_time(pts: &[(f64, f64)], f_ref: f64, grid: &[f64]) -> Option<TimeCurve> {
    if pts.len() < 2 {
        return None;
    }
    let tr = pts.iter().map(|p| p.1).fold(0.0, f64::max);
    if tr <= 0.0 {
        return None;
    }
    let mut best: Option<(f64, TimeCurve)> = None;
    for &p in grid {
        let x: Vec<f64> = pts.iter().map(|(f, _)| pow_p(f_ref / f, p)).collect();
        let y: Vec<f64> = pts.iter().map(|(_, t)| pow_p(t / tr, p)).collect();
        let w: Vec<f64> = y.iter().map(|v| 1.0 / (v * v)).collect();
        let (mut a, mut b) = match wls2(&x, &y, &w) {
            Some(ab) => ab,
            None => continue,
        };
        if a < 0.0 {
            a = 0.0;
            b = w.iter().zip(&y).map(|(w, y)| w * y).sum::<f64>() / w.iter().sum::<f64>();
        } else if b < 0.0 {
            b = 0.0;
            let num: f64 = (0..x.len()).map(|i| w[i] * x[i] * y[i]).sum();
            let den: f64 = (0..x.len()).map(|i| w[i] * x[i] * x[i]).sum();
            a = num / den;
        }
        let curve = TimeCurve {
            t_comp_s: tr * pow_p(a.max(0.0), 1.0 / p),
            t_mem_s: tr * pow_p(b.max(0.0), 1.0 / p),
            overlap_p: p,
            train_rel_rms: 0.0,
        };
        let sse: f64 = pts
            .iter()
            .map(|(f, t)| ((curve.at(f_ref, *f) - t) / t).powi(2))
            .sum();
        if !sse.is_finite() {
            continue;
        }
        let better = match &best {
            None => true,
            Some((bs, _)) => sse < bs * (1.0 - 1e-6) - 1e-14,
        };
        if better {
            best = Some((sse, curve));
        }
    }
    best.map(|(sse, mut c)| {
        c.train_rel_rms = (sse / pts.len() as f64).sqrt();
        c
    })
}

/// Fit `P = P_s + c·(f/f_ref)^k` for one group; returns the curve and its weighted SSE.
fn fit_power(pts: &[(f64, f64)], dynx: &dyn Fn(f64) -> f64) -> Option<(PowerCurve, f64)> {
    if pts.len() < 2 {
        return None;
    }
    let x: Vec<f64> = pts.iter().map(|(f, _)| dynx(*f)).collect();
    let y: Vec<f64> = pts.iter().map(|p| p.1).collect();
    let w: Vec<f64> = y.iter().map(|v| 1.0 / (v * v)).collect();
    let (c, ps) = wls2(&x, &y, &w)?;
    let sse: f64 = (0..x.len())
        .map(|i| w[i] * (ps + c * x[i] - y[i]).powi(2))
        .sum();
    let curve = PowerCurve {
        p_static_w: ps,
        c_w: c,
        exponent: None,
        train_rel_rms: (sse / pts.len() as f64).sqrt(),
    };
    Some((curve, sse))
}

/// Fit `P = P_0 + c_g·(f/f_ref)^k` with one `P_0` shared by all groups and `c_g` per group
/// (weighted least squares, weights `1/P²`). For a fixed `P_0` each `c_g` is closed-form, and the
/// residual is linear in `P_0`, so `P_0` is closed-form too. Returns `P_0`, the `c_g` (None for
/// groups without points) and the weighted SSE.
fn fit_power_shared(
    groups: &[Vec<(f64, f64)>],
    dynx: &dyn Fn(f64) -> f64,
) -> Option<(f64, Vec<Option<f64>>, f64)> {
    let mut ab: Vec<(f64, f64, f64)> = Vec::new(); // (w, A, B)
    let mut coefs: Vec<Option<(f64, f64, f64)>> = Vec::new(); // (Sxy, Sx, Sxx)
    for g in groups {
        if g.is_empty() {
            coefs.push(None);
            continue;
        }
        let (mut sxx, mut sxy, mut sx) = (0.0, 0.0, 0.0);
        for &(f, y) in g {
            let x = dynx(f);
            let w = 1.0 / (y * y);
            sxx += w * x * x;
            sxy += w * x * y;
            sx += w * x;
        }
        if sxx <= 0.0 {
            coefs.push(None);
            continue;
        }
        for &(f, y) in g {
            let x = dynx(f);
            ab.push((1.0 / (y * y), y - sxy / sxx * x, 1.0 - sx / sxx * x));
        }
        coefs.push(Some((sxy, sx, sxx)));
    }
    let den: f64 = ab.iter().map(|(w, _, b)| w * b * b).sum();
    if den <= 0.0 {
        return None;
    }
    let p0 = ab.iter().map(|(w, a, b)| w * a * b).sum::<f64>() / den;
    let sse = ab.iter().map(|(w, a, b)| w * (a - p0 * b).powi(2)).sum();
    let cs = coefs
        .iter()
        .map(|c| c.map(|(sxy, sx, sxx)| (sxy - p0 * sx) / sxx))
        .collect();
    Some((p0, cs, sse))
}

/// Supply voltage at `f_mhz` from a `[[MHz, V], …]` table: linear interpolation, linear
/// extrapolation from the end segments (a one-row table is constant).
pub fn voltage_at(table: &[(f64, f64)], f_mhz: f64) -> f64 {
    let mut t: Vec<(f64, f64)> = table.to_vec();
    t.sort_by(|a, b| a.0.total_cmp(&b.0));
    if t.len() == 1 {
        return t[0].1;
    }
    let i = t
        .windows(2)
        .position(|w| f_mhz <= w[1].0)
        .unwrap_or(t.len() - 2);
    let (a, b) = (t[i], t[i + 1]);
    a.1 + (b.1 - a.1) * (f_mhz - a.0) / (b.0 - a.0)
}

/// The dynamic-power term relative to `f_ref`: `V(f)²·f / (V(f_ref)²·f_ref)` with a voltage
/// table, else `(f/f_ref)^k` (`V ∝ f^γ`, `k = 1 + 2γ`).
pub fn dynamic_term(f: f64, f_ref: f64, k: f64, table: Option<&[(f64, f64)]>) -> f64 {
    match table {
        Some(t) => {
            let (v, vr) = (voltage_at(t, f), voltage_at(t, f_ref));
            (v * v * f) / (vr * vr * f_ref)
        }
        None => (f / f_ref).powf(k),
    }
}

/// The dynamic-power term of a voltage floor relative to `f_ref`: `g(f)/g(f_ref)` with
/// `g(f) = f·max(1, f/f_knee)²`, i.e. `V(f)²·f` for `V(f) = V_0·max(1, f/f_knee)`.
pub fn knee_term(f: f64, f_ref: f64, knee: f64) -> f64 {
    let g = |x: f64| x * (x / knee).max(1.0).powi(2);
    g(f) / g(f_ref)
}

/// The dynamic term a fitted model uses: the voltage table, else the voltage floor's knee,
/// else `(f/f_ref)^k`.
fn model_term(f: f64, f_ref: f64, k: f64, knee: Option<f64>, table: Option<&[(f64, f64)]>) -> f64 {
    match (table, knee) {
        (None, Some(kn)) => knee_term(f, f_ref, kn),
        _ => dynamic_term(f, f_ref, k, table),
    }
}

/// Golden-section search for the minimum of a unimodal `f` on `[lo, hi]`: the bracket
/// shrinks by the golden ratio each step until it is at most `tol` wide (or after
/// `max_iter` steps); returns its midpoint. Kiefer (1953), "Sequential minimax search for
/// a maximum".
pub(crate) fn golden_section_min(
    mut lo: f64,
    mut hi: f64,
    tol: f64,
    max_iter: usize,
    mut f: impl FnMut(f64) -> f64,
) -> f64 {
    let g = (5f64.sqrt() - 1.0) / 2.0;
    let mut c = hi - g * (hi - lo);
    let mut d = lo + g * (hi - lo);
    let (mut fc, mut fd) = (f(c), f(d));
    let mut iter = 0;
    while hi - lo > tol && iter < max_iter {
        if fc < fd {
            hi = d;
            d = c;
            fd = fc;
            c = hi - g * (hi - lo);
            fc = f(c);
        } else {
            lo = c;
            c = d;
            fc = fd;
            d = lo + g * (hi - lo);
            fd = f(d);
        }
        iter += 1;
    }
    0.5 * (lo + hi)
}

/// [`Calibration::Joint`]: refine `clocks` (initialised by the ratio estimate) so that Moore's
/// curve `t = t_mem + t_comp·f_ref/f_eff` (per group, `t_comp, t_mem ≥ 0`, weights `1/t²`) fits
/// the compute-bound groups' points `(nominal MHz, s)` with the least total relative squared
/// error. The two lowest clocks of each group stay nominal: a deficit growing linearly with the
/// clock there is indistinguishable from `t_mem` (`t_comp·f_ref/(f·(1−a·f)) ≈ t_comp·f_ref/f +
/// a·t_comp·f_ref`), so fixing them is a normalisation. Coordinate descent, a golden-section
/// search per clock on `f/f_eff ∈ [0.8, 1.25]`.
fn joint_calibration(clocks: &mut [EffectiveClock], groups: &[Vec<(f64, f64)>], f_ref: f64) {
    let total = |clocks: &[EffectiveClock]| -> f64 {
        groups
            .iter()
            .map(|tp| {
                let pts: Vec<(f64, f64)> = tp
                    .iter()
                    .map(|&(f, t)| {
                        let fe = clocks
                            .iter()
                            .find(|e| e.nominal_mhz == f)
                            .map_or(f, |e| e.effective_mhz);
                        (fe, t)
                    })
                    .collect();
                fit_time(&pts, f_ref, &[1.0])
                    .map_or(0.0, |c| c.train_rel_rms.powi(2) * pts.len() as f64)
            })
            .sum()
    };
    let sweeps = if clocks.len() > 1 { 4 } else { 1 };
    for _sweep in 0..sweeps {
        for i in 0..clocks.len() {
            let f = clocks[i].nominal_mhz;
            let m = golden_section_min(0.8, 1.25, 1e-12, usize::MAX, |m| {
                clocks[i].effective_mhz = f / m;
                total(clocks)
            });
            clocks[i].effective_mhz = f / m;
        }
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    }
}

/// One group of points: a workload at one setting of the other knobs, its points sorted by
/// clock (MHz).
struct Group<'a> {
    workload: String,
    other: Knobs,
    pts: Vec<(f64, &'a Point)>,
}

/// Group the points with a positive clock `freq` by workload and the other knobs, in
/// first-seen order; each group's points sorted by clock.
fn group_by_clock<'a>(points: &'a [Point], freq: &str) -> Vec<Group<'a>> {
    // Group by workload and the other knobs, in first-seen order.
    let mut groups: Vec<Group> = Vec::new();
    let mut index: BTreeMap<String, usize> = BTreeMap::new();
    for p in points {
        let Some(f) = p.knobs.get(freq).copied().filter(|f| *f > 0.0) else {
            continue;
        };
        let other = other_knobs(&p.knobs, freq);
        let key = format!("{}\u{1f}{}", p.workload, knob_key(&other));
        let i = *index.entry(key).or_insert_with(|| {
            groups.push(Group {
                workload: p.workload.clone(),
                other: other.clone(),
                pts: Vec::new(),
            });
            groups.len() - 1
        });
        groups[i].pts.push((f, p));
    }
    for g in &mut groups {
        g.pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    groups
}

/// The effective clocks of the higher training clocks from the compute-bound groups (see the
/// module's **Effective clock**), and the note that says how they were found.
fn calibrate_clocks(
    meta: &SetMeta,
    groups: &[Group],
    params: &AnalyticParams,
    f_ref: f64,
) -> (Vec<EffectiveClock>, String) {
    let time_ok = |g: &Group| meta.is_reliable("time_s", &g.workload);
    let mut ratios: BTreeMap<u64, (f64, Vec<f64>)> = BTreeMap::new();
    let mut effective_clocks = Vec::new();
    let mut compute_bound: Vec<Vec<(f64, f64)>> = Vec::new();
    let calibration_note = if !params.calibrate_clock {
        "off (calibrate_clock = false)".to_string()
    } else {
        for g in groups.iter().filter(|g| time_ok(g)) {
            let tp: Vec<(f64, f64)> = g
                .pts
                .iter()
                .filter_map(|(f, p)| p.time_s.filter(|t| *t > 0.0).map(|t| (*f, t)))
                .collect();
            if tp.len() < 3 {
                continue;
            }
            let (f1, t1) = tp[0];
            let (f2, t2) = tp[1];
            if ((t1 * f1) / (t2 * f2) - 1.0).abs() > params.calibration_tolerance {
                continue;
            }
            for &(fi, ti) in &tp[2..] {
                ratios
                    .entry(fi.to_bits())
                    .or_insert_with(|| (fi, Vec::new()))
                    .1
                    .push(ti * fi / (t2 * f2));
            }
            compute_bound.push(tp);
        }
        for (_, (fi, mut r)) in ratios {
            if r.len() >= params.calibration_min_groups {
                let n = r.len();
                let m = median(&mut r);
                effective_clocks.push(EffectiveClock {
                    nominal_mhz: fi,
                    effective_mhz: fi / m,
                    groups: n,
                });
            }
        }
        if params.calibration == Calibration::Joint && !effective_clocks.is_empty() {
            joint_calibration(&mut effective_clocks, &compute_bound, f_ref);
        }
        if effective_clocks.is_empty() {
            format!(
                "none: needs 3+ training clocks with {}+ compute-bound groups (t·f within {} at the two lowest clocks)",
                params.calibration_min_groups, params.calibration_tolerance
            )
        } else if params.calibration == Calibration::Joint {
            "effective clocks of the higher training clocks fitted jointly with Moore's curve t = t_mem + t_comp·f_ref/f_eff of every compute-bound group (least relative squared error)".to_string()
        } else {
            "effective clock of each higher training clock = f / median(t(f)·f / (t(f2)·f2)) over compute-bound groups".to_string()
        }
    };
    (effective_clocks, calibration_note)
}

/// Fit one group's time curve (on effective clocks, `eff`) and power curve (with the shared
/// power model `pf`; `gi` is the group's index in it).
#[allow(
    clippy::too_many_arguments,
    reason = "one call site (`fit`), which passes its own locals; a struct would only rename them"
)]
fn fit_group(
    meta: &SetMeta,
    params: &AnalyticParams,
    g: &Group,
    gi: usize,
    pf: &PowerFit,
    f_ref: f64,
    eff: &dyn Fn(f64) -> f64,
    with_time: bool,
) -> AnalyticGroup {
    let (ppts, power_exponent, table, knee) = (
        &pf.power_pts[gi],
        pf.power_exponent,
        params.voltage_table.as_deref().filter(|t| !t.is_empty()),
        pf.knee,
    );
    let time_ok = |g: &Group| meta.is_reliable("time_s", &g.workload);
    let mut notes = Vec::new();
    let time = if !with_time {
        None
    } else if !time_ok(g) {
        notes.push("time_s unreliable for this workload (set.toml)".to_string());
        None
    } else {
        let tp: Vec<(f64, f64)> = g
            .pts
            .iter()
            .filter_map(|(f, p)| p.time_s.filter(|t| *t > 0.0).map(|t| (eff(*f), t)))
            .collect();
        let c = fit_time(&tp, f_ref, &params.overlap_grid);
        if c.is_none() {
            notes.push(format!(
                "time_s: {} clock(s) with a time, needs 2",
                tp.len()
            ));
        }
        c
    };
    let power = if !meta.is_reliable("power_w", &g.workload) {
        notes.push("power_w unreliable for this workload (set.toml)".to_string());
        None
    } else {
        let c = match &pf.shared {
            Some((p0, cs, _)) => cs[gi].map(|c| {
                let sse: f64 = ppts
                    .iter()
                    .map(|(f, y)| {
                        ((p0 + c * model_term(*f, f_ref, power_exponent, knee, table) - y) / y)
                            .powi(2)
                    })
                    .sum();
                PowerCurve {
                    p_static_w: *p0,
                    c_w: c,
                    exponent: None,
                    train_rel_rms: (sse / ppts.len() as f64).sqrt(),
                }
            }),
            None if pf.per_group && ppts.len() >= 3 => {
                // The group's own k: golden-section search on its relative squared error
                // (each k a weighted least-squares fit of P_static and c).
                let (lo, hi) = params.power_exponent_range;
                let sse = |k: f64| {
                    fit_power(ppts, &|f| dynamic_term(f, f_ref, k, None))
                        .map_or(f64::INFINITY, |c| c.1)
                };
                let k = golden_section_min(lo, hi, 1e-9, 100, sse);
                fit_power(ppts, &|f| dynamic_term(f, f_ref, k, None)).map(|(mut c, _)| {
                    c.exponent = Some(k);
                    c
                })
            }
            None => {
                fit_power(ppts, &|f| model_term(f, f_ref, power_exponent, knee, table)).map(|c| c.0)
            }
        };
        if c.is_none() {
            notes.push(format!(
                "power_w: {} clock(s) with a power, needs 2",
                ppts.len()
            ));
        }
        c
    };
    AnalyticGroup {
        workload: g.workload.clone(),
        other_knobs: g.other.clone(),
        train_freqs_mhz: g.pts.iter().map(|p| p.0).collect(),
        time,
        power,
        notes,
    }
}

/// Fit the analytical model on mean points (one per workload and knob values).
///
/// # Errors
/// [`ModelError::MissingKnob`] when the set has no clock knob; [`ModelError::NotEnoughData`]
/// when no group has two clocks.
pub fn fit(
    meta: &SetMeta,
    points: &[Point],
    params: &AnalyticParams,
) -> Result<AnalyticModel, ModelError> {
    fit_with(meta, points, params, true)
}

/// [`fit`] for power predictions alone: the same power curves, exponent and static power,
/// without the time curves and the effective clocks (which only time uses). For a model
/// that is predicted from and dropped, never written (`analytic_counters`' power inside
/// `auto`'s inner cross-validation).
///
/// Where no group has a power curve it is [`fit`] itself (whose success turns on the time
/// curves then).
///
/// # Errors
/// As [`fit`].
pub(crate) fn fit_power_only(
    meta: &SetMeta,
    points: &[Point],
    params: &AnalyticParams,
) -> Result<AnalyticModel, ModelError> {
    fit_with(meta, points, params, false)
}

fn fit_with(
    meta: &SetMeta,
    points: &[Point],
    params: &AnalyticParams,
    with_time: bool,
) -> Result<AnalyticModel, ModelError> {
    let freq = freq_knob_of(meta, points, params.freq_knob.as_deref()).ok_or_else(|| {
        ModelError::MissingKnob {
            knob: FREQ_KNOBS.join(" or "),
            model: "analytic".into(),
            fix: "import the set with a clock knob column, use --model threads for thread counts, or --model scaling (or linear) for a GPU power-limit sweep (power_limit_w, which has no analytic form)"
                .into(),
        }
    })?;
    let groups = group_by_clock(points, &freq);
    let f_ref = groups
        .iter()
        .flat_map(|g| g.pts.iter().map(|p| p.0))
        .fold(0.0, f64::max);
    if f_ref <= 0.0 {
        return Err(ModelError::NotEnoughData {
            model: "analytic".into(),
            what: format!("no point has a positive `{freq}`"),
        });
    }

    // Effective clocks from compute-bound groups.
    let (effective_clocks, calibration_note) = if with_time {
        calibrate_clocks(meta, &groups, params, f_ref)
    } else {
        (Vec::new(), "not fitted (power only)".to_string())
    };
    let eff = |f: f64| -> f64 {
        effective_clocks
            .iter()
            .find(|e| e.nominal_mhz == f)
            .map_or(f, |e| e.effective_mhz)
    };

    // Power exponent.
    let pf = fit_power_model(meta, &groups, params, f_ref);

    let out: Vec<AnalyticGroup> = groups
        .iter()
        .enumerate()
        .map(|(gi, g)| fit_group(meta, params, g, gi, &pf, f_ref, &eff, with_time))
        .collect();
    if !with_time && out.iter().all(|g| g.power.is_none()) {
        // Whether the whole fit fails turns on the time curves too: fit them.
        return fit_with(meta, points, params, true);
    }
    if out.iter().all(|g| g.time.is_none() && g.power.is_none()) {
        return Err(ModelError::NotEnoughData {
            model: "analytic".into(),
            what: format!("no workload has two `{freq}` values with a time or power"),
        });
    }
    let PowerFit {
        power_exponent,
        power_exponent_source,
        static_power,
        knee,
        ..
    } = pf;
    Ok(AnalyticModel {
        params: params.clone(),
        freq_knob: freq,
        f_ref_mhz: f_ref,
        power_exponent,
        power_exponent_source,
        static_power,
        voltage_knee_mhz: knee,
        effective_clocks,
        calibration_note,
        groups: out,
    })
}

#[cfg(test)]
mod tests;
