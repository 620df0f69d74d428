//! Regression on counter rates: the multivariate linear model (`linear`) and supervised PCA
//! (`spca`), both predicting a target relative to the workload's baseline setting.
//!
//! Following Moore (2012) and Lively et al. (EnA-HPC 2011), the response is the ratio of a
//! target at a knob setting to its value at the workload's baseline setting,
//! `T(k)/T(k0) = α0 + α1·x1 + α2·x2 + …`, fitted by least squares (linfa-linear) over every
//! training point of every workload. The inputs `x` are known before running at `k`:
//!
//! - knob terms, for each knob K: `u(K) = K0/K − 1` (the clock-scaled share of time, Moore's
//!   `f0/f`) and `v(K) = (K/K0)³ − 1` (dynamic power `c·V²·f` with `V ∝ f`);
//! - each counter rate `r` measured at the baseline setting (see [`super::features::rates`]:
//!   per cycle, per second, or an activity fraction) times each knob term: `r·u(K)`, `r·v(K)`,
//!   so the shape of a workload's curve follows its counters.
//!
//! Columns are standardised (training mean and standard deviation) before fitting; a column
//! with no variance, or collinear with earlier columns (Gram–Schmidt residual below `1e-9` of
//! its norm), is dropped and the model file says so. Energy is predicted as `P·t`.
//!
//! `spca` selects the columns by the six steps of shared/DESIGN.md ("Supervised PCA"), every
//! threshold a field of [`SpcaParams`], and records each step in [`SpcaStep`]s.

use super::features::{knob_key, rates};
use super::{Knobs, ModelError, Prediction};
use crate::store::set::{Point, SetMeta};
use linfa::traits::Fit;
use linfa::DatasetBase;
use ndarray::linalg::general_mat_mul;
use ndarray::{s, Array1, Array2, ArrayView1, ArrayView2, Axis};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Targets the regressions fit directly (energy is `P·t`).
pub const REGRESSION_TARGETS: [&str; 2] = ["time_s", "power_w"];

/// Thresholds of supervised PCA (shared/DESIGN.md steps 2, 4, 5, 6).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SpcaParams {
    /// Step 2: drop columns with |Spearman ρ| below this.
    pub rho_min: f64,
    /// Step 4: drop columns whose |standardised coefficient| is below this fraction of the
    /// largest.
    pub coef_min_frac: f64,
    /// Step 5: leading components explain at least this share of the variance.
    pub variance_kept: f64,
    /// Step 6: columns kept per leading component (largest |loading|).
    pub per_component: usize,
    /// Step 6: at most this many columns in the final regression.
    pub max_features: usize,
}

impl Default for SpcaParams {
    fn default() -> Self {
        Self {
            rho_min: 0.3,
            coef_min_frac: 0.05,
            variance_kept: 0.9,
            per_component: 2,
            max_features: 8,
        }
    }
}

/// Parameters of the regression models.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct RegressionParams {
    /// The baseline setting (e.g. `core_freq_mhz=1380`); `None`: per workload, its training point
    /// with the highest knob values (compared knob by knob in name order).
    pub baseline: Option<Knobs>,
    /// Supervised-PCA thresholds (used by `spca`).
    pub spca: SpcaParams,
}

/// A column and why it was kept or dropped at a step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FeatureNote {
    pub feature: String,
    /// The statistic the decision used (ρ, coefficient, loading), when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
    pub reason: String,
}

/// One step of the selection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpcaStep {
    pub step: String,
    pub kept: Vec<FeatureNote>,
    pub dropped: Vec<FeatureNote>,
}

/// The fitted regression of one target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TargetFit {
    pub target: String,
    /// Columns of the final regression.
    pub features: Vec<String>,
    /// Training mean and standard deviation of each column.
    pub means: Vec<f64>,
    pub stds: Vec<f64>,
    /// Coefficients on the standardised columns, and the intercept (ratio at the column means).
    pub coefficients: Vec<f64>,
    pub intercept: f64,
    /// Training rows.
    pub rows: usize,
    /// Selection steps (columns dropped for no variance or collinearity; the six spca steps).
    pub steps: Vec<SpcaStep>,
}

/// A workload's baseline: its knobs, targets and counter rates there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Baseline {
    pub knobs: Knobs,
    pub time_s: Option<f64>,
    pub power_w: Option<f64>,
    pub rates: BTreeMap<String, f64>,
}

/// The fitted `linear` or `spca` model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RegressionModel {
    /// `linear` or `spca`.
    pub method: String,
    pub params: RegressionParams,
    /// How counter rates were normalised.
    pub rate_basis: String,
    /// Knobs with terms in the model.
    pub knobs: Vec<String>,
    /// Rates used as inputs (present at the baseline of every training workload).
    pub rates: Vec<String>,
    /// Rates left out because some workload's baseline lacks them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rates_missing_somewhere: Vec<String>,
    pub baselines: BTreeMap<String, Baseline>,
    /// Range `[min, max]` of each rate over the baselines of workloads with points beyond
    /// their baseline (the rows that determine the coefficients). Predictions clip a
    /// workload's rates into this range, so a workload unlike any training one is not
    /// extrapolated linearly.
    #[serde(default)]
    pub rate_ranges: BTreeMap<String, (f64, f64)>,
    pub targets: Vec<TargetFit>,
    /// Targets marked unreliable, by workload (`*` = all).
    #[serde(default)]
    pub unreliable: BTreeMap<String, Vec<String>>,
}

fn is_baseline(knobs: &Knobs, base: &Knobs) -> bool {
    base.iter().all(|(k, v)| knobs.get(k) == Some(v))
}

/// The candidate columns of one row (names and values) for `knobs` given a baseline.
fn row_features(
    model_knobs: &[String],
    rate_names: &[String],
    base: &Baseline,
    knobs: &Knobs,
) -> Result<Vec<f64>, ModelError> {
    let mut terms = Vec::new();
    for k in model_knobs {
        let b = base.knobs.get(k).copied().unwrap_or(f64::NAN);
        let v = knobs
            .get(k)
            .copied()
            .ok_or_else(|| ModelError::MissingKnob {
                knob: k.clone(),
                model: "regression".into(),
                fix: format!("pass --knob {k}=…"),
            })?;
        terms.push(b / v - 1.0);
        terms.push((v / b).powi(3) - 1.0);
    }
    let mut out = terms.clone();
    for r in rate_names {
        let rv = base.rates.get(r).copied().unwrap_or(f64::NAN);
        out.extend(terms.iter().map(|t| rv * t));
    }
    Ok(out)
}

fn column_names(model_knobs: &[String], rate_names: &[String]) -> Vec<String> {
    let mut terms = Vec::new();
    for k in model_knobs {
        terms.push(format!("u({k})"));
        terms.push(format!("v({k})"));
    }
    let mut out = terms.clone();
    for r in rate_names {
        out.extend(terms.iter().map(|t| format!("{r}·{t}")));
    }
    out
}

