//! The local transfer of the `scaling` model (`--model neighbors`, and one of the choices of
//! `auto` in workload holdout): a workload's response ratio at a setting `k` predicted as a
//! distance-weighted mean of its K nearest training workloads' measured ratios,
//!
//! ```text
//! T_i(k) = s + (T_i(b) − s) · Σ_j ω_j r_j(k) / Σ_j ω_j,     r_j(k) = (T_j(k) − s)/(T_j(b) − s)
//! ```
//!
//! over the K training workloads `j` nearest to `i` (among those measured at `k`), distance
//! the Euclidean one in standardised baseline features: the counter rates and static-feature
//! shares `scaling` screens, plus the workload's baseline targets (`baseline:power_w`,
//! `baseline:time_s`), a feature taken in logarithms when it is positive on every training
//! workload, and a static-feature share with zeros too, after zero replacement
//! ([`transform`], [`ZeroReplacement`]; since stop 35). Weights `ω_j` are 1 (uniform) or
//! `1/(d_j + 10⁻³)` (inverse distance).
//!
//! This is K-nearest-neighbour regression (Cover & Hart, IEEE Trans. Inf. Theory 13(1), 1967;
//! Stone, Ann. Statist. 5(4), 1977, for its consistency and the distance weights), applied as
//! Wu et al. (HPCA 2015, "GPGPU performance and power estimation using machine learning") do
//! for GPU DVFS: kernels are grouped by how their time and power scale across settings, and
//! a new kernel takes the scaling of the group its counters at one setting place it in; here
//! the "group" is the K nearest training workloads rather than a fixed clustering.
//!
//! Everything is chosen on the training workloads only: K, the weighting and the features by
//! the same inner cross-validation over training workloads as `scaling` (leave one workload
//! out up to [`super::ScalingParams::inner_folds`] workloads, that many folds beyond),
//! features by forward selection among candidates screened by |Spearman ρ| with the mean
//! response. `s` is `scaling`'s static part with no features (0 for time).

use super::weights::Data;
use super::SelectionStep;
use crate::models::features::spearman;
use ndarray::Array2;
use serde::{Deserialize, Serialize};

/// How the K neighbours' ratios are weighted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Weighting {
    /// Every neighbour alike.
    Uniform,
    /// `1/(d + 10⁻³)`, `d` the distance in standardised features.
    InverseDistance,
}

impl Weighting {
    /// A neighbour's weight at distance `dist`.
    fn weight(self, dist: f64) -> f64 {
        match self {
            Weighting::Uniform => 1.0,
            Weighting::InverseDistance => 1.0 / (dist + EPS),
        }
    }
}

/// Parameters of the local transfer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NeighborsParams {
    /// Candidate numbers of neighbours (those below the training workloads are tried).
    pub ks: Vec<usize>,
    /// Candidate weightings.
    pub weightings: Vec<Weighting>,
    /// At most this many features in the distance.
    pub max_features: usize,
    /// A feature is added when it lowers the inner cross-validated MAPE by at least this
    /// fraction.
    pub min_gain: f64,
    /// Candidates kept by the Spearman screen before forward selection.
    pub screen_top: usize,
    /// Whether the baseline targets (`baseline:power_w`, `baseline:time_s`) are candidates.
    pub baseline_targets: bool,
    /// Which features with zeros are taken in logarithms after zero replacement
    /// ([`transform`]; since stop 35).
    pub zero_replacement: ZeroReplacement,
}

/// Which non-negative features with a zero among the training workloads [`transform`] takes
/// in logarithms, each zero replaced by half the smallest positive value first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ZeroReplacement {
    /// Static-feature shares (`static_share:*`, e.g. a PTX instruction mix): exact counts,
    /// where a zero is structural (the kernel has no such instruction). Counter rates stay
    /// linear: a measured rate near zero is mostly noise, which a logarithm would magnify.
    #[default]
    Static,
    /// Every feature, counter rates too.
    All,
    /// None: features with a zero stay linear (the rule before stop 35).
    None,
}

