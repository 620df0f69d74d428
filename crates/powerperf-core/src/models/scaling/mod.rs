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
//! Energy is `P·t`. The held-out rules (docs/architecture.md): in workload holdout the held-out
//! workload contributes only its baseline point (its targets and counters there); the
//! shape, `s` and the features come from the other workloads.

use super::features::{knob_key, matches_setting, rates, spearman};
use super::{Knobs, ModelError, Prediction};
use ndarray::Array2;
use powerperf_format::set::{Point, SetMeta};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

mod neighbors;
mod predict;
mod weights;
pub use neighbors::{NeighborsFit, NeighborsParams, Weighting};
pub use weights::weighted_least_squares;
use weights::{
    errors, fit_subset, inner_cv, inner_cv_predictions, robust_prior, search_static,
    search_static_from, Data,
};

/// Targets the model fits directly (energy is `P·t`).
pub const SCALING_TARGETS: [&str; 2] = ["power_w", "time_s"];

const MODEL: &str = "scaling";

/// [`Transfer::Choose`]'s label for the global transfer without features.
pub const GLOBAL_NO_FEATURES: &str = "global_no_features";

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

/// How a target's response is carried over from the training workloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Transfer {
    /// The global per-setting linear model in the selected features (`scaling`).
    Global,
    /// The K nearest training workloads' ratios ([`neighbors`], `--model neighbors`).
    Neighbors,
    /// The mean of the two predictions.
    Blend,
    /// Per target, whichever of the three has the lowest inner cross-validated MAPE on the
    /// training workloads (`auto` in workload holdout).
    Choose,
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
    /// The transfer; `None`: [`Transfer::Global`] (`--model neighbors` sets
    /// [`Transfer::Neighbors`], `auto` in workload holdout [`Transfer::Choose`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transfer: Option<Transfer>,
    /// Parameters of the local transfer ([`neighbors`]).
    pub neighbors: NeighborsParams,
    /// [`Transfer::Choose`] scores the transfers by nested cross-validation (each inner
    /// fold re-selects the static part, features and K on its own training workloads; Varma
    /// & Simon, BMC Bioinformatics 7:91, 2006) when the target has at most this many
    /// measured training points; above it, by the selections' own inner-CV predictions
    /// (optimistic for the more flexible choice). A compute budget, fixed a priori: the
    /// nested scores cost a full `scaling` fit per fold, which keeps workload holdout on a
    /// 1,000-point set (`holdout-speed-bench`) from staying under 10 s.
    pub nested_max_points: usize,
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
            transfer: None,
            neighbors: NeighborsParams::default(),
            nested_max_points: 600,
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

/// `fit --explain`'s lines for forward-selection steps, each `PREFIX i: inner-CV MAPE …`.
fn selection_steps(prefix: &str, steps: &[SelectionStep]) -> String {
    let mut s = String::new();
    for (i, st) in steps.iter().enumerate() {
        let sc: Vec<String> = st
            .scores
            .iter()
            .map(|(f, e)| format!("{f} {e:.2} %"))
            .collect();
        s += &format!(
            "{prefix} {i}: inner-CV MAPE {}{}\n",
            sc.join(", "),
            st.added
                .as_ref()
                .map_or(String::new(), |a| format!(" -> add {a}"))
        );
    }
    s
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
    /// The transfer this target predicts with (`None`: [`Transfer::Global`], as in files
    /// written before it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transfer: Option<Transfer>,
    /// The local transfer, where [`Self::transfer`] uses it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub neighbors: Option<NeighborsFit>,
    /// With [`Transfer::Choose`]: the inner cross-validated MAPE (percent) of each candidate
    /// on the training workloads (`global_no_features`, `global`, `neighbors`, `blend`; files
    /// before stop 29 have the last three), which chose [`Self::transfer`] (the first is the
    /// global transfer with no features).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub choice: Vec<(String, f64)>,
    /// With [`Transfer::Choose`]: the label in [`Self::choice`] taken (issue 41's rule,
    /// [`super::select`]); absent in files written before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chosen: Option<String>,
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

/// The clock knob of a baseline setting: the first of the analytic model's clock knobs it
/// names.
fn clock_knob_of(baseline: &Knobs) -> Option<&'static str> {
    super::analytic::FREQ_KNOBS
        .iter()
        .find(|k| baseline.contains_key(**k))
        .copied()
}

