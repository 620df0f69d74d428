//! NVTX v3 injection: NVTX ranges become powerperf regions, with no change to the program.
//!
//! A program (or library: PyTorch, the Python `nvtx` package, ...) built with the NVTX v3
//! headers (`nvtx3/nvToolsExt.h`, header-only) loads, at its first NVTX call, the shared
//! library named by `NVTX_INJECTION64_PATH` and calls its exported
//! `int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t)`
//! (`nvtx3/nvtxDetail/nvtxInit.h`, `nvtxInitializeInjectionLibrary`). Pointing that variable
//! at `libpowerperf_rt.so` makes this crate the NVTX tool: [`InitializeInjectionNvtx2`] asks
//! the export table `NVTX_ETID_CALLBACKS` for the function tables of the modules
//! `NVTX_CB_MODULE_CORE` and `NVTX_CB_MODULE_CORE2` and fills the range slots
//! (`nvtx3/nvtxDetail/nvtxTypes.h`: `NvtxExportTableCallbacks`, `NvtxCallbackIdCore`,
//! `NvtxCallbackIdCore2`; `nvtx3/nvtxDetail/nvtxImpl.h`: `nvtxEtiGetModuleFunctionTable`).
//! Every NVTX instance in the process (each library that includes the headers has its own)
//! calls the init once; each gets the same functions.
//!
//! Mapping:
//! * `nvtxRangePush{A,W,Ex}`, `nvtxDomainRangePushEx` → begin of the region named by the
//!   message; `nvtxRangePop`, `nvtxDomainRangePop` → end of the innermost range pushed on
//!   this thread in that domain (a per-thread stack of `(domain, region id)`; NVTX
//!   push/pop stacks are per thread and per domain; the NULL domain is the one of the
//!   non-domain calls, `nvtx3/nvToolsExt.h`).
//! * `nvtxRangeStart{A,W,Ex}`, `nvtxDomainRangeStartEx` / `nvtxRangeEnd`,
//!   `nvtxDomainRangeEnd` → begin and end of a region on the calling thread. These ranges
//!   may overlap and may end on another thread; powerperf regions nest per thread, so an
//!   end on the starting thread is recorded with the runtime's nesting rules (an end that
//!   is not the innermost closes the range and abandons what was opened inside it), and an
//!   end on another thread is not recorded (counted in [`cross_thread_ends`]; the range
//!   stays open on its thread until a region around it ends or the thread exits, `X`).
//! * Messages: `NVTX_MESSAGE_TYPE_ASCII` (bytes as given), `NVTX_MESSAGE_TYPE_UNICODE`
//!   (`wchar_t`, UTF-32 on Linux, converted to UTF-8), `NVTX_MESSAGE_TYPE_REGISTERED`
//!   (`nvtxDomainRegisterString{A,W}`: the handle returned is the powerperf region id, so a
//!   registered push costs no name lookup). No message, an empty one, or an event
//!   attribute structure whose `size` is too small, is the region `(unnamed)`.
//! * `nvtxDomainCreate{A,W}` return distinct handles (the domain name is not part of the
//!   region name); `nvtxDomainDestroy` is accepted.
//! * Not mapped (NVTX turns the slots left empty into no-ops): markers (`nvtxMark*`, the
//!   runtime has no point events), category and thread names, resources, the CUDA,
//!   OpenCL, CUDA runtime and sync modules, and the payload/counter extensions.
//!
//! With `POWERPERF_RUN_DIR` unset (or unusable) the init returns 0: NVTX then unloads
//! the library and turns every NVTX call into a no-op (`nvtxInitOnce`: "If that function
//! returns non-zero, that indicates a tool successfully initialized ... If it returns zero,
//! the tool init was unsuccessful, so init aborts and rolls back"), so an unrecorded
//! program pays nothing. No callback unwinds into the caller: a panic is caught and the
//! call does nothing.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::runtime;

/// Region name for a range without a message.
pub const UNNAMED: &str = "(unnamed)";

/// `NVTX_ETID_CALLBACKS` (`nvtx3/nvtxDetail/nvtxTypes.h`, `NvtxExportTableID`).
const NVTX_ETID_CALLBACKS: u32 = 1;
/// `NvtxCallbackModule` values.
const NVTX_CB_MODULE_CORE: c_int = 1;
const NVTX_CB_MODULE_CORE2: c_int = 5;

