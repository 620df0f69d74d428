//! The per-setting weights `w(k)` of the `scaling` model (see the parent module): the
//! training data of one target, the weighted and robust least-squares fits, the robust
//! prior, and the inner cross-validation that scores features and the static part.

use super::{Loss, RobustParams, ScalingParams};
use crate::models::Knobs;
use linfa_linalg::cholesky::SolveCInplace;
use ndarray::Array2;

/// The training data of one target, in the shape the fits use.
pub(super) struct Data {
    /// Baseline value per training workload.
    pub(super) tb: Vec<f64>,
    /// Candidate features per training workload: `(n, n_candidates)`.
    pub(super) x: Array2<f64>,
    /// Settings predicted (non-baseline).
    pub(super) settings: Vec<Knobs>,
    /// Clock value of each setting and the group (other knobs) it belongs to.
    pub(super) clock: Vec<f64>,
    pub(super) group: Vec<usize>,
    /// Measured value per (workload, setting), NaN when absent.
    pub(super) t: Array2<f64>,
    /// Prior weight per (workload, setting) of the weight fit (1 unless robust training
    /// down-weights the point).
    pub(super) prior: Array2<f64>,
}

impl Data {
    /// The rows `rows` alone (the settings kept).
    pub(super) fn subset(&self, rows: &[usize]) -> Data {
        Data {
            tb: rows.iter().map(|&i| self.tb[i]).collect(),
            x: self.x.select(ndarray::Axis(0), rows),
            settings: self.settings.clone(),
            clock: self.clock.clone(),
            group: self.group.clone(),
            t: self.t.select(ndarray::Axis(0), rows),
            prior: self.prior.select(ndarray::Axis(0), rows),
        }
    }
}

/// Per-setting weights fitted on a subset of workloads, plus the standardisation.
pub(super) struct Fit {
    pub(super) feats: Vec<usize>,
    pub(super) means: Vec<f64>,
    pub(super) stds: Vec<f64>,
    pub(super) mins: Vec<f64>,
    pub(super) maxs: Vec<f64>,
    /// `(n_settings, 1 + n_feats)`
    pub(super) w: Array2<f64>,
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
    // The normal equations in plain slices (the hot loop of `scaling`'s fits; ndarray's
    // indexed access costs a bounds check per term), the same sums in the same order.
    let mut gm = vec![0.0; m * m];
    let mut rv = vec![0.0; m];
    match m {
        1 => normal_sums::<1>(a, y, w, &mut gm, &mut rv),
        2 => normal_sums::<2>(a, y, w, &mut gm, &mut rv),
        3 => normal_sums::<3>(a, y, w, &mut gm, &mut rv),
        4 => normal_sums::<4>(a, y, w, &mut gm, &mut rv),
        _ => {
            for (row, (&wr, &yr)) in a.chunks_exact(m).zip(w.iter().zip(y)) {
                for i in 0..m {
                    let wi = wr * row[i];
                    rv[i] += wi * yr;
                    let gi = &mut gm[i * m..i * m + i + 1];
                    for (gij, xj) in gi.iter_mut().zip(&row[..=i]) {
                        *gij += wi * xj;
                    }
                }
            }
        }
    }
    let trace: f64 = (0..m).map(|i| gm[i * m + i]).sum();
    for i in 0..m {
        gm[i * m + i] += 1e-12 * trace.max(1e-300);
        for j in 0..i {
            gm[j * m + i] = gm[i * m + j];
        }
    }
    if m == 1 {
        // One column (the common response, `scaling` without features): linfa's Cholesky
        // solve of a 1×1 system step by step, `l = √g`, `β = (r/l)/l`, without its two
        // matrix allocations.
        if gm[0] <= 0.0 {
            return None;
        }
        let l = gm[0].sqrt();
        let beta = rv[0] / l / l;
        return beta.is_finite().then_some(vec![beta]);
    }
    let mut g = Array2::from_shape_vec((m, m), gm).ok()?;
    let rhs = Array2::from_shape_vec((m, 1), rv).ok()?;
    let beta = g.solvec_into(rhs).ok()?;
    let beta: Vec<f64> = beta.column(0).to_vec();
    beta.iter().all(|b| b.is_finite()).then_some(beta)
}

