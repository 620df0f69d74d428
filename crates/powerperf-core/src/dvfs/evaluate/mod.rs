//! Plan quality on measured data (`powerperf plan --evaluate SET --train KNOB=A,B,C`).
//!
//! Protocol (issue 7, item 5): a model is fitted on the points whose `KNOB` value is one of
//! the training values only (means over repeats); for every workload the planner chooses
//! among **all** measured settings of that workload using the model's predictions; the
//! measured values at the chosen setting judge the choice:
//!
//! - objective gain against the maximum setting: `1 − V(chosen) / V(max)`, with
//!   `V = E`, `E·t` or `E·t²` measured (energy saved for `--objective energy`);
//! - the oracle: the measured setting with the smallest `V` whose measured slowdown is within
//!   the bound; `fraction_of_oracle = gain(chosen) / gain(oracle)`;
//! - measured slowdown `t(chosen) / t(max) − 1`; a violation when it exceeds the bound.
//!
//! Workloads whose oracle gains under 0.5 % are listed apart: they count as met when the
//! plan stays within the bound, and are left out of the mean fraction.
//! Baselines: the best single setting for all workloads (largest mean measured gain with
//! every workload within the bound; each workload weighs the same), and race-to-idle (the maximum setting, then idle at
//! `idle_power_w` for the rest of the plan's time; with no idle power given it is the maximum
//! setting itself).

use super::guard::{GuardSpec, GUARD_SPREAD_Z};
use super::planner::{self, same_knobs, Candidate, PlannerConfig, RegionInput};
use super::risk_budget::{auto_margin, SMALL_ORACLE_GAIN};
use crate::models::{fit_kind, FitParams, Fitted, Knobs, ModelKind};
use anyhow::{Context, Result};
use powerperf_format::set::{Point, TrainingSet};
use serde::Serialize;

/// What to evaluate.
#[derive(Debug, Clone)]
pub struct EvalRequest {
    pub config: PlannerConfig,
    /// The knob whose values split training from held-out settings.
    pub train_knob: String,
    pub train_values: Vec<f64>,
    /// When set, the training points instead (several knobs or a list of settings, issue
    /// 21); `train_knob` then names the knob the guards' interior points run along.
    pub split: Option<crate::models::split::TrainSplit>,
    pub kind: ModelKind,
    pub params: FitParams,
    /// Idle power for race-to-idle, W.
    pub idle_power_w: Option<f64>,
    /// The guard against prediction error (the choice is always judged against
    /// `max_slowdown`).
    pub guard: GuardSpec,
    /// How the risk guard's errors are measured: `None` leave-one-out at the interior
    /// training points, `Some(k)` K-fold cross-validation over the training points (what
    /// `fit --cv K` stores; [`crate::dvfs::guard::measure_slowdown_errors`]).
    pub cv_folds: Option<usize>,
    /// A workload-class holdout (issue 20, item 3): when not empty, only the workloads whose
    /// name starts with one of these prefixes are judged, and the guard's errors come only
    /// from the other workloads' training points, so the guard is judged on classes it
    /// was not tuned on.
    pub judge_on: Vec<String>,
}

impl EvalRequest {
    /// Whether `workload` is judged (see [`EvalRequest::judge_on`]).
    pub fn judged(&self, workload: &str) -> bool {
        self.judge_on.is_empty()
            || self
                .judge_on
                .iter()
                .any(|p| workload.starts_with(p.as_str()))
    }
}

/// One workload's result.
#[derive(Debug, Clone, Serialize)]
pub struct WorkloadResult {
    pub workload: String,
    pub chosen: Knobs,
    pub oracle: Knobs,
    /// Measured gain of the chosen setting against the maximum setting (fraction).
    pub gain: f64,
    pub oracle_gain: f64,
    /// `gain / oracle_gain`; `None` when the oracle gains under 0.5 %.
    pub fraction_of_oracle: Option<f64>,
    pub measured_slowdown: f64,
    pub predicted_slowdown: f64,
    pub predicted_gain: f64,
    /// Measured energy saved against the maximum setting (fraction).
    pub energy_saving: f64,
    pub violation: bool,
    /// Oracle gain under 0.5 %.
    pub small_oracle_gain: bool,
}

