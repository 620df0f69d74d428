//! Initialisation (`InitializeInjection`): CUPTI loaded, the file opened with its header,
//! the activity kinds, PC sampling and the API callbacks switched on, the exit handler
//! registered.

use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use super::activity::{buffer_completed, buffer_requested};
use super::callbacks::{
    api_callback, sync_or_launch, CBID_CONTEXT_CREATED, CBID_CONTEXT_DESTROY_STARTING,
    CBID_MODULE_LOADED, DOMAIN_RESOURCE, DRAIN_AT, RECORD_API, RECORD_NESTED,
};
use super::library::{api_names, sym, Cupti};
use super::output::{at_exit, clock_frame, push_frame, FastMap, Inj, INJ};
use super::{
    default_selection, kinds_from, pcsamp, CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM, CUPTI_SUCCESS,
    ENV_API, ENV_FLUSH_MS, ENV_HW_TRACE, ENV_KINDS, KIND_NAMES, MODE_ACTIVITY,
};
use crate::cupti::{self as fmt, kind, tag};

/// Set everything up (called once, from `InitializeInjection`).
pub(super) fn init(dir: PathBuf) -> Result<(), String> {
    let Some((inj, mode)) = open_output(&dir)? else {
        return Ok(()); // initialised already
    };
    let c = &inj.cupti;
    enable_activity(inj)?;
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
        api_as_activity(inj);
    }
    if callbacks || pc_on {
        subscribe(inj, mode, callbacks, pc_on);
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

/// `POWERPERF_CUPTI_API` ([`ENV_API`]) as the header's mode: 0 `none`, 1 `default`, 2
/// `all`, 3 `runtime`, [`MODE_ACTIVITY`] `activity`.
fn api_mode() -> u32 {
    match std::env::var(ENV_API).as_deref() {
        Ok("none") => 0,
        Ok("all") => 2,
        Ok("runtime") => 3,
        Ok("activity") => MODE_ACTIVITY,
        _ => 1,
    }
}

/// The version of the CUDA driver that is loading this library (`cuDriverGetVersion`; 0
/// when it cannot be asked).
fn driver_version() -> u32 {
    let mut v: c_int = 0;
    let c = c"libcuda.so.1";
    // SAFETY: NUL-terminated; NOLOAD returns the driver that is loading us.
    let lib = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
    if !lib.is_null() {
        // SAFETY: `lib` is the loaded driver's handle; its cuDriverGetVersion has the
        // signature of cuda.h, CUresult cuDriverGetVersion(int*), and needs no cuInit.
        let f =
            unsafe { sym::<unsafe extern "C" fn(*mut c_int) -> c_int>(lib, "cuDriverGetVersion") };
        if let Ok(f) = f {
            // SAFETY: `v` is writable.
            unsafe { f(&mut v) };
        }
    }
    v.max(0) as u32
}

/// Load CUPTI, create `gpu_activity/<pid>.bin`, set [`INJ`] and write the file's header.
/// Returns the injection and the API mode ([`api_mode`]); `None` if [`INJ`] was set
/// already.
fn open_output(dir: &Path) -> Result<Option<(&'static Inj, u32)>, String> {
    let (cupti, lib_path) = Cupti::load()?;
    let pid = std::process::id();
    let gdir = dir.join("gpu_activity");
    let path = gdir.join(format!("{pid}.bin"));
    let file = std::fs::create_dir_all(&gdir)
        .and_then(|_| File::create(&path))
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    let mode = api_mode();
    RECORD_NESTED.store(mode == 2, Ordering::Relaxed);
    let mut version = 0u32;
    // SAFETY: `version` is writable.
    unsafe { (cupti.get_version)(&mut version) };
    let driver_version = driver_version();
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
        return Ok(None);
    }
    let inj = INJ.get().expect("just set");
    inj.write(&head);
    let _ = lib_path;
    Ok(Some((inj, mode)))
}

