//! Held-out evaluation: leave-one-out, knob holdout, workload holdout; MAPE per target.
//!
//! The rules are docs/architecture.md's "Held-out evaluation": a point is the mean over repeats of
//! one (workload, knob values); a held-out point's own measurements (targets and counters) are
//! never inputs. Each protocol builds the training points first, fits on them alone, and only
//! then looks at the held-out points' knob values to predict them.
//!
//! - **Leave-one-out** (`powerperf fit`): for every mean point in turn, fit on all other points
//!   (the same workload's other settings and every other workload) and predict the left-out one.
//! - **Knob holdout**: training points are those whose value of one knob is in a list (any value
//!   of the other knobs); every other point is predicted.
//! - **Workload holdout**: for each workload, train on every other workload plus this workload's
//!   point at the baseline setting; predict its other points.
//!
//! Errors are absolute percentage errors `|pred − meas| / |meas| · 100`; MAPE is their mean over
//! the held-out points that have a measured value and a prediction, skipping targets the set
//! marks unreliable for the workload.

use super::baseline::{self, BaselineEval, Versus};
use super::features::knob_key;
use super::scoring::{
    concat_parts, fit_and_predict, parallel_map, predict_each, push_predictions, summarise,
    PointResult,
};
use super::split::TrainSplit;
use super::{fit_kind, FitParams, HeldOutError, Knobs, ModelKind, Prediction};
use powerperf_format::set::{Point, SetMeta, TARGETS};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The outcome of a protocol.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluation {
    /// The resolved model kind.
    pub kind: ModelKind,
    pub results: Vec<PointResult>,
    /// Held-out points that could not be predicted, with the reason.
    pub failures: Vec<(String, String)>,
    pub summary: HeldOutError,
    /// Held-out points in all, predicted or not.
    pub held_out_points: usize,
    /// Per target, the held-out points with a reliable measurement: what every score is
    /// out of (issue 21: refusing hard points must not improve a score unseen).
    pub held_out: BTreeMap<String, usize>,
    /// The naive baseline on the same split ([`super::baseline`]).
    pub baseline: BaselineEval,
    /// Workload holdout with `auto`: per target, what the nested cross-validation chose on
    /// the held-out workloads' training points and its inner estimate beside the outer error
    /// (issue 41, item 4); empty otherwise.
    pub auto_choice: BTreeMap<String, AutoChoice>,
}

impl Evaluation {
    /// The predictions of `workload`'s held-out points, in order.
    pub fn predictions_of(&self, workload: &str) -> Vec<Prediction> {
        self.results
            .iter()
            .filter(|r| r.workload == workload)
            .map(|r| r.predicted)
            .collect()
    }

    /// The model's error beside the baseline's, per target.
    pub fn versus(&self, meta: &SetMeta) -> BTreeMap<String, Versus> {
        baseline::versus(
            meta,
            &self.held_out,
            &self.results,
            &self.summary,
            &self.baseline,
        )
    }
}

/// The fold of each point for k-fold cross-validation: the j-th point of the w-th workload
/// (in the order given) goes to fold `(j + w) mod k`. A workload with at most k points
/// has each in a different fold, so no fold takes a whole workload away (a workload's
/// curve needs its other points), whatever the order of `points`; the offset by w spreads
/// the workloads' first points over the folds. With k at least the number of points,
/// point i is fold i (leave-one-out).
fn fold_of(points: &[Point], k: usize) -> Vec<usize> {
    if k >= points.len() {
        return (0..points.len()).collect();
    }
    let mut order: Vec<&str> = Vec::new();
    let mut seen: Vec<usize> = Vec::new();
    points
        .iter()
        .map(|p| {
            let w = match order.iter().position(|w| *w == p.workload) {
                Some(w) => w,
                None => {
                    order.push(&p.workload);
                    seen.push(0);
                    order.len() - 1
                }
            };
            let j = seen[w];
            seen[w] += 1;
            (j + w) % k
        })
        .collect()
}