/// A baseline policy's summary.
#[derive(Debug, Clone, Serialize)]
pub struct Baseline {
    pub name: String,
    pub setting: Option<Knobs>,
    /// Mean over workloads (oracle gain ≥ 0.5 %) of `gain / oracle_gain`.
    pub mean_fraction_of_oracle: f64,
    /// Mean measured gain over all workloads.
    pub mean_gain: f64,
    pub bound_violations: usize,
}

/// The whole evaluation (`--format json` prints it).
#[derive(Debug, Clone, Serialize)]
pub struct EvalReport {
    pub workloads: usize,
    pub mean_fraction_of_oracle: f64,
    /// The same mean with every bound violation counted as 0 (a stricter reading).
    pub mean_fraction_of_oracle_violations_as_zero: f64,
    pub bound_violations: usize,
    pub objective: String,
    pub max_slowdown: Option<f64>,
    pub model_kind: String,
    pub train: String,
    pub slowdown_margin: f64,
    /// The risk-budget guard's numbers, when it was used.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub risk_guard: Option<RiskSummary>,
    pub mean_gain: f64,
    pub mean_oracle_gain: f64,
    /// Workloads where the oracle gains under 0.5 %, and how many of them the plan met.
    pub small_oracle_gain: Vec<String>,
    pub small_oracle_gain_met: usize,
    pub skipped: Vec<(String, String)>,
    pub baselines: Vec<Baseline>,
    pub per_workload: Vec<WorkloadResult>,
}

/// What the risk-budget guard used ([`GuardSpec::Risk`] and its variants).
#[derive(Debug, Clone, Serialize)]
pub struct RiskSummary {
    /// Allowed expected fraction of workloads above the bound.
    pub risk: f64,
    /// Expected number of violations of the chosen settings under the error distribution.
    pub expected_violations: f64,
    /// Leave-one-out errors the distribution is made of.
    pub errors: usize,
    /// Median and 95th percentile of the signed slowdown error (fraction).
    pub error_q50: f64,
    pub error_q95: f64,
    /// How the errors were held out (`leave-one-out`, `K-fold cross-validation`).
    pub protocol: String,
    /// The guard (`risk`, `risk-class`, `risk-near`) and its spread factor `z`.
    pub guard: String,
    pub spread_z: f64,
}

fn measured(p: &Point) -> Option<(f64, f64)> {
    let t = p.time_s?;
    let e = p.energy_j.or_else(|| p.power_w.map(|w| w * t))?;
    Some((t, e))
}

/// The `q` quantile of sorted `v` (nearest rank, `ceil(q·n)`-th value).
fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let i = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
    v[i]
}

/// Judge one workload's chosen setting on the measured values. `reference` is (knobs,
/// measured time s, measured energy J) at the maximum setting.
#[allow(clippy::too_many_arguments)]
fn judge(
    obj: powerperf_node::plan_file::Objective,
    bound: Option<f64>,
    w: &str,
    pts: &[(Knobs, f64, f64)],
    reference: (&Knobs, f64, f64),
    chosen: Knobs,
    predicted_slowdown: f64,
    predicted_gain: f64,
) -> Result<WorkloadResult> {
    let (ref_knobs, t_ref, e_ref) = reference;
    let within = |s: f64| bound.is_none_or(|b| s <= b + 1e-12);
    let &(_, t_c, e_c) = pts
        .iter()
        .find(|p| same_knobs(&p.0, &chosen))
        .context("chosen setting not measured")?;
    let v_ref = obj.value(e_ref, t_ref);
    let gain_of = |t: f64, e: f64| 1.0 - obj.value(e, t) / v_ref;
    let oracle = pts
        .iter()
        .filter(|p| within(p.1 / t_ref - 1.0))
        .min_by(|a, b| obj.value(a.2, a.1).total_cmp(&obj.value(b.2, b.1)))
        .cloned()
        .unwrap_or((ref_knobs.clone(), t_ref, e_ref));
    let gain = gain_of(t_c, e_c);
    let oracle_gain = gain_of(oracle.1, oracle.2);
    let small = oracle_gain < SMALL_ORACLE_GAIN;
    let slow = t_c / t_ref - 1.0;
    Ok(WorkloadResult {
        workload: w.to_string(),
        chosen,
        oracle: oracle.0,
        gain,
        oracle_gain,
        fraction_of_oracle: (!small).then(|| gain / oracle_gain),
        measured_slowdown: slow,
        predicted_slowdown,
        predicted_gain,
        energy_saving: 1.0 - e_c / e_ref,
        violation: !within(slow),
        small_oracle_gain: small,
    })
}

