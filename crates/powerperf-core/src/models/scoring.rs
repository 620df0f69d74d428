//! Scoring held-out predictions, shared by the evaluation protocols ([`super::eval`]), the
//! naive baselines ([`super::baseline`]) and the stack's inner cross-validation
//! ([`super::stack`]): a held-out point's result, the error per target, a fit followed by
//! its predictions, and the worker threads the refits run on. It imports none of those
//! three, so their imports go one way (eval → baseline, stack → scoring).

use super::features::knob_key;
use super::{fit_kind, FitParams, HeldOutError, Knobs, ModelKind, Prediction};
use powerperf_format::set::{Point, SetMeta, TARGETS};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Error of one target over held-out points, percent.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct TargetError {
    /// Mean absolute percentage error.
    pub mape_pct: f64,
    /// Largest absolute percentage error.
    pub max_pct: f64,
    /// Points the error is over.
    pub n: usize,
}

/// A held-out point: what was measured and what was predicted.
#[derive(Debug, Clone, PartialEq)]
pub struct PointResult {
    pub workload: String,
    pub knobs: Knobs,
    pub measured: Prediction,
    pub predicted: Prediction,
}

/// A point's measured targets, as a [`Prediction`] to score against.
pub(crate) fn measured(p: &Point) -> Prediction {
    Prediction {
        time_s: p.time_s,
        power_w: p.power_w,
        energy_j: p.energy_j,
    }
}

/// MAPE and max error per target over `results`, skipping unreliable targets and points
/// without a measurement or a prediction. Targets with no such point are left out.
pub fn summarise(meta: &SetMeta, results: &[PointResult], protocol: &str) -> HeldOutError {
    let mut targets = BTreeMap::new();
    for t in TARGETS {
        let errs: Vec<f64> = results
            .iter()
            .filter(|r| meta.is_reliable(t, &r.workload))
            .filter_map(|r| match (r.measured.target(t), r.predicted.target(t)) {
                (Some(m), Some(p)) if m != 0.0 && m.is_finite() && p.is_finite() => {
                    Some(((p - m) / m).abs() * 100.0)
                }
                _ => None,
            })
            .collect();
        if errs.is_empty() {
            continue;
        }
        targets.insert(
            t.to_string(),
            TargetError {
                mape_pct: errs.iter().sum::<f64>() / errs.len() as f64,
                max_pct: errs.iter().fold(0.0, |a, b| a.max(*b)),
                n: errs.len(),
            },
        );
    }
    HeldOutError {
        protocol: protocol.to_string(),
        points: results.len(),
        targets,
    }
}

/// Fit on `train`, predict every point of `test`; failures are collected, not fatal.
pub(crate) fn fit_and_predict(
    kind: ModelKind,
    meta: &SetMeta,
    train: &[Point],
    test: &[&Point],
    params: &FitParams,
    results: &mut Vec<PointResult>,
    failures: &mut Vec<(String, String)>,
) {
    let preds = fit_then_predict(kind, meta, train, test, params);
    push_predictions(test, preds, results, failures);
}

/// `kind` fitted on `train`, then its prediction of each `test` point, or the reason it
/// has none (the fit's error for every point where the fit fails).
pub(crate) fn fit_then_predict(
    kind: ModelKind,
    meta: &SetMeta,
    train: &[Point],
    test: &[&Point],
    params: &FitParams,
) -> Vec<Result<Prediction, String>> {
    predict_each(&fit_kind(kind, meta, train, params), test)
}

/// A fitted model's prediction of each `test` point, or the reason it has none (the fit's
/// error for every point where the fit failed).
pub(crate) fn predict_each(
    fitted: &Result<super::Fitted, super::ModelError>,
    test: &[&Point],
) -> Vec<Result<Prediction, String>> {
    match fitted {
        Ok(m) => test
            .iter()
            .map(|p| m.predict(&p.workload, &p.knobs).map_err(|e| e.to_string()))
            .collect(),
        Err(e) => test.iter().map(|_| Err(e.to_string())).collect(),
    }
}

/// Each test point's prediction into `results` beside its measurement, or its reason into
/// `failures`.
pub(crate) fn push_predictions(
    test: &[&Point],
    preds: Vec<Result<Prediction, String>>,
    results: &mut Vec<PointResult>,
    failures: &mut Vec<(String, String)>,
) {
    for (p, r) in test.iter().zip(preds) {
        match r {
            Ok(pred) => results.push(PointResult {
                workload: p.workload.clone(),
                knobs: p.knobs.clone(),
                measured: measured(p),
                predicted: pred,
            }),
            Err(e) => failures.push((format!("{} {}", p.workload, knob_key(&p.knobs)), e)),
        }
    }
}

/// Concatenate per-part (results, failures) in part order.
pub(crate) fn concat_parts<A, B>(parts: Vec<(Vec<A>, Vec<B>)>) -> (Vec<A>, Vec<B>) {
    let (a, b): (Vec<Vec<A>>, Vec<Vec<B>>) = parts.into_iter().unzip();
    (
        a.into_iter().flatten().collect(),
        b.into_iter().flatten().collect(),
    )
}

/// The worker threads [`parallel_map`] spreads `items` items over: the available
/// parallelism, at most 16, and no more than one thread per item (at least 1).
pub fn worker_threads(items: usize) -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 16)
        .min(items.max(1))
}

/// `f` over `items` on up to 16 scoped threads (the available cores), results in item
/// order. Each item is an independent refit in the protocols below.
pub(crate) fn parallel_map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let threads = worker_threads(items.len());
    let chunk = items.len().div_ceil(threads).max(1);
    let f = &f;
    std::thread::scope(|s| {
        let handles: Vec<_> = items
            .chunks(chunk)
            .map(|part| s.spawn(move || part.iter().map(f).collect::<Vec<R>>()))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("evaluation worker panicked"))
            .collect()
    })
}
