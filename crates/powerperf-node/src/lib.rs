//! powerperf's node code: what `powerperfd` (the root node service) and the Slurm SPANK
//! plugin need, and what `powerperf` itself uses for the same jobs, so that there is one
//! code path that writes a frequency or reads an energy counter (docs/architecture.md, "The
//! node crate").
//!
//! - [`daemon`]: powerperfd's protocol (one JSON request and response per line over a Unix
//!   socket) and its client;
//! - [`controller`]: cpufreq and uncore frequency controllers (sysfs, every write saved and
//!   restored); [`gpu_control`]: GPU clocks and power limit through NVML or the fake GPU
//!   (tests/fixtures/fake-gpu) and, for AMD and Intel GPUs, their drivers' sysfs files
//!   (`gpu_control::sysfs`; `gpu_control::node` numbers a node's GPUs NVML first), with [`nvml_clocks`] (NVML's supported clocks);
//! - energy and power readers: [`rapl`] (powercap), [`pmu`] and [`perf_event`] (the perf
//!   `power` PMU and perf_event_open counters, with [`event_spec`], the event names), [`nvml`]
//!   (NVML power and energy), [`fake_gpu`] (the fake GPU's readings);
//! - [`devices`]: one interface for every power and energy source (RAPL, NVML, amdgpu, xe,
//!   i915, ACPI power meters, hwmon) and the node's list of them (`powerperf devices`);
//! - [`state`]: the restore records and their state directory;
//! - [`plan_file`]: the plan file (`PLAN.toml`), and [`static_setting`]: the setting a plan
//!   gives to one workload;
//! - [`safe_file`] (files created without following links, read up to a stated size),
//!   [`sysfs`] (one attribute read and trimmed) and [`units`] (MHz, µJ counter deltas).
//!
//! The rule: nothing here depends on polars, arrow, linfa, ndarray or plotters
//! (tests/architecture.rs checks it on Cargo.lock).

pub mod controller;
pub mod daemon;
pub mod devices;
pub mod event_spec;
pub mod fake_gpu;
pub mod gpu_control;
pub mod nvml;
pub mod nvml_clocks;
#[cfg(target_os = "linux")]
pub mod perf_event;
pub mod plan_file;
pub mod pmu;
pub mod rapl;
pub mod safe_file;
pub mod state;
pub mod static_setting;
pub mod sysfs;
pub mod units;