/// One evaluated workload: its measured settings, its maximum setting, and the model's
/// predictions the planner chose from.
struct Table {
    workload: String,
    /// Every measured setting: (knobs, measured time s, measured energy J).
    pts: Vec<(Knobs, f64, f64)>,
    /// The maximum setting and its measured time (s) and energy (J).
    ref_knobs: Knobs,
    t_ref: f64,
    e_ref: f64,
    /// The model's predictions at every measured setting it could predict.
    cands: Vec<Candidate>,
}

/// Whether a slowdown (fraction) is within the bound (always, with no bound).
fn within_bound(bound: Option<f64>, s: f64) -> bool {
    bound.is_none_or(|b| s <= b + 1e-12)
}

/// The mean of `v`; NaN when empty.
fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        f64::NAN
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

/// The means whose `train_knob` value is one of the training values.
///
/// # Errors
/// No point has a training value.
fn training_points(means: &TrainingSet, req: &EvalRequest) -> Result<Vec<Point>> {
    let is_train = |p: &Point| match &req.split {
        Some(split) => split.is_train(p),
        None => p
            .knobs
            .get(&req.train_knob)
            .is_some_and(|v| req.train_values.iter().any(|t| (t - v).abs() < 1e-9)),
    };
    let train: Vec<Point> = means
        .points
        .iter()
        .filter(|p| is_train(p))
        .cloned()
        .map(|mut p| {
            // as `fit` does (models::features::mean_points), so both fit the same points
            crate::models::features::complete_targets(&mut p);
            p
        })
        .collect();
    if train.is_empty() {
        if let Some(split) = &req.split {
            anyhow::bail!(
                "no point of the set is a training point of {}",
                split.describe()
            );
        }
        let have = means.knob_values(&req.train_knob);
        anyhow::bail!(
            "no point has {} in {:?}; the set has {} = {:?} (fix: give --train with values from that list, e.g. its lowest, a middle and its highest)",
            req.train_knob,
            req.train_values,
            req.train_knob,
            have
        );
    }
    Ok(train)
}

/// The model's (time s, energy J) predictions at every measured setting of `workload`, and
/// why the last setting it could not predict failed (empty when none failed).
fn predicted_candidates(
    model: &Fitted,
    workload: &str,
    pts: &[(Knobs, f64, f64)],
) -> (Vec<Candidate>, String) {
    let mut cands = Vec::new();
    let mut why = String::new();
    for (k, _, _) in pts {
        match model.predict(workload, k) {
            Ok(pr) => match (
                pr.time_s,
                pr.energy_j
                    .or_else(|| pr.power_w.zip(pr.time_s).map(|(a, b)| a * b)),
            ) {
                (Some(t), Some(e)) if t.is_finite() && e.is_finite() && t >= 0.0 && e >= 0.0 => {
                    cands.push(Candidate {
                        knobs: k.clone(),
                        time_s: t,
                        energy_j: e,
                    })
                }
                _ => why = "no time/energy prediction".into(),
            },
            Err(e) => why = e.to_string(),
        }
    }
    (cands, why)
}

/// Every workload planned on the model's predictions and judged on its measurements.
struct Planned {
    per: Vec<WorkloadResult>,
    /// The evaluated workloads, in the order of `per`.
    tables: Vec<Table>,
    /// Workloads left out, with the reason.
    skipped: Vec<(String, String)>,
}

