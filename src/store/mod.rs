//! The run directory and the training set: `run.toml` + Parquet tables through polars.

pub mod bundled;
pub mod derive;
pub mod import;
pub mod run;
pub mod safe_file;
pub mod set;
