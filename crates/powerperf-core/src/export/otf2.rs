//! OTF2 archives (the Open Trace Format 2 of Score-P, Vampir, Scalasca), written through
//! the OTF2 library (Debian's `libopen-trace-format2-10`, OTF2 3.0.2), loaded at run time
//! with libloading as nvml-wrapper loads NVML: powerperf builds and installs without it,
//! and `export --format otf2` without it names the package to install.
//!
//! The calls are those of the OTF2 writer example of the OTF2 3.0 documentation ("Usage in
//! writing mode – a simple example"): `OTF2_Archive_Open` (POSIX substrate, no
//! compression), flush callbacks, serial collective callbacks, one event writer per
//! location, then the local definition writers, then the global definitions (clock
//! properties, strings, system tree, location groups, locations, regions, metric members
//! and classes), `OTF2_Archive_Close`.
//!
//! Layout: a system tree node per host; a location group (`OTF2_LOCATION_GROUP_TYPE_PROCESS`)
//! per process (per rank of a job), with a CPU thread location per thread (regions and
//! CUDA API calls as Enter/Leave, properly nested) and a metric location (the timeline's
//! columns as Metric events: one metric class per column, `OTF2_METRIC_ABSOLUTE_POINT` for
//! power, clocks, utilisation and rates, `OTF2_METRIC_ACCUMULATED_START` for energy, with
//! its unit); an accelerator location group per GPU of a process, with one
//! `OTF2_LOCATION_TYPE_ACCELERATOR_STREAM` location per stream (kernels, copies, memsets as
//! Enter/Leave of regions of paradigm CUDA). Times are CLOCK_MONOTONIC ns (timer
//! resolution 10^9, global offset the first event). The archive's properties name the tool
//! (`creator`), the run (`description`) and the host (`machine name`).

use super::{edges, CounterMode, Edge, SliceKind, Trace};
use anyhow::{anyhow, bail, Context, Result};
use std::collections::HashMap;
use std::ffi::{c_char, c_void, CString};
use std::path::{Path, PathBuf};

/// The shared object names tried, in order.
pub const LIBRARY_NAMES: [&str; 2] = ["libopen-trace-format2.so.10", "libopen-trace-format2.so"];

/// An environment variable naming the OTF2 shared object to load instead of
/// [`LIBRARY_NAMES`] (an OTF2 3.x built elsewhere).
pub const LIBRARY_ENV: &str = "POWERPERF_OTF2_LIBRARY";

/// What to install when the library is missing.
pub const PACKAGE_HINT: &str = "install the OTF2 library: Debian/Ubuntu `apt-get install \
    libopen-trace-format2-10` (or libopen-trace-format2-dev; otf2-tools for otf2-print), \
    or build OTF2 3.x from https://www.vi-hps.org/projects/score-p and put \
    libopen-trace-format2.so on the library path";

type Archive = c_void;
type Writer = c_void;
type ErrorCode = i32;

/// `OTF2_FlushCallbacks`.
#[repr(C)]
struct FlushCallbacks {
    pre: extern "C" fn(*mut c_void, u8, u64, *mut c_void, bool) -> u8,
    post: extern "C" fn(*mut c_void, u8, u64) -> u64,
}

extern "C" fn pre_flush(_: *mut c_void, _: u8, _: u64, _: *mut c_void, _: bool) -> u8 {
    1 // OTF2_FLUSH
}

extern "C" fn post_flush(_: *mut c_void, _: u8, _: u64) -> u64 {
    0
}

/// The flush callbacks: OTF2 keeps the pointer (until the archive is closed), so they live
/// in a static.
static FLUSH_CALLBACKS: FlushCallbacks = FlushCallbacks {
    pre: pre_flush,
    post: post_flush,
};

/// `OTF2_MetricValue`.
#[repr(C)]
#[derive(Clone, Copy)]
union MetricValue {
    floating_point: f64,
}

