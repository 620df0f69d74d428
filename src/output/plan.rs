//! `powerperf plan --format json`: [`PlanOutput`] (with `--evaluate`, the
//! [`EvalReport`](crate::dvfs::evaluate::EvalReport) it prints is already a typed struct).

use crate::dvfs::plan_file::Plan;
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
