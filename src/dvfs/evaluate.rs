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

use super::planner::{self, same_knobs, Candidate, PlannerConfig, RegionInput};
use crate::models::{fit_kind, FitParams, Knobs, ModelKind};
use crate::store::set::{Point, TrainingSet};
use anyhow::{Context, Result};
use serde::Serialize;

/// Oracle gains below this fraction are "listed apart".
pub const SMALL_ORACLE_GAIN: f64 = 0.005;

/// What to evaluate.
#[derive(Debug, Clone)]
pub struct EvalRequest {
    pub config: PlannerConfig,
    /// The knob whose values split training from held-out settings.
    pub train_knob: String,
    pub train_values: Vec<f64>,
    pub kind: ModelKind,
    pub params: FitParams,
    /// Idle power for race-to-idle, W.
    pub idle_power_w: Option<f64>,
    /// The planner plans against `max_slowdown − margin` (a guard for prediction error);
    /// the choice is judged against `max_slowdown`. `None`: the model's leave-one-out time
    /// MAPE on the training points only (see [`auto_margin`]).
    pub slowdown_margin: Option<f64>,
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
        .context("the leave-one-out time error on the training points could not be measured; give --slowdown-margin")
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
    pub mean_gain: f64,
    pub mean_oracle_gain: f64,
    /// Workloads where the oracle gains under 0.5 %, and how many of them the plan met.
    pub small_oracle_gain: Vec<String>,
    pub small_oracle_gain_met: usize,
    pub skipped: Vec<(String, String)>,
    pub baselines: Vec<Baseline>,
    pub per_workload: Vec<WorkloadResult>,
}

fn measured(p: &Point) -> Option<(f64, f64)> {
    let t = p.time_s?;
    let e = p.energy_j.or_else(|| p.power_w.map(|w| w * t))?;
    Some((t, e))
}

