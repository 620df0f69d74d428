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

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::fs::File;
use std::hash::{BuildHasherDefault, Hasher};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use crate::cupti::{self as fmt, kind, layout, tag};

#[path = "../cupti_pcsamp.rs"]
mod pcsamp;
use crate::runtime::{now_ns, ENV_RUN_DIR};
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

/// `CUpti_CallbackData` (`cupti_callbacks.h`) with the enum field as a plain integer, so
/// that no value CUPTI writes can be an invalid Rust enum.
#[repr(C)]
struct CallbackData {
    callback_site: u32,
    function_name: *const c_char,
    function_params: *const c_void,
    function_return_value: *mut c_void,
    symbol_name: *const c_char,
    context: *mut c_void,
    context_uid: u32,
    correlation_data: *mut u64,
    correlation_id: u32,
}

const CUPTI_SUCCESS: u32 = 0;
/// `POWERPERF_CUPTI_API=activity`.
const MODE_ACTIVITY: u32 = 4;
/// `CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM` (`cupti_activity.h`): gettid on Linux.
const CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM: u32 = 1;
const CUPTI_API_ENTER: u32 = 0;
const CUPTI_ACTIVITY_FLAG_FLUSH_FORCED: u32 = 1;

type BufferRequested = unsafe extern "C" fn(*mut *mut u8, *mut usize, *mut usize);
type BufferCompleted = unsafe extern "C" fn(*mut c_void, u32, *mut u8, usize, usize);
type ApiCallback = unsafe extern "C" fn(*mut c_void, u32, u32, *const c_void);

/// The CUPTI functions used (`cupti_activity.h`, `cupti_callbacks.h`, `cupti_result.h`,
/// `cupti_version.h`); enums pass as `u32`, `CUptiResult` returns as `u32`.
struct Cupti {
    get_version: unsafe extern "C" fn(*mut u32) -> u32,
    get_result_string: unsafe extern "C" fn(u32, *mut *const c_char) -> u32,
    activity_enable: unsafe extern "C" fn(u32) -> u32,
    activity_register_callbacks: unsafe extern "C" fn(BufferRequested, BufferCompleted) -> u32,
    activity_get_next_record: unsafe extern "C" fn(*mut u8, usize, *mut *mut u8) -> u32,
    activity_get_num_dropped_records: unsafe extern "C" fn(*mut c_void, u32, *mut usize) -> u32,
    activity_flush_all: unsafe extern "C" fn(u32) -> u32,
    activity_flush_period: unsafe extern "C" fn(u32) -> u32,
    get_timestamp: unsafe extern "C" fn(*mut u64) -> u32,
    subscribe: unsafe extern "C" fn(*mut *mut c_void, ApiCallback, *mut c_void) -> u32,
    enable_callback: unsafe extern "C" fn(u32, *mut c_void, u32, u32) -> u32,
    enable_domain: unsafe extern "C" fn(u32, *mut c_void, u32) -> u32,
    get_callback_name: unsafe extern "C" fn(u32, u32, *mut *const c_char) -> u32,
    /// `cuptiSetThreadIdType` (CUPTI 4.0 and later).
    set_thread_id_type: Option<unsafe extern "C" fn(u32) -> u32>,
    /// `cuptiActivityEnableRuntimeApi` / `cuptiActivityEnableDriverApi` (CUDA 12.x and
    /// later): per-function switches of the RUNTIME / DRIVER activity kinds.
    enable_runtime_api: Option<unsafe extern "C" fn(u32, u8) -> u32>,
    enable_driver_api: Option<unsafe extern "C" fn(u32, u8) -> u32>,
    /// `cuptiActivityEnableHWTrace` (kernel timestamps from the Hardware Event System).
    enable_hw_trace: Option<unsafe extern "C" fn(u8) -> u32>,
    /// The PC Sampling API (`cupti_pcsampling.h`); `None` in a CUPTI without it.
    pc: Option<pcsamp::PcFns>,
}

fn dl_error() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown error".into()
    } else {
        // SAFETY: non-NULL, NUL-terminated.
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

/// `dlopen(name, RTLD_NOW | RTLD_LOCAL)`.
fn dlopen(name: &str) -> Result<*mut c_void, String> {
    let c = CString::new(name).map_err(|e| e.to_string())?;
    // SAFETY: `c` is NUL-terminated; dlopen has no other precondition.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if h.is_null() {
        Err(dl_error())
    } else {
        Ok(h)
    }
}

/// The symbol `name` of `lib` as a function pointer of type `F`.
///
/// # Safety
/// `F` must be the function's real type.
unsafe fn sym<F: Copy>(lib: *mut c_void, name: &str) -> Result<F, String> {
    assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
    let c = CString::new(name).map_err(|e| e.to_string())?;
    // SAFETY: `lib` is a handle from dlopen, `c` NUL-terminated.
    let p = unsafe { libc::dlsym(lib, c.as_ptr()) };
    if p.is_null() {
        return Err(format!("{name}: {}", dl_error()));
    }
    // SAFETY: the caller names the type; pointers and fn pointers have the same size.
    Ok(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
}

/// Directories of the loaded objects whose file name starts with `prefix`.
fn loaded_dirs(prefix: &str) -> Vec<PathBuf> {
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: the loader passes a valid info; `data` is the Vec below.
        let (info, out) = unsafe { (&*info, &mut *(data as *mut Vec<PathBuf>)) };
        if !info.dlpi_name.is_null() {
            // SAFETY: dlpi_name is NUL-terminated.
            let name = unsafe { CStr::from_ptr(info.dlpi_name) }.to_string_lossy();
            if !name.is_empty() {
                out.push(PathBuf::from(name.into_owned()));
            }
        }
        0
    }
    let mut all: Vec<PathBuf> = Vec::new();
    // SAFETY: the callback only reads `info` and pushes to `all`.
    unsafe { libc::dl_iterate_phdr(Some(each), &mut all as *mut Vec<PathBuf> as *mut c_void) };
    all.into_iter()
        .filter(|p| {
            p.file_name()
                .is_some_and(|f| f.to_string_lossy().starts_with(prefix))
        })
        .filter_map(|p| p.parent().map(Path::to_path_buf))
        .collect()
}