/// Leave-one-out over mean points (see the module docs).
pub fn leave_one_out(
    kind: ModelKind,
    meta: &SetMeta,
    points: &[Point],
    params: &FitParams,
) -> Evaluation {
    leave_one_out_progress(
        kind,
        meta,
        points,
        params,
        &indicatif::ProgressBar::hidden(),
    )
}

/// [`leave_one_out`], advancing `progress` by one per refit (a bar on a terminal; indicatif
/// draws nothing when stderr is not one).
pub fn leave_one_out_progress(
    kind: ModelKind,
    meta: &SetMeta,
    points: &[Point],
    params: &FitParams,
    progress: &indicatif::ProgressBar,
) -> Evaluation {
    cross_validate_progress(kind, meta, points, params, None, progress)
}

/// Cross-validation over mean points: with `folds = Some(k)` (k ≥ 2), every workload's
/// points are dealt round-robin over the k folds (see [`fold_of`]), and each fold is
/// predicted by a model refitted on the others (k refits); with `None`, or a k of at least
/// the number of points, every point is its own fold (leave-one-out, one refit per point).
/// `progress` advances by one per refit.
pub fn cross_validate_progress(
    kind: ModelKind,
    meta: &SetMeta,
    points: &[Point],
    params: &FitParams,
    folds: Option<usize>,
    progress: &indicatif::ProgressBar,
) -> Evaluation {
    let kind = kind.resolve(points, false);
    let k = match folds {
        Some(k) if k >= 2 && k < points.len() => k,
        _ => points.len(),
    };
    progress.set_length(k as u64);
    let fold = fold_of(points, k);
    let folds: Vec<usize> = (0..k).collect();
    let parts = parallel_map(&folds, |&f| {
        let train: Vec<Point> = points
            .iter()
            .enumerate()
            .filter(|(j, _)| fold[*j] != f)
            .map(|(_, p)| p.clone())
            .collect();
        let held: Vec<(usize, &Point)> = points
            .iter()
            .enumerate()
            .filter(|(j, _)| fold[*j] == f)
            .collect();
        let test: Vec<&Point> = held.iter().map(|(_, p)| *p).collect();
        let mut r = Vec::new();
        let mut failures = Vec::new();
        fit_and_predict(kind, meta, &train, &test, params, &mut r, &mut failures);
        let base = baseline::knob_baseline(&train, &test);
        // fit_and_predict skips the points it cannot predict: put the rest back in place.
        let results: Vec<(usize, PointResult)> = r
            .into_iter()
            .map(|pr| {
                let idx = held
                    .iter()
                    .find(|(_, p)| p.workload == pr.workload && p.knobs == pr.knobs)
                    .map_or(usize::MAX, |(j, _)| *j);
                (idx, pr)
            })
            .collect();
        progress.inc(1);
        ((results, failures), base)
    });
    progress.finish_and_clear();
    let (parts, bases): (Vec<_>, Vec<_>) = parts.into_iter().unzip();
    let (mut indexed, failures) = concat_parts(parts);
    indexed.sort_by_key(|(i, _)| *i);
    let results: Vec<PointResult> = indexed.into_iter().map(|(_, r)| r).collect();
    let how = if k == points.len() {
        "leave-one-out: each (workload, knobs) mean predicted from all other points".to_string()
    } else {
        format!(
            "{k}-fold cross-validation: each (workload, knobs) mean predicted by a model refitted without its fold (each workload's points dealt round-robin over the folds)"
        )
    };
    let summary = summarise(meta, &results, &how);
    let all: Vec<&Point> = points.iter().collect();
    Evaluation {
        kind,
        results,
        failures,
        summary,
        held_out_points: points.len(),
        held_out: baseline::held_out_counts(meta, &all),
        baseline: BaselineEval::merge(bases),
        auto_choice: BTreeMap::new(),
    }
}

/// Knob holdout: train on points whose `knob` value is in `train_values`, predict the rest.
pub fn knob_holdout(
    kind: ModelKind,
    meta: &SetMeta,
    points: &[Point],
    knob: &str,
    train_values: &[f64],
    params: &FitParams,
) -> Evaluation {
    split_holdout(
        kind,
        meta,
        points,
        &TrainSplit::Grid(vec![(knob.to_string(), train_values.to_vec())]),
        params,
    )
}

