//! From a fitted model ([`Predictor`]) to a plan: candidates per workload from the model's
//! knob grid, the planner per workload (or over all workloads as consecutive regions of one
//! job), and the plan file.

use super::guard::{GuardKind, SlowdownErrors};
use super::planner::{self, Candidate, PlannerConfig, RegionInput};
use crate::models::{Knobs, Predictor};
use anyhow::{Context, Result};
use powerperf_node::plan_file::{
    now_rfc3339, Device, DeviceKind, Plan, PlanHeader, PlanRegion, Scope,
};

/// What to plan.
#[derive(Debug, Clone)]
pub struct PlanRequest {
    /// Workloads to plan; empty: every workload the model knows.
    pub workloads: Vec<String>,
    pub scope: Scope,
    /// The device the frequency knobs belong to.
    pub device: DeviceKind,
    /// For a GPU: its index (written as `[[device]] index`).
    pub device_index: Option<u32>,
    pub config: PlannerConfig,
    /// Shown in `[plan] model`.
    pub model_path: String,
    /// The guard against prediction error. A margin is already taken off
    /// `config.max_slowdown` by the caller; a risk guard needs `errors`.
    pub guard: GuardKind,
    /// The model's held-out slowdown errors (`slowdown_errors` of the model file).
    pub errors: Option<SlowdownErrors>,
}

/// A plan and the workloads left out, with the reason.
#[derive(Debug, Clone)]
pub struct PlanOutcome {
    pub plan: Plan,
    pub skipped: Vec<(String, String)>,
}

/// Candidates of `workload`: every setting of the model's knob grid where the model
/// predicts a time; energy is the predicted energy, or power × time when only power is
/// predicted.
///
/// # Errors
/// No setting with both a time and an energy (or power) prediction; the message says which
/// target was missing.
pub fn region_from_predictor(p: &dyn Predictor, workload: &str) -> Result<RegionInput> {
    let mut candidates = Vec::new();
    let mut why = String::new();
    for knobs in p.knob_grid(workload) {
        let pred = match p.predict(workload, &knobs) {
            Ok(x) => x,
            Err(e) => {
                why = format!("{e:#}");
                continue;
            }
        };
        let Some(time_s) = pred.time_s else {
            why =
                "the model has no time prediction (the set may mark time unreliable for it)".into();
            continue;
        };
        let energy_j = match (pred.energy_j, pred.power_w) {
            (Some(e), _) => e,
            (None, Some(w)) => w * time_s,
            (None, None) => {
                why = "the model has neither an energy nor a power prediction".into();
                continue;
            }
        };
        candidates.push(Candidate {
            knobs,
            time_s,
            energy_j,
        });
    }
    if candidates.is_empty() {
        if why.is_empty() {
            why = "the model's knob grid for it is empty".into();
        }
        anyhow::bail!("workload `{workload}`: {why}");
    }
    Ok(RegionInput {
        name: workload.to_string(),
        candidates,
    })
}

