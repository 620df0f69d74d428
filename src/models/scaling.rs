//! Counter-informed scaling from a baseline point (`scaling`): a workload's target at a knob
//! setting predicted from its own measurement at the baseline setting, the shape of the
//! response borrowed from the training workloads and bent by the workload's counters at the
//! baseline.
//!
//! For a target `T` (power, time) and a workload `i` with baseline value `T_i(b)` and baseline
//! features `x_i` (counter rates of [`super::features::rates`] and static-feature shares, see
//! below):
//!
//! ```text
//! T_i(k) = s + (T_i(b) − s) · h(k, x_i),     h(k, x) = w_0(k) + Σ_j w_j(k) · z_j(x)
//! ```
//!
//! - `s` is a static part shared by all workloads (watts for power: the static power of Moore
//!   2012's `P = P_static + c·V²·f`, whose dynamic part scales with the clock while the static
//!   part does not). It is chosen by a grid search on the training workloads; time uses `s = 0`
//!   (a pure ratio `T(k)/T(b)`, Moore's and Lively et al.'s response).
//! - `z_j = (x_j − μ_j)/σ_j` are the selected features standardised over the training
//!   workloads and clipped to their training range (a workload unlike every training one is
//!   not extrapolated linearly).
//! - `w(k)` are per-setting weights fitted by least squares on the training workloads'
//!   points. MAPE is the score, so the fit minimises relative error: rows are weighted by
//!   `1/T_i(k)` (weighted least squares of `(T̂ − T)/T`), and with [`Loss::L1Relative`] by
//!   iteratively reweighted least squares toward the L1 norm of the relative error (robust
//!   to the single outlying measurements the V100 set has; Holland & Welsch 1977). With
//!   [`ScalingParams::smooth_degree`] the weights are a polynomial in the clock knob (per value
//!   of the other knobs) instead of free per setting.
//! - Features are chosen on the training workloads only: forward selection, each candidate
//!   scored by the MAPE of an inner cross-validation over training workloads (leave one
//!   workload out, or [`ScalingParams::inner_folds`] folds when there are more workloads),
//!   a feature kept only when it lowers that score by at least
//!   [`ScalingParams::min_gain`] (relative). Candidates are first screened by the
//!   |Spearman ρ| of each feature with the training workloads' mean response
//!   `mean_k (T_i(k) − s)/(T_i(b) − s)`, keeping [`ScalingParams::screen_top`].
//!
//! Static features (e.g. PTX instruction counts) enter as shares of the workload's static
//! total (`static_share:<name>`, the instruction mix), since absolute counts measure kernel
//! size, not how the kernel responds to a clock.
//!
//! Energy is `P·t`. The held-out rules (shared/DESIGN.md): in workload holdout the held-out
//! workload contributes only its baseline point (its targets and counters there); the
//! shape, `s` and the features come from the other workloads.

use super::features::{knob_key, rates, spearman};
use super::{Knobs, ModelError, Prediction};
use crate::store::set::{Point, SetMeta};
use linfa_linalg::cholesky::SolveCInplace;
use ndarray::Array2;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Targets the model fits directly (energy is `P·t`).
pub const SCALING_TARGETS: [&str; 2] = ["power_w", "time_s"];

const MODEL: &str = "scaling";

/// The loss minimised over the training points.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Loss {
    /// Least squares of the relative error `(T̂ − T)/T`.
    L2Relative,
    /// Least absolute relative error, by iteratively reweighted least squares.
    #[default]
    L1Relative,
}

/// Parameters of the scaling model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ScalingParams {
    /// The baseline setting; `None`: the maximum of every knob over the points.
    pub baseline: Option<Knobs>,
    /// Loss of the weight fit.
    pub loss: Loss,
    /// IRLS iterations for [`Loss::L1Relative`].
    pub irls_iterations: usize,
    /// `None`: free weights per setting; `Some(d)` (default 3): weights a polynomial of degree
    /// `d` in the clock knob per value of the other knobs (capped at the number of clock values
    /// − 1).
    pub smooth_degree: Option<usize>,
    /// At most this many features.
    pub max_features: usize,
    /// A feature is added when it lowers the inner cross-validated MAPE by at least this
    /// fraction of the current value.
    pub min_gain: f64,
    /// Candidates kept by the Spearman screen before forward selection.
    pub screen_top: usize,
    /// Inner cross-validation folds over training workloads (leave-one-out when there are at
    /// most this many workloads).
    pub inner_folds: usize,
    /// Grid points of the static-part search in `[0, 0.95·min T_i(b)]` (power only).
    pub static_grid: usize,
    /// Features allowed as candidates (all when empty).
    pub candidates: Vec<String>,
    /// Outlier-resistant training (see [`RobustParams`]); `None` switches it off.
    pub robust: Option<RobustParams>,
}

/// Outlier-resistant training: each training workload's points are compared with their own
/// smooth curve, the median `L` of the `window` nearest clocks on each side (the point itself
/// left out), as the relative residual `r = (T − L)/L`. With `σ = 1.4826·median|r|` over all
/// training workloads' points (the MAD scale), a training point gets Tukey's bisquare
/// weight `(1 − (r/(c·σ))²)²` (0 beyond `c·σ`) as a prior on its rows of the weight fit, and a
/// training workload whose baseline lies beyond `c·σ` is scaled from `L` there instead. Only training workloads' data enter; a held-out workload's baseline is used
/// as measured. Groups (values of the other knobs) with fewer than `min_clocks` clock values
/// are left as they are: with few clocks a neighbour median is no smooth curve. At the ends of
/// a sweep `L` is the median of one side only, biased by about 1.5 clock steps of the curve's
/// slope, so the check suits dense sweeps (the V100's 7.5 MHz steps: about 0.75 %, against
/// `c·σ` ≈ 4.7 %).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RobustParams {
    /// Tukey's bisquare constant `c`, in robust standard deviations (4.685: 95 % efficiency
    /// under normal errors).
    pub c: f64,
    /// Neighbours on each side of a point in its smooth curve.
    pub window: usize,
    /// Fewest clock values of a group for the check.
    pub min_clocks: usize,
    /// The check runs only where the points scatter about their neighbours' median by at
    /// least this fraction of the curves' median change from one clock to the next
    /// (σ ≥ ratio × step). Where the curves change much more per step than they scatter
    /// (a sparse sweep of precise measurements), the one-sided neighbour median at the
    /// ends of a sweep is off by several σ and the check would flag the curves' own shape.
    pub min_noise_to_step: f64,
}

impl Default for RobustParams {
    fn default() -> Self {
        Self {
            c: 4.685,
            window: 2,
            min_clocks: 7,
            min_noise_to_step: 0.5,
        }
    }
}

