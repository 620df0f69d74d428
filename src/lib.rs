//! powerperf: a power-performance modeling toolkit.
//!
//! The four jobs: [`collect`] training runs (counters, energy, regions) into a run
//! directory ([`store::run`]), [`models`] fitted on training sets ([`store::set`]),
//! predictions at other frequencies and thread counts, and [`dvfs`] plans applied
//! to a job through a frequency controller. See `docs/` and the README.

pub mod cli;
pub mod collect;
pub mod daemon;
pub mod dvfs;
pub use powerperf_events as events_dsl;
pub mod models;
pub mod output;
pub mod report;
pub mod store;
pub mod units;
