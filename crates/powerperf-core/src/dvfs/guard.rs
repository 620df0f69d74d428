//! The guard of the slowdown bound against prediction error, shared by `powerperf plan
//! --model` and `powerperf plan --evaluate` (issue 20, items 1 and 2): the same error data
//! and the same choice, so both make the same plan from the same training data.
//!
//! - **Errors** ([`SlowdownErrors`]): signed slowdown errors of held-out predictions at the
//!   interior training values of one clock knob, `(t_measured − t_predicted) / t_ref`
//!   (positive: the model under-predicts the slowdown). `powerperf fit` measures them with
//!   its leave-one-out or `--cv K` refits and stores them in the model file;
//!   `plan --evaluate` measures them on its training points the same way.
//! - **Choice** ([`risk_choice`]): the risk budget (a joint chance constraint over the
//!   workloads, Charnes & Cooper 1959, solved by its Lagrangian relaxation, Everett 1963):
//!   at most `risk × workloads` expected violations, each candidate's violation probability
//!   the share of errors above its predicted slack. docs/dvfs.md gives the derivation.

use super::planner::{same_knobs, RegionInput};
use super::risk_budget::{
    as_share_of_predicted_oracle, compute_bound, interior_indices, other_knobs,
    risk_budget_choice_with_spread, tf_agrees, violation_probability,
};
use crate::models::scoring::PointResult;
use crate::models::{fit_kind, FitParams, Knobs, ModelKind};
use anyhow::Result;
use powerperf_format::set::{Point, SetMeta};
use powerperf_node::plan_file::Objective;

pub use crate::models::slowdown_errors::SlowdownErrors;

/// The default risk of the risk guards: one workload in twenty, fixed by the target's
/// meaning (issue 7: "the measured slowdown above the bound for at most one workload in
/// twenty"), not tuned on any evaluation.
pub const DEFAULT_RISK: f64 = 0.05;

/// The guard: how a plan protects the slowdown bound against prediction error. What
/// `powerperf plan --slowdown-margin` names, parsed once ([`GuardSpec::from_str`]) and used
/// by `plan --model` ([`super::from_model`]) and `plan --evaluate` ([`super::evaluate`]).
/// The risk guards carry their risk (parsed with [`DEFAULT_RISK`]; [`GuardSpec::with_risk`]
/// sets `--risk`'s).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum GuardSpec {
    /// Plan against `bound − margin` (fraction); 0 is the raw plan.
    Margin(f64),
    /// [`GuardSpec::Margin`] with the model's held-out time MAPE as the margin (`auto`):
    /// from the model file's leave-one-out error for `plan --model`
    /// ([`super::from_model::model_guard`]), from a leave-one-out on the training points
    /// for `plan --evaluate` ([`super::risk_budget::auto_margin`]).
    AutoMargin,
    /// The risk budget with every error pooled (`risk`, the default): a joint chance
    /// constraint, expected violations at most `risk × workloads`, each candidate's
    /// violation probability from the held-out slowdown errors at interior clock values.
    /// `risk = 0.05` reads the bound as "at most one workload in twenty above it".
    Risk(f64),
    /// The risk budget with one error distribution per class of workload group
    /// (`risk-class`): compute-bound ([`compute_bound`]) or not; a class with fewer than
    /// `1/risk` errors uses the pooled distribution.
    RiskByClass(f64),
    /// The risk budget with the errors of the held-out points predicted within the bound
    /// only, and the budget on the count's mean plus [`GUARD_SPREAD_Z`] standard
    /// deviations (`risk-near`). Tuned on part of the Titan X micro set and **not** kept as
    /// the default: on the workload classes it was not tuned on it broke the target
    /// (docs/dvfs.md).
    RiskNear(f64),
}

/// A `--slowdown-margin` value or a `--risk` that is not one.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum GuardSpecError {
    /// Not a guard name and not a margin.
    #[error("`{0}` is not a guard of the slowdown bound; it takes risk (the default), risk-class, risk-near, auto, or a margin such as 1% or 0.01 (0 for the raw plan)")]
    Unknown(String),
    /// A risk outside (0, 1).
    #[error("--risk {0} must be a fraction between 0 and 1, e.g. 0.05")]
    Risk(f64),
}

impl std::str::FromStr for GuardSpec {
    type Err = GuardSpecError;

