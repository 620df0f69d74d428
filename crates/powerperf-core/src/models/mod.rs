//! Models: features, Spearman, supervised PCA, regressions, analytical DVFS and power
//! models, thread-count models, cross-validation.
//!
//! The API other parts use (the planner, `predict`, `quickstart`) is [`Predictor`] and
//! [`load_model`]; keep these signatures stable.
//!
//! - [`features`]: means over repeats, counter rates (per cycle / per second), Spearman ρ.
//! - [`analytic`]: `t(f) = t_mem + t_comp·f0/f` family and `P = P_static + c·V²·f` (Moore 2012).
//! - [`analytic_counters`]: the same time model with `t_mem` from memory counters.
//! - [`memclock`]: the same with an explicit memory-clock term in time and power.
//! - [`regression`]: multivariate linear regression and supervised PCA on counter rates
//!   (Lively et al. 2011).
//! - [`scaling`]: a workload's curve from its baseline point, shaped by its baseline counters.
//! - [`threads`]: Amdahl time and linear-in-cores power.
//! - [`threads_bw`]: Amdahl with a memory-bandwidth floor from traffic counters.
//! - [`joint`]: several knobs at once (core clock × memory clock × threads) from any covering
//!   training subgrid: separable main effects plus a counter-informed interaction.
//! - [`eval`]: leave-one-out, knob holdout and workload holdout with MAPE.
//!
//! A fitted model of any kind is a [`Fitted`]; `MODEL.json` is a [`ModelFile`].

pub mod analytic;
pub mod analytic_counters;
pub mod baseline;
mod error;
pub mod eval;
pub mod features;
pub mod from_counters;
pub mod joint;
pub mod memclock;
pub mod noise;
pub mod regression;
pub mod scaling;
pub mod scoring;
pub mod select;
pub mod slowdown_errors;
pub mod split;
pub mod stack;
pub mod synthetic;
pub mod threads;
pub mod threads_bw;

pub use error::ModelError;

use anyhow::{Context, Result};
use powerperf_format::set::{Point, SetMeta, Unreliable};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

// Knob values by knob name (`core_freq_mhz`, `mem_freq_mhz`, `threads`): the plan file's
// type, imported once for the models' many users (`super::Knobs`); outside this crate its
// one path is `powerperf_node::plan_file::Knobs`.
pub(crate) use powerperf_node::plan_file::Knobs;

/// A predicted point. Units: seconds, watts, joules. `None` where the model has no
/// prediction for that target (e.g. the spec marks it unreliable).
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct Prediction {
    pub time_s: Option<f64>,
    pub power_w: Option<f64>,
    pub energy_j: Option<f64>,
}

impl Prediction {
    /// The value of a target by its name (`time_s`, `power_w`, `energy_j`).
    pub fn target(&self, name: &str) -> Option<f64> {
        match name {
            "time_s" => self.time_s,
            "power_w" => self.power_w,
            "energy_j" => self.energy_j,
            _ => None,
        }
    }
}

/// A fitted model, loaded from `MODEL.json`.
pub trait Predictor {
    /// The model kind (`analytic`, `linear`, `spca`, `threads`, ...).
    fn kind(&self) -> &str;
    /// Workloads the model knows.
    fn workloads(&self) -> Vec<String>;
    /// The knob settings a planner may choose from for `workload` (the grid of the training
    /// set, held-out settings included when the model can predict them).
    fn knob_grid(&self, workload: &str) -> Vec<Knobs>;
    /// Predict `workload` at `knobs`.
    ///
    /// # Errors
    /// Unknown workload, or knobs the model cannot predict.
    fn predict(&self, workload: &str, knobs: &Knobs) -> Result<Prediction>;
}