impl ZeroReplacement {
    fn applies(self, name: &str) -> bool {
        match self {
            ZeroReplacement::Static => name.starts_with("static_share:"),
            ZeroReplacement::All => true,
            ZeroReplacement::None => false,
        }
    }
}

impl Default for NeighborsParams {
    fn default() -> Self {
        Self {
            ks: vec![1, 2, 3, 4, 6, 8, 12, 16],
            weightings: vec![Weighting::Uniform, Weighting::InverseDistance],
            max_features: 4,
            min_gain: 0.02,
            screen_top: 12,
            baseline_targets: true,
            zero_replacement: ZeroReplacement::Static,
        }
    }
}

/// The fitted local transfer of one target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NeighborsFit {
    /// Static part `s` (target units; 0 for time).
    pub static_part: f64,
    pub features: Vec<String>,
    /// Whether each feature is taken in logarithms.
    pub log: Vec<bool>,
    /// Smallest training value of each feature, or, for a logarithm of a feature with zeros
    /// among the training workloads, half its smallest positive value (the zero replacement
    /// of [`transform`]); a predicted workload's value is raised to it before a logarithm.
    pub mins: Vec<f64>,
    /// Training standard deviation of each (transformed) feature.
    pub stds: Vec<f64>,
    /// Neighbours; `0`: every training workload.
    pub k: usize,
    pub weighting: Weighting,
    /// Training workloads, their transformed features and their ratios `r_j(k)` at each of
    /// the target's settings (in the order of the target's `settings`), measured or, where
    /// not measured or set aside by robust training, interpolated in the clock between the
    /// workload's neighbouring measured clocks ([`sources`]); `None`: neither.
    pub workloads: Vec<String>,
    pub x: Vec<Vec<f64>>,
    pub ratios: Vec<Vec<Option<f64>>>,
    /// Inner cross-validated MAPE (percent) with no feature, then after each addition.
    pub selection: Vec<SelectionStep>,
    /// Inner cross-validated MAPE of the final choice, percent.
    pub inner_cv_mape_pct: f64,
}

const EPS: f64 = 1e-3;

/// Transformed candidate matrix: logarithms of features positive on every row, and of the
/// features `zeros` names ([`ZeroReplacement`]: static-feature shares by default) that are
/// non-negative on every row with a zero and a positive value, each zero replaced by half
/// the smallest positive value first (the floor); columns with a value that is not
/// finite are dropped (`None`). The second element is `Some(log)` per column, the third the
/// floor a logarithm column raises its values to (its smallest value, or that half), the
/// smallest value for a linear column, NaN for a dropped one.
///
/// Zero replacement is the usual first step of log-ratio analysis of compositions with
/// zeros (Aitchison, *The Statistical Analysis of Compositional Data*, 1986, §11.5;
/// Martín-Fernández, Barceló-Vidal & Pawlowsky-Glahn, "Dealing with zeros and missing values
/// in compositional data sets using nonparametric imputation", Math. Geol. 35(3), 2003, who
/// put it at a fraction of the detection limit). Static-feature shares and counter rates are
/// such data: a kernel with no `cvta` among its PTX instructions converts no generic address
/// to a global one, and in linear shares it sits as close to a DRAM-streaming kernel with a
/// share of 0.1 % as that one sits to itself; in logarithms they are ln 2 apart, on the scale
/// of the shares' spread in logarithms.
pub(super) fn transform(
    x: &Array2<f64>,
    names: &[String],
    zeros: ZeroReplacement,
) -> (Array2<f64>, Vec<Option<bool>>, Vec<f64>) {
    let mut u = x.clone();
    let mut log = Vec::with_capacity(x.ncols());
    let mut floors = Vec::with_capacity(x.ncols());
    debug_assert_eq!(names.len(), x.ncols());
    for (j, (col, name)) in x.columns().into_iter().zip(names).enumerate() {
        if col.iter().any(|v| !v.is_finite()) {
            log.push(None);
            floors.push(f64::NAN);
            continue;
        }
        let min = col.iter().copied().fold(f64::INFINITY, f64::min);
        let min_pos = col
            .iter()
            .copied()
            .filter(|v| *v > 0.0)
            .fold(f64::INFINITY, f64::min);
        let floor = if min > 0.0 {
            Some(min)
        } else if min == 0.0 && min_pos.is_finite() && zeros.applies(name) {
            Some(min_pos / 2.0)
        } else {
            None
        };
        match floor {
            Some(fl) => {
                u.column_mut(j).mapv_inplace(|v| v.max(fl).ln());
                log.push(Some(true));
                floors.push(fl);
            }
            None => {
                log.push(Some(false));
                floors.push(min);
            }
        }
    }
    (u, log, floors)
}