    /// `risk`, `risk-class`, `risk-near` (with [`DEFAULT_RISK`]), `auto`, or a margin:
    /// `1%`, `0.01`, `0` (the raw plan; `none` reads as 0).
    ///
    /// # Errors
    /// [`GuardSpecError::Unknown`] for anything else, a negative or a non-finite margin.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s.trim() {
            "risk" => GuardSpec::Risk(DEFAULT_RISK),
            "risk-class" => GuardSpec::RiskByClass(DEFAULT_RISK),
            "risk-near" => GuardSpec::RiskNear(DEFAULT_RISK),
            "auto" => GuardSpec::AutoMargin,
            t => GuardSpec::Margin(
                super::parse_slowdown(t)
                    .map_err(|_| GuardSpecError::Unknown(t.to_string()))?
                    .unwrap_or(0.0),
            ),
        })
    }
}

/// The spread factor `z` of [`GuardSpec::RiskNear`]'s budget, `E + z·σ ≤ risk · W`
/// ([`super::risk_budget::risk_budget_choice_with_spread`]). Chosen on the Titan X
/// micro set with the `fadd_*` workload classes judged (59 workloads; 0.5 gave 3
/// violations, 1.645 kept 94.5 % of the oracle, 1.0 gave 95.7 % and 2); judged on the other
/// 81 workloads it gave 7 violations (docs/dvfs.md, issue 20 item 3).
pub const GUARD_SPREAD_Z: f64 = 1.0;

impl GuardSpec {
    /// The name written in the plan file (`guard = "risk"`): `none` for a zero margin.
    pub fn name(self) -> &'static str {
        match self {
            GuardSpec::Margin(m) => {
                if m == 0.0 {
                    "none"
                } else {
                    "margin"
                }
            }
            GuardSpec::AutoMargin => "auto",
            GuardSpec::Risk(_) => "risk",
            GuardSpec::RiskByClass(_) => "risk-class",
            GuardSpec::RiskNear(_) => "risk-near",
        }
    }

    /// The risk of a risk guard.
    pub fn risk(self) -> Option<f64> {
        match self {
            GuardSpec::Risk(r) | GuardSpec::RiskByClass(r) | GuardSpec::RiskNear(r) => Some(r),
            GuardSpec::Margin(_) | GuardSpec::AutoMargin => None,
        }
    }

    /// The fixed margin taken off the bound: `m` of [`GuardSpec::Margin`], else 0 (a risk
    /// guard plans against the bound itself; [`GuardSpec::AutoMargin`] is resolved to a
    /// margin first).
    pub fn margin(self) -> f64 {
        match self {
            GuardSpec::Margin(m) => m,
            _ => 0.0,
        }
    }

    /// The same guard with `risk` (`--risk`) for a risk guard; other guards unchanged and
    /// `risk` not checked.
    ///
    /// # Errors
    /// [`GuardSpecError::Risk`] when a risk guard's `risk` is not in (0, 1).
    pub fn with_risk(self, risk: f64) -> Result<Self, GuardSpecError> {
        if self.risk().is_some() && !(risk > 0.0 && risk < 1.0) {
            return Err(GuardSpecError::Risk(risk));
        }
        Ok(match self {
            GuardSpec::Risk(_) => GuardSpec::Risk(risk),
            GuardSpec::RiskByClass(_) => GuardSpec::RiskByClass(risk),
            GuardSpec::RiskNear(_) => GuardSpec::RiskNear(risk),
            g => g,
        })
    }
}

/// The clock knob the guard's errors are measured along: a frequency knob with three or
/// more distinct values in `points` (so one is interior), `core_freq_mhz` first.
pub fn guard_knob(points: &[Point]) -> Option<String> {
    let distinct = |k: &str| {
        let mut v: Vec<f64> = points
            .iter()
            .filter_map(|p| p.knobs.get(k).copied())
            .collect();
        v.sort_by(f64::total_cmp);
        v.dedup();
        v.len()
    };
    crate::models::analytic::FREQ_KNOBS
        .iter()
        .find(|k| distinct(k) >= 3)
        .map(|k| k.to_string())
}