/// Linear interpolation at clock `c` between the nearest of `points` (any key, clock, value)
/// strictly below and strictly above it; `None` without one on each side (never
/// extrapolated). The neighbours' sources ([`neighbors::sources`]) and `predict` between
/// training clocks share it.
pub(super) fn between<K: Copy>(
    points: impl Iterator<Item = (K, f64)>,
    c: f64,
    value: impl Fn(K) -> Result<f64, ModelError>,
) -> Result<Option<f64>, ModelError> {
    let mut lo: Option<(K, f64)> = None;
    let mut hi: Option<(K, f64)> = None;
    for (k, x) in points {
        if x < c && lo.is_none_or(|(_, l)| x > l) {
            lo = Some((k, x));
        }
        if x > c && hi.is_none_or(|(_, h)| x < h) {
            hi = Some((k, x));
        }
    }
    let (Some((kl, xl)), Some((kh, xh))) = (lo, hi) else {
        return Ok(None);
    };
    let (vl, vh) = (value(kl)?, value(kh)?);
    Ok(Some(vl + (c - xl) / (xh - xl) * (vh - vl)))
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

/// The value of feature `name` at a workload's baseline: a baseline feature, or with the
/// prefix `baseline:` one of its baseline targets (the local transfer's candidates).
fn feature_value(b: &ScalingBaseline, name: &str) -> Option<f64> {
    match name.strip_prefix("baseline:") {
        Some(t) => b.targets.get(t).copied(),
        None => b.features.get(name).copied(),
    }
}

/// The local transfer's candidates for the training workloads `names`: `cands` (the columns
/// of `d.x`), then the baseline targets every baseline has, when the parameters ask for them.
fn neighbor_candidates(sh: &Shared, d: &Data, names: &[String]) -> (Array2<f64>, Vec<String>) {
    let mut cols: Vec<String> = sh.cands.to_vec();
    if sh.params.neighbors.baseline_targets {
        for t in SCALING_TARGETS {
            if sh.baselines.values().all(|b| b.targets.contains_key(t)) {
                cols.push(format!("baseline:{t}"));
            }
        }
    }
    let mut x = Array2::zeros((names.len(), cols.len()));
    for (i, w) in names.iter().enumerate() {
        for (j, c) in cols.iter().enumerate() {
            x[[i, j]] = if j < d.x.ncols() {
                d.x[[i, j]]
            } else {
                feature_value(&sh.baselines[w], c).unwrap_or(f64::NAN)
            };
        }
    }
    (x, cols)
}

/// MAPE (fraction) of predictions `pred` against the measured `d.t`; a missing prediction
/// counts as a 100 % error.
fn cv_mape(d: &Data, pred: &Array2<f64>) -> f64 {
    let (mut sum, mut n) = (0.0, 0usize);
    for ((i, k), t) in d.t.indexed_iter() {
        if !t.is_finite() || *t == 0.0 {
            continue;
        }
        let p = pred[[i, k]];
        sum += if p.is_finite() {
            ((p - t) / t).abs()
        } else {
            1.0
        };
        n += 1;
    }
    if n == 0 {
        f64::INFINITY
    } else {
        sum / n as f64
    }
}

/// Each candidate's MAPE (fraction) per inner fold (training workload `i` in fold
/// `i mod folds`, the folds of [`inner_cv`] and [`nested_predictions`]), over the fold's
/// measured points that every candidate predicts (NaN where a fold has none), and its MAPE
/// pooled over those points of every fold (NaN where there are none).
fn fold_mapes(d: &Data, preds: &[&Array2<f64>], folds: usize) -> (Vec<Vec<f64>>, Vec<f64>) {
    let folds = folds.max(1);
    let mut sums = vec![vec![(0.0, 0usize); folds]; preds.len()];
    for ((i, k), t) in d.t.indexed_iter() {
        if !t.is_finite() || *t == 0.0 || !preds.iter().all(|p| p[[i, k]].is_finite()) {
            continue;
        }
        for (c, p) in preds.iter().enumerate() {
            let s = &mut sums[c][i % folds];
            s.0 += ((p[[i, k]] - t) / t).abs();
            s.1 += 1;
        }
    }
    let pooled = sums
        .iter()
        .map(|s| {
            let (e, n) = s.iter().fold((0.0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
            if n > 0 {
                e / n as f64
            } else {
                f64::NAN
            }
        })
        .collect();
    let per_fold = sums.iter().map(|s| super::select::fold_mapes(s)).collect();
    (per_fold, pooled)
}

/// The baseline setting: `params.baseline`, or every knob at its highest value in the set.
pub(crate) fn baseline_setting(points: &[Point], params: &ScalingParams) -> Knobs {
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
    for p in points
        .iter()
        .filter(|p| matches_setting(&p.knobs, baseline))
    {
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
        if matches_setting(&p.knobs, baseline) || !meta.is_reliable(t, &p.workload) {
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

/// Each training workload's mean response `mean_k (T_i(k) − s0)/(T_i(b) − s0)` over its
/// measured settings.
fn mean_response(d: &Data, s0: f64) -> Vec<f64> {
    (0..d.tb.len())
        .map(|i| {
            let v: Vec<f64> =
                d.t.row(i)
                    .iter()
                    .filter(|v| v.is_finite())
                    .map(|v| (v - s0) / (d.tb[i] - s0))
                    .collect();
            v.iter().sum::<f64>() / v.len().max(1) as f64
        })
        .collect()
}

/// Screen the candidates: `|Spearman ρ|` of each with the mean response (the measured
/// values less the static part `s0`, over the baseline's), the `screen_top` strongest first.
fn screen_candidates(d: &Data, s0: f64, params: &ScalingParams) -> Vec<(usize, f64)> {
    let resp = mean_response(d, s0);
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

/// Nested cross-validated predictions of the global transfer, the local transfer and the
/// global transfer without features per (row, setting): each fold of [`inner_cv`]'s folds
/// refits them from scratch (static part, feature screen and selection, K) on the other
/// folds' workloads and predicts its own.
fn nested_predictions(
    d: &Data,
    xn: &Array2<f64>,
    nn: &[String],
    names: &[String],
    cands: &[String],
    params: &ScalingParams,
    with_static: bool,
) -> (Array2<f64>, Array2<f64>, Array2<f64>) {
    let n = d.tb.len();
    let folds = n.min(params.inner_folds.max(2));
    let mut g = Array2::from_elem(d.t.dim(), f64::NAN);
    let mut l = Array2::from_elem(d.t.dim(), f64::NAN);
    let mut g0 = Array2::from_elem(d.t.dim(), f64::NAN);
    for f in 0..folds {
        let train: Vec<usize> = (0..n).filter(|r| r % folds != f).collect();
        let test: Vec<usize> = (0..n).filter(|r| r % folds == f).collect();
        let sub = d.subset(&train);
        let rows: Vec<usize> = (0..train.len()).collect();
        let s0 = search_static(&sub, &rows, &[], params, with_static);
        if let Some(fit) = fit_subset(&sub, &rows, &[], s0, params) {
            weights::predict_rows_into(&mut g0, d, &fit, s0, &test);
        }
        let screened = screen_candidates(&sub, s0, params);
        let (feats, _) = select_features(&sub, &rows, &screened, cands, s0, params);
        let s = search_static_from(&sub, &rows, &feats, s0, params, with_static);
        if let Some(fit) = fit_subset(&sub, &rows, &feats, s, params) {
            weights::predict_rows_into(&mut g, d, &fit, s, &test);
        }
        let sub_names: Vec<String> = train.iter().map(|&i| names[i].clone()).collect();
        let sub_x = xn.select(ndarray::Axis(0), &train);
        let nf = neighbors::fit(
            &sub,
            &sub_x,
            nn,
            &sub_names,
            s0,
            &params.neighbors,
            params.inner_folds,
        )
        .fit;
        for &i in &test {
            let value = |name: &str| nn.iter().position(|c| c == name).map(|j| xn[[i, j]]);
            for k in 0..d.settings.len() {
                if let Ok(Some(r)) = nf.ratio(k, value) {
                    l[[i, k]] = nf.static_part + (d.tb[i] - nf.static_part) * r;
                }
            }
        }
    }
    (g, l, g0)
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
    let mode = params.transfer.unwrap_or(Transfer::Global);
    let s0 = search_static(&d, &rows, &[], params, with_static);
    // The local transfer alone needs no global feature selection: its global part (kept
    // for the file's settings) has no features.
    let (feats, selection) = if mode == Transfer::Neighbors {
        (Vec::new(), Vec::new())
    } else {
        let screened = screen_candidates(&d, s0, params);
        select_features(&d, &rows, &screened, cands, s0, params)
    };
    // Without features (the local transfer, the common response, or none selected) this is
    // `s0`.
    let s = search_static_from(&d, &rows, &feats, s0, params, with_static);
    let fit = fit_subset(&d, &rows, &feats, s, params).ok_or_else(|| ModelError::Fit {
        model: MODEL.into(),
        what: format!("{t}: the weighted least-squares fit failed"),
    })?;
    let (e, c) = errors(&d, &fit, s, &rows);
    let (nb, transfer, choice, chosen) = if mode == Transfer::Global {
        (None, None, Vec::new(), None)
    } else {
        let (xn, nn) = neighbor_candidates(sh, &d, &names);
        let nf = neighbors::fit(
            &d,
            &xn,
            &nn,
            &names,
            s0,
            &params.neighbors,
            params.inner_folds,
        );
        match mode {
            Transfer::Neighbors => (Some(nf.fit), Some(Transfer::Neighbors), Vec::new(), None),
            _ => {
                // Scored on the training workloads only, by the same folds: nested (each
                // fold's selections made without it) within the budget, else the
                // selections' own inner-CV predictions (features and K chosen on all).
                let measured = d.t.iter().filter(|v| v.is_finite()).count();
                let (g, nbp, g0) = if measured <= params.nested_max_points && n >= 3 {
                    nested_predictions(&d, &xn, &nn, &names, cands, params, with_static)
                } else {
                    (
                        inner_cv_predictions(&d, &rows, &feats, s, params),
                        nf.cv_pred.clone(),
                        inner_cv_predictions(&d, &rows, &[], s0, params),
                    )
                };
                let blend = (&g + &nbp) / 2.0;
                // The fourth candidate is the global transfer without features: the
                // training workloads' common response, the naive baseline's rule in
                // `scaling`'s form. Where no counter-informed transfer beats it on the
                // training workloads, `auto` keeps it rather than a transfer that loses to
                // it (model selection with the null model among the candidates).
                let scores = [
                    (GLOBAL_NO_FEATURES, Transfer::Global, cv_mape(&d, &g0)),
                    ("global", Transfer::Global, cv_mape(&d, &g)),
                    ("neighbors", Transfer::Neighbors, cv_mape(&d, &nbp)),
                    ("blend", Transfer::Blend, cv_mape(&d, &blend)),
                ];
                let (label, chosen) = if mode == Transfer::Blend {
                    ("blend", Transfer::Blend)
                } else {
                    // Issue 41's rule (`super::select`): the global transfer, what
                    // `--model scaling` fits, unless a challenger beats it by more than
                    // one standard error of the per-fold differences.
                    // The per-fold and pooled scores over the points every candidate
                    // predicts (the rule's e_f(c)).
                    let folds = n.min(params.inner_folds.max(2));
                    let (per_fold, pooled) = fold_mapes(&d, &[&g0, &g, &nbp, &blend], folds);
                    let c = super::select::choose(&per_fold, &pooled, 1);
                    (scores[c].0, scores[c].1)
                };
                let choice = scores
                    .iter()
                    .map(|(l, _, e)| (l.to_string(), e * 100.0))
                    .collect();
                let keep = (chosen != Transfer::Global).then_some(nf.fit);
                (keep, Some(chosen), choice, Some(label.to_string()))
            }
        }
    };
    // The null candidate won: the global transfer without features, refitted so.
    let (feats, s, fit, e, c) = if chosen.as_deref() == Some(GLOBAL_NO_FEATURES) {
        let f0 = fit_subset(&d, &rows, &[], s0, params).ok_or_else(|| ModelError::Fit {
            model: MODEL.into(),
            what: format!("{t}: the weighted least-squares fit without features failed"),
        })?;
        let (e0, c0) = errors(&d, &f0, s0, &rows);
        (Vec::new(), s0, f0, e0, c0)
    } else {
        (feats, s, fit, e, c)
    };
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
        transfer,
        neighbors: nb,
        choice,
        chosen,
    }))
}

/// Fit the local transfer alone (`--model neighbors`): [`fit`] with
/// [`Transfer::Neighbors`].
///
/// # Errors
/// As [`fit`].
pub fn fit_neighbors(
    meta: &SetMeta,
    points: &[Point],
    params: &ScalingParams,
) -> Result<ScalingModel, ModelError> {
    let mut p = params.clone();
    p.transfer = Some(Transfer::Neighbors);
    fit(meta, points, &p)
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
    let clock_knob = clock_knob_of(&baseline).map(str::to_string);
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

#[cfg(test)]
mod tests;