/// `libcupti.so*` files in `dir`, newest name first.
fn cupti_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|f| f.to_string_lossy().starts_with("libcupti.so"))
        })
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    v.sort();
    v.reverse();
    v
}

impl Cupti {
    /// Load CUPTI (search order: module docs). Returns the library path too.
    fn load() -> Result<(Cupti, String), String> {
        let mut tried: Vec<String> = Vec::new();
        let mut cands: Vec<String> = Vec::new();
        if let Some(p) = std::env::var_os(ENV_CUPTI_LIB).filter(|p| !p.is_empty()) {
            cands.push(p.to_string_lossy().into_owned());
        } else {
            cands.extend(["libcupti.so.13".to_string(), "libcupti.so".to_string()]);
            for d in loaded_dirs("libcudart") {
                cands.extend(cupti_in(&d));
                cands.extend(cupti_in(&d.join("../../cuda_cupti/lib")));
            }
            let mut roots: Vec<PathBuf> = ["CUDA_HOME", "CUDA_PATH"]
                .iter()
                .filter_map(|v| std::env::var_os(v).filter(|p| !p.is_empty()))
                .map(PathBuf::from)
                .collect();
            roots.push("/usr/local/cuda".into());
            for r in roots {
                for sub in [
                    "extras/CUPTI/lib64",
                    "targets/x86_64-linux/lib",
                    "targets/sbsa-linux/lib",
                    "lib64",
                ] {
                    cands.extend(cupti_in(&r.join(sub)));
                }
            }
        }
        for c in cands {
            match dlopen(&c) {
                Ok(lib) => {
                    // SAFETY: the types are those of the CUPTI headers (enums as u32).
                    let api = unsafe { Self::bind(lib) }
                        .map_err(|e| format!("{c} lacks a CUPTI function: {e}"))?;
                    return Ok((api, c));
                }
                Err(e) => tried.push(e),
            }
        }
        Err(format!(
            "CUPTI not found (set {ENV_CUPTI_LIB}=/path/libcupti.so); tried: {}",
            tried.join("; ")
        ))
    }

    /// # Safety
    /// `lib` is a CUPTI handle from dlopen.
    unsafe fn bind(lib: *mut c_void) -> Result<Cupti, String> {
        // SAFETY: each type is the header's prototype.
        unsafe {
            Ok(Cupti {
                get_version: sym(lib, "cuptiGetVersion")?,
                get_result_string: sym(lib, "cuptiGetResultString")?,
                activity_enable: sym(lib, "cuptiActivityEnable")?,
                activity_register_callbacks: sym(lib, "cuptiActivityRegisterCallbacks")?,
                activity_get_next_record: sym(lib, "cuptiActivityGetNextRecord")?,
                activity_get_num_dropped_records: sym(lib, "cuptiActivityGetNumDroppedRecords")?,
                activity_flush_all: sym(lib, "cuptiActivityFlushAll")?,
                activity_flush_period: sym(lib, "cuptiActivityFlushPeriod")?,
                get_timestamp: sym(lib, "cuptiGetTimestamp")?,
                subscribe: sym(lib, "cuptiSubscribe")?,
                enable_callback: sym(lib, "cuptiEnableCallback")?,
                enable_domain: sym(lib, "cuptiEnableDomain")?,
                get_callback_name: sym(lib, "cuptiGetCallbackName")?,
                set_thread_id_type: sym(lib, "cuptiSetThreadIdType").ok(),
                enable_runtime_api: sym(lib, "cuptiActivityEnableRuntimeApi").ok(),
                enable_driver_api: sym(lib, "cuptiActivityEnableDriverApi").ok(),
                enable_hw_trace: sym(lib, "cuptiActivityEnableHWTrace").ok(),
                pc: pcsamp::PcFns::bind(lib).ok(),
            })
        }
    }

    fn error(&self, r: u32) -> String {
        let mut s: *const c_char = std::ptr::null();
        // SAFETY: `s` is writable; CUPTI stores a static string.
        if unsafe { (self.get_result_string)(r, &mut s) } == CUPTI_SUCCESS && !s.is_null() {
            // SAFETY: NUL-terminated static string.
            unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
        } else {
            format!("CUptiResult {r}")
        }
    }

    /// (cupti ns, monotonic ns, half width ns): the tightest of 5 bracketed reads.
    fn clock_pair(&self) -> Option<(u64, u64, u64)> {
        let mut best: Option<(u64, u64, u64)> = None;
        for _ in 0..5 {
            let mut g = 0u64;
            let t0 = now_ns();
            // SAFETY: `g` is writable.
            let r = unsafe { (self.get_timestamp)(&mut g) };
            let t1 = now_ns();
            if r != CUPTI_SUCCESS {
                return None;
            }
            let w = (t1 - t0) / 2;
            if best.is_none_or(|b| w < b.2) {
                best = Some((g, t0 + w, w));
            }
        }
        best
    }
}

