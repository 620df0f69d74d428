//! powerperf-core: the library of powerperf's four jobs, without the command line.
//!
//! [`collect`] training runs (counters, energy, regions) into a run directory (its format:
//! [`store::run`], owned by the `powerperf-format` crate), [`models`] fitted on training sets
//! ([`store::set`]), predictions at other frequencies and thread counts, and [`dvfs`] plans
//! applied to a job through a frequency controller; [`report`] summarises runs, [`output`]
//! holds the typed outputs of the commands, [`export`] writes runs as OTF2, Perfetto and Chrome
//! traces. The `powerperf` crate puts the CLI (clap) on top; it re-exports nothing, so each
//! type has one path (`powerperf_core::models::…`, and the run and set formats at
//! `powerperf_format::…`). Layers and
//! allowed dependencies: docs/architecture.md.

pub mod collect;
pub mod dvfs;
pub mod export;
pub mod models;
pub mod output;
pub mod report;
pub mod store;