fn ols(x: &Array2<f64>, y: &Array1<f64>, model: &str) -> Result<(Vec<f64>, f64), ModelError> {
    if x.ncols() == 0 {
        let m = y.mean().unwrap_or(1.0);
        return Ok((Vec::new(), m));
    }
    if x.nrows() <= x.ncols() {
        return Err(ModelError::NotEnoughData {
            model: model.into(),
            what: format!(
                "{} training rows for {} columns (needs more rows than columns)",
                x.nrows(),
                x.ncols()
            ),
        });
    }
    let ds = DatasetBase::new(x.clone(), y.clone());
    let fitted = linfa_linear::LinearRegression::new()
        .fit(&ds)
        .map_err(|e| ModelError::Fit {
            model: model.into(),
            what: e.to_string(),
        })?;
    Ok((fitted.params().to_vec(), fitted.intercept()))
}

/// Sums over the rows of a data matrix and its target, gathered in two passes (means, then
/// centred cross-products), split over the available cores.
struct Moments {
    /// Rows.
    n: usize,
    /// Column means of `x` (in `x`'s units), then the mean of `y` (last entry).
    means: Vec<f64>,
    /// Whether every value of each `x` column is finite.
    finite: Vec<bool>,
    /// `(k+1)×(k+1)` centred cross-products `Σ_i (a_i − ā)(b_i − b̄)` of the `x` columns and
    /// `y` (last row and column); rows and columns of non-finite `x` columns are zero.
    cross: Array2<f64>,
}

/// Rows per block in the passes over the data (a block of 65 columns is about 1 MiB).
const BLOCK_ROWS: usize = 2048;

fn worker_count(work_rows: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    // Threads only pay off on large inputs; small fits (the `fit` path) stay on one.
    if work_rows < 50_000 {
        1
    } else {
        cores.clamp(1, 16)
    }
}

/// Row range `[lo, hi)` of part `t` of `parts`.
fn part(n: usize, parts: usize, t: usize) -> (usize, usize) {
    let chunk = n.div_ceil(parts.max(1));
    ((t * chunk).min(n), ((t + 1) * chunk).min(n))
}

/// Means, finiteness and centred cross-products of `x` (`(n, k)`) and `y` (`n`); `y` must be
/// finite. Works block by block, so both row- and column-major `x` are read cache-friendly,
/// and the cross-products are one matrix product (`BᵀB`, matrixmultiply) per block.
fn moments(x: ArrayView2<f64>, y: ArrayView1<f64>) -> Moments {
    let (n, k) = x.dim();
    let workers = worker_count(n);
    let sums: Vec<(Vec<f64>, Vec<bool>, f64)> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..workers)
            .map(|t| {
                let (lo, hi) = part(n, workers, t);
                s.spawn(move || {
                    let mut sum = vec![0.0; k];
                    let mut fin = vec![true; k];
                    let mut sy = 0.0;
                    let mut b = lo;
                    while b < hi {
                        let e = (b + BLOCK_ROWS).min(hi);
                        let xb = x.slice(s![b..e, ..]);
                        for j in 0..k {
                            let mut acc = 0.0;
                            for &v in xb.column(j) {
                                if v.is_finite() {
                                    acc += v;
                                } else {
                                    fin[j] = false;
                                }
                            }
                            sum[j] += acc;
                        }
                        sy += y.slice(s![b..e]).sum();
                        b = e;
                    }
                    (sum, fin, sy)
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("moments worker panicked"))
            .collect()
    });
    let nf = n.max(1) as f64;
    let mut means = vec![0.0; k + 1];
    let mut finite = vec![true; k];
    for (sum, fin, sy) in &sums {
        for j in 0..k {
            means[j] += sum[j];
            finite[j] &= fin[j];
        }
        means[k] += sy;
    }
    for m in &mut means {
        *m /= nf;
    }
    for j in 0..k {
        if !finite[j] {
            means[j] = 0.0;
        }
    }
    let (means_r, finite_r) = (&means, &finite);
    let parts: Vec<Array2<f64>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..workers)
            .map(|t| {
                let (lo, hi) = part(n, workers, t);
                s.spawn(move || {
                    let mut acc = Array2::<f64>::zeros((k + 1, k + 1));
                    let mut buf = Array2::<f64>::zeros((BLOCK_ROWS, k + 1));
                    let mut b = lo;
                    while b < hi {
                        let e = (b + BLOCK_ROWS).min(hi);
                        let xb = x.slice(s![b..e, ..]);
                        let mut bb = buf.slice_mut(s![..e - b, ..]);
                        for j in 0..k {
                            let mut dst = bb.column_mut(j);
                            if finite_r[j] {
                                let m = means_r[j];
                                dst.zip_mut_with(&xb.column(j), |d, &v| *d = v - m);
                            } else {
                                dst.fill(0.0);
                            }
                        }
                        let my = means_r[k];
                        bb.column_mut(k)
                            .zip_mut_with(&y.slice(s![b..e]), |d, &v| *d = v - my);
                        general_mat_mul(1.0, &bb.t(), &bb, 1.0, &mut acc);
                        b = e;
                    }
                    acc
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("moments worker panicked"))
            .collect()
    });
    let mut cross = Array2::<f64>::zeros((k + 1, k + 1));
    for p in &parts {
        cross += p;
    }
    Moments {
        n,
        means,
        finite,
        cross,
    }
}

/// Step 0: drop columns that are not finite, have no variance, or are collinear with earlier
/// kept columns (the residual of the standardised column after projection on the earlier
/// kept ones has a squared norm below `1e-12·n`, i.e. `1 − R²` below `1e-12`; computed by an
/// incremental Cholesky factorisation of their correlation matrix). Returns kept indices,
/// their means and (population) standard deviations, and the step record.
fn prepare_columns(m: &Moments, names: &[String]) -> (Vec<usize>, Vec<f64>, Vec<f64>, SpcaStep) {
    let n = m.n as f64;
    let mut kept: Vec<usize> = Vec::new();
    let mut means = Vec::new();
    let mut stds: Vec<f64> = Vec::new();
    let mut notes_kept = Vec::new();
    let mut dropped = Vec::new();
    // Rows of the lower-triangular Cholesky factor of the kept columns' correlation matrix.
    let mut chol: Vec<Vec<f64>> = Vec::new();
    for (j, name) in names.iter().enumerate() {
        if !m.finite[j] {
            dropped.push(FeatureNote {
                feature: name.clone(),
                value: None,
                reason: "not finite in some row".into(),
            });
            continue;
        }
        let mean = m.means[j];
        let sd = (m.cross[[j, j]].max(0.0) / n).sqrt();
        if !(sd > 1e-12 * mean.abs().max(1e-300)) || sd == 0.0 {
            dropped.push(FeatureNote {
                feature: name.clone(),
                value: Some(sd),
                reason: "no variance over the training rows".into(),
            });
            continue;
        }
        let mut w = Vec::with_capacity(kept.len() + 1);
        for (a, &ja) in kept.iter().enumerate() {
            let g = m.cross[[ja, j]] / (n * stds[a] * sd);
            let s: f64 = (0..a).map(|b| chol[a][b] * w[b]).sum();
            w.push((g - s) / chol[a][a]);
        }
        let d = 1.0 - w.iter().map(|v| v * v).sum::<f64>();
        if d < 1e-12 {
            dropped.push(FeatureNote {
                feature: name.clone(),
                value: None,
                reason: "collinear with earlier columns".into(),
            });
            continue;
        }
        w.push(d.sqrt());
        chol.push(w);
        kept.push(j);
        means.push(mean);
        stds.push(sd);
        notes_kept.push(FeatureNote {
            feature: name.clone(),
            value: None,
            reason: "varies and is not collinear".into(),
        });
    }
    let step = SpcaStep {
        step: "0. candidate columns: standardised; constant or collinear ones dropped".into(),
        kept: notes_kept,
        dropped,
    };
    (kept, means, stds, step)
}

