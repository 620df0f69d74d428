//! GPU activity recorded by the CUDA injection (`libpowerperf_rt_cuda.so`,
//! [`InitializeInjection`](crate::cupti_inject)): the file format of
//! `$POWERPERF_RUN_DIR/gpu_activity/<pid>.bin` and its reader.
//!
//! The reader is pure Rust: it needs no CUDA at run time. It uses the struct layouts of the
//! CUPTI bindings in `cudarc` (`cudarc::cupti::sys`, generated from the CUDA 13.4 headers)
//! to find the fields of the raw activity records the injection copied out of CUPTI's
//! buffers. CUPTI never changes a published record struct: a new field gives a new struct
//! version (`CUpti_ActivityKernel9`, `...10`, ... `...13`) that keeps the old fields at
//! their offsets and appends the new ones (CUPTI docs, "CUPTI Activity API"; checked for
//! every field read here by the test `versions_share_the_fields_read`). CUPTI emits the
//! newest version its release knows, so a record's kind and size name its version; a size
//! this reader does not know is an error naming the kind, the size and the CUPTI version.
//!
//! ```no_run
//! # #[cfg(feature = "cuda")] {
//! let f = powerperf_rt::cupti::read_file("run1/gpu_activity/4242.bin".as_ref())?;
//! for a in &f.activities {
//!     let (t0, t1) = (f.to_monotonic(a.start), f.to_monotonic(a.end));
//!     println!("{:?} {:?} {} ns", a.kind, a.name, t1 - t0);
//! }
//! # }
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! Format (all integers in the writer's native byte order, little-endian on x86-64 and
//! aarch64): the 8 bytes [`FILE_MAGIC`], then frames `tag: u32, len: u32, payload[len]`
//! (no padding). Frame tags and payloads are listed in [`tag`] and in `rt/README.md`.

use std::collections::HashMap;
use std::io;
use std::mem::{offset_of, size_of};
use std::path::Path;

use cudarc::cupti::sys;

/// First 8 bytes of every `gpu_activity/<pid>.bin`.
pub const FILE_MAGIC: [u8; 8] = *b"PPCUPTI\0";

/// Version of the frame format (the `HEADER` frame's first field).
pub const FORMAT_VERSION: u32 = 1;

/// CUDA version of the CUPTI headers the bindings were generated from
/// (`cudarc` feature `cuda-13040`): the record versions this reader knows.
pub const BINDINGS_CUDA_VERSION: u32 = 13040;

/// Bytes of one `API` record (see [`tag::API`]).
pub const API_RECORD_BYTES: usize = 40;

/// Frame tags. Payloads (`u32`/`u64` native-endian, strings UTF-8 without NUL):
pub mod tag {
    /// `format_version u32, pid u32, cupti_api_version u32 (cuptiGetVersion),
    /// cuda_driver_version u32 (cuDriverGetVersion, 0 unknown), bindings_cuda_version u32,
    /// api_mode u32 (0 none, 1 default selection, 2 all runtime and driver APIs, 3 default
    /// selection of the runtime API only)`.
    /// First frame of the file.
    pub const HEADER: u32 = 1;
    /// `id u32, bytes`: string `id` (> 0) of the file's string table (kernel, device and
    /// memory-pool names, launch symbol names). Written before the first frame that uses it.
    pub const STRING: u32 = 2;
    /// One raw CUPTI activity record as `cuptiActivityGetNextRecord` returned it (the
    /// record's size is the frame length), except that its pointer fields are rewritten:
    /// a name (`const char *name` of kernels, devices and memory records, `source` of
    /// memory records) holds the `u64` id of a `STRING` frame (0: NULL), every other pointer
    /// (`reserved0`, `pAccessPolicyWindow`) is 0.
    pub const ACTIVITY: u32 = 3;
    /// `domain u32 (1 driver, 2 runtime: CUpti_CallbackDomain), cbid u32, bytes`: the name
    /// CUPTI gives the callback id (`cuptiGetCallbackName`, e.g. `cudaLaunchKernel_v7000`).
    pub const API_FUNC: u32 = 4;
    /// `n` API records of [`API_RECORD_BYTES`](super::API_RECORD_BYTES) bytes each:
    /// `enter_ns u64, exit_ns u64` (CLOCK_MONOTONIC), `correlation_id u32, tid u32`
    /// (gettid), `cbid u32, domain u32, symbol u32` (string id of the launched kernel's
    /// name, 0 none), `reserved u32`.
    pub const API: u32 = 5;
    /// `cupti_ns u64, monotonic_ns u64, half_width_ns u64`: `cuptiGetTimestamp` and the
    /// midpoint of the two CLOCK_MONOTONIC reads around it (the tightest of several tries;
    /// `half_width_ns` is half the distance between those reads).
    pub const CLOCK: u32 = 6;
    /// `context_id u32, stream_id u32, dropped u64`: records CUPTI dropped in a completed
    /// buffer (`cuptiActivityGetNumDroppedRecords`), written when non-zero.
    pub const DROPPED: u32 = 7;
    /// UTF-8 text: something the injection could not do (an activity kind CUPTI refused,
    /// ...). Also printed once to stderr.
    pub const NOTE: u32 = 8;
    /// `dropped u64, activity_records u64, api_records u64, api_records_lost u64`: last
    /// frame, written at process exit. Missing: the process did not exit normally.
    pub const TRAILER: u32 = 9;
    /// Device properties read from the driver (`cuDeviceGetAttribute`) at exit when CUPTI
    /// gave no `DEVICE` activity record: `id u32, 14 x u32 values` (see the reader),
    /// `global_memory_bytes u64`, then the name bytes.
    pub const DEVPROPS: u32 = 10;
}

/// `CUpti_CallbackDomain` values in `API` records.
pub const DOMAIN_DRIVER: u32 = sys::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_DRIVER_API as u32;
/// See [`DOMAIN_DRIVER`].
pub const DOMAIN_RUNTIME: u32 = sys::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_RUNTIME_API as u32;

/// What a GPU activity record describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ActivityKind {
    /// A kernel execution (`CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL` or `KERNEL`).
    Kernel,
    /// A memory copy (`MEMCPY`; peer-to-peer `MEMCPY2` has `copy_kind` `"P2P"`).
    Memcpy,
    /// A memset (`MEMSET`).
    Memset,
    /// A synchronisation the host waited on (`SYNCHRONIZATION`; `sync_kind` says which).
    Sync,
    /// A memory allocation (`MEMORY2`, operation `ALLOCATION`); `start == end`.
    Alloc,
    /// A memory release (`MEMORY2`, operation `RELEASE`); `start == end`.
    Free,
}