/// The model kinds powerperf fits (`fit --model`, `evaluate --model`, `plan --kind`; each
/// value's doc comment is its `--help` text).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum ModelKind {
    /// Analytical DVFS time/power model ([`analytic`]).
    Analytic,
    /// Analytical time model with the memory part from counters ([`analytic_counters`]).
    AnalyticCounters,
    /// Analytical model with an explicit memory-clock term ([`memclock`]).
    AnalyticMem,
    /// Multivariate linear regression on counter rates ([`regression`]).
    Linear,
    /// Supervised PCA regression ([`regression`]).
    Spca,
    /// Thread-count model ([`threads`]).
    Threads,
    /// Thread-count model with a bandwidth floor from traffic counters ([`threads_bw`]).
    ThreadsBw,
    /// Counter-informed scaling from a baseline point ([`scaling`]).
    Scaling,
    /// Several knobs at once from a covering training subgrid ([`joint`]).
    Joint,
    /// The K nearest training workloads' response ratios (`scaling`'s local transfer).
    Neighbors,
    /// Per target, analytic-counters' physical form (bound and bottleneck on DCGM
    /// fractions, base CPI on an instructions count, over both clocks with DRAM
    /// transaction counts on a core × memory grid), the neighbours, their mean or the
    /// training workloads' common response, by inner cross-validation over the training
    /// workloads.
    Stack,
    /// The best kind for the set and protocol (see [`ModelKind::resolve`]).
    Auto,
}

impl ModelKind {
    /// The kind's name in files and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            ModelKind::Analytic => "analytic",
            ModelKind::AnalyticMem => "analytic_mem",
            ModelKind::AnalyticCounters => "analytic_counters",
            ModelKind::Linear => "linear",
            ModelKind::Spca => "spca",
            ModelKind::Threads => "threads",
            ModelKind::ThreadsBw => "threads_bw",
            ModelKind::Scaling => "scaling",
            ModelKind::Joint => "joint",
            ModelKind::Neighbors => "neighbors",
            ModelKind::Stack => "stack",
            ModelKind::Auto => "auto",
        }
    }

    /// Resolve `auto`: `scaling` when workloads must be predicted from a baseline only
    /// (workload holdout, on any knob; lower error than `spca` on the V100, XU3 and Titan X
    /// sets and below the median-ratio baseline on the thread sweeps, docs/models.md; there
    /// [`eval::workload_holdout`] lets it choose per target between its global transfer, the
    /// nearest neighbours' and their mean, [`scaling::Transfer::Choose`]; and on a set with
    /// DCGM activity fractions it takes `analytic_counters`' bound-and-bottleneck form
    /// instead, stacked per target with the neighbours' transfer ([`stack`]), which needs
    /// the set's counters and so is decided there);
    /// otherwise (fit, knob holdout, on the training points) `joint` when they vary two or
    /// more knobs and some workload's points at one setting of the other knobs have fewer
    /// than two values of the clock (or thread) knob, so that no one-knob curve reaches the
    /// other settings (a cross design: a full sweep of one knob plus one point across;
    /// issue 21); else `threads` when the set's only varying knob is `threads`, else
    /// `scaling` when no clock knob varies but another knob does (a GPU power-limit sweep,
    /// `power_limit_w`, which has no analytic form), else `analytic`. Other kinds are
    /// returned unchanged.
    pub fn resolve(self, points: &[Point], workload_holdout: bool) -> ModelKind {
        if self != ModelKind::Auto {
            return self;
        }
        let varies = |k: &str| {
            let v: Vec<f64> = points
                .iter()
                .filter_map(|p| p.knobs.get(k).copied())
                .collect();
            v.iter().any(|x| *x != v[0])
        };
        let has_clock = analytic::FREQ_KNOBS.iter().any(|k| varies(k));
        if workload_holdout {
            // Also on a thread sweep: `threads` fits a curve per workload and has none for a
            // workload known at its baseline point only (issue 21: it resolved to `threads`
            // there and predicted nothing).
            ModelKind::Scaling
        } else if joint::needs_joint(points) {
            ModelKind::Joint
        } else if !has_clock && varies(threads::THREADS_KNOB) {
            ModelKind::Threads
        } else if !has_clock
            && points
                .iter()
                .flat_map(|p| p.knobs.keys())
                .any(|k| varies(k))
        {
            // A knob with no analytic form varies and no clock does (a GPU power-limit sweep,
            // `power_limit_w`; issue 39): `scaling`'s curve per setting, which `analytic`'s
            // own error names as the fix.
            ModelKind::Scaling
        } else {
            ModelKind::Analytic
        }
    }
}

/// Parameters of every kind (each uses its own part).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct FitParams {
    pub analytic: analytic::AnalyticParams,
    pub regression: regression::RegressionParams,
    pub threads_bw: threads_bw::ThreadsBwParams,
    pub analytic_counters: analytic_counters::AnalyticCountersParams,
    pub scaling: scaling::ScalingParams,
    pub joint: joint::JointParams,
}

