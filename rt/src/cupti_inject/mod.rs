//! CUDA injection: with `CUDA_INJECTION64_PATH` naming `libpowerperf_rt_cuda.so`, the CUDA
//! driver loads the library during `cuInit` and calls its exported
//! `int InitializeInjection(void)` (CUPTI docs, "CUPTI Injection"; CUPTI samples
//! `cupti_trace_injection`, `profiling_injection`). With `POWERPERF_RUN_DIR` set,
//! [`InitializeInjection`] records, with CUPTI, into `$POWERPERF_RUN_DIR/gpu_activity/<pid>.bin`
//! (format: [`crate::cupti`], `rt/README.md`):
//!
//! * Activity API (CUPTI docs, "CUPTI Activity API"): the kinds `CONCURRENT_KERNEL`,
//!   `MEMCPY`, `MEMCPY2` (peer), `MEMSET`, `SYNCHRONIZATION`, `MEMORY2` (allocations and
//!   releases) and `DEVICE` (`POWERPERF_CUPTI_KINDS` selects others), delivered in 8 MiB
//!   buffers this library hands to CUPTI
//!   (`cuptiActivityRegisterCallbacks`); each completed buffer's records are written as
//!   they are (names interned), with the count of records CUPTI dropped
//!   (`cuptiActivityGetNumDroppedRecords`) and a clock pair.
//! * Callback API (CUPTI docs, "CUPTI Callback API"): one subscriber (`cuptiSubscribe`) on
//!   the runtime and driver API domains, enabled (`cuptiEnableCallback`) for launches,
//!   copies, memsets, synchronisations, allocations and frees (`POWERPERF_CUPTI_API`:
//!   [`ENV_API`]). A driver call inside a runtime call of the same thread (the runtime's
//!   own `cuLaunchKernel` under `cudaLaunchKernel`, same correlation id) is not recorded. At API entry the callback stores
//!   CLOCK_MONOTONIC in the call's `correlationData`; at exit it appends one 40-byte record
//!   (entry, exit, correlation id, gettid, cbid, domain, kernel name id) to a per-thread
//!   buffer: no allocation and no shared lock on this path (the buffer's own mutex is
//!   contended only by the exit handler).
//! * Clocks: pairs (`cuptiGetTimestamp`, CLOCK_MONOTONIC) at initialisation, at every
//!   completed buffer and at exit, each the tightest of 5 tries.
//! * Exit (`atexit`, registered during `cuInit`, so it runs before the CUDA runtime's own
//!   teardown): `cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED)`, every thread's API
//!   buffer, device properties from the driver if CUPTI gave no `DEVICE` record, a last
//!   clock pair and the trailer.
//!
//! CUPTI is loaded at run time (`dlopen`): `POWERPERF_CUPTI_LIB`, else `libcupti.so.13` /
//! `libcupti.so` on the loader's path, else next to the loaded `libcudart` (pip wheels:
//! also `../../cuda_cupti/lib`), else `$CUDA_HOME`, `$CUDA_PATH`, `/usr/local/cuda` under
//! `extras/CUPTI/lib64`, `targets/x86_64-linux/lib`, `targets/sbsa-linux/lib`, `lib64`.
//! If none loads, one line goes to stderr and the program runs unrecorded.
//!
//! Without `POWERPERF_RUN_DIR` (unset or empty) the entry point returns 1 and does
//! nothing: CUPTI is not loaded and no callback is installed.

use std::ffi::c_int;
use std::path::PathBuf;

use crate::cupti::kind;
use crate::runtime::ENV_RUN_DIR;

mod activity;
mod callbacks;
mod init;
mod library;
mod output;
#[path = "../cupti_pcsamp.rs"]
mod pcsamp;

pub use pcsamp::{ENV_PC_MODE, ENV_PC_PERIOD, ENV_PC_SAMPLING, PC_BUFFER_PCS};

/// Environment variable: which API calls are recorded: `default` (launches, copies,
/// memsets, synchronisations, allocations and frees of the runtime and the driver API;
/// a driver call made inside a runtime call on the same thread is not recorded),
/// `runtime` (the same, runtime API only: cheaper, but kernels that libraries launch with
/// the driver API directly have no API record), `all` (every runtime and driver API call,
/// nested ones too), `activity` (the functions of `default`, recorded by CUPTI itself as
/// `RUNTIME` and `DRIVER` activity records instead of through the Callback API; no kernel
/// name on the call, the kernel record has it) or `none`.
pub const ENV_API: &str = "POWERPERF_CUPTI_API";
/// Environment variable: path of the CUPTI library to load.
pub const ENV_CUPTI_LIB: &str = "POWERPERF_CUPTI_LIB";
/// Environment variable: `1` asks CUPTI for kernel timestamps from the GPU's Hardware
/// Event System (`cuptiActivityEnableHWTrace`; CUPTI says where it is supported, the run's
/// notes record its answer).
pub const ENV_HW_TRACE: &str = "POWERPERF_CUPTI_HW_TRACE";
/// Environment variable: CUPTI's periodic flush in ms (`cuptiActivityFlushPeriod`;
/// default 1000, 0 off): how stale the file may be when the process is killed.
pub const ENV_FLUSH_MS: &str = "POWERPERF_CUPTI_FLUSH_MS";

