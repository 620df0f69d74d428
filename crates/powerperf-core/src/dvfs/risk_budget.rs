//! The risk budget's parts, shared by both planners that guard the slowdown bound
//! ([`super::guard`] for `plan --model`, [`super::evaluate`] for `plan --evaluate`): the
//! leave-one-out error distributions, the compute-bound class of a workload group, a
//! candidate's violation probability, the budgeted choice (a joint chance constraint,
//! Charnes & Cooper 1959, by its Lagrangian relaxation, Everett 1963), and the automatic
//! margin. It imports neither of them, so the imports go one way: `guard` and `evaluate`
//! use this module, and `evaluate` uses `guard`.

/// Oracle gains below this fraction are "listed apart" (`plan --evaluate`), and the floor of
/// a region's predicted oracle in [`as_share_of_predicted_oracle`].
pub const SMALL_ORACLE_GAIN: f64 = 0.005;
use crate::dvfs::planner::same_knobs;
use crate::models::{fit_kind, FitParams, Knobs, ModelKind};
use anyhow::{Context, Result};
use powerperf_format::set::{Point, TrainingSet};

/// Signed errors of the predicted slowdown, from training data only: every training point
/// whose `knob` value lies strictly between the lowest and the highest training value (an
/// interpolated point, as the planner's held-out candidates are) is predicted by a model
/// fitted on all the other training points; its error is
/// `(t_measured − t_predicted) / t_ref`, with `t_ref` the workload's measured time at its
/// maximum setting (itself a training point). Positive: the model under-predicts the
/// slowdown (the side that breaks the bound). Returned sorted ascending.
///
/// Cost: one refit per interior training point.
///
/// # Errors
/// Fewer than three training values (no interior one), or no error could be measured.
pub fn interior_slowdown_errors(
    set: &TrainingSet,
    train: &[Point],
    knob: &str,
    kind: ModelKind,
    params: &FitParams,
) -> Result<Vec<f64>> {
    let mut e: Vec<f64> = interior_slowdown_errors_by_class(set, train, knob, kind, params)?
        .into_iter()
        .map(|(e, _)| e)
        .collect();
    e.sort_by(f64::total_cmp);
    Ok(e)
}

/// Whether the group of `workload` at `knobs` (every knob but `knob` fixed) is compute-bound
/// on the training points: `t·f` agrees within `tolerance` at its two lowest training values
/// of `knob` (the criterion the analytic model's clock calibration uses,
/// [`crate::models::analytic::AnalyticParams::calibration_tolerance`]). `None`: fewer than two
/// training times.
pub fn compute_bound(
    train: &[Point],
    workload: &str,
    knobs: &Knobs,
    knob: &str,
    tolerance: f64,
) -> Option<bool> {
    let want = other_knobs(knobs, knob);
    let tf: Vec<(f64, f64)> = train
        .iter()
        .filter(|p| p.workload == workload && same_knobs(&other_knobs(&p.knobs, knob), &want))
        .filter_map(|p| Some((*p.knobs.get(knob)?, p.time_s.filter(|t| *t > 0.0)?)))
        .collect();
    tf_agrees(tf, tolerance)
}

/// `knobs` without `knob`.
pub(crate) fn other_knobs(knobs: &Knobs, knob: &str) -> Knobs {
    knobs
        .iter()
        .filter(|(n, _)| n.as_str() != knob)
        .map(|(n, v)| (n.clone(), *v))
        .collect()
}

/// The compute-bound rule on `(f, t)` pairs: `t·f` agrees within `tolerance` at the two
/// lowest `f`. `None`: fewer than two pairs.
pub(crate) fn tf_agrees(mut tf: Vec<(f64, f64)>, tolerance: f64) -> Option<bool> {
    if tf.len() < 2 {
        return None;
    }
    tf.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (f1, t1) = tf[0];
    let (f2, t2) = tf[1];
    Some(((t1 * f1) / (t2 * f2) - 1.0).abs() <= tolerance)
}

