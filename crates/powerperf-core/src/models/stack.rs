//! `auto`'s per-target stack in workload holdout on a set with DCGM activity fractions
//! (where [`super::analytic_counters::roofline_applicable`] holds) or on a clock sweep
//! with an instructions count, and cycles where the set has them ([`auto_applies`]): for
//! each target, the physical form
//! (`analytic_counters`' bound and bottleneck with the roofline power transfer, nothing
//! fitted on the held-out workload; on the CPU sweep its base-CPI form, one base CPI fitted on
//! the training workloads), the data-driven local transfer (`neighbors`: the
//! K nearest training workloads' ratios, [`super::scaling::NeighborsParams`]), the mean of
//! the two, or (since stop 32) the training workloads' common response (`scaling`'s global
//! transfer without features: the null model, as among `scaling`'s own transfers), whichever
//! has the lowest inner cross-validated MAPE on the training workloads.
//!
//! This is stacked generalisation (Wolpert, Neural Networks 5(2), 1992; Breiman, Machine
//! Learning 24(1), 1996, "Stacked regressions") restricted to four fixed combinations, so
//! that the choice has one discrete degree of freedom per target: the combination is scored
//! by leaving each training workload out in turn (refitting both models on the other training
//! workloads plus that workload's baseline point, the outer protocol one level down; beyond
//! `scaling.inner_folds` workloads, that many folds of several workloads each) and never
//! sees the held-out workload's other points. A physical model and a nearest-neighbour
//! transfer err on different workloads (the first where a counter fraction misreads the
//! workload's bottleneck, the second where a workload has no close neighbour), which is what
//! an average of the two can exploit and what the inner score measures.
//!
//! `--model stack` fits the same on any set (`fit`, `predict`, `evaluate`): the choice by
//! the inner cross-validation over every training workload with a baseline point and
//! another point, both members fitted on all points, and a workload known at its baseline
//! point alone predicted from them. In workload holdout that is exactly `auto`'s rule (the
//! held-out workload has its baseline point only, so it is never an inner fold).
//!
//! At a setting the physical form does not model (another thread count for the base-CPI
//! form, another memory clock), the stack takes the neighbours or the common response,
//! whichever the same inner folds score better on the left-out workloads' points there
//! ([`StackModel::fallback`], since stop 32; before, the neighbours unscored).
//!
//! Since issue 41 `scaling` (its global transfer with its own features, what `--model
//! scaling` fits) is a fourth member and the reference, and `blend`, the mean of `scaling`
//! and the neighbours, a sixth candidate: another candidate is taken only where
//! it beats `scaling` on the inner folds by more than one standard error of the per-fold
//! differences ([`super::select`]), the one with the lowest inner MAPE among those that do.
//! Ties, and targets the inner folds cannot score (no left-out point every member predicts),
//! keep `scaling` (before issue 41: the lowest inner MAPE, ties to the physical form). At a
//! setting the physical form does not model, the same rule chooses between the neighbours
//! and the common response (the reference there), and that choice predicts there whatever
//! the choice elsewhere. `neighbors` rather than `scaling`'s own per-target choice is the
//! data-driven member for cost: one inner level of refits per training workload, and the
//! neighbours' fit costs about a tenth of `scaling`'s choice among its four transfers.

use super::analytic_counters::{
    base_cpi_applicable, roofline_applicable, AnalyticCountersModel, AnalyticCountersParams,
    PowerTransfer,
};
use super::scaling::ScalingModel;
use super::scoring::{fit_then_predict, measured, predict_each};
use super::{FitParams, Knobs, ModelError, ModelKind, Prediction};
use powerperf_format::set::{Point, SetMeta, TARGETS};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The candidates: the physical form, the neighbours' transfer, their mean, the training
/// workloads' common response (`scaling`'s global transfer without features, the null model
/// of model selection; since stop 32), and `scaling` (its global transfer with its own
/// feature selection, what `--model scaling` fits; since issue 41 the reference that a
/// challenger must beat clearly, [`super::select`]), and `blend`, the mean of `scaling` and
/// the neighbours (`scaling`'s own name for it, `transfer: blend`; issue 41's rule lists it
/// among the candidates on every set).
pub const CANDIDATES: [&str; 6] = [
    "analytic_counters",
    "neighbors",
    "mean",
    "common_response",
    "scaling",
    "blend",
];