/// One GPU activity. Times are CUPTI timestamps in ns (map them with
/// [`CuptiFile::to_monotonic`]); fields a kind does not have are 0 / `None`.
#[derive(Debug, Clone, PartialEq)]
pub struct Activity {
    pub kind: ActivityKind,
    /// Start, CUPTI ns (`start`; `timestamp` for `Alloc`/`Free`).
    pub start: u64,
    /// End, CUPTI ns (`end`; `timestamp` for `Alloc`/`Free`).
    pub end: u64,
    pub device: u32,
    pub context: u32,
    /// CUPTI stream id (for `Sync` of a whole context CUPTI gives `u32::MAX`).
    pub stream: u32,
    /// Correlation id: equal to the `correlation_id` of the runtime or driver API call that
    /// launched it (for copies, of the driver call: see `runtime_correlation_id`).
    pub correlation_id: u32,
    /// Copies: `runtimeCorrelationId`, the runtime API call's correlation id (0 when CUPTI
    /// gives none); 0 for the other kinds.
    pub runtime_correlation_id: u32,
    /// Kernel name as CUPTI gives it (mangled); memory-pool name for `Alloc`/`Free`.
    pub name: Option<String>,
    /// Bytes copied, set or (de)allocated.
    pub bytes: u64,
    /// Copies: `"H2D"`, `"D2H"`, `"H2A"`, `"A2H"`, `"A2A"`, `"A2D"`, `"D2A"`, `"D2D"`,
    /// `"H2H"`, `"P2P"`, `"unknown"` (`CUPTI_ACTIVITY_MEMCPY_KIND_*`).
    pub copy_kind: Option<&'static str>,
    /// Copies: kind of the source / destination memory (`CUPTI_ACTIVITY_MEMORY_KIND_*`:
    /// `"pageable"`, `"pinned"`, `"device"`, `"array"`, `"managed"`, `"device_static"`,
    /// `"managed_static"`, `"unknown"`).
    pub src_kind: Option<&'static str>,
    pub dst_kind: Option<&'static str>,
    /// Memsets, allocations, releases: the memory kind (same names as `src_kind`).
    pub memory_kind: Option<&'static str>,
    /// Allocations and releases: the device address.
    pub address: u64,
    /// Kernels: grid and block dimensions (x, y, z).
    pub grid: [i32; 3],
    pub block: [i32; 3],
    /// Kernels: registers per thread, static and dynamic shared memory per block (bytes).
    pub regs_per_thread: u32,
    pub static_smem: u32,
    pub dynamic_smem: u32,
    /// Syncs: `"EventSynchronize"`, `"StreamWaitEvent"`, `"StreamSynchronize"`,
    /// `"ContextSynchronize"`, `"unknown"` (`CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_*`).
    pub sync_kind: Option<&'static str>,
}

/// Properties of one device (`CUPTI_ACTIVITY_KIND_DEVICE`, `CUpti_ActivityDevice5/6`, or
/// the driver's `cuDeviceGetAttribute` when CUPTI gave none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceProps {
    pub id: u32,
    pub name: String,
    pub cc_major: u32,
    pub cc_minor: u32,
    /// Streaming multiprocessors.
    pub sm_count: u32,
    pub max_threads_per_block: u32,
    /// `maxWarpsPerMultiprocessor * numThreadsPerWarp`.
    pub max_threads_per_sm: u32,
    pub max_blocks_per_sm: u32,
    pub max_warps_per_sm: u32,
    /// 32-bit registers per SM and per block.
    pub regs_per_sm: u32,
    pub max_regs_per_block: u32,
    /// Shared memory per SM and per block, bytes (per block: the default limit, without
    /// the opt-in of `cudaFuncSetAttribute`).
    pub smem_per_sm: u64,
    pub smem_per_block: u64,
    pub warp_size: u32,
    /// Device memory, bytes.
    pub global_memory_bytes: u64,
    /// L2 cache, bytes.
    pub l2_cache_bytes: u32,
    /// SM clock, kHz (CUPTI `coreClockRate`: the maximum clock, not the current one).
    pub core_clock_khz: u32,
}

/// One runtime or driver API call of the program, from the CUPTI Callback API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiCall {
    /// Same id as the activities it launched ([`Activity::correlation_id`]).
    pub correlation_id: u32,
    /// The function: CUPTI's callback name without the runtime's version suffix
    /// (`cudaLaunchKernel`, `cudaMemcpyAsync`, `cuLaunchKernel`, `cuMemcpyHtoD_v2`: the
    /// driver's `_v2` is part of the exported symbol and is kept).
    pub name: String,
    /// `"runtime"` or `"driver"`.
    pub domain: &'static str,
    /// CUPTI callback id in that domain (`CUpti_runtime_api_trace_cbid` /
    /// `CUpti_driver_api_trace_cbid`).
    pub cbid: u32,
    /// Launches: the kernel's name as the callback gives it (`symbolName`).
    pub kernel: Option<String>,
    /// Linux thread id (gettid) of the calling thread.
    pub tid: u32,
    /// Entry and exit, CLOCK_MONOTONIC ns.
    pub enter_ns: u64,
    pub exit_ns: u64,
}