/// Plan every workload with `plan_cfg` (the bound less the margin) among its measured
/// settings, and judge each choice against `bound` on the measured values.
///
/// # Errors
/// A chosen setting that was not measured.
fn plan_workloads(
    means: &TrainingSet,
    model: &Fitted,
    plan_cfg: &PlannerConfig,
    obj: powerperf_node::plan_file::Objective,
    bound: Option<f64>,
) -> Result<Planned> {
    let mut per = Vec::new();
    let mut tables = Vec::new();
    let mut skipped = Vec::new();
    for w in means.workloads() {
        if !(means.meta.is_reliable("time_s", &w)
            && (means.meta.is_reliable("energy_j", &w) || means.meta.is_reliable("power_w", &w)))
        {
            skipped.push((
                w.clone(),
                "time or energy marked unreliable in the set".into(),
            ));
            continue;
        }
        let pts: Vec<(Knobs, f64, f64)> = means
            .points_of(&w)
            .filter_map(|p| measured(p).map(|(t, e)| (p.knobs.clone(), t, e)))
            .collect();
        let ref_knobs = means.reference_knobs(&w);
        let Some(&(_, t_ref, e_ref)) = pts.iter().find(|p| same_knobs(&p.0, &ref_knobs)) else {
            skipped.push((
                w.clone(),
                format!(
                    "no measurement at the maximum setting {}",
                    planner::format_knobs(&ref_knobs)
                ),
            ));
            continue;
        };
        let (cands, why) = predicted_candidates(model, &w, &pts);
        let sol = match planner::plan(
            &[RegionInput {
                name: w.clone(),
                candidates: cands.clone(),
            }],
            plan_cfg,
        ) {
            Ok(s) => s,
            Err(e) => {
                skipped.push((
                    w.clone(),
                    format!(
                        "{e}{}",
                        if why.is_empty() {
                            String::new()
                        } else {
                            format!(" ({why})")
                        }
                    ),
                ));
                continue;
            }
        };
        let chosen = sol.choices[0].chosen.knobs.clone();
        per.push(judge(
            obj,
            bound,
            &w,
            &pts,
            (&ref_knobs, t_ref, e_ref),
            chosen,
            sol.slowdown(),
            1.0 - obj.value(sol.energy_j, sol.time_s)
                / obj.value(sol.reference_energy_j, sol.reference_time_s),
        )?);
        tables.push(Table {
            workload: w,
            pts,
            ref_knobs,
            t_ref,
            e_ref,
            cands,
        });
    }
    Ok(Planned {
        per,
        tables,
        skipped,
    })
}

/// The risk-budget guard ([`GuardSpec::Risk`], [`GuardSpec::RiskByClass`],
/// [`GuardSpec::RiskNear`]):
/// the errors measured on the training points and the choice made by the code `plan
/// --model` runs ([`crate::dvfs::guard`]), so both choose alike; every workload's choice in
/// `per` is replaced and judged again; returns the guard's numbers.
///
/// # Errors
/// No error distribution, no prediction at a maximum setting, or a chosen setting that was
/// not measured.
fn apply_risk_guard(
    means: &TrainingSet,
    train: &[Point],
    req: &EvalRequest,
    tables: &[Table],
    per: &mut [WorkloadResult],
    guard: GuardSpec,
    b: f64,
) -> Result<RiskSummary> {
    let r = guard.risk().unwrap_or(super::guard::DEFAULT_RISK);
    let obj = req.config.objective;
    let errors = crate::dvfs::guard::measure_slowdown_errors(
        req.kind,
        &means.meta,
        train,
        &req.params,
        &req.train_knob,
        req.cv_folds,
        &|w: &str| req.judge_on.is_empty() || !req.judged(w),
    )?;
    let regions: Vec<RegionInput> = tables
        .iter()
        .map(|t| RegionInput {
            name: t.workload.clone(),
            candidates: t.cands.clone(),
        })
        .collect();
    let refs: Vec<Knobs> = tables.iter().map(|t| t.ref_knobs.clone()).collect();
    let choice = crate::dvfs::guard::risk_choice(
        &regions,
        &refs,
        obj,
        b,
        req.config.power_cap_w,
        &errors,
        guard,
    )?;
    for (i, (c, t)) in choice.chosen.iter().zip(tables).enumerate() {
        let cand = &t.cands[*c];
        let rc = t
            .cands
            .iter()
            .find(|x| same_knobs(&x.knobs, &t.ref_knobs))
            .context("the model gives no prediction at the maximum setting")?;
        per[i] = judge(
            obj,
            Some(b),
            &t.workload,
            &t.pts,
            (&t.ref_knobs, t.t_ref, t.e_ref),
            cand.knobs.clone(),
            cand.time_s / rc.time_s - 1.0,
            1.0 - obj.value(cand.energy_j, cand.time_s) / obj.value(rc.energy_j, rc.time_s),
        )?;
    }
    let pooled = errors.pooled();
    Ok(RiskSummary {
        risk: r,
        expected_violations: choice.expected_violations,
        errors: pooled.len(),
        error_q50: quantile(&pooled, 0.5),
        error_q95: quantile(&pooled, 0.95),
        protocol: errors.protocol.clone(),
        guard: guard.name().into(),
        spread_z: if matches!(guard, GuardSpec::RiskNear(_)) {
            GUARD_SPREAD_Z
        } else {
            0.0
        },
    })
}