/// `NvtxCallbackIdCore` values.
mod core {
    pub const RANGE_START_EX: usize = 4;
    pub const RANGE_START_A: usize = 5;
    pub const RANGE_START_W: usize = 6;
    pub const RANGE_END: usize = 7;
    pub const RANGE_PUSH_EX: usize = 8;
    pub const RANGE_PUSH_A: usize = 9;
    pub const RANGE_PUSH_W: usize = 10;
    pub const RANGE_POP: usize = 11;
}

/// `NvtxCallbackIdCore2` values.
mod core2 {
    pub const DOMAIN_RANGE_START_EX: usize = 2;
    pub const DOMAIN_RANGE_END: usize = 3;
    pub const DOMAIN_RANGE_PUSH_EX: usize = 4;
    pub const DOMAIN_RANGE_POP: usize = 5;
    pub const DOMAIN_REGISTER_STRING_A: usize = 10;
    pub const DOMAIN_REGISTER_STRING_W: usize = 11;
    pub const DOMAIN_CREATE_A: usize = 12;
    pub const DOMAIN_CREATE_W: usize = 13;
    pub const DOMAIN_DESTROY: usize = 14;
}

/// `nvtxMessageType_t` values (`nvtx3/nvToolsExt.h`).
const NVTX_MESSAGE_TYPE_ASCII: i32 = 1;
const NVTX_MESSAGE_TYPE_UNICODE: i32 = 2;
const NVTX_MESSAGE_TYPE_REGISTERED: i32 = 3;

/// `nvtxEventAttributes_v2` (`nvtx3/nvToolsExt.h`); `message` is the union
/// `nvtxMessageValue_t` (`const char*`, `const wchar_t*` or `nvtxStringHandle_t`).
#[repr(C)]
pub struct EventAttributes {
    pub version: u16,
    pub size: u16,
    pub category: u32,
    pub color_type: i32,
    pub color: u32,
    pub payload_type: i32,
    pub reserved0: i32,
    pub payload: u64,
    pub message_type: i32,
    pub message: *const c_void,
}

/// `NvtxExportTableCallbacks` (`nvtx3/nvtxDetail/nvtxTypes.h`).
#[repr(C)]
struct ExportTableCallbacks {
    struct_size: usize,
    get_module_function_table: Option<
        unsafe extern "C" fn(
            module: c_int,
            out_table: *mut *mut *mut *const c_void,
            out_size: *mut u32,
        ) -> c_int,
    >,
}

/// `NvtxGetExportTableFunc_t`.
pub type GetExportTable = Option<unsafe extern "C" fn(export_table_id: u32) -> *const c_void>;

/// `nvtxDomainHandle_t` / `nvtxStringHandle_t`: opaque pointers the tool hands out.
type Domain = *const c_void;

static CROSS_THREAD_ENDS: AtomicU64 = AtomicU64::new(0);
static NEXT_DOMAIN: AtomicUsize = AtomicUsize::new(1);

/// `nvtxRangeEnd` calls not recorded because they ran on another thread than the start.
pub fn cross_thread_ends() -> u64 {
    CROSS_THREAD_ENDS.load(Ordering::Relaxed)
}

thread_local! {
    /// Ranges pushed through NVTX on this thread: (domain, region id), innermost last.
    static STACK: RefCell<Vec<(usize, u32)>> = const { RefCell::new(Vec::new()) };
}

/// Run `f`; on a panic return `default` (never unwind into C).
fn guard<T>(default: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(default)
}

fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

/// Region id of a name (0 when the runtime is off or the table is full).
fn id_of(name: &[u8]) -> u32 {
    let name = if name.is_empty() {
        UNNAMED.as_bytes()
    } else {
        name
    };
    runtime::id_of(name).unwrap_or(0)
}

/// Longest message read (characters), against a missing terminator.
const MAX_MESSAGE: usize = 1 << 16;

/// # Safety
/// `s` is NULL or a NUL-terminated string.
unsafe fn ascii_id(s: *const c_char) -> u32 {
    if s.is_null() {
        return id_of(b"");
    }
    // SAFETY: the caller passes a NUL-terminated string (NVTX API contract).
    id_of(unsafe { CStr::from_ptr(s) }.to_bytes())
}

/// UTF-8 of a NUL-terminated `wchar_t` string (UTF-32 on Linux; invalid code points
/// become U+FFFD).
///
/// # Safety
/// `s` is NULL or a NUL-terminated `wchar_t` string.
unsafe fn wide_to_string(s: *const libc::wchar_t) -> String {
    let mut out = String::new();
    if s.is_null() {
        return out;
    }
    for i in 0..MAX_MESSAGE {
        // SAFETY: within the string: every element before the terminator is readable.
        let c = unsafe { *s.add(i) };
        if c == 0 {
            break;
        }
        out.push(char::from_u32(c as u32).unwrap_or(char::REPLACEMENT_CHARACTER));
    }
    out
}