/// The standardised kept columns `z` and the target `y` as sums: `g` is the `(m+1)×(m+1)`
/// matrix of centred cross-products of `z` (first `m`) and `y` (last); `z` has mean 0.
struct ZGram {
    n: usize,
    g: Array2<f64>,
    y_mean: f64,
}

impl ZGram {
    fn new(m: &Moments, kept: &[usize], stds: &[f64]) -> Self {
        let k = m.means.len() - 1;
        let c = kept.len();
        let mut g = Array2::zeros((c + 1, c + 1));
        let idx = |i: usize| if i < c { kept[i] } else { k };
        let sd = |i: usize| if i < c { stds[i] } else { 1.0 };
        for a in 0..=c {
            for b in 0..=c {
                g[[a, b]] = m.cross[[idx(a), idx(b)]] / (sd(a) * sd(b));
            }
        }
        Self {
            n: m.n,
            g,
            y_mean: m.means[k],
        }
    }

    /// Sub-matrix of the columns `cols` of `z`, with `y` last when `with_y`.
    fn sub(&self, cols: &[usize], with_y: bool) -> Array2<f64> {
        let mut idx = cols.to_vec();
        if with_y {
            idx.push(self.g.nrows() - 1);
        }
        self.g.select(Axis(0), &idx).select(Axis(1), &idx)
    }
}

/// A `2p × p` matrix whose column means are `means` and whose centred cross-products are the
/// positive semi-definite `g` (`p×p`): rows `means ± lᵢ/√2` for the columns `lᵢ` of the
/// Cholesky factor `g = L·Lᵀ` (a non-positive pivot, e.g. an exactly fitted target, is set to
/// zero). Least squares with an intercept and PCA depend on the data only through these
/// means and cross-products, so linfa-linear and linfa-reduction give on this matrix the
/// results they would give on all `n` rows, at a cost independent of `n`.
fn sketch(g: &Array2<f64>, means: &[f64]) -> Array2<f64> {
    let p = g.nrows();
    let mut l = Array2::<f64>::zeros((p, p));
    for i in 0..p {
        for j in 0..=i {
            let s: f64 = (0..j).map(|t| l[[i, t]] * l[[j, t]]).sum();
            if i == j {
                let d = g[[i, i]] - s;
                l[[i, i]] = if d > 0.0 { d.sqrt() } else { 0.0 };
            } else if l[[j, j]] > 0.0 {
                l[[i, j]] = (g[[i, j]] - s) / l[[j, j]];
            }
        }
    }
    let h = std::f64::consts::FRAC_1_SQRT_2;
    let mut out = Array2::<f64>::zeros((2 * p, p));
    for r in 0..p {
        for c in 0..p {
            out[[2 * r, c]] = means[c] + h * l[[c, r]];
            out[[2 * r + 1, c]] = means[c] - h * l[[c, r]];
        }
    }
    out
}

/// Least squares of `y` on the columns `cols` of `z` with an intercept, by linfa-linear on
/// the [`sketch`] of their cross-products. Same results and errors as [`ols`] on the rows.
fn ols_gram(zg: &ZGram, cols: &[usize], model: &str) -> Result<(Vec<f64>, f64), ModelError> {
    if cols.is_empty() {
        return Ok((Vec::new(), zg.y_mean));
    }
    if zg.n <= cols.len() {
        return Err(ModelError::NotEnoughData {
            model: model.into(),
            what: format!(
                "{} training rows for {} columns (needs more rows than columns)",
                zg.n,
                cols.len()
            ),
        });
    }
    let mut means = vec![0.0; cols.len()];
    means.push(zg.y_mean);
    let s = sketch(&zg.sub(cols, true), &means);
    let c = cols.len();
    ols(
        &s.slice(s![.., ..c]).to_owned(),
        &s.column(c).to_owned(),
        model,
    )
}

/// Order-preserving map of a finite `f64` to `u64` (`-0.0` and `0.0` map alike, so they tie).
fn sort_key(v: f64) -> u64 {
    let v = if v == 0.0 { 0.0 } else { v };
    let b = v.to_bits();
    if b >> 63 == 1 {
        !b
    } else {
        b | (1 << 63)
    }
}

/// Reusable buffers of the rank sort.
#[derive(Default)]
struct RankScratch {
    /// `(sort key, row)` pairs, bucketed then sorted.
    pairs: Vec<(u64, u32)>,
    counts: Vec<usize>,
}

/// Buckets of the first, value-range pass of [`sort_by_value`].
const RANK_BUCKETS: usize = 1 << 14;