/// The slowdown errors `powerperf fit` stores for `plan`'s guard (issue 20, item 1): those
/// of `results` (the held-out predictions of fit's own refits of `points`; `folds`: `None`
/// leave-one-out, `Some(k)` K-fold cross-validation) at the interior values of the
/// [`guard_knob`], with the analytic calibration's `tolerance` for the compute-bound class.
///
/// # Errors
/// Why there are none, as the model file records it (`slowdown_errors_missing`): no clock
/// knob with three or more training values, or no interior point predicted held out.
pub fn fit_slowdown_errors(
    meta: &SetMeta,
    points: &[Point],
    results: &[PointResult],
    tolerance: f64,
    folds: Option<usize>,
) -> Result<SlowdownErrors, String> {
    let protocol = match folds {
        Some(k) => format!("{k}-fold cross-validation"),
        None => "leave-one-out".to_string(),
    };
    let Some(knob) = guard_knob(points) else {
        return Err("no clock knob has three or more training values, so no interior value to measure interpolation errors at".into());
    };
    let e = errors_from_results(meta, points, results, &knob, tolerance, &protocol);
    if e.is_empty() {
        return Err(format!(
            "no interior point of {knob} could be predicted held out"
        ));
    }
    Ok(e)
}

/// The reference (maximum of every knob) of `workload` among `train`.
fn train_reference(train: &[Point], workload: &str) -> Knobs {
    let mut k = Knobs::new();
    for p in train.iter().filter(|p| p.workload == workload) {
        for (n, v) in &p.knobs {
            let e = k.entry(n.clone()).or_insert(*v);
            if *v > *e {
                *e = *v;
            }
        }
    }
    k
}

/// The slowdown errors of held-out predictions `results` (of points of `train`) at the
/// interior values of `knob`, each labelled by its group's class on the training points
/// ([`compute_bound`]). Targets the set marks unreliable are skipped.
pub fn errors_from_results(
    meta: &SetMeta,
    train: &[Point],
    results: &[PointResult],
    knob: &str,
    tolerance: f64,
    protocol: &str,
) -> SlowdownErrors {
    let interior: Vec<&Point> = interior_indices(train, knob)
        .into_iter()
        .map(|i| &train[i])
        .collect();
    let mut out = SlowdownErrors::new(protocol, knob, tolerance);
    for r in results {
        if !meta.is_reliable("time_s", &r.workload)
            || !interior
                .iter()
                .any(|p| p.workload == r.workload && same_knobs(&p.knobs, &r.knobs))
        {
            continue;
        }
        let rk = train_reference(train, &r.workload);
        let Some(t_ref) = train
            .iter()
            .find(|q| q.workload == r.workload && same_knobs(&q.knobs, &rk))
            .and_then(|q| q.time_s)
        else {
            continue;
        };
        let (Some(t), Some(tp)) = (r.measured.time_s, r.predicted.time_s) else {
            continue;
        };
        if !(tp.is_finite() && t.is_finite() && t_ref > 0.0) {
            continue;
        }
        let cb = compute_bound(train, &r.workload, &r.knobs, knob, tolerance).unwrap_or(false);
        out.push((t - tp) / t_ref, tp / t_ref - 1.0, cb);
    }
    out
}