impl Default for ScalingParams {
    fn default() -> Self {
        Self {
            baseline: None,
            loss: Loss::L1Relative,
            irls_iterations: 10,
            smooth_degree: Some(3),
            max_features: 3,
            min_gain: 0.02,
            screen_top: 8,
            inner_folds: 10,
            static_grid: 20,
            candidates: Vec::new(),
            robust: Some(RobustParams::default()),
        }
    }
}

/// Weights of one setting: `w_0` then one per selected feature.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SettingWeights {
    pub knobs: Knobs,
    pub weights: Vec<f64>,
}

/// A forward-selection step: each candidate's inner cross-validated MAPE, percent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SelectionStep {
    pub scores: Vec<(String, f64)>,
    /// The feature added, if any.
    pub added: Option<String>,
}

/// The fitted model of one target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TargetModel {
    pub target: String,
    /// Static part `s` (target units; 0 for time).
    pub static_part: f64,
    pub features: Vec<String>,
    /// Training mean, standard deviation, minimum and maximum of each feature.
    pub means: Vec<f64>,
    pub stds: Vec<f64>,
    pub mins: Vec<f64>,
    pub maxs: Vec<f64>,
    pub settings: Vec<SettingWeights>,
    /// Training workloads (with points beyond their baseline).
    pub training_workloads: Vec<String>,
    /// Inner cross-validated MAPE (percent) with no feature, then after each addition.
    pub selection: Vec<SelectionStep>,
    /// In-sample MAPE of the final fit on the training workloads, percent.
    pub training_mape_pct: f64,
    /// Training points robust training set aside (weight 0) and training baselines it
    /// replaced by their neighbours' median ([`RobustParams`]).
    #[serde(default)]
    pub outliers: Vec<String>,
    /// Why robust training left this target as measured, where it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub robust_note: Option<String>,
}

/// A workload's baseline: its targets and features there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScalingBaseline {
    pub targets: BTreeMap<String, f64>,
    pub features: BTreeMap<String, f64>,
}

/// The fitted `scaling` model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScalingModel {
    pub params: ScalingParams,
    pub baseline: Knobs,
    pub baselines: BTreeMap<String, ScalingBaseline>,
    pub targets: Vec<TargetModel>,
    /// Targets marked unreliable, by workload (`*` = all).
    #[serde(default)]
    pub unreliable: BTreeMap<String, Vec<String>>,
}

fn same_knobs(a: &Knobs, b: &Knobs) -> bool {
    b.iter()
        .all(|(k, v)| a.get(k).is_some_and(|x| (x - v).abs() < 1e-9))
}

/// Baseline features of a point: counter rates as [`rates`] gives them, static features as
/// shares of the static total.
fn baseline_features(meta: &SetMeta, p: &Point) -> BTreeMap<String, f64> {
    let mut out: BTreeMap<String, f64> = rates(meta, p)
        .into_iter()
        .filter(|(k, _)| !k.starts_with("static:"))
        .collect();
    let total: f64 = p.static_features.values().filter(|v| v.is_finite()).sum();
    if total > 0.0 {
        for (k, v) in &p.static_features {
            if v.is_finite() {
                out.insert(format!("static_share:{k}"), v / total);
            }
        }
    }
    out
}

/// The training data of one target, in the shape the fits use.
struct Data {
    /// Baseline value per training workload.
    tb: Vec<f64>,
    /// Candidate features per training workload: `(n, n_candidates)`.
    x: Array2<f64>,
    /// Settings predicted (non-baseline).
    settings: Vec<Knobs>,
    /// Clock value of each setting and the group (other knobs) it belongs to.
    clock: Vec<f64>,
    group: Vec<usize>,
    /// Measured value per (workload, setting), NaN when absent.
    t: Array2<f64>,
    /// Prior weight per (workload, setting) of the weight fit (1 unless robust training
    /// down-weights the point).
    prior: Array2<f64>,
}

/// Per-setting weights fitted on a subset of workloads, plus the standardisation.
struct Fit {
    feats: Vec<usize>,
    means: Vec<f64>,
    stds: Vec<f64>,
    mins: Vec<f64>,
    maxs: Vec<f64>,
    /// `(n_settings, 1 + n_feats)`
    w: Array2<f64>,
}

impl Fit {
    fn z(&self, x: impl Fn(usize) -> f64) -> Vec<f64> {
        let mut z = vec![1.0];
        for (j, &f) in self.feats.iter().enumerate() {
            let v = x(f).clamp(self.mins[j], self.maxs[j]);
            z.push((v - self.means[j]) / self.stds[j]);
        }
        z
    }
}

/// Weighted least squares `min Σ_r w_r (a_r·β − y_r)²` through the normal equations
/// `(AᵀWA)β = AᵀWy`, solved by Cholesky (linfa-linalg). `a` is row-major `(n, m)`; the
/// columns are few (at most a handful of standardised features times a low-order
/// polynomial), so the normal equations are well conditioned; a relative ridge of `1e-12` of
/// the trace keeps them positive definite when a column is constant.
///
/// Returns `None` when there are fewer rows than columns or the system is singular.
pub fn weighted_least_squares(a: &[f64], m: usize, y: &[f64], w: &[f64]) -> Option<Vec<f64>> {
    let n = y.len();
    if n < m || m == 0 {
        return None;
    }
    let mut g = Array2::<f64>::zeros((m, m));
    let mut rhs = Array2::<f64>::zeros((m, 1));
    for r in 0..n {
        let row = &a[r * m..(r + 1) * m];
        let wr = w[r];
        for i in 0..m {
            let wi = wr * row[i];
            rhs[[i, 0]] += wi * y[r];
            for j in 0..=i {
                g[[i, j]] += wi * row[j];
            }
        }
    }
    let trace: f64 = (0..m).map(|i| g[[i, i]]).sum();
    for i in 0..m {
        g[[i, i]] += 1e-12 * trace.max(1e-300);
        for j in 0..i {
            g[[j, i]] = g[[i, j]];
        }
    }
    let beta = g.solvec_into(rhs).ok()?;
    let beta: Vec<f64> = beta.column(0).to_vec();
    beta.iter().all(|b| b.is_finite()).then_some(beta)
}

