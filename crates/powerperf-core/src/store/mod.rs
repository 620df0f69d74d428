//! The run directory and the training set: `run.toml` + Parquet tables through polars.
//!
//! The formats themselves (file names, schemas, readers and writers) are owned by the
//! `powerperf-format` crate and used by their own paths (`powerperf_format::run::RunMeta`,
//! `powerperf_format::set::TrainingSet`); this module holds what is built on them: the import
//! specs, the bundled datasets and the derived columns.

pub mod bundled;
pub mod derive;
pub mod import;
