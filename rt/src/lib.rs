//! powerperf-rt: region markers for programs measured by powerperf.
//!
//! A program marks regions (C: `include/powerperf.h`, Fortran: `fortran/powerperf.f90`,
//! Python: `python/powerperf_rt.py`, Rust: this crate). With `POWERPERF_RUN_DIR` set (by
//! `powerperf collect` and `apply`) every begin and end is recorded with its
//! CLOCK_MONOTONIC time in nanoseconds and OS thread id, buffered per thread, and written to
//! `$POWERPERF_RUN_DIR/region_events/<pid>.bin` (binary, v2; `powerperf collect` turns it
//! into the text `<pid>.tsv`, v1, after the command exits; formats: `rt/README.md`, reader:
//! [`events`]). Without it every call is a no-op that costs one atomic load.
//!
//! With the `cuda` feature the crate also holds the CUDA injection
//! (`cupti_inject::InitializeInjection`, built into `libpowerperf_rt_cuda.so` by `rt/cuda`)
//! and the reader of the GPU activity it records (`cupti`).
//!
//! Regions nest per thread, like GPTL timers: `outer/inner` is a different path than
//! `inner` alone, and the same name may recurse.
//!
//! ```
//! let _outer = powerperf_rt::region("solve");
//! for _ in 0..3 {
//!     let _g = powerperf_rt::region("step"); // recorded as path solve/step
//! }
//! // Handles skip the name lookup on the hot path.
//! let h = powerperf_rt::Handle::new("kernel");
//! h.begin().unwrap();
//! h.end().unwrap();
//! ```

#![deny(unsafe_op_in_unsafe_fn)]

pub mod codes;
pub mod counters;
pub mod ctl;
#[cfg(feature = "cuda")]
pub mod cupti;
#[cfg(all(feature = "cuda", target_os = "linux"))]
pub mod cupti_inject;
pub mod events;
pub mod ffi;
pub mod nvtx;
pub mod nvtx_emit;
mod runtime;

pub use ctl::ENV_CTL_SOCKET;
pub use ffi::PpHandle;
pub use runtime::{now_ns, BIN_MAGIC, BUFFER_EVENTS, ENV_RUN_DIR, FILE_MAGIC};

use std::fmt;

/// Misuse of the region API. The event is recorded anyway (the reader reports it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// `end` of a region that is not open on this thread.
    NotOpen,
    /// `end` of a region that is open but not the innermost one; the regions opened inside
    /// it are abandoned.
    Nesting,
    /// A handle this process did not create.
    InvalidHandle,
    /// The region name table is full.
    TooManyRegions,
}

impl Error {
    /// The C return code (`PP_E*`, a negative errno).
    pub fn code(self) -> i32 {
        match self {
            Error::NotOpen => codes::PP_ENOTOPEN,
            Error::Nesting => codes::PP_ENEST,
            Error::InvalidHandle => codes::PP_EINVAL,
            Error::TooManyRegions => codes::PP_ENOSPC,
        }
    }

    fn from_code(rc: i32) -> Result<(), Error> {
        match rc {
            codes::PP_OK => Ok(()),
            codes::PP_ENOTOPEN => Err(Error::NotOpen),
            codes::PP_ENEST => Err(Error::Nesting),
            codes::PP_ENOSPC => Err(Error::TooManyRegions),
            _ => Err(Error::InvalidHandle),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Error::NotOpen => "region end without a begin on this thread",
            Error::Nesting => "region end does not match the innermost open region",
            Error::InvalidHandle => "region handle was not created by this process",
            Error::TooManyRegions => "too many region names",
        })
    }
}

impl std::error::Error for Error {}

/// Whether this process records regions: `POWERPERF_RUN_DIR` is set and its events file
/// could be created. Decided at the first call and cached.
pub fn enabled() -> bool {
    runtime::enabled()
}