// OTF2 3.0 constants (OTF2_GeneralDefinitions.h, OTF2_Definitions.h).
const FILEMODE_WRITE: u8 = 0;
const SUBSTRATE_POSIX: u8 = 1;
const COMPRESSION_NONE: u8 = 1;
const CHUNK_EVENTS: u64 = 1024 * 1024;
const CHUNK_DEFS: u64 = 4 * 1024 * 1024;
const UNDEFINED_U32: u32 = u32::MAX;
const LOCATION_TYPE_CPU_THREAD: u8 = 1;
const LOCATION_TYPE_ACCELERATOR_STREAM: u8 = 2;
const LOCATION_TYPE_METRIC: u8 = 3;
const GROUP_TYPE_PROCESS: u8 = 1;
const GROUP_TYPE_ACCELERATOR: u8 = 2;
const ROLE_FUNCTION: u8 = 1;
const ROLE_CODE: u8 = 4;
const ROLE_DATA_TRANSFER: u8 = 30;
const PARADIGM_USER: u8 = 1;
const PARADIGM_CUDA: u8 = 5;
const METRIC_TYPE_OTHER: u8 = 0;
const METRIC_ACCUMULATED_START: u8 = 0;
const METRIC_ABSOLUTE_POINT: u8 = 1 | (1 << 4);
const TYPE_DOUBLE: u8 = 10;
const BASE_DECIMAL: u8 = 1;
const METRIC_ASYNCHRONOUS: u8 = 2;
const RECORDER_ABSTRACT: u8 = 1;

/// The OTF2 functions powerperf calls, resolved from the loaded library.
struct Api {
    _lib: libloading::Library,
    open: unsafe extern "C" fn(*const c_char, *const c_char, u8, u64, u64, u8, u8) -> *mut Archive,
    close: unsafe extern "C" fn(*mut Archive) -> ErrorCode,
    set_flush: unsafe extern "C" fn(*mut Archive, *const FlushCallbacks, *mut c_void) -> ErrorCode,
    set_serial: unsafe extern "C" fn(*mut Archive) -> ErrorCode,
    set_str: [unsafe extern "C" fn(*mut Archive, *const c_char) -> ErrorCode; 3],
    open_evt: unsafe extern "C" fn(*mut Archive) -> ErrorCode,
    close_evt: unsafe extern "C" fn(*mut Archive) -> ErrorCode,
    open_def: unsafe extern "C" fn(*mut Archive) -> ErrorCode,
    close_def: unsafe extern "C" fn(*mut Archive) -> ErrorCode,
    evt_writer: unsafe extern "C" fn(*mut Archive, u64) -> *mut Writer,
    close_evt_writer: unsafe extern "C" fn(*mut Archive, *mut Writer) -> ErrorCode,
    def_writer: unsafe extern "C" fn(*mut Archive, u64) -> *mut Writer,
    close_def_writer: unsafe extern "C" fn(*mut Archive, *mut Writer) -> ErrorCode,
    global_writer: unsafe extern "C" fn(*mut Archive) -> *mut Writer,
    enter: unsafe extern "C" fn(*mut Writer, *mut c_void, u64, u32) -> ErrorCode,
    leave: unsafe extern "C" fn(*mut Writer, *mut c_void, u64, u32) -> ErrorCode,
    metric: unsafe extern "C" fn(
        *mut Writer,
        *mut c_void,
        u64,
        u32,
        u8,
        *const u8,
        *const MetricValue,
    ) -> ErrorCode,
    clock: unsafe extern "C" fn(*mut Writer, u64, u64, u64, u64) -> ErrorCode,
    string: unsafe extern "C" fn(*mut Writer, u32, *const c_char) -> ErrorCode,
    system_tree_node: unsafe extern "C" fn(*mut Writer, u32, u32, u32, u32) -> ErrorCode,
    location_group: unsafe extern "C" fn(*mut Writer, u32, u32, u8, u32, u32) -> ErrorCode,
    location: unsafe extern "C" fn(*mut Writer, u64, u32, u8, u64, u32) -> ErrorCode,
    region: unsafe extern "C" fn(
        *mut Writer,
        u32,
        u32,
        u32,
        u32,
        u8,
        u8,
        u32,
        u32,
        u32,
        u32,
    ) -> ErrorCode,
    metric_member:
        unsafe extern "C" fn(*mut Writer, u32, u32, u32, u8, u8, u8, u8, i64, u32) -> ErrorCode,
    metric_class: unsafe extern "C" fn(*mut Writer, u32, u8, *const u32, u8, u8) -> ErrorCode,
    error_name: unsafe extern "C" fn(ErrorCode) -> *const c_char,
}