/// A knob split: train on the points `split` picks (one knob's values, a grid over several
/// knobs, or a list of settings), predict the rest; the baseline is the per-workload knob
/// curve, or the separable rule where a held-out point differs from every training point of
/// its workload in two knobs ([`super::baseline`]).
pub fn split_holdout(
    kind: ModelKind,
    meta: &SetMeta,
    points: &[Point],
    split: &TrainSplit,
    params: &FitParams,
) -> Evaluation {
    let train: Vec<Point> = points
        .iter()
        .filter(|p| split.is_train(p))
        .cloned()
        .collect();
    // `auto` looks at the points the model is fitted on (issue 21: a joint model when
    // they vary several knobs in a cross).
    let kind = kind.resolve(&train, false);
    let test: Vec<&Point> = points.iter().filter(|p| !split.is_train(p)).collect();
    let mut results = Vec::new();
    let mut failures = Vec::new();
    fit_and_predict(
        kind,
        meta,
        &train,
        &test,
        params,
        &mut results,
        &mut failures,
    );
    let summary = summarise(meta, &results, &split.describe());
    Evaluation {
        kind,
        results,
        failures,
        summary,
        held_out_points: test.len(),
        held_out: baseline::held_out_counts(meta, &test),
        baseline: baseline::knob_baseline(&train, &test),
        auto_choice: BTreeMap::new(),
    }
}

