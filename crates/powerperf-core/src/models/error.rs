//! Errors of model fitting, prediction and model files.

use std::path::PathBuf;

/// What can go wrong in `models`.
///
/// Every model function returns it, so it stays small: its largest variants are 112 bytes,
/// under the 128 of clippy's `result_large_err` (names fixed at compile time, such as
/// `Unphysical`'s target and rule, are `&'static str`, not `String`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// The set or the requested prediction lacks a knob the model needs.
    #[error("model `{model}` needs the knob `{knob}`; fix: {fix}")]
    MissingKnob {
        knob: String,
        model: String,
        fix: String,
    },
    /// Too few points to fit.
    #[error("model `{model}` cannot be fitted: {what}")]
    NotEnoughData { model: String, what: String },
    /// The model has no curve for this workload at these knob values.
    #[error("no fitted curve for workload `{workload}` at {knobs}; the model knows this workload at: [{known}] (fix: predict at knob values the training set has for the other knobs)")]
    UnknownSetting {
        workload: String,
        knobs: String,
        known: String,
    },
    /// The model gives no target at all at this setting (issue 21: it printed nothing).
    #[error("model `{model}` has no prediction for `{workload}` at {knobs}: it has no curve for any target there (e.g. fewer than two training settings of this workload, or none with these values of the other knobs); fix: train on more settings of this workload, or use a model for new workloads (`--model scaling`)")]
    NoPrediction {
        model: String,
        workload: String,
        knobs: String,
    },
    /// The model's value is not physical (a time ≤ 0, a negative power or energy, NaN):
    /// refused rather than printed (issue 21).
    #[error("model `{model}` refused `{workload}` at {knobs}: it gives {target} = {value:.6}, which {rule} (the setting is outside what the model describes; fix: predict within the training settings, or use another model)")]
    Unphysical {
        model: String,
        workload: String,
        knobs: String,
        /// `time_s`, `power_w` or `energy_j`.
        target: &'static str,
        value: f64,
        /// `must be above 0` or `must be at least 0`.
        rule: &'static str,
    },
    /// The model does not know the workload.
    #[error("unknown workload `{workload}`; the model knows: {known}")]
    UnknownWorkload { workload: String, known: String },
    /// A model kind this build does not know.
    #[error("unknown model kind `{kind}`; known kinds: analytic, analytic_counters, analytic_mem, linear, spca, threads, threads_bw, scaling, joint, auto")]
    UnknownKind { kind: String },
    /// A model file whose parts do not fit together (e.g. a target with fewer coefficients
    /// than features): written by hand or damaged, not by `fit`.
    #[error("model `{model}` is inconsistent: {what} (fix: write it again with `powerperf fit SET -o MODEL.json`)")]
    Inconsistent { model: String, what: String },
    /// A numerical fit failed.
    #[error("model `{model}`: fit failed: {what}")]
    Fit { model: String, what: String },
    /// A model file could not be read or written.
    #[error("model file {}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A model file holds a number no fitted model has (a negative time, a clock of 0).
    #[error("model file {}, line {line}: `{key}` = {value} {why} (at {at}; fix: fit the model again with `powerperf fit SET -o MODEL.json`)", path.display())]
    BadNumber {
        path: PathBuf,
        line: usize,
        key: String,
        at: String,
        value: f64,
        why: String,
    },
    /// A model file is not valid JSON of this version.
    #[error("model file {}: {source} (fix: write it again with `powerperf fit SET -o MODEL.json`)", path.display())]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
}
