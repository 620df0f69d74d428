//! powerperf-rt's region markers as NVTX ranges, for Nsight Systems and other NVTX tools.
//!
//! [`crate::nvtx`] is the other direction (this library as the NVTX *tool*). Here the
//! runtime is an NVTX v3 *instance*, the part NVTX's header-only library compiles into
//! every program (`nvtx3/nvtxDetail/nvtxImpl.h`, `nvtxInit.h`), written as a small FFI
//! instead of compiling the NVIDIA headers:
//!
//! 1. At the first marker call of the process, read `NVTX_INJECTION64_PATH` (as
//!    `nvtxInitializeInjectionLibrary` does). Unset or empty: off for the life of the
//!    process; every later marker pays one atomic load ([`on`]).
//! 2. `dlopen` it (`RTLD_LAZY`) and look up `InitializeInjectionNvtx2`. A library that also
//!    exports `pp_region_begin` is powerperf-rt itself (`libpowerperf_rt.so` or
//!    `libpowerperf_rt_cuda.so`, any copy): `powerperf collect` injects it to record the
//!    program's NVTX ranges as regions, so forwarding the markers to it would record every
//!    region twice. It is closed and the forwarding stays off.
//! 3. Call the tool's `InitializeInjectionNvtx2` with this instance's
//!    `nvtxGetExportTable`: `NVTX_ETID_CALLBACKS` gives `GetModuleFunctionTable`, which
//!    hands out one table of function-pointer slots per module (CORE, CUDA, OPENCL,
//!    CUDART, CORE2, SYNC, with the sizes of `nvtx3/nvtxDetail/nvtxTypes.h`), and
//!    `NVTX_ETID_VERSIONINFO` gives the version (3). The tool writes its functions into the
//!    slots. A return of 0 means the tool declined: the library is closed, forwarding off.
//! 4. Then each `pp_region_begin` / `_h` calls the tool's `nvtxRangePushA` slot with the
//!    region name, and each end calls `nvtxRangePop` (CORE ids 9 and 11), in the NVTX
//!    default domain. A per-thread stack of the names pushed keeps NVTX's nesting equal to
//!    the runtime's: an end pops only a name open on this thread, and an end of a region
//!    that is not the innermost pops the ranges opened inside it first (they are abandoned,
//!    as in the recording); an end of a region never begun pops nothing.
//!
//! Independent of `POWERPERF_RUN_DIR`: under `nsys profile ./app` alone (no recording) the
//! markers still appear as NVTX ranges; handles made while recording is off get ids from a
//! name table of this module.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use crate::runtime;

/// The variable NVTX reads for the tool library of a 64-bit process.
pub const ENV_INJECTION: &str = "NVTX_INJECTION64_PATH";

/// `NvtxExportTableID` values (`nvtx3/nvtxDetail/nvtxTypes.h`).
const NVTX_ETID_CALLBACKS: u32 = 1;
const NVTX_ETID_VERSIONINFO: u32 = 3;
/// `NVTX_VERSION` of the NVTX v3 headers.
const NVTX_VERSION: u32 = 3;
/// `NVTX_CB_MODULE_CORE`.
const MODULE_CORE: usize = 1;
/// `NVTX_CBID_CORE_RangePushA`, `NVTX_CBID_CORE_RangePop`.
const CBID_RANGE_PUSH_A: usize = 9;
const CBID_RANGE_POP: usize = 11;
/// `NVTX_CBID_<module>_SIZE` per `NvtxCallbackModule` (index 0: `NVTX_CB_MODULE_INVALID`;
/// then CORE, CUDA, OPENCL, CUDART, CORE2, SYNC).
const MODULE_SIZES: [usize; 7] = [0, 16, 9, 15, 7, 16, 7];
/// Slots per module: the largest size.
const MAX_SLOTS: usize = 16;