impl Api {
    /// Load the library and resolve the functions.
    ///
    /// # Errors
    /// No library under [`LIBRARY_NAMES`] (the message says what to install), or one that
    /// lacks a function (not OTF2 3.x).
    fn load() -> Result<Api> {
        let mut last = String::new();
        let chosen = std::env::var_os(LIBRARY_ENV);
        let names: Vec<std::ffi::OsString> = match &chosen {
            Some(p) => vec![p.clone()],
            None => LIBRARY_NAMES.iter().map(Into::into).collect(),
        };
        for name in &names {
            let name = name.to_string_lossy();
            // SAFETY: loading OTF2 runs its constructors only (none with side effects
            // beyond its own state).
            match unsafe { libloading::Library::new(name.as_ref()) } {
                Ok(lib) => {
                    return Api::resolve(lib).with_context(|| format!("{name}: not OTF2 3.x"))
                }
                Err(e) => last = e.to_string(),
            }
        }
        bail!("the OTF2 library is not installed ({last}): {PACKAGE_HINT}")
    }

    fn resolve(lib: libloading::Library) -> Result<Api> {
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the symbol's type is the prototype of OTF2 3.0's header.
                *unsafe { lib.get(concat!($name, "\0").as_bytes()) }
                    .map_err(|e| anyhow!("{}: {e}", $name))?
            };
        }
        Ok(Api {
            open: sym!("OTF2_Archive_Open"),
            close: sym!("OTF2_Archive_Close"),
            set_flush: sym!("OTF2_Archive_SetFlushCallbacks"),
            set_serial: sym!("OTF2_Archive_SetSerialCollectiveCallbacks"),
            set_str: [
                sym!("OTF2_Archive_SetCreator"),
                sym!("OTF2_Archive_SetDescription"),
                sym!("OTF2_Archive_SetMachineName"),
            ],
            open_evt: sym!("OTF2_Archive_OpenEvtFiles"),
            close_evt: sym!("OTF2_Archive_CloseEvtFiles"),
            open_def: sym!("OTF2_Archive_OpenDefFiles"),
            close_def: sym!("OTF2_Archive_CloseDefFiles"),
            evt_writer: sym!("OTF2_Archive_GetEvtWriter"),
            close_evt_writer: sym!("OTF2_Archive_CloseEvtWriter"),
            def_writer: sym!("OTF2_Archive_GetDefWriter"),
            close_def_writer: sym!("OTF2_Archive_CloseDefWriter"),
            global_writer: sym!("OTF2_Archive_GetGlobalDefWriter"),
            enter: sym!("OTF2_EvtWriter_Enter"),
            leave: sym!("OTF2_EvtWriter_Leave"),
            metric: sym!("OTF2_EvtWriter_Metric"),
            clock: sym!("OTF2_GlobalDefWriter_WriteClockProperties"),
            string: sym!("OTF2_GlobalDefWriter_WriteString"),
            system_tree_node: sym!("OTF2_GlobalDefWriter_WriteSystemTreeNode"),
            location_group: sym!("OTF2_GlobalDefWriter_WriteLocationGroup"),
            location: sym!("OTF2_GlobalDefWriter_WriteLocation"),
            region: sym!("OTF2_GlobalDefWriter_WriteRegion"),
            metric_member: sym!("OTF2_GlobalDefWriter_WriteMetricMember"),
            metric_class: sym!("OTF2_GlobalDefWriter_WriteMetricClass"),
            error_name: sym!("OTF2_Error_GetName"),
            _lib: lib,
        })
    }

    /// `Ok` for OTF2_SUCCESS, else the error's name and the call.
    fn check(&self, call: &str, code: ErrorCode) -> Result<()> {
        if code == 0 {
            return Ok(());
        }
        // SAFETY: OTF2_Error_GetName returns a static string for any code.
        let p = unsafe { (self.error_name)(code) };
        let name = if p.is_null() {
            format!("error {code}")
        } else {
            // SAFETY: non-null, NUL-terminated, static.
            unsafe { std::ffi::CStr::from_ptr(p) }
                .to_string_lossy()
                .into_owned()
        };
        bail!("{call} failed: {name}")
    }
}

