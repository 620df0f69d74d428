//! The data-matrix side of `spca` (see the parent module): column moments and
//! standardisation, the Gram matrix and its sketch, Spearman ranks of many columns, and the
//! six selection steps of docs/architecture.md ("Supervised PCA"), split over the available cores.

use super::{ols, FeatureNote, SpcaParams, SpcaStep, TargetFit};
use crate::models::ModelError;
use ndarray::linalg::general_mat_mul;
use ndarray::{s, Array2, ArrayView1, ArrayView2, Axis};

/// Sums over the rows of a data matrix and its target, gathered in two passes (means, then
/// centred cross-products), split over the available cores.
pub(super) struct Moments {
    /// Rows.
    pub(super) n: usize,
    /// Column means of `x` (in `x`'s units), then the mean of `y` (last entry).
    pub(super) means: Vec<f64>,
    /// Whether every value of each `x` column is finite.
    pub(super) finite: Vec<bool>,
    /// `(k+1)×(k+1)` centred cross-products `Σ_i (a_i − ā)(b_i − b̄)` of the `x` columns and
    /// `y` (last row and column); rows and columns of non-finite `x` columns are zero.
    pub(super) cross: Array2<f64>,
}

/// Rows per block in the passes over the data (a block of 65 columns is about 1 MiB).
pub(super) const BLOCK_ROWS: usize = 2048;

pub(super) fn worker_count(work_rows: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    // Threads only pay off on large inputs; small fits (the `fit` path) stay on one.
    if work_rows < 50_000 {
        1
    } else {
        cores.clamp(1, 16)
    }
}

/// Row range `[lo, hi)` of part `t` of `parts`.
pub(super) fn part(n: usize, parts: usize, t: usize) -> (usize, usize) {
    let chunk = n.div_ceil(parts.max(1));
    ((t * chunk).min(n), ((t + 1) * chunk).min(n))
}