/// The function-pointer slots the tool fills (`nvtxGlobals.*_impl_fnptr` in NVTX).
static SLOTS: [[AtomicUsize; MAX_SLOTS]; 7] =
    [const { [const { AtomicUsize::new(0) }; MAX_SLOTS] }; 7];

/// Per module, `size + 1` entries: 0, the addresses of slots `1..size`, 0
/// (`functionTable_<module>` in NVTX). Built once, never freed (a tool may keep it).
static TABLES: OnceLock<[Box<[usize]>; 7]> = OnceLock::new();

/// Whether a foreign NVTX tool took the markers: [`UNKNOWN`], [`OFF`] or [`ON`].
/// Decided at the first marker call.
static STATE: AtomicU8 = AtomicU8::new(UNKNOWN);
const UNKNOWN: u8 = 0;
const OFF: u8 = 1;
const ON: u8 = 2;
static DECIDE: OnceLock<bool> = OnceLock::new();

/// `NvtxExportTableCallbacks`.
#[repr(C)]
struct ExportTableCallbacks {
    struct_size: usize,
    get_module_function_table: unsafe extern "C" fn(c_int, *mut *const usize, *mut u32) -> c_int,
}

/// `NvtxExportTableVersionInfo`.
#[repr(C)]
struct ExportTableVersionInfo {
    struct_size: usize,
    version: u32,
    reserved0: u32,
    set_injection_nvtx_version: extern "C" fn(u32),
}

static CALLBACKS: ExportTableCallbacks = ExportTableCallbacks {
    struct_size: std::mem::size_of::<ExportTableCallbacks>(),
    get_module_function_table,
};

static VERSION_INFO: ExportTableVersionInfo = ExportTableVersionInfo {
    struct_size: std::mem::size_of::<ExportTableVersionInfo>(),
    version: NVTX_VERSION,
    reserved0: 0,
    set_injection_nvtx_version,
};

extern "C" fn set_injection_nvtx_version(_version: u32) {}

/// `nvtxEtiGetModuleFunctionTable`: the slot table of `module` and its size.
unsafe extern "C" fn get_module_function_table(
    module: c_int,
    out_table: *mut *const usize,
    out_size: *mut u32,
) -> c_int {
    let Some(m) = usize::try_from(module)
        .ok()
        .filter(|&m| (1..MODULE_SIZES.len()).contains(&m))
    else {
        return 0;
    };
    let tables = TABLES.get_or_init(build_tables);
    // SAFETY: NULL-checked out-pointers from the tool (NVTX's contract).
    unsafe {
        if !out_size.is_null() {
            *out_size = MODULE_SIZES[m] as u32;
        }
        if !out_table.is_null() {
            *out_table = tables[m].as_ptr();
        }
    }
    1
}

fn build_tables() -> [Box<[usize]>; 7] {
    std::array::from_fn(|m| {
        let size = MODULE_SIZES[m];
        (0..=size)
            .map(|i| {
                if i == 0 || i == size {
                    0
                } else {
                    SLOTS[m][i].as_ptr() as usize
                }
            })
            .collect()
    })
}

/// `nvtxGetExportTable`.
unsafe extern "C" fn get_export_table(id: u32) -> *const c_void {
    match id {
        NVTX_ETID_CALLBACKS => std::ptr::from_ref(&CALLBACKS).cast(),
        NVTX_ETID_VERSIONINFO => std::ptr::from_ref(&VERSION_INFO).cast(),
        _ => std::ptr::null(),
    }
}

type InitFn = unsafe extern "C" fn(unsafe extern "C" fn(u32) -> *const c_void) -> c_int;