/// A decoded `gpu_activity/<pid>.bin`.
#[derive(Debug, Clone, Default)]
pub struct CuptiFile {
    pub pid: u32,
    /// `cuptiGetVersion` (the CUPTI API version, e.g. 130001 for CUDA 13.0 update 1).
    pub cupti_version: u32,
    /// `cuDriverGetVersion` (e.g. 13000), 0 when unknown.
    pub cuda_driver_version: u32,
    /// [`BINDINGS_CUDA_VERSION`] of the writer.
    pub bindings_cuda_version: u32,
    pub devices: Vec<DeviceProps>,
    /// (CUPTI ns, CLOCK_MONOTONIC ns) pairs, in file order.
    pub clock_pairs: Vec<(u64, u64)>,
    pub activities: Vec<Activity>,
    pub api_calls: Vec<ApiCall>,
    /// Activity records CUPTI dropped (buffers full): the activities are incomplete.
    pub dropped_records: u64,
    /// API records the injection lost (a thread called CUDA while exiting).
    pub api_records_lost: u64,
    /// Messages of the injection (`NOTE` frames): what it could not record.
    pub notes: Vec<String>,
    /// The file has no trailer (the process did not exit normally) or ends inside a frame:
    /// what is here is a correct prefix of the recording.
    pub truncated: bool,
}

impl CuptiFile {
    /// Map a CUPTI timestamp (ns) onto CLOCK_MONOTONIC (ns): the least-squares line through
    /// [`clock_pairs`](Self::clock_pairs) (offset and drift); with one pair, or pairs less
    /// than 1 ms apart, the offset of their mean at slope 1. Returns `cupti_ns` unchanged
    /// when the file has no pair.
    pub fn to_monotonic(&self, cupti_ns: u64) -> u64 {
        let p = &self.clock_pairs;
        let Some(&(x0, y0)) = p.first() else {
            return cupti_ns;
        };
        // Centre on the first pair: the differences fit f64 exactly for days of ns.
        let d = |a: u64, b: u64| a.wrapping_sub(b) as i64 as f64;
        let n = p.len() as f64;
        let mx = p.iter().map(|&(x, _)| d(x, x0)).sum::<f64>() / n;
        let my = p.iter().map(|&(_, y)| d(y, y0)).sum::<f64>() / n;
        let sxx: f64 = p.iter().map(|&(x, _)| (d(x, x0) - mx).powi(2)).sum();
        let sxy: f64 = p
            .iter()
            .map(|&(x, y)| (d(x, x0) - mx) * (d(y, y0) - my))
            .sum();
        let spread = p.iter().map(|&(x, _)| x).max().unwrap_or(x0)
            - p.iter().map(|&(x, _)| x).min().unwrap_or(x0);
        let slope = if p.len() >= 2 && spread >= 1_000_000 && sxx > 0.0 {
            sxy / sxx
        } else {
            1.0
        };
        let y = my + slope * (d(cupti_ns, x0) - mx);
        (y0 as i128 + y.round() as i128).clamp(0, u64::MAX as i128) as u64
    }
}

/// Read and decode `path` (a `gpu_activity/<pid>.bin`).
///
/// # Errors
/// I/O errors of reading the file; `InvalidData` when it is not such a file (magic, or the
/// first frame is not a header), when a frame is malformed, or when an activity record has
/// a layout this reader does not know (the message names the CUPTI kind, the record's size
/// and the CUPTI version). A file cut inside a frame is not an error: see
/// [`CuptiFile::truncated`].
pub fn read_file(path: &Path) -> io::Result<CuptiFile> {
    let bytes = std::fs::read(path)?;
    decode(&bytes).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

fn bad(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

#[inline]
pub(crate) fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_ne_bytes(b[off..off + 4].try_into().unwrap())
}
#[inline]
pub(crate) fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_ne_bytes(b[off..off + 8].try_into().unwrap())
}
#[inline]
fn i32_at(b: &[u8], off: usize) -> i32 {
    u32_at(b, off) as i32
}
#[inline]
fn u16_at(b: &[u8], off: usize) -> u16 {
    u16::from_ne_bytes(b[off..off + 2].try_into().unwrap())
}

/// CUPTI activity kinds this crate records (`CUpti_ActivityKind`).
pub(crate) mod kind {
    use cudarc::cupti::sys::CUpti_ActivityKind as K;
    pub const MEMCPY: u32 = K::CUPTI_ACTIVITY_KIND_MEMCPY as u32;
    pub const MEMSET: u32 = K::CUPTI_ACTIVITY_KIND_MEMSET as u32;
    pub const KERNEL: u32 = K::CUPTI_ACTIVITY_KIND_KERNEL as u32;
    pub const DEVICE: u32 = K::CUPTI_ACTIVITY_KIND_DEVICE as u32;
    pub const CONCURRENT_KERNEL: u32 = K::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL as u32;
    pub const MEMCPY2: u32 = K::CUPTI_ACTIVITY_KIND_MEMCPY2 as u32;
    pub const SYNCHRONIZATION: u32 = K::CUPTI_ACTIVITY_KIND_SYNCHRONIZATION as u32;
    pub const MEMORY2: u32 = K::CUPTI_ACTIVITY_KIND_MEMORY2 as u32;
}

/// Name of a `CUpti_ActivityKind` value, for messages.
pub fn activity_kind_name(k: u32) -> &'static str {
    match k {
        kind::MEMCPY => "MEMCPY",
        kind::MEMSET => "MEMSET",
        kind::KERNEL => "KERNEL",
        kind::DEVICE => "DEVICE",
        kind::CONCURRENT_KERNEL => "CONCURRENT_KERNEL",
        kind::MEMCPY2 => "MEMCPY2",
        kind::SYNCHRONIZATION => "SYNCHRONIZATION",
        kind::MEMORY2 => "MEMORY2",
        _ => "other",
    }
}

/// Record layouts: the struct versions (name, size in bytes) CUPTI may emit for a kind,
/// and the fields read, at offsets shared by all those versions.
pub(crate) mod layout {
    use super::*;