/// Whether the OTF2 library can be loaded here (for tests that skip without it).
pub fn available() -> bool {
    Api::load().is_ok()
}

/// The definitions the events refer to, collected before any is written.
#[derive(Default)]
struct Defs {
    strings: Vec<CString>,
    string_ids: HashMap<String, u32>,
    /// (name, role, paradigm) → region id.
    regions: Vec<(u32, u8, u8)>,
    region_ids: HashMap<(String, u8, u8), u32>,
}

impl Defs {
    fn string(&mut self, s: &str) -> u32 {
        if let Some(&id) = self.string_ids.get(s) {
            return id;
        }
        let id = self.strings.len() as u32;
        // Interior NULs cannot pass through C; they are replaced.
        let c = CString::new(s.replace('\0', "\u{fffd}")).unwrap_or_default();
        self.strings.push(c);
        self.string_ids.insert(s.to_string(), id);
        id
    }

    fn region(&mut self, name: &str, kind: SliceKind) -> u32 {
        let (role, paradigm) = match kind {
            SliceKind::Region => (ROLE_CODE, PARADIGM_USER),
            SliceKind::CudaApi => (ROLE_FUNCTION, PARADIGM_CUDA),
            SliceKind::Gpu(powerperf_format::gpu_activity::Kind::Kernel) => {
                (ROLE_FUNCTION, PARADIGM_CUDA)
            }
            SliceKind::Gpu(_) => (ROLE_DATA_TRANSFER, PARADIGM_CUDA),
        };
        let key = (name.to_string(), role, paradigm);
        if let Some(&id) = self.region_ids.get(&key) {
            return id;
        }
        let s = self.string(name);
        let id = self.regions.len() as u32;
        self.regions.push((s, role, paradigm));
        self.region_ids.insert(key, id);
        id
    }
}

/// One location's definition.
struct Loc {
    id: u64,
    name: u32,
    kind: u8,
    group: u32,
    events: u64,
}

/// Write `trace` as an OTF2 archive in the directory `out` (created; it must not hold an
/// archive already); returns the anchor file `out/traces.otf2`.
///
/// # Errors
/// No OTF2 library (the message names the package); `out` holds a `traces.otf2` already;
/// an OTF2 call that fails (named, with OTF2's error).
pub fn write(trace: &Trace, out: &Path) -> Result<PathBuf> {
    if out.as_os_str() == "-" {
        bail!("--format otf2 writes a directory (the archive): give -o DIR, not -");
    }
    let anchor = out.join("traces.otf2");
    if anchor.exists() || out.join("traces").exists() {
        bail!(
            "{} already holds an OTF2 archive (traces.otf2, traces/): remove it or give \
             another -o DIR",
            out.display()
        );
    }
    let api = Api::load()?;
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let path = CString::new(out.as_os_str().as_encoded_bytes())
        .map_err(|_| anyhow!("{}: a path with a NUL byte", out.display()))?;
    let name = c"traces";
    // SAFETY: valid C strings; the archive is closed below on every path.
    let archive = unsafe {
        (api.open)(
            path.as_ptr(),
            name.as_ptr(),
            FILEMODE_WRITE,
            CHUNK_EVENTS,
            CHUNK_DEFS,
            SUBSTRATE_POSIX,
            COMPRESSION_NONE,
        )
    };
    if archive.is_null() {
        bail!("OTF2_Archive_Open of {} failed", out.display());
    }
    let r = write_archive(&api, archive, trace);
    // SAFETY: the archive opened above, closed once.
    let closed = api.check("OTF2_Archive_Close", unsafe { (api.close)(archive) });
    r.and(closed)?;
    Ok(anchor)
}