/// A fitted model of any kind.
#[allow(
    clippy::large_enum_variant,
    reason = "one per fit or model file: moving its 1,800 bytes (a stack's members inline) \
              is nothing next to the fit, and boxing a variant only moves the largest to the next"
)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fitted {
    Analytic(analytic::AnalyticModel),
    AnalyticMem(memclock::MemClockModel),
    AnalyticCounters(analytic_counters::AnalyticCountersModel),
    Regression(regression::RegressionModel),
    Threads(threads::ThreadsModel),
    ThreadsBw(threads_bw::ThreadsBwModel),
    Scaling(scaling::ScalingModel),
    Joint(joint::JointModel),
    Stack(stack::StackModel),
}

impl Fitted {
    /// Predict `workload` at `knobs`.
    ///
    /// # Errors
    /// See each kind's `predict`.
    ///
    /// Every kind answers alike (issue 21): a prediction with no target at all is
    /// [`ModelError::NoPrediction`], and one that is not physical (a time ≤ 0, a negative
    /// power or energy, a value that is not finite) is [`ModelError::Unphysical`], never a
    /// number.
    pub fn predict(&self, workload: &str, knobs: &Knobs) -> Result<Prediction, ModelError> {
        let p = match self {
            Fitted::Analytic(m) => m.predict(workload, knobs),
            Fitted::AnalyticMem(m) => m.predict(workload, knobs),
            Fitted::AnalyticCounters(m) => m.predict(workload, knobs),
            Fitted::Regression(m) => m.predict(workload, knobs),
            Fitted::Threads(m) => m.predict(workload, knobs),
            Fitted::ThreadsBw(m) => m.predict(workload, knobs),
            Fitted::Scaling(m) => m.predict(workload, knobs),
            Fitted::Joint(m) => m.predict(workload, knobs),
            Fitted::Stack(m) => m.predict(workload, knobs),
        }?;
        check_physical(self.kind(), workload, knobs, p)
    }

    /// The kind's name.
    pub fn kind(&self) -> &str {
        match self {
            Fitted::Analytic(_) => "analytic",
            Fitted::AnalyticMem(_) => "analytic_mem",
            Fitted::AnalyticCounters(_) => "analytic_counters",
            Fitted::Regression(m) => &m.method,
            Fitted::Threads(_) => "threads",
            Fitted::ThreadsBw(_) => "threads_bw",
            Fitted::Scaling(m) => {
                if m.params.transfer == Some(scaling::Transfer::Neighbors) {
                    "neighbors"
                } else {
                    "scaling"
                }
            }
            Fitted::Joint(_) => "joint",
            Fitted::Stack(_) => "stack",
        }
    }

