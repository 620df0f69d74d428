//! `powerperf fit --format json`: [`FitOutput`].

use crate::models::HeldOutError;
use serde::{Deserialize, Serialize};

/// What `fit --format json` prints on stdout (keys in alphabetical order, see
/// [`super::json_sorted`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FitOutput {
    /// The naive baseline scored on the same held-out points (added by issue 21).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline_rule: Option<String>,
    /// Leave-one-out (or `--cv`) error; `null` with `--no-loo`.
    pub held_out_error: Option<HeldOutError>,
    /// The fitted model kind.
    pub kind: String,
    /// The model file written (`-o`).
    pub model: String,
    /// Points fitted (means over repeats).
    pub points: usize,
    /// The training set, as given.
    pub set: String,
    /// The model's held-out error beside the baseline's, per target (added by issue 21).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub versus_baseline:
        Option<std::collections::BTreeMap<String, crate::models::baseline::Versus>>,
    /// Workloads in the set.
    pub workloads: usize,
}

impl FitOutput {
    /// Pretty JSON, byte for byte what `fit --format json` printed before it had a type.
    ///
    /// # Errors
    /// Serialisation errors.
    pub fn to_json(&self) -> serde_json::Result<String> {
        super::json_sorted(self)
    }
}
