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
use std::path::Path;

use cudarc::cupti::sys;

mod records;
pub use records::activity_kind_name;
use records::{decode_activity, decode_api_activity, ApiActivity};
pub(crate) use records::{kind, layout};

/// First 8 bytes of every `gpu_activity/<pid>.bin`.
pub const FILE_MAGIC: [u8; 8] = *b"PPCUPTI\0";

/// Version of the frame format (the `HEADER` frame's first field). 2 added the PC sampling
/// frames (`PC_CONFIG` … `CUBIN`); the reader reads versions 1 and 2.
pub const FORMAT_VERSION: u32 = 2;
/// Oldest format version the reader reads.
pub const MIN_FORMAT_VERSION: u32 = 1;

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
    /// PC sampling set up on a context (format 2): `context_id u32, device_id u32,
    /// collection_mode u32` (1 continuous, 2 kernel-serialised), `period_exp u32` (one sample
    /// per SM every 2^period_exp cycles; 0 unknown), `scratch_buffer_bytes u64,
    /// hardware_buffer_bytes u64`.
    pub const PC_CONFIG: u32 = 11;
    /// `context_id u32, index u32, bytes`: CUPTI's name of a stall reason index on that
    /// context (`cuptiPCSamplingGetStallReasons`, e.g.
    /// `smsp__pcsamp_warps_issue_stalled_long_scoreboard`).
    pub const PC_STALL_REASON: u32 = 12;
    /// One `cuptiPCSamplingGetData` batch: `context_id u32, device_id u32, total_samples
    /// u64, dropped_samples u64, non_user_kernel_samples u64, hardware_buffer_full u32,
    /// n u32`, then n PC records: `cubin_crc u64, pc_offset u64, function u32` (string id),
    /// `correlation_id u32` (0 in continuous mode), `k u32`, then k × (`stall_reason_index
    /// u32, samples u32`).
    pub const PC_SAMPLES: u32 = 13;
    /// Source line of a sampled PC (`cuptiGetSassToSourceCorrelation`, at exit):
    /// `cubin_crc u64, pc_offset u64, function u32, line u32, file u32` (string ids; the
    /// file with its directory).
    pub const PC_LINE: u32 = 14;
    /// A module's cubin seen at load: `crc u64, size u64, module_id u32, saved u32` (1: the
    /// bytes are in the run directory), then the path relative to the run directory
    /// (`cubins/<crc as 16 hex digits>.cubin`).
    pub const CUBIN: u32 = 15;
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
    /// PC sampling set-up per sampled context (format 2; empty without PC sampling).
    pub pc_configs: Vec<PcConfig>,
    /// PC samples, summed over batches per (context, cubin, PC, function, correlation id,
    /// stall reason), zero counts left out; sorted by those keys.
    pub pc_samples: Vec<PcSample>,
    /// Cubins seen at module load: (crc, size in bytes, path relative to the run directory
    /// when saved).
    pub cubins: Vec<(u64, u64, Option<String>)>,
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

/// PC sampling on one context (`PC_CONFIG` frame and the `PC_SAMPLES` batch totals).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PcConfig {
    pub context_id: u32,
    pub device_id: u32,
    /// `continuous` or `serialized` (CUPTI's kernel-serialised mode).
    pub mode: &'static str,
    /// Sampling period in SM cycles (2^exponent; CUPTI docs 2.8.1); 0 unknown.
    pub period_cycles: u64,
    pub scratch_buffer_bytes: u64,
    pub hardware_buffer_bytes: u64,
    /// Stall reasons: (CUPTI index, CUPTI name).
    pub stall_reasons: Vec<(u32, String)>,
    /// Samples CUPTI reports for the context (`CUpti_PCSamplingData::totalSamples`, summed
    /// over batches): `smsp__pcsamp_sample_count`.
    pub total_samples: u64,
    /// Samples lost (`droppedSamples`: `smsp__pcsamp_samples_data_dropped`).
    pub dropped_samples: u64,
    /// Samples in kernels that are not the user's (`nonUsrKernelsTotalSamples`).
    pub non_user_samples: u64,
    /// Batches in which CUPTI's hardware buffer was full (samples lost).
    pub hardware_buffer_full: u32,
}