/// `(sort_key(v), row)` of every value, ascending by value, in `s.pairs`. One pass splits
/// the values into [`RANK_BUCKETS`] equal-width value ranges between their minimum and
/// maximum (`⌊(v − min)·B/(max − min)⌋` is non-decreasing in `v`, so the buckets are in value
/// order and equal values share one); each bucket is then sorted exactly by key (pdqsort,
/// insertion sort for short ones). O(n) passes plus O(n log(n/B)) comparisons for evenly
/// spread values; O(n log n) at worst (all values in one bucket). No allocation once the
/// scratch buffers have grown to `n`.
fn sort_by_value(values: &[f64], s: &mut RankScratch) {
    let n = values.len();
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for &v in values {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    let mut scale = RANK_BUCKETS as f64 / (hi - lo);
    if !scale.is_finite() {
        scale = 0.0;
    }
    let bucket = |v: f64| (((v - lo) * scale) as usize).min(RANK_BUCKETS - 1);
    s.counts.clear();
    s.counts.resize(RANK_BUCKETS + 1, 0);
    for &v in values {
        s.counts[bucket(v) + 1] += 1;
    }
    for b in 0..RANK_BUCKETS {
        s.counts[b + 1] += s.counts[b];
    }
    s.pairs.clear();
    s.pairs.resize(n, (0, 0));
    let mut pos = s.counts[..RANK_BUCKETS].to_vec();
    for (i, &v) in values.iter().enumerate() {
        let b = bucket(v);
        s.pairs[pos[b]] = (sort_key(v), i as u32);
        pos[b] += 1;
    }
    for b in 0..RANK_BUCKETS {
        let (a, e) = (s.counts[b], s.counts[b + 1]);
        if e - a > 1 {
            s.pairs[a..e].sort_unstable_by_key(|p| p.0);
        }
    }
}

/// Calls `f(row, rank)` for every row of the sorted `pairs`, the rank 1-based and tied values
/// getting the average of their ranks (statrs `RankTieBreaker::Average`, scipy
/// `rankdata(method="average")`).
fn for_each_average_rank(pairs: &[(u64, u32)], mut f: impl FnMut(usize, f64)) {
    let n = pairs.len();
    let mut a = 0;
    while a < n {
        let mut b = a + 1;
        while b < n && pairs[b].0 == pairs[a].0 {
            b += 1;
        }
        let r = (a + b + 1) as f64 / 2.0;
        for p in &pairs[a..b] {
            f(p.1 as usize, r);
        }
        a = b;
    }
}

/// Columns read together by one sweep over row blocks (eight f64 share a cache line of a
/// row-major matrix).
const RANK_GROUP: usize = 8;

/// Spearman ρ of each column `cols` of `x` with `y` (all finite), groups of columns split
/// over the available cores. Equals [`super::features::spearman`] on the same pairs: ρ is
/// the Pearson correlation of the average ranks (mean `(n+1)/2` each).
fn spearman_columns(x: ArrayView2<f64>, y: ArrayView1<f64>, cols: &[usize]) -> Vec<Option<f64>> {
    let n = y.len();
    if n < 2 || cols.is_empty() {
        return vec![None; cols.len()];
    }
    assert!(n <= u32::MAX as usize, "at most 2³² − 1 rows");
    let m = (n as f64 + 1.0) / 2.0;
    let mut s = RankScratch::default();
    let yv: Vec<f64> = y.iter().copied().collect();
    sort_by_value(&yv, &mut s);
    drop(yv);
    // Centred ranks of y.
    let mut ry = vec![0.0; n];
    for_each_average_rank(&s.pairs, |i, r| ry[i] = r - m);
    let syy: f64 = ry.iter().map(|r| r * r).sum();
    let groups: Vec<&[usize]> = cols.chunks(RANK_GROUP).collect();
    let workers = worker_count(n).min(groups.len());
    let (ry, groups) = (&ry, &groups);
    let results: Vec<Vec<Option<f64>>> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..workers)
            .map(|t| {
                sc.spawn(move || {
                    let mut s = RankScratch::default();
                    let mut vals: Vec<Vec<f64>> = vec![vec![0.0; n]; RANK_GROUP];
                    let mut rx = vec![0.0; n];
                    let mut res = vec![None; cols.len()];
                    for (g, group) in groups.iter().enumerate().skip(t).step_by(workers) {
                        let mut b = 0;
                        while b < n {
                            let e = (b + BLOCK_ROWS).min(n);
                            for (c, &j) in group.iter().enumerate() {
                                for (d, &v) in
                                    vals[c][b..e].iter_mut().zip(x.slice(s![b..e, j]).iter())
                                {
                                    *d = v;
                                }
                            }
                            b = e;
                        }
                        for c in 0..group.len() {
                            sort_by_value(&vals[c], &mut s);
                            // Scatter the centred ranks (random writes do not stall like
                            // random reads of `ry` would), then two sequential sums.
                            for_each_average_rank(&s.pairs, |i, r| rx[i] = r - m);
                            let (mut sxy, mut sxx) = (0.0, 0.0);
                            for (&a, &b) in rx.iter().zip(ry.iter()) {
                                sxy += a * b;
                                sxx += a * a;
                            }
                            res[g * RANK_GROUP + c] = if sxx <= 0.0 || syy <= 0.0 {
                                None
                            } else {
                                Some(sxy / (sxx * syy).sqrt())
                            };
                        }
                    }
                    res
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("spearman worker panicked"))
            .collect()
    });
    let mut out = vec![None; cols.len()];
    for res in results {
        for (o, r) in out.iter_mut().zip(res) {
            if r.is_some() {
                *o = r;
            }
        }
    }
    out
}

/// Supervised PCA fitted on a data matrix: the selection record and the final regression.
#[derive(Debug, Clone, PartialEq)]
pub struct SpcaFit {
    /// Columns of the final regression (names from the `names` argument).
    pub features: Vec<String>,
    /// Mean and population standard deviation of each final column, in the input's units.
    pub means: Vec<f64>,
    pub stds: Vec<f64>,
    /// Coefficients on the standardised final columns (target units per standard deviation),
    /// and the intercept (the target at the column means, in the target's units).
    pub coefficients: Vec<f64>,
    pub intercept: f64,
    /// Rows fitted.
    pub rows: usize,
    /// Step 0 (constant, non-finite or collinear columns dropped) and the six steps.
    pub steps: Vec<SpcaStep>,
    /// Wall-clock seconds per phase (`moments`, `spearman`, `select`, `final`), for benches.
    pub phase_seconds: Vec<(&'static str, f64)>,
}

impl SpcaFit {
    fn into_target(self, target: &str) -> TargetFit {
        TargetFit {
            target: target.to_string(),
            features: self.features,
            means: self.means,
            stds: self.stds,
            coefficients: self.coefficients,
            intercept: self.intercept,
            rows: self.rows,
            steps: self.steps,
        }
    }
}

/// Supervised PCA (shared/DESIGN.md, "Supervised PCA") on a data matrix: the same steps as
/// `fit(.., spca = true)` runs per target, which calls this.
///
/// - `x`: shape `(n_samples, n_features)`, any memory layout (row-major is the fast one to
///   produce); values in the features' own units (counter rates); a column with a non-finite
///   value is dropped at step 0 and recorded.
/// - `y`: shape `(n_samples)`, the target (for `fit`, the ratio to the baseline; any unit).
/// - `names`: `n_features` column names, used in the step records.
///
/// Steps: 0. standardise (mean, population standard deviation); drop constant and collinear
/// columns. 1–2. Spearman ρ of each column with `y` (average ranks for ties, as
/// `scipy.stats.spearmanr`); drop `|ρ| < rho_min` (if none passes, keep the largest `|ρ|`).
/// 3–4. least squares (linfa-linear) on the kept standardised columns; drop those whose
/// `|coefficient|` is below `coef_min_frac` × the largest. 5. PCA (linfa-reduction) of the
/// remaining standardised columns; leading components up to `variance_kept` of the variance.
/// 6. keep the `per_component` largest `|loadings|` of each leading component (at most
/// `max_features`); final least squares (linfa-linear) on them.
///
/// Cost: two passes over `x` (column sums; centred cross-products `XᵀX` by blocks) and one
/// rank sort per kept column (value-range buckets, then exact sorts within them, see
/// [`sort_by_value`]), on all cores; every later step works on the
/// `(k+1)×(k+1)` cross-products (linfa sees a `2p × p` matrix with the same means and
/// cross-products as the data, see [`sketch`]), so it does not depend on `n`.
///
/// # Errors
/// `NotEnoughData` when the shapes disagree, fewer than two rows, a non-finite `y`, or no
/// more rows than columns at a regression; `Fit` when linfa's least squares or PCA fails.
pub fn fit_spca_matrix(
    x: ArrayView2<f64>,
    y: ArrayView1<f64>,
    names: &[String],
    params: &SpcaParams,
) -> Result<SpcaFit, ModelError> {
    let bad = |what: String| ModelError::NotEnoughData {
        model: "spca".into(),
        what,
    };
    let (n, k) = x.dim();
    if y.len() != n || names.len() != k {
        return Err(bad(format!(
            "shapes disagree: x is {n}×{k}, y has {} rows, {} names",
            y.len(),
            names.len()
        )));
    }
    if n < 2 {
        return Err(bad(format!("{n} rows (needs at least 2)")));
    }
    if let Some(i) = y.iter().position(|v| !v.is_finite()) {
        return Err(bad(format!(
            "target is not finite at row {i} ({}); drop such rows first",
            y[i]
        )));
    }
    let mut phases = Vec::new();
    let t0 = std::time::Instant::now();
    let m = moments(x, y);
    let (cols, means, stds, step0) = prepare_columns(&m, names);
    let zg = ZGram::new(&m, &cols, &stds);
    phases.push(("moments", t0.elapsed().as_secs_f64()));
    let t1 = std::time::Instant::now();
    let rhos = spearman_columns(x, y, &cols);
    phases.push(("spearman", t1.elapsed().as_secs_f64()));
    let t2 = std::time::Instant::now();
    let col_names: Vec<String> = cols.iter().map(|&j| names[j].clone()).collect();
    let mut steps = vec![step0];
    let (sel, s) = spca_select(&zg, &rhos, &col_names, params)?;
    steps.extend(s);
    phases.push(("select", t2.elapsed().as_secs_f64()));
    let t3 = std::time::Instant::now();
    let (coefficients, intercept) = ols_gram(&zg, &sel, "spca")?;
    phases.push(("final", t3.elapsed().as_secs_f64()));
    Ok(SpcaFit {
        features: sel.iter().map(|&i| col_names[i].clone()).collect(),
        means: sel.iter().map(|&i| means[i]).collect(),
        stds: sel.iter().map(|&i| stds[i]).collect(),
        coefficients,
        intercept,
        rows: n,
        steps,
        phase_seconds: phases,
    })
}

fn standardised(x: &Array2<f64>, cols: &[usize], means: &[f64], stds: &[f64]) -> Array2<f64> {
    let mut z = Array2::zeros((x.nrows(), cols.len()));
    for (c, &j) in cols.iter().enumerate() {
        for i in 0..x.nrows() {
            z[[i, c]] = (x[[i, j]] - means[c]) / stds[c];
        }
    }
    z
}

/// The six supervised-PCA steps on the standardised columns `z` of `zg` (named `names`,
/// Spearman ρ with the target `rhos`); returns indices into `z`'s columns and the step records.
fn spca_select(
    zg: &ZGram,
    rhos: &[Option<f64>],
    names: &[String],
    p: &SpcaParams,
) -> Result<(Vec<usize>, Vec<SpcaStep>), ModelError> {
    let mut steps = Vec::new();
    // 1-2. Spearman filter.
    let mut cur: Vec<usize> = Vec::new();
    let mut kept = Vec::new();
    let mut dropped = Vec::new();
    for (j, r) in rhos.iter().enumerate() {
        match r {
            Some(r) if r.abs() >= p.rho_min => {
                cur.push(j);
                kept.push(FeatureNote {
                    feature: names[j].clone(),
                    value: Some(*r),
                    reason: format!("|ρ| ≥ {}", p.rho_min),
                });
            }
            Some(r) => dropped.push(FeatureNote {
                feature: names[j].clone(),
                value: Some(*r),
                reason: format!("|ρ| < {}", p.rho_min),
            }),
            None => dropped.push(FeatureNote {
                feature: names[j].clone(),
                value: None,
                reason: "ρ undefined (constant ranks)".into(),
            }),
        }
    }
    if cur.is_empty() {
        if let Some((j, r)) = rhos
            .iter()
            .enumerate()
            .filter_map(|(j, r)| r.map(|r| (j, r)))
            .max_by(|a, b| a.1.abs().total_cmp(&b.1.abs()))
        {
            cur.push(j);
            kept.push(FeatureNote {
                feature: names[j].clone(),
                value: Some(r),
                reason: "largest |ρ| (no column passed the threshold)".into(),
            });
        }
    }
    steps.push(SpcaStep {
        step: "1-2. Spearman rank correlation with the target; drop low |ρ|".into(),
        kept,
        dropped,
    });
    // 3-4. Regression; drop negligible coefficients.
    let (coefs, _) = ols_gram(zg, &cur, "spca")?;
    let maxc = coefs.iter().fold(0.0f64, |m, c| m.max(c.abs()));
    let mut next = Vec::new();
    let (mut kept, mut dropped) = (Vec::new(), Vec::new());
    for (i, &j) in cur.iter().enumerate() {
        let c = coefs[i];
        if maxc > 0.0 && c.abs() >= p.coef_min_frac * maxc {
            next.push(j);
            kept.push(FeatureNote {
                feature: names[j].clone(),
                value: Some(c),
                reason: format!("|coefficient| ≥ {} × largest", p.coef_min_frac),
            });
        } else {
            dropped.push(FeatureNote {
                feature: names[j].clone(),
                value: Some(c),
                reason: format!("|coefficient| < {} × largest ({maxc:.4})", p.coef_min_frac),
            });
        }
    }
    steps.push(SpcaStep {
        step:
            "3-4. linear regression on the kept columns; drop negligible standardised coefficients"
                .into(),
        kept,
        dropped,
    });
    let cur = next;
    if cur.len() <= 1 {
        steps.push(SpcaStep {
            step: "5-6. PCA skipped: one column or none left".into(),
            kept: cur
                .iter()
                .map(|&j| FeatureNote {
                    feature: names[j].clone(),
                    value: None,
                    reason: "only column left".into(),
                })
                .collect(),
            dropped: Vec::new(),
        });
        return Ok((cur, steps));
    }
    // 5. PCA.
    // linfa-reduction sees the sketch: same centred cross-products, so the same singular
    // values and components as the rows of `z`.
    let gsub = zg.sub(&cur, false);
    let total: f64 = gsub.diag().sum();
    let ncomp = cur.len().min(zg.n.saturating_sub(1)).max(1);
    let sub = sketch(&gsub, &vec![0.0; cur.len()]);
    let pca = linfa_reduction::Pca::params(ncomp)
        .fit(&DatasetBase::new(sub, ()))
        .map_err(|e| ModelError::Fit {
            model: "spca".into(),
            what: format!("PCA: {e}"),
        })?;
    let sig = pca.singular_values();
    let comps = pca.components();
    let mut order: Vec<usize> = (0..sig.len()).collect();
    order.sort_by(|a, b| sig[*b].total_cmp(&sig[*a]));
    let mut cum = 0.0;
    let mut leading = Vec::new();
    for &c in &order {
        leading.push(c);
        cum += sig[c] * sig[c] / total;
        if cum >= p.variance_kept {
            break;
        }
    }
    // 6. Columns with the largest loadings on the leading components.
    let mut chosen: Vec<usize> = Vec::new();
    let mut kept = Vec::new();
    for (rank, &c) in leading.iter().enumerate() {
        let row = comps.row(c);
        let mut idx: Vec<usize> = (0..row.len()).collect();
        idx.sort_by(|a, b| row[*b].abs().total_cmp(&row[*a].abs()));
        for &i in idx.iter().take(p.per_component) {
            if chosen.len() >= p.max_features || chosen.contains(&i) {
                continue;
            }
            chosen.push(i);
            kept.push(FeatureNote {
                feature: names[cur[i]].clone(),
                value: Some(row[i]),
                reason: format!(
                    "top-{} |loading| on component {} ({:.1} % of variance)",
                    p.per_component,
                    rank + 1,
                    100.0 * sig[c] * sig[c] / total
                ),
            });
        }
    }
    let dropped = (0..cur.len())
        .filter(|i| !chosen.contains(i))
        .map(|i| FeatureNote {
            feature: names[cur[i]].clone(),
            value: None,
            reason: "not among the largest loadings of the leading components".into(),
        })
        .collect();
    steps.push(SpcaStep {
        step: format!("5-6. PCA (linfa-reduction): {} leading component(s) explain {:.1} % ≥ {} of the variance; keep the largest loadings", leading.len(), 100.0 * cum, p.variance_kept),
        kept,
        dropped,
    });
    Ok((chosen.into_iter().map(|i| cur[i]).collect(), steps))
}

/// Fit `linear` (`spca = false`) or `spca` on mean points.
///
/// # Errors
/// No knobs, fewer rows than columns, a failed least-squares solve.
pub fn fit(
    meta: &SetMeta,
    points: &[Point],
    params: &RegressionParams,
    spca: bool,
) -> Result<RegressionModel, ModelError> {
    let method = if spca { "spca" } else { "linear" };
    // Knobs that vary in the training data.
    let mut knob_names: Vec<String> = Vec::new();
    for p in points {
        for k in p.knobs.keys() {
            if !knob_names.contains(k) {
                knob_names.push(k.clone());
            }
        }
    }
    knob_names.sort();
    knob_names.retain(|k| {
        let vals: Vec<f64> = points
            .iter()
            .filter_map(|p| p.knobs.get(k).copied())
            .collect();
        vals.iter().any(|v| *v != vals[0]) && vals.iter().all(|v| *v > 0.0)
    });
    if knob_names.is_empty() {
        return Err(ModelError::NotEnoughData {
            model: method.into(),
            what: "no knob takes two values in the training set".into(),
        });
    }
    // Baselines.
    let mut baselines: BTreeMap<String, Baseline> = BTreeMap::new();
    let mut workloads: Vec<String> = Vec::new();
    for p in points {
        if !workloads.contains(&p.workload) {
            workloads.push(p.workload.clone());
        }
    }
    for w in &workloads {
        let mine: Vec<&Point> = points.iter().filter(|p| &p.workload == w).collect();
        let base = match &params.baseline {
            Some(b) => mine.iter().copied().find(|p| is_baseline(&p.knobs, b)),
            None => mine.iter().copied().max_by(|a, b| {
                let ka: Vec<f64> = knob_names
                    .iter()
                    .map(|k| a.knobs.get(k).copied().unwrap_or(f64::MIN))
                    .collect();
                let kb: Vec<f64> = knob_names
                    .iter()
                    .map(|k| b.knobs.get(k).copied().unwrap_or(f64::MIN))
                    .collect();
                ka.partial_cmp(&kb).unwrap_or(std::cmp::Ordering::Equal)
            }),
        };
        if let Some(b) = base {
            baselines.insert(
                w.clone(),
                Baseline {
                    knobs: b.knobs.clone(),
                    time_s: b.time_s,
                    power_w: b.power_w,
                    rates: rates(meta, b),
                },
            );
        }
    }
    if baselines.is_empty() {
        return Err(ModelError::NotEnoughData {
            model: method.into(),
            what: format!(
                "no workload has a point at the baseline {}",
                params.baseline.as_ref().map(knob_key).unwrap_or_default()
            ),
        });
    }
    let mut rate_names: Vec<String> = Vec::new();
    let mut missing = Vec::new();
    for b in baselines.values() {
        for r in b.rates.keys() {
            if !rate_names.contains(r) && !missing.contains(r) {
                if baselines.values().all(|o| o.rates.contains_key(r)) {
                    rate_names.push(r.clone());
                } else {
                    missing.push(r.clone());
                }
            }
        }
    }
    rate_names.sort();
    let mut rate_ranges: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    for (w, b) in &baselines {
        if points.iter().filter(|p| &p.workload == w).count() < 2 {
            continue;
        }
        for r in &rate_names {
            let v = b.rates[r];
            let e = rate_ranges.entry(r.clone()).or_insert((v, v));
            e.0 = e.0.min(v);
            e.1 = e.1.max(v);
        }
    }
    let names = column_names(&knob_names, &rate_names);
    let unreliable = super::features::unreliable_by_target(meta);
    let mut targets = Vec::new();
    for target in REGRESSION_TARGETS {
        let mut rows: Vec<Vec<f64>> = Vec::new();
        let mut ys = Vec::new();
        for p in points {
            if !meta.is_reliable(target, &p.workload) {
                continue;
            }
            let Some(b) = baselines.get(&p.workload) else {
                continue;
            };
            let base_t = match target {
                "time_s" => b.time_s,
                _ => b.power_w,
            };
            let (Some(bt), Some(v)) = (base_t.filter(|v| *v > 0.0), p.target(target)) else {
                continue;
            };
            rows.push(row_features(&knob_names, &rate_names, b, &p.knobs)?);
            ys.push(v / bt);
        }
        if rows.len() < 2 {
            continue;
        }
        let x = Array2::from_shape_vec((rows.len(), names.len()), rows.concat())
            .expect("row widths agree");
        let y = Array1::from(ys);
        if spca {
            let f = fit_spca_matrix(x.view(), y.view(), &names, &params.spca)?;
            targets.push(f.into_target(target));
            continue;
        }
        let (cols, means, stds, step0) = prepare_columns(&moments(x.view(), y.view()), &names);
        let z = standardised(&x, &cols, &means, &stds);
        let (coefs, intercept) = ols(&z, &y, method)?;
        targets.push(TargetFit {
            target: target.to_string(),
            features: cols.iter().map(|&j| names[j].clone()).collect(),
            means,
            stds,
            coefficients: coefs,
            intercept,
            rows: y.len(),
            steps: vec![step0],
        });
    }
    if targets.is_empty() {
        return Err(ModelError::NotEnoughData {
            model: method.into(),
            what: "no target has two training rows with a baseline value".into(),
        });
    }
    Ok(RegressionModel {
        method: method.into(),
        params: params.clone(),
        rate_basis: super::features::rate_basis(meta),
        knobs: knob_names,
        rates: rate_names,
        rates_missing_somewhere: missing,
        baselines,
        rate_ranges,
        targets,
        unreliable,
    })
}

impl RegressionModel {
    fn reliable(&self, target: &str, workload: &str) -> bool {
        super::features::is_reliable(&self.unreliable, target, workload)
    }

    /// Predict `workload` at `knobs`: baseline value × predicted ratio.
    ///
    /// # Errors
    /// Unknown workload (no baseline) or a missing knob.
    pub fn predict(&self, workload: &str, knobs: &Knobs) -> Result<Prediction, ModelError> {
        let b = self
            .baselines
            .get(workload)
            .ok_or_else(|| ModelError::UnknownWorkload {
                workload: workload.into(),
                known: self
                    .baselines
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", "),
            })?;
        // A model file is input: its parts are checked here, not trusted (a damaged file
        // must give an error, not a panic).
        let inconsistent = |what: String| ModelError::Inconsistent {
            model: self.method.to_string(),
            what,
        };
        let mut b = b.clone();
        for (r, v) in b.rates.iter_mut() {
            if let Some(&(lo, hi)) = self.rate_ranges.get(r) {
                if lo.is_nan() || hi.is_nan() || lo > hi {
                    return Err(inconsistent(format!("rate range of `{r}` is [{lo}, {hi}]")));
                }
                *v = v.clamp(lo, hi);
            }
        }
        let all = row_features(&self.knobs, &self.rates, &b, knobs)?;
        let names = column_names(&self.knobs, &self.rates);
        let mut pred = Prediction::default();
        for t in &self.targets {
            if !self.reliable(&t.target, workload) {
                continue;
            }
            let n = t.features.len();
            if t.coefficients.len() != n || t.means.len() != n || t.stds.len() != n {
                return Err(inconsistent(format!(
                    "target `{}` has {n} features, {} coefficients, {} means and {} stds",
                    t.target,
                    t.coefficients.len(),
                    t.means.len(),
                    t.stds.len()
                )));
            }
            let mut ratio = t.intercept;
            for (i, f) in t.features.iter().enumerate() {
                let j = names.iter().position(|n| n == f).ok_or_else(|| {
                    inconsistent(format!(
                        "target `{}` uses the feature `{f}`, not one of its knob and rate terms",
                        t.target
                    ))
                })?;
                ratio += t.coefficients[i] * (all[j] - t.means[i]) / t.stds[i];
            }
            match t.target.as_str() {
                "time_s" => pred.time_s = b.time_s.map(|v| v * ratio),
                _ => pred.power_w = b.power_w.map(|v| v * ratio),
            }
        }
        pred.energy_j = pred.time_s.zip(pred.power_w).map(|(t, w)| t * w);
        Ok(pred)
    }

    /// Human-readable selection record (`powerperf fit --explain`).
    pub fn explain(&self) -> String {
        let mut s = format!("{} model; rates: {}\n", self.method, self.rate_basis);
        s += &format!(
            "knob terms: {}\nrates at the baseline ({}): {}\n",
            self.knobs.join(", "),
            self.baselines.len(),
            self.rates.join(", ")
        );
        if !self.rates_missing_somewhere.is_empty() {
            s += &format!(
                "rates left out (missing at some baseline): {}\n",
                self.rates_missing_somewhere.join(", ")
            );
        }
        for t in &self.targets {
            s += &format!("\n== target {} ({} training rows) ==\n", t.target, t.rows);
            for st in &t.steps {
                s += &format!("step {}\n", st.step);
                for k in &st.kept {
                    s += &format!(
                        "  keep {:<40} {:>10}  {}\n",
                        k.feature,
                        k.value.map(|v| format!("{v:.4}")).unwrap_or_default(),
                        k.reason
                    );
                }
                for k in &st.dropped {
                    s += &format!(
                        "  drop {:<40} {:>10}  {}\n",
                        k.feature,
                        k.value.map(|v| format!("{v:.4}")).unwrap_or_default(),
                        k.reason
                    );
                }
            }
            s += &format!("final: {}/{} = {:.6}", t.target, t.target, t.intercept);
            for (f, c) in t.features.iter().zip(&t.coefficients) {
                s += &format!(" {:+.6}·z[{f}]", c);
            }
            s += "\n";
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::set::CounterKind;

    /// Synthetic set: time ratio = 1 + a_w·u where a_w = 0.8·mem_frac (a rate), so the
    /// time ratio is linear in the column `mem_frac·u(core_freq_mhz)`... written as
    /// t(f) = t0·(1 + (1 - m)·(f0/f - 1)): compute share 1 - m scales with the clock.
    fn synthetic(n_workloads: usize) -> (SetMeta, Vec<Point>) {
        let mut meta = SetMeta::default();
        meta.counters.insert("mem_frac".into(), CounterKind::Rate);
        meta.counters.insert("noise".into(), CounterKind::Rate);
        let mut pts = Vec::new();
        for i in 0..n_workloads {
            let m = (i as f64 + 0.5) / n_workloads as f64;
            let noise = ((i * 7919) % 13) as f64 / 13.0;
            for f in [500.0, 750.0, 1000.0] {
                let t = 10.0 * (1.0 + (1.0 - m) * (1000.0 / f - 1.0));
                let p = 100.0 * (1.0 + 0.5 * ((f / 1000.0f64).powi(3) - 1.0));
                pts.push(Point {
                    workload: format!("w{i}"),
                    knobs: [("core_freq_mhz".to_string(), f)].into_iter().collect(),
                    time_s: Some(t),
                    power_w: Some(p),
                    energy_j: Some(t * p),
                    counters: [("mem_frac".to_string(), m), ("noise".to_string(), noise)]
                        .into_iter()
                        .collect(),
                    ..Point::default()
                });
            }
        }
        (meta, pts)
    }

    #[test]
    fn linear_recovers_known_ratio_exactly() {
        let (meta, pts) = synthetic(12);
        let m = fit(&meta, &pts, &RegressionParams::default(), false).unwrap();
        let k: Knobs = [("core_freq_mhz".to_string(), 600.0)].into_iter().collect();
        let pr = m.predict("w3", &k).unwrap();
        let mf = 3.5 / 12.0;
        let want = 10.0 * (1.0 + (1.0 - mf) * (1000.0 / 600.0 - 1.0));
        assert!(
            (pr.time_s.unwrap() / want - 1.0).abs() < 1e-9,
            "{:?} {want}",
            pr.time_s
        );
        let wp = 100.0 * (1.0 + 0.5 * (0.6f64.powi(3) - 1.0));
        assert!((pr.power_w.unwrap() / wp - 1.0).abs() < 1e-9);
    }

    #[test]
    fn spca_keeps_the_informative_column_and_records_why() {
        let (meta, pts) = synthetic(20);
        let m = fit(&meta, &pts, &RegressionParams::default(), true).unwrap();
        let t = m.targets.iter().find(|t| t.target == "time_s").unwrap();
        assert!(
            t.features.iter().any(|f| f.starts_with("mem_frac·u(")),
            "{:?}",
            t.features
        );
        assert!(t.steps.len() >= 3);
        let k: Knobs = [("core_freq_mhz".to_string(), 600.0)].into_iter().collect();
        let pr = m.predict("w5", &k).unwrap();
        let mf = 5.5 / 20.0;
        let want = 10.0 * (1.0 + (1.0 - mf) * (1000.0 / 600.0 - 1.0));
        assert!(
            (pr.time_s.unwrap() / want - 1.0).abs() < 1e-6,
            "{:?} {want}",
            pr.time_s
        );
        assert!(m.explain().contains("Spearman"));
    }

    /// Deterministic pseudo-random numbers in [0, 1) (no dependency).
    fn lcg(seed: &mut u64) -> f64 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (*seed >> 11) as f64 / (1u64 << 53) as f64
    }

    #[test]
    fn ranks_match_statrs_spearman_with_ties_and_signed_zeros() {
        let mut seed = 7;
        let n = 500;
        let mut x = Array2::<f64>::zeros((n, 4));
        let mut y = Array1::<f64>::zeros(n);
        for i in 0..n {
            let u = lcg(&mut seed);
            x[[i, 0]] = u * 1e3 - 500.0;
            x[[i, 1]] = (u * 7.0).floor() - 3.0; // many ties, negative values
            x[[i, 2]] = if i % 3 == 0 { -0.0 } else { 0.0 } + (i % 5) as f64 * 1e-300;
            x[[i, 3]] = lcg(&mut seed) * 1e-9 - 2e-9 * u;
            y[i] = u + 0.3 * lcg(&mut seed);
        }
        let got = spearman_columns(x.view(), y.view(), &[0, 1, 2, 3]);
        for j in 0..4 {
            let want = super::super::features::spearman(&x.column(j).to_vec(), &y.to_vec());
            match (got[j], want) {
                (Some(a), Some(b)) => assert!((a - b).abs() < 1e-12, "column {j}: {a} vs {b}"),
                (a, b) => assert_eq!(a, b, "column {j}"),
            }
        }
        // A constant column: ρ undefined.
        let c = Array2::<f64>::from_elem((n, 1), 2.0);
        assert_eq!(spearman_columns(c.view(), y.view(), &[0]), vec![None]);
    }

    #[test]
    fn sketch_gives_the_same_least_squares_and_pca_as_the_rows() {
        let mut seed = 11;
        let n = 300;
        let mut x = Array2::<f64>::zeros((n, 3));
        let mut y = Array1::<f64>::zeros(n);
        for i in 0..n {
            let a = lcg(&mut seed);
            let b = lcg(&mut seed);
            x[[i, 0]] = a;
            x[[i, 1]] = a + 0.5 * b;
            x[[i, 2]] = lcg(&mut seed);
            y[i] = 2.0 + 3.0 * a - b + 0.1 * lcg(&mut seed);
        }
        let m = moments(x.view(), y.view());
        let (cols, means, stds, _) = prepare_columns(&m, &["a".into(), "b".into(), "c".into()]);
        assert_eq!(cols, vec![0, 1, 2]);
        let zg = ZGram::new(&m, &cols, &stds);
        let z = standardised(&x, &cols, &means, &stds);
        let (c1, i1) = ols(&z, &y, "t").unwrap();
        let (c2, i2) = ols_gram(&zg, &[0, 1, 2], "t").unwrap();
        assert!((i1 - i2).abs() < 1e-10, "{i1} {i2}");
        for (a, b) in c1.iter().zip(&c2) {
            assert!((a - b).abs() < 1e-9, "{c1:?} {c2:?}");
        }
        let rows = linfa_reduction::Pca::params(3)
            .fit(&DatasetBase::new(z.clone(), ()))
            .unwrap();
        let sk = sketch(&zg.sub(&[0, 1, 2], false), &[0.0; 3]);
        let sk = linfa_reduction::Pca::params(3)
            .fit(&DatasetBase::new(sk, ()))
            .unwrap();
        for (a, b) in rows.singular_values().iter().zip(sk.singular_values()) {
            assert!((a / b - 1.0).abs() < 1e-6, "{a} {b}");
        }
    }

    #[test]
    fn spca_matrix_recovers_a_known_model_and_drops_noise() {
        let mut seed = 3;
        let n = 4000;
        let k = 10;
        let mut x = Array2::<f64>::zeros((n, k));
        let mut y = Array1::<f64>::zeros(n);
        for i in 0..n {
            for j in 0..k {
                x[[i, j]] = lcg(&mut seed) * (j + 1) as f64;
            }
            x[[i, 9]] = 2.0 * x[[i, 1]] - x[[i, 2]]; // collinear: dropped at step 0
            y[i] = 5.0 + 3.0 * x[[i, 1]] - 1.2 * x[[i, 4]];
        }
        let names: Vec<String> = (0..k).map(|j| format!("c{j}")).collect();
        let f = fit_spca_matrix(x.view(), y.view(), &names, &SpcaParams::default()).unwrap();
        assert_eq!(f.rows, n);
        assert!(f.steps[0]
            .dropped
            .iter()
            .any(|d| d.feature == "c9" && d.reason.contains("collinear")));
        let mut feats = f.features.clone();
        feats.sort();
        assert_eq!(feats, vec!["c1".to_string(), "c4".to_string()], "{f:?}");
        // Exact fit: coefficients per standard deviation equal slope × sd.
        for (i, name) in f.features.iter().enumerate() {
            let slope = if name == "c1" { 3.0 } else { -1.2 };
            assert!(
                (f.coefficients[i] / (slope * f.stds[i]) - 1.0).abs() < 1e-9,
                "{f:?}"
            );
        }
        let pred_at_means = 5.0 + 3.0 * f.means[f.features.iter().position(|c| c == "c1").unwrap()]
            - 1.2 * f.means[f.features.iter().position(|c| c == "c4").unwrap()];
        assert!((f.intercept - pred_at_means).abs() < 1e-9);
    }

    #[test]
    fn spca_matrix_reports_bad_input() {
        let x = Array2::<f64>::zeros((3, 2));
        let names = vec!["a".to_string(), "b".to_string()];
        let y = Array1::from(vec![1.0, 2.0]);
        let e = fit_spca_matrix(x.view(), y.view(), &names, &SpcaParams::default());
        assert!(e.unwrap_err().to_string().contains("shapes disagree"));
        let y = Array1::from(vec![1.0, f64::NAN, 2.0]);
        let e = fit_spca_matrix(x.view(), y.view(), &names, &SpcaParams::default());
        assert!(e.unwrap_err().to_string().contains("not finite at row 1"));
    }

    #[test]
    fn unknown_workload_is_an_error() {
        let (meta, pts) = synthetic(6);
        let m = fit(&meta, &pts, &RegressionParams::default(), false).unwrap();
        let k: Knobs = [("core_freq_mhz".to_string(), 600.0)].into_iter().collect();
        assert!(m
            .predict("nope", &k)
            .unwrap_err()
            .to_string()
            .contains("w0"));
    }
}