/// # Safety
/// `s` is NULL or a NUL-terminated `wchar_t` string.
unsafe fn wide_id(s: *const libc::wchar_t) -> u32 {
    // SAFETY: forwarded contract.
    id_of(unsafe { wide_to_string(s) }.as_bytes())
}

/// Region id named by an event attribute structure.
///
/// # Safety
/// `attr` is NULL or points to an `nvtxEventAttributes_t` whose message matches its type.
unsafe fn attr_id(attr: *const EventAttributes) -> u32 {
    if attr.is_null() {
        return id_of(b"");
    }
    // SAFETY: the first 4 bytes (version, size) exist in every version of the struct.
    let size = unsafe { (*attr).size } as usize;
    if size < std::mem::size_of::<EventAttributes>() {
        return id_of(b"");
    }
    // SAFETY: the struct is at least as large as the v2 layout.
    let (ty, msg) = unsafe { ((*attr).message_type, (*attr).message) };
    match ty {
        // SAFETY: the message type says which union member is set.
        NVTX_MESSAGE_TYPE_ASCII => unsafe { ascii_id(msg.cast()) },
        // SAFETY: as above: the type says the message is a wide string.
        NVTX_MESSAGE_TYPE_UNICODE => unsafe { wide_id(msg.cast()) },
        NVTX_MESSAGE_TYPE_REGISTERED => match u32::try_from(msg as usize) {
            // Our handles are region ids; 0 (NULL) or foreign values fall back.
            Ok(id) if id != 0 => id,
            _ => id_of(b""),
        },
        _ => id_of(b""),
    }
}

/// Push region `id` in `domain` on this thread; the NVTX level (0-based) or -1.
fn push(domain: Domain, id: u32) -> c_int {
    let _ = runtime::begin_id(id);
    STACK
        .try_with(|s| {
            let mut s = s.borrow_mut();
            s.push((domain as usize, id));
            c_int::try_from(s.len() - 1).unwrap_or(c_int::MAX)
        })
        .unwrap_or(-1)
}

/// Pop the innermost range of `domain` on this thread; its level, or -1 when none is open.
fn pop(domain: Domain) -> c_int {
    let popped = STACK
        .try_with(|s| {
            let mut s = s.borrow_mut();
            let pos = s.iter().rposition(|&(d, _)| d == domain as usize)?;
            let (_, id) = s.remove(pos);
            Some((id, pos))
        })
        .ok()
        .flatten();
    match popped {
        Some((id, level)) => {
            let _ = runtime::end_id(id);
            c_int::try_from(level).unwrap_or(c_int::MAX)
        }
        None => -1,
    }
}

/// Begin region `id` as a start/end range; the range id encodes thread and region.
fn start(id: u32) -> u64 {
    if id == 0 || runtime::begin_id(id) != 0 {
        return 0;
    }
    u64::from(gettid()) << 32 | u64::from(id)
}

fn end(range: u64) {
    let id = range as u32;
    if id == 0 {
        return;
    }
    if (range >> 32) as u32 == gettid() {
        let _ = runtime::end_id(id);
    } else {
        CROSS_THREAD_ENDS.fetch_add(1, Ordering::Relaxed);
    }
}

// ---- CORE module callbacks (signatures: `nvtx3/nvtxDetail/nvtxTypes.h`) ----

unsafe extern "C" fn range_push_a(message: *const c_char) -> c_int {
    // SAFETY: NVTX API contract for nvtxRangePushA.
    guard(-1, || push(std::ptr::null(), unsafe { ascii_id(message) }))
}

unsafe extern "C" fn range_push_w(message: *const libc::wchar_t) -> c_int {
    // SAFETY: NVTX API contract for nvtxRangePushW.
    guard(-1, || push(std::ptr::null(), unsafe { wide_id(message) }))
}

unsafe extern "C" fn range_push_ex(attr: *const EventAttributes) -> c_int {
    // SAFETY: NVTX API contract for nvtxRangePushEx.
    guard(-1, || push(std::ptr::null(), unsafe { attr_id(attr) }))
}

extern "C" fn range_pop() -> c_int {
    guard(-1, || pop(std::ptr::null()))
}

unsafe extern "C" fn range_start_a(message: *const c_char) -> u64 {
    // SAFETY: NVTX API contract for nvtxRangeStartA.
    guard(0, || start(unsafe { ascii_id(message) }))
}