    /// What was fitted and why, for `powerperf fit --explain`.
    pub fn explain(&self) -> String {
        match self {
            Fitted::Analytic(m) => {
                let mut s = format!(
                    "analytic DVFS model (Moore 2012): t(f) = ((t_comp·f_ref/f)^p + t_mem^p)^(1/p), P(f) = P_static + c·(f/f_ref)^k, E = P·t\n\
                     clock knob: {}, f_ref = {} MHz\npower exponent k = {:.4} ({})\nstatic power: {}\neffective clocks: {}\n",
                    m.freq_knob, m.f_ref_mhz, m.power_exponent, m.power_exponent_source, m.static_power, m.calibration_note
                );
                if let Some(kn) = m.voltage_knee_mhz {
                    s += &format!("power: voltage floor, P(f) = P_static + c·f·max(1, f/f_knee)²/(f_ref·max(1, f_ref/f_knee)²), f_knee = {kn:.1} MHz (k above is not used)\n");
                }
                for e in &m.effective_clocks {
                    s += &format!(
                        "  {} MHz runs as {:.1} MHz (median of {} compute-bound groups)\n",
                        e.nominal_mhz, e.effective_mhz, e.groups
                    );
                }
                let mut pc: BTreeMap<String, usize> = BTreeMap::new();
                for g in &m.groups {
                    if let Some(t) = &g.time {
                        *pc.entry(format!("{}", t.overlap_p)).or_default() += 1;
                    }
                }
                s += &format!("overlap exponent p chosen per group (count): {pc:?}\n");
                s += "workload                         other knobs            t_comp_s   t_mem_s     p   P_static_w   c_w      k\n";
                for g in &m.groups {
                    let (tc, tm, p) = g.time.as_ref().map_or((f64::NAN, f64::NAN, f64::NAN), |t| {
                        (t.t_comp_s, t.t_mem_s, t.overlap_p)
                    });
                    let (ps, c, k) = g
                        .power
                        .as_ref()
                        .map_or((f64::NAN, f64::NAN, f64::NAN), |p| {
                            (p.p_static_w, p.c_w, p.exponent.unwrap_or(m.power_exponent))
                        });
                    s += &format!(
                        "{:<32} {:<22} {:>9.4} {:>9.4} {:>5} {:>10.2} {:>8.2} {:>6.3}{}\n",
                        g.workload,
                        features::knob_key(&g.other_knobs),
                        tc,
                        tm,
                        p,
                        ps,
                        c,
                        k,
                        if g.notes.is_empty() {
                            String::new()
                        } else {
                            format!("  ({})", g.notes.join("; "))
                        }
                    );
                }
                s
            }
            Fitted::Regression(m) => m.explain(),
            Fitted::AnalyticMem(m) => m.explain(),
            Fitted::AnalyticCounters(m) => m.explain(),
            Fitted::ThreadsBw(m) => m.explain(),
            Fitted::Scaling(m) => m.explain(),
            Fitted::Joint(m) => m.explain(),
            Fitted::Stack(m) => m.explain(),
            Fitted::Threads(m) => {
                let mut s = "thread-count model: t(n) = t_serial + t_parallel/n (Amdahl), P(n) = P_0 + n·P_core, E = P·t\n".to_string();
                s += "workload                         other knobs          t_serial_s t_parallel_s   P_0_w  P_core_w\n";
                for g in &m.groups {
                    let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.4}"));
                    s += &format!(
                        "{:<32} {:<20} {:>10} {:>12} {:>8} {:>8}\n",
                        g.workload,
                        features::knob_key(&g.other_knobs),
                        f(g.t_serial_s),
                        f(g.t_parallel_s),
                        f(g.p0_w),
                        f(g.p_core_w)
                    );
                }
                s
            }
        }
    }
}

/// `p` if it predicts at least one target and every target it predicts is physical: time
/// above 0, power and energy at least 0, all finite (issue 21, item 5).
///
/// # Errors
/// [`ModelError::NoPrediction`] or [`ModelError::Unphysical`].
pub fn check_physical(
    model: &str,
    workload: &str,
    knobs: &Knobs,
    p: Prediction,
) -> Result<Prediction, ModelError> {
    if p.time_s.is_none() && p.power_w.is_none() && p.energy_j.is_none() {
        return Err(ModelError::NoPrediction {
            model: model.into(),
            workload: workload.into(),
            knobs: features::knob_key(knobs),
        });
    }
    for (target, v, min_exclusive) in [
        ("time_s", p.time_s, true),
        ("power_w", p.power_w, false),
        ("energy_j", p.energy_j, false),
    ] {
        let Some(v) = v else { continue };
        let bad = !v.is_finite() || v < 0.0 || (min_exclusive && v == 0.0);
        if bad {
            return Err(ModelError::Unphysical {
                model: model.into(),
                workload: workload.into(),
                knobs: features::knob_key(knobs),
                target,
                value: v,
                rule: if min_exclusive {
                    "must be above 0"
                } else {
                    "must be at least 0"
                },
            });
        }
    }
    Ok(p)
}

