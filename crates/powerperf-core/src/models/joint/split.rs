//! The joint split: train on a list of settings (any subset of the grid, every workload),
//! predict every other point; and the separable rule on the same split, the naive
//! baseline a joint model must beat (issue 21, items 1 and 3):
//!
//! ```text
//! y(k1, k2) = y(k1, b2) · y(b1, k2) / y(b1, b2)
//! ```
//!
//! from the workload's training points, with `b` a training setting from which each knob
//! that differs is changed alone in training; for more knobs
//! `y(k) = y(b) · Π_j y(b with k_j) / y(b)`. Among several such `b`, the one that
//! differs from `k` in the fewest knobs, then the first in the set's order.

use super::super::baseline::{held_out_counts, BaselineEval};
use super::super::eval::Evaluation;
use super::super::features::{knob_key, matches_setting};
use super::super::scoring::{fit_and_predict, measured, summarise, PointResult};
use super::super::split::TrainSplit;
use super::super::{FitParams, Knobs, ModelKind, Prediction};
use powerperf_format::set::{Point, SetMeta};

/// Split `points` into training (matching one of `settings`) and held-out points.
pub fn split<'a>(points: &'a [Point], settings: &[Knobs]) -> (Vec<Point>, Vec<&'a Point>) {
    let train = points
        .iter()
        .filter(|p| settings.iter().any(|s| matches_setting(&p.knobs, s)))
        .cloned()
        .collect();
    let test = points
        .iter()
        .filter(|p| !settings.iter().any(|s| matches_setting(&p.knobs, s)))
        .collect();
    (train, test)
}

fn describe(settings: &[Knobs]) -> String {
    settings.iter().map(knob_key).collect::<Vec<_>>().join("; ")
}

/// Train `kind` on the points at `settings`, predict the others: the joint split of
/// `evaluate --train-points` ([`super::super::eval::split_holdout`], whose baseline is the
/// separable rule where it applies). `auto` resolves on the training points.
pub fn settings_holdout(
    kind: ModelKind,
    meta: &SetMeta,
    points: &[Point],
    settings: &[Knobs],
    params: &FitParams,
) -> Evaluation {
    let knobs: Vec<String> = settings
        .first()
        .map(|s| s.keys().cloned().collect())
        .unwrap_or_default();
    let rows = settings
        .iter()
        .map(|s| {
            knobs
                .iter()
                .map(|k| s.get(k).copied().unwrap_or(f64::NAN))
                .collect()
        })
        .collect();
    let split = TrainSplit::Settings {
        source: describe(settings),
        knobs,
        rows,
    };
    super::super::eval::split_holdout(kind, meta, points, &split, params)
}

/// The separable rule's prediction of `p` from `train` (see the module docs), per target;
/// `None` where no training setting reaches `p` one knob at a time.
pub fn separable_rule(train: &[Point], p: &Point) -> Option<Prediction> {
    let own: Vec<&Point> = train.iter().filter(|q| q.workload == p.workload).collect();
    let find = |k: &Knobs| own.iter().find(|q| q.knobs == *k).copied();
    let mut best: Option<(usize, &Point, Vec<&Point>)> = None;
    for b in &own {
        if b.knobs.keys().ne(p.knobs.keys()) {
            continue;
        }
        let differ: Vec<&String> = p
            .knobs
            .iter()
            .filter(|(k, v)| (b.knobs[*k] - **v).abs() > 1e-9)
            .map(|(k, _)| k)
            .collect();
        if differ.is_empty() {
            continue;
        }
        let steps: Option<Vec<&Point>> = differ
            .iter()
            .map(|k| {
                let mut s = b.knobs.clone();
                s.insert((*k).clone(), p.knobs[*k]);
                find(&s)
            })
            .collect();
        if let Some(steps) = steps {
            if best.as_ref().is_none_or(|(n, _, _)| differ.len() < *n) {
                best = Some((differ.len(), b, steps));
            }
        }
    }
    let (_, b, steps) = best?;
    let rule = |t: &str| -> Option<f64> {
        let yb = b.target(t).filter(|v| *v != 0.0)?;
        steps
            .iter()
            .try_fold(yb, |acc, s| Some(acc * s.target(t)? / yb))
    };
    Some(Prediction {
        time_s: rule("time_s"),
        power_w: rule("power_w"),
        energy_j: rule("energy_j"),
    })
}

/// The separable rule on the split of [`settings_holdout`]: the naive baseline of a joint
/// split. Points it cannot reach are failures with the reason.
pub fn separable_baseline(meta: &SetMeta, points: &[Point], settings: &[Knobs]) -> Evaluation {
    let (train, test) = split(points, settings);
    let held_out_points = test.len();
    let held_out = held_out_counts(meta, &test);
    let mut results = Vec::new();
    let mut failures = Vec::new();
    for p in test {
        match separable_rule(&train, p) {
            Some(pred) => results.push(PointResult {
                workload: p.workload.clone(),
                knobs: p.knobs.clone(),
                measured: measured(p),
                predicted: pred,
            }),
            None => failures.push((
                format!("{} {}", p.workload, knob_key(&p.knobs)),
                "no training setting reaches it by changing one knob at a time".into(),
            )),
        }
    }
    let summary = summarise(
        meta,
        &results,
        &format!(
            "separable rule y(k1,k2) = y(k1,b2)·y(b1,k2)/y(b1,b2), train on {}",
            describe(settings)
        ),
    );
    Evaluation {
        kind: ModelKind::Joint,
        results,
        failures,
        summary,
        held_out_points,
        held_out,
        baseline: BaselineEval::default(),
        auto_choice: Default::default(),
    }
}

/// Each workload in turn measured only at `settings` (a cross), the other workloads at
/// every setting: the case where the interaction is learned on fully measured workloads
/// and carried to a new one by its counters. The held-out workload's other points are
/// predicted; the separable rule's baseline on this protocol is [`separable_baseline`]
/// (it uses the workload's own cross alone).
pub fn cross_workload_holdout(
    kind: ModelKind,
    meta: &SetMeta,
    points: &[Point],
    settings: &[Knobs],
    params: &FitParams,
) -> Evaluation {
    let mut workloads: Vec<&str> = Vec::new();
    for p in points {
        if !workloads.contains(&p.workload.as_str()) {
            workloads.push(&p.workload);
        }
    }
    let on_cross = |p: &Point| settings.iter().any(|s| matches_setting(&p.knobs, s));
    let mut results = Vec::new();
    let mut failures = Vec::new();
    let mut resolved = kind;
    let mut all_test: Vec<&Point> = Vec::new();
    for w in workloads {
        let train: Vec<Point> = points
            .iter()
            .filter(|p| p.workload != w || on_cross(p))
            .cloned()
            .collect();
        let test: Vec<&Point> = points
            .iter()
            .filter(|p| p.workload == w && !on_cross(p))
            .collect();
        all_test.extend(test.iter().copied());
        resolved = kind.resolve(&train, false);
        fit_and_predict(
            resolved,
            meta,
            &train,
            &test,
            params,
            &mut results,
            &mut failures,
        );
    }
    let summary = summarise(
        meta,
        &results,
        &format!(
            "cross workload holdout: each workload trained on {} only, the others on every setting",
            describe(settings)
        ),
    );
    Evaluation {
        kind: resolved,
        results,
        failures,
        summary,
        held_out_points: all_test.len(),
        held_out: held_out_counts(meta, &all_test),
        baseline: BaselineEval::default(),
        auto_choice: Default::default(),
    }
}
