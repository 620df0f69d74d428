//! powerperf: a power-performance modeling toolkit.
//!
//! The four jobs: [`collect`] training runs (counters, energy, regions) into a run
//! directory ([`store::run`]), [`models`] fitted on training sets ([`store::set`]),
//! predictions at other frequencies and thread counts, and [`dvfs`] plans applied
//! to a job through a frequency controller. See `docs/` and the README.
//!
//! This crate is the command line ([`cli`], the only user of clap) on top of
//! `powerperf-core`, whose modules it re-exports (docs/architecture.md).

pub mod cli;
pub use powerperf_core::{collect, dvfs, events_dsl, export, models, output, report, store};
