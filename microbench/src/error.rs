//! Errors of the microbenchmark library.

use std::path::PathBuf;

/// What can go wrong while reading the machine or running a measurement.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MicrobenchError {
    /// A sysfs file could not be read.
    #[error("cannot read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A sysfs cache `size` value is not `<number>[K|M|G]`.
    #[error("{path}: cache size `{value}` is not <number>[K|M|G]")]
    BadSize { path: PathBuf, value: String },
    /// A sysfs cache `level` value is not a number.
    #[error("{path}: cache level `{value}` is not a number")]
    BadLevel { path: PathBuf, value: String },
    /// No data or unified cache was found under the sysfs root.
    #[error("no data or unified caches under {0}")]
    NoCaches(PathBuf),
    /// A measurement is not available here (an OS or architecture limit), with the reason.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// Writing an output file failed.
    #[error("cannot write {path}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Serialising the constants TOML failed.
    #[error("cannot serialise the constants: {0}")]
    Toml(#[from] toml::ser::Error),
}