fn std_of(u: &Array2<f64>, rows: &[usize], f: usize) -> f64 {
    let n = rows.len().max(1) as f64;
    let mu = rows.iter().map(|&i| u[[i, f]]).sum::<f64>() / n;
    let var = rows.iter().map(|&i| (u[[i, f]] - mu).powi(2)).sum::<f64>() / n;
    if var.sqrt() > 1e-12 {
        var.sqrt()
    } else {
        1.0
    }
}

/// The neighbours' values per (training row, setting): the measured value where it is
/// measured and kept (robust training's prior above 0), else the linear interpolation in the
/// clock knob between the row's two nearest kept clocks of the same group (values of the
/// other knobs) on either side; NaN where there is no such pair (never extrapolated). A
/// workload measured on a sweep with other steps than its neighbours' (the V100's dgemm and
/// stream) is then predicted at its own clocks from the neighbours' curves: a response ratio
/// is smooth in the clock, and a step between two measured clocks of a dense sweep changes
/// it by a fraction of a percent.
pub(super) fn sources(d: &Data) -> Array2<f64> {
    let mut out = Array2::from_elem(d.t.dim(), f64::NAN);
    let kept = |j: usize, k: usize| d.t[[j, k]].is_finite() && d.prior[[j, k]] != 0.0;
    for j in 0..d.t.nrows() {
        for k in 0..d.settings.len() {
            if kept(j, k) {
                out[[j, k]] = d.t[[j, k]];
                continue;
            }
            let kept_clocks = (0..d.settings.len())
                .filter(|&k2| d.group[k2] == d.group[k] && kept(j, k2))
                .map(|k2| (k2, d.clock[k2]));
            if let Ok(Some(v)) = super::between(kept_clocks, d.clock[k], |k2| Ok(d.t[[j, k2]])) {
                out[[j, k]] = v;
            }
        }
    }
    out
}

/// The neighbours' weighted mean ratio at setting `k`: `order` is the training rows by
/// distance (row, distance), the first `kk` measured at `k` (all when `kk` is 0) count.
/// One configuration at a time, the definition [`mean_ratios`] is checked against.
#[cfg(test)]
fn mean_ratio(
    d: &Data,
    src: &Array2<f64>,
    s: f64,
    order: &[(usize, f64)],
    k: usize,
    kk: usize,
    w: Weighting,
) -> Option<f64> {
    let (mut num, mut den, mut taken) = (0.0, 0.0, 0);
    for &(j, dist) in order {
        if kk > 0 && taken >= kk {
            break;
        }
        let t = src[[j, k]];
        let base = d.tb[j] - s;
        if !t.is_finite() || base == 0.0 || !base.is_finite() {
            continue;
        }
        let om = w.weight(dist);
        num += om * (t - s) / base;
        den += om;
        taken += 1;
    }
    (den > 0.0).then(|| num / den)
}