unsafe extern "C" fn range_start_w(message: *const libc::wchar_t) -> u64 {
    // SAFETY: NVTX API contract for nvtxRangeStartW.
    guard(0, || start(unsafe { wide_id(message) }))
}

unsafe extern "C" fn range_start_ex(attr: *const EventAttributes) -> u64 {
    // SAFETY: NVTX API contract for nvtxRangeStartEx.
    guard(0, || start(unsafe { attr_id(attr) }))
}

extern "C" fn range_end(range: u64) {
    guard((), || end(range))
}

// ---- CORE2 module callbacks (domains) ----

unsafe extern "C" fn domain_range_push_ex(domain: Domain, attr: *const EventAttributes) -> c_int {
    // SAFETY: NVTX API contract for nvtxDomainRangePushEx.
    guard(-1, || push(domain, unsafe { attr_id(attr) }))
}

extern "C" fn domain_range_pop(domain: Domain) -> c_int {
    guard(-1, || pop(domain))
}

unsafe extern "C" fn domain_range_start_ex(_domain: Domain, attr: *const EventAttributes) -> u64 {
    // SAFETY: NVTX API contract for nvtxDomainRangeStartEx.
    guard(0, || start(unsafe { attr_id(attr) }))
}

extern "C" fn domain_range_end(_domain: Domain, range: u64) {
    guard((), || end(range))
}

unsafe extern "C" fn domain_register_string_a(_domain: Domain, s: *const c_char) -> Domain {
    // SAFETY: NVTX API contract for nvtxDomainRegisterStringA.
    guard(std::ptr::null(), || unsafe { ascii_id(s) } as usize
        as Domain)
}

unsafe extern "C" fn domain_register_string_w(_domain: Domain, s: *const libc::wchar_t) -> Domain {
    // SAFETY: NVTX API contract for nvtxDomainRegisterStringW.
    guard(std::ptr::null(), || unsafe { wide_id(s) } as usize
        as Domain)
}

extern "C" fn domain_create(_name: *const c_void) -> Domain {
    NEXT_DOMAIN.fetch_add(1, Ordering::Relaxed) as Domain
}

extern "C" fn domain_destroy(_domain: Domain) {}

/// Fill the slots `slots` of module `module` (skipping ids the table does not have).
///
/// # Safety
/// `get_table` is the `GetModuleFunctionTable` of a live NVTX instance.
unsafe fn fill(
    get_table: unsafe extern "C" fn(c_int, *mut *mut *mut *const c_void, *mut u32) -> c_int,
    module: c_int,
    slots: &[(usize, *const c_void)],
) -> bool {
    let mut table: *mut *mut *const c_void = std::ptr::null_mut();
    let mut size: u32 = 0;
    // SAFETY: out-pointers to locals.
    if unsafe { get_table(module, &mut table, &mut size) } == 0 || table.is_null() {
        return false;
    }
    for &(cbid, f) in slots {
        if cbid >= size as usize {
            continue;
        }
        // SAFETY: `table` has `size` entries (`nvtxEtiGetModuleFunctionTable`), each NULL or
        // the address of one function pointer slot of the NVTX instance.
        unsafe {
            let slot = *table.add(cbid);
            if !slot.is_null() {
                *slot = f;
            }
        }
    }
    true
}