/// Fit `kind` on mean points (see [`features::mean_points`]). `Auto` resolves as for a fit
/// (knob protocol).
///
/// # Errors
/// Whatever the kind's `fit` reports.
pub fn fit_kind(
    kind: ModelKind,
    meta: &SetMeta,
    points: &[Point],
    params: &FitParams,
) -> Result<Fitted, ModelError> {
    match kind.resolve(points, false) {
        ModelKind::Analytic => analytic::fit(meta, points, &params.analytic).map(Fitted::Analytic),
        ModelKind::AnalyticMem => memclock::fit(meta, points).map(Fitted::AnalyticMem),
        ModelKind::AnalyticCounters => {
            analytic_counters::fit(meta, points, &params.analytic_counters)
                .map(Fitted::AnalyticCounters)
        }
        ModelKind::Linear => {
            regression::fit(meta, points, &params.regression, false).map(Fitted::Regression)
        }
        ModelKind::Spca => {
            regression::fit(meta, points, &params.regression, true).map(Fitted::Regression)
        }
        ModelKind::Threads => threads::fit(meta, points).map(Fitted::Threads),
        ModelKind::ThreadsBw => {
            threads_bw::fit(meta, points, &params.threads_bw).map(Fitted::ThreadsBw)
        }
        ModelKind::Scaling => scaling::fit(meta, points, &params.scaling).map(Fitted::Scaling),
        ModelKind::Joint => joint::fit(meta, points, &params.joint).map(Fitted::Joint),
        ModelKind::Neighbors => {
            scaling::fit_neighbors(meta, points, &params.scaling).map(Fitted::Scaling)
        }
        ModelKind::Stack => stack::fit(meta, points, params).map(Fitted::Stack),
        ModelKind::Auto => unreachable!("resolve never returns Auto"),
    }
}

/// Error of a model, per target, measured on held-out points.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct HeldOutError {
    /// How the points were held out (e.g. `leave-one-out per workload`).
    pub protocol: String,
    /// Held-out (workload, knob values) means predicted.
    pub points: usize,
    /// Per target (`time_s`, `power_w`, `energy_j`): MAPE and max error, percent.
    pub targets: BTreeMap<String, scoring::TargetError>,
}

/// Predict `workload` at each of `settings` with `model` (read from `model_path`), in
/// order: the rows `powerperf predict` prints.
///
/// # Errors
/// A setting the model cannot predict, or a prediction that is not a time, power or energy
/// (NaN, infinite or negative: outside what the model can describe, or a damaged model
/// file); the message names the model file, the target, the value and the setting.
pub fn predict_settings(
    model: &dyn Predictor,
    model_path: &std::path::Path,
    workload: &str,
    settings: Vec<Knobs>,
) -> Result<Vec<(Knobs, Prediction)>> {
    let mut rows = Vec::with_capacity(settings.len());
    for k in settings {
        let p = model
            .predict(workload, &k)
            .with_context(|| format!("predicting {workload} at {}", features::knob_key(&k)))?;
        // A prediction that is no time, power or energy is an error, not a line of output.
        for (what, v) in [
            ("time_s", p.time_s),
            ("power_w", p.power_w),
            ("energy_j", p.energy_j),
        ] {
            if let Some(x) = v.filter(|x| !(x.is_finite() && *x >= 0.0)) {
                anyhow::bail!(
                    "model {} predicts {what} = {x} for {workload} at {}: not a valid value (the knob is outside what the model can describe, or the model file is damaged; fix: predict within the training grid, or fit the model again)",
                    model_path.display(),
                    features::knob_key(&k)
                );
            }
        }
        rows.push((k, p));
    }
    Ok(rows)
}

/// `MODEL.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelFile {
    /// File format tag: `powerperf-model/1`.
    pub format: String,
    /// Model kind (`analytic`, `linear`, `spca`, `threads`).
    pub kind: String,
    /// The training set's `source` and path as given to `fit`.
    pub set_source: String,
    pub set_path: String,
    /// Knob names of the set.
    pub knobs: Vec<String>,
    /// Training knob settings per workload (the planner's grid).
    pub training_knobs: BTreeMap<String, Vec<Knobs>>,
    /// Targets the set marks unreliable.
    #[serde(default)]
    pub unreliable: Vec<Unreliable>,
    /// Error measured on held-out data (leave-one-out at fit time).
    pub held_out_error: Option<HeldOutError>,
    /// The held-out slowdown errors at interior clock values that `plan`'s guard needs
    /// (issue 20; absent in files written before it, and with `fit --no-loo`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slowdown_errors: Option<slowdown_errors::SlowdownErrors>,
    /// Why `slowdown_errors` is absent, as `fit` saw it (e.g. `fitted with --no-loo`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slowdown_errors_missing: Option<String>,
    /// The device each knob belongs to (`cpu`, `gpu`, `gpu1`, ...), from the set
    /// (`knob_devices` of set.toml); absent or partial: unknown (issue 20, item 4).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub knob_devices: BTreeMap<String, String>,
    /// Kind-specific parameters, selected counters with reasons.
    pub model: Fitted,
}

