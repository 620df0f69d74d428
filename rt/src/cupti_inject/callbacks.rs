//! The Callback API subscriber ([`api_callback`]): runtime and driver API entry and exit
//! into per-thread buffers, and the resource callbacks that PC sampling follows.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::ffi::{c_char, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use super::output::{gettid, lock, ApiBuf, FastMap, INJ};
use super::{pcsamp, API_BUFFER_RECORDS, CUPTI_API_ENTER};
use crate::cupti as fmt;
use crate::runtime::now_ns;

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
pub(super) static RECORD_NESTED: AtomicBool = AtomicBool::new(false);
/// Whether API calls are recorded at all (`POWERPERF_CUPTI_API` other than `none`); with PC
/// sampling on, the callbacks of synchronisations and launches run even when not.
pub(super) static RECORD_API: AtomicBool = AtomicBool::new(true);
/// (domain, cbid) -> (synchronisation, launch): where PC sampling data is taken.
pub(super) static DRAIN_AT: OnceLock<HashMap<(u32, u32), (bool, bool)>> = OnceLock::new();

/// `CUPTI_CB_DOMAIN_RESOURCE` and its callback ids used here (`cupti_callbacks.h`).
pub(super) const DOMAIN_RESOURCE: u32 = 3;
pub(super) const CBID_CONTEXT_CREATED: u32 = 1;
pub(super) const CBID_CONTEXT_DESTROY_STARTING: u32 = 2;
pub(super) const CBID_MODULE_LOADED: u32 = 6;

/// Whether an API function (name as [`fmt::api_function_name`] gives it) synchronises
/// with the GPU or launches work: PC sampling takes its data at their exits.
pub(super) fn sync_or_launch(name: &str) -> (bool, bool) {
    let sync = name.contains("Synchronize");
    let launch = ["cudaLaunch", "cuLaunch", "cudaGraphLaunch", "cuGraphLaunch"]
        .iter()
        .any(|p| name.starts_with(p));
    (sync, launch)
}

/// The Callback API subscriber: runtime and driver API entry and exit.
pub(super) unsafe extern "C" fn api_callback(
    _ud: *mut c_void,
    domain: u32,
    cbid: u32,
    cbdata: *const c_void,
) {
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
