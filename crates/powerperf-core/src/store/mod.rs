//! The run directory and the training set: `run.toml` + Parquet tables through polars.
//!
//! The formats themselves (file names, schemas, readers and writers) are owned by the
//! `powerperf-format` crate; [`run`], [`set`] and [`safe_file`] are its modules, re-exported
//! here so that `powerperf::store::run::RunMeta` and `powerperf::store::set::TrainingSet`
//! keep their paths.

pub mod bundled;
pub mod derive;
pub mod import;
pub use powerperf_format::{run, set, set_regions};