/// The [`CANDIDATES`] index of the reference, `scaling`.
const REFERENCE: usize = 4;

/// One model's prediction per test point, or the reason it has none.
type Preds = Vec<Result<Prediction, String>>;

fn value(p: &Result<Prediction, String>, t: &str) -> Option<f64> {
    p.as_ref()
        .ok()
        .and_then(|p| p.target(t))
        .filter(|v| v.is_finite())
}

/// Candidate `c`'s value of target `t` from the physical (`a`), neighbours' (`n`),
/// common-response (`g`) and `scaling`'s (`sc`) predictions: the mean needs the first two,
/// the blend the neighbours' and `scaling`'s.
fn candidate(
    c: usize,
    a: Option<f64>,
    n: Option<f64>,
    g: Option<f64>,
    sc: Option<f64>,
) -> Option<f64> {
    match c {
        0 => a,
        1 => n,
        2 => Some((a? + n?) / 2.0),
        3 => g,
        4 => sc,
        _ => Some((sc? + n?) / 2.0),
    }
}

/// The common-response member's parameters: `scaling`'s global transfer with no features
/// (every training workload's response at a setting, one weight per setting).
fn common_params(params: &FitParams) -> FitParams {
    let mut p = params.clone();
    p.scaling.transfer = Some(super::scaling::Transfer::Global);
    p.scaling.max_features = 0;
    p
}

/// The `scaling` member's parameters: its global transfer with its own feature selection
/// (`auto` sets `transfer: choose` for the rest of workload holdout).
fn scaling_params(params: &FitParams) -> FitParams {
    let mut p = params.clone();
    p.scaling.transfer = Some(super::scaling::Transfer::Global);
    p
}

/// The members fitted on `train` (physical, neighbours, common response, `scaling`), each
/// predicting every `test` point.
fn members(
    meta: &SetMeta,
    params: &FitParams,
    train: &[Point],
    test: &[&Point],
) -> (Preds, Preds, Preds, Preds) {
    // The physical member is predicted from and dropped: its power model without the time
    // curves no prediction of it reads.
    let physical =
        super::analytic_counters::fit_for_prediction(meta, train, &params.analytic_counters)
            .map(super::Fitted::AnalyticCounters);
    (
        predict_each(&physical, test),
        fit_then_predict(ModelKind::Neighbors, meta, train, test, params),
        fit_then_predict(
            ModelKind::Scaling,
            meta,
            train,
            test,
            &common_params(params),
        ),
        fit_then_predict(
            ModelKind::Scaling,
            meta,
            train,
            test,
            &scaling_params(params),
        ),
    )
}

/// Per target, the index into [`CANDIDATES`] chosen and each candidate's inner MAPE
/// (percent; NaN where unscored).
type Choice = BTreeMap<String, (usize, [f64; 6])>;

/// Per target, the chosen candidate's name and each scored candidate's inner MAPE by name,
/// as the model file keeps them; `idx[i]` is the [`CANDIDATES`] index of score `i`.
fn named<const N: usize>(
    m: &BTreeMap<String, (usize, [f64; N])>,
    idx: [usize; N],
) -> (
    BTreeMap<String, String>,
    BTreeMap<String, BTreeMap<String, f64>>,
) {
    let chosen = m
        .iter()
        .map(|(t, (c, _))| (t.clone(), CANDIDATES[*c].to_string()))
        .collect();
    let scores = m
        .iter()
        .map(|(t, (_, sc))| {
            let by_name = idx
                .iter()
                .zip(sc)
                .filter(|(_, e)| e.is_finite())
                .map(|(c, e)| (CANDIDATES[*c].to_string(), *e))
                .collect();
            (t.clone(), by_name)
        })
        .collect();
    (chosen, scores)
}

/// The [`CANDIDATES`] index of a candidate's name.
fn index(name: &str) -> Option<usize> {
    CANDIDATES.iter().position(|x| *x == name)
}

/// The candidates scored where the physical form has no prediction (indices into
/// [`CANDIDATES`]): the neighbours and the common response.
const FALLBACKS: [usize; 2] = [1, 3];