/// The best single setting for all workloads: among the settings measured for every
/// workload within the bound, the one with the largest total measured gain (each workload
/// weighs the same, whatever its length). `None` when no setting qualifies.
fn best_single_setting(
    tables: &[Table],
    per: &[WorkloadResult],
    obj: powerperf_node::plan_file::Objective,
    bound: Option<f64>,
) -> Option<Baseline> {
    let mut settings: Vec<Knobs> = Vec::new();
    for t in tables {
        for (k, _, _) in &t.pts {
            if !settings.iter().any(|s| same_knobs(s, k)) {
                settings.push(k.clone());
            }
        }
    }
    let mut best: Option<(f64, Knobs)> = None;
    for s in &settings {
        let mut total = 0.0;
        let mut ok = true;
        for t in tables {
            match t.pts.iter().find(|p| same_knobs(&p.0, s)) {
                // minus the gain: every workload weighs the same, whatever its length
                Some(p) if within_bound(bound, p.1 / t.t_ref - 1.0) => {
                    total -= 1.0 - obj.value(p.2, p.1) / obj.value(t.e_ref, t.t_ref)
                }
                _ => {
                    ok = false;
                    break;
                }
            }
        }
        if ok && best.as_ref().is_none_or(|b| total < b.0) {
            best = Some((total, s.clone()));
        }
    }
    let (_, s) = best?;
    let mut gains = Vec::new();
    let mut fracs = Vec::new();
    for (t, r) in tables.iter().zip(per) {
        let p = t
            .pts
            .iter()
            .find(|p| same_knobs(&p.0, &s))
            .expect("checked above");
        let g = 1.0 - obj.value(p.2, p.1) / obj.value(t.e_ref, t.t_ref);
        gains.push(g);
        if !r.small_oracle_gain {
            fracs.push(g / r.oracle_gain);
        }
    }
    Some(Baseline {
        name: "best single setting for all workloads".into(),
        setting: Some(s),
        mean_fraction_of_oracle: mean(&fracs),
        mean_gain: mean(&gains),
        bound_violations: 0,
    })
}

/// Race-to-idle: the maximum setting, then idle at `idle_power_w` (W) for the rest of the
/// plan's time; with no idle power given, the maximum setting itself (gain 0).
fn race_to_idle(
    tables: &[Table],
    per: &[WorkloadResult],
    obj: powerperf_node::plan_file::Objective,
    idle_power_w: Option<f64>,
) -> Baseline {
    let mut gains = Vec::new();
    let mut fracs = Vec::new();
    for (tb, r) in tables.iter().zip(per) {
        let (t_ref, e_ref) = (tb.t_ref, tb.e_ref);
        let t_plan = tb
            .pts
            .iter()
            .find(|p| same_knobs(&p.0, &r.chosen))
            .map(|p| p.1)
            .unwrap_or(t_ref);
        let idle = idle_power_w.unwrap_or(0.0) * (t_plan - t_ref).max(0.0);
        let t = t_plan.max(t_ref);
        let g = 1.0 - obj.value(e_ref + idle, t) / obj.value(e_ref, t_ref);
        let g = if idle_power_w.is_some() { g } else { 0.0 };
        gains.push(g);
        if !r.small_oracle_gain {
            fracs.push(g / r.oracle_gain);
        }
    }
    Baseline {
        name: match idle_power_w {
            Some(w) => format!(
                "race-to-idle (maximum setting, then idle at {w} W for the plan's extra time)"
            ),
            None => {
                "race-to-idle (maximum setting; no idle power given, so idle energy is not counted)"
                    .into()
            }
        },
        setting: None,
        mean_fraction_of_oracle: mean(&fracs),
        mean_gain: mean(&gains),
        bound_violations: 0,
    }
}

