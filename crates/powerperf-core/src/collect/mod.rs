//! Collection: run a command, count perf_event events on it and its children, read RAPL
//! energy, sample both every interval into a timeline, and write a run directory.
//!
//! Sources sit behind small types: [`powerperf_node::perf_event`] (CPU counters),
//! [`powerperf_node::rapl`] (energy), [`sysinfo`] (host facts and knobs). Every sysfs reader takes a root directory.

pub mod attribution;
pub mod devices;
#[cfg(target_os = "linux")]
pub mod energy;
pub mod gpm;
pub mod gpu_activity;
pub mod gpu_pcsamp;
#[cfg(target_os = "linux")]
pub mod launcher;
#[cfg(target_os = "linux")]
pub mod leader_sampling;
pub mod nvml;
mod options;
#[cfg(all(target_os = "linux", feature = "papi"))]
pub mod papi;
#[cfg(target_os = "linux")]
pub mod pc_sampler;
pub mod pc_samples;
mod ranks;
mod rt_lib;
#[cfg(target_os = "linux")]
mod session;
pub mod sysinfo;

pub use options::{
    check_interval, papi_not_built, CollectConfig, CounterBackend, Mode, NvmlMode, PcTarget,
    TimelineSampler, MIN_INTERVAL,
};
pub use ranks::{expand_output, global_rank, local_rank};
pub use rt_lib::{rt_cuda_library, rt_library};
#[cfg(target_os = "linux")]
pub use session::collect_run;

/// What a collection produced.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub meta: powerperf_format::run::RunMeta,
    /// The status a shell would report for the command: exit code, or 128 + signal.
    pub shell_status: i32,
}
