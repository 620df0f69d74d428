//! `powerperf predict --format json`: [`PredictOutput`]. `report --predictions` reads it back
//! ([`crate::report::plots::pareto_plots`]).

use crate::models::{HeldOutError, Knobs};
use serde::{Deserialize, Serialize};

/// What `predict --format json` prints (keys in alphabetical order, see
/// [`super::json_sorted`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PredictOutput {
    /// The model's error on held-out data, as in the model file (`null`: fitted with
    /// `--no-loo`).
    #[serde(default)]
    pub held_out_error: Option<HeldOutError>,
    /// The model kind (`analytic`, `threads`, …).
    #[serde(default)]
    pub kind: String,
    /// The model file, as given to `--model`.
    #[serde(default)]
    pub model: String,
    /// Where the predictions come from and what they lack (`predict --from RUN` without
    /// `--model`: the counter-driven form, time only); absent otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// One per combination of the `--knob` values.
    pub predictions: Vec<PredictionRow>,
}

/// One predicted setting.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PredictionRow {
    /// Predicted energy, J (`null`: the model does not predict it).
    #[serde(default)]
    pub energy_j: Option<f64>,
    /// Every knob of the setting: the `--knob` values and the filled-in ones.
    #[serde(default)]
    pub knobs: Knobs,
    /// Predicted mean power, W.
    #[serde(default)]
    pub power_w: Option<f64>,
    /// Predicted time, s.
    #[serde(default)]
    pub time_s: Option<f64>,
    #[serde(default)]
    pub workload: String,
}

impl PredictOutput {
    /// Parse the JSON `predict --format json` printed.
    ///
    /// # Errors
    /// Text that is not JSON, or JSON without a `predictions` array of predictions.
    pub fn from_json(text: &str) -> serde_json::Result<Self> {
        serde_json::from_str(text)
    }

    /// Pretty JSON, byte for byte what `predict --format json` printed before it had a type.
    ///
    /// # Errors
    /// Serialisation errors.
    pub fn to_json(&self) -> serde_json::Result<String> {
        super::json_sorted(self)
    }
}
