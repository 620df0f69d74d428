//! `powerperf evaluate --format json`: [`EvaluateOutput`].

use crate::models::eval::TargetError;
use serde::{Deserialize, Serialize};

/// What `evaluate --format json` prints (keys in alphabetical order, see
/// [`super::json_sorted`]). A target without a measurable error is left out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvaluateOutput {
    /// Error of `energy_j`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy: Option<TargetError>,
    /// Held-out points that could not be predicted (left out when none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failures: Option<usize>,
    /// The model kind evaluated (`auto` resolved).
    pub model: String,
    /// Held-out points predicted.
    pub points: usize,
    /// Error of `power_w`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power: Option<TargetError>,
    /// The protocol, in words.
    pub protocol: String,
    /// Error of `time_s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<TargetError>,
}

impl EvaluateOutput {
    /// The summary of an evaluation.
    pub fn new(ev: &crate::models::eval::Evaluation) -> Self {
        let t = |name: &str| ev.summary.targets.get(name).copied();
        EvaluateOutput {
            energy: t("energy_j"),
            failures: (!ev.failures.is_empty()).then_some(ev.failures.len()),
            model: ev.kind.name().to_string(),
            points: ev.summary.points,
            power: t("power_w"),
            protocol: ev.summary.protocol.clone(),
            time: t("time_s"),
        }
    }

    /// Parse the JSON `evaluate --format json` printed.
    ///
    /// # Errors
    /// Text that is not such JSON.
    pub fn from_json(text: &str) -> serde_json::Result<Self> {
        serde_json::from_str(text)
    }

    /// Pretty JSON, byte for byte what `evaluate --format json` printed before it had a type.
    ///
    /// # Errors
    /// Serialisation errors.
    pub fn to_json(&self) -> serde_json::Result<String> {
        super::json_sorted(self)
    }
}

/// The held-out error as a flat table (`--format csv|markdown` of `evaluate` and `fit`): one
/// row per target with a measured error, in the order `time_s`, `power_w`, `energy_j`.
pub fn error_table(
    targets: &std::collections::BTreeMap<String, crate::models::eval::TargetError>,
) -> super::Table {
    let rows = crate::store::set::TARGETS
        .iter()
        .filter_map(|t| {
            let e = targets.get(*t)?;
            Some(vec![
                t.to_string(),
                e.mape_pct.to_string(),
                e.max_pct.to_string(),
                e.n.to_string(),
            ])
        })
        .collect();
    super::Table {
        header: ["target", "mape_pct", "max_pct", "n"]
            .map(String::from)
            .to_vec(),
        rows,
    }
}