/// FNV-1a, for the string table and the per-thread symbol caches.
#[derive(Default)]
struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for &b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
    }
}

type FastMap<K> = HashMap<K, u32, BuildHasherDefault<Fnv>>;

/// One thread's API records (`fmt::API_RECORD_BYTES` each), written by their owner; the
/// exit handler takes the lock too.
struct ApiBuf {
    bytes: Mutex<Vec<u8>>,
}

struct Inj {
    cupti: Cupti,
    pid: u32,
    path: PathBuf,
    out: Mutex<Option<File>>,
    strings: Mutex<FastMap<Box<[u8]>>>,
    threads: Mutex<Vec<Arc<ApiBuf>>>,
    /// Set under `out` once the trailer is written: nothing is written after it.
    finished: AtomicBool,
    device_seen: AtomicBool,
    dropped: AtomicU64,
    activities: AtomicU64,
    api_records: AtomicU64,
    api_lost: AtomicU64,
    unknown_layouts: Mutex<Vec<(u32, usize)>>,
}

static INJ: OnceLock<Inj> = OnceLock::new();

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

fn push_frame(buf: &mut Vec<u8>, t: u32, parts: &[&[u8]]) {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    buf.extend_from_slice(&t.to_ne_bytes());
    buf.extend_from_slice(&(len as u32).to_ne_bytes());
    for p in parts {
        buf.extend_from_slice(p);
    }
}

fn clock_frame(buf: &mut Vec<u8>, c: (u64, u64, u64)) {
    push_frame(
        buf,
        tag::CLOCK,
        &[&c.0.to_ne_bytes(), &c.1.to_ne_bytes(), &c.2.to_ne_bytes()],
    );
}

impl Inj {
    /// Append `bytes` (whole frames) to the file, unless the trailer is written, the
    /// process is a forked child, or an earlier write failed.
    fn write(&self, bytes: &[u8]) {
        if bytes.is_empty() || std::process::id() != self.pid {
            return;
        }
        let mut out = lock(&self.out);
        if self.finished.load(Ordering::Relaxed) {
            return;
        }
        if let Some(f) = out.as_mut() {
            if let Err(e) = f.write_all(bytes) {
                eprintln!(
                    "powerperf-rt: writing {} failed: {e}; later GPU activity is dropped",
                    self.path.display()
                );
                *out = None;
            }
        }
    }

    fn note(&self, msg: &str) {
        eprintln!("powerperf-rt: CUPTI: {msg}");
        let mut b = Vec::new();
        push_frame(&mut b, tag::NOTE, &[msg.as_bytes()]);
        self.write(&b);
    }

    /// The string id of `s`; a new string's `STRING` frame goes to `frames` (the caller
    /// writes it before or with the frames that use the id).
    fn intern(&self, s: &[u8], frames: &mut Vec<u8>) -> u32 {
        let mut t = lock(&self.strings);
        if let Some(&id) = t.get(s) {
            return id;
        }
        let id = t.len() as u32 + 1;
        t.insert(s.into(), id);
        push_frame(frames, tag::STRING, &[&id.to_ne_bytes(), s]);
        id
    }

    /// Intern a C string and write its frame now if it is new (API callback path, rare).
    fn intern_now(&self, p: *const c_char) -> u32 {
        // SAFETY: CUPTI passes a NUL-terminated string valid during the callback.
        let s = unsafe { CStr::from_ptr(p) }.to_bytes();
        let mut frames = Vec::new();
        let id = self.intern(s, &mut frames);
        self.write(&frames);
        id
    }

    fn write_api(&self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        let mut b = Vec::with_capacity(8 + bytes.len());
        push_frame(&mut b, tag::API, &[bytes]);
        self.write(&b);
        self.api_records.fetch_add(
            (bytes.len() / fmt::API_RECORD_BYTES) as u64,
            Ordering::Relaxed,
        );
    }

    /// Exit: flush CUPTI, the API buffers, device properties, last clock pair, trailer.
    fn finish(&self) {
        if self.finished.load(Ordering::Relaxed) {
            return;
        }
        pcsamp::finish(self);
        // SAFETY: CUPTI is initialised; the completion callback runs in this thread or
        // CUPTI's and writes through `self.write`.
        let r = unsafe { (self.cupti.activity_flush_all)(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED) };
        if r != CUPTI_SUCCESS {
            self.note(&format!("cuptiActivityFlushAll: {}", self.cupti.error(r)));
        }
        let threads: Vec<Arc<ApiBuf>> = std::mem::take(&mut *lock(&self.threads));
        for t in threads {
            let mut b = lock(&t.bytes);
            self.write_api(&b);
            b.clear();
        }
        if !self.device_seen.load(Ordering::Relaxed) {
            let mut b = Vec::new();
            driver_devices(&mut b);
            self.write(&b);
        }
        let mut b = Vec::new();
        if let Some(c) = self.cupti.clock_pair() {
            clock_frame(&mut b, c);
        }
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed).to_ne_bytes();
        push_frame(
            &mut b,
            tag::TRAILER,
            &[
                &n(&self.dropped),
                &n(&self.activities),
                &n(&self.api_records),
                &n(&self.api_lost),
            ],
        );
        self.write(&b);
        let _g = lock(&self.out);
        self.finished.store(true, Ordering::SeqCst);
    }
}

