//! powerperf: a power-performance modeling toolkit.
//!
//! The four jobs: `collect` training runs (counters, energy, regions) into a run
//! directory (`powerperf_format::run`), `models` fitted on training sets
//! (`powerperf_format::set`), predictions at other frequencies and thread counts, and `dvfs`
//! plans applied to a job through a frequency controller. See `docs/` and the README.
//!
//! This crate is the command line ([`cli`], the only user of clap) on top of
//! `powerperf-core` and `powerperf-node`. It re-exports nothing: each type has one path, in
//! the crate that defines it (`powerperf_core::models::…`, `powerperf_format::set::…`,
//! `powerperf_node::controller::…`; docs/architecture.md).

pub mod cli;
