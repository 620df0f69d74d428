//! The CUPTI library, loaded at run time (`dlopen`; search order: the module docs), and the
//! functions of it that the injection calls.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::{Path, PathBuf};

use super::{pcsamp, CUPTI_SUCCESS, ENV_CUPTI_LIB};
use crate::cupti as fmt;
use crate::runtime::now_ns;

pub(super) type BufferRequested = unsafe extern "C" fn(*mut *mut u8, *mut usize, *mut usize);
pub(super) type BufferCompleted = unsafe extern "C" fn(*mut c_void, u32, *mut u8, usize, usize);
pub(super) type ApiCallback = unsafe extern "C" fn(*mut c_void, u32, u32, *const c_void);

/// The CUPTI functions used (`cupti_activity.h`, `cupti_callbacks.h`, `cupti_result.h`,
/// `cupti_version.h`); enums pass as `u32`, `CUptiResult` returns as `u32`.
pub(super) struct Cupti {
    pub(super) get_version: unsafe extern "C" fn(*mut u32) -> u32,
    pub(super) get_result_string: unsafe extern "C" fn(u32, *mut *const c_char) -> u32,
    pub(super) activity_enable: unsafe extern "C" fn(u32) -> u32,
    pub(super) activity_register_callbacks:
        unsafe extern "C" fn(BufferRequested, BufferCompleted) -> u32,
    pub(super) activity_get_next_record: unsafe extern "C" fn(*mut u8, usize, *mut *mut u8) -> u32,
    pub(super) activity_get_num_dropped_records:
        unsafe extern "C" fn(*mut c_void, u32, *mut usize) -> u32,
    pub(super) activity_flush_all: unsafe extern "C" fn(u32) -> u32,
    pub(super) activity_flush_period: unsafe extern "C" fn(u32) -> u32,
    pub(super) get_timestamp: unsafe extern "C" fn(*mut u64) -> u32,
    pub(super) subscribe: unsafe extern "C" fn(*mut *mut c_void, ApiCallback, *mut c_void) -> u32,
    pub(super) enable_callback: unsafe extern "C" fn(u32, *mut c_void, u32, u32) -> u32,
    pub(super) enable_domain: unsafe extern "C" fn(u32, *mut c_void, u32) -> u32,
    pub(super) get_callback_name: unsafe extern "C" fn(u32, u32, *mut *const c_char) -> u32,
    /// `cuptiSetThreadIdType` (CUPTI 4.0 and later).
    pub(super) set_thread_id_type: Option<unsafe extern "C" fn(u32) -> u32>,
    /// `cuptiActivityEnableRuntimeApi` / `cuptiActivityEnableDriverApi` (CUDA 12.x and
    /// later): per-function switches of the RUNTIME / DRIVER activity kinds.
    pub(super) enable_runtime_api: Option<unsafe extern "C" fn(u32, u8) -> u32>,
    pub(super) enable_driver_api: Option<unsafe extern "C" fn(u32, u8) -> u32>,
    /// `cuptiActivityEnableHWTrace` (kernel timestamps from the Hardware Event System).
    pub(super) enable_hw_trace: Option<unsafe extern "C" fn(u8) -> u32>,
    /// The PC Sampling API (`cupti_pcsampling.h`); `None` in a CUPTI without it.
    pub(super) pc: Option<pcsamp::PcFns>,
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
pub(super) unsafe fn sym<F: Copy>(lib: *mut c_void, name: &str) -> Result<F, String> {
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
    pub(super) fn load() -> Result<(Cupti, String), String> {
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

    pub(super) fn error(&self, r: u32) -> String {
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
    pub(super) fn clock_pair(&self) -> Option<(u64, u64, u64)> {
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

/// Every function of API `domain` this CUPTI names: (cbid, CUPTI's name, the name
/// [`fmt::api_function_name`] gives it).
pub(super) fn api_names(c: &Cupti, domain: u32) -> Vec<(u32, &'static [u8], String)> {
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
