//! `powerperf plan --format json`: [`PlanOutput`] (with `--evaluate`, the
//! [`EvalReport`](crate::dvfs::evaluate::EvalReport) it prints is already a typed struct).

use powerperf_node::plan_file::Plan;
use serde::{Deserialize, Serialize};

/// What `plan --format json` prints (keys in alphabetical order, see
/// [`super::json_sorted`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanOutput {
    /// The plan, as the plan file holds it (docs/plan-format.md).
    pub plan: Plan,
    /// Workloads not planned, with the reason.
    pub skipped: Vec<Skipped>,
}

/// A workload the planner skipped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skipped {
    pub reason: String,
    pub workload: String,
}

impl PlanOutput {
    /// Pretty JSON, byte for byte what `plan --format json` printed before it had a type.
    ///
    /// # Errors
    /// Serialisation errors.
    pub fn to_json(&self) -> serde_json::Result<String> {
        super::json_sorted(self)
    }
}

/// The plan's regions as a flat table (`plan --format csv|markdown`): one row per workload
/// or region with its setting (`knob=value` pairs), predicted time (s), slowdown and energy
/// saving (fractions), energy (J) and power (W).
pub fn plan_table(plan: &Plan) -> super::Table {
    let rows = plan
        .regions
        .iter()
        .map(|r| {
            vec![
                r.name.clone(),
                crate::dvfs::planner::format_knobs(&r.setting),
                r.time_s.to_string(),
                r.slowdown.to_string(),
                r.energy_j.to_string(),
                r.energy_saving.to_string(),
                r.power_w.to_string(),
            ]
        })
        .collect();
    super::Table {
        header: [
            "workload",
            "setting",
            "time_s",
            "slowdown",
            "energy_j",
            "energy_saving",
            "power_w",
        ]
        .map(String::from)
        .to_vec(),
        rows,
    }
}