/// Load the tool named by `NVTX_INJECTION64_PATH` and let it fill the slots; false when
/// there is none, it is powerperf-rt itself, or it declines.
fn init() -> bool {
    let Some(path) = std::env::var_os(ENV_INJECTION) else {
        return false;
    };
    if path.is_empty() {
        return false;
    }
    let Ok(c_path) = CString::new(std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str())) else {
        return false;
    };
    // SAFETY: a NUL-terminated path; the flags NVTX uses (`NVTX_DLLOPEN`).
    let lib = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_LAZY) };
    if lib.is_null() {
        return false;
    }
    // SAFETY: `lib` is a live handle; symbol names are NUL-terminated.
    let (own, init) = unsafe {
        (
            !libc::dlsym(lib, c"pp_region_begin".as_ptr()).is_null(),
            libc::dlsym(lib, c"InitializeInjectionNvtx2".as_ptr()),
        )
    };
    if own || init.is_null() {
        // SAFETY: the handle from dlopen above, closed once.
        unsafe { libc::dlclose(lib) };
        return false;
    }
    TABLES.get_or_init(build_tables);
    // SAFETY: `InitializeInjectionNvtx2` has the type `NvtxInitializeInjectionNvtxFunc_t`
    // (NVTX's contract for every tool library).
    let init: InitFn = unsafe { std::mem::transmute::<*mut c_void, InitFn>(init) };
    // SAFETY: calling the tool's init with this instance's export table function.
    let rc = unsafe { init(get_export_table) };
    if rc == 0 {
        for row in &SLOTS {
            for s in row {
                s.store(0, Ordering::Relaxed);
            }
        }
        // SAFETY: as above; the tool declined and keeps no pointer into itself here.
        unsafe { libc::dlclose(lib) };
        return false;
    }
    // The library stays loaded for the life of the process (NVTX does the same).
    true
}

/// Whether markers go to a foreign NVTX tool (decided at the first call, cached: one
/// acquire load afterwards, a plain load on x86-64).
#[inline]
pub fn on() -> bool {
    match STATE.load(Ordering::Acquire) {
        OFF => false,
        ON => true,
        _ => decide(),
    }
}

#[cold]
#[inline(never)]
fn decide() -> bool {
    let on = *DECIDE.get_or_init(|| std::panic::catch_unwind(init).unwrap_or(false));
    STATE.store(if on { ON } else { OFF }, Ordering::Release);
    on
}

thread_local! {
    /// Names pushed on this thread through the tool, innermost last.
    static OPEN: RefCell<Vec<Box<[u8]>>> = const { RefCell::new(Vec::new()) };
}

/// Names of handles: by handle, and handles by name (those made while recording is off).
struct HandleNames {
    by_id: Vec<Option<CString>>,
    by_name: HashMap<Box<[u8]>, u32>,
}

static HANDLES: Mutex<Option<HandleNames>> = Mutex::new(None);

fn with_handles<T>(f: impl FnOnce(&mut HandleNames) -> T) -> T {
    let mut g = HANDLES.lock().unwrap_or_else(|p| p.into_inner());
    f(g.get_or_insert_with(|| HandleNames {
        by_id: vec![None],
        by_name: HashMap::new(),
    }))
}

/// Handle of `name`: the runtime's region id while recording; otherwise, when markers go
/// to an NVTX tool, an id of this module's table; else 0 (the no-op handle).
pub(crate) fn handle_of(name: &[u8]) -> Result<u32, i32> {
    let id = runtime::handle_of(name)?;
    if !on() {
        return Ok(id);
    }
    let Ok(c) = CString::new(name) else {
        return Ok(id);
    };
    Ok(with_handles(|h| {
        let id = match (id, h.by_name.get(name)) {
            (0, Some(&known)) => return known,
            (0, None) => u32::try_from(h.by_id.len()).unwrap_or(0),
            (id, _) => id,
        };
        let i = id as usize;
        if h.by_id.len() <= i {
            h.by_id.resize(i + 1, None);
        }
        h.by_id[i] = Some(c);
        h.by_name.insert(name.into(), id);
        id
    }))
}