/// Per weighting, its configurations `(K, index into cfgs)` sorted by K, with K = 0 (every
/// neighbour) as `usize::MAX`: the walks of [`mean_ratios`].
type Walks = Vec<(Weighting, Vec<(usize, usize)>)>;

/// [`Walks`] of `cfgs`.
fn walks(cfgs: &[(usize, Weighting)]) -> Walks {
    [Weighting::Uniform, Weighting::InverseDistance]
        .into_iter()
        .filter_map(|w| {
            let mut mine: Vec<(usize, usize)> = (0..cfgs.len())
                .filter(|&c| cfgs[c].1 == w)
                .map(|c| {
                    (
                        if cfgs[c].0 == 0 {
                            usize::MAX
                        } else {
                            cfgs[c].0
                        },
                        c,
                    )
                })
                .collect();
            mine.sort_unstable();
            (!mine.is_empty()).then_some((w, mine))
        })
        .collect()
}

/// What [`mean_ratios`] reads of each training row at each setting for one static part `s`,
/// computed once per fit instead of once per walk: `t − s` (NaN where the neighbour does not
/// count: no finite value, or a zero or non-finite baseline `tb − s`), `tb − s`, and the
/// uniform weighting's term `(t − s)/(tb − s)` (`1·(t − s)/(tb − s)` is that exactly).
struct Terms {
    settings: usize,
    excess: Vec<f64>,
    base: Vec<f64>,
    uniform: Vec<f64>,
}

impl Terms {
    fn new(d: &Data, src: &Array2<f64>, s: f64) -> Self {
        let settings = src.ncols();
        let base: Vec<f64> = d.tb.iter().map(|tb| tb - s).collect();
        let mut excess = Vec::with_capacity(src.len());
        let mut uniform = Vec::with_capacity(src.len());
        for (j, row) in src.rows().into_iter().enumerate() {
            let b = base[j];
            for &t in row {
                if !t.is_finite() || b == 0.0 || !b.is_finite() {
                    excess.push(f64::NAN);
                    uniform.push(f64::NAN);
                } else {
                    excess.push(t - s);
                    uniform.push((t - s) / b);
                }
            }
        }
        Self {
            settings,
            excess,
            base,
            uniform,
        }
    }
}

/// [`mean_ratio`] of every configuration at once (`walks` of the configurations, `out` one
/// entry per configuration; `terms` of the same `s`; `inverse[e]` the inverse-distance
/// weight of `order[e]`): one walk along `order` for every weighting together (each
/// weighting's sums apart, a weighting left once its configurations are all taken), each
/// configuration's ratio taken when its `K` neighbours have counted (at the end for `K` = 0
/// or beyond the measured neighbours), the same sums in the same order.
fn mean_ratios(
    terms: &Terms,
    order: &[(usize, f64)],
    inverse: &[f64],
    k: usize,
    walks: &Walks,
    out: &mut [Option<f64>],
) {
    // Per weighting: (numerator, denominator, index of its next configuration).
    let mut sums: Vec<(f64, f64, usize)> = vec![(0.0, 0.0, 0); walks.len()];
    let mut open = walks.iter().filter(|(_, mine)| !mine.is_empty()).count();
    let mut taken = 0;
    for (&(j, _), &inv) in order.iter().zip(inverse) {
        if open == 0 {
            break;
        }
        let at = j * terms.settings + k;
        let excess = terms.excess[at];
        if excess.is_nan() {
            continue;
        }
        taken += 1;
        for ((w, mine), (num, den, next)) in walks.iter().zip(sums.iter_mut()) {
            if *next == mine.len() {
                continue;
            }
            match w {
                Weighting::Uniform => {
                    *num += terms.uniform[at];
                    *den += 1.0;
                }
                Weighting::InverseDistance => {
                    *num += inv * excess / terms.base[j];
                    *den += inv;
                }
            }
            if mine[*next].0 == taken {
                let r = (*den > 0.0).then(|| *num / *den);
                while *next < mine.len() && mine[*next].0 == taken {
                    out[mine[*next].1] = r;
                    *next += 1;
                }
                if *next == mine.len() {
                    open -= 1;
                }
            }
        }
    }
    // K = 0 and K beyond the measured neighbours: every neighbour counted.
    for ((_, mine), (num, den, next)) in walks.iter().zip(&sums) {
        let r = (*den > 0.0).then(|| num / den);
        for &(_, c) in &mine[*next..] {
            out[c] = r;
        }
    }
}