/// Measure the slowdown errors on `train`: with `folds = None` each interior point is
/// predicted by the model refitted without it (leave-one-out; the same predictions as
/// `fit`'s leave-one-out gives for those points), with `Some(k)` by K-fold
/// cross-validation over all of `train` ([`crate::models::eval::cross_validate_progress`],
/// what `fit --cv K` runs). Only the errors of workloads for which `error_from` is true are
/// kept (every workload's points are still in every refit).
///
/// # Errors
/// No clock knob with an interior value, or no error could be measured; the messages name
/// the fix.
pub fn measure_slowdown_errors(
    kind: ModelKind,
    meta: &SetMeta,
    train: &[Point],
    params: &FitParams,
    knob: &str,
    folds: Option<usize>,
    error_from: &(dyn Fn(&str) -> bool + Sync),
) -> Result<SlowdownErrors> {
    let tolerance = params.analytic.calibration_tolerance;
    let interior: Vec<usize> = interior_indices(train, knob);
    if interior.is_empty() {
        let vals: Vec<f64> = train
            .iter()
            .filter_map(|p| p.knobs.get(knob).copied())
            .collect();
        let lo = vals.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = vals.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        anyhow::bail!(
            "the risk guard needs a training value of {knob} strictly between the lowest and the highest ({lo} and {hi}) to measure interpolation errors; train on three or more values, or give a fixed margin, e.g. --slowdown-margin 1% (taken off the bound; 0 for the raw plan)"
        );
    }
    let kind = kind.resolve(train, false);
    let interior: Vec<usize> = interior
        .into_iter()
        .filter(|&i| error_from(&train[i].workload))
        .collect();
    if interior.is_empty() {
        anyhow::bail!(
            "no workload is left to measure the guard's errors on: every workload with an interior value of {knob} is judged (fix: with --judge-on, name the prefixes of only some of the workloads)"
        );
    }
    let (results, protocol) = match folds.filter(|k| *k >= 2 && *k < train.len()) {
        Some(k) => {
            let ev = crate::models::eval::cross_validate_progress(
                kind,
                meta,
                train,
                params,
                Some(k),
                &indicatif::ProgressBar::hidden(),
            );
            (ev.results, format!("{k}-fold cross-validation"))
        }
        None => {
            let results: Vec<PointResult> = crate::models::scoring::parallel_map(&interior, |&i| {
                let p = &train[i];
                let rest: Vec<Point> = train
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| *j != i)
                    .map(|(_, q)| q.clone())
                    .collect();
                let m = fit_kind(kind, meta, &rest, params).ok()?;
                let pred = m.predict(&p.workload, &p.knobs).ok()?;
                Some(PointResult {
                    workload: p.workload.clone(),
                    knobs: p.knobs.clone(),
                    measured: crate::models::scoring::measured(p),
                    predicted: pred,
                })
            })
            .into_iter()
            .flatten()
            .collect();
            (results, "leave-one-out".to_string())
        }
    };
    let results: Vec<PointResult> = results
        .into_iter()
        .filter(|r| error_from(&r.workload))
        .collect();
    let errs = errors_from_results(meta, train, &results, knob, tolerance, &protocol);
    if errs.is_empty() {
        anyhow::bail!("no interior training point of {knob} could be predicted held out; give a fixed margin, e.g. --slowdown-margin 1% (taken off the bound; 0 for the raw plan)");
    }
    Ok(errs)
}

/// Whether the group of candidate `k` is compute-bound by the model's own predictions:
/// `t·f` agrees within `tolerance` at the two lowest values of `knob` among the
/// candidates with the same other knobs (the rule of [`compute_bound`], on
/// predictions, so `plan --model` and `plan --evaluate` classify alike).
fn predicted_compute_bound(r: &RegionInput, k: &Knobs, knob: &str, tolerance: f64) -> bool {
    let want = other_knobs(k, knob);
    let tf: Vec<(f64, f64)> = r
        .candidates
        .iter()
        .filter(|c| same_knobs(&other_knobs(&c.knobs, knob), &want))
        .filter_map(|c| Some((*c.knobs.get(knob)?, c.time_s)))
        .filter(|(_, t)| *t > 0.0)
        .collect();
    tf_agrees(tf, tolerance).unwrap_or(false)
}

/// The risk budget's choice over independent workloads.
#[derive(Debug, Clone, PartialEq)]
pub struct GuardedChoice {
    /// Per region, the index of the chosen candidate in its `candidates`.
    pub chosen: Vec<usize>,
    /// Expected number of regions whose measured slowdown exceeds the bound.
    pub expected_violations: f64,
}