fn push_fn() -> Option<unsafe extern "C" fn(*const c_char) -> c_int> {
    let f = SLOTS[MODULE_CORE][CBID_RANGE_PUSH_A].load(Ordering::Acquire);
    // SAFETY: a non-zero slot holds the tool's `nvtxRangePushA` implementation.
    (f != 0).then(|| unsafe {
        std::mem::transmute::<usize, unsafe extern "C" fn(*const c_char) -> c_int>(f)
    })
}

fn pop_fn() -> Option<unsafe extern "C" fn() -> c_int> {
    let f = SLOTS[MODULE_CORE][CBID_RANGE_POP].load(Ordering::Acquire);
    // SAFETY: a non-zero slot holds the tool's `nvtxRangePop` implementation.
    (f != 0).then(|| unsafe { std::mem::transmute::<usize, unsafe extern "C" fn() -> c_int>(f) })
}

fn push_cstr(name: &CStr) {
    let Some(push) = push_fn() else { return };
    // SAFETY: a NUL-terminated name, as nvtxRangePushA takes.
    unsafe { push(name.as_ptr()) };
    let _ = OPEN.try_with(|o| o.borrow_mut().push(name.to_bytes().into()));
}

/// Open the NVTX range `name` (a marker's begin). Nothing when [`on`] is false.
#[inline]
pub(crate) fn begin_cstr(name: &CStr) {
    if on() {
        push_cstr(name);
    }
}

/// [`begin_cstr`] for a name without a terminator.
#[inline]
pub(crate) fn begin_bytes(name: &[u8]) {
    if on() {
        if let Ok(c) = CString::new(name) {
            push_cstr(&c);
        }
    }
}

/// Open the NVTX range of handle `id` (unknown handles open nothing).
#[inline]
pub(crate) fn begin_handle(id: u32) {
    if on() {
        let name = with_handles(|h| h.by_id.get(id as usize).cloned().flatten());
        if let Some(c) = name {
            push_cstr(&c);
        }
    }
}

/// Close the NVTX range `name` (a marker's end): pops the ranges opened inside it, then
/// it; nothing when it is not open on this thread.
#[inline]
pub(crate) fn end_bytes(name: &[u8]) {
    if on() {
        pop_name(name);
    }
}

/// [`end_bytes`] by handle.
#[inline]
pub(crate) fn end_handle(id: u32) {
    if on() {
        let name = with_handles(|h| h.by_id.get(id as usize).cloned().flatten());
        if let Some(c) = name {
            pop_name(c.to_bytes());
        }
    }
}

fn pop_name(name: &[u8]) {
    let n = OPEN
        .try_with(|o| {
            let mut o = o.borrow_mut();
            let pos = o.iter().rposition(|n| &**n == name)?;
            let n = o.len() - pos;
            o.truncate(pos);
            Some(n)
        })
        .ok()
        .flatten()
        .unwrap_or(0);
    if let Some(pop) = pop_fn() {
        for _ in 0..n {
            // SAFETY: the tool's nvtxRangePop, no arguments.
            unsafe { pop() };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_follow_nvtx_layout() {
        let t = build_tables();
        for (m, &size) in MODULE_SIZES.iter().enumerate() {
            assert_eq!(t[m].len(), size + 1);
            if size > 0 {
                assert_eq!((t[m][0], t[m][size]), (0, 0));
            }
        }
        assert_eq!(
            t[MODULE_CORE][CBID_RANGE_POP],
            SLOTS[MODULE_CORE][CBID_RANGE_POP].as_ptr() as usize
        );
        // Export table ids other than CALLBACKS and VERSIONINFO are unknown.
        // SAFETY: plain function call.
        assert!(unsafe { get_export_table(2) }.is_null());
        let mut size = 0;
        let mut table = std::ptr::null();
        // SAFETY: out-pointers to locals.
        let r = unsafe { get_module_function_table(7, &mut table, &mut size) };
        assert_eq!(r, 0);
        // SAFETY: as above.
        let r = unsafe { get_module_function_table(5, &mut table, &mut size) };
        assert_eq!(r, 1);
        assert_eq!(size, 16);
    }
}