/// Samples of one stall reason at one GPU PC.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PcSample {
    pub context_id: u32,
    pub device_id: u32,
    pub cubin_crc: u64,
    /// Byte offset of the instruction in its function.
    pub pc_offset: u64,
    /// The function (kernel or device function) as CUPTI names it (mangled).
    pub function: String,
    /// Correlation id of the launch (kernel-serialised mode); 0 in continuous mode.
    pub correlation_id: u32,
    /// CUPTI's stall reason name (`smsp__pcsamp_warps_issue_stalled_*`).
    pub stall_reason: String,
    pub samples: u64,
    /// Source file and line (`cuptiGetSassToSourceCorrelation`); `None` without line info.
    pub file: Option<String>,
    pub line: Option<u32>,
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

/// (context, device, cubin CRC, PC offset, function string id, correlation id, stall index).
type PcKey = (u32, u32, u64, u64, u32, u32, u32);

/// PC sampling frames while decoding: configurations, stall reason names, summed samples,
/// source lines.
#[derive(Default)]
struct PcAcc {
    configs: Vec<PcConfig>,
    /// (context, index) -> name.
    reasons: HashMap<(u32, u32), String>,
    /// (context, device, crc, pc, function id, correlation id, stall index) -> samples.
    samples: HashMap<PcKey, u64>,
    /// (context) -> (total, dropped, non-user, batches with the hardware buffer full).
    totals: HashMap<u32, (u64, u64, u64, u32)>,
    /// (crc, pc, function id) -> (line, file id).
    lines: HashMap<(u64, u64, u32), (u32, u32)>,
}

impl PcAcc {
    /// Add one `PC_SAMPLES` payload.
    fn batch(&mut self, p: &[u8]) -> Result<(), String> {
        let (ctx, dev) = (u32_at(p, 0), u32_at(p, 4));
        let t = self.totals.entry(ctx).or_default();
        // Totals of hostile frames saturate instead of overflowing.
        t.0 = t.0.saturating_add(u64_at(p, 8));
        t.1 = t.1.saturating_add(u64_at(p, 16));
        t.2 = t.2.saturating_add(u64_at(p, 24));
        t.3 = t.3.saturating_add(u32::from(u32_at(p, 32) != 0));
        let n = u32_at(p, 36) as usize;
        let mut o = 40;
        for i in 0..n {
            if p.len() < o + 28 {
                return Err(format!("PC record {i} of {n} cut short"));
            }
            let (crc, pc, fid, corr, k) = (
                u64_at(p, o),
                u64_at(p, o + 8),
                u32_at(p, o + 16),
                u32_at(p, o + 20),
                u32_at(p, o + 24) as usize,
            );
            o += 28;
            if p.len() < o + 8 * k {
                return Err(format!("stall reasons of PC record {i} of {n} cut short"));
            }
            for j in 0..k {
                let (idx, samples) = (u32_at(p, o + 8 * j), u32_at(p, o + 8 * j + 4));
                if samples > 0 {
                    let e = self
                        .samples
                        .entry((ctx, dev, crc, pc, fid, corr, idx))
                        .or_default();
                    *e = e.saturating_add(u64::from(samples));
                }
            }
            o += 8 * k;
        }
        Ok(())
    }

    /// Resolve names and lines into `f.pc_configs` / `f.pc_samples`.
    fn finish(self, f: &mut CuptiFile, s: &dyn Fn(u64) -> Option<String>) {
        let mut configs = self.configs;
        for c in &mut configs {
            let mut r: Vec<(u32, String)> = self
                .reasons
                .iter()
                .filter(|((ctx, _), _)| *ctx == c.context_id)
                .map(|((_, i), n)| (*i, n.clone()))
                .collect();
            r.sort();
            c.stall_reasons = r;
            if let Some(&(t, d, nu, full)) = self.totals.get(&c.context_id) {
                c.total_samples = t;
                c.dropped_samples = d;
                c.non_user_samples = nu;
                c.hardware_buffer_full = full;
            }
        }
        let mut v: Vec<PcSample> = self
            .samples
            .into_iter()
            .map(|((ctx, dev, crc, pc, fid, corr, idx), n)| {
                let line = self.lines.get(&(crc, pc, fid));
                PcSample {
                    context_id: ctx,
                    device_id: dev,
                    cubin_crc: crc,
                    pc_offset: pc,
                    function: s(u64::from(fid)).unwrap_or_default(),
                    correlation_id: corr,
                    stall_reason: self
                        .reasons
                        .get(&(ctx, idx))
                        .cloned()
                        .unwrap_or_else(|| format!("(stall reason {idx})")),
                    samples: n,
                    file: line.and_then(|&(_, file)| s(u64::from(file))),
                    line: line.map(|&(l, _)| l),
                }
            })
            .collect();
        v.sort_by(|a, b| {
            (
                a.context_id,
                a.cubin_crc,
                &a.function,
                a.pc_offset,
                a.correlation_id,
                &a.stall_reason,
            )
                .cmp(&(
                    b.context_id,
                    b.cubin_crc,
                    &b.function,
                    b.pc_offset,
                    b.correlation_id,
                    &b.stall_reason,
                ))
        });
        f.pc_configs = configs;
        f.pc_samples = v;
    }
}