/// [`weighted_least_squares`]' sums for `M` columns known at compile time (the common
/// widths: a clock polynomial of degree 0 to 3 without features), in registers: the lower
/// triangle of `AᵀWA` into `gm` and `AᵀWy` into `rv`, the same sums in the same order as the
/// general loop.
fn normal_sums<const M: usize>(a: &[f64], y: &[f64], w: &[f64], gm: &mut [f64], rv: &mut [f64]) {
    let mut g = [[0.0f64; M]; M];
    let mut r = [0.0f64; M];
    for (row, (&wr, &yr)) in a.chunks_exact(M).zip(w.iter().zip(y)) {
        for i in 0..M {
            let wi = wr * row[i];
            r[i] += wi * yr;
            for j in 0..=i {
                g[i][j] += wi * row[j];
            }
        }
    }
    for i in 0..M {
        rv[i] = r[i];
        gm[i * M..i * M + i + 1].copy_from_slice(&g[i][..=i]);
    }
}

/// Fit rows `a` (row-major, `m` columns), `y` under `loss` (rows already carry the 1/T
/// scaling).
pub(super) fn robust_fit(
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

pub(super) fn fit_subset(
    d: &Data,
    rows: &[usize],
    feats: &[usize],
    s: f64,
    p: &ScalingParams,
) -> Option<Fit> {
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

pub(super) fn median(v: &mut [f64]) -> f64 {
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
pub(super) fn robust_prior(
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
    if sigma.is_nan() || sigma <= 0.0 {
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

/// Write [`predict_row`]'s values of the rows `test` into `out` (rows as `d`'s).
pub(super) fn predict_rows_into(
    out: &mut Array2<f64>,
    d: &Data,
    fit: &Fit,
    s: f64,
    test: &[usize],
) {
    for &i in test {
        for (k, v) in predict_row(d, fit, s, i).into_iter().enumerate() {
            out[[i, k]] = v;
        }
    }
}

/// Mean absolute relative error of rows `test` under `fit`, and the number of points.
pub(super) fn errors(d: &Data, fit: &Fit, s: f64, test: &[usize]) -> (f64, usize) {
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
pub(super) fn inner_cv(
    d: &Data,
    rows: &[usize],
    feats: &[usize],
    s: f64,
    p: &ScalingParams,
) -> f64 {
    let folds = rows.len().min(p.inner_folds.max(2));
    let mut sum = 0.0;
    let mut n = 0;
    for f in 0..folds {
        let (train, test) = fold_split(rows, folds, f);
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

/// [`search_static`] for `feats` on the rows whose search without features gave `s0`:
/// `s0` itself where `feats` is empty (the same rows and the same fits), else the search.
pub(super) fn search_static_from(
    d: &Data,
    rows: &[usize],
    feats: &[usize],
    s0: f64,
    p: &ScalingParams,
    on: bool,
) -> f64 {
    if feats.is_empty() {
        s0
    } else {
        search_static(d, rows, feats, p, on)
    }
}

/// The static part minimising the training MAPE of `feats` (power), or 0 (time).
pub(super) fn search_static(
    d: &Data,
    rows: &[usize],
    feats: &[usize],
    p: &ScalingParams,
    on: bool,
) -> f64 {
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

/// The inner cross-validated predictions of `feats` (the folds of [`inner_cv`]) per
/// (row, setting), NaN where there is no measurement or no fit.
pub(super) fn inner_cv_predictions(
    d: &Data,
    rows: &[usize],
    feats: &[usize],
    s: f64,
    p: &ScalingParams,
) -> Array2<f64> {
    let mut out = Array2::from_elem(d.t.dim(), f64::NAN);
    let folds = rows.len().min(p.inner_folds.max(2));
    for f in 0..folds {
        let (train, test) = fold_split(rows, folds, f);
        if let Some(fit) = fit_subset(d, &train, feats, s, p) {
            predict_rows_into(&mut out, d, &fit, s, &test);
        }
    }
    out
}

/// Fold `f` of `folds` over `rows` dealt round-robin: `(train, test)`.
pub(crate) fn fold_split(rows: &[usize], folds: usize, f: usize) -> (Vec<usize>, Vec<usize>) {
    rows.iter()
        .enumerate()
        .map(|(r, &i)| (r % folds == f, i))
        .fold(
            (Vec::new(), Vec::new()),
            |(mut tr, mut te), (is_test, i)| {
                if is_test {
                    te.push(i);
                } else {
                    tr.push(i);
                }
                (tr, te)
            },
        )
}