/// Device properties from the driver (`cuDeviceGetAttribute`), as `DEVPROPS` frames.
fn driver_devices(out: &mut Vec<u8>) {
    use cudarc::driver::sys::CUdevice_attribute_enum as A;
    let lib = {
        let c = c"libcuda.so.1";
        // SAFETY: NUL-terminated; RTLD_NOLOAD only returns the already loaded driver.
        unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) }
    };
    if lib.is_null() {
        return;
    }
    type Count = unsafe extern "C" fn(*mut c_int) -> c_int;
    type Attr = unsafe extern "C" fn(*mut c_int, c_int, c_int) -> c_int;
    type Name = unsafe extern "C" fn(*mut c_char, c_int, c_int) -> c_int;
    type Mem = unsafe extern "C" fn(*mut usize, c_int) -> c_int;
    // SAFETY: prototypes of cuda.h (CUdevice is int, CUresult int, enums int).
    let fns = unsafe {
        (
            sym::<Count>(lib, "cuDeviceGetCount"),
            sym::<Attr>(lib, "cuDeviceGetAttribute"),
            sym::<Name>(lib, "cuDeviceGetName"),
            sym::<Mem>(lib, "cuDeviceTotalMem_v2"),
        )
    };
    let (Ok(count), Ok(attr), Ok(name), Ok(mem)) = fns else {
        return;
    };
    let mut n: c_int = 0;
    // SAFETY: `n` is writable.
    if unsafe { count(&mut n) } != 0 {
        return;
    }
    for dev in 0..n {
        let get = |a: A| {
            let mut v: c_int = 0;
            // SAFETY: `v` is writable; `dev` < count.
            unsafe { attr(&mut v, a as c_int, dev) };
            v.max(0) as u32
        };
        let warp = get(A::CU_DEVICE_ATTRIBUTE_WARP_SIZE);
        let vals = [
            get(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
            get(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
            get(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
            get(A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK),
            get(A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR),
            get(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR),
            get(A::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR),
            get(A::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK),
            get(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR),
            get(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK),
            get(A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE),
            warp,
            get(A::CU_DEVICE_ATTRIBUTE_CLOCK_RATE),
            0,
        ];
        let mut nm = [0 as c_char; 256];
        // SAFETY: the buffer holds 256 bytes.
        unsafe { name(nm.as_mut_ptr(), 256, dev) };
        nm[255] = 0;
        // SAFETY: NUL-terminated (last byte forced).
        let nm = unsafe { CStr::from_ptr(nm.as_ptr()) }.to_bytes().to_vec();
        let mut bytes = 0usize;
        // SAFETY: `bytes` is writable.
        unsafe { mem(&mut bytes, dev) };
        let mut p = Vec::new();
        p.extend_from_slice(&(dev as u32).to_ne_bytes());
        for v in vals {
            p.extend_from_slice(&v.to_ne_bytes());
        }
        p.extend_from_slice(&(bytes as u64).to_ne_bytes());
        p.extend_from_slice(&nm);
        push_frame(out, tag::DEVPROPS, &[&p]);
    }
}

extern "C" fn at_exit() {
    // Never unwind into libc.
    let _ = std::panic::catch_unwind(|| {
        if let Some(inj) = INJ.get() {
            inj.finish();
        }
    });
}

/// CUPTI asks for an activity buffer.
unsafe extern "C" fn buffer_requested(buf: *mut *mut u8, size: *mut usize, max: *mut usize) {
    let mut p: *mut c_void = std::ptr::null_mut();
    // SAFETY: `p` is writable; 8-byte alignment as CUPTI requires (ACTIVITY_RECORD_ALIGNMENT).
    let ok = unsafe { libc::posix_memalign(&mut p, 8, ACTIVITY_BUFFER_BYTES) } == 0;
    // SAFETY: CUPTI passes writable out-parameters.
    unsafe {
        *buf = if ok {
            p as *mut u8
        } else {
            std::ptr::null_mut()
        };
        *size = if ok { ACTIVITY_BUFFER_BYTES } else { 0 };
        *max = 0;
    }
}

/// CUPTI returns a buffer holding `valid` bytes of records.
unsafe extern "C" fn buffer_completed(
    ctx: *mut c_void,
    stream: u32,
    buf: *mut u8,
    _size: usize,
    valid: usize,
) {
    let _ = std::panic::catch_unwind(|| {
        if let Some(inj) = INJ.get() {
            // SAFETY: CUPTI hands back a buffer from `buffer_requested` with `valid` bytes.
            unsafe { completed(inj, ctx, stream, buf, valid) };
        }
    });
    // SAFETY: allocated by posix_memalign in `buffer_requested` (or NULL).
    unsafe { libc::free(buf as *mut c_void) };
}

/// # Safety
/// `buf` holds `valid` bytes of CUPTI activity records.
unsafe fn completed(inj: &Inj, ctx: *mut c_void, stream: u32, buf: *mut u8, valid: usize) {
    if buf.is_null() {
        return;
    }
    // Record boundaries: CUPTI packs records back to back; each one's size is the distance
    // to the next (the last one ends at `valid`).
    let mut starts: Vec<usize> = Vec::new();
    let mut rec: *mut u8 = std::ptr::null_mut();
    // SAFETY: CUPTI walks its own buffer; `rec` is the previous record or NULL.
    while unsafe { (inj.cupti.activity_get_next_record)(buf, valid, &mut rec) } == CUPTI_SUCCESS {
        starts.push(rec as usize - buf as usize);
    }
    let mut frames: Vec<u8> = Vec::with_capacity(valid + starts.len() * 8 + 4096);
    let mut names: Vec<u8> = Vec::new();
    for (i, &s) in starts.iter().enumerate() {
        let e = starts.get(i + 1).copied().unwrap_or(valid);
        if e <= s || e > valid {
            continue;
        }
        // SAFETY: s..e lies inside the valid part of the buffer.
        let r = unsafe { std::slice::from_raw_parts_mut(buf.add(s), e - s) };
        if r.len() < 8 {
            continue;
        }
        let k = fmt::u32_at(r, 0);
        match layout::pointers(k, r.len()) {
            Some(ptrs) => {
                for &(off, is_name) in ptrs {
                    let p = fmt::u64_at(r, off) as usize;
                    let id = if is_name && p != 0 {
                        // SAFETY: CUPTI's name strings live at least as long as the buffer.
                        let c = unsafe { CStr::from_ptr(p as *const c_char) }.to_bytes();
                        u64::from(inj.intern(c, &mut names))
                    } else {
                        0
                    };
                    r[off..off + 8].copy_from_slice(&id.to_ne_bytes());
                }
            }
            None => {
                let mut u = lock(&inj.unknown_layouts);
                if !u.contains(&(k, r.len())) {
                    u.push((k, r.len()));
                    drop(u);
                    inj.note(&format!(
                        "activity kind {} ({k}) record of {} bytes is not a layout the bindings \
                         know; written as is, the reader will refuse it",
                        fmt::activity_kind_name(k),
                        r.len()
                    ));
                }
            }
        }
        if k == kind::DEVICE {
            inj.device_seen.store(true, Ordering::Relaxed);
        }
        push_frame(&mut frames, tag::ACTIVITY, &[r]);
    }
    inj.activities
        .fetch_add(starts.len() as u64, Ordering::Relaxed);
    let mut dropped = 0usize;
    // SAFETY: `dropped` is writable; ctx/stream are those CUPTI passed.
    if unsafe { (inj.cupti.activity_get_num_dropped_records)(ctx, stream, &mut dropped) }
        == CUPTI_SUCCESS
        && dropped > 0
    {
        inj.dropped.fetch_add(dropped as u64, Ordering::Relaxed);
        let ctx_id = 0u32;
        push_frame(
            &mut frames,
            tag::DROPPED,
            &[
                &ctx_id.to_ne_bytes(),
                &stream.to_ne_bytes(),
                &(dropped as u64).to_ne_bytes(),
            ],
        );
    }
    if let Some(c) = inj.cupti.clock_pair() {
        clock_frame(&mut frames, c);
    }
    names.extend_from_slice(&frames);
    inj.write(&names);
}

struct Local {
    buf: Arc<ApiBuf>,
    tid: u32,
    /// symbolName pointer -> string id (launch callbacks; CUPTI passes the kernel's
    /// registered name, stable while its module is loaded).
    syms: RefCell<FastMap<usize>>,
}

impl Local {
    fn new() -> Local {
        let buf = Arc::new(ApiBuf {
            bytes: Mutex::new(Vec::with_capacity(
                API_BUFFER_RECORDS * fmt::API_RECORD_BYTES,
            )),
        });
        if let Some(inj) = INJ.get() {
            lock(&inj.threads).push(Arc::clone(&buf));
        }
        Local {
            buf,
            tid: gettid(),
            syms: RefCell::new(FastMap::default()),
        }
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        let Some(inj) = INJ.get() else { return };
        {
            let mut b = lock(&self.buf.bytes);
            inj.write_api(&b);
            b.clear();
        }
        lock(&inj.threads).retain(|t| !Arc::ptr_eq(t, &self.buf));
    }
}

thread_local! {
    static LOCAL: Local = Local::new();
    /// Runtime API calls in progress on this thread (entered, not yet exited).
    static RUNTIME_DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// Whether driver calls made inside a runtime call are recorded (`POWERPERF_CUPTI_API=all`).
static RECORD_NESTED: AtomicBool = AtomicBool::new(false);
/// Whether API calls are recorded at all (`POWERPERF_CUPTI_API` other than `none`); with PC
/// sampling on, the callbacks of synchronisations and launches run even when not.
static RECORD_API: AtomicBool = AtomicBool::new(true);
/// (domain, cbid) -> (synchronisation, launch): where PC sampling data is taken.
static DRAIN_AT: OnceLock<HashMap<(u32, u32), (bool, bool)>> = OnceLock::new();

/// `CUPTI_CB_DOMAIN_RESOURCE` and its callback ids used here (`cupti_callbacks.h`).
const DOMAIN_RESOURCE: u32 = 3;
const CBID_CONTEXT_CREATED: u32 = 1;
const CBID_CONTEXT_DESTROY_STARTING: u32 = 2;
const CBID_MODULE_LOADED: u32 = 6;

/// Whether an API function (name as [`fmt::api_function_name`] gives it) synchronises
/// with the GPU or launches work: PC sampling takes its data at their exits.
fn sync_or_launch(name: &str) -> (bool, bool) {
    let sync = name.contains("Synchronize");
    let launch = ["cudaLaunch", "cuLaunch", "cudaGraphLaunch", "cuGraphLaunch"]
        .iter()
        .any(|p| name.starts_with(p));
    (sync, launch)
}

/// The Callback API subscriber: runtime and driver API entry and exit.
unsafe extern "C" fn api_callback(_ud: *mut c_void, domain: u32, cbid: u32, cbdata: *const c_void) {
    if cbdata.is_null() {
        return;
    }
    if domain == DOMAIN_RESOURCE {
        let Some(inj) = INJ.get() else { return };
        // SAFETY: for the resource domain cbdata is a CUpti_ResourceData.
        let r = unsafe { &*(cbdata as *const cudarc::cupti::sys::CUpti_ResourceData) };
        match cbid {
            CBID_CONTEXT_CREATED => pcsamp::context_created(inj, r.context),
            CBID_CONTEXT_DESTROY_STARTING => pcsamp::finish_ctx(inj, r.context),
            CBID_MODULE_LOADED => pcsamp::module_loaded(inj, r.context, r.resourceDescriptor),
            _ => {}
        }
        return;
    }
    // SAFETY: for the runtime and driver domains cbdata is a CUpti_CallbackData.
    let d = unsafe { &*(cbdata as *const CallbackData) };
    if d.correlation_data.is_null() {
        return;
    }
    // A driver call made by the runtime (cudaLaunchKernel -> cuLaunchKernel) shares the
    // runtime call's correlation id and lies inside it: it is not recorded, unless all
    // calls are.
    if domain == fmt::DOMAIN_RUNTIME {
        let _ = RUNTIME_DEPTH.try_with(|c| {
            c.set(if d.callback_site == CUPTI_API_ENTER {
                c.get() + 1
            } else {
                c.get().saturating_sub(1)
            })
        });
    } else if RUNTIME_DEPTH.try_with(Cell::get).unwrap_or(0) > 0
        && !RECORD_NESTED.load(Ordering::Relaxed)
    {
        return;
    }
    if d.callback_site == CUPTI_API_ENTER {
        // SAFETY: CUPTI's per-call slot, kept from entry to exit of this call.
        unsafe { *d.correlation_data = now_ns() };
        return;
    }
    let exit = now_ns();
    let Some(inj) = INJ.get() else { return };
    if inj.finished.load(Ordering::Relaxed) {
        return;
    }
    if pcsamp::on() {
        if let Some(&(sync, launch)) = DRAIN_AT.get().and_then(|m| m.get(&(domain, cbid))) {
            if sync || (launch && pcsamp::serialized()) {
                pcsamp::drain(inj, d.context as pcsamp::CuCtx);
            }
        }
        if !RECORD_API.load(Ordering::Relaxed) {
            return;
        }
    }
    // SAFETY: as above.
    let enter = unsafe { *d.correlation_data };
    let sym_ptr = d.symbol_name;
    let corr = d.correlation_id;
    let pushed = LOCAL.try_with(|l| {
        let sym = if sym_ptr.is_null() {
            0
        } else {
            let Ok(mut cache) = l.syms.try_borrow_mut() else {
                return false;
            };
            match cache.get(&(sym_ptr as usize)) {
                Some(&id) => id,
                None => {
                    let id = inj.intern_now(sym_ptr);
                    cache.insert(sym_ptr as usize, id);
                    id
                }
            }
        };
        let mut r = [0u8; fmt::API_RECORD_BYTES];
        r[0..8].copy_from_slice(&enter.to_ne_bytes());
        r[8..16].copy_from_slice(&exit.to_ne_bytes());
        r[16..20].copy_from_slice(&corr.to_ne_bytes());
        r[20..24].copy_from_slice(&l.tid.to_ne_bytes());
        r[24..28].copy_from_slice(&cbid.to_ne_bytes());
        r[28..32].copy_from_slice(&domain.to_ne_bytes());
        r[32..36].copy_from_slice(&sym.to_ne_bytes());
        let mut b = lock(&l.buf.bytes);
        b.extend_from_slice(&r);
        if b.len() >= API_BUFFER_RECORDS * fmt::API_RECORD_BYTES {
            inj.write_api(&b);
            b.clear();
        }
        true
    });
    if pushed != Ok(true) {
        inj.api_lost.fetch_add(1, Ordering::Relaxed);
    }
}

/// API calls recorded by default (names as [`fmt::api_function_name`] gives them):
/// launches, copies, memsets, host synchronisations, allocations and frees.
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

/// Set everything up (called once, from `InitializeInjection`).
/// Every function of API `domain` this CUPTI names: (cbid, CUPTI's name, the name
/// [`fmt::api_function_name`] gives it).
fn api_names(c: &Cupti, domain: u32) -> Vec<(u32, &'static [u8], String)> {
    let mut out = Vec::new();
    for cbid in 1..4096u32 {
        let mut p: *const c_char = std::ptr::null();
        // SAFETY: `p` is writable; CUPTI stores a static string or fails.
        if unsafe { (c.get_callback_name)(domain, cbid, &mut p) } != CUPTI_SUCCESS || p.is_null() {
            continue;
        }
        // SAFETY: CUPTI returns a static NUL-terminated name.
        let raw = unsafe { CStr::from_ptr(p) }.to_bytes();
        out.push((
            cbid,
            raw,
            fmt::api_function_name(domain, &String::from_utf8_lossy(raw)),
        ));
    }
    out
}

fn init(dir: PathBuf) -> Result<(), String> {
    let (cupti, lib_path) = Cupti::load()?;
    let pid = std::process::id();
    let gdir = dir.join("gpu_activity");
    let path = gdir.join(format!("{pid}.bin"));
    let file = std::fs::create_dir_all(&gdir)
        .and_then(|_| File::create(&path))
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    let mode: u32 = match std::env::var(ENV_API).as_deref() {
        Ok("none") => 0,
        Ok("all") => 2,
        Ok("runtime") => 3,
        Ok("activity") => MODE_ACTIVITY,
        _ => 1,
    };
    RECORD_NESTED.store(mode == 2, Ordering::Relaxed);
    let mut version = 0u32;
    // SAFETY: `version` is writable.
    unsafe { (cupti.get_version)(&mut version) };
    let driver_version = {
        let mut v: c_int = 0;
        let c = c"libcuda.so.1";
        // SAFETY: NUL-terminated; NOLOAD returns the driver that is loading us.
        let lib = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
        if !lib.is_null() {
            // SAFETY: cuDriverGetVersion(int*) of cuda.h; needs no cuInit.
            if let Ok(f) = unsafe {
                sym::<unsafe extern "C" fn(*mut c_int) -> c_int>(lib, "cuDriverGetVersion")
            } {
                // SAFETY: `v` is writable.
                unsafe { f(&mut v) };
            }
        }
        v.max(0) as u32
    };
    let mut head = fmt::FILE_MAGIC.to_vec();
    let fields = [
        fmt::FORMAT_VERSION,
        pid,
        version,
        driver_version,
        fmt::BINDINGS_CUDA_VERSION,
        mode,
    ];
    let fb: Vec<u8> = fields.iter().flat_map(|v| v.to_ne_bytes()).collect();
    push_frame(&mut head, tag::HEADER, &[&fb]);
    let inj = Inj {
        cupti,
        pid,
        path,
        out: Mutex::new(Some(file)),
        strings: Mutex::new(FastMap::default()),
        threads: Mutex::new(Vec::new()),
        finished: AtomicBool::new(false),
        device_seen: AtomicBool::new(false),
        dropped: AtomicU64::new(0),
        activities: AtomicU64::new(0),
        api_records: AtomicU64::new(0),
        api_lost: AtomicU64::new(0),
        unknown_layouts: Mutex::new(Vec::new()),
    };
    if INJ.set(inj).is_err() {
        return Ok(()); // initialised already
    }
    let inj = INJ.get().expect("just set");
    inj.write(&head);
    let _ = lib_path;
    let c = &inj.cupti;

    // SAFETY (all CUPTI calls below): CUPTI is loaded; arguments are valid values of the
    // documented types; the callbacks are `extern "C"` functions living for the process.
    let r = unsafe { (c.activity_register_callbacks)(buffer_requested, buffer_completed) };
    if r != CUPTI_SUCCESS {
        return Err(format!("cuptiActivityRegisterCallbacks: {}", c.error(r)));
    }
    let (kinds, unknown) = kinds_from(std::env::var(ENV_KINDS).ok().as_deref());
    if !unknown.is_empty() {
        let known: Vec<&str> = KIND_NAMES.iter().map(|k| k.0).collect();
        inj.note(&format!(
            "{ENV_KINDS}: unknown {} (known: {}, none)",
            unknown.join(","),
            known.join(",")
        ));
    }
    if std::env::var(ENV_HW_TRACE).as_deref() == Ok("1") {
        let r = c
            .enable_hw_trace
            .map(|f| unsafe { f(1) })
            .map(|r| {
                if r == CUPTI_SUCCESS {
                    "on".to_string()
                } else {
                    c.error(r)
                }
            })
            .unwrap_or_else(|| "this CUPTI has no cuptiActivityEnableHWTrace".into());
        inj.note(&format!(
            "{ENV_HW_TRACE}=1: cuptiActivityEnableHWTrace(1): {r}"
        ));
    }
    for k in kinds {
        let r = unsafe { (c.activity_enable)(k) };
        if r != CUPTI_SUCCESS {
            inj.note(&format!(
                "cuptiActivityEnable({}): {}; not recorded",
                fmt::activity_kind_name(k),
                c.error(r)
            ));
        }
    }
    let flush_ms = std::env::var(ENV_FLUSH_MS)
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .unwrap_or(1000);
    if flush_ms > 0 {
        let r = unsafe { (c.activity_flush_period)(flush_ms) };
        if r != CUPTI_SUCCESS {
            inj.note(&format!("cuptiActivityFlushPeriod: {}", c.error(r)));
        }
    }
    let pc_on = match pcsamp::setup(inj, &dir) {
        Ok(on) => on,
        Err(e) => {
            inj.note(&format!("PC sampling is off: {e}"));
            false
        }
    };
    let callbacks = mode > 0 && mode != MODE_ACTIVITY;
    RECORD_API.store(callbacks, Ordering::Relaxed);
    if mode == MODE_ACTIVITY {
        // API calls as CUPTI activity records, with the Linux thread id (gettid) that the
        // region events carry; the functions recorded are named below.
        if let Some(set_tid_type) = c.set_thread_id_type {
            let r = unsafe { set_tid_type(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM) };
            if r != CUPTI_SUCCESS {
                inj.note(&format!(
                    "cuptiSetThreadIdType(SYSTEM): {}; API calls cannot be matched to regions",
                    c.error(r)
                ));
            }
        }
        for k in [kind::RUNTIME, kind::DRIVER] {
            let r = unsafe { (c.activity_enable)(k) };
            if r != CUPTI_SUCCESS {
                inj.note(&format!(
                    "cuptiActivityEnable({}): {}; API calls not recorded",
                    fmt::activity_kind_name(k),
                    c.error(r)
                ));
            }
        }
        // The selected functions are named in API_FUNC frames; the others are switched off
        // where this CUPTI can switch them one by one, else recorded and dropped when read.
        let mut frames = Vec::new();
        let mut off = 0usize;
        let mut refused = None;
        for domain in [fmt::DOMAIN_DRIVER, fmt::DOMAIN_RUNTIME] {
            let switch = if domain == fmt::DOMAIN_RUNTIME {
                c.enable_runtime_api
            } else {
                c.enable_driver_api
            };
            for (cbid, raw, name) in api_names(c, domain) {
                if default_selection(&name) {
                    push_frame(
                        &mut frames,
                        tag::API_FUNC,
                        &[&domain.to_ne_bytes(), &cbid.to_ne_bytes(), raw],
                    );
                } else if let Some(f) = switch {
                    let r = unsafe { f(cbid, 0) };
                    if r == CUPTI_SUCCESS {
                        off += 1;
                    } else {
                        refused.get_or_insert(c.error(r));
                    }
                }
            }
        }
        if let Some(e) = refused {
            inj.note(&format!(
                "cuptiActivityEnableRuntimeApi/DriverApi: {e}; unselected API calls are recorded and dropped when read ({off} switched off)"
            ));
        }
        inj.write(&frames);
    }
    if callbacks || pc_on {
        let mut sub: *mut c_void = std::ptr::null_mut();
        let r = unsafe { (c.subscribe)(&mut sub, api_callback, std::ptr::null_mut()) };
        if r != CUPTI_SUCCESS {
            inj.note(&format!(
                "cuptiSubscribe: {}; API calls{} are not recorded (another CUPTI tool?)",
                c.error(r),
                if pc_on { " and PC samples" } else { "" }
            ));
        } else {
            let mut frames = Vec::new();
            let mut drain_at = HashMap::new();
            let domains: &[u32] = if mode == 3 {
                &[fmt::DOMAIN_RUNTIME]
            } else {
                &[fmt::DOMAIN_DRIVER, fmt::DOMAIN_RUNTIME]
            };
            for &domain in domains {
                if mode == 2 {
                    let r = unsafe { (c.enable_domain)(1, sub, domain) };
                    if r != CUPTI_SUCCESS {
                        inj.note(&format!("cuptiEnableDomain({domain}): {}", c.error(r)));
                    }
                }
                for (cbid, raw, name) in api_names(c, domain) {
                    let (sync, launch) = sync_or_launch(&name);
                    let record = callbacks && (mode == 2 || default_selection(&name));
                    let drain = pc_on && (sync || launch);
                    if mode != 2 && (record || drain) {
                        let r = unsafe { (c.enable_callback)(1, sub, domain, cbid) };
                        if r != CUPTI_SUCCESS {
                            continue;
                        }
                    }
                    if drain {
                        drain_at.insert((domain, cbid), (sync, launch));
                    }
                    if record {
                        push_frame(
                            &mut frames,
                            tag::API_FUNC,
                            &[&domain.to_ne_bytes(), &cbid.to_ne_bytes(), raw],
                        );
                    }
                }
            }
            let _ = DRAIN_AT.set(drain_at);
            if pc_on {
                for cbid in [
                    CBID_CONTEXT_CREATED,
                    CBID_CONTEXT_DESTROY_STARTING,
                    CBID_MODULE_LOADED,
                ] {
                    let r = unsafe { (c.enable_callback)(1, sub, DOMAIN_RESOURCE, cbid) };
                    if r != CUPTI_SUCCESS {
                        inj.note(&format!(
                            "cuptiEnableCallback(resource {cbid}): {}; PC sampling may miss contexts or cubins",
                            c.error(r)
                        ));
                    }
                }
            }
            inj.write(&frames);
        }
    }
    let mut b = Vec::new();
    if let Some(p) = c.clock_pair() {
        clock_frame(&mut b, p);
    }
    inj.write(&b);
    // SAFETY: `at_exit` is an `extern "C" fn()` that lives for the whole process.
    unsafe { libc::atexit(at_exit) };
    Ok(())
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
        if let Err(e) = init(PathBuf::from(dir)) {
            eprintln!("powerperf-rt: CUDA activity is not recorded: {e}");
        }
    });
    1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_env() {
        let (k, u) = kinds_from(None);
        assert_eq!(
            k,
            [
                kind::DEVICE,
                kind::CONCURRENT_KERNEL,
                kind::MEMCPY,
                kind::MEMCPY2,
                kind::MEMSET,
                kind::SYNCHRONIZATION,
                kind::MEMORY2
            ]
        );
        assert!(u.is_empty());
        assert_eq!(kinds_from(Some("none")), (vec![], vec![]));
        let (k, u) = kinds_from(Some("kernel_serial, memcpy,bogus"));
        assert_eq!(k, [kind::KERNEL, kind::MEMCPY, kind::MEMCPY2]);
        assert_eq!(u, ["bogus"]);
    }

    #[test]
    fn default_api_selection() {
        for n in [
            "cudaLaunchKernel",
            "cuLaunchKernel",
            "cudaMemcpyAsync",
            "cuMemcpyHtoD_v2",
            "cudaMemset",
            "cudaDeviceSynchronize",
            "cuCtxSynchronize_v2",
            "cudaStreamSynchronize",
            "cuEventSynchronize",
            "cudaMalloc",
            "cudaFreeHost",
            "cuMemAlloc_v2",
        ] {
            assert!(default_selection(n), "{n}");
        }
        for n in [
            "cudaGetDevice",
            "cuCtxGetCurrent",
            "cudaEventRecord",
            "cudaStreamQuery",
        ] {
            assert!(!default_selection(n), "{n}");
        }
    }
}