/// An activity with its string ids not yet resolved.
struct Pending {
    a: Activity,
    name_id: u64,
}

/// What the frames of a file add up to, string ids not yet resolved.
#[derive(Default)]
struct Frames {
    f: CuptiFile,
    strings: HashMap<u32, String>,
    funcs: HashMap<(u32, u32), String>,
    pending: Vec<Pending>,
    raw_api: Vec<[u8; API_RECORD_BYTES]>,
    act_api: Vec<ApiActivity>,
    devices: Vec<(DeviceProps, u64)>,
    driver_devices: Vec<DeviceProps>,
    pc: PcAcc,
    seen_header: bool,
    trailer: bool,
}

impl Frames {
    /// Add one frame: tag `t`, payload `p`, which began at byte `at` of the file.
    fn frame(&mut self, t: u32, p: &[u8], at: usize) -> io::Result<()> {
        let len = p.len();
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
                if !(MIN_FORMAT_VERSION..=FORMAT_VERSION).contains(&v) {
                    return Err(bad(format!(
                    "format version {v}; this reader knows {MIN_FORMAT_VERSION} to {FORMAT_VERSION}"
                )));
                }
                self.f.pid = u32_at(p, 4);
                self.f.cupti_version = u32_at(p, 8);
                self.f.cuda_driver_version = u32_at(p, 12);
                self.f.bindings_cuda_version = u32_at(p, 16);
                self.seen_header = true;
            }
            tag::STRING => {
                short(4)?;
                self.strings
                    .insert(u32_at(p, 0), String::from_utf8_lossy(&p[4..]).into_owned());
            }
            tag::API_FUNC => {
                short(8)?;
                let name = String::from_utf8_lossy(&p[8..]).into_owned();
                self.funcs.insert((u32_at(p, 0), u32_at(p, 4)), name);
            }
            tag::API => {
                if !len.is_multiple_of(API_RECORD_BYTES) {
                    return Err(bad(format!(
                        "API frame at byte {at}: {len} bytes, not a multiple of {API_RECORD_BYTES}"
                    )));
                }
                self.raw_api.extend(
                    p.chunks_exact(API_RECORD_BYTES)
                        .map(|c| <[u8; API_RECORD_BYTES]>::try_from(c).unwrap()),
                );
            }
            tag::CLOCK => {
                short(16)?;
                self.f.clock_pairs.push((u64_at(p, 0), u64_at(p, 8)));
            }
            tag::DROPPED => {
                short(16)?;
                self.f.dropped_records += u64_at(p, 8);
            }
            tag::NOTE => self.f.notes.push(String::from_utf8_lossy(p).into_owned()),
            tag::TRAILER => {
                short(32)?;
                self.f.api_records_lost = u64_at(p, 24);
                self.trailer = true;
            }
            tag::DEVPROPS => {
                short(4 + 14 * 4 + 8)?;
                let v = |i: usize| u32_at(p, 4 + 4 * i);
                self.driver_devices.push(DeviceProps {
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
                let k = u32_at(p, 0);
                if k == kind::RUNTIME || k == kind::DRIVER {
                    self.act_api
                        .push(decode_api_activity(p, self.f.cupti_version)?);
                } else {
                    decode_activity(
                        p,
                        self.f.cupti_version,
                        &mut self.pending,
                        &mut self.devices,
                    )?;
                }
            }
            tag::PC_CONFIG => {
                short(32)?;
                let exp = u32_at(p, 12);
                self.pc.configs.push(PcConfig {
                    context_id: u32_at(p, 0),
                    device_id: u32_at(p, 4),
                    mode: if u32_at(p, 8) == 2 {
                        "serialized"
                    } else {
                        "continuous"
                    },
                    period_cycles: if (1..64).contains(&exp) {
                        1u64 << exp
                    } else {
                        0
                    },
                    scratch_buffer_bytes: u64_at(p, 16),
                    hardware_buffer_bytes: u64_at(p, 24),
                    ..PcConfig::default()
                });
            }
            tag::PC_STALL_REASON => {
                short(8)?;
                self.pc.reasons.insert(
                    (u32_at(p, 0), u32_at(p, 4)),
                    String::from_utf8_lossy(&p[8..]).into_owned(),
                );
            }
            tag::PC_SAMPLES => {
                // The batch header is 40 bytes: its record count is the u32 at 36.
                short(40)?;
                self.pc
                    .batch(p)
                    .map_err(|e| bad(format!("PC_SAMPLES frame at byte {at}: {e}")))?;
            }
            tag::PC_LINE => {
                short(28)?;
                self.pc.lines.insert(
                    (u64_at(p, 0), u64_at(p, 8), u32_at(p, 16)),
                    (u32_at(p, 20), u32_at(p, 24)),
                );
            }
            tag::CUBIN => {
                short(24)?;
                let saved = u32_at(p, 20) == 1;
                self.f.cubins.push((
                    u64_at(p, 0),
                    u64_at(p, 8),
                    saved.then(|| String::from_utf8_lossy(&p[24..]).into_owned()),
                ));
            }
            _ => {} // unknown frames of a later minor format are skipped
        }
        Ok(())
    }

