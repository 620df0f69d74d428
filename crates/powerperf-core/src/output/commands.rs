//! The JSON summaries of `import`, `datasets list`, `sweep` and `quickstart`: one typed
//! struct per command, printed with [`super::json_sorted`] (keys in alphabetical order,
//! byte for byte the layout these commands printed when they built `serde_json::Value`s).

use crate::store::bundled::BundledSet;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// `powerperf import --format json` (stdout).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImportOutput {
    /// The training set written (`-o`).
    pub set: PathBuf,
    /// The set's source (the spec, or `collect`).
    pub source: String,
    /// The data files read (`bundled:datasets/…` for a bundled set).
    pub files: Vec<PathBuf>,
    pub points: usize,
    pub workloads: Vec<String>,
    pub knobs: Vec<String>,
    pub targets: Vec<String>,
    pub counters: Vec<String>,
    pub static_features: Vec<String>,
    /// Run directories written (`--write-runs`).
    pub runs: Vec<PathBuf>,
    pub notes: Vec<String>,
}

/// `powerperf datasets list --format json` (stdout).
#[derive(Debug, Clone, Serialize)]
pub struct DatasetsOutput {
    pub sets: Vec<BundledSet>,
}

/// One failed run of a sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepFailure {
    pub run: PathBuf,
    pub status: i32,
}

/// `powerperf sweep --format json` (one line on stderr).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepOutput {
    /// The training set directory.
    pub set: PathBuf,
    pub ran: usize,
    /// Runs finished by an earlier sweep and kept.
    pub skipped: usize,
    pub points: usize,
    pub failed: Vec<SweepFailure>,
    pub notes: Vec<String>,
    pub interrupted: bool,
    /// 0, or 128 + the signal that interrupted the sweep.
    pub exit_status: i32,
}

/// One `powerperf` command run by quickstart.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuickstartCommand {
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub exit_status: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// One step of quickstart's transcript.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct QuickstartStep {
    pub title: String,
    /// Seconds since the start when the step began.
    pub at_s: f64,
    pub commands: Vec<QuickstartCommand>,
}

/// `powerperf quickstart --format json` (stdout).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuickstartOutput {
    /// The working directory (`--out`).
    pub out: PathBuf,
    /// Where the dataset steps read their data: `bundled`, the `--data` directory, or
    /// null with `--no-data`.
    pub data: Option<String>,
    pub seconds: f64,
    pub steps: Vec<QuickstartStep>,
}