fn write_archive(api: &Api, archive: *mut Archive, trace: &Trace) -> Result<()> {
    open_event_files(api, archive, trace)?;
    let mut defs = Defs::default();
    defs.string(""); // 0: the empty string, for descriptions and source files.
    let mut locs: Vec<Loc> = Vec::new();
    let mut groups: Vec<(u32, u32, u8, u32, u32)> = Vec::new(); // (id, name, type, node, creator)
    let mut nodes: Vec<(u32, u32, u32, u32)> = Vec::new(); // (id, name, class, parent)
    let mut node_of_host: HashMap<String, u32> = HashMap::new();
    let mut metrics: Vec<(u32, u32, u32, u8)> = Vec::new(); // (member id, name, unit, mode)
    let root_name = defs.string(&format!("powerperf {}", trace.name));
    let machine = defs.string("machine");
    nodes.push((0, root_name, machine, UNDEFINED_U32));
    let mut next_loc = 0u64;
    let write_events = |id: u64, f: &mut dyn FnMut(*mut Writer) -> Result<u64>| -> Result<u64> {
        // SAFETY: as above.
        let w = unsafe { (api.evt_writer)(archive, id) };
        if w.is_null() {
            bail!("OTF2_Archive_GetEvtWriter({id}) failed");
        }
        let n = f(w);
        // SAFETY: as above.
        let closed = api.check("OTF2_Archive_CloseEvtWriter", unsafe {
            (api.close_evt_writer)(archive, w)
        });
        let n = n?;
        closed?;
        Ok(n)
    };
    for p in &trace.processes {
        let node = match node_of_host.get(&p.host) {
            Some(&n) => n,
            None => {
                let id = nodes.len() as u32;
                let (hn, class) = (defs.string(&p.host), defs.string("node"));
                nodes.push((id, hn, class, 0));
                node_of_host.insert(p.host.clone(), id);
                id
            }
        };
        let pgroup = groups.len() as u32;
        groups.push((
            pgroup,
            defs.string(&p.label()),
            GROUP_TYPE_PROCESS,
            node,
            UNDEFINED_U32,
        ));
        for t in &p.threads {
            let id = next_loc;
            next_loc += 1;
            let regions: Vec<u32> = t
                .slices
                .iter()
                .map(|s| defs.region(&s.name, s.kind))
                .collect();
            let n = write_events(id, &mut |w| {
                let mut n = 0;
                for (at, e) in edges(&t.slices) {
                    // SAFETY: as above.
                    let code = unsafe {
                        match e {
                            Edge::Begin(i) => (api.enter)(w, std::ptr::null_mut(), at, regions[i]),
                            Edge::End(i) => (api.leave)(w, std::ptr::null_mut(), at, regions[i]),
                        }
                    };
                    api.check("OTF2_EvtWriter_Enter/Leave", code)?;
                    n += 1;
                }
                Ok(n)
            })?;
            locs.push(Loc {
                id,
                name: defs.string(&format!("thread {}", t.tid)),
                kind: LOCATION_TYPE_CPU_THREAD,
                group: pgroup,
                events: n,
            });
        }
        let mut gpu_group: HashMap<u32, u32> = HashMap::new();
        for s in &p.streams {
            let group = *gpu_group.entry(s.device).or_insert_with(|| {
                let g = groups.len() as u32;
                let gname = defs.string(&format!("GPU {} of {}", s.device, p.label()));
                groups.push((g, gname, GROUP_TYPE_ACCELERATOR, node, pgroup));
                g
            });
            let id = next_loc;
            next_loc += 1;
            let regions: Vec<u32> = s
                .slices
                .iter()
                .map(|k| defs.region(&k.name, k.kind))
                .collect();
            let n = write_events(id, &mut |w| {
                for (k, r) in s.slices.iter().zip(&regions) {
                    // SAFETY: as above.
                    unsafe {
                        api.check(
                            "OTF2_EvtWriter_Enter",
                            (api.enter)(w, std::ptr::null_mut(), k.start_ns, *r),
                        )?;
                        api.check(
                            "OTF2_EvtWriter_Leave",
                            (api.leave)(w, std::ptr::null_mut(), k.end_ns, *r),
                        )?;
                    }
                }
                Ok(2 * s.slices.len() as u64)
            })?;
            locs.push(Loc {
                id,
                name: defs.string(&s.label()),
                kind: LOCATION_TYPE_ACCELERATOR_STREAM,
                group,
                events: n,
            });
        }
        if !p.counters.is_empty() {
            let id = next_loc;
            next_loc += 1;
            let mut classes = Vec::new();
            for c in &p.counters {
                let member = metrics.len() as u32;
                let mode = match c.mode {
                    CounterMode::AbsolutePoint => METRIC_ABSOLUTE_POINT,
                    CounterMode::Accumulated => METRIC_ACCUMULATED_START,
                };
                metrics.push((member, defs.string(&c.name), defs.string(&c.unit), mode));
                classes.push(member);
            }
            // Every counter's points, merged in time order (OTF2 wants each location's
            // events sorted).
            let mut points: Vec<(u64, u32, f64)> = p
                .counters
                .iter()
                .zip(&classes)
                .flat_map(|(c, &m)| c.points.iter().map(move |&(t, v)| (t, m, v)))
                .filter(|x| x.2.is_finite())
                .collect();
            points.sort_by_key(|x| (x.0, x.1));
            let n = write_events(id, &mut |w| {
                for &(t, m, v) in &points {
                    let value = MetricValue { floating_point: v };
                    // SAFETY: as above; one type and one value.
                    api.check("OTF2_EvtWriter_Metric", unsafe {
                        (api.metric)(w, std::ptr::null_mut(), t, m, 1, &TYPE_DOUBLE, &value)
                    })?;
                }
                Ok(points.len() as u64)
            })?;
            locs.push(Loc {
                id,
                name: defs.string(&format!("timeline of {}", p.label())),
                kind: LOCATION_TYPE_METRIC,
                group: pgroup,
                events: n,
            });
        }
    }
    write_local_defs(api, archive, &locs)?;
    write_global_defs(
        api,
        archive,
        trace.span(),
        &defs,
        &nodes,
        &groups,
        &locs,
        &metrics,
    )
}