/// NVTX injection entry point (`NvtxInitializeInjectionNvtxFunc_t`,
/// `nvtx3/nvtxDetail/nvtxTypes.h`), called by each NVTX instance at its first NVTX call
/// when `NVTX_INJECTION64_PATH` names this library.
///
/// Returns 1 when the range callbacks are installed, 0 when recording is off
/// (`POWERPERF_RUN_DIR` unset or unusable: NVTX then unloads the library and makes every
/// NVTX call a no-op) or the NVTX instance offers no callback table.
///
/// # Safety
/// `get_export_table` is NULL or the export table function of an NVTX v3 instance.
#[no_mangle]
pub unsafe extern "C" fn InitializeInjectionNvtx2(get_export_table: GetExportTable) -> c_int {
    guard(0, || {
        if !runtime::enabled() {
            return 0;
        }
        let Some(get) = get_export_table else {
            return 0;
        };
        // SAFETY: NVTX's nvtxGetExportTable; returns NULL for an unknown id.
        let cb = unsafe { get(NVTX_ETID_CALLBACKS) }.cast::<ExportTableCallbacks>();
        if cb.is_null() {
            return 0;
        }
        // SAFETY: the table starts with its size; the function is read only if present.
        let get_table = unsafe {
            if (*cb).struct_size < std::mem::size_of::<ExportTableCallbacks>() {
                return 0;
            }
            (*cb).get_module_function_table
        };
        let Some(get_table) = get_table else {
            return 0;
        };
        type PushA = unsafe extern "C" fn(*const c_char) -> c_int;
        type PushW = unsafe extern "C" fn(*const libc::wchar_t) -> c_int;
        type PushEx = unsafe extern "C" fn(*const EventAttributes) -> c_int;
        type StartA = unsafe extern "C" fn(*const c_char) -> u64;
        type StartW = unsafe extern "C" fn(*const libc::wchar_t) -> u64;
        type StartEx = unsafe extern "C" fn(*const EventAttributes) -> u64;
        type DPushEx = unsafe extern "C" fn(Domain, *const EventAttributes) -> c_int;
        type DStartEx = unsafe extern "C" fn(Domain, *const EventAttributes) -> u64;
        type DRegA = unsafe extern "C" fn(Domain, *const c_char) -> Domain;
        type DRegW = unsafe extern "C" fn(Domain, *const libc::wchar_t) -> Domain;
        let core_slots: [(usize, *const c_void); 8] = [
            (core::RANGE_PUSH_A, range_push_a as PushA as *const c_void),
            (core::RANGE_PUSH_W, range_push_w as PushW as *const c_void),
            (
                core::RANGE_PUSH_EX,
                range_push_ex as PushEx as *const c_void,
            ),
            (
                core::RANGE_POP,
                range_pop as extern "C" fn() -> c_int as *const c_void,
            ),
            (
                core::RANGE_START_A,
                range_start_a as StartA as *const c_void,
            ),
            (
                core::RANGE_START_W,
                range_start_w as StartW as *const c_void,
            ),
            (
                core::RANGE_START_EX,
                range_start_ex as StartEx as *const c_void,
            ),
            (
                core::RANGE_END,
                range_end as extern "C" fn(u64) as *const c_void,
            ),
        ];
        let core2_slots: [(usize, *const c_void); 9] = [
            (
                core2::DOMAIN_RANGE_PUSH_EX,
                domain_range_push_ex as DPushEx as *const c_void,
            ),
            (
                core2::DOMAIN_RANGE_POP,
                domain_range_pop as extern "C" fn(Domain) -> c_int as *const c_void,
            ),
            (
                core2::DOMAIN_RANGE_START_EX,
                domain_range_start_ex as DStartEx as *const c_void,
            ),
            (
                core2::DOMAIN_RANGE_END,
                domain_range_end as extern "C" fn(Domain, u64) as *const c_void,
            ),
            (
                core2::DOMAIN_REGISTER_STRING_A,
                domain_register_string_a as DRegA as *const c_void,
            ),
            (
                core2::DOMAIN_REGISTER_STRING_W,
                domain_register_string_w as DRegW as *const c_void,
            ),
            (
                core2::DOMAIN_CREATE_A,
                domain_create as extern "C" fn(*const c_void) -> Domain as *const c_void,
            ),
            (
                core2::DOMAIN_CREATE_W,
                domain_create as extern "C" fn(*const c_void) -> Domain as *const c_void,
            ),
            (
                core2::DOMAIN_DESTROY,
                domain_destroy as extern "C" fn(Domain) as *const c_void,
            ),
        ];
        // SAFETY: `get_table` comes from the NVTX instance's export table.
        let core_ok = unsafe { fill(get_table, NVTX_CB_MODULE_CORE, &core_slots) };
        // SAFETY: as above; an instance without CORE2 (NVTX v1) keeps the CORE slots.
        let core2_ok = unsafe { fill(get_table, NVTX_CB_MODULE_CORE2, &core2_slots) };
        c_int::from(core_ok || core2_ok)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_attributes_layout_matches_nvtx_v2() {
        // nvtxEventAttributes_v2: 48 bytes, messageType at 32, message at 40 (x86_64).
        assert_eq!(std::mem::size_of::<EventAttributes>(), 48);
        assert_eq!(std::mem::offset_of!(EventAttributes, payload), 24);
        assert_eq!(std::mem::offset_of!(EventAttributes, message_type), 32);
        assert_eq!(std::mem::offset_of!(EventAttributes, message), 40);
    }

    #[test]
    fn wide_strings_convert() {
        let w: Vec<libc::wchar_t> = "été ✓\0".chars().map(|c| c as libc::wchar_t).collect();
        // SAFETY: NUL-terminated.
        assert_eq!(unsafe { wide_to_string(w.as_ptr()) }, "été ✓");
        // SAFETY: NULL is allowed.
        assert_eq!(unsafe { wide_to_string(std::ptr::null()) }, "");
    }
}