    /// (struct name, size) of each known version of a kind's record.
    pub type Versions = &'static [(&'static str, usize)];

    macro_rules! versions {
        ($($t:ident),* $(,)?) => {
            &[$((stringify!($t), size_of::<sys::$t>())),*]
        };
    }

    pub const KERNEL: Versions = versions!(
        CUpti_ActivityKernel9,
        CUpti_ActivityKernel10,
        CUpti_ActivityKernel11,
        CUpti_ActivityKernel12,
        CUpti_ActivityKernel13,
    );
    pub const MEMCPY: Versions = versions!(
        CUpti_ActivityMemcpy5,
        CUpti_ActivityMemcpy6,
        CUpti_ActivityMemcpy7
    );
    pub const MEMCPY2: Versions = versions!(CUpti_ActivityMemcpyPtoP4);
    pub const MEMSET: Versions = versions!(CUpti_ActivityMemset4, CUpti_ActivityMemset5);
    pub const MEMORY2: Versions = versions!(CUpti_ActivityMemory3, CUpti_ActivityMemory4);
    pub const DEVICE: Versions = versions!(CUpti_ActivityDevice5, CUpti_ActivityDevice6);
    pub const SYNC: Versions = versions!(
        CUpti_ActivitySynchronization,
        CUpti_ActivitySynchronization2
    );

    /// The versions of a kind, `None` for kinds this crate does not record.
    pub fn versions(k: u32) -> Option<Versions> {
        Some(match k {
            kind::KERNEL | kind::CONCURRENT_KERNEL => KERNEL,
            kind::MEMCPY => MEMCPY,
            kind::MEMCPY2 => MEMCPY2,
            kind::MEMSET => MEMSET,
            kind::MEMORY2 => MEMORY2,
            kind::DEVICE => DEVICE,
            kind::SYNCHRONIZATION => SYNC,
            _ => return None,
        })
    }

    /// Pointer fields of a record of kind `k` and `size` bytes: (offset, is a string).
    /// `None`: unknown kind or size.
    pub fn pointers(k: u32, size: usize) -> Option<&'static [(usize, bool)]> {
        let v = versions(k)?;
        let i = v.iter().position(|&(_, s)| s == size)?;
        Some(match k {
            kind::KERNEL | kind::CONCURRENT_KERNEL => &[
                (offset_of!(sys::CUpti_ActivityKernel9, name), true),
                (offset_of!(sys::CUpti_ActivityKernel9, reserved0), false),
                (
                    offset_of!(sys::CUpti_ActivityKernel9, pAccessPolicyWindow),
                    false,
                ),
            ],
            kind::MEMCPY => &[(offset_of!(sys::CUpti_ActivityMemcpy5, reserved0), false)],
            kind::MEMCPY2 => &[(offset_of!(sys::CUpti_ActivityMemcpyPtoP4, reserved0), false)],
            kind::MEMSET => &[(offset_of!(sys::CUpti_ActivityMemset4, reserved0), false)],
            kind::MEMORY2 if i == 0 => &[(offset_of!(sys::CUpti_ActivityMemory3, name), true)],
            kind::MEMORY2 => &[
                (offset_of!(sys::CUpti_ActivityMemory4, name), true),
                (offset_of!(sys::CUpti_ActivityMemory4, source), true),
            ],
            kind::DEVICE => &[(offset_of!(sys::CUpti_ActivityDevice5, name), true)],
            _ => &[],
        })
    }

    pub mod kernel {
        use super::*;
        type S = sys::CUpti_ActivityKernel9;
        pub const REGS: usize = offset_of!(S, registersPerThread);
        pub const START: usize = offset_of!(S, start);
        pub const END: usize = offset_of!(S, end);
        pub const DEVICE: usize = offset_of!(S, deviceId);
        pub const CONTEXT: usize = offset_of!(S, contextId);
        pub const STREAM: usize = offset_of!(S, streamId);
        pub const GRID: usize = offset_of!(S, gridX);
        pub const BLOCK: usize = offset_of!(S, blockX);
        pub const STATIC_SMEM: usize = offset_of!(S, staticSharedMemory);
        pub const DYNAMIC_SMEM: usize = offset_of!(S, dynamicSharedMemory);
        pub const CORRELATION: usize = offset_of!(S, correlationId);
        pub const NAME: usize = offset_of!(S, name);
    }
    pub mod memcpy {
        use super::*;
        type S = sys::CUpti_ActivityMemcpy5;
        pub const COPY_KIND: usize = offset_of!(S, copyKind);
        pub const SRC_KIND: usize = offset_of!(S, srcKind);
        pub const DST_KIND: usize = offset_of!(S, dstKind);
        pub const BYTES: usize = offset_of!(S, bytes);
        pub const START: usize = offset_of!(S, start);
        pub const END: usize = offset_of!(S, end);
        pub const DEVICE: usize = offset_of!(S, deviceId);
        pub const CONTEXT: usize = offset_of!(S, contextId);
        pub const STREAM: usize = offset_of!(S, streamId);
        pub const CORRELATION: usize = offset_of!(S, correlationId);
        pub const RUNTIME_CORRELATION: usize = offset_of!(S, runtimeCorrelationId);
    }
    pub mod p2p {
        use super::*;
        type S = sys::CUpti_ActivityMemcpyPtoP4;
        pub const COPY_KIND: usize = offset_of!(S, copyKind);
        pub const SRC_KIND: usize = offset_of!(S, srcKind);
        pub const DST_KIND: usize = offset_of!(S, dstKind);
        pub const BYTES: usize = offset_of!(S, bytes);
        pub const START: usize = offset_of!(S, start);
        pub const END: usize = offset_of!(S, end);
        pub const DEVICE: usize = offset_of!(S, deviceId);
        pub const CONTEXT: usize = offset_of!(S, contextId);
        pub const STREAM: usize = offset_of!(S, streamId);
        pub const CORRELATION: usize = offset_of!(S, correlationId);
    }
    pub mod memset {
        use super::*;
        type S = sys::CUpti_ActivityMemset4;
        pub const BYTES: usize = offset_of!(S, bytes);
        pub const START: usize = offset_of!(S, start);
        pub const END: usize = offset_of!(S, end);
        pub const DEVICE: usize = offset_of!(S, deviceId);
        pub const CONTEXT: usize = offset_of!(S, contextId);
        pub const STREAM: usize = offset_of!(S, streamId);
        pub const CORRELATION: usize = offset_of!(S, correlationId);
        pub const MEMORY_KIND: usize = offset_of!(S, memoryKind);
    }
    pub mod memory {
        use super::*;
        type S = sys::CUpti_ActivityMemory3;
        pub const OP: usize = offset_of!(S, memoryOperationType);
        pub const MEMORY_KIND: usize = offset_of!(S, memoryKind);
        pub const CORRELATION: usize = offset_of!(S, correlationId);
        pub const ADDRESS: usize = offset_of!(S, address);
        pub const BYTES: usize = offset_of!(S, bytes);
        pub const TIMESTAMP: usize = offset_of!(S, timestamp);
        pub const DEVICE: usize = offset_of!(S, deviceId);
        pub const CONTEXT: usize = offset_of!(S, contextId);
        pub const STREAM: usize = offset_of!(S, streamId);
        pub const NAME: usize = offset_of!(S, name);
    }
    pub mod sync {
        use super::*;
        type S = sys::CUpti_ActivitySynchronization;
        pub const TYPE: usize = offset_of!(S, type_);
        pub const START: usize = offset_of!(S, start);
        pub const END: usize = offset_of!(S, end);
        pub const CORRELATION: usize = offset_of!(S, correlationId);
        pub const CONTEXT: usize = offset_of!(S, contextId);
        pub const STREAM: usize = offset_of!(S, streamId);
    }
    pub mod device {
        use super::*;
        type S = sys::CUpti_ActivityDevice5;
        pub const GLOBAL_MEMORY_SIZE: usize = offset_of!(S, globalMemorySize);
        pub const L2: usize = offset_of!(S, l2CacheSize);
        pub const THREADS_PER_WARP: usize = offset_of!(S, numThreadsPerWarp);
        pub const CORE_CLOCK: usize = offset_of!(S, coreClockRate);
        pub const SMS: usize = offset_of!(S, numMultiprocessors);
        pub const MAX_WARPS_PER_SM: usize = offset_of!(S, maxWarpsPerMultiprocessor);
        pub const MAX_BLOCKS_PER_SM: usize = offset_of!(S, maxBlocksPerMultiprocessor);
        pub const SMEM_PER_SM: usize = offset_of!(S, maxSharedMemoryPerMultiprocessor);
        pub const REGS_PER_SM: usize = offset_of!(S, maxRegistersPerMultiprocessor);
        pub const REGS_PER_BLOCK: usize = offset_of!(S, maxRegistersPerBlock);
        pub const SMEM_PER_BLOCK: usize = offset_of!(S, maxSharedMemoryPerBlock);
        pub const THREADS_PER_BLOCK: usize = offset_of!(S, maxThreadsPerBlock);
        pub const CC_MAJOR: usize = offset_of!(S, computeCapabilityMajor);
        pub const CC_MINOR: usize = offset_of!(S, computeCapabilityMinor);
        pub const ID: usize = offset_of!(S, id);
        pub const NAME: usize = offset_of!(S, name);
    }
}