/// Fit rows `a` (row-major, `m` columns), `y` under `loss` (rows already carry the 1/T
/// scaling).
fn robust_fit(
    a: &[f64],
    m: usize,
    y: &[f64],
    prior: &[f64],
    loss: Loss,
    iters: usize,
) -> Option<Vec<f64>> {
    let mut w = prior.to_vec();
    let mut beta = weighted_least_squares(a, m, y, &w)?;
    if loss == Loss::L1Relative {
        for _ in 0..iters {
            for (r, wr) in w.iter_mut().enumerate() {
                let pred: f64 = a[r * m..(r + 1) * m]
                    .iter()
                    .zip(&beta)
                    .map(|(x, b)| x * b)
                    .sum();
                // δ = 0.1 % relative error: below it a residual counts as exact.
                *wr = prior[r] / (pred - y[r]).abs().max(1e-3);
            }
            beta = weighted_least_squares(a, m, y, &w)?;
        }
    }
    Some(beta)
}

fn fit_subset(d: &Data, rows: &[usize], feats: &[usize], s: f64, p: &ScalingParams) -> Option<Fit> {
    let m = feats.len();
    let mut means = vec![0.0; m];
    let mut stds = vec![1.0; m];
    let mut mins = vec![f64::INFINITY; m];
    let mut maxs = vec![f64::NEG_INFINITY; m];
    for (j, &f) in feats.iter().enumerate() {
        let v: Vec<f64> = rows.iter().map(|&i| d.x[[i, f]]).collect();
        let mu = v.iter().sum::<f64>() / v.len() as f64;
        let var = v.iter().map(|x| (x - mu).powi(2)).sum::<f64>() / v.len() as f64;
        means[j] = mu;
        stds[j] = if var.sqrt() > 1e-12 { var.sqrt() } else { 1.0 };
        mins[j] = v.iter().copied().fold(f64::INFINITY, f64::min);
        maxs[j] = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    }
    let mut fit = Fit {
        feats: feats.to_vec(),
        means,
        stds,
        mins,
        maxs,
        w: Array2::zeros((d.settings.len(), m + 1)),
    };
    let zs: Vec<Vec<f64>> = rows.iter().map(|&i| fit.z(|f| d.x[[i, f]])).collect();
    match p.smooth_degree {
        None => {
            for k in 0..d.settings.len() {
                let n = rows
                    .iter()
                    .filter(|&&i| d.t[[i, k]].is_finite() && d.t[[i, k]] != 0.0)
                    .count();
                if n == 0 {
                    return None;
                }
                // Fewer rows than columns: drop to the intercept alone.
                let cols = if n > m { m + 1 } else { 1 };
                let mut a = Vec::with_capacity(n * cols);
                let mut y = Vec::with_capacity(n);
                let mut pw = Vec::with_capacity(n);
                for (r, &i) in rows.iter().enumerate() {
                    let t = d.t[[i, k]];
                    if !t.is_finite() || t == 0.0 {
                        continue;
                    }
                    let sc = (d.tb[i] - s) / t;
                    a.extend(zs[r][..cols].iter().map(|z| z * sc));
                    y.push((t - s) / t);
                    pw.push(d.prior[[i, k]]);
                }
                if pw.iter().all(|w| *w == 0.0) {
                    pw.fill(1.0);
                }
                let beta = robust_fit(&a, cols, &y, &pw, p.loss, p.irls_iterations)?;
                for (c, b) in beta.iter().enumerate() {
                    fit.w[[k, c]] = *b;
                }
            }
        }
        Some(deg) => {
            let groups = d.group.iter().copied().max().map_or(0, |g| g + 1);
            for g in 0..groups {
                let ks: Vec<usize> = (0..d.settings.len()).filter(|&k| d.group[k] == g).collect();
                let lo = ks.iter().map(|&k| d.clock[k]).fold(f64::INFINITY, f64::min);
                let hi = ks
                    .iter()
                    .map(|&k| d.clock[k])
                    .fold(f64::NEG_INFINITY, f64::max);
                let span = if hi > lo { hi - lo } else { 1.0 };
                let mut distinct: Vec<f64> = ks.iter().map(|&k| d.clock[k]).collect();
                distinct.sort_by(f64::total_cmp);
                distinct.dedup();
                let deg = deg.min(distinct.len().saturating_sub(1));
                let phi = |k: usize| -> Vec<f64> {
                    let u = (d.clock[k] - lo) / span;
                    (0..=deg).map(|e| u.powi(e as i32)).collect()
                };
                let cols = (m + 1) * (deg + 1);
                let mut a = Vec::new();
                let mut y = Vec::new();
                let mut pw = Vec::new();
                for &k in &ks {
                    let ph = phi(k);
                    for (r, &i) in rows.iter().enumerate() {
                        let t = d.t[[i, k]];
                        if !t.is_finite() || t == 0.0 {
                            continue;
                        }
                        let sc = (d.tb[i] - s) / t;
                        for z in &zs[r] {
                            a.extend(ph.iter().map(|f| z * f * sc));
                        }
                        y.push((t - s) / t);
                        pw.push(d.prior[[i, k]]);
                    }
                }
                if pw.iter().all(|w| *w == 0.0) {
                    pw.fill(1.0);
                }
                let beta = robust_fit(&a, cols, &y, &pw, p.loss, p.irls_iterations)?;
                for &k in &ks {
                    let ph = phi(k);
                    for c in 0..=m {
                        fit.w[[k, c]] = (0..=deg).map(|e| beta[c * (deg + 1) + e] * ph[e]).sum();
                    }
                }
            }
        }
    }
    Some(fit)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    }
}