/// Run the evaluation.
///
/// # Errors
/// No training point, a model that cannot be fitted, or no workload left to evaluate.
pub fn evaluate(set: &TrainingSet, req: &EvalRequest) -> Result<EvalReport> {
    let means = set.means();
    let train = training_points(&means, req)?;
    let model = fit_kind(req.kind, &means.meta, &train, &req.params)
        .context("fitting the model on the training settings")?;
    let obj = req.config.objective;
    let bound = req.config.max_slowdown;
    let margin = match req.guard {
        GuardSpec::AutoMargin => auto_margin(&means, &train, req.kind, &req.params)?,
        g => g.margin(),
    };
    let mut plan_cfg = req.config.clone();
    plan_cfg.max_slowdown = bound.map(|b| (b - margin).max(0.0));
    let Planned {
        per,
        tables,
        skipped,
    } = plan_workloads(&means, &model, &plan_cfg, obj, bound)?;
    let (per, tables): (Vec<WorkloadResult>, Vec<Table>) = per
        .into_iter()
        .zip(tables)
        .filter(|(r, _)| req.judged(&r.workload))
        .unzip();
    let mut per = per;
    if per.is_empty() && !req.judge_on.is_empty() {
        anyhow::bail!(
            "no evaluated workload starts with {} (fix: give --judge-on prefixes of the set's workload names, e.g. {})",
            req.judge_on.join(", "),
            means.workloads().iter().take(3).cloned().collect::<Vec<_>>().join(",")
        );
    }
    if per.is_empty() {
        anyhow::bail!("no workload could be evaluated: {:?}", skipped);
    }
    let risk = match (req.guard.risk(), bound) {
        (Some(_), Some(b)) => Some(apply_risk_guard(
            &means, &train, req, &tables, &mut per, req.guard, b,
        )?),
        _ => None,
    };
    let fr: Vec<f64> = per.iter().filter_map(|r| r.fraction_of_oracle).collect();
    let fr0: Vec<f64> = per
        .iter()
        .filter_map(|r| {
            r.fraction_of_oracle
                .map(|f| if r.violation { 0.0 } else { f })
        })
        .collect();
    let small: Vec<String> = per
        .iter()
        .filter(|r| r.small_oracle_gain)
        .map(|r| r.workload.clone())
        .collect();
    let small_met = per
        .iter()
        .filter(|r| r.small_oracle_gain && !r.violation)
        .count();
    let mut baselines: Vec<Baseline> = best_single_setting(&tables, &per, obj, bound)
        .into_iter()
        .collect();
    baselines.push(race_to_idle(&tables, &per, obj, req.idle_power_w));
    Ok(EvalReport {
        workloads: per.len(),
        mean_fraction_of_oracle: mean(&fr),
        mean_fraction_of_oracle_violations_as_zero: mean(&fr0),
        bound_violations: per.iter().filter(|r| r.violation).count(),
        objective: obj.name().into(),
        max_slowdown: bound,
        model_kind: model.kind().to_string(),
        slowdown_margin: margin,
        risk_guard: risk,
        train: match &req.split {
            Some(crate::models::split::TrainSplit::Grid(lists)) => lists
                .iter()
                .map(|(k, v)| {
                    format!(
                        "{k}={}",
                        v.iter()
                            .map(|x| x.to_string())
                            .collect::<Vec<_>>()
                            .join(",")
                    )
                })
                .collect::<Vec<_>>()
                .join(" × "),
            Some(split) => split.describe(),
            None => format!(
                "{}={}",
                req.train_knob,
                req.train_values
                    .iter()
                    .map(|v| v.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        },
        mean_gain: mean(&per.iter().map(|r| r.gain).collect::<Vec<_>>()),
        mean_oracle_gain: mean(&per.iter().map(|r| r.oracle_gain).collect::<Vec<_>>()),
        small_oracle_gain: small,
        small_oracle_gain_met: small_met,
        skipped,
        baselines,
        per_workload: per,
    })
}

/// Parse `KNOB=A,B,C` (values may carry a frequency unit, e.g. `1.2GHz`).
///
/// # Errors
/// A missing `=` or a value that is not a number.
pub fn parse_train(text: &str) -> Result<(String, Vec<f64>)> {
    let (k, v) = text
        .split_once('=')
        .with_context(|| format!("`{text}`: write KNOB=A,B,C, e.g. core_freq_mhz=595,861,1164"))?;
    let vals = v
        .split(',')
        .map(|x| powerperf_node::units::parse_freq_mhz(x).map_err(anyhow::Error::msg))
        .collect::<Result<Vec<_>>>()
        .with_context(|| format!("in --train `{text}`"))?;
    Ok((k.trim().to_string(), vals))
}

/// The report as a text table.
pub fn render(r: &EvalReport) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let b = r
        .max_slowdown
        .map(|b| format!("{:.1}%", b * 100.0))
        .unwrap_or_else(|| "none".into());
    let _ = writeln!(
        s,
        "plan quality: objective {}, max slowdown {b} (planned against {:.2}% less), model {} trained on {}",
        r.objective,
        r.slowdown_margin * 100.0,
        r.model_kind,
        r.train
    );
    if let Some(g) = &r.risk_guard {
        let _ = writeln!(
            s,
            "guard: risk budget {:.1}% of workloads above the bound ({}, spread z {}; expected {:.2} of {}), slowdown error from {} {} predictions at interior training points: median {:+.2}%, 95th percentile {:+.2}%",
            g.risk * 100.0,
            g.guard,
            g.spread_z,
            g.expected_violations,
            r.workloads,
            g.errors,
            g.protocol,
            g.error_q50 * 100.0,
            g.error_q95 * 100.0
        );
    }
    let w = r
        .per_workload
        .iter()
        .map(|x| x.workload.len())
        .max()
        .unwrap_or(8)
        .max(8);
    let _ = writeln!(
        s,
        "{:<w$}  {:<32}  {:<32}  {:>8}  {:>8}  {:>8}  {:>9}  {:>9}",
        "workload", "chosen", "oracle", "gain", "oracle", "of_orac", "slowdown", "predicted"
    );
    for x in &r.per_workload {
        let _ = writeln!(
            s,
            "{:<w$}  {:<32}  {:<32}  {:>7.2}%  {:>7.2}%  {:>8}  {:>8.2}%{}  {:>8.2}%",
            x.workload,
            planner::format_knobs(&x.chosen),
            planner::format_knobs(&x.oracle),
            x.gain * 100.0,
            x.oracle_gain * 100.0,
            x.fraction_of_oracle
                .map(|f| format!("{:.1}%", f * 100.0))
                .unwrap_or_else(|| "apart".into()),
            x.measured_slowdown * 100.0,
            if x.violation { "!" } else { " " },
            x.predicted_slowdown * 100.0
        );
    }
    let _ = writeln!(
        s,
        "workloads {}: mean fraction of the oracle's gain {:.1}% ({:.1}% counting violations as 0; over {} with an oracle gain >= 0.5%), mean gain {:.2}% (oracle {:.2}%), bound violations {}",
        r.workloads,
        r.mean_fraction_of_oracle * 100.0,
        r.mean_fraction_of_oracle_violations_as_zero * 100.0,
        r.workloads - r.small_oracle_gain.len(),
        r.mean_gain * 100.0,
        r.mean_oracle_gain * 100.0,
        r.bound_violations
    );
    if !r.small_oracle_gain.is_empty() {
        let _ = writeln!(
            s,
            "oracle gain under 0.5% ({}; {} within the bound): {}",
            r.small_oracle_gain.len(),
            r.small_oracle_gain_met,
            r.small_oracle_gain.join(", ")
        );
    }
    for bl in &r.baselines {
        let _ = writeln!(
            s,
            "baseline {}{}: mean fraction of oracle {:.1}%, mean gain {:.2}%",
            bl.name,
            bl.setting
                .as_ref()
                .map(|k| format!(" [{}]", planner::format_knobs(k)))
                .unwrap_or_default(),
            bl.mean_fraction_of_oracle * 100.0,
            bl.mean_gain * 100.0
        );
    }
    for (w, why) in &r.skipped {
        let _ = writeln!(s, "skipped {w}: {why}");
    }
    s
}

#[cfg(test)]
mod tests;