/// The archive's callbacks and properties (creator, description, machine name), and its
/// event files opened.
fn open_event_files(api: &Api, archive: *mut Archive, trace: &Trace) -> Result<()> {
    // SAFETY: for all calls below: `archive` is open; pointers passed live across each
    // call; writers come from this archive and are closed once.
    unsafe {
        api.check(
            "OTF2_Archive_SetFlushCallbacks",
            (api.set_flush)(archive, &FLUSH_CALLBACKS, std::ptr::null_mut()),
        )?;
        api.check(
            "OTF2_Archive_SetSerialCollectiveCallbacks",
            (api.set_serial)(archive),
        )?;
        let host = trace
            .processes
            .first()
            .map(|p| p.host.as_str())
            .unwrap_or("");
        for (f, v, what) in [
            (api.set_str[0], trace.tool.as_str(), "SetCreator"),
            (
                api.set_str[1],
                &format!("powerperf run {}", trace.name),
                "SetDescription",
            ),
            (api.set_str[2], host, "SetMachineName"),
        ] {
            let c = CString::new(v.replace('\0', "")).unwrap_or_default();
            api.check(&format!("OTF2_Archive_{what}"), f(archive, c.as_ptr()))?;
        }
        api.check("OTF2_Archive_OpenEvtFiles", (api.open_evt)(archive))?;
    }
    Ok(())
}

