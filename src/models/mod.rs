//! Models: features, Spearman, supervised PCA, regressions, analytical DVFS and power
//! models, thread-count models, cross-validation.
//!
//! The API other parts use (the planner, `predict`, `quickstart`) is [`Predictor`] and
//! [`load_model`]; keep these signatures stable.

use anyhow::Result;
use std::collections::BTreeMap;
use std::path::Path;

/// Knob values by knob name (`core_freq_mhz`, `mem_freq_mhz`, `threads`).
pub type Knobs = BTreeMap<String, f64>;

/// A predicted point. Units: seconds, watts, joules. `None` where the model has no
/// prediction for that target (e.g. the spec marks it unreliable).
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct Prediction {
    pub time_s: Option<f64>,
    pub power_w: Option<f64>,
    pub energy_j: Option<f64>,
}

/// A fitted model, loaded from `MODEL.json`.
pub trait Predictor {
    /// The model kind (`analytic`, `linear`, `spca`, `threads`, ...).
    fn kind(&self) -> &str;
    /// Workloads the model knows.
    fn workloads(&self) -> Vec<String>;
    /// The knob settings a planner may choose from for `workload` (the grid of the training
    /// set, held-out settings included when the model can predict them).
    fn knob_grid(&self, workload: &str) -> Vec<Knobs>;
    /// Predict `workload` at `knobs`.
    ///
    /// # Errors
    /// Unknown workload, or knobs the model cannot predict.
    fn predict(&self, workload: &str, knobs: &Knobs) -> Result<Prediction>;
}

/// Load `MODEL.json` written by `powerperf fit`.
///
/// # Errors
/// A missing or unreadable file, or a model kind this build does not know.
pub fn load_model(path: &Path) -> Result<Box<dyn Predictor>> {
    anyhow::bail!("loading models is not built yet: {}", path.display())
}