/// Activity API: the buffer callbacks, the kinds of `POWERPERF_CUPTI_KINDS`, hardware
/// timestamps if asked for, the periodic flush. Fails only if CUPTI refuses the buffer
/// callbacks.
fn enable_activity(inj: &Inj) -> Result<(), String> {
    let c = &inj.cupti;
    // SAFETY: (this call, and the invariant of the CUPTI calls below) CUPTI is loaded;
    // arguments are valid values of the documented types; the callbacks are `extern "C"`
    // functions living for the process.
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
            // SAFETY: cuptiActivityEnableHWTrace(uint8_t) of this CUPTI, loaded for the
            // process; 1 is a valid flag.
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
        // SAFETY: cuptiActivityEnable(CUpti_ActivityKind) of the loaded CUPTI; `k` is a kind
        // of KIND_NAMES (`kinds_from` keeps only those).
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
        // SAFETY: cuptiActivityFlushPeriod(uint32_t) of the loaded CUPTI; any period is valid
        // (0 is never passed).
        let r = unsafe { (c.activity_flush_period)(flush_ms) };
        if r != CUPTI_SUCCESS {
            inj.note(&format!("cuptiActivityFlushPeriod: {}", c.error(r)));
        }
    }
    Ok(())
}

/// `POWERPERF_CUPTI_API=activity`: API calls as CUPTI activity records, with the Linux
/// thread id (gettid) that the region events carry; the functions recorded are named in
/// `API_FUNC` frames.
fn api_as_activity(inj: &Inj) {
    let c = &inj.cupti;
    // For every CUPTI call below: CUPTI is loaded; arguments are valid values of the
    // documented types.
    if let Some(set_tid_type) = c.set_thread_id_type {
        // SAFETY: cuptiSetThreadIdType(CUpti_ActivityThreadIdType) of the loaded CUPTI, with a
        // value of that enum.
        let r = unsafe { set_tid_type(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM) };
        if r != CUPTI_SUCCESS {
            inj.note(&format!(
                "cuptiSetThreadIdType(SYSTEM): {}; API calls cannot be matched to regions",
                c.error(r)
            ));
        }
    }
    for k in [kind::RUNTIME, kind::DRIVER] {
        // SAFETY: cuptiActivityEnable(CUpti_ActivityKind) of the loaded CUPTI, with RUNTIME or
        // DRIVER.
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
                // SAFETY: cuptiActivityEnableRuntimeApi/DriverApi(CUpti_CallbackId, uint8_t) of
                // the loaded CUPTI, with a callback id this CUPTI listed (api_names).
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

/// Callback API: subscribe [`api_callback`] and enable it for the API functions recorded
/// (`callbacks`) and, with PC sampling on (`pc_on`), for the synchronisations and launches
/// where samples are taken and for the resource callbacks of contexts and modules.
fn subscribe(inj: &Inj, mode: u32, callbacks: bool, pc_on: bool) {
    let c = &inj.cupti;
    let mut sub: *mut c_void = std::ptr::null_mut();
    // SAFETY: (this call, and the invariant of the CUPTI calls below) CUPTI is loaded;
    // arguments are valid values of the documented types; the callback is an `extern "C"`
    // function living for the process.
    let r = unsafe { (c.subscribe)(&mut sub, api_callback, std::ptr::null_mut()) };
    if r != CUPTI_SUCCESS {
        inj.note(&format!(
            "cuptiSubscribe: {}; API calls{} are not recorded (another CUPTI tool?)",
            c.error(r),
            if pc_on { " and PC samples" } else { "" }
        ));
        return;
    }
    let frames = enable_api_callbacks(inj, sub, mode, callbacks, pc_on);
    if pc_on {
        for cbid in [
            CBID_CONTEXT_CREATED,
            CBID_CONTEXT_DESTROY_STARTING,
            CBID_MODULE_LOADED,
        ] {
            // SAFETY: cuptiEnableCallback of the loaded CUPTI, on `sub`, the subscriber
            // cuptiSubscribe just returned, with resource callback ids of cupti_callbacks.h.
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

/// Enable subscriber `sub` on the runtime and driver API functions: those recorded (all
/// of them with mode 2, the runtime's only with mode 3) and those where PC samples are
/// taken ([`DRAIN_AT`], set here). Returns the `API_FUNC` frames naming the functions
/// recorded.
fn enable_api_callbacks(
    inj: &Inj,
    sub: *mut c_void,
    mode: u32,
    callbacks: bool,
    pc_on: bool,
) -> Vec<u8> {
    let c = &inj.cupti;
    let mut frames = Vec::new();
    let mut drain_at = HashMap::new();
    let domains: &[u32] = if mode == 3 {
        &[fmt::DOMAIN_RUNTIME]
    } else {
        &[fmt::DOMAIN_DRIVER, fmt::DOMAIN_RUNTIME]
    };
    for &domain in domains {
        if mode == 2 {
            // SAFETY: CUPTI is loaded; `sub` is its subscriber handle.
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
                // SAFETY: as above.
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
    frames
}