/// [`interior_slowdown_errors`], each error with the class of its group
/// ([`compute_bound`] on the training points, `false` when unknown); unsorted.
///
/// # Errors
/// As [`interior_slowdown_errors`].
pub fn interior_slowdown_errors_by_class(
    set: &TrainingSet,
    train: &[Point],
    knob: &str,
    kind: ModelKind,
    params: &FitParams,
) -> Result<Vec<(f64, bool)>> {
    let tol = params.analytic.calibration_tolerance;
    let interior = interior_indices(train, knob);
    if interior.is_empty() {
        let vals = train.iter().filter_map(|p| p.knobs.get(knob).copied());
        let lo = vals.clone().fold(f64::INFINITY, f64::min);
        let hi = vals.fold(f64::NEG_INFINITY, f64::max);
        anyhow::bail!(
            "the risk guard needs a training value of {knob} strictly between the lowest and the highest ({lo} and {hi}) to measure interpolation errors; train on three or more values, or give a fixed margin, e.g. --slowdown-margin 1% (taken off the bound; 0 for the raw plan)"
        );
    }
    let kind = kind.resolve(train, false);
    let errs: Vec<(f64, bool)> = crate::models::scoring::parallel_map(&interior, |&i| {
        let p = &train[i];
        let ref_knobs = set.reference_knobs(&p.workload);
        let t_ref = train
            .iter()
            .find(|q| q.workload == p.workload && same_knobs(&q.knobs, &ref_knobs))
            .and_then(|q| q.time_s)?;
        let t = p.time_s?;
        let rest: Vec<Point> = train
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, q)| q.clone())
            .collect();
        let m = fit_kind(kind, &set.meta, &rest, params).ok()?;
        let tp = m
            .predict(&p.workload, &p.knobs)
            .ok()
            .and_then(|x| x.time_s)?;
        (tp.is_finite() && t_ref > 0.0).then(|| {
            let cb = compute_bound(train, &p.workload, &p.knobs, knob, tol).unwrap_or(false);
            ((t - tp) / t_ref, cb)
        })
    })
    .into_iter()
    .flatten()
    .collect();
    if errs.is_empty() {
        anyhow::bail!("no interior training point could be predicted by leave-one-out; give a fixed margin, e.g. --slowdown-margin 1% (taken off the bound; 0 for the raw plan)");
    }
    Ok(errs)
}

/// Empirical probability that the measured slowdown exceeds `bound` when the predicted one
/// is `predicted`: the fraction of `errors` (sorted, from [`interior_slowdown_errors`])
/// above `bound − predicted`.
pub fn violation_probability(errors: &[f64], predicted: f64, bound: f64) -> f64 {
    let slack = bound - predicted;
    let above = errors.len() - errors.partition_point(|e| *e <= slack);
    above as f64 / errors.len() as f64
}

/// Joint chance constraint over workloads (a risk budget). `options[w]` lists workload
/// `w`'s candidates as (predicted gain, violation probability), every one predicted within
/// the bound (gains as shares of the workload's predicted oracle,
/// [`as_share_of_predicted_oracle`]); the choice maximises the total gain subject to
/// `Σ_w P(violation_w) ≤ risk · W`, through its Lagrangian relaxation: each workload takes
/// the candidate maximising `gain − λ·P`, with the smallest `λ ≥ 0` (bisection) that keeps the
/// sum within the budget (Everett 1963, "Generalized Lagrange multiplier method"; the chance
/// constraint in the sense of Charnes & Cooper 1959, read over the population of workloads).
/// Returns the chosen index per workload and the expected number of violations.
///
/// A candidate with probability 0 (e.g. the maximum setting) must exist in each list for the
/// budget to be reachable; otherwise the least risky candidates are taken.
pub fn risk_budget_choice(options: &[Vec<(f64, f64)>], risk: f64) -> (Vec<usize>, f64) {
    risk_budget_choice_with_spread(options, risk, 0.0)
}