/// Per target, the candidate `auto` took on one held-out workload's training points and its
/// inner cross-validated MAPE (percent), from the fitted stack or `scaling` (issue 41,
/// item 4); `scaling`'s labels by the stack's names (`global`: `scaling`; `blend`, the mean
/// of `scaling` and the neighbours, is the stack's `blend`).
fn auto_choice(m: &super::Fitted) -> Vec<(String, String, f64)> {
    match m {
        super::Fitted::Stack(s) => s
            .choice
            .iter()
            .map(|(t, c)| {
                let e = s.inner_mape_pct.get(t).and_then(|m| m.get(c)).copied();
                (t.clone(), c.clone(), e.unwrap_or(f64::NAN))
            })
            .collect(),
        super::Fitted::Scaling(s) => s
            .targets
            .iter()
            .filter_map(|tm| {
                let c = tm.chosen.as_ref()?;
                let e = tm
                    .choice
                    .iter()
                    .find(|(l, _)| l == c)
                    .map_or(f64::NAN, |x| x.1);
                let name = match c.as_str() {
                    super::scaling::GLOBAL_NO_FEATURES => "common_response",
                    "global" => "scaling",
                    other => other,
                };
                Some((tm.target.clone(), name.to_string(), e))
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// What `auto` chose for one target over the held-out workloads of a workload holdout
/// (issue 41, item 4): `evaluate --format json`'s `auto_choice`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AutoChoice {
    /// Per candidate (the stack's names: `scaling`, `common_response`, `neighbors`, `blend`,
    /// `analytic_counters`, `mean`), on how many held-out workloads' training points the
    /// nested cross-validation took it.
    pub chosen: BTreeMap<String, usize>,
    /// The chosen candidates' inner cross-validated MAPE, percent, mean over the held-out
    /// workloads where it was scored (absent where none was): what the choice expected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inner_mape_pct: Option<f64>,
    /// The outer error: the held-out MAPE, percent, of this target (absent where no point
    /// was predicted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outer_mape_pct: Option<f64>,
}

/// The choices of [`auto_choice`] over the held-out workloads, per target: how often each
/// candidate was taken, the mean of the chosen candidates' inner MAPE, and the outer MAPE
/// from `summary`.
fn summarise_choices(
    picked: &[Vec<(String, String, f64)>],
    summary: &HeldOutError,
) -> BTreeMap<String, AutoChoice> {
    let mut out = BTreeMap::new();
    for t in TARGETS {
        let mine: Vec<&(String, String, f64)> =
            picked.iter().flatten().filter(|(x, _, _)| x == t).collect();
        if mine.is_empty() {
            continue;
        }
        let mut chosen = BTreeMap::new();
        for (_, c, _) in &mine {
            *chosen.entry(c.clone()).or_insert(0) += 1;
        }
        let scored: Vec<f64> = mine.iter().map(|x| x.2).filter(|e| e.is_finite()).collect();
        let inner = (!scored.is_empty()).then(|| scored.iter().sum::<f64>() / scored.len() as f64);
        let outer = summary.targets.get(t).map(|e| e.mape_pct);
        out.insert(
            t.to_string(),
            AutoChoice {
                chosen,
                inner_mape_pct: inner,
                outer_mape_pct: outer,
            },
        );
    }
    out
}

/// [`summarise_choices`] as text for the protocol line, per target in the order `time_s`,
/// `power_w`, `energy_j`, the candidates by how often they were taken (`time_s: scaling ×8,
/// neighbors ×2, inner 3.10 % beside outer 4.02 %`).
fn describe_choices(choices: &BTreeMap<String, AutoChoice>) -> String {
    let mut parts = Vec::new();
    for t in TARGETS {
        let Some(c) = choices.get(t) else {
            continue;
        };
        let mut counts: Vec<(&String, &usize)> = c.chosen.iter().collect();
        counts.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let inner = c
            .inner_mape_pct
            .map_or("not scored".to_string(), |e| format!("{e:.2} %"));
        let outer = c
            .outer_mape_pct
            .map_or("none".to_string(), |e| format!("{e:.2} %"));
        let counts: Vec<String> = counts.iter().map(|(c, k)| format!("{c} ×{k}")).collect();
        parts.push(format!(
            "{t}: {}, inner {inner} beside outer {outer}",
            counts.join(", ")
        ));
    }
    parts.join("; ")
}

/// Workload holdout: each workload predicted from the other workloads plus its own point at
/// `baseline` (every knob named there must match).
pub fn workload_holdout(
    kind: ModelKind,
    meta: &SetMeta,
    points: &[Point],
    baseline: &Knobs,
    params: &FitParams,
) -> Evaluation {
    let auto = kind == ModelKind::Auto;
    let mut kind = kind.resolve(points, true);
    let mut params = params.clone();
    // `auto` on a set with DCGM-style activity fractions (a memory fraction and a compute
    // pipe's, `analytic_counters::roofline_applicable`), or on a clock sweep with cycles and
    // instructions counts (`stack::auto_applies`), unless `--params` sets analytic_counters:
    // the stack of the physical form (the bound-and-bottleneck form with the roofline power
    // transfer, or the base-CPI form; time from the held-out workload's own counters) and the
    // neighbours' transfer, chosen per target by inner cross-validation (docs/models.md,
    // issue 21).
    if auto
        && super::stack::auto_applies(meta, points)
        && params.analytic_counters == super::analytic_counters::AnalyticCountersParams::default()
    {
        kind = ModelKind::Stack;
    }
    let at_base = |p: &Point| super::features::matches_setting(&p.knobs, baseline);
    let mut workloads: Vec<&str> = Vec::new();
    for p in points {
        if !workloads.contains(&p.workload.as_str()) {
            workloads.push(&p.workload);
        }
    }
    params.regression.baseline = Some(baseline.clone());
    params.scaling.baseline = Some(baseline.clone());
    // `auto`: per target, the transfer with the lowest inner cross-validated error on the
    // training workloads (unless `--params` names one).
    if auto && params.scaling.transfer.is_none() {
        params.scaling.transfer = Some(super::scaling::Transfer::Choose);
    }
    // Each held-out workload is an independent refit.
    let parts = parallel_map(&workloads, |&w| {
        let mut results = Vec::new();
        let mut failures = Vec::new();
        let train: Vec<Point> = points
            .iter()
            .filter(|p| p.workload != w || at_base(p))
            .cloned()
            .collect();
        let test: Vec<&Point> = points
            .iter()
            .filter(|p| p.workload == w && !at_base(p))
            .collect();
        let mut choice = None;
        let mut picked = Vec::new();
        if !train.iter().any(|p| p.workload == w) {
            for p in &test {
                failures.push((
                    format!("{} {}", p.workload, knob_key(&p.knobs)),
                    format!("no point at the baseline {}", knob_key(baseline)),
                ));
            }
        } else if kind == ModelKind::Stack {
            // Fitted here rather than in `fit_and_predict` to report its choices.
            let fitted = super::stack::fit(meta, &train, &params).map(super::Fitted::Stack);
            let preds = predict_each(&fitted, &test);
            push_predictions(&test, preds, &mut results, &mut failures);
            if let Ok(f) = &fitted {
                picked = auto_choice(f);
            }
            if let Ok(super::Fitted::Stack(m)) = fitted {
                choice = Some(m);
            }
        } else {
            let fitted = fit_kind(kind, meta, &train, &params);
            push_predictions(
                &test,
                predict_each(&fitted, &test),
                &mut results,
                &mut failures,
            );
            if let (true, Ok(f)) = (auto, &fitted) {
                picked = auto_choice(f);
            }
        }
        ((results, failures), (choice, picked))
    });
    let (parts, choices): (Vec<_>, Vec<_>) = parts.into_iter().unzip();
    let (choices, picked): (Vec<_>, Vec<_>) = choices.into_iter().unzip();
    let choices: Vec<_> = choices.iter().flatten().collect();
    let (results, failures) = concat_parts(parts);
    let mut protocol = format!(
        "workload holdout: each workload from the others plus its point at {}",
        knob_key(baseline)
    );
    if !choices.is_empty() {
        protocol += &format!(
            "; the stack's choice per target by inner cross-validation: {}",
            super::stack::describe(&choices)
        );
    }
    let mut summary = summarise(meta, &results, &protocol);
    let auto_choice = summarise_choices(&picked, &summary);
    let blind = describe_choices(&auto_choice);
    if !blind.is_empty() {
        summary.protocol += &format!(
            "; auto's choice per target by nested cross-validation on the training workloads, its inner estimate (the chosen candidate's inner MAPE, mean over the held-out workloads) beside the outer error: {blind}"
        );
    }
    let test: Vec<&Point> = points.iter().filter(|p| !at_base(p)).collect();
    let base = baseline::median_ratio_baseline(meta, points, &test, &at_base, &knob_key(baseline));
    Evaluation {
        kind,
        results,
        failures,
        summary,
        held_out_points: test.len(),
        held_out: baseline::held_out_counts(meta, &test),
        baseline: base,
        auto_choice,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pt(w: &str, f: f64, t: f64, p: f64) -> Point {
        Point {
            workload: w.into(),
            knobs: [("core_freq_mhz".to_string(), f)].into_iter().collect(),
            time_s: Some(t),
            power_w: Some(p),
            energy_j: Some(t * p),
            ..Point::default()
        }
    }

    fn set() -> Vec<Point> {
        let mut v = Vec::new();
        for (w, a, b) in [("x", 1.0, 2.0), ("y", 3.0, 0.5)] {
            for f in [500.0, 600.0, 700.0, 800.0, 900.0, 1000.0] {
                v.push(pt(
                    w,
                    f,
                    a + b * 1000.0 / f,
                    20.0 + 30.0 * (f / 1000.0f64).powi(3),
                ));
            }
        }
        v
    }

    #[test]
    fn knob_holdout_exact_model_has_zero_error() {
        let e = knob_holdout(
            ModelKind::Analytic,
            &SetMeta::default(),
            &set(),
            "core_freq_mhz",
            &[500.0, 1000.0],
            &FitParams::default(),
        );
        assert_eq!(e.summary.points, 8);
        assert!(e.failures.is_empty());
        for t in TARGETS {
            assert!(
                e.summary.targets[t].mape_pct < 1e-6,
                "{t}: {:?}",
                e.summary.targets[t]
            );
        }
    }

    #[test]
    fn held_out_measurements_never_reach_training() {
        // Poison every held-out point's targets and counters: predictions must not change.
        let clean = set();
        let mut poisoned = clean.clone();
        for p in poisoned
            .iter_mut()
            .filter(|p| ![500.0, 1000.0].contains(&p.knobs["core_freq_mhz"]))
        {
            p.time_s = Some(1e9);
            p.power_w = Some(-5.0);
            p.energy_j = Some(f64::MAX);
            p.counters.insert("cycles".into(), 1e30);
        }
        for kind in [ModelKind::Analytic, ModelKind::Linear] {
            let a = knob_holdout(
                kind,
                &SetMeta::default(),
                &clean,
                "core_freq_mhz",
                &[500.0, 1000.0],
                &FitParams::default(),
            );
            let b = knob_holdout(
                kind,
                &SetMeta::default(),
                &poisoned,
                "core_freq_mhz",
                &[500.0, 1000.0],
                &FitParams::default(),
            );
            assert!(!a.results.is_empty());
            let pa: Vec<_> = a.results.iter().map(|r| r.predicted).collect();
            let pb: Vec<_> = b.results.iter().map(|r| r.predicted).collect();
            assert_eq!(pa, pb, "{kind:?}");
        }
        // Workload holdout: poison everything of workload y except its baseline point.
        let base: Knobs = [("core_freq_mhz".to_string(), 1000.0)]
            .into_iter()
            .collect();
        let mut poisoned = clean.clone();
        for p in poisoned
            .iter_mut()
            .filter(|p| p.workload == "y" && p.knobs["core_freq_mhz"] != 1000.0)
        {
            p.time_s = Some(1e9);
            p.power_w = Some(1e9);
        }
        let a = workload_holdout(
            ModelKind::Linear,
            &SetMeta::default(),
            &clean,
            &base,
            &FitParams::default(),
        );
        let b = workload_holdout(
            ModelKind::Linear,
            &SetMeta::default(),
            &poisoned,
            &base,
            &FitParams::default(),
        );
        let (ya, yb) = (a.predictions_of("y"), b.predictions_of("y"));
        assert!(!ya.is_empty());
        assert_eq!(ya, yb);
    }

    #[test]
    fn leave_one_out_on_exact_data() {
        let e = leave_one_out(
            ModelKind::Analytic,
            &SetMeta::default(),
            &set(),
            &FitParams::default(),
        );
        assert_eq!(e.summary.points, 12);
        assert!(e.summary.targets["time_s"].mape_pct < 1e-6);
    }

    #[test]
    fn k_fold_holds_every_point_out_once_and_keeps_point_order() {
        let pts = set();
        let cv = |points: &[Point], k: usize| {
            cross_validate_progress(
                ModelKind::Analytic,
                &SetMeta::default(),
                points,
                &FitParams::default(),
                Some(k),
                &indicatif::ProgressBar::hidden(),
            )
        };
        let e = cv(&pts, 3);
        assert_eq!(e.summary.points, 12);
        assert!(
            e.summary.protocol.starts_with("3-fold"),
            "{}",
            e.summary.protocol
        );
        let order: Vec<(String, Knobs)> = e
            .results
            .iter()
            .map(|r| (r.workload.clone(), r.knobs.clone()))
            .collect();
        let want: Vec<(String, Knobs)> = pts
            .iter()
            .map(|p| (p.workload.clone(), p.knobs.clone()))
            .collect();
        assert_eq!(order, want);
        // Exact curves: each fold still leaves four clocks per workload to fit.
        assert!(e.summary.targets["time_s"].mape_pct < 1e-6);
        // Points ordered by clock first (as an imported set may be): every workload keeps
        // points in training in every fold.
        let mut by_clock = pts.clone();
        by_clock.sort_by(|a, b| a.knobs["core_freq_mhz"].total_cmp(&b.knobs["core_freq_mhz"]));
        let folds = fold_of(&by_clock, 3);
        for w in ["x", "y"] {
            let mut f: Vec<usize> = by_clock
                .iter()
                .zip(&folds)
                .filter(|(p, _)| p.workload == w)
                .map(|(_, f)| *f)
                .collect();
            f.sort();
            assert_eq!(f, vec![0, 0, 1, 1, 2, 2], "{w}");
        }
        let e = cv(&by_clock, 2);
        assert_eq!(e.summary.points, 12);
        assert!(e.failures.is_empty(), "{:?}", e.failures);
        // A k of at least the number of points is leave-one-out.
        let loo = cv(&pts, 50);
        assert!(loo.summary.protocol.starts_with("leave-one-out"));
        // ... and holds out one point at a time, whatever the order of the points.
        assert_eq!(fold_of(&by_clock, 12), (0..12).collect::<Vec<_>>());
        assert_eq!(fold_of(&by_clock, 50), (0..12).collect::<Vec<_>>());
    }

    #[test]
    fn unreliable_targets_are_skipped() {
        let mut meta = SetMeta::default();
        meta.unreliable.push(powerperf_format::set::Unreliable {
            target: "time_s".into(),
            workloads: vec!["x".into()],
            reason: "test".into(),
        });
        let e = knob_holdout(
            ModelKind::Analytic,
            &meta,
            &set(),
            "core_freq_mhz",
            &[500.0, 1000.0],
            &FitParams::default(),
        );
        assert_eq!(e.summary.targets["time_s"].n, 4);
        assert_eq!(e.summary.targets["power_w"].n, 8);
    }

    #[test]
    fn auto_reports_its_choice_and_inner_estimate_beside_the_outer_error() {
        // Issue 41, item 4: workload holdout with `auto` says per target which candidate
        // the nested cross-validation took on each held-out workload's training points and
        // what it estimated, beside the outer error.
        let pts = set();
        let mut many = pts.clone();
        for w in ["c", "d", "e"] {
            many.extend(pts.iter().filter(|p| p.workload == "x").map(|p| {
                let mut q = p.clone();
                q.workload = w.into();
                q
            }));
        }
        let base: Knobs = [("core_freq_mhz".to_string(), 1000.0)]
            .into_iter()
            .collect();
        let e = workload_holdout(
            ModelKind::Auto,
            &SetMeta::default(),
            &many,
            &base,
            &FitParams::default(),
        );
        let p = &e.summary.protocol;
        assert!(p.contains("auto's choice per target"), "{p}");
        let outer = e.summary.targets["time_s"].mape_pct;
        assert!(p.contains(&format!("beside outer {outer:.2} %")), "{p}");
        // The text itself, from given choices.
        let picked = vec![
            vec![("time_s".to_string(), "scaling".to_string(), 2.0)],
            vec![("time_s".to_string(), "neighbors".to_string(), 4.0)],
            vec![("time_s".to_string(), "scaling".to_string(), 3.0)],
        ];
        let choices = summarise_choices(&picked, &e.summary);
        assert_eq!(choices["time_s"].chosen["scaling"], 2);
        assert_eq!(choices["time_s"].inner_mape_pct, Some(3.0));
        assert_eq!(choices["time_s"].outer_mape_pct, Some(outer));
        assert_eq!(
            describe_choices(&choices),
            format!("time_s: scaling ×2, neighbors ×1, inner 3.00 % beside outer {outer:.2} %")
        );
        // The same, as `evaluate --format json`'s `auto_choice`: per target the counts, the
        // inner estimate and the outer error.
        assert_eq!(e.auto_choice["time_s"].outer_mape_pct, Some(outer));
        let n: usize = e.auto_choice["time_s"].chosen.values().sum();
        assert_eq!(
            n, 5,
            "one choice per held-out workload: {:?}",
            e.auto_choice
        );
        assert!(e.auto_choice["time_s"]
            .inner_mape_pct
            .is_some_and(f64::is_finite));
        // Not auto: no choice.
        let s = workload_holdout(
            ModelKind::Scaling,
            &SetMeta::default(),
            &many,
            &base,
            &FitParams::default(),
        );
        assert!(s.auto_choice.is_empty());
    }
}