/// The (K, weighting) configurations tried with `feats` on `n` training workloads.
fn configs(p: &NeighborsParams, feats: &[usize], n: usize) -> Vec<(usize, Weighting)> {
    if feats.is_empty() {
        return vec![(0, Weighting::Uniform)];
    }
    let mut out = Vec::new();
    for &k in p.ks.iter().filter(|&&k| k >= 1 && k < n.max(2)) {
        for &w in &p.weightings {
            out.push((k, w));
        }
    }
    if out.is_empty() {
        out.push((0, Weighting::Uniform));
    }
    out
}

/// Inner cross-validation of `feats` over `rows` (the fold of row r is `r mod folds`, as
/// `scaling`'s): per configuration, the sum of absolute relative errors and their count;
/// with `keep`, the predictions of configuration `keep` per (row, setting).
#[allow(
    clippy::too_many_arguments,
    reason = "the inner loop of `fit`'s search, called with `fit`'s locals; a struct would only rename them"
)]
fn cv(
    d: &Data,
    terms: &Terms,
    u: &Array2<f64>,
    rows: &[usize],
    feats: &[usize],
    s: f64,
    cfgs: &[(usize, Weighting)],
    folds: usize,
    mut keep: Option<(usize, &mut Array2<f64>)>,
) -> Vec<(f64, usize)> {
    let folds = rows.len().min(folds.max(2)).max(1);
    let mut acc = vec![(0.0, 0usize); cfgs.len()];
    let mut ratios = vec![None; cfgs.len()];
    let walks = walks(cfgs);
    let mut order: Vec<(usize, f64)> = Vec::with_capacity(rows.len());
    let mut inverse: Vec<f64> = Vec::with_capacity(rows.len());
    for f in 0..folds {
        let train: Vec<usize> = rows
            .iter()
            .enumerate()
            .filter(|(r, _)| r % folds != f || folds == 1)
            .map(|(_, &i)| i)
            .collect();
        let stds: Vec<f64> = feats.iter().map(|&j| std_of(u, &train, j)).collect();
        for (_, &i) in rows.iter().enumerate().filter(|(r, _)| r % folds == f) {
            order.clear();
            order.extend(train.iter().filter(|&&j| j != i).map(|&j| {
                let d2: f64 = feats
                    .iter()
                    .zip(&stds)
                    .map(|(&c, sd)| ((u[[i, c]] - u[[j, c]]) / sd).powi(2))
                    .sum();
                (j, d2.sqrt())
            }));
            // Distinct rows: a total order, so the unstable sort gives the same order.
            order.sort_unstable_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
            inverse.clear();
            inverse.extend(
                order
                    .iter()
                    .map(|&(_, dist)| Weighting::InverseDistance.weight(dist)),
            );
            for k in 0..d.settings.len() {
                let t = d.t[[i, k]];
                if !t.is_finite() || t == 0.0 {
                    continue;
                }
                mean_ratios(terms, &order, &inverse, k, &walks, &mut ratios);
                for (c, r) in ratios.iter().enumerate() {
                    let p = r.map(|r| s + (d.tb[i] - s) * r);
                    if let Some((kc, out)) = keep.as_mut() {
                        if *kc == c {
                            out[[i, k]] = p.unwrap_or(f64::NAN);
                        }
                    }
                    match p {
                        Some(p) if p.is_finite() => {
                            acc[c].0 += ((p - t) / t).abs();
                            acc[c].1 += 1;
                        }
                        // A point no neighbour reaches counts as a 100 % error.
                        _ => {
                            acc[c].0 += 1.0;
                            acc[c].1 += 1;
                        }
                    }
                }
            }
        }
    }
    acc
}

