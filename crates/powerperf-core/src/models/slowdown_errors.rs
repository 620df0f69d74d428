//! The held-out slowdown errors a model file carries for the guard of `powerperf plan`
//! (issue 20, item 1). Measured by `dvfs::guard` (models never import dvfs); stored as
//! `slowdown_errors` in `MODEL.json` (docs/models.md).

use serde::{Deserialize, Serialize};

/// Held-out slowdown errors of a model at the interior training values of `knob`
/// (`slowdown_errors` in `MODEL.json`; docs/models.md). One entry per held-out point, in
/// three parallel lists.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SlowdownErrors {
    /// How the predictions were held out: `leave-one-out` or `K-fold cross-validation`.
    pub protocol: String,
    /// The clock knob whose interior training values (strictly between its lowest and
    /// highest) the errors are at.
    pub knob: String,
    /// The class rule's tolerance: a group is compute-bound when `t·f` agrees within it at
    /// its two lowest values of `knob`.
    pub tolerance: f64,
    /// Signed slowdown error `(t_measured − t_predicted) / t_ref` of each point (a
    /// fraction; positive: the model under-predicted the slowdown).
    pub error: Vec<f64>,
    /// The held-out prediction's slowdown at that point, `t_predicted / t_ref − 1`.
    pub predicted_slowdown: Vec<f64>,
    /// Whether the point's group is compute-bound on the training points.
    pub compute_bound: Vec<bool>,
}

impl SlowdownErrors {
    /// An empty list with its provenance.
    pub fn new(protocol: &str, knob: &str, tolerance: f64) -> Self {
        SlowdownErrors {
            protocol: protocol.into(),
            knob: knob.into(),
            tolerance,
            error: Vec::new(),
            predicted_slowdown: Vec::new(),
            compute_bound: Vec::new(),
        }
    }

    /// Add one point.
    pub fn push(&mut self, error: f64, predicted_slowdown: f64, compute_bound: bool) {
        self.error.push(error);
        self.predicted_slowdown.push(predicted_slowdown);
        self.compute_bound.push(compute_bound);
    }

    /// The errors of the points that `keep(predicted slowdown, compute-bound)` selects,
    /// sorted ascending. Lists of different lengths (a damaged file) give only the pairs
    /// that exist.
    pub fn select(&self, keep: impl Fn(f64, bool) -> bool) -> Vec<f64> {
        let mut v: Vec<f64> = self
            .error
            .iter()
            .zip(&self.predicted_slowdown)
            .zip(&self.compute_bound)
            .filter(|((_, s), c)| keep(**s, **c))
            .map(|((e, _), _)| *e)
            .collect();
        v.sort_by(f64::total_cmp);
        v
    }

    /// Every error, sorted ascending.
    pub fn pooled(&self) -> Vec<f64> {
        self.select(|_, _| true)
    }

    /// How many errors.
    pub fn len(&self) -> usize {
        self.error.len()
    }

    /// No error at all.
    pub fn is_empty(&self) -> bool {
        self.error.is_empty()
    }

    /// One line for the plan file and the table: protocol, count, knob.
    pub fn describe(&self) -> String {
        format!(
            "{}, {} errors at interior values of {}",
            self.protocol,
            self.len(),
            self.knob
        )
    }
}