/// Robust training ([`RobustParams`]): sets `d.prior` to each training point's bisquare
/// weight against its own workload's neighbour-median curve and replaces an outlying training
/// baseline `d.tb[i]` by that median. The baseline belongs to group `base_group`
/// at clock `base_clock`. Returns `(workload row, description)` of the points set aside.
fn robust_prior(
    d: &mut Data,
    base_group: Option<usize>,
    base_clock: f64,
    rp: &RobustParams,
) -> (Vec<(usize, String)>, Option<String>) {
    let groups = d.group.iter().copied().max().map_or(0, |g| g + 1);
    // (row, setting or None for the baseline, clock, relative residual, neighbour median)
    let mut res: Vec<(usize, Option<usize>, f64, f64, f64)> = Vec::new();
    // Relative change from each clock to the next, over every checked curve.
    let mut steps: Vec<f64> = Vec::new();
    for g in 0..groups {
        for i in 0..d.tb.len() {
            let mut seq: Vec<(f64, f64, Option<usize>)> = (0..d.settings.len())
                .filter(|&k| d.group[k] == g && d.t[[i, k]].is_finite())
                .map(|k| (d.clock[k], d.t[[i, k]], Some(k)))
                .collect();
            if base_group == Some(g) && d.tb[i].is_finite() {
                seq.push((base_clock, d.tb[i], None));
            }
            if seq.len() < rp.min_clocks.max(3) {
                continue;
            }
            seq.sort_by(|a, b| a.0.total_cmp(&b.0));
            steps.extend(
                seq.windows(2)
                    .filter(|w| w[0].1 != 0.0)
                    .map(|w| ((w[1].1 - w[0].1) / w[0].1).abs()),
            );
            for q in 0..seq.len() {
                let lo = q.saturating_sub(rp.window);
                let hi = (q + rp.window + 1).min(seq.len());
                let mut nb: Vec<f64> = (lo..hi).filter(|&j| j != q).map(|j| seq[j].1).collect();
                let med = median(&mut nb);
                if med.is_finite() && med != 0.0 {
                    res.push((i, seq[q].2, seq[q].0, (seq[q].1 - med) / med, med));
                }
            }
        }
    }
    if res.is_empty() {
        return (Vec::new(), None);
    }
    let mut abs: Vec<f64> = res.iter().map(|r| r.3.abs()).collect();
    let sigma = 1.4826 * median(&mut abs);
    if !(sigma > 0.0) {
        return (Vec::new(), None);
    }
    let step = median(&mut steps);
    if sigma < rp.min_noise_to_step * step {
        return (
            Vec::new(),
            Some(format!(
                "robust training off: the points scatter by σ = {:.2} % about their neighbours, under {} × the curves' median change per clock step ({:.2} %), so a neighbour median would flag the curves' shape",
                sigma * 100.0,
                rp.min_noise_to_step,
                step * 100.0
            )),
        );
    }
    let mut out = Vec::new();
    for (i, k, clock, r, med) in res {
        let u = r / (rp.c * sigma);
        let w = if u.abs() < 1.0 {
            (1.0 - u * u).powi(2)
        } else {
            0.0
        };
        match k {
            Some(k) => {
                d.prior[[i, k]] = w;
                if w == 0.0 {
                    out.push((i, format!("at clock {clock}: {:+.1} %", r * 100.0)));
                }
            }
            None if w == 0.0 => {
                out.push((
                    i,
                    format!("baseline {:.4} -> {med:.4} ({:+.1} %)", d.tb[i], r * 100.0),
                ));
                d.tb[i] = med;
            }
            None => {}
        }
    }
    (out, None)
}

/// Predicted values of workload row `i` at every setting.
fn predict_row(d: &Data, fit: &Fit, s: f64, i: usize) -> Vec<f64> {
    let z = fit.z(|f| d.x[[i, f]]);
    (0..d.settings.len())
        .map(|k| {
            let h: f64 = z.iter().zip(fit.w.row(k)).map(|(a, b)| a * b).sum();
            s + (d.tb[i] - s) * h
        })
        .collect()
}

/// Mean absolute relative error of rows `test` under `fit`, and the number of points.
fn errors(d: &Data, fit: &Fit, s: f64, test: &[usize]) -> (f64, usize) {
    let mut sum = 0.0;
    let mut n = 0;
    for &i in test {
        for (k, p) in predict_row(d, fit, s, i).into_iter().enumerate() {
            let t = d.t[[i, k]];
            if t.is_finite() && t != 0.0 {
                sum += ((p - t) / t).abs();
                n += 1;
            }
        }
    }
    (sum, n)
}

/// Inner cross-validated MAPE (fraction) of `feats` over `rows`.
fn inner_cv(d: &Data, rows: &[usize], feats: &[usize], s: f64, p: &ScalingParams) -> f64 {
    let folds = rows.len().min(p.inner_folds.max(2));
    let mut sum = 0.0;
    let mut n = 0;
    for f in 0..folds {
        let test: Vec<usize> = rows
            .iter()
            .enumerate()
            .filter(|(r, _)| r % folds == f)
            .map(|(_, &i)| i)
            .collect();
        let train: Vec<usize> = rows
            .iter()
            .enumerate()
            .filter(|(r, _)| r % folds != f)
            .map(|(_, &i)| i)
            .collect();
        match fit_subset(d, &train, feats, s, p) {
            Some(fit) => {
                let (e, c) = errors(d, &fit, s, &test);
                sum += e;
                n += c;
            }
            None => return f64::INFINITY,
        }
    }
    if n == 0 {
        f64::INFINITY
    } else {
        sum / n as f64
    }
}

/// The static part minimising the training MAPE of `feats` (power), or 0 (time).
fn search_static(d: &Data, rows: &[usize], feats: &[usize], p: &ScalingParams, on: bool) -> f64 {
    if !on || p.static_grid < 2 {
        return 0.0;
    }
    let top = 0.95
        * rows
            .iter()
            .map(|&i| d.tb[i])
            .fold(f64::INFINITY, f64::min)
            .max(0.0);
    let mut best = (f64::INFINITY, 0.0);
    for g in 0..p.static_grid {
        let s = top * g as f64 / (p.static_grid - 1) as f64;
        if let Some(fit) = fit_subset(d, rows, feats, s, p) {
            let (e, n) = errors(d, &fit, s, rows);
            let e = e / n.max(1) as f64;
            if e < best.0 {
                best = (e, s);
            }
        }
    }
    best.1
}

/// The baseline setting: `params.baseline`, or every knob at its highest value in the set.
fn baseline_setting(points: &[Point], params: &ScalingParams) -> Knobs {
    match &params.baseline {
        Some(b) => b.clone(),
        None => {
            let mut b = Knobs::new();
            for p in points {
                for (k, v) in &p.knobs {
                    let e = b.entry(k.clone()).or_insert(*v);
                    *e = e.max(*v);
                }
            }
            b
        }
    }
}

/// Every workload measured at the baseline: its finite targets and its features there.
fn baselines_at(
    meta: &SetMeta,
    points: &[Point],
    baseline: &Knobs,
) -> BTreeMap<String, ScalingBaseline> {
    let mut baselines = BTreeMap::new();
    for p in points.iter().filter(|p| same_knobs(&p.knobs, baseline)) {
        let targets = SCALING_TARGETS
            .iter()
            .filter_map(|t| {
                p.target(t)
                    .filter(|v| v.is_finite())
                    .map(|v| (t.to_string(), v))
            })
            .collect();
        baselines.insert(
            p.workload.clone(),
            ScalingBaseline {
                targets,
                features: baseline_features(meta, p),
            },
        );
    }
    baselines
}

/// Candidate features: those present at every baseline (training and predicted workloads),
/// narrowed to `params.candidates` when given.
fn candidate_features(
    baselines: &BTreeMap<String, ScalingBaseline>,
    params: &ScalingParams,
) -> Vec<String> {
    let mut cands: Vec<String> = baselines
        .values()
        .next()
        .map(|b| b.features.keys().cloned().collect())
        .unwrap_or_default();
    cands.retain(|c| baselines.values().all(|b| b.features.contains_key(c)));
    if !params.candidates.is_empty() {
        cands.retain(|c| params.candidates.contains(c));
    }
    cands
}