/// Per target, where the physical form has no prediction (a held-out workload at another
/// value of a knob it does not model: another thread count or memory clock), the index
/// into [`CANDIDATES`] chosen among [`FALLBACKS`] and their inner MAPEs; targets without
/// such inner points are absent.
type Fallback = BTreeMap<String, (usize, [f64; 2])>;

/// The choice per target on `train` (with `auto` in workload holdout, the held-out
/// workload's baseline point among them, its other points not): the training workloads with
/// a baseline point and another point, left out in turn (that many folds beyond
/// `scaling.inner_folds`, workload `i` in fold `i mod folds`, as `scaling`'s own inner
/// cross-validation).
fn choose(
    meta: &SetMeta,
    params: &FitParams,
    train: &[Point],
    at_base: &dyn Fn(&Point) -> bool,
) -> (Choice, Fallback) {
    let mut inner: Vec<&str> = Vec::new();
    for p in train {
        let w = p.workload.as_str();
        if !inner.contains(&w)
            && train.iter().any(|q| q.workload == w && at_base(q))
            && train.iter().any(|q| q.workload == w && !at_base(q))
        {
            inner.push(w);
        }
    }
    let folds = inner.len().min(params.scaling.inner_folds.max(2));
    // Per target, candidate and inner fold: (sum of absolute percentage errors, count) over
    // points every candidate predicts.
    let mut sums: BTreeMap<&str, [Vec<(f64, usize)>; 6]> = BTreeMap::new();
    // The same for the neighbours and the common response over points the physical form
    // does not predict.
    let mut fb_sums: BTreeMap<&str, [Vec<(f64, usize)>; 2]> = BTreeMap::new();
    let empty = || vec![(0.0, 0usize); folds];
    // One owned copy of the training points, reordered for each fold: its training points
    // first and its left-out points last, each in the order of `train`, so the members see
    // what a filtered copy per fold gave them, without copying every point's counters per
    // fold (on a set with tens of counters per point the copies cost more than the fits).
    // `ids` follows each point's position in `train`.
    let mut pool: Vec<Point> = train.to_vec();
    let mut ids: Vec<usize> = (0..pool.len()).collect();
    for f in 0..folds {
        let out: Vec<&str> = (f..inner.len()).step_by(folds).map(|i| inner[i]).collect();
        let left_out = |p: &Point| out.contains(&p.workload.as_str()) && !at_base(p);
        let mut order: Vec<usize> = (0..pool.len()).collect();
        order.sort_by_key(|&i| (left_out(&pool[i]), ids[i]));
        let mut slots: Vec<Option<Point>> =
            std::mem::take(&mut pool).into_iter().map(Some).collect();
        pool = order.iter().filter_map(|&i| slots[i].take()).collect();
        ids = order.iter().map(|&i| ids[i]).collect();
        let kept = pool.iter().filter(|p| !left_out(p)).count();
        let (sub, rest) = pool.split_at(kept);
        let test: Vec<&Point> = rest.iter().collect();
        let (pa, pn, pg, ps) = members(meta, params, sub, &test);
        for (i, p) in test.iter().enumerate() {
            let m = measured(p);
            for t in TARGETS {
                if !meta.is_reliable(t, &p.workload) {
                    continue;
                }
                let Some(y) = m.target(t).filter(|y| *y != 0.0 && y.is_finite()) else {
                    continue;
                };
                let (a, n, g) = (value(&pa[i], t), value(&pn[i], t), value(&pg[i], t));
                let sc = value(&ps[i], t);
                if n.is_none() || g.is_none() {
                    continue;
                }
                // Candidate `c`'s absolute percentage error added to fold `f`'s sum.
                let add = |acc: &mut Vec<(f64, usize)>, c: usize| {
                    if let Some(x) = candidate(c, a, n, g, sc) {
                        acc[f].0 += ((x - y) / y).abs() * 100.0;
                        acc[f].1 += 1;
                    }
                };
                if a.is_none() {
                    let e = fb_sums.entry(t).or_insert_with(|| [empty(), empty()]);
                    e.iter_mut().zip(FALLBACKS).for_each(|(acc, c)| add(acc, c));
                } else if sc.is_some() {
                    let e = sums
                        .entry(t)
                        .or_insert_with(|| std::array::from_fn(|_| empty()));
                    e.iter_mut().enumerate().for_each(|(c, acc)| add(acc, c));
                }
            }
        }
    }
    // The pooled MAPE over every fold's points.
    let pooled = |v: &Vec<(f64, usize)>| {
        let (sum, n) = v.iter().fold((0.0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
        if n > 0 {
            sum / n as f64
        } else {
            f64::NAN
        }
    };
    // Issue 41's rule (`super::select`): the reference unless a challenger beats it by
    // more than one standard error of the per-fold differences; no score keeps it.
    let pick = |s: &[Vec<(f64, usize)>], reference: usize| -> usize {
        let per_fold: Vec<Vec<f64>> = s.iter().map(|v| super::select::fold_mapes(v)).collect();
        let scores: Vec<f64> = s.iter().map(pooled).collect();
        super::select::choose(&per_fold, &scores, reference)
    };
    let choice = TARGETS
        .iter()
        .map(|t| match sums.get(t) {
            Some(s) => (
                t.to_string(),
                (pick(s, REFERENCE), s.each_ref().map(pooled)),
            ),
            None => (t.to_string(), (REFERENCE, [f64::NAN; 6])),
        })
        .collect();
    let fallback = fb_sums
        .iter()
        .map(|(t, s)| {
            // The common response is the reference here (index 1 of FALLBACKS).
            let best = pick(s, 1);
            (t.to_string(), (FALLBACKS[best], s.each_ref().map(pooled)))
        })
        .collect();
    (choice, fallback)
}

/// The parameters the members take: where `params` leaves `analytic_counters` at its
/// defaults, its bound-and-bottleneck form with the roofline power transfer on a set with
/// DCGM fractions ([`roofline_applicable`]), else its base-CPI form on a set with an
/// instructions count ([`base_cpi_applicable`]).
fn member_params(meta: &SetMeta, params: &FitParams) -> FitParams {
    let mut p = params.clone();
    if p.analytic_counters == AnalyticCountersParams::default() {
        if roofline_applicable(meta) {
            p.analytic_counters = AnalyticCountersParams {
                power_transfer: PowerTransfer::Roofline,
                ..AnalyticCountersParams::roofline()
            };
        } else if base_cpi_applicable(meta) {
            p.analytic_counters = AnalyticCountersParams::base_cpi();
        }
    }
    p
}

/// Whether `auto` in workload holdout takes the stack on these points (with `analytic_counters`
/// at its defaults): a set with DCGM fractions, or one with an instructions count (CPU or
/// GPU warp instructions) and a clock knob. The base-CPI form predicts along the clock only;
/// at another value of a knob it does not model (a thread count, a memory clock) the stack
/// takes the neighbours or the common response, chosen by inner cross-validation on those
/// points (`StackModel::fallback`, since stop 32; before it the stack fell back to the
/// neighbours unscored, and `auto` kept it to sets with one value of every other knob).
pub fn auto_applies(meta: &SetMeta, points: &[Point]) -> bool {
    roofline_applicable(meta)
        || (base_cpi_applicable(meta)
            && super::analytic::freq_knob_of(meta, points, None).is_some())
}

/// A fitted stack (`--model stack`, and `auto` in workload holdout on a set with DCGM
/// fractions).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StackModel {
    /// The physical member; `None` where it could not be fitted (the reason in `notes`).
    pub physical: Option<AnalyticCountersModel>,
    /// The neighbours' member; `None` where it could not be fitted.
    pub neighbors: Option<ScalingModel>,
    /// The common-response member (`scaling`'s global transfer without features); `None`
    /// where it could not be fitted, and in files written before stop 32.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub common: Option<ScalingModel>,
    /// The `scaling` member (its global transfer with its own features; the reference of
    /// issue 41's rule); `None` where it could not be fitted, and in files written before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scaling: Option<ScalingModel>,
    /// Per target, the candidate chosen (one of [`CANDIDATES`]).
    pub choice: BTreeMap<String, String>,
    /// Per target, each scored candidate's inner cross-validated MAPE, percent.
    pub inner_mape_pct: BTreeMap<String, BTreeMap<String, f64>>,
    /// Why a member is missing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Per target, the candidate (`neighbors` or `common_response`) used where the physical
    /// form has no prediction (another value of a knob it does not model), chosen by the
    /// same inner cross-validation on those points (since stop 32; absent in older files and
    /// where no inner point lacked a physical prediction).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub fallback: BTreeMap<String, String>,
    /// Per target, the two fallback candidates' inner MAPE, percent.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub fallback_mape_pct: BTreeMap<String, BTreeMap<String, f64>>,
}

/// Fit the stack on mean points: the choice per target by inner cross-validation, then both
/// members on all points (the baseline setting is `scaling.baseline`, else the maximum of
/// every knob, as for `scaling`).
///
/// # Errors
/// The physical member's error when neither member can be fitted.
pub fn fit(meta: &SetMeta, points: &[Point], params: &FitParams) -> Result<StackModel, ModelError> {
    let params = member_params(meta, params);
    let baseline = super::scaling::baseline_setting(points, &params.scaling);
    let at_base = |p: &Point| super::features::matches_setting(&p.knobs, &baseline);
    let (choice, fallback) = choose(meta, &params, points, &at_base);
    let physical = super::analytic_counters::fit(meta, points, &params.analytic_counters);
    let neighbors = super::scaling::fit_neighbors(meta, points, &params.scaling);
    let common = super::scaling::fit(meta, points, &common_params(&params).scaling);
    // Its feature-selection log is dropped: a step's score is infinite where no fit
    // exists, which a JSON model file cannot hold.
    let scaling =
        super::scaling::fit(meta, points, &scaling_params(&params).scaling).map(|mut m| {
            for t in &mut m.targets {
                t.selection.clear();
            }
            m
        });
    let mut notes = Vec::new();
    let physical = match physical {
        Ok(m) => Some(m),
        Err(e) if neighbors.is_err() => return Err(e),
        Err(e) => {
            notes.push(format!("analytic_counters: {e}"));
            None
        }
    };
    let mut keep = |name: &str, r: Result<ScalingModel, ModelError>| match r {
        Ok(m) => Some(m),
        Err(e) => {
            notes.push(format!("{name}: {e}"));
            None
        }
    };
    let (neighbors, common, scaling) = (
        keep("neighbors", neighbors),
        keep("common_response", common),
        keep("scaling", scaling),
    );
    let (choice, inner_mape_pct) = named(&choice, [0, 1, 2, 3, 4, 5]);
    let (fallback, fallback_mape_pct) = named(&fallback, FALLBACKS);
    Ok(StackModel {
        physical,
        neighbors,
        common,
        scaling,
        choice,
        inner_mape_pct,
        notes,
        fallback,
        fallback_mape_pct,
    })
}

impl StackModel {
    /// Predict `workload` at `knobs`: per target the chosen candidate; at a setting the
    /// physical form does not model (no physical prediction), the fallback's choice between
    /// the neighbours and the common response (issue 41's rule: the common response, its
    /// reference there, where the inner folds scored none). Files written before issue 41
    /// (no `scaling` member) keep their rule: the chosen candidate, where it has no value
    /// the fallback, then the physical form's, then the neighbours'.
    ///
    /// # Errors
    /// The physical member's error (else the neighbours') where neither predicts.
    pub fn predict(&self, workload: &str, knobs: &Knobs) -> Result<Prediction, ModelError> {
        let missing = || ModelError::NotEnoughData {
            model: "stack".into(),
            what: format!("no member was fitted ({})", self.notes.join("; ")),
        };
        let a = self
            .physical
            .as_ref()
            .map_or_else(|| Err(missing()), |m| m.predict(workload, knobs));
        let n = self
            .neighbors
            .as_ref()
            .map_or_else(|| Err(missing()), |m| m.predict(workload, knobs));
        let (a, n) = match (a, n) {
            (Err(e), Err(_)) => return Err(e),
            (a, n) => (a.map_err(|e| e.to_string()), n.map_err(|e| e.to_string())),
        };
        let g = self.common.as_ref().map_or_else(
            || Err(String::new()),
            |m| m.predict(workload, knobs).map_err(|e| e.to_string()),
        );
        let sc = self.scaling.as_ref().map_or_else(
            || Err(String::new()),
            |m| m.predict(workload, knobs).map_err(|e| e.to_string()),
        );
        let get = |t: &str| {
            let (va, vn, vg, vs) = (value(&a, t), value(&n, t), value(&g, t), value(&sc, t));
            let chosen = self.choice.get(t).and_then(|c| index(c));
            let fallback = self.fallback.get(t).and_then(|c| index(c));
            if self.scaling.is_some() {
                // Issue 41: where the physical form has no prediction, the rule between
                // the neighbours and the common response (the reference there).
                if va.is_none() {
                    return candidate(fallback.unwrap_or(3), None, vn, vg, None)
                        .or(vg)
                        .or(vn);
                }
                return candidate(chosen.unwrap_or(REFERENCE), va, vn, vg, vs)
                    .or(vs)
                    .or(va);
            }
            // Where the chosen candidate has no value (no physical prediction there).
            let elsewhere = || candidate(fallback?, None, vn, vg, None);
            candidate(chosen.unwrap_or(0), va, vn, vg, vs)
                .or_else(elsewhere)
                .or(va)
                .or(vn)
        };
        Ok(Prediction {
            time_s: get("time_s"),
            power_w: get("power_w"),
            energy_j: get("energy_j"),
        })
    }

    /// What was fitted and chosen, for `fit --explain`.
    pub fn explain(&self) -> String {
        let mut s = "stack (stacked generalisation, Wolpert 1992; Breiman 1996): per target `scaling`, unless the physical form (analytic-counters), the neighbours' transfer, their mean, the training workloads' common response or the mean of `scaling` and the neighbours (blend) beats it on the training workloads' inner cross-validation by more than one standard error of the per-fold differences (issue 41)\n".to_string();
        for (t, c) in &self.choice {
            let sc: Vec<String> = self
                .inner_mape_pct
                .get(t)
                .map(|m| m.iter().map(|(n, e)| format!("{n} {e:.2} %")).collect())
                .unwrap_or_default();
            let sc = if sc.is_empty() {
                "not scored".to_string()
            } else {
                sc.join(", ")
            };
            s += &format!("  {t}: {sc} -> {c}\n");
        }
        for (t, c) in &self.fallback {
            let sc: Vec<String> = self
                .fallback_mape_pct
                .get(t)
                .map(|m| m.iter().map(|(n, e)| format!("{n} {e:.2} %")).collect())
                .unwrap_or_default();
            s += &format!(
                "  {t} where the physical form has no prediction: {} -> {c}\n",
                sc.join(", ")
            );
        }
        for n in &self.notes {
            s += &format!("  member not fitted: {n}\n");
        }
        if let Some(m) = &self.physical {
            s += "physical member:\n";
            s += &m.explain();
        }
        if let Some(m) = &self.neighbors {
            s += "neighbours' member:\n";
            s += &m.explain();
        }
        if let Some(m) = &self.common {
            s += "common-response member:\n";
            s += &m.explain();
        }
        if let Some(m) = &self.scaling {
            s += "scaling member:\n";
            s += &m.explain();
        }
        s
    }
}

/// How often each candidate was chosen per target over the held-out workloads' stacks
/// ([`StackModel::choice`], and [`StackModel::fallback`] in parentheses), as text for the
/// protocol line (`time_s: analytic_counters ×21; power_w: mean ×15, neighbors ×6`).
pub fn describe(stacks: &[&StackModel]) -> String {
    let count = |pick: &dyn Fn(&StackModel) -> Option<&String>| -> Vec<String> {
        CANDIDATES
            .iter()
            .map(|c| {
                (
                    c,
                    stacks
                        .iter()
                        .filter(|m| pick(m).is_some_and(|x| x == c))
                        .count(),
                )
            })
            .filter(|(_, k)| *k > 0)
            .map(|(c, k)| format!("{c} ×{k}"))
            .collect()
    };
    let mut parts = Vec::new();
    for t in TARGETS {
        let items = count(&|m| m.choice.get(t));
        let elsewhere = count(&|m| m.fallback.get(t));
        let mut part = items.join(", ");
        if !elsewhere.is_empty() {
            part += &format!(
                " (where the physical form has no prediction: {})",
                elsewhere.join(", ")
            );
        }
        if !part.is_empty() {
            parts.push(format!("{t}: {part}"));
        }
    }
    parts.join("; ")
}
