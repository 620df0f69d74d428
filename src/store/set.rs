//! A training set: `SET/set.toml` (what the set holds) and `SET/points.parquet` (one row per
//! workload, knob values and repeat). This is the contract between `import`, `collect`
//! (a collected run is a member of a set), `fit`, `evaluate`, `predict` and `plan`.
//!
//! Columns of `points.parquet`: `workload` (str), `repeat` (i64, may be null), one f64 column
//! per knob (`core_freq_mhz`, `mem_freq_mhz`, `threads`), `time_s`, `power_w`, `energy_j`
//! (f64, null where not measured), then one f64 column per counter and per static feature,
//! named as in `set.toml`.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Targets a model predicts. Units: seconds, watts, joules.
pub const TARGETS: [&str; 3] = ["time_s", "power_w", "energy_j"];

/// How a counter column is to be read when features are built from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CounterKind {
    /// An event count over the whole measurement (e.g. instructions). Features divide it by
    /// cycles (when the set has a cycles counter) or by time.
    Count,
    /// Already a rate or an activity fraction (e.g. DCGM `sm_active`, 0..1, or bytes/s).
    Rate,
}

/// One measurement: a (workload, knob values, repeat) with its targets and counters.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Point {
    pub workload: String,
    /// Knob values by knob name (`core_freq_mhz`, `mem_freq_mhz`, `threads`).
    pub knobs: BTreeMap<String, f64>,
    pub repeat: Option<i64>,
    /// Run time, seconds.
    pub time_s: Option<f64>,
    /// Mean power, watts.
    pub power_w: Option<f64>,
    /// Energy, joules.
    pub energy_j: Option<f64>,
    /// Counter values by counter name (see [`SetMeta::counters`] for their kind).
    pub counters: BTreeMap<String, f64>,
    /// Static features known before running (e.g. PTX instruction counts), by name.
    pub static_features: BTreeMap<String, f64>,
}

impl Point {
    /// The value of a target by its name in [`TARGETS`].
    pub fn target(&self, name: &str) -> Option<f64> {
        match name {
            "time_s" => self.time_s,
            "power_w" => self.power_w,
            "energy_j" => self.energy_j,
            _ => None,
        }
    }
}

/// Targets that must not be trusted for some workloads (e.g. the V100 sweep's copied
/// `run_time` series).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Unreliable {
    /// One of [`TARGETS`].
    pub target: String,
    /// Workloads whose value of this target is unreliable. `["*"]` means all.
    pub workloads: Vec<String>,
    /// Why (shown to users).
    pub reason: String,
}

/// `SET/set.toml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct SetMeta {
    /// Where the points came from: `collect` or `import:<spec name>`.
    pub source: String,
    /// A human description (the dataset, its public name and licence).
    #[serde(default)]
    pub description: String,
    /// Knob names present as columns, e.g. `["core_freq_mhz", "mem_freq_mhz"]`.
    pub knobs: Vec<String>,
    /// Targets that have values in this set.
    pub targets: Vec<String>,
    /// Counter columns and how to read them.
    #[serde(default)]
    pub counters: BTreeMap<String, CounterKind>,
    /// Static feature columns (known before running).
    #[serde(default)]
    pub static_features: Vec<String>,
    /// Targets unreliable for some workloads.
    #[serde(default)]
    pub unreliable: Vec<Unreliable>,
}

impl SetMeta {
    /// Whether `target` is trusted for `workload`.
    pub fn is_reliable(&self, target: &str, workload: &str) -> bool {
        !self
            .unreliable
            .iter()
            .any(|u| u.target == target && u.workloads.iter().any(|w| w == "*" || w == workload))
    }
}

/// A training set in memory.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TrainingSet {
    pub meta: SetMeta,
    pub points: Vec<Point>,
}

impl TrainingSet {
    /// Workload names in first-seen order.
    pub fn workloads(&self) -> Vec<String> {
        let mut seen = Vec::new();
        for p in &self.points {
            if !seen.contains(&p.workload) {
                seen.push(p.workload.clone());
            }
        }
        seen
    }
}