/// Close the event files; one (empty) local definition file per location.
fn write_local_defs(api: &Api, archive: *mut Archive, locs: &[Loc]) -> Result<()> {
    // SAFETY: as above.
    unsafe {
        api.check("OTF2_Archive_CloseEvtFiles", (api.close_evt)(archive))?;
        api.check("OTF2_Archive_OpenDefFiles", (api.open_def)(archive))?;
        for l in locs {
            let w = (api.def_writer)(archive, l.id);
            if w.is_null() {
                bail!("OTF2_Archive_GetDefWriter({}) failed", l.id);
            }
            api.check(
                "OTF2_Archive_CloseDefWriter",
                (api.close_def_writer)(archive, w),
            )?;
        }
        api.check("OTF2_Archive_CloseDefFiles", (api.close_def)(archive))?;
    }
    Ok(())
}

/// The global definitions, every reference written before it is used, ids dense from 0.
#[allow(clippy::too_many_arguments)]
fn write_global_defs(
    api: &Api,
    archive: *mut Archive,
    (lo, hi): (u64, u64),
    defs: &Defs,
    nodes: &[(u32, u32, u32, u32)],
    groups: &[(u32, u32, u8, u32, u32)],
    locs: &[Loc],
    metrics: &[(u32, u32, u32, u8)],
) -> Result<()> {
    // SAFETY: `archive` is the non-null archive of OTF2_Archive_Open, closed only after
    // `write_archive` returns; the writer it gives is checked for null below.
    let g = unsafe { (api.global_writer)(archive) };
    if g.is_null() {
        bail!("OTF2_Archive_GetGlobalDefWriter failed");
    }
    // SAFETY: as above; every reference written before use, ids dense from 0.
    unsafe {
        api.check(
            "WriteClockProperties",
            (api.clock)(g, 1_000_000_000, lo, hi - lo + 1, u64::MAX),
        )?;
        for (i, s) in defs.strings.iter().enumerate() {
            api.check("WriteString", (api.string)(g, i as u32, s.as_ptr()))?;
        }
        for (i, (name, role, paradigm)) in defs.regions.iter().enumerate() {
            api.check(
                "WriteRegion",
                (api.region)(g, i as u32, *name, *name, 0, *role, *paradigm, 0, 0, 0, 0),
            )?;
        }
        for (id, name, class, parent) in nodes {
            api.check(
                "WriteSystemTreeNode",
                (api.system_tree_node)(g, *id, *name, *class, *parent),
            )?;
        }
        for (id, name, kind, node, creator) in groups {
            api.check(
                "WriteLocationGroup",
                (api.location_group)(g, *id, *name, *kind, *node, *creator),
            )?;
        }
        for l in locs {
            api.check(
                "WriteLocation",
                (api.location)(g, l.id, l.name, l.kind, l.events, l.group),
            )?;
        }
        for (id, name, unit, mode) in metrics {
            api.check(
                "WriteMetricMember",
                (api.metric_member)(
                    g,
                    *id,
                    *name,
                    0,
                    METRIC_TYPE_OTHER,
                    *mode,
                    TYPE_DOUBLE,
                    BASE_DECIMAL,
                    0,
                    *unit,
                ),
            )?;
            api.check(
                "WriteMetricClass",
                (api.metric_class)(g, *id, 1, id, METRIC_ASYNCHRONOUS, RECORDER_ABSTRACT),
            )?;
        }
    }
    Ok(())
}