    /// Resolve the string ids and API function names, and gather the file (`at_end`: the
    /// last frame ended at the end of the bytes).
    fn finish(self, at_end: bool) -> CuptiFile {
        let Frames {
            mut f,
            strings,
            funcs,
            pending,
            raw_api,
            act_api,
            devices,
            driver_devices,
            pc,
            seen_header: _,
            trailer,
        } = self;
        f.truncated = !trailer || !at_end;
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
        pc.finish(&mut f, &s);
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
        // API calls from CUPTI's RUNTIME and DRIVER activity records (`POWERPERF_CUPTI_API=
        // activity`): the functions the writer selected have an API_FUNC frame; CUPTI records
        // every call, so the others are dropped here. Times are CUPTI's, mapped like the
        // activities' onto CLOCK_MONOTONIC.
        let mapped: Vec<ApiCall> = act_api
            .into_iter()
            .filter_map(|a| {
                let n = funcs.get(&(a.domain, a.cbid))?;
                Some(ApiCall {
                    correlation_id: a.correlation_id,
                    name: api_function_name(a.domain, n),
                    domain: if a.domain == DOMAIN_DRIVER {
                        "driver"
                    } else {
                        "runtime"
                    },
                    cbid: a.cbid,
                    kernel: None,
                    tid: a.tid,
                    enter_ns: f.to_monotonic(a.start),
                    exit_ns: f.to_monotonic(a.end),
                })
            })
            .collect();
        f.api_calls.extend(mapped);
        f
    }
}

/// Decode the bytes of a `gpu_activity/<pid>.bin`.
///
/// # Errors
/// As [`read_file`].
pub fn decode(bytes: &[u8]) -> io::Result<CuptiFile> {
    if bytes.len() < FILE_MAGIC.len() || bytes[..8] != FILE_MAGIC {
        return Err(bad("not a powerperf GPU activity file (no PPCUPTI magic)"));
    }
    let mut st = Frames {
        f: CuptiFile {
            truncated: true,
            ..CuptiFile::default()
        },
        ..Frames::default()
    };
    let mut pos = 8;
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
        if !st.seen_header && t != tag::HEADER {
            return Err(bad(format!(
                "first frame (at byte {at}) is tag {t}, not a header"
            )));
        }
        st.frame(t, p, at)?;
    }
    if !st.seen_header {
        return Err(bad("file ends before its header frame"));
    }
    Ok(st.finish(pos == bytes.len()))
}

#[cfg(test)]
mod tests;