/// The best configuration of `feats`: (index into `cfgs`, MAPE as a fraction).
fn best(acc: &[(f64, usize)]) -> Option<(usize, f64)> {
    acc.iter()
        .enumerate()
        .filter(|(_, (_, n))| *n > 0)
        .map(|(c, (e, n))| (c, e / *n as f64))
        .min_by(|a, b| a.1.total_cmp(&b.1))
}

/// What [`fit`] returns besides the stored fit: the inner cross-validated predictions of the
/// chosen configuration per (training row, setting), for `auto`'s choice.
pub(super) struct Fitted {
    pub(super) fit: NeighborsFit,
    pub(super) cv_pred: Array2<f64>,
}

/// Fit the local transfer of one target on the training rows `0..n` of `d`; `x` is the
/// candidate matrix (rows as `d`'s), `names` its column names, `s` the static part.
pub(super) fn fit(
    d: &Data,
    x: &Array2<f64>,
    names: &[String],
    workloads: &[String],
    s: f64,
    p: &NeighborsParams,
    folds: usize,
) -> Fitted {
    let n = d.tb.len();
    let rows: Vec<usize> = (0..n).collect();
    let (u, log, floors) = transform(x, names, p.zero_replacement);
    let src = sources(d);
    let terms = Terms::new(d, &src, s);
    // Screen: |Spearman ρ| of each usable candidate with the mean response.
    let resp = super::mean_response(d, s);
    let mut screened: Vec<(usize, f64)> = (0..u.ncols())
        .filter(|&j| log[j].is_some())
        .filter_map(|j| {
            let col: Vec<f64> = u.column(j).to_vec();
            spearman(&col, &resp).map(|r| (j, r.abs()))
        })
        .filter(|(_, r)| r.is_finite())
        .collect();
    screened.sort_by(|a, b| b.1.total_cmp(&a.1));
    screened.truncate(p.screen_top);

    let score = |feats: &[usize]| -> (f64, (usize, Weighting)) {
        let cfgs = configs(p, feats, n);
        let acc = cv(d, &terms, &u, &rows, feats, s, &cfgs, folds, None);
        match best(&acc) {
            Some((c, e)) => (e, cfgs[c]),
            None => (f64::INFINITY, cfgs[0]),
        }
    };
    let mut feats: Vec<usize> = Vec::new();
    let (mut current, mut cfg) = score(&feats);
    let mut selection = vec![SelectionStep {
        scores: vec![("(none)".into(), current * 100.0)],
        added: None,
    }];
    if n >= 3 {
        while feats.len() < p.max_features {
            let scores: Vec<(usize, f64, (usize, Weighting))> = screened
                .iter()
                .filter(|(j, _)| !feats.contains(j))
                .map(|(j, _)| {
                    let mut f = feats.clone();
                    f.push(*j);
                    let (e, c) = score(&f);
                    (*j, e, c)
                })
                .collect();
            let top = scores
                .iter()
                .copied()
                .filter(|(_, e, _)| e.is_finite())
                .min_by(|a, b| a.1.total_cmp(&b.1));
            let added = top.filter(|(_, e, _)| *e < current * (1.0 - p.min_gain));
            selection.push(SelectionStep {
                scores: scores
                    .iter()
                    .map(|(j, e, _)| (names[*j].clone(), e * 100.0))
                    .collect(),
                added: added.map(|(j, _, _)| names[j].clone()),
            });
            match added {
                Some((j, e, c)) => {
                    feats.push(j);
                    current = e;
                    cfg = c;
                }
                None => break,
            }
        }
    }
    let mut cv_pred = Array2::from_elem(d.t.dim(), f64::NAN);
    cv(
        d,
        &terms,
        &u,
        &rows,
        &feats,
        s,
        &[cfg],
        folds,
        Some((0, &mut cv_pred)),
    );
    let ratios = (0..n)
        .map(|i| {
            (0..d.settings.len())
                .map(|k| {
                    let t = src[[i, k]];
                    let base = d.tb[i] - s;
                    (t.is_finite() && base != 0.0)
                        .then(|| (t - s) / base)
                        .filter(|r| r.is_finite())
                })
                .collect()
        })
        .collect();
    let fit = NeighborsFit {
        static_part: s,
        features: feats.iter().map(|&j| names[j].clone()).collect(),
        log: feats.iter().map(|&j| log[j] == Some(true)).collect(),
        mins: feats.iter().map(|&j| floors[j]).collect(),
        stds: feats.iter().map(|&j| std_of(&u, &rows, j)).collect(),
        k: cfg.0,
        weighting: cfg.1,
        workloads: workloads.to_vec(),
        x: (0..n)
            .map(|i| feats.iter().map(|&j| u[[i, j]]).collect())
            .collect(),
        ratios,
        selection,
        inner_cv_mape_pct: current * 100.0,
    };
    Fitted { fit, cv_pred }
}