/// Choose one candidate per region (independent workloads, each with its own `bound`)
/// under the risk budget: among the candidates predicted within the bound (and under
/// `power_cap_w`), maximise the total predicted gain as a share of each region's predicted
/// oracle ([`as_share_of_predicted_oracle`]) subject to
/// `Σ P + z·√(Σ P(1 − P)) ≤ risk · regions`
/// ([`risk_budget_choice_with_spread`]). A candidate's `P` (of a
/// violation) is the share of the errors above `bound − predicted slowdown`; 0 at the
/// reference (`refs[i]`, the maximum setting). [`GuardSpec::Risk`]: all errors, `z = 0`;
/// [`GuardSpec::RiskByClass`]: the same per class (compute-bound or not);
/// [`GuardSpec::RiskNear`]: the errors of the held-out points whose predicted slowdown
/// lies in `(0, bound]` (all errors when fewer than `1/risk`), `z` = [`GUARD_SPREAD_Z`].
///
/// # Errors
/// A region without a prediction at its reference setting.
#[allow(clippy::too_many_arguments)]
pub fn risk_choice(
    regions: &[RegionInput],
    refs: &[Knobs],
    objective: Objective,
    bound: f64,
    power_cap_w: Option<f64>,
    errors: &SlowdownErrors,
    guard: GuardSpec,
) -> Result<GuardedChoice> {
    let Some(risk) = guard.risk() else {
        anyhow::bail!("risk_choice needs a risk guard, not {}", guard.name());
    };
    let by_class = matches!(guard, GuardSpec::RiskByClass(_));
    let conditioned = matches!(guard, GuardSpec::RiskNear(_));
    let z = if conditioned { GUARD_SPREAD_Z } else { 0.0 };
    let min_n = (1.0 / risk).ceil() as usize;
    // The errors of the points the planner could choose: predicted within the bound and
    // slower than the reference (`near`); too few of them, all of them.
    let near = |s: f64| !conditioned || (s > 1e-12 && s <= bound + 1e-12);
    let base = {
        let v = errors.select(|s, _| near(s));
        if v.len() >= min_n {
            v
        } else {
            errors.pooled()
        }
    };
    let class = |cb: bool| -> Vec<f64> {
        let v = errors.select(|s, c| c == cb && near(s));
        if by_class && v.len() >= min_n {
            v
        } else {
            base.clone()
        }
    };
    let (e_cb, e_other) = (class(true), class(false));
    let mut options: Vec<Vec<(f64, f64)>> = Vec::new();
    let mut index: Vec<Vec<usize>> = Vec::new();
    for (r, rk) in regions.iter().zip(refs) {
        let Some(rc) = r.candidates.iter().find(|c| same_knobs(&c.knobs, rk)) else {
            anyhow::bail!(
                "workload `{}` has no prediction at the maximum setting {}; slowdown is measured against it (fix: fit a set that measures it there)",
                r.name,
                super::planner::format_knobs(rk)
            );
        };
        let v_ref = objective.value(rc.energy_j, rc.time_s);
        let mut o = Vec::new();
        let mut ix = Vec::new();
        for (i, c) in r.candidates.iter().enumerate() {
            let is_ref = same_knobs(&c.knobs, rk);
            let s = c.time_s / rc.time_s - 1.0;
            if !is_ref && (s > bound + 1e-12 || power_cap_w.is_some_and(|w| c.power_w() > w)) {
                continue;
            }
            let p = if is_ref {
                0.0
            } else {
                let cb = by_class
                    && predicted_compute_bound(r, &c.knobs, &errors.knob, errors.tolerance);
                violation_probability(if cb { &e_cb } else { &e_other }, s, bound)
            };
            o.push((1.0 - objective.value(c.energy_j, c.time_s) / v_ref, p));
            ix.push(i);
        }
        options.push(o);
        index.push(ix);
    }
    as_share_of_predicted_oracle(&mut options);
    let (idx, expected) = risk_budget_choice_with_spread(&options, risk, z);
    Ok(GuardedChoice {
        chosen: idx.iter().zip(&index).map(|(i, ix)| ix[*i]).collect(),
        expected_violations: expected,
    })
}