/// Run the evaluation.
///
/// # Errors
/// No training point, a model that cannot be fitted, or no workload left to evaluate.
pub fn evaluate(set: &TrainingSet, req: &EvalRequest) -> Result<EvalReport> {
    let means = set.means();
    let is_train = |p: &Point| {
        p.knobs
            .get(&req.train_knob)
            .is_some_and(|v| req.train_values.iter().any(|t| (t - v).abs() < 1e-9))
    };
    let train: Vec<Point> = means
        .points
        .iter()
        .filter(|p| is_train(p))
        .cloned()
        .collect();
    if train.is_empty() {
        let have = means.knob_values(&req.train_knob);
        anyhow::bail!(
            "no point has {} in {:?}; the set has {} = {:?}",
            req.train_knob,
            req.train_values,
            req.train_knob,
            have
        );
    }
    let model = fit_kind(req.kind, &means.meta, &train, &req.params)
        .context("fitting the model on the training settings")?;
    let obj = req.config.objective;
    let bound = req.config.max_slowdown;
    let margin = match req.slowdown_margin {
        Some(m) => m,
        None => auto_margin(&means, &train, req.kind, &req.params)?,
    };
    let mut plan_cfg = req.config.clone();
    plan_cfg.max_slowdown = bound.map(|b| (b - margin).max(0.0));
    let within = |s: f64| bound.is_none_or(|b| s <= b + 1e-12);
    let mut per = Vec::new();
    let mut skipped = Vec::new();
    // measured table per workload: (knobs, t, e)
    let mut tables: Vec<(String, Vec<(Knobs, f64, f64)>, (f64, f64))> = Vec::new();
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
        let Some(&(_, t_ref, e_ref)) = pts.iter().find(|p| same_knobs(&p.0, &ref_knobs)).map(|p| p)
        else {
            skipped.push((
                w.clone(),
                format!(
                    "no measurement at the maximum setting {}",
                    planner::format_knobs(&ref_knobs)
                ),
            ));
            continue;
        };
        let mut cands = Vec::new();
        let mut why = String::new();
        for (k, _, _) in &pts {
            match model.predict(&w, k) {
                Ok(pr) => match (
                    pr.time_s,
                    pr.energy_j
                        .or_else(|| pr.power_w.zip(pr.time_s).map(|(a, b)| a * b)),
                ) {
                    (Some(t), Some(e))
                        if t.is_finite() && e.is_finite() && t >= 0.0 && e >= 0.0 =>
                    {
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
        let sol = match planner::plan(
            &[RegionInput {
                name: w.clone(),
                candidates: cands,
            }],
            &plan_cfg,
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
        per.push(WorkloadResult {
            workload: w.clone(),
            chosen,
            oracle: oracle.0.clone(),
            gain,
            oracle_gain,
            fraction_of_oracle: (!small).then(|| gain / oracle_gain),
            measured_slowdown: slow,
            predicted_slowdown: sol.slowdown(),
            predicted_gain: 1.0
                - obj.value(sol.energy_j, sol.time_s)
                    / obj.value(sol.reference_energy_j, sol.reference_time_s),
            energy_saving: 1.0 - e_c / e_ref,
            violation: !within(slow),
            small_oracle_gain: small,
        });
        tables.push((w, pts, (t_ref, e_ref)));
    }
    if per.is_empty() {
        anyhow::bail!("no workload could be evaluated: {:?}", skipped);
    }
    let mean = |v: &[f64]| {
        if v.is_empty() {
            f64::NAN
        } else {
            v.iter().sum::<f64>() / v.len() as f64
        }
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

    // best single setting for all workloads
    let mut baselines = Vec::new();
    let mut settings: Vec<Knobs> = Vec::new();
    for (_, pts, _) in &tables {
        for (k, _, _) in pts {
            if !settings.iter().any(|s| same_knobs(s, k)) {
                settings.push(k.clone());
            }
        }
    }
    let mut best: Option<(f64, Knobs)> = None;
    for s in &settings {
        let mut total = 0.0;
        let mut ok = true;
        for (_, pts, (t_ref, e_ref)) in tables.iter() {
            match pts.iter().find(|p| same_knobs(&p.0, s)) {
                // minus the gain: every workload weighs the same, whatever its length
                Some(p) if within(p.1 / t_ref - 1.0) => {
                    total -= 1.0 - obj.value(p.2, p.1) / obj.value(*e_ref, *t_ref)
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
    if let Some((_, s)) = best {
        let mut gains = Vec::new();
        let mut fracs = Vec::new();
        for ((_, pts, (t_ref, e_ref)), r) in tables.iter().zip(&per) {
            let p = pts
                .iter()
                .find(|p| same_knobs(&p.0, &s))
                .expect("checked above");
            let g = 1.0 - obj.value(p.2, p.1) / obj.value(*e_ref, *t_ref);
            gains.push(g);
            if !r.small_oracle_gain {
                fracs.push(g / r.oracle_gain);
            }
        }
        baselines.push(Baseline {
            name: "best single setting for all workloads".into(),
            setting: Some(s),
            mean_fraction_of_oracle: mean(&fracs),
            mean_gain: mean(&gains),
            bound_violations: 0,
        });
    }
    // race-to-idle: maximum setting, then idle for the rest of the plan's time
    {
        let mut gains = Vec::new();
        let mut fracs = Vec::new();
        for ((_, pts, (t_ref, e_ref)), r) in tables.iter().zip(&per) {
            let t_plan = pts
                .iter()
                .find(|p| same_knobs(&p.0, &r.chosen))
                .map(|p| p.1)
                .unwrap_or(*t_ref);
            let idle = req.idle_power_w.unwrap_or(0.0) * (t_plan - t_ref).max(0.0);
            let t = t_plan.max(*t_ref);
            let g = 1.0 - obj.value(e_ref + idle, t) / obj.value(*e_ref, *t_ref);
            let g = if req.idle_power_w.is_some() { g } else { 0.0 };
            gains.push(g);
            if !r.small_oracle_gain {
                fracs.push(g / r.oracle_gain);
            }
        }
        baselines.push(Baseline {
            name: match req.idle_power_w {
                Some(w) => format!("race-to-idle (maximum setting, then idle at {w} W for the plan's extra time)"),
                None => "race-to-idle (maximum setting; no idle power given, so idle energy is not counted)".into(),
            },
            setting: None,
            mean_fraction_of_oracle: mean(&fracs),
            mean_gain: mean(&gains),
            bound_violations: 0,
        });
    }
    Ok(EvalReport {
        workloads: per.len(),
        mean_fraction_of_oracle: mean(&fr),
        mean_fraction_of_oracle_violations_as_zero: mean(&fr0),
        bound_violations: per.iter().filter(|r| r.violation).count(),
        objective: obj.name().into(),
        max_slowdown: bound,
        model_kind: model.kind().to_string(),
        slowdown_margin: margin,
        train: format!(
            "{}={}",
            req.train_knob,
            req.train_values
                .iter()
                .map(|v| v.to_string())
                .collect::<Vec<_>>()
                .join(",")
        ),
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
        .map(|x| crate::units::parse_freq_mhz(x).map_err(anyhow::Error::msg))
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
mod tests {
    use super::*;
    use crate::store::set::SetMeta;

    /// Two workloads measured exactly on the Moore (2012) model: the analytic model fitted on
    /// three clocks predicts the others well, so the plan should reach the oracle.
    #[test]
    fn plan_reaches_the_oracle_on_model_exact_data() {
        let mut points = Vec::new();
        for (w, tm, tc) in [("mem", 0.9, 0.1), ("cpu", 0.0, 1.0)] {
            for f in [1000.0, 1200.0, 1400.0, 1600.0, 1800.0, 2000.0] {
                let t = tm + tc * 2000.0 / f;
                let p = 10.0 + 40.0 * (f / 2000.0f64).powi(3);
                points.push(Point {
                    workload: w.into(),
                    knobs: [("core_freq_mhz".to_string(), f)].into_iter().collect(),
                    time_s: Some(t),
                    power_w: Some(p),
                    energy_j: Some(p * t),
                    ..Default::default()
                });
            }
        }
        let set = TrainingSet {
            meta: SetMeta {
                source: "test".into(),
                knobs: vec!["core_freq_mhz".into()],
                targets: vec!["time_s".into(), "power_w".into(), "energy_j".into()],
                ..Default::default()
            },
            points,
        };
        let req = EvalRequest {
            config: PlannerConfig {
                max_slowdown: Some(0.05),
                ..Default::default()
            },
            train_knob: "core_freq_mhz".into(),
            train_values: vec![1000.0, 1600.0, 2000.0],
            kind: ModelKind::Analytic,
            params: FitParams::default(),
            idle_power_w: None,
            slowdown_margin: Some(0.0),
        };
        let r = evaluate(&set, &req).unwrap();
        assert_eq!(r.workloads, 2);
        assert_eq!(r.bound_violations, 0);
        let mem = r.per_workload.iter().find(|x| x.workload == "mem").unwrap();
        // mem at 1400: t = 0.9 + 0.1429 = 1.0429 (4.3 % slower), P = 23.72 W, E = 24.74 J:
        // the lowest energy within 5 % (1200 MHz is 6.7 % slower); held out in training
        assert_eq!(mem.oracle["core_freq_mhz"], 1400.0);
        assert_eq!(mem.chosen["core_freq_mhz"], 1400.0, "{mem:?}");
        assert!((mem.fraction_of_oracle.unwrap() - 1.0).abs() < 1e-9);
        let cpu = r.per_workload.iter().find(|x| x.workload == "cpu").unwrap();
        assert!(cpu.small_oracle_gain && !cpu.violation);
        assert!(render(&r).contains("mean fraction of the oracle's gain 100.0%"));
    }
}