fn copy_kind_name(v: u8) -> &'static str {
    match v {
        1 => "H2D",
        2 => "D2H",
        3 => "H2A",
        4 => "A2H",
        5 => "A2A",
        6 => "A2D",
        7 => "D2A",
        8 => "D2D",
        9 => "H2H",
        10 => "P2P",
        _ => "unknown",
    }
}

fn memory_kind_name(v: u32) -> &'static str {
    match v {
        1 => "pageable",
        2 => "pinned",
        3 => "device",
        4 => "array",
        5 => "managed",
        6 => "device_static",
        7 => "managed_static",
        _ => "unknown",
    }
}

fn sync_kind_name(v: u32) -> &'static str {
    match v {
        1 => "EventSynchronize",
        2 => "StreamWaitEvent",
        3 => "StreamSynchronize",
        4 => "ContextSynchronize",
        _ => "unknown",
    }
}

/// The function name of a CUPTI callback name: the runtime's `_v<digits>` version suffix
/// (`cudaLaunchKernel_v7000`) is dropped; driver names are the exported symbols and kept.
pub fn api_function_name(domain: u32, cupti_name: &str) -> String {
    if domain == DOMAIN_RUNTIME {
        if let Some(i) = cupti_name.rfind("_v") {
            let tail = &cupti_name[i + 2..];
            if !tail.is_empty() && tail.bytes().all(|b| b.is_ascii_digit()) {
                return cupti_name[..i].to_string();
            }
        }
    }
    cupti_name.to_string()
}

/// An activity with its string ids not yet resolved.
struct Pending {
    a: Activity,
    name_id: u64,
}