/// What every target's fit shares.
struct Shared<'a> {
    meta: &'a SetMeta,
    points: &'a [Point],
    params: &'a ScalingParams,
    baseline: &'a Knobs,
    baselines: &'a BTreeMap<String, ScalingBaseline>,
    /// Candidate feature names.
    cands: &'a [String],
    /// The clock knob of the baseline, if any.
    clock_knob: Option<&'a str>,
}

/// Target `t`'s training data: the workloads with a baseline value and at least one other
/// point, the target reliable. Returns the data, the training workloads' names (in the
/// order of its rows) and the settings' groups (other knobs than the clock); `None` when no
/// workload qualifies.
fn target_data(sh: &Shared, t: &str) -> Option<(Data, Vec<String>, Vec<Knobs>)> {
    let Shared {
        meta,
        points,
        baseline,
        baselines,
        cands,
        clock_knob,
        ..
    } = *sh;
    let mut settings: Vec<Knobs> = Vec::new();
    let mut by_w: BTreeMap<&str, Vec<(usize, f64)>> = BTreeMap::new();
    for p in points {
        if same_knobs(&p.knobs, baseline) || !meta.is_reliable(t, &p.workload) {
            continue;
        }
        let Some(v) = p.target(t).filter(|v| v.is_finite()) else {
            continue;
        };
        if !baselines
            .get(&p.workload)
            .is_some_and(|b| b.targets.contains_key(t))
        {
            continue;
        }
        let k = match settings.iter().position(|s| *s == p.knobs) {
            Some(k) => k,
            None => {
                settings.push(p.knobs.clone());
                settings.len() - 1
            }
        };
        by_w.entry(&p.workload).or_default().push((k, v));
    }
    if by_w.is_empty() {
        return None;
    }
    let names: Vec<String> = by_w.keys().map(|w| w.to_string()).collect();
    let n = names.len();
    let mut tm = Array2::from_elem((n, settings.len()), f64::NAN);
    for (i, pts) in by_w.values().enumerate() {
        for (k, v) in pts {
            tm[[i, *k]] = *v;
        }
    }
    let mut x = Array2::zeros((n, cands.len()));
    for (i, w) in names.iter().enumerate() {
        for (j, c) in cands.iter().enumerate() {
            x[[i, j]] = baselines[w].features[c];
        }
    }
    let mut group_keys: Vec<Knobs> = Vec::new();
    let mut group = Vec::new();
    let mut clock = Vec::new();
    for s in &settings {
        let mut other = s.clone();
        let c = clock_knob.and_then(|k| other.remove(k)).unwrap_or(0.0);
        clock.push(c);
        let g = match group_keys.iter().position(|o| *o == other) {
            Some(g) => g,
            None => {
                group_keys.push(other);
                group_keys.len() - 1
            }
        };
        group.push(g);
    }
    let d = Data {
        tb: names.iter().map(|w| baselines[w].targets[t]).collect(),
        x,
        settings,
        clock,
        group,
        prior: Array2::ones(tm.dim()),
        t: tm,
    };
    Some((d, names, group_keys))
}

/// Screen the candidates: `|Spearman ρ|` of each with the mean response (the measured
/// values less the static part `s0`, over the baseline's), the `screen_top` strongest first.
fn screen_candidates(d: &Data, s0: f64, params: &ScalingParams) -> Vec<(usize, f64)> {
    let n = d.tb.len();
    let resp: Vec<f64> = (0..n)
        .map(|i| {
            let v: Vec<f64> =
                d.t.row(i)
                    .iter()
                    .filter(|v| v.is_finite())
                    .map(|v| (v - s0) / (d.tb[i] - s0))
                    .collect();
            v.iter().sum::<f64>() / v.len().max(1) as f64
        })
        .collect();
    let mut screened: Vec<(usize, f64)> = (0..d.x.ncols())
        .filter_map(|j| {
            let col: Vec<f64> = d.x.column(j).to_vec();
            spearman(&col, &resp).map(|r| (j, r.abs()))
        })
        .filter(|(_, r)| r.is_finite())
        .collect();
    screened.sort_by(|a, b| b.1.total_cmp(&a.1));
    screened.truncate(params.screen_top);
    screened
}

/// Forward selection of features among the screened candidates, by inner cross-validation
/// error: a feature is added while it lowers the error by at least `min_gain`, up to
/// `max_features`. Needs three training workloads (none selected otherwise). Returns the
/// selected features and the steps (errors in %).
fn select_features(
    d: &Data,
    rows: &[usize],
    screened: &[(usize, f64)],
    cands: &[String],
    s0: f64,
    params: &ScalingParams,
) -> (Vec<usize>, Vec<SelectionStep>) {
    let n = rows.len();
    let mut feats: Vec<usize> = Vec::new();
    let mut selection = Vec::new();
    if n >= 3 {
        let mut current = inner_cv(d, rows, &feats, s0, params);
        selection.push(SelectionStep {
            scores: vec![("(none)".into(), current * 100.0)],
            added: None,
        });
        while feats.len() < params.max_features {
            let scores: Vec<(usize, f64)> = screened
                .iter()
                .filter(|(j, _)| !feats.contains(j))
                .map(|(j, _)| {
                    let mut f = feats.clone();
                    f.push(*j);
                    (*j, inner_cv(d, rows, &f, s0, params))
                })
                .collect();
            let best = scores
                .iter()
                .copied()
                .filter(|(_, e)| e.is_finite())
                .min_by(|a, b| a.1.total_cmp(&b.1));
            let added = best.filter(|(_, e)| *e < current * (1.0 - params.min_gain));
            selection.push(SelectionStep {
                scores: scores
                    .iter()
                    .map(|(j, e)| (cands[*j].clone(), e * 100.0))
                    .collect(),
                added: added.map(|(j, _)| cands[j].clone()),
            });
            match added {
                Some((j, e)) => {
                    feats.push(j);
                    current = e;
                }
                None => break,
            }
        }
    }
    (feats, selection)
}