/// [`risk_budget_choice`] with the budget on an upper bound of the *count* of violations
/// instead of its expectation: `Σ p + z·√(Σ p(1 − p)) ≤ risk · W` (the normal bound on a
/// sum of independent Bernoulli variables; `z = 1.645`: one-sided 95 %). The target is
/// the realised share ("at most one workload in twenty"), and a budget on the mean alone is
/// exceeded about half the time. The same Lagrangian search, with this feasibility test.
pub fn risk_budget_choice_with_spread(
    options: &[Vec<(f64, f64)>],
    risk: f64,
    z: f64,
) -> (Vec<usize>, f64) {
    let choose = |lam: f64| {
        let mut idx = Vec::with_capacity(options.len());
        let mut total = 0.0;
        let mut var = 0.0;
        for c in options {
            let (i, p) = c
                .iter()
                .enumerate()
                .max_by(|a, b| {
                    (a.1 .0 - lam * a.1 .1)
                        .total_cmp(&(b.1 .0 - lam * b.1 .1))
                        // ties: the less risky one
                        .then(b.1 .1.total_cmp(&a.1 .1))
                })
                .map(|(i, c)| (i, c.1))
                .unwrap_or((0, 0.0));
            idx.push(i);
            total += p;
            var += p * (1.0 - p);
        }
        (idx, total, total + z * var.sqrt())
    };
    let budget = risk * options.len() as f64;
    let over = |c: &(Vec<usize>, f64, f64)| c.2 > budget + 1e-12;
    let first = choose(0.0);
    if !over(&first) {
        return (first.0, first.1);
    }
    let (mut lo, mut hi) = (0.0f64, 1.0f64);
    while over(&choose(hi)) && hi < 1e12 {
        lo = hi;
        hi *= 2.0;
    }
    for _ in 0..100 {
        let mid = 0.5 * (lo + hi);
        if over(&choose(mid)) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let c = choose(hi);
    (c.0, c.1)
}

/// Rescale each workload's predicted gains to shares of its own best predicted gain (its
/// predicted oracle; every option passed to [`risk_budget_choice`] is predicted within the
/// bound), floored at [`SMALL_ORACLE_GAIN`]. The plan-quality target is the *mean over
/// workloads* of each one's fraction of its oracle, so the risk budget must weigh every
/// workload the same: on raw gains it gives up first the settings whose absolute gain is
/// small, which are worth as much of the target as any other (a workload whose oracle saves
/// 3 % loses 60 points of its fraction when it steps back one clock). Below the floor the
/// metric lists a workload apart, and its shares stay at most its gain / 0.5 %.
pub fn as_share_of_predicted_oracle(options: &mut [Vec<(f64, f64)>]) {
    for o in options {
        let best = o.iter().map(|c| c.0).fold(SMALL_ORACLE_GAIN, f64::max);
        for c in o.iter_mut() {
            c.0 /= best;
        }
    }
}

/// A margin from training data only: the leave-one-out mean absolute percentage error of
/// the model's time predictions over the training points (each training mean predicted from
/// all the others, [`crate::models::eval::leave_one_out`]), as a fraction.
///
/// # Errors
/// No time error could be measured.
pub fn auto_margin(
    set: &TrainingSet,
    train: &[Point],
    kind: ModelKind,
    params: &FitParams,
) -> Result<f64> {
    let ev = crate::models::eval::leave_one_out(kind, &set.meta, train, params);
    ev.summary
        .targets
        .get("time_s")
        .map(|e| e.mape_pct / 100.0)
        .context("the leave-one-out time error on the training points could not be measured; give a fixed margin, e.g. --slowdown-margin 1% (taken off the bound; 0 for the raw plan)")
}

/// Indices of `points` whose `knob` value is strictly between the lowest and the highest.
pub fn interior_indices(points: &[Point], knob: &str) -> Vec<usize> {
    let vals: Vec<f64> = points
        .iter()
        .filter_map(|p| p.knobs.get(knob).copied())
        .collect();
    let lo = vals.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = vals.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (0..points.len())
        .filter(|&i| {
            points[i]
                .knobs
                .get(knob)
                .is_some_and(|v| *v > lo + 1e-9 && *v < hi - 1e-9)
        })
        .collect()
}