/// A region name resolved once; begin and end by handle skip the name lookup.
/// Valid on every thread. `Handle::default()` is the no-op handle.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Handle(u32);

impl Handle {
    /// Resolve `name` (registered on first use). The no-op handle when the runtime is off
    /// or the name table is full.
    pub fn new(name: &str) -> Handle {
        Handle(nvtx_emit::handle_of(name.as_bytes()).unwrap_or(0))
    }

    /// Begin this region on the calling thread.
    ///
    /// # Errors
    /// [`Error::InvalidHandle`] for a handle from another process.
    #[inline]
    pub fn begin(self) -> Result<(), Error> {
        let rc = runtime::begin_id(self.0);
        nvtx_emit::begin_handle(self.0);
        Error::from_code(rc)
    }

    /// End this region on the calling thread.
    ///
    /// # Errors
    /// [`Error::NotOpen`], [`Error::Nesting`] on misuse (the end is recorded anyway).
    #[inline]
    pub fn end(self) -> Result<(), Error> {
        let rc = runtime::end_id(self.0);
        nvtx_emit::end_handle(self.0);
        Error::from_code(rc)
    }

    /// Begin this region and return a guard that ends it when dropped.
    #[inline]
    pub fn enter(self) -> RegionGuard {
        let _ = self.begin();
        RegionGuard {
            id: self.0,
            nvtx_name: None,
        }
    }

    /// The C handle (`pp_handle_t`) for this region.
    pub fn raw(self) -> PpHandle {
        self.0 as PpHandle
    }
}

/// Ends its region when dropped. Returned by [`region`] and [`Handle::enter`].
#[must_use = "the region ends when the guard is dropped"]
#[derive(Debug)]
pub struct RegionGuard {
    id: u32,
    /// The name, for the NVTX pop of a guard from [`region`] (its id is 0 while recording
    /// is off).
    nvtx_name: Option<Box<[u8]>>,
}

impl Drop for RegionGuard {
    #[inline]
    fn drop(&mut self) {
        let _ = runtime::end_id(self.id);
        match &self.nvtx_name {
            Some(name) => nvtx_emit::end_bytes(name),
            None => nvtx_emit::end_handle(self.id),
        }
    }
}

/// Begin region `name` on the calling thread; the guard ends it when dropped.
///
/// The name is looked up in a per-thread table (one hash of `name`); use a [`Handle`] in
/// the hottest loops.
#[inline]
pub fn region(name: &str) -> RegionGuard {
    let id = runtime::id_of(name.as_bytes()).unwrap_or(0);
    let _ = runtime::begin_id(id);
    let nvtx_name = nvtx_emit::on().then(|| {
        nvtx_emit::begin_bytes(name.as_bytes());
        name.as_bytes().into()
    });
    RegionGuard { id, nvtx_name }
}

/// Begin region `name` on the calling thread.
///
/// # Errors
/// [`Error::TooManyRegions`] when the name table is full.
pub fn begin(name: &str) -> Result<(), Error> {
    let id = runtime::id_of(name.as_bytes()).map_err(|e| Error::from_code(e).unwrap_err())?;
    let rc = runtime::begin_id(id);
    nvtx_emit::begin_bytes(name.as_bytes());
    Error::from_code(rc)
}

/// End region `name` on the calling thread.
///
/// # Errors
/// [`Error::NotOpen`], [`Error::Nesting`] on misuse (the end is recorded anyway).
pub fn end(name: &str) -> Result<(), Error> {
    let id = runtime::id_of(name.as_bytes()).map_err(|e| Error::from_code(e).unwrap_err())?;
    let rc = runtime::end_id(id);
    nvtx_emit::end_bytes(name.as_bytes());
    Error::from_code(rc)
}

/// Write every thread's buffered events to the events file now (they are also written when
/// a buffer holds [`BUFFER_EVENTS`] events, at thread exit and at process exit).
pub fn flush() {
    runtime::flush_all();
}