impl ModelFile {
    /// The model file `powerperf fit` writes: `fitted`, fitted on `points` (the set's mean
    /// points) of `set`, read from `set_path`; the set's knobs, unreliable targets and knob
    /// devices; each workload's training settings (the planner's grid, in `points`' order);
    /// the held-out error, and the slowdown errors for `plan`'s guard or why there are none
    /// (`slowdown_errors_missing`).
    pub fn of_fit(
        set: &powerperf_format::set::TrainingSet,
        set_path: &std::path::Path,
        points: &[powerperf_format::set::Point],
        fitted: Fitted,
        held_out_error: Option<HeldOutError>,
        slowdown_errors: Result<slowdown_errors::SlowdownErrors, String>,
    ) -> Self {
        let mut training_knobs: BTreeMap<String, Vec<Knobs>> = BTreeMap::new();
        for p in points {
            training_knobs
                .entry(p.workload.clone())
                .or_default()
                .push(p.knobs.clone());
        }
        let (slowdown_errors, slowdown_errors_missing) = match slowdown_errors {
            Ok(e) => (Some(e), None),
            Err(why) => (None, Some(why)),
        };
        ModelFile {
            format: MODEL_FORMAT.to_string(),
            kind: fitted.kind().to_string(),
            set_source: set.meta.source.clone(),
            set_path: set_path.display().to_string(),
            knobs: set.meta.knobs.clone(),
            training_knobs,
            unreliable: set.meta.unreliable.clone(),
            held_out_error,
            slowdown_errors,
            slowdown_errors_missing,
            knob_devices: set.meta.knob_devices.clone(),
            model: fitted,
        }
    }
}

/// The file format tag of [`ModelFile`].
pub const MODEL_FORMAT: &str = "powerperf-model/1";

/// The largest model file read (a fitted model's JSON is a few KiB to a few MiB).
pub const MAX_MODEL_FILE_BYTES: u64 = 64 << 20;

impl ModelFile {
    /// Write as pretty JSON.
    ///
    /// # Errors
    /// [`ModelError::Io`] when the file cannot be written.
    pub fn write(&self, path: &Path) -> Result<(), ModelError> {
        let text = serde_json::to_string_pretty(self).map_err(|e| ModelError::Json {
            path: path.into(),
            source: e,
        })?;
        // Like the run and set writers, create the folder the file goes in.
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| ModelError::Io {
                path: path.into(),
                source: e,
            })?;
        }
        std::fs::write(path, text + "\n").map_err(|e| ModelError::Io {
            path: path.into(),
            source: e,
        })
    }

    /// Read a model file (at most [`MAX_MODEL_FILE_BYTES`], through
    /// `safe_file::read_to_string_bounded`: no link followed, no FIFO waited on).
    ///
    /// # Errors
    /// [`ModelError::Io`], or [`ModelError::Json`] for a malformed or unknown model.
    pub fn read(path: &Path) -> Result<Self, ModelError> {
        // a file a user may have written: no link, no FIFO, a stated size (issue 38)
        let text = powerperf_node::safe_file::read_to_string_bounded(
            path,
            MAX_MODEL_FILE_BYTES,
            "model file",
        )
        .map_err(|e| ModelError::Io {
            path: path.into(),
            source: std::io::Error::other(format!("{e:#}")),
        })?;
        let m = Self::from_json(&text).map_err(|e| ModelError::Json {
            path: path.into(),
            source: e,
        })?;
        check_numbers(path, &text)?;
        Ok(m)
    }

    /// Parse the text of a model file (what [`ModelFile::read`] does after reading it).
    ///
    /// # Errors
    /// JSON that is not a model this build knows (serde_json's error, with line and column).
    pub fn from_json(text: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(text)
    }
}