/// Fit target `t`; `None` when no workload has a baseline value and another point of it.
///
/// # Errors
/// [`ModelError::Fit`] when the weighted least-squares fit fails.
fn fit_target(sh: &Shared, t: &str) -> Result<Option<TargetModel>, ModelError> {
    let (params, cands) = (sh.params, sh.cands);
    let Some((mut d, names, group_keys)) = target_data(sh, t) else {
        return Ok(None);
    };
    let n = names.len();
    let (outliers, robust_note) = match &params.robust {
        Some(rp) => {
            let mut other = sh.baseline.clone();
            let base_clock = sh.clock_knob.and_then(|k| other.remove(k)).unwrap_or(0.0);
            let base_group = group_keys.iter().position(|o| *o == other);
            let (set_aside, note) = robust_prior(&mut d, base_group, base_clock, rp);
            let set_aside = set_aside
                .into_iter()
                .map(|(i, what)| format!("{} {what}", names[i]))
                .collect();
            (set_aside, note)
        }
        None => (Vec::new(), None),
    };
    let rows: Vec<usize> = (0..n).collect();
    let with_static = t == "power_w";
    let s0 = search_static(&d, &rows, &[], params, with_static);
    let screened = screen_candidates(&d, s0, params);
    let (feats, selection) = select_features(&d, &rows, &screened, cands, s0, params);
    let s = search_static(&d, &rows, &feats, params, with_static);
    let fit = fit_subset(&d, &rows, &feats, s, params).ok_or_else(|| ModelError::Fit {
        model: MODEL.into(),
        what: format!("{t}: the weighted least-squares fit failed"),
    })?;
    let (e, c) = errors(&d, &fit, s, &rows);
    Ok(Some(TargetModel {
        target: t.to_string(),
        static_part: s,
        features: feats.iter().map(|&j| cands[j].clone()).collect(),
        means: fit.means.clone(),
        stds: fit.stds.clone(),
        mins: fit.mins.clone(),
        maxs: fit.maxs.clone(),
        settings: d
            .settings
            .iter()
            .enumerate()
            .map(|(k, kn)| SettingWeights {
                knobs: kn.clone(),
                weights: fit.w.row(k).to_vec(),
            })
            .collect(),
        training_workloads: names,
        selection,
        training_mape_pct: e / c.max(1) as f64 * 100.0,
        outliers,
        robust_note,
    }))
}

/// Fit the `scaling` model on mean points (see the module docs).
///
/// # Errors
/// [`ModelError::NotEnoughData`] when no workload has a point at the baseline and at another
/// setting, or a target cannot be fitted.
pub fn fit(
    meta: &SetMeta,
    points: &[Point],
    params: &ScalingParams,
) -> Result<ScalingModel, ModelError> {
    let baseline = baseline_setting(points, params);
    let clock_knob = super::analytic::FREQ_KNOBS
        .iter()
        .find(|k| baseline.contains_key(**k))
        .map(|k| k.to_string());
    let baselines = baselines_at(meta, points, &baseline);
    if baselines.is_empty() {
        return Err(ModelError::NotEnoughData {
            model: MODEL.into(),
            what: format!("no point at the baseline {}", knob_key(&baseline)),
        });
    }
    let cands = candidate_features(&baselines, params);
    let sh = Shared {
        meta,
        points,
        params,
        baseline: &baseline,
        baselines: &baselines,
        cands: &cands,
        clock_knob: clock_knob.as_deref(),
    };
    let mut targets = Vec::new();
    for t in SCALING_TARGETS {
        if let Some(tm) = fit_target(&sh, t)? {
            targets.push(tm);
        }
    }
    if targets.is_empty() {
        return Err(ModelError::NotEnoughData {
            model: MODEL.into(),
            what: format!(
                "no workload has a point at the baseline {} and at another setting",
                knob_key(&baseline)
            ),
        });
    }
    let unreliable = super::features::unreliable_by_target(meta);
    Ok(ScalingModel {
        params: params.clone(),
        baseline,
        baselines,
        targets,
        unreliable,
    })
}

impl ScalingModel {
    fn reliable(&self, target: &str, workload: &str) -> bool {
        super::features::is_reliable(&self.unreliable, target, workload)
    }

    /// Predict `workload` at `knobs` from its baseline point.
    ///
    /// # Errors
    /// [`ModelError::UnknownWorkload`] when the workload has no baseline point;
    /// [`ModelError::UnknownSetting`] for a setting no training workload was measured at.
    pub fn predict(&self, workload: &str, knobs: &Knobs) -> Result<Prediction, ModelError> {
        let b = self
            .baselines
            .get(workload)
            .ok_or_else(|| ModelError::UnknownWorkload {
                workload: workload.into(),
                known: super::name_list(&self.baselines.keys().cloned().collect::<Vec<_>>()),
            })?;
        let at_base = same_knobs(knobs, &self.baseline);
        let mut out = Prediction::default();
        for tm in &self.targets {
            if !self.reliable(&tm.target, workload) {
                continue;
            }
            let Some(tb) = b.targets.get(&tm.target).copied() else {
                continue;
            };
            let v = if at_base {
                tb
            } else {
                let sw = tm
                    .settings
                    .iter()
                    .find(|s| same_knobs(knobs, &s.knobs) && s.knobs.len() == knobs.len())
                    .ok_or_else(|| ModelError::UnknownSetting {
                        workload: workload.into(),
                        knobs: knob_key(knobs),
                        known: tm
                            .settings
                            .iter()
                            .map(|s| knob_key(&s.knobs))
                            .collect::<Vec<_>>()
                            .join("; "),
                    })?;
                // A model file is input: its parts are checked, not trusted (a damaged file
                // must give an error, not a panic in indexing or f64::clamp).
                let inconsistent = |what: String| ModelError::Inconsistent {
                    model: "scaling".into(),
                    what: format!("target `{}`: {what}", tm.target),
                };
                let n = tm.features.len();
                if tm.means.len() < n || tm.stds.len() < n || tm.mins.len() < n || tm.maxs.len() < n
                {
                    return Err(inconsistent(format!(
                        "{n} features, {} means, {} stds, {} mins and {} maxs",
                        tm.means.len(),
                        tm.stds.len(),
                        tm.mins.len(),
                        tm.maxs.len()
                    )));
                }
                let Some(&w0) = sw.weights.first() else {
                    return Err(inconsistent("a setting without weights".into()));
                };
                let mut h = w0;
                for (j, f) in tm.features.iter().enumerate() {
                    let Some(w) = sw.weights.get(j + 1) else {
                        break;
                    };
                    let (lo, hi) = (tm.mins[j], tm.maxs[j]);
                    if lo.is_nan() || hi.is_nan() || lo > hi {
                        return Err(inconsistent(format!("the range of `{f}` is [{lo}, {hi}]")));
                    }
                    let x = b.features.get(f).copied().unwrap_or(tm.means[j]);
                    h += w * (x.clamp(lo, hi) - tm.means[j]) / tm.stds[j];
                }
                tm.static_part + (tb - tm.static_part) * h
            };
            match tm.target.as_str() {
                "power_w" => out.power_w = Some(v),
                "time_s" => out.time_s = Some(v),
                _ => {}
            }
        }
        if let (Some(p), Some(t)) = (out.power_w, out.time_s) {
            out.energy_j = Some(p * t);
        }
        Ok(out)
    }