impl NeighborsFit {
    /// The weighted mean ratio at setting index `k` for a workload with feature values
    /// `value(name)` (a missing or non-finite value leaves its feature out of the distance).
    ///
    /// # Errors
    /// A text saying what is inconsistent in a damaged model file, or `Ok(None)` when no
    /// training workload was measured at `k`.
    pub fn ratio(
        &self,
        k: usize,
        value: impl Fn(&str) -> Option<f64>,
    ) -> Result<Option<f64>, String> {
        let m = self.features.len();
        if self.log.len() != m || self.mins.len() != m || self.stds.len() != m {
            return Err(format!(
                "{m} features, {} log flags, {} mins and {} stds",
                self.log.len(),
                self.mins.len(),
                self.stds.len()
            ));
        }
        if self.x.len() != self.ratios.len() || self.x.iter().any(|r| r.len() != m) {
            return Err(format!(
                "{} training workloads with features, {} with ratios, {m} features each",
                self.x.len(),
                self.ratios.len()
            ));
        }
        let z: Vec<Option<f64>> = self
            .features
            .iter()
            .enumerate()
            .map(|(j, f)| {
                value(f).filter(|v| v.is_finite()).map(|v| {
                    if self.log[j] {
                        v.max(self.mins[j]).max(f64::MIN_POSITIVE).ln()
                    } else {
                        v
                    }
                })
            })
            .collect();
        let mut order: Vec<(usize, f64)> = self
            .x
            .iter()
            .enumerate()
            .map(|(i, xi)| {
                let d2: f64 = z
                    .iter()
                    .zip(xi)
                    .zip(&self.stds)
                    .filter_map(|((a, b), sd)| a.map(|a| ((a - b) / sd).powi(2)))
                    .sum();
                (i, d2.sqrt())
            })
            .collect();
        order.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
        let (mut num, mut den, mut taken) = (0.0, 0.0, 0);
        for (i, dist) in order {
            if self.k > 0 && taken >= self.k {
                break;
            }
            let Some(Some(r)) = self.ratios[i].get(k) else {
                continue;
            };
            let om = self.weighting.weight(dist);
            num += om * r;
            den += om;
            taken += 1;
        }
        Ok((den > 0.0).then(|| num / den))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Zero replacement: a static share with zeros is logged after its zeros are raised to
    /// half its smallest positive value, so a zero and a 0.1 % share end up ln 2 apart where
    /// linearly they are 0.2 % of the column's range apart; a counter rate with zeros stays
    /// linear unless every feature is asked for; a negative or non-finite column is never
    /// logged.
    #[test]
    fn zero_replacement_logs_static_shares_with_zeros() {
        let x = ndarray::array![
            [0.0, 0.0, -1.0, 2.0],
            [0.001, 0.001, 0.0, 3.0],
            [0.5, 0.5, 1.0, f64::NAN],
        ];
        let names: Vec<String> = ["static_share:cvta", "dram_rate", "signed", "broken"]
            .map(String::from)
            .to_vec();
        let (u, log, floors) = transform(&x, &names, ZeroReplacement::Static);
        assert_eq!(log, vec![Some(true), Some(false), Some(false), None]);
        assert_eq!(floors[0], 0.0005);
        assert_eq!(floors[1], 0.0);
        assert_eq!(floors[2], -1.0);
        assert_eq!(u[[0, 0]], 0.0005f64.ln());
        assert!(((u[[1, 0]] - u[[0, 0]]) - 2f64.ln()).abs() < 1e-12);
        assert_eq!(u[[0, 1]], 0.0);
        let (_, log, floors) = transform(&x, &names, ZeroReplacement::All);
        assert_eq!(log, vec![Some(true), Some(true), Some(false), None]);
        assert_eq!(floors[1], 0.0005);
        let (_, log, _) = transform(&x, &names, ZeroReplacement::None);
        assert_eq!(log, vec![Some(false), Some(false), Some(false), None]);
    }

    /// The one walk per weighting gives every configuration's ratio bit for bit as the walk
    /// per configuration, with unmeasured neighbours, a zero baseline and K beyond the
    /// measured neighbours among them.
    #[test]
    fn one_walk_per_weighting_equals_one_walk_per_configuration() {
        let n = 9;
        let settings = 3;
        let mut src = Array2::from_elem((n, settings), f64::NAN);
        let mut tb = Vec::new();
        for j in 0..n {
            let jf = j as f64;
            tb.push(if j == 4 {
                0.5
            } else {
                10.0 + (jf * 0.37).sin() * 3.0
            });
            for k in 0..settings {
                if (j + k) % 4 != 3 {
                    src[[j, k]] = 5.0 + ((jf + 1.0) * (k as f64 + 2.0) * 0.61).cos() * 2.0;
                }
            }
        }
        let d = Data {
            tb,
            x: Array2::zeros((n, 0)),
            settings: vec![crate::models::Knobs::new(); settings],
            clock: vec![0.0; settings],
            group: vec![0; settings],
            t: src.clone(),
            prior: Array2::ones((n, settings)),
        };
        let order: Vec<(usize, f64)> = (0..n).map(|j| (j, 0.1 * j as f64)).collect();
        let mut cfgs = vec![(0, Weighting::Uniform)];
        for kk in [1, 2, 3, 4, 6, 8, 12, 16] {
            for w in [Weighting::Uniform, Weighting::InverseDistance] {
                cfgs.push((kk, w));
            }
        }
        let mut got = Vec::new();
        for s in [0.0, 0.5] {
            for k in 0..settings {
                got.clear();
                got.resize(cfgs.len(), None);
                let inverse: Vec<f64> = order
                    .iter()
                    .map(|&(_, dist)| Weighting::InverseDistance.weight(dist))
                    .collect();
                mean_ratios(
                    &Terms::new(&d, &src, s),
                    &order,
                    &inverse,
                    k,
                    &walks(&cfgs),
                    &mut got,
                );
                for (c, &(kk, w)) in cfgs.iter().enumerate() {
                    let want = mean_ratio(&d, &src, s, &order, k, kk, w);
                    assert_eq!(
                        got[c].map(f64::to_bits),
                        want.map(f64::to_bits),
                        "s {s}, setting {k}, K {kk}, {w:?}"
                    );
                    assert!(want.is_some());
                }
            }
        }
    }
}