/// Check the numbers of a model file's JSON text (issue 18: a negative `t_comp_s` or an
/// `f_ref_mhz` of 0 was accepted and predicted NaN and negative times): a value of a key
/// ending in `_mhz` (a clock, alone or in a list) is above 0 and at most 1e6; one ending in
/// `_s` (a time) is not negative. JSON numbers are always finite. The held-out error
/// (`held_out_error`), which has signed statistics, is not checked.
///
/// # Errors
/// The first bad number, with its key, line and place in the JSON.
fn check_numbers(path: &Path, text: &str) -> Result<(), ModelError> {
    fn walk(
        v: &serde_json::Value,
        key: &str,
        at: &str,
        bad: &mut Option<(String, String, f64, &'static str)>,
    ) {
        if bad.is_some() {
            return;
        }
        match v {
            serde_json::Value::Object(o) => {
                for (k, c) in o {
                    if k != "held_out_error" && k != "slowdown_errors" {
                        walk(c, k, &format!("{at}.{k}"), bad);
                    }
                }
            }
            serde_json::Value::Array(a) => {
                for (i, c) in a.iter().enumerate() {
                    walk(c, key, &format!("{at}[{i}]"), bad);
                }
            }
            serde_json::Value::Number(n) => {
                let Some(x) = n.as_f64() else { return };
                let why = if key.ends_with("_mhz") && !(x > 0.0 && x <= 1e6) {
                    Some("is not a clock: it must be above 0 and at most 1e6 MHz")
                } else if key.ends_with("_s") && x < 0.0 {
                    Some("is a negative time")
                } else {
                    None
                };
                if let Some(why) = why {
                    *bad = Some((
                        key.to_string(),
                        at.trim_start_matches('.').to_string(),
                        x,
                        why,
                    ));
                }
            }
            _ => {}
        }
    }
    let Ok(v) = serde_json::from_str::<serde_json::Value>(text) else {
        return Ok(());
    };
    let mut bad = None;
    walk(&v, "", "", &mut bad);
    let Some((key, at, value, why)) = bad else {
        return Ok(());
    };
    // The line: the first `"key": <number equal to value>` in the text, else the key's first.
    let quoted = format!("\"{key}\"");
    let mut first = None;
    let mut exact = None;
    for (i, _) in text.match_indices(&quoted) {
        first.get_or_insert(i);
        let rest = text[i + quoted.len()..].trim_start();
        let Some(rest) = rest.strip_prefix(':') else {
            continue;
        };
        let rest = rest.trim_start();
        let num: String = rest
            .chars()
            .take_while(|c| c.is_ascii_digit() || "+-.eE".contains(*c))
            .collect();
        if num.parse::<f64>().ok() == Some(value) {
            exact = Some(i);
            break;
        }
    }
    let line = exact
        .or(first)
        .map(|i| text[..i].matches('\n').count() + 1)
        .unwrap_or(0);
    Err(ModelError::BadNumber {
        path: path.into(),
        line,
        key,
        at,
        value,
        why: why.to_string(),
    })
}

impl Predictor for ModelFile {
    fn kind(&self) -> &str {
        self.model.kind()
    }

    fn workloads(&self) -> Vec<String> {
        self.training_knobs.keys().cloned().collect()
    }

    fn knob_grid(&self, workload: &str) -> Vec<Knobs> {
        self.training_knobs
            .get(workload)
            .cloned()
            .unwrap_or_default()
    }

    fn predict(&self, workload: &str, knobs: &Knobs) -> Result<Prediction> {
        if !self.training_knobs.contains_key(workload) {
            anyhow::bail!(ModelError::UnknownWorkload {
                workload: workload.into(),
                known: self.workloads().join(", "),
            });
        }
        Ok(self.model.predict(workload, knobs)?)
    }
}

/// Load `MODEL.json` written by `powerperf fit`.
///
/// # Errors
/// A missing or unreadable file, or a model kind this build does not know.
pub fn load_model(path: &Path) -> Result<Box<dyn Predictor>> {
    Ok(Box::new(load_model_file(path)?))
}

/// [`load_model`], keeping the whole [`ModelFile`] (its held-out errors, knob devices).
///
/// # Errors
/// As [`load_model`].
pub fn load_model_file(path: &Path) -> Result<ModelFile> {
    let m = ModelFile::read(path).with_context(|| format!("loading model {}", path.display()))?;
    if m.format != MODEL_FORMAT {
        anyhow::bail!(
            "model file {}: format `{}`, this build reads `{MODEL_FORMAT}` (fix: fit it again with `powerperf fit`)",
            path.display(),
            m.format
        );
    }
    Ok(m)
}

/// Names for an error message: the first 12, then how many more (a model can know
/// hundreds of workloads).
pub fn name_list(names: &[String]) -> String {
    const SHOWN: usize = 12;
    let mut s = names
        .iter()
        .take(SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > SHOWN {
        s.push_str(&format!(", … and {} more", names.len() - SHOWN));
    }
    s
}