    /// What was fitted and why, for `powerperf fit --explain`.
    pub fn explain(&self) -> String {
        let mut s = format!(
            "scaling model: T(k) = s + (T(b) − s)·(w0(k) + Σ w_j(k)·z_j), baseline {}, loss {:?}, smoothing {:?}\n",
            knob_key(&self.baseline),
            self.params.loss,
            self.params.smooth_degree
        );
        for t in &self.targets {
            s += &format!(
                "{}: s = {:.3}, features [{}], {} training workloads, training MAPE {:.2} %\n",
                t.target,
                t.static_part,
                t.features.join(", "),
                t.training_workloads.len(),
                t.training_mape_pct
            );
            if !t.outliers.is_empty() {
                s += &format!(
                    "  robust training set aside {} training point(s): {}\n",
                    t.outliers.len(),
                    t.outliers.join("; ")
                );
            }
            if let Some(note) = &t.robust_note {
                s += &format!("  {note}\n");
            }
            for (i, st) in t.selection.iter().enumerate() {
                let sc: Vec<String> = st
                    .scores
                    .iter()
                    .map(|(f, e)| format!("{f} {e:.2} %"))
                    .collect();
                s += &format!(
                    "  step {i}: inner-CV MAPE {}{}\n",
                    sc.join(", "),
                    st.added
                        .as_ref()
                        .map_or(String::new(), |a| format!(" -> add {a}"))
                );
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::eval::workload_holdout;
    use crate::models::{FitParams, ModelKind};
    use crate::store::set::CounterKind;

    const S: f64 = 20.0;
    const CLOCKS: [f64; 6] = [500.0, 700.0, 900.0, 1100.0, 1300.0, 1500.0];

    /// Known answer: `P_i(f) = S + (P_i(1500) − S)·(a(f) + b(f)·mem_i)`, with a noise counter
    /// `junk` that carries no information, and time `t_i(f) = t_i(1500)·(1500/f)^(1 − mem_i)`.
    fn synthetic() -> (SetMeta, Vec<Point>) {
        synthetic_at(&CLOCKS)
    }

    fn synthetic_at(clocks: &[f64]) -> (SetMeta, Vec<Point>) {
        let mut meta = SetMeta::default();
        meta.counters.insert("mem".into(), CounterKind::Rate);
        meta.counters.insert("junk".into(), CounterKind::Rate);
        let mut pts = Vec::new();
        for i in 0..12 {
            let mem = (i as f64 * 0.37) % 1.0;
            let junk = ((i * 7) % 5) as f64;
            // Two workloads at 80 W, so the smallest training baseline is 80 W in every fold
            // and the static grid (steps of 0.95·80/19 = 4 W) holds S.
            let pb = 80.0 + 13.0 * (i % 6) as f64;
            for &f in clocks {
                let u = f / 1500.0;
                let a = u.powi(2);
                let b = 0.5 * (1.0 - u);
                let p = S + (pb - S) * (a + b * mem);
                let t = (1.0 + i as f64) * (1500.0 / f).powf(1.0 - mem);
                pts.push(Point {
                    workload: format!("w{i}"),
                    knobs: [("core_freq_mhz".to_string(), f)].into_iter().collect(),
                    time_s: Some(t),
                    power_w: Some(p),
                    energy_j: Some(p * t),
                    counters: [("mem".to_string(), mem), ("junk".to_string(), junk)]
                        .into_iter()
                        .collect(),
                    ..Point::default()
                });
            }
        }
        (meta, pts)
    }

    fn base() -> Knobs {
        [("core_freq_mhz".to_string(), 1500.0)]
            .into_iter()
            .collect()
    }

    #[test]
    fn recovers_static_part_weights_and_feature() {
        let (meta, pts) = synthetic();
        let params = ScalingParams {
            static_grid: 20,
            loss: Loss::L2Relative,
            ..ScalingParams::default()
        };
        let m = fit(&meta, &pts, &params).unwrap();
        let pw = m.targets.iter().find(|t| t.target == "power_w").unwrap();
        assert_eq!(pw.features, vec!["mem".to_string()]);
        // The grid holds 0.95·80·g/19 = 4·g W; S = 20 W is on it (g = 5).
        assert!((pw.static_part - S).abs() < 1e-9, "{}", pw.static_part);
        assert!(pw.training_mape_pct < 1e-8, "{}", pw.training_mape_pct);
        // At 500 MHz: h = a + b·mem; weights on the standardised feature reproduce it.
        let p = m
            .predict(
                "w3",
                &[("core_freq_mhz".to_string(), 500.0)].into_iter().collect(),
            )
            .unwrap();
        let mem = (3.0 * 0.37f64) % 1.0;
        let want = S + (80.0 + 13.0 * 3.0 - S) * ((1.0f64 / 3.0).powi(2) + 0.5 * (2.0 / 3.0) * mem);
        assert!((p.power_w.unwrap() - want).abs() < 1e-6 * want);
    }

    #[test]
    fn workload_holdout_on_exact_data_is_exact_for_power() {
        let (meta, pts) = synthetic();
        let mut params = FitParams::default();
        params.scaling.loss = Loss::L2Relative;
        let e = workload_holdout(ModelKind::Scaling, &meta, &pts, &base(), &params);
        assert!(e.failures.is_empty(), "{:?}", e.failures);
        assert_eq!(e.summary.points, 12 * 5);
        // Exact for every workload whose `mem` lies inside the other workloads' range (the
        // two extremes, w0 and w8, are clipped to it by design).
        for r in e
            .results
            .iter()
            .filter(|r| r.workload != "w0" && r.workload != "w8")
        {
            let (p, m) = (r.predicted.power_w.unwrap(), r.measured.power_w.unwrap());
            assert!(
                ((p - m) / m).abs() < 1e-6,
                "{} {:?}: {p} vs {m}",
                r.workload,
                r.knobs
            );
        }
        // Time is not of the model's form (a power law in f), so it is only approximate.
        assert!(e.summary.targets["time_s"].mape_pct < 5.0);
    }

    #[test]
    fn robust_loss_and_smoothing_tolerate_an_outlier() {
        let (meta, mut pts) = synthetic();
        // One measurement far below its neighbours (as the V100 set has).
        let bad = pts
            .iter_mut()
            .find(|p| p.workload == "w2" && p.knobs["core_freq_mhz"] == 900.0)
            .unwrap();
        bad.power_w = Some(bad.power_w.unwrap() * 0.4);
        for smooth in [None, Some(2)] {
            let params = ScalingParams {
                smooth_degree: smooth,
                ..ScalingParams::default()
            };
            let m = fit(&meta, &pts, &params).unwrap();
            let p = m
                .predict(
                    "w5",
                    &[("core_freq_mhz".to_string(), 900.0)].into_iter().collect(),
                )
                .unwrap()
                .power_w
                .unwrap();
            let truth = synthetic()
                .1
                .into_iter()
                .find(|p| p.workload == "w5" && p.knobs["core_freq_mhz"] == 900.0)
                .unwrap()
                .power_w
                .unwrap();
            // a(f) = u² and b(f) are quadratic in f, so degree 2 represents them exactly.
            assert!(
                ((p - truth) / truth).abs() < 0.01,
                "{smooth:?}: {p} vs {truth}"
            );
        }
    }

    /// Known answer for robust training: on 11 clocks, one training workload's baseline is 30 %
    /// high and another's 900 MHz point 60 % low. Robust training finds exactly those two,
    /// replaces the bad baseline by its neighbours' median and recovers another workload's curve; without it the
    /// bad baseline bends the shape learned from that workload.
    #[test]
    fn robust_training_sets_aside_an_outlying_baseline_and_point() {
        // A dense sweep (10 MHz steps, as dense sweeps are what the check is for) with a
        // deterministic ±0.5 % scatter, so that the MAD scale is that of the scatter.
        let clocks: Vec<f64> = (100..=150).map(|c| c as f64 * 10.0).collect();
        let (meta, mut clean) = synthetic_at(&clocks);
        for (n, p) in clean.iter_mut().enumerate() {
            p.power_w = Some(p.power_w.unwrap() * (1.0 + 0.005 * (n as f64 * 2.3).sin()));
        }
        let mut pts = clean.clone();
        let at = |pts: &mut Vec<Point>, w: &str, f: f64| -> usize {
            pts.iter()
                .position(|p| p.workload == w && p.knobs["core_freq_mhz"] == f)
                .unwrap()
        };
        let b = at(&mut pts, "w2", 1500.0);
        pts[b].power_w = Some(pts[b].power_w.unwrap() * 1.3);
        let o = at(&mut pts, "w3", 1200.0);
        pts[o].power_w = Some(pts[o].power_w.unwrap() * 0.4);
        let knobs: Knobs = [("core_freq_mhz".to_string(), 1100.0)]
            .into_iter()
            .collect();
        let truth = clean[at(&mut clean.clone(), "w5", 1100.0)].power_w.unwrap();
        let err = |robust: Option<RobustParams>| {
            let params = ScalingParams {
                robust,
                ..ScalingParams::default()
            };
            let m = fit(&meta, &pts, &params).unwrap();
            let p = m.predict("w5", &knobs).unwrap().power_w.unwrap();
            (m, ((p - truth) / truth).abs())
        };
        let (m, e_robust) = err(Some(RobustParams::default()));
        let pw = m.targets.iter().find(|t| t.target == "power_w").unwrap();
        let (m0, e_plain) = err(None);
        assert_eq!(pw.outliers.len(), 2, "{:?}", pw.outliers);
        assert!(pw.outliers.iter().any(|o| o.starts_with("w2 baseline")));
        assert!(pw
            .outliers
            .iter()
            .any(|o| o.starts_with("w3 at clock 1200")));
        assert!(e_robust < 0.01, "robust: {e_robust}");
        let m = m0;
        assert!(m.targets.iter().all(|t| t.outliers.is_empty()));
        assert!(
            e_plain > 2.0 * e_robust,
            "plain {e_plain} robust {e_robust}"
        );
        // With the default six clocks (fewer than `min_clocks`) nothing is set aside.
        let (meta6, mut pts6) = synthetic();
        let b = at(&mut pts6, "w2", 1500.0);
        pts6[b].power_w = Some(pts6[b].power_w.unwrap() * 1.3);
        let m = fit(&meta6, &pts6, &ScalingParams::default()).unwrap();
        assert!(m.targets.iter().all(|t| t.outliers.is_empty()));
        // A sparse sweep of precise points (16 clocks 40 MHz apart, ±0.1 % scatter, as the
        // Titan X set): the curves change far more per step than they scatter, so the check
        // stays off and says why, instead of flagging the ends of every curve.
        let sparse: Vec<f64> = (0..16).map(|i| 600.0 + 40.0 * i as f64).collect();
        let (meta_s, mut pts_s) = synthetic_at(&sparse);
        for (n, p) in pts_s.iter_mut().enumerate() {
            p.power_w = Some(p.power_w.unwrap() * (1.0 + 0.001 * (n as f64 * 2.3).sin()));
        }
        let m = fit(&meta_s, &pts_s, &ScalingParams::default()).unwrap();
        let pw = m.targets.iter().find(|t| t.target == "power_w").unwrap();
        assert!(pw.outliers.is_empty(), "{:?}", pw.outliers);
        assert!(pw
            .robust_note
            .as_deref()
            .is_some_and(|n| n.starts_with("robust training off")));
        // The dense, noisier sweep above ran the check.
        let (m, _) = err(Some(RobustParams::default()));
        assert!(m
            .targets
            .iter()
            .all(|t| t.robust_note.is_none() || t.target != "power_w"));
    }

    #[test]
    fn held_out_points_never_reach_training() {
        let (meta, clean) = synthetic();
        let mut poisoned = clean.clone();
        for p in poisoned
            .iter_mut()
            .filter(|p| p.workload == "w4" && p.knobs["core_freq_mhz"] != 1500.0)
        {
            p.power_w = Some(1e9);
            p.time_s = Some(-3.0);
            p.counters.insert("mem".into(), 1e6);
        }
        let params = FitParams::default();
        let a = workload_holdout(ModelKind::Scaling, &meta, &clean, &base(), &params);
        let b = workload_holdout(ModelKind::Scaling, &meta, &poisoned, &base(), &params);
        let pick = |e: &crate::models::eval::Evaluation| -> Vec<Prediction> {
            e.results
                .iter()
                .filter(|r| r.workload == "w4")
                .map(|r| r.predicted)
                .collect()
        };
        assert_eq!(pick(&a).len(), 5);
        assert_eq!(pick(&a), pick(&b));
    }

    #[test]
    fn no_baseline_point_is_an_error() {
        let (meta, pts) = synthetic();
        let params = ScalingParams {
            baseline: Some(
                [("core_freq_mhz".to_string(), 1234.0)]
                    .into_iter()
                    .collect(),
            ),
            ..ScalingParams::default()
        };
        let e = fit(&meta, &pts, &params).unwrap_err().to_string();
        assert!(e.contains("core_freq_mhz=1234"), "{e}");
    }
}