/// Decode the bytes of a `gpu_activity/<pid>.bin`.
///
/// # Errors
/// As [`read_file`].
pub fn decode(bytes: &[u8]) -> io::Result<CuptiFile> {
    if bytes.len() < FILE_MAGIC.len() || bytes[..8] != FILE_MAGIC {
        return Err(bad("not a powerperf GPU activity file (no PPCUPTI magic)"));
    }
    let mut f = CuptiFile {
        truncated: true,
        ..CuptiFile::default()
    };
    let mut strings: HashMap<u32, String> = HashMap::new();
    let mut funcs: HashMap<(u32, u32), String> = HashMap::new();
    let mut pending: Vec<Pending> = Vec::new();
    let mut raw_api: Vec<[u8; API_RECORD_BYTES]> = Vec::new();
    let mut devices: Vec<(DeviceProps, u64)> = Vec::new();
    let mut driver_devices: Vec<DeviceProps> = Vec::new();
    let mut pos = 8;
    let mut seen_header = false;
    let mut trailer = false;
    while pos < bytes.len() {
        if bytes.len() - pos < 8 {
            break; // a frame header cut short
        }
        let t = u32_at(bytes, pos);
        let len = u32_at(bytes, pos + 4) as usize;
        if bytes.len() - pos - 8 < len {
            break; // a payload cut short
        }
        let p = &bytes[pos + 8..pos + 8 + len];
        let at = pos;
        pos += 8 + len;
        if !seen_header && t != tag::HEADER {
            return Err(bad(format!(
                "first frame (at byte {at}) is tag {t}, not a header"
            )));
        }
        let short = |need: usize| -> io::Result<()> {
            if len < need {
                Err(bad(format!(
                    "frame tag {t} at byte {at}: {len} bytes, at least {need} expected"
                )))
            } else {
                Ok(())
            }
        };
        match t {
            tag::HEADER => {
                short(24)?;
                let v = u32_at(p, 0);
                if v != FORMAT_VERSION {
                    return Err(bad(format!(
                        "format version {v}; this reader knows {FORMAT_VERSION}"
                    )));
                }
                f.pid = u32_at(p, 4);
                f.cupti_version = u32_at(p, 8);
                f.cuda_driver_version = u32_at(p, 12);
                f.bindings_cuda_version = u32_at(p, 16);
                seen_header = true;
            }
            tag::STRING => {
                short(4)?;
                strings.insert(u32_at(p, 0), String::from_utf8_lossy(&p[4..]).into_owned());
            }
            tag::API_FUNC => {
                short(8)?;
                let name = String::from_utf8_lossy(&p[8..]).into_owned();
                funcs.insert((u32_at(p, 0), u32_at(p, 4)), name);
            }
            tag::API => {
                if !len.is_multiple_of(API_RECORD_BYTES) {
                    return Err(bad(format!(
                        "API frame at byte {at}: {len} bytes, not a multiple of {API_RECORD_BYTES}"
                    )));
                }
                raw_api.extend(
                    p.chunks_exact(API_RECORD_BYTES)
                        .map(|c| <[u8; API_RECORD_BYTES]>::try_from(c).unwrap()),
                );
            }
            tag::CLOCK => {
                short(16)?;
                f.clock_pairs.push((u64_at(p, 0), u64_at(p, 8)));
            }
            tag::DROPPED => {
                short(16)?;
                f.dropped_records += u64_at(p, 8);
            }
            tag::NOTE => f.notes.push(String::from_utf8_lossy(p).into_owned()),
            tag::TRAILER => {
                short(32)?;
                f.api_records_lost = u64_at(p, 24);
                trailer = true;
            }
            tag::DEVPROPS => {
                short(4 + 14 * 4 + 8)?;
                let v = |i: usize| u32_at(p, 4 + 4 * i);
                driver_devices.push(DeviceProps {
                    id: u32_at(p, 0),
                    cc_major: v(0),
                    cc_minor: v(1),
                    sm_count: v(2),
                    max_threads_per_block: v(3),
                    max_threads_per_sm: v(4),
                    max_blocks_per_sm: v(5),
                    max_warps_per_sm: v(4) / v(11).max(1),
                    regs_per_sm: v(6),
                    max_regs_per_block: v(7),
                    smem_per_sm: u64::from(v(8)),
                    smem_per_block: u64::from(v(9)),
                    l2_cache_bytes: v(10),
                    warp_size: v(11),
                    core_clock_khz: v(12),
                    global_memory_bytes: u64_at(p, 4 + 14 * 4),
                    name: String::from_utf8_lossy(&p[4 + 14 * 4 + 8..]).into_owned(),
                });
            }
            tag::ACTIVITY => {
                short(8)?;
                decode_activity(p, f.cupti_version, &mut pending, &mut devices)?;
            }
            _ => {} // unknown frames of a later minor format are skipped
        }
    }
    if !seen_header {
        return Err(bad("file ends before its header frame"));
    }
    f.truncated = !trailer || pos != bytes.len();
    let s = |id: u64| -> Option<String> {
        if id == 0 {
            None
        } else {
            Some(
                strings
                    .get(&(id as u32))
                    .cloned()
                    .unwrap_or_else(|| format!("(string {id})")),
            )
        }
    };
    f.activities = pending
        .into_iter()
        .map(|mut p| {
            p.a.name = s(p.name_id);
            p.a
        })
        .collect();
    f.devices = devices
        .into_iter()
        .map(|(mut d, name)| {
            d.name = s(name).unwrap_or_default();
            d
        })
        .collect();
    if f.devices.is_empty() {
        f.devices = driver_devices;
    }
    f.devices.sort_by_key(|d| d.id);
    f.devices.dedup_by_key(|d| d.id);
    f.api_calls = raw_api
        .iter()
        .map(|r| {
            let (cbid, domain) = (u32_at(r, 24), u32_at(r, 28));
            let name = funcs
                .get(&(domain, cbid))
                .map(|n| api_function_name(domain, n))
                .unwrap_or_else(|| format!("(cbid {cbid})"));
            ApiCall {
                enter_ns: u64_at(r, 0),
                exit_ns: u64_at(r, 8),
                correlation_id: u32_at(r, 16),
                tid: u32_at(r, 20),
                cbid,
                domain: if domain == DOMAIN_DRIVER {
                    "driver"
                } else {
                    "runtime"
                },
                kernel: s(u64::from(u32_at(r, 32))),
                name,
            }
        })
        .collect();
    Ok(f)
}

