//! The C ABI declared in `include/powerperf.h`.

use std::ffi::{c_char, c_int, CStr};

use crate::{codes, nvtx_emit, runtime};

/// Region handle: a positive region id, 0 when the runtime is off (a valid handle that
/// does nothing), or a negative error code.
pub type PpHandle = i32;

fn name_bytes<'a>(name: *const c_char) -> Option<&'a [u8]> {
    if name.is_null() {
        return None;
    }
    // SAFETY: the caller passes a NUL-terminated string (documented in the header).
    Some(unsafe { CStr::from_ptr(name) }.to_bytes())
}

fn by_name(name: *const c_char, f: fn(u32) -> i32) -> c_int {
    if !runtime::enabled() {
        return codes::PP_OK;
    }
    let Some(bytes) = name_bytes(name) else {
        return codes::PP_EINVAL;
    };
    match runtime::id_of(bytes) {
        Ok(0) => codes::PP_OK,
        Ok(id) => f(id),
        Err(e) => e,
    }
}

/// Begin region `name` on the calling thread.
///
/// # Safety
/// `name` is NULL or points to a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pp_region_begin(name: *const c_char) -> c_int {
    let rc = by_name(name, runtime::begin_id);
    if !name.is_null() && nvtx_emit::on() {
        // SAFETY: as above.
        nvtx_emit::begin_cstr(unsafe { CStr::from_ptr(name) });
    }
    rc
}

/// End region `name` on the calling thread.
///
/// # Safety
/// `name` is NULL or points to a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pp_region_end(name: *const c_char) -> c_int {
    let rc = by_name(name, runtime::end_id);
    if nvtx_emit::on() {
        if let Some(bytes) = name_bytes(name) {
            nvtx_emit::end_bytes(bytes);
        }
    }
    rc
}

/// Handle for region `name`, valid in every thread for the life of the process.
///
/// # Safety
/// `name` is NULL or points to a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pp_region_handle(name: *const c_char) -> PpHandle {
    if !runtime::enabled() && !nvtx_emit::on() {
        return 0;
    }
    let Some(bytes) = name_bytes(name) else {
        return codes::PP_EINVAL;
    };
    match nvtx_emit::handle_of(bytes) {
        Ok(id) => i32::try_from(id).unwrap_or(codes::PP_ENOSPC),
        Err(e) => e,
    }
}

fn handle_id(h: PpHandle) -> Option<u32> {
    u32::try_from(h).ok()
}

/// Begin the region of handle `h` on the calling thread.
#[no_mangle]
pub extern "C" fn pp_region_begin_h(h: PpHandle) -> c_int {
    match handle_id(h) {
        Some(id) => {
            let rc = runtime::begin_id(id);
            nvtx_emit::begin_handle(id);
            rc
        }
        None => codes::PP_EINVAL,
    }
}

/// End the region of handle `h` on the calling thread.
#[no_mangle]
pub extern "C" fn pp_region_end_h(h: PpHandle) -> c_int {
    match handle_id(h) {
        Some(id) => {
            let rc = runtime::end_id(id);
            nvtx_emit::end_handle(id);
            rc
        }
        None => codes::PP_EINVAL,
    }
}

/// Write every thread's buffered events to the events file.
#[no_mangle]
pub extern "C" fn pp_flush() {
    let _ = std::panic::catch_unwind(runtime::flush_all);
}

/// 1 when regions are recorded (`POWERPERF_RUN_DIR` set and usable), else 0.
#[no_mangle]
pub extern "C" fn pp_enabled() -> c_int {
    c_int::from(runtime::enabled())
}