/// Means, finiteness and centred cross-products of `x` (`(n, k)`) and `y` (`n`); `y` must be
/// finite. Works block by block, so both row- and column-major `x` are read cache-friendly,
/// and the cross-products are one matrix product (`BᵀB`, matrixmultiply) per block.
pub(super) fn moments(x: ArrayView2<f64>, y: ArrayView1<f64>) -> Moments {
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
pub(super) fn prepare_columns(
    m: &Moments,
    names: &[String],
) -> (Vec<usize>, Vec<f64>, Vec<f64>, SpcaStep) {
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
        if sd.is_nan() || sd <= 1e-12 * mean.abs().max(1e-300) || sd == 0.0 {
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
pub(super) struct ZGram {
    pub(super) n: usize,
    pub(super) g: Array2<f64>,
    pub(super) y_mean: f64,
}

impl ZGram {
    pub(super) fn new(m: &Moments, kept: &[usize], stds: &[f64]) -> Self {
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
    pub(super) fn sub(&self, cols: &[usize], with_y: bool) -> Array2<f64> {
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
pub(super) fn sketch(g: &Array2<f64>, means: &[f64]) -> Array2<f64> {
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
pub(super) fn ols_gram(
    zg: &ZGram,
    cols: &[usize],
    model: &str,
) -> Result<(Vec<f64>, f64), ModelError> {
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
pub(super) fn sort_key(v: f64) -> u64 {
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
pub(super) struct RankScratch {
    /// `(sort key, row)` pairs, bucketed then sorted.
    pub(super) pairs: Vec<(u64, u32)>,
    pub(super) counts: Vec<usize>,
}

/// Buckets of the first, value-range pass of [`sort_by_value`].
pub(super) const RANK_BUCKETS: usize = 1 << 14;

/// `(sort_key(v), row)` of every value, ascending by value, in `s.pairs`. One pass splits
/// the values into [`RANK_BUCKETS`] equal-width value ranges between their minimum and
/// maximum (`⌊(v − min)·B/(max − min)⌋` is non-decreasing in `v`, so the buckets are in value
/// order and equal values share one); each bucket is then sorted exactly by key (pdqsort,
/// insertion sort for short ones). O(n) passes plus O(n log(n/B)) comparisons for evenly
/// spread values; O(n log n) at worst (all values in one bucket). No allocation once the
/// scratch buffers have grown to `n`.
pub(super) fn sort_by_value(values: &[f64], s: &mut RankScratch) {
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
pub(super) fn for_each_average_rank(pairs: &[(u64, u32)], mut f: impl FnMut(usize, f64)) {
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
pub(super) const RANK_GROUP: usize = 8;

/// Spearman ρ of each column `cols` of `x` with `y` (all finite), groups of columns split
/// over the available cores. Equals [`super::features::spearman`] on the same pairs: ρ is
/// the Pearson correlation of the average ranks (mean `(n+1)/2` each).
pub(super) fn spearman_columns(
    x: ArrayView2<f64>,
    y: ArrayView1<f64>,
    cols: &[usize],
) -> Vec<Option<f64>> {
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
    pub(super) fn into_target(self, target: &str) -> TargetFit {
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

/// Supervised PCA (docs/architecture.md, "Supervised PCA") on a data matrix: the same steps as
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
/// `|coefficient|` is below `coef_min_frac` × the largest. 5. PCA (the symmetric eigendecomposition, linfa-linalg,
/// of their cross-products) of the remaining standardised columns; leading components up to `variance_kept` of the variance.
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

pub(super) fn standardised(
    x: &Array2<f64>,
    cols: &[usize],
    means: &[f64],
    stds: &[f64],
) -> Array2<f64> {
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
pub(super) fn spca_select(
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
    // 5. PCA of the standardised columns: the eigenvectors of their cross-product matrix
    // (n × their correlation matrix) are the principal axes, its eigenvalues the squared
    // singular values. A dense symmetric eigendecomposition (linfa-linalg's `eigh`, the
    // solver linfa-reduction's PCA ends in) of this small p×p matrix: linfa-reduction's
    // truncated SVD (LOBPCG) panicked with "NaN values in array" when the matrix is rank
    // deficient (collinear survivors, fewer rows than columns: issue 21).
    let gsub = zg.sub(&cur, false);
    if let Some(((a, b), v)) = gsub.indexed_iter().find(|(_, v)| !v.is_finite()) {
        return Err(ModelError::Fit {
            model: "spca".into(),
            what: format!(
                "PCA: the cross-product of `{}` and `{}` is {v} (a column with values too large to standardise); drop that counter or rescale it",
                names[cur[a]], names[cur[b]]
            ),
        });
    }
    let total: f64 = gsub.diag().sum();
    if total.is_nan() || total <= 0.0 {
        return Err(ModelError::Fit {
            model: "spca".into(),
            what: "PCA: the kept columns have no variance over the training rows".into(),
        });
    }
    let ncomp = cur.len().min(zg.n.saturating_sub(1)).max(1);
    let (vals, vecs) = {
        use linfa_linalg::eigh::Eigh;
        gsub.eigh().map_err(|e| ModelError::Fit {
            model: "spca".into(),
            what: format!("PCA eigendecomposition: {e}"),
        })?
    };
    if vals.iter().chain(vecs.iter()).any(|v| !v.is_finite()) {
        return Err(ModelError::Fit {
            model: "spca".into(),
            what:
                "PCA eigendecomposition did not converge to finite values (rank-deficient columns)"
                    .into(),
        });
    }
    // Singular values (√ of the eigenvalues, negative rounding clamped to 0) and components
    // (one per row), largest first, the first `ncomp`.
    let mut by_size: Vec<usize> = (0..vals.len()).collect();
    by_size.sort_by(|a, b| vals[*b].total_cmp(&vals[*a]));
    by_size.truncate(ncomp);
    let sig: Vec<f64> = by_size.iter().map(|&c| vals[c].max(0.0).sqrt()).collect();
    let comps = Array2::from_shape_fn((by_size.len(), cur.len()), |(r, i)| vecs[[i, by_size[r]]]);
    let order: Vec<usize> = (0..sig.len()).collect();
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
        step: format!("5-6. PCA (eigendecomposition of the correlation matrix): {} leading component(s) explain {:.1} % ≥ {} of the variance; keep the largest loadings", leading.len(), 100.0 * cum, p.variance_kept),
        kept,
        dropped,
    });
    Ok((chosen.into_iter().map(|i| cur[i]).collect(), steps))
}
