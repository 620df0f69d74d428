//! From a fitted model ([`Predictor`]) to a plan: candidates per workload from the model's
//! knob grid, the planner per workload (or over all workloads as consecutive regions of one
//! job), and the plan file.

use super::guard::{GuardSpec, SlowdownErrors};
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
    /// The planner's settings, with the user's bound as `max_slowdown` (the plan records
    /// it; a margin guard plans against it less the margin).
    pub config: PlannerConfig,
    /// Shown in `[plan] model`.
    pub model_path: String,
    /// The guard against prediction error: [`plan_with_predictor`] takes a
    /// [`GuardSpec::Margin`] off `config.max_slowdown` itself; a risk guard needs `errors`;
    /// [`GuardSpec::AutoMargin`] is resolved first ([`model_guard`]).
    pub guard: GuardSpec,
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

/// Plan the requested workloads with the model's predictions. The guard's margin is taken
/// off the bound here (`max_slowdown − margin`, at least 0); the plan records the user's
/// bound as `max_slowdown` and the margin as `slowdown_margin`.
///
/// # Errors
/// An unknown workload name (the message lists the known ones), no workload left to
/// plan, an unresolved [`GuardSpec::AutoMargin`], or a planner error.
pub fn plan_with_predictor(p: &dyn Predictor, req: &PlanRequest) -> Result<PlanOutcome> {
    if req.guard == GuardSpec::AutoMargin {
        anyhow::bail!("the auto guard takes the model's held-out time error as the margin; resolve it with model_guard before planning");
    }
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
    let bound = req.config.max_slowdown;
    let margin = req.guard.margin();
    let cfg = &PlannerConfig {
        max_slowdown: bound.map(|b| (b - margin).max(0.0)),
        ..req.config.clone()
    };
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
            expected_over_bound = Some(super::risk_budget::violation_probability(
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
            max_slowdown: bound,
            slowdown_margin: margin,
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

/// The guard of a plan from `model` (issue 20, item 1): none ([`GuardSpec::Margin`] 0)
/// without a bound; a risk guard as given, when the model has held-out slowdown errors;
/// [`GuardSpec::AutoMargin`]: the model's held-out time MAPE as the margin; a fixed margin
/// as given.
///
/// # Errors
/// The guard needs slowdown errors or a held-out time error that the model file does not
/// have; the message names the model file and the `powerperf fit` command that stores them.
pub fn model_guard(
    model: &crate::models::ModelFile,
    model_path: &std::path::Path,
    max_slowdown: Option<f64>,
    spec: GuardSpec,
) -> Result<GuardSpec> {
    let refit = format!(
        "powerperf fit {} -o {} --cv 10",
        if model.set_path.is_empty() {
            "SET"
        } else {
            model.set_path.as_str()
        },
        model_path.display()
    );
    let missing = || {
        model
            .slowdown_errors_missing
            .clone()
            .unwrap_or_else(|| "written before powerperf stored them".into())
    };
    if max_slowdown.is_none() {
        return Ok(GuardSpec::Margin(0.0));
    }
    match spec {
        GuardSpec::Risk(_) | GuardSpec::RiskByClass(_) | GuardSpec::RiskNear(_)
            if model.slowdown_errors.is_none() =>
        {
            anyhow::bail!(
                "the model {} has no held-out slowdown errors, which the default guard (--slowdown-margin risk) needs: {} (fix: fit it again with leave-one-out or cross-validation, e.g. `{refit}`, or give a fixed margin, e.g. --slowdown-margin 1%, or 0 for the raw plan)",
                model_path.display(),
                missing()
            );
        }
        GuardSpec::AutoMargin => {
            let m = model
                .held_out_error
                .as_ref()
                .and_then(|h| h.targets.get("time_s"))
                .map(|e| e.mape_pct / 100.0)
                .with_context(|| format!(
                    "--slowdown-margin auto takes the model's held-out time error as the margin, and the model {} has none (fix: fit it again without --no-loo, e.g. `{refit}`, or give a fixed margin, e.g. --slowdown-margin 1%, or 0 for the raw plan)",
                    model_path.display()
                ))?;
            Ok(GuardSpec::Margin(m))
        }
        g => Ok(g),
    }
}

/// The workloads to plan: with `regions_from` (`plan --job --regions-from RUN`) the run's
/// outermost regions that the model knows, in the order they first began, and second those
/// it does not (they run at the default setting); else `workloads` as given, and none
/// left out.
///
/// # Errors
/// An unreadable run, or none of its regions is a workload of the model.
pub fn workloads_to_plan(
    model: &crate::models::ModelFile,
    model_path: &std::path::Path,
    regions_from: Option<&std::path::Path>,
    workloads: &[String],
) -> Result<(Vec<String>, Vec<String>)> {
    let Some(run) = regions_from else {
        return Ok((workloads.to_vec(), Vec::new()));
    };
    let order = powerperf_format::set_regions::region_order(run)?;
    let known = Predictor::workloads(model);
    let (keep, unknown): (Vec<String>, Vec<String>) =
        order.into_iter().partition(|r| known.contains(r));
    if keep.is_empty() {
        anyhow::bail!(
            "none of the regions of {} ({}) is a workload of the model {}, which knows: {} (fix: fit the model on `powerperf import RUN… --regions`)",
            run.display(),
            unknown.join(", "),
            model_path.display(),
            crate::models::name_list(&known)
        );
    }
    Ok((keep, unknown))
}

/// The device of the plan (issue 20, item 4): `--device` when given, else the one the
/// model's set records for its clock knobs (`knob_devices`, from the import spec's
/// `device`). Returns the kind, for a GPU its index, and a note to print when `given`
/// overrides what the set records.
///
/// # Errors
/// The set does not say (device unknown) and no `--device`, the clock knobs belong to
/// different devices, or a recorded device name is not one powerperf knows.
pub fn plan_device(
    model: &crate::models::ModelFile,
    given: Option<DeviceKind>,
    model_path: &std::path::Path,
) -> Result<(DeviceKind, Option<u32>, Option<String>)> {
    let clocks: Vec<&String> = model
        .knobs
        .iter()
        .filter(|k| k.as_str() != "threads")
        .collect();
    let mut recorded: Vec<(String, String)> = Vec::new();
    for k in &clocks {
        if let Some(d) = model.knob_devices.get(*k) {
            let d = powerperf_format::set::canonical_device(d).map_err(|why| {
                anyhow::anyhow!(
                    "the model {} records {why} for {k} (fix: give --device cpu or --device gpu)",
                    model_path.display()
                )
            })?;
            recorded.push((k.to_string(), d));
        }
    }
    let parse = |d: &str| -> (DeviceKind, Option<u32>) {
        match d.strip_prefix("gpu") {
            Some(i) => (DeviceKind::Gpu, i.parse().ok()),
            None => (DeviceKind::Cpu, None),
        }
    };
    if let Some(kind) = given {
        let note = recorded
            .iter()
            .find(|(_, d)| parse(d).0 != kind)
            .map(|(k, d)| {
                format!(
                    "the set records {k} on `{d}`; --device {} overrides it",
                    match kind {
                        DeviceKind::Cpu => "cpu",
                        DeviceKind::Gpu => "gpu",
                    }
                )
            });
        let index = match kind {
            DeviceKind::Gpu => Some(
                recorded
                    .iter()
                    .find_map(|(_, d)| match parse(d) {
                        (DeviceKind::Gpu, i) => i,
                        _ => None,
                    })
                    .unwrap_or(0),
            ),
            DeviceKind::Cpu => None,
        };
        return Ok((kind, index, note));
    }
    if clocks.is_empty() {
        // only threads: no device knob, the plan has no [[device]]
        return Ok((DeviceKind::Cpu, None, None));
    }
    let unknown: Vec<&str> = clocks
        .iter()
        .filter(|k| !recorded.iter().any(|(r, _)| r == **k))
        .map(|k| k.as_str())
        .collect();
    if !unknown.is_empty() {
        anyhow::bail!(
            "device unknown: the set the model {} was fitted on does not record which device {} belongs to, so the plan cannot say which clocks to set (fix: give --device cpu or --device gpu; for the next import add device = \"cpu\" or \"gpu\" to the spec's [[knob]], docs/import.md)",
            model_path.display(),
            unknown.join(" and ")
        );
    }
    let first = &recorded[0].1;
    if let Some((k, d)) = recorded.iter().find(|(_, d)| d != first) {
        anyhow::bail!(
            "the model's clock knobs belong to different devices ({} on `{first}`, {k} on `{d}`); a plan sets one device (fix: give --device cpu or --device gpu, and --workload to plan)",
            recorded[0].0
        );
    }
    let (kind, index) = parse(first);
    Ok((kind, index, None))
}

/// A plan never carries a number that is not one (issue 18: `slowdown = nan` was written):
/// checks every float of `plan` as written to TOML.
///
/// # Errors
/// The first NaN or infinite value, named by its place in the plan file (`region[1].slowdown`)
/// with its value and the fix.
pub fn check_finite(plan: &Plan) -> Result<()> {
    if let Ok(v) = toml::Value::try_from(plan) {
        if let Some(at) = non_finite(&v, "") {
            anyhow::bail!(
                "the plan would hold `{at}` = {}: the model predicts no valid time or energy there (fix: check the model with `powerperf predict`, or fit it again); nothing was written",
                at_value(&v, &at)
            );
        }
    }
    Ok(())
}

/// The dotted place of the first float in `v` that is NaN or infinite.
fn non_finite(v: &toml::Value, at: &str) -> Option<String> {
    let join = |k: &str| {
        if at.is_empty() {
            k.to_string()
        } else {
            format!("{at}.{k}")
        }
    };
    match v {
        toml::Value::Float(x) if !x.is_finite() => Some(at.to_string()),
        toml::Value::Table(t) => t.iter().find_map(|(k, c)| non_finite(c, &join(k))),
        toml::Value::Array(a) => a
            .iter()
            .enumerate()
            .find_map(|(i, c)| non_finite(c, &format!("{at}[{i}]"))),
        _ => None,
    }
}

/// The value at a place found by [`non_finite`], as text.
fn at_value(v: &toml::Value, at: &str) -> String {
    let mut cur = Some(v);
    for part in at.split('.') {
        let (key, idx) = match part.split_once('[') {
            Some((k, i)) => (k, i.trim_end_matches(']').parse::<usize>().ok()),
            None => (part, None),
        };
        cur = cur.and_then(|c| c.get(key));
        if let Some(i) = idx {
            cur = cur.and_then(|c| c.get(i));
        }
    }
    cur.map(|c| c.to_string()).unwrap_or_else(|| "?".into())
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
    use crate::models::Prediction;
    use powerperf_node::plan_file::Objective;

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
            guard: GuardSpec::Margin(0.0),
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

    #[test]
    fn a_nan_in_a_plan_is_found_with_its_place() {
        let v: toml::Value = toml::from_str(
            "[plan]\nmax_slowdown = 0.05\n[[region]]\nname = \"a\"\nslowdown = 0.01\n[[region]]\nname = \"b\"\nslowdown = nan\n",
        )
        .unwrap();
        let at = super::non_finite(&v, "").unwrap();
        assert_eq!(at, "region[1].slowdown");
        assert_eq!(super::at_value(&v, &at), "nan");
        let ok: toml::Value = toml::from_str("[plan]\nmax_slowdown = 0.05\n").unwrap();
        assert_eq!(super::non_finite(&ok, ""), None);
    }
}