/// The margin that keeps one bound (a whole job) within `risk`: the `1 − risk` quantile of
/// the pooled errors (nearest rank), at least 0. For `--job` plans, where one total time has
/// one bound, the chance constraint `P(violation) ≤ risk` is this margin.
pub fn job_margin(errors: &SlowdownErrors, risk: f64) -> f64 {
    let v = errors.pooled();
    if v.is_empty() {
        return 0.0;
    }
    let i = (((1.0 - risk) * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
    v[i].max(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dvfs::planner::Candidate;

    #[test]
    fn guard_spec_parses_each_accepted_form() {
        let p = |s: &str| s.parse::<GuardSpec>().unwrap();
        assert_eq!(p("risk"), GuardSpec::Risk(DEFAULT_RISK));
        assert_eq!(p(" risk-class "), GuardSpec::RiskByClass(DEFAULT_RISK));
        assert_eq!(p("risk-near"), GuardSpec::RiskNear(DEFAULT_RISK));
        assert_eq!(p("auto"), GuardSpec::AutoMargin);
        assert_eq!(p("1%"), GuardSpec::Margin(0.01));
        assert_eq!(p("0.02"), GuardSpec::Margin(0.02));
        assert_eq!(p("0"), GuardSpec::Margin(0.0));
        assert_eq!(p("none"), GuardSpec::Margin(0.0));
        assert_eq!(p("0").name(), "none");
        assert_eq!(p("1%").name(), "margin");
        assert_eq!(p("1%").margin(), 0.01);
        assert_eq!(p("risk").margin(), 0.0);
        assert_eq!(p("risk-near").risk(), Some(DEFAULT_RISK));
        assert_eq!(p("auto").risk(), None);
    }

    #[test]
    fn guard_spec_errors_name_the_value_and_the_accepted_forms() {
        for bad in ["riskk", "-1%", "five", "", "nan", "inf%"] {
            let e = bad.parse::<GuardSpec>().unwrap_err();
            assert_eq!(e, GuardSpecError::Unknown(bad.trim().to_string()));
            let m = e.to_string();
            assert!(
                m.contains(&format!("`{}`", bad.trim()))
                    && m.contains("risk (the default), risk-class, risk-near, auto")
                    && m.contains("1%"),
                "{m}"
            );
        }
    }

    #[test]
    fn guard_spec_with_risk_sets_and_checks_a_risk_guards_risk() {
        let risk = GuardSpec::Risk(DEFAULT_RISK);
        assert_eq!(risk.with_risk(0.1), Ok(GuardSpec::Risk(0.1)));
        assert_eq!(
            GuardSpec::RiskByClass(DEFAULT_RISK).with_risk(0.2),
            Ok(GuardSpec::RiskByClass(0.2))
        );
        assert_eq!(
            GuardSpec::RiskNear(DEFAULT_RISK).with_risk(0.3),
            Ok(GuardSpec::RiskNear(0.3))
        );
        for bad in [0.0, 1.0, 1.5, -0.1, f64::NAN] {
            let e = risk.with_risk(bad).unwrap_err();
            assert!(
                e.to_string().contains("must be a fraction between 0 and 1"),
                "{e}"
            );
        }
        // a margin ignores --risk, as before
        assert_eq!(
            GuardSpec::Margin(0.01).with_risk(2.0),
            Ok(GuardSpec::Margin(0.01))
        );
        assert_eq!(
            GuardSpec::AutoMargin.with_risk(0.0),
            Ok(GuardSpec::AutoMargin)
        );
    }

    fn k(f: f64) -> Knobs {
        [("core_freq_mhz".to_string(), f)].into_iter().collect()
    }

    #[test]
    fn risk_choice_keeps_the_expected_violations_within_the_budget() {
        // Two workloads; the low clock saves much but sits 0.5 % under the bound, where 3 of
        // 4 errors would break it. Budget 0.5 × 2 = 1 expected violation: one takes the
        // risk, the one whose low clock buys more of its oracle (a: all of it; b: 0.15 of
        // 0.15 at 1000 against 0.10 at 1500, so it gives up less by stepping back).
        let region = |n: &str, e_low: f64| RegionInput {
            name: n.into(),
            candidates: vec![
                Candidate {
                    knobs: k(1000.0),
                    time_s: 1.045,
                    energy_j: e_low,
                },
                Candidate {
                    knobs: k(1500.0),
                    time_s: 1.01,
                    energy_j: 90.0,
                },
                Candidate {
                    knobs: k(2000.0),
                    time_s: 1.0,
                    energy_j: 100.0,
                },
            ],
        };
        let errors = SlowdownErrors {
            protocol: "leave-one-out".into(),
            knob: "core_freq_mhz".into(),
            tolerance: 0.01,
            error: vec![0.0, 0.006, 0.007, 0.008],
            predicted_slowdown: vec![0.01, 0.02, 0.03, 0.04],
            compute_bound: vec![false; 4],
        };
        let regions = [region("a", 70.0), region("b", 85.0)];
        let refs = [k(2000.0), k(2000.0)];
        let c = risk_choice(
            &regions,
            &refs,
            Objective::Energy,
            0.05,
            None,
            &errors,
            GuardSpec::Risk(0.5),
        )
        .unwrap();
        assert!(c.expected_violations <= 1.0 + 1e-9, "{c:?}");
        assert_eq!(c.chosen, vec![0, 1], "{c:?}");
        assert!((c.expected_violations - 0.75).abs() < 1e-9, "{c:?}");
        // with no risk allowed, nobody takes the 1000 MHz setting
        let c0 = risk_choice(
            &regions,
            &refs,
            Objective::Energy,
            0.05,
            None,
            &errors,
            GuardSpec::Risk(1e-9),
        )
        .unwrap();
        assert!(c0.chosen.iter().all(|i| *i != 0), "{c0:?}");
        assert_eq!(job_margin(&errors, 0.25), 0.007);
    }
}