fn decode_activity(
    p: &[u8],
    cupti_version: u32,
    out: &mut Vec<Pending>,
    devices: &mut Vec<(DeviceProps, u64)>,
) -> io::Result<()> {
    let k = u32_at(p, 0);
    let Some(versions) = layout::versions(k) else {
        return Err(bad(format!(
            "activity record of CUPTI kind {k} ({}, {} bytes): not a kind this reader decodes",
            activity_kind_name(k),
            p.len()
        )));
    };
    let Some(version) = versions.iter().position(|&(_, s)| s == p.len()) else {
        let known: Vec<String> = versions
            .iter()
            .map(|(n, s)| format!("{n} = {s} B"))
            .collect();
        return Err(bad(format!(
            "activity record of CUPTI kind {} ({k}) of {} bytes from CUPTI API version \
             {cupti_version}: not a record version this reader knows ({}); the bindings \
             are those of CUDA {BINDINGS_CUDA_VERSION}: update cudarc",
            activity_kind_name(k),
            p.len(),
            known.join(", ")
        )));
    };
    let blank = Activity {
        kind: ActivityKind::Kernel,
        start: 0,
        end: 0,
        device: 0,
        context: 0,
        stream: 0,
        correlation_id: 0,
        runtime_correlation_id: 0,
        name: None,
        bytes: 0,
        copy_kind: None,
        src_kind: None,
        dst_kind: None,
        memory_kind: None,
        address: 0,
        grid: [0; 3],
        block: [0; 3],
        regs_per_thread: 0,
        static_smem: 0,
        dynamic_smem: 0,
        sync_kind: None,
    };
    let (a, name_id) = match k {
        kind::KERNEL | kind::CONCURRENT_KERNEL => {
            use layout::kernel as o;
            let a = Activity {
                kind: ActivityKind::Kernel,
                start: u64_at(p, o::START),
                end: u64_at(p, o::END),
                device: u32_at(p, o::DEVICE),
                context: u32_at(p, o::CONTEXT),
                stream: u32_at(p, o::STREAM),
                correlation_id: u32_at(p, o::CORRELATION),
                grid: [0, 1, 2].map(|i| i32_at(p, o::GRID + 4 * i)),
                block: [0, 1, 2].map(|i| i32_at(p, o::BLOCK + 4 * i)),
                regs_per_thread: u32::from(u16_at(p, o::REGS)),
                static_smem: u32_at(p, o::STATIC_SMEM),
                dynamic_smem: u32_at(p, o::DYNAMIC_SMEM),
                ..blank
            };
            (a, u64_at(p, o::NAME))
        }
        kind::MEMCPY => {
            use layout::memcpy as o;
            let a = Activity {
                kind: ActivityKind::Memcpy,
                start: u64_at(p, o::START),
                end: u64_at(p, o::END),
                device: u32_at(p, o::DEVICE),
                context: u32_at(p, o::CONTEXT),
                stream: u32_at(p, o::STREAM),
                correlation_id: u32_at(p, o::CORRELATION),
                runtime_correlation_id: u32_at(p, o::RUNTIME_CORRELATION),
                bytes: u64_at(p, o::BYTES),
                copy_kind: Some(copy_kind_name(p[o::COPY_KIND])),
                src_kind: Some(memory_kind_name(u32::from(p[o::SRC_KIND]))),
                dst_kind: Some(memory_kind_name(u32::from(p[o::DST_KIND]))),
                ..blank
            };
            (a, 0)
        }
        kind::MEMCPY2 => {
            use layout::p2p as o;
            let a = Activity {
                kind: ActivityKind::Memcpy,
                start: u64_at(p, o::START),
                end: u64_at(p, o::END),
                device: u32_at(p, o::DEVICE),
                context: u32_at(p, o::CONTEXT),
                stream: u32_at(p, o::STREAM),
                correlation_id: u32_at(p, o::CORRELATION),
                bytes: u64_at(p, o::BYTES),
                copy_kind: Some(copy_kind_name(p[o::COPY_KIND])),
                src_kind: Some(memory_kind_name(u32::from(p[o::SRC_KIND]))),
                dst_kind: Some(memory_kind_name(u32::from(p[o::DST_KIND]))),
                ..blank
            };
            (a, 0)
        }
        kind::MEMSET => {
            use layout::memset as o;
            let a = Activity {
                kind: ActivityKind::Memset,
                start: u64_at(p, o::START),
                end: u64_at(p, o::END),
                device: u32_at(p, o::DEVICE),
                context: u32_at(p, o::CONTEXT),
                stream: u32_at(p, o::STREAM),
                correlation_id: u32_at(p, o::CORRELATION),
                bytes: u64_at(p, o::BYTES),
                memory_kind: Some(memory_kind_name(u32::from(u16_at(p, o::MEMORY_KIND)))),
                ..blank
            };
            (a, 0)
        }
        kind::MEMORY2 => {
            use layout::memory as o;
            let t = u64_at(p, o::TIMESTAMP);
            let kind = match u32_at(p, o::OP) {
                1 => ActivityKind::Alloc,
                2 => ActivityKind::Free,
                _ => return Ok(()), // CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_INVALID
            };
            let a = Activity {
                kind,
                start: t,
                end: t,
                device: u32_at(p, o::DEVICE),
                context: u32_at(p, o::CONTEXT),
                stream: u32_at(p, o::STREAM),
                correlation_id: u32_at(p, o::CORRELATION),
                bytes: u64_at(p, o::BYTES),
                address: u64_at(p, o::ADDRESS),
                memory_kind: Some(memory_kind_name(u32_at(p, o::MEMORY_KIND))),
                ..blank
            };
            (a, u64_at(p, o::NAME))
        }
        kind::SYNCHRONIZATION => {
            use layout::sync as o;
            let a = Activity {
                kind: ActivityKind::Sync,
                start: u64_at(p, o::START),
                end: u64_at(p, o::END),
                context: u32_at(p, o::CONTEXT),
                stream: u32_at(p, o::STREAM),
                correlation_id: u32_at(p, o::CORRELATION),
                sync_kind: Some(sync_kind_name(u32_at(p, o::TYPE))),
                ..blank
            };
            (a, 0)
        }
        kind::DEVICE => {
            use layout::device as o;
            let warp = u32_at(p, o::THREADS_PER_WARP);
            let warps = u32_at(p, o::MAX_WARPS_PER_SM);
            let d = DeviceProps {
                id: u32_at(p, o::ID),
                name: String::new(),
                cc_major: u32_at(p, o::CC_MAJOR),
                cc_minor: u32_at(p, o::CC_MINOR),
                sm_count: u32_at(p, o::SMS),
                max_threads_per_block: u32_at(p, o::THREADS_PER_BLOCK),
                max_threads_per_sm: warps * warp,
                max_blocks_per_sm: u32_at(p, o::MAX_BLOCKS_PER_SM),
                max_warps_per_sm: warps,
                regs_per_sm: u32_at(p, o::REGS_PER_SM),
                max_regs_per_block: u32_at(p, o::REGS_PER_BLOCK),
                smem_per_sm: u64::from(u32_at(p, o::SMEM_PER_SM)),
                smem_per_block: u64::from(u32_at(p, o::SMEM_PER_BLOCK)),
                warp_size: warp,
                global_memory_bytes: u64_at(p, o::GLOBAL_MEMORY_SIZE),
                l2_cache_bytes: u32_at(p, o::L2),
                core_clock_khz: u32_at(p, o::CORE_CLOCK),
            };
            let _ = version;
            devices.push((d, u64_at(p, o::NAME)));
            return Ok(());
        }
        _ => unreachable!("layout::versions knows only the kinds above"),
    };
    let _ = version;
    out.push(Pending { a, name_id });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every field read sits at the same offset in every record version accepted for its
    /// kind (CUPTI appends fields in new versions).
    #[test]
    fn versions_share_the_fields_read() {
        macro_rules! same_one {
            ($base:ident, $v:ident, [$($f:ident),*]) => {$(
                assert_eq!(
                    offset_of!(sys::$base, $f),
                    offset_of!(sys::$v, $f),
                    concat!(stringify!($v), ".", stringify!($f))
                );
            )*};
        }
        macro_rules! same {
            ($base:ident, [$($v:ident),*], $fs:tt) => {$(
                same_one!($base, $v, $fs);
            )*};
        }
        same!(
            CUpti_ActivityKernel9,
            [
                CUpti_ActivityKernel10,
                CUpti_ActivityKernel11,
                CUpti_ActivityKernel12,
                CUpti_ActivityKernel13
            ],
            [
                registersPerThread,
                start,
                end,
                deviceId,
                contextId,
                streamId,
                gridX,
                gridY,
                gridZ,
                blockX,
                blockY,
                blockZ,
                staticSharedMemory,
                dynamicSharedMemory,
                correlationId,
                name,
                reserved0,
                pAccessPolicyWindow
            ]
        );
        same!(
            CUpti_ActivityMemcpy5,
            [CUpti_ActivityMemcpy6, CUpti_ActivityMemcpy7],
            [
                copyKind,
                srcKind,
                dstKind,
                bytes,
                start,
                end,
                deviceId,
                contextId,
                streamId,
                correlationId,
                runtimeCorrelationId,
                reserved0
            ]
        );
        same!(
            CUpti_ActivityMemset4,
            [CUpti_ActivityMemset5],
            [
                bytes,
                start,
                end,
                deviceId,
                contextId,
                streamId,
                correlationId,
                memoryKind,
                reserved0
            ]
        );
        same!(
            CUpti_ActivityMemory3,
            [CUpti_ActivityMemory4],
            [
                memoryOperationType,
                memoryKind,
                correlationId,
                address,
                bytes,
                timestamp,
                deviceId,
                contextId,
                streamId,
                name
            ]
        );
        same!(
            CUpti_ActivitySynchronization,
            [CUpti_ActivitySynchronization2],
            [type_, start, end, correlationId, contextId, streamId]
        );
        same!(
            CUpti_ActivityDevice5,
            [CUpti_ActivityDevice6],
            [
                globalMemorySize,
                l2CacheSize,
                numThreadsPerWarp,
                coreClockRate,
                numMultiprocessors,
                maxWarpsPerMultiprocessor,
                maxBlocksPerMultiprocessor,
                maxSharedMemoryPerMultiprocessor,
                maxRegistersPerMultiprocessor,
                maxRegistersPerBlock,
                maxSharedMemoryPerBlock,
                maxThreadsPerBlock,
                computeCapabilityMajor,
                computeCapabilityMinor,
                id,
                name
            ]
        );
        // Sizes tell the versions of a kind apart.
        for v in [
            layout::KERNEL,
            layout::MEMCPY,
            layout::MEMSET,
            layout::MEMORY2,
            layout::DEVICE,
            layout::SYNC,
        ] {
            let mut s: Vec<usize> = v.iter().map(|x| x.1).collect();
            s.dedup();
            assert_eq!(s.len(), v.len(), "{v:?}");
        }
    }

    #[test]
    fn runtime_version_suffix_is_dropped() {
        assert_eq!(
            api_function_name(DOMAIN_RUNTIME, "cudaLaunchKernel_v7000"),
            "cudaLaunchKernel"
        );
        assert_eq!(
            api_function_name(DOMAIN_RUNTIME, "cudaMemcpyAsync_ptsz_v7000"),
            "cudaMemcpyAsync_ptsz"
        );
        assert_eq!(
            api_function_name(DOMAIN_RUNTIME, "cudaDeviceSynchronize"),
            "cudaDeviceSynchronize"
        );
        assert_eq!(
            api_function_name(DOMAIN_DRIVER, "cuMemcpyHtoD_v2"),
            "cuMemcpyHtoD_v2"
        );
    }

    #[test]
    fn monotonic_fit_follows_offset_and_drift() {
        let f = CuptiFile {
            // 2 ppm drift: 2 s of CUPTI time are 2 s + 4 us of CLOCK_MONOTONIC.
            clock_pairs: vec![(1_000_000_000, 5_000), (3_000_000_000, 2_000_009_000)],
            ..CuptiFile::default()
        };
        assert_eq!(f.to_monotonic(2_000_000_000), 1_000_007_000);
        assert_eq!(f.to_monotonic(3_000_000_000), 2_000_009_000);
        let one = CuptiFile {
            clock_pairs: vec![(1_000, 50)],
            ..CuptiFile::default()
        };
        assert_eq!(one.to_monotonic(2_000), 1_050);
        assert_eq!(CuptiFile::default().to_monotonic(7), 7);
    }
}