/// Bytes of each activity buffer handed to CUPTI (the CUPTI samples use 8 MiB).
pub const ACTIVITY_BUFFER_BYTES: usize = 8 << 20;
/// API records a thread buffers before it writes them.
pub const API_BUFFER_RECORDS: usize = 8192;

/// Environment variable: the activity kinds recorded, a comma-separated list of
/// [`KIND_NAMES`] (default: all but `kernel_serial`), or `none`.
pub const ENV_KINDS: &str = "POWERPERF_CUPTI_KINDS";

/// Names accepted in `POWERPERF_CUPTI_KINDS` and the CUPTI activity kinds they enable.
/// `kernel` is `CONCURRENT_KERNEL` (kernels run as the program launches them);
/// `kernel_serial` is `KERNEL`, which serialises all kernels (CUPTI docs) and is off by
/// default.
pub const KIND_NAMES: [(&str, &[u32]); 7] = [
    ("device", &[kind::DEVICE]),
    ("kernel", &[kind::CONCURRENT_KERNEL]),
    ("kernel_serial", &[kind::KERNEL]),
    ("memcpy", &[kind::MEMCPY, kind::MEMCPY2]),
    ("memset", &[kind::MEMSET]),
    ("sync", &[kind::SYNCHRONIZATION]),
    ("memory", &[kind::MEMORY2]),
];

/// The activity kinds to enable for a `POWERPERF_CUPTI_KINDS` value (`None`: unset), and
/// the names not understood.
pub fn kinds_from(value: Option<&str>) -> (Vec<u32>, Vec<String>) {
    let names: Vec<&str> = match value.map(str::trim) {
        None | Some("") => vec!["device", "kernel", "memcpy", "memset", "sync", "memory"],
        Some("none") => vec![],
        Some(v) => v
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .collect(),
    };
    let mut kinds = Vec::new();
    let mut unknown = Vec::new();
    for n in names {
        match KIND_NAMES.iter().find(|(k, _)| *k == n) {
            Some((_, ks)) => kinds.extend_from_slice(ks),
            None => unknown.push(n.to_string()),
        }
    }
    (kinds, unknown)
}

const CUPTI_SUCCESS: u32 = 0;
/// `POWERPERF_CUPTI_API=activity`.
const MODE_ACTIVITY: u32 = 4;
/// `CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM` (`cupti_activity.h`): gettid on Linux.
const CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM: u32 = 1;
const CUPTI_API_ENTER: u32 = 0;
const CUPTI_ACTIVITY_FLAG_FLUSH_FORCED: u32 = 1;

/// API calls recorded by default (names as
/// [`fmt::api_function_name`](crate::cupti::api_function_name) gives them): launches,
/// copies, memsets, host synchronisations, allocations and frees.
pub fn default_selection(name: &str) -> bool {
    const PREFIXES: &[&str] = &[
        "cudaLaunch",
        "cuLaunch",
        "cudaGraphLaunch",
        "cuGraphLaunch",
        "cudaMemcpy",
        "cuMemcpy",
        "cudaMemset",
        "cuMemset",
        "cudaDeviceSynchronize",
        "cudaThreadSynchronize",
        "cudaStreamSynchronize",
        "cudaEventSynchronize",
        "cuCtxSynchronize",
        "cuStreamSynchronize",
        "cuEventSynchronize",
        "cudaMalloc",
        "cudaFree",
        "cudaHostAlloc",
        "cuMemAlloc",
        "cuMemFree",
        "cuMemHostAlloc",
    ];
    PREFIXES.iter().any(|p| name.starts_with(p))
}

/// The CUDA injection entry point: the CUDA driver calls it during `cuInit` when
/// `CUDA_INJECTION64_PATH` names this library. With `POWERPERF_RUN_DIR` set it starts
/// recording (module docs); otherwise it does nothing. Returns 1 in both cases; a failure
/// to set up CUPTI is one line on stderr and the program runs unrecorded.
#[no_mangle]
pub extern "C" fn InitializeInjection() -> c_int {
    let _ = std::panic::catch_unwind(|| {
        let Some(dir) = std::env::var_os(ENV_RUN_DIR).filter(|d| !d.is_empty()) else {
            return;
        };
        if let Err(e) = init::init(PathBuf::from(dir)) {
            eprintln!("powerperf-rt: CUDA activity is not recorded: {e}");
        }
    });
    1
}

#[cfg(test)]
mod tests;