/// Plan the requested workloads with the model's predictions.
///
/// # Errors
/// An unknown workload name (the message lists the known ones), no workload left to
/// plan, or a planner error.
pub fn plan_with_predictor(p: &dyn Predictor, req: &PlanRequest) -> Result<PlanOutcome> {
    let known = p.workloads();
    let names = if req.workloads.is_empty() {
        known.clone()
    } else {
        req.workloads.clone()
    };
    for w in &names {
        if !known.contains(w) {
            anyhow::bail!(
                "the model does not know workload `{w}`; it knows: {}",
                crate::models::name_list(&known)
            );
        }
    }
    let mut regions = Vec::new();
    let mut skipped = Vec::new();
    for w in &names {
        match region_from_predictor(p, w) {
            Ok(r) => regions.push(r),
            Err(e) => skipped.push((w.clone(), format!("{e:#}"))),
        }
    }
    if regions.is_empty() {
        anyhow::bail!(
            "no workload could be planned: {}",
            skipped
                .iter()
                .map(|s| s.1.clone())
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
    let cfg = &req.config;
    let mut out_regions = Vec::new();
    let mut totals = None;
    let mut expected_over_bound = None;
    let risk_guard = match (req.guard.risk(), cfg.max_slowdown, &req.errors) {
        (Some(r), Some(b), Some(e)) => Some((r, b, e)),
        (Some(_), Some(_), None) => anyhow::bail!(
            "the risk guard needs the model's held-out slowdown errors, and the model has none (fix: fit it again without --no-loo, e.g. `powerperf fit SET -o MODEL --cv 10`, or give a fixed margin, e.g. --slowdown-margin 1% (0 for the raw plan))"
        ),
        _ => None,
    };
    match (req.scope, risk_guard) {
        (Scope::PerWorkload, Some((_, bound, errors))) => {
            let refs = regions
                .iter()
                .map(|r| planner::reference_knobs(std::slice::from_ref(r), cfg.reference_threads))
                .collect::<Result<Vec<_>, _>>()?;
            let c = super::guard::risk_choice(
                &regions,
                &refs,
                cfg.objective,
                bound,
                cfg.power_cap_w,
                errors,
                req.guard,
            )?;
            for ((r, rk), i) in regions.iter().zip(&refs).zip(&c.chosen) {
                let chosen = &r.candidates[*i];
                let reference = r
                    .candidates
                    .iter()
                    .find(|x| planner::same_knobs(&x.knobs, rk))
                    .context("no prediction at the maximum setting")?;
                out_regions.push(plan_region(&planner::RegionChoice {
                    name: r.name.clone(),
                    chosen: chosen.clone(),
                    reference: reference.clone(),
                    folded: vec![],
                }));
            }
            expected_over_bound = Some(c.expected_violations / regions.len() as f64);
        }
        (Scope::Job, Some((risk, bound, errors))) => {
            // One bound on one total: the chance constraint is a margin, the 1 − risk
            // quantile of the errors (guard::job_margin).
            let m = super::guard::job_margin(errors, risk);
            let jcfg = PlannerConfig {
                max_slowdown: Some((bound - m).max(0.0)),
                ..cfg.clone()
            };
            let s = planner::plan(&regions, &jcfg).context("planning the job")?;
            out_regions.extend(s.choices.iter().map(plan_region));
            expected_over_bound = Some(super::evaluate::violation_probability(
                &errors.pooled(),
                s.slowdown(),
                bound,
            ));
            totals = Some(s);
        }
        (Scope::PerWorkload, None) => {
            for r in &regions {
                let s = planner::plan(std::slice::from_ref(r), cfg)
                    .with_context(|| format!("planning workload `{}`", r.name))?;
                out_regions.extend(s.choices.iter().map(plan_region));
            }
        }
        (Scope::Job, None) => {
            let s = planner::plan(&regions, cfg).context("planning the job")?;
            out_regions.extend(s.choices.iter().map(plan_region));
            totals = Some(s);
        }
    }
    let reference = planner::reference_knobs(&regions, cfg.reference_threads)?;
    let dev_knobs: Knobs = reference
        .iter()
        .filter(|(k, _)| k.as_str() != "threads")
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    let devices = if dev_knobs.is_empty() {
        vec![]
    } else {
        vec![Device {
            kind: req.device,
            index: match req.device {
                DeviceKind::Gpu => req.device_index,
                DeviceKind::Cpu => None,
            },
            knobs: dev_knobs.keys().cloned().collect(),
            default: dev_knobs,
        }]
    };
    let mut plan = Plan {
        plan: PlanHeader {
            guard: Some(req.guard.name().to_string()),
            risk: risk_guard.map(|g| g.0),
            expected_over_bound,
            guard_errors: risk_guard.map(|g| g.2.describe()),
            objective: cfg.objective,
            max_slowdown: cfg.max_slowdown,
            slowdown_margin: 0.0,
            model: req.model_path.clone(),
            model_kind: p.kind().to_string(),
            created: now_rfc3339(),
            scope: req.scope,
            power_cap_w: cfg.power_cap_w,
            transition_latency_s: cfg.transition.latency_s,
            transition_energy_j: cfg.transition.energy_j,
            min_region_s: cfg.min_region_s,
            time_s: None,
            energy_j: None,
            reference_time_s: None,
            reference_energy_j: None,
        },
        devices,
        regions: out_regions,
    };
    if let Some(s) = totals {
        set_totals(&mut plan, &s);
    }
    Ok(PlanOutcome { plan, skipped })
}

/// A plan's region entry from a planner choice.
fn plan_region(c: &planner::RegionChoice) -> PlanRegion {
    PlanRegion {
        name: c.name.clone(),
        setting: c.chosen.knobs.clone(),
        folded: c.folded.clone(),
        time_s: c.chosen.time_s,
        energy_j: c.chosen.energy_j,
        power_w: c.chosen.power_w(),
        reference_time_s: c.reference.time_s,
        reference_energy_j: c.reference.energy_j,
        energy_saving: 1.0 - c.chosen.energy_j / c.reference.energy_j,
        slowdown: c.chosen.time_s / c.reference.time_s - 1.0,
    }
}

/// Fill a plan's job totals from a solution.
fn set_totals(plan: &mut Plan, s: &planner::Solution) {
    plan.plan.time_s = Some(s.time_s);
    plan.plan.energy_j = Some(s.energy_j);
    plan.plan.reference_time_s = Some(s.reference_time_s);
    plan.plan.reference_energy_j = Some(s.reference_energy_j);
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::dvfs::planner::Objective;
    use crate::models::Prediction;

    /// A predictor with the DVFS time model t(f) = t_mem + t_comp·f0/f and power
    /// P = P_static + c·f³ (V ∝ f), Moore 2012.
    pub(crate) struct Toy;
    impl Predictor for Toy {
        fn kind(&self) -> &str {
            "toy"
        }
        fn workloads(&self) -> Vec<String> {
            vec!["membound".into(), "compute".into(), "notime".into()]
        }
        fn knob_grid(&self, _w: &str) -> Vec<Knobs> {
            [1000.0, 1500.0, 2000.0]
                .iter()
                .map(|f| [("core_freq_mhz".to_string(), *f)].into_iter().collect())
                .collect()
        }
        fn predict(&self, w: &str, k: &Knobs) -> Result<Prediction> {
            let f = k["core_freq_mhz"];
            let (tm, tc) = match w {
                "membound" => (9.0, 1.0),
                "compute" => (0.0, 10.0),
                "notime" => {
                    return Ok(Prediction {
                        time_s: None,
                        power_w: Some(10.0),
                        energy_j: None,
                    })
                }
                _ => anyhow::bail!("unknown"),
            };
            let t = tm + tc * 2000.0 / f;
            let p = 20.0 + 30.0 * (f / 2000.0).powi(3);
            Ok(Prediction {
                time_s: Some(t),
                power_w: Some(p),
                energy_j: None,
            })
        }
    }

    #[test]
    fn per_workload_plan_from_a_predictor() {
        let req = PlanRequest {
            workloads: vec![],
            scope: Scope::PerWorkload,
            device: DeviceKind::Cpu,
            device_index: None,
            config: PlannerConfig {
                objective: Objective::Energy,
                max_slowdown: Some(0.05),
                ..Default::default()
            },
            model_path: "toy.json".into(),
            guard: GuardKind::Margin(0.0),
            errors: None,
        };
        let out = plan_with_predictor(&Toy, &req).unwrap();
        assert_eq!(out.skipped.len(), 1);
        assert!(
            out.skipped[0].1.contains("no time prediction"),
            "{:?}",
            out.skipped
        );
        let m = out
            .plan
            .regions
            .iter()
            .find(|r| r.name == "membound")
            .unwrap();
        // membound at 1500: t = 9 + 4/3 = 10.333 (3.3 % slower), E = 10.333·(20+30·0.4219) = 337.5 J < 500 J
        assert_eq!(m.setting["core_freq_mhz"], 1500.0);
        assert!(m.slowdown <= 0.05 && m.energy_saving > 0.3);
        let c = out
            .plan
            .regions
            .iter()
            .find(|r| r.name == "compute")
            .unwrap();
        assert_eq!(c.setting["core_freq_mhz"], 2000.0);
        assert_eq!(out.plan.devices[0].default["core_freq_mhz"], 2000.0);
        // unknown workload names the known ones
        let e = plan_with_predictor(
            &Toy,
            &PlanRequest {
                workloads: vec!["x".into()],
                ..req
            },
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("`x`") && e.contains("membound"), "{e}");
    }
}
