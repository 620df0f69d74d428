//! The PAPI backend (feature `papi`): `powerperf collect --backend papi -e NAME,...` counts
//! PAPI preset events (`PAPI_TOT_INS`) and native events (`perf::TASK-CLOCK`,
//! `perf::PAGE-FAULTS`, libpfm4 names of the CPU's PMU) on the command, through
//! libpapi (bound by the `papi-sys` crate, linked at build time; docs/papi.md).
//!
//! How the command is counted: powerperf forks it paused before `exec`
//! ([`super::launcher`]); every event is added to one event set per PAPI component
//! (`PAPI_create_eventset`, `PAPI_assign_eventset_component`, `PAPI_add_event`); the set is
//! made to follow the command's threads and children (`PAPI_set_opt(PAPI_INHERIT,
//! PAPI_INHERIT_ALL)`, perf_event's `inherit`) and attached to the child
//! (`PAPI_attach`), then started (`PAPI_start`) before the child is let go. The sampler
//! reads the cumulative counts every interval (`PAPI_read`) and writes the increase into the
//! timeline column named as the event was requested, the same layout as the perf backend.
//! Unlike perf's `enable_on_exec`, counting starts just before `exec`, so the few
//! instructions between the child's wake-up and its `exec` are counted too.
//!
//! Threads: PAPI is initialised once per process (`PAPI_library_init`, then
//! `PAPI_thread_init` with the kernel thread id), and every thread registers itself
//! (`PAPI_register_thread`) before its first PAPI call: the event sets are created, started
//! and destroyed by the collect thread and read by the sampler thread. (libpapi as Debian
//! builds it keeps its per-thread record in thread-local storage; a thread PAPI has not seen
//! crashes in `PAPI_event_name_to_code`.) Two collections in one process at the same time
//! are refused ([`PapiCounters::open`]): PAPI runs one event set per component per thread.
//!
//! Multiplexing: when an event does not fit on the PMU with the others (`PAPI_ECNFLCT`), the
//! set is switched to multiplexing (`PAPI_multiplex_init`, `PAPI_set_multiplex`) and the
//! event added again. PAPI's perf_event component then scales each count by
//! time_enabled/time_running itself and does not return the ratio: such events are
//! recorded `multiplexed`, without `running_ratio`.
//!
//! Errors are per event: an unknown name, a preset this PMU cannot count, a disabled
//! component or a refused attach becomes a `not_supported` (or `permission_denied`) event
//! record whose reason names the PAPI call, PAPI's message (`PAPI_strerror`), the error code
//! and the fix. A known limit of PAPI (7.0, `check_permissions` in
//! `src/components/perf_event/perf_event_lib.c`): the perf_event component checks
//! `PAPI_attach` and `PAPI_INHERIT` by opening a hardware instructions counter, so on a
//! machine without a hardware PMU (a virtual machine without a virtual PMU) PAPI cannot
//! count another process at all, software events included; the reason says so.

use papi_sys as ffi;
use powerperf_format::run::{Backend, EventRecord};
use powerperf_node::event_spec::EventStatus;
use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_int, c_longlong};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

/// The events `--backend papi` counts without `-e`: perf stat's defaults in PAPI's names
/// (software events through the perf_event component's `perf::` PMU, hardware ones as
/// presets).
pub const DEFAULT_EVENTS: [&str; 7] = [
    "perf::TASK-CLOCK",
    "perf::CONTEXT-SWITCHES",
    "perf::PAGE-FAULTS",
    "PAPI_TOT_CYC",
    "PAPI_TOT_INS",
    "PAPI_BR_INS",
    "PAPI_BR_MSP",
];

/// `PAPI_PRESET_MASK` of papi.h (`((int)0x80000000)`; bindgen does not translate the cast).
const PRESET_MASK: c_int = 0x8000_0000_u32 as c_int;

/// The fix printed with most failures: PAPI's own listing tools (Debian `papi-tools`).
const LIST_FIX: &str = "`papi_avail -a` lists the presets PAPI can map on this CPU, `papi_native_avail` the native events and `papi_component_avail` the components (Debian/Ubuntu package papi-tools); `papi_command_line NAME` tries one event";

/// Errors of the event list given to `--backend papi`.
#[derive(Debug, thiserror::Error, PartialEq)]
#[non_exhaustive]
pub enum PapiListError {
    #[error("empty event list")]
    Empty,
    #[error("event `{name}` (position {index}): `{{...}}` groups are perf syntax; PAPI counts all events of a component in one event set, so write the names without braces")]
    Group { name: String, index: usize },
    #[error("event `{name}` (position {index}) appears twice in the list")]
    Duplicate { name: String, index: usize },
}

/// Split a `-e` list for the PAPI backend: comma-separated PAPI event names (presets such
/// as `PAPI_TOT_INS`, native names such as `perf::TASK-CLOCK` or `pmu::EVENT:umask`, which
/// contain `:` but never `,`). `None` gives [`DEFAULT_EVENTS`].
///
/// # Errors
/// An empty list, a perf group `{a,b}`, or a name given twice (two timeline columns would
/// share the name).
pub fn parse_list(list: Option<&str>) -> Result<Vec<String>, PapiListError> {
    let Some(list) = list else {
        return Ok(DEFAULT_EVENTS.iter().map(|s| s.to_string()).collect());
    };
    let names: Vec<String> = list
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    if names.is_empty() {
        return Err(PapiListError::Empty);
    }
    for (i, n) in names.iter().enumerate() {
        if n.contains('{') || n.contains('}') {
            return Err(PapiListError::Group {
                name: n.clone(),
                index: i,
            });
        }
        if names[..i].contains(n) {
            return Err(PapiListError::Duplicate {
                name: n.clone(),
                index: i,
            });
        }
    }
    Ok(names)
}

/// PAPI's message for an error code (`PAPI_strerror`), with the code's name
/// (`Event does not exist (PAPI_ENOEVNT)`).
pub fn strerror(code: c_int) -> String {
    // SAFETY: PAPI_strerror returns a pointer into a static table, or NULL for an unknown code.
    let p = unsafe { ffi::PAPI_strerror(code) };
    let msg = if p.is_null() {
        format!("PAPI error {code}")
    } else {
        // SAFETY: non-null, NUL-terminated static string.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    };
    match code_name(code) {
        Some(n) => format!("{msg} ({n})"),
        None => msg,
    }
}

/// The papi.h name of an error code.
fn code_name(code: c_int) -> Option<&'static str> {
    Some(match code {
        ffi::PAPI_EINVAL => "PAPI_EINVAL",
        ffi::PAPI_ENOMEM => "PAPI_ENOMEM",
        ffi::PAPI_ESYS => "PAPI_ESYS",
        ffi::PAPI_ECMP => "PAPI_ECMP",
        ffi::PAPI_EBUG => "PAPI_EBUG",
        ffi::PAPI_ENOEVNT => "PAPI_ENOEVNT",
        ffi::PAPI_ECNFLCT => "PAPI_ECNFLCT",
        ffi::PAPI_ENOTRUN => "PAPI_ENOTRUN",
        ffi::PAPI_EISRUN => "PAPI_EISRUN",
        ffi::PAPI_ENOEVST => "PAPI_ENOEVST",
        ffi::PAPI_ENOTPRESET => "PAPI_ENOTPRESET",
        ffi::PAPI_ENOCNTR => "PAPI_ENOCNTR",
        ffi::PAPI_EMISC => "PAPI_EMISC",
        ffi::PAPI_EPERM => "PAPI_EPERM",
        ffi::PAPI_ENOINIT => "PAPI_ENOINIT",
        ffi::PAPI_ENOCMP => "PAPI_ENOCMP",
        ffi::PAPI_ENOSUPP => "PAPI_ENOSUPP",
        ffi::PAPI_ENOIMPL => "PAPI_ENOIMPL",
        ffi::PAPI_EBUF => "PAPI_EBUF",
        ffi::PAPI_EATTR => "PAPI_EATTR",
        ffi::PAPI_ECOUNT => "PAPI_ECOUNT",
        ffi::PAPI_ECOMBO => "PAPI_ECOMBO",
        _ => return None,
    })
}

/// PAPI's version as `major.minor.revision`, from a `PAPI_VERSION` number.
fn version_string(v: c_int) -> String {
    let v = v as u32;
    format!("{}.{}.{}", v >> 24, (v >> 16) & 0xff, (v >> 8) & 0xff)
}

/// The kernel thread id, PAPI's thread id function (`PAPI_thread_init`).
extern "C" fn thread_id() -> std::os::raw::c_ulong {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as std::os::raw::c_ulong }
}

/// Initialise libpapi once per process (`PAPI_library_init(PAPI_VER_CURRENT)`,
/// `PAPI_thread_init`) and register the calling thread with it (`PAPI_register_thread`).
/// Every function of this module calls it before its first PAPI call.
///
/// # Errors
/// The reason PAPI could not start, with the fix: a libpapi of another version than the
/// headers powerperf was built with (rebuild), or PAPI's error message.
pub fn init() -> Result<(), String> {
    static INIT: OnceLock<Result<(), String>> = OnceLock::new();
    INIT.get_or_init(|| {
        // SAFETY: plain library call; OnceLock makes it happen once.
        let got = unsafe { ffi::PAPI_library_init(ffi::PAPI_VER_CURRENT) };
        if got == ffi::PAPI_VER_CURRENT {
            // SAFETY: thread_id is a valid extern "C" fn for the life of the process.
            let r = unsafe { ffi::PAPI_thread_init(Some(thread_id)) };
            if r == ffi::PAPI_OK as c_int {
                Ok(())
            } else {
                Err(format!("PAPI_thread_init failed: {}", strerror(r)))
            }
        } else if got > 0 {
            Err(format!(
                "PAPI_library_init: libpapi is version {} but powerperf was built against papi.h {}: rebuild powerperf (`cargo build --release --features papi`) on this machine",
                version_string(got),
                version_string(ffi::PAPI_VER_CURRENT)
            ))
        } else {
            Err(format!(
                "PAPI_library_init failed: {}; `papi_component_avail` shows what PAPI finds on this machine",
                strerror(got)
            ))
        }
    })
    .clone()?;
    // SAFETY: plain library call; finds or creates PAPI's record of this thread.
    let r = unsafe { ffi::PAPI_register_thread() };
    if r != ffi::PAPI_OK as c_int {
        return Err(format!("PAPI_register_thread failed: {}", strerror(r)));
    }
    Ok(())
}

/// The version of the libpapi in use (`PAPI_VER_CURRENT` of the headers powerperf was
/// built with; [`init`] refuses any other).
pub fn version() -> String {
    version_string(ffi::PAPI_VER_CURRENT)
}

fn cstr_field(buf: &[c_char]) -> String {
    let bytes: Vec<u8> = buf
        .iter()
        .take_while(|c| **c != 0)
        .map(|c| *c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// What PAPI says about a component.
#[derive(Debug, Clone)]
pub struct Component {
    pub index: c_int,
    pub name: String,
    /// `disabled_reason` when the component is disabled.
    pub disabled: Option<String>,
    /// Whether an event set of it can be attached to another process.
    pub attach: bool,
}

/// Component `cidx` (`PAPI_get_component_info`), `None` when there is no such index.
pub fn component(cidx: c_int) -> Option<Component> {
    // SAFETY: returns NULL for a bad index, else a pointer into PAPI's component table.
    let p = unsafe { ffi::PAPI_get_component_info(cidx) };
    if p.is_null() {
        return None;
    }
    // SAFETY: checked non-null; PAPI owns the struct for the life of the library.
    let info = unsafe { &*p };
    Some(Component {
        index: cidx,
        name: cstr_field(&info.name),
        disabled: (info.disabled != 0).then(|| {
            let r = cstr_field(&info.disabled_reason);
            if r.is_empty() {
                "disabled (no reason given)".into()
            } else {
                r
            }
        }),
        attach: info.attach() != 0,
    })
}

/// Every component PAPI was built with.
pub fn components() -> Vec<Component> {
    // SAFETY: plain library call.
    let n = unsafe { ffi::PAPI_num_components() };
    (0..n).filter_map(component).collect()
}

/// Why a name is not an event here: PAPI's error for it, plus the state of the component
/// the name points at (`rapl:::…` → component `rapl`) when that component is disabled or
/// absent.
fn explain_unknown(name: &str, code: c_int) -> String {
    let mut why = format!("PAPI_event_name_to_code(`{name}`): {}", strerror(code));
    // `comp:::event` names a component; presets and libpfm4 names (`pmu::event`) belong to
    // the CPU component, perf_event.
    let comp = match name.split_once(":::") {
        Some((p, _)) => Some(p),
        None if name.contains("::") || name.starts_with("PAPI_") => Some("perf_event"),
        None => None,
    };
    if let Some(p) = comp {
        let comps = components();
        match comps.iter().find(|c| c.name == p) {
            Some(c) => {
                if let Some(r) = &c.disabled {
                    why.push_str(&format!("; PAPI component `{p}` is disabled: {r}"));
                }
            }
            None => {
                let names: Vec<&str> = comps.iter().map(|c| c.name.as_str()).collect();
                why.push_str(&format!(
                    "; this libpapi has no component `{p}` (it has: {}); a PAPI built with that component is needed",
                    names.join(", ")
                ));
            }
        }
    }
    why.push_str(&format!(". {LIST_FIX}"));
    why
}

/// Whether this machine has a hardware PMU: perf_event_open of the generic instructions
/// event on this thread, as PAPI's perf_event component probes it. `Err` carries the
/// kernel's error.
fn hardware_pmu() -> Result<(), std::io::Error> {
    use perf_event::events::Hardware;
    perf_event::Builder::new(Hardware::INSTRUCTIONS)
        .build()
        .map(drop)
}

/// Status and reason for a failed PAPI call on an event set that would count the command.
fn classify(call: &str, code: c_int) -> (EventStatus, String) {
    let msg = format!("{call}: {}", strerror(code));
    match code {
        ffi::PAPI_EPERM => (
            EventStatus::PermissionDenied,
            format!("{msg}. {}", powerperf_node::perf_event::permission_fix()),
        ),
        ffi::PAPI_ENOEVNT
            if call.starts_with("PAPI_attach") || call.starts_with("PAPI_set_opt") =>
        {
            let pmu = match hardware_pmu() {
                Ok(()) => String::new(),
                Err(e) => format!(
                    " This machine has no hardware PMU (perf_event_open of `instructions`: {e}), as on a virtual machine without a virtual PMU: PAPI cannot count another process here, software events included."
                ),
            };
            (
                EventStatus::NotSupported,
                format!(
                    "{msg}. PAPI's perf_event component checks attach and inherit by opening a hardware instructions counter (check_permissions, src/components/perf_event/perf_event_lib.c in PAPI 7.0).{pmu} `--backend perf` counts the perf software events (task-clock, page-faults, context-switches) on such machines."
                ),
            )
        }
        ffi::PAPI_ENOEVNT | ffi::PAPI_ECNFLCT | ffi::PAPI_ENOCNTR | ffi::PAPI_ENOSUPP => {
            let pmu = match hardware_pmu() {
                Ok(()) => String::new(),
                Err(e) => format!(
                    " This machine has no hardware PMU (perf_event_open of `instructions`: {e}): only software events (perf::TASK-CLOCK, perf::PAGE-FAULTS, ...) count here."
                ),
            };
            (
                EventStatus::NotSupported,
                format!("{msg}: the PMU of this machine cannot count it.{pmu} {LIST_FIX}"),
            )
        }
        _ => (EventStatus::NotSupported, format!("{msg}. {LIST_FIX}")),
    }
}

/// Unit of an event's count: PAPI's `units` where the component gives one, else `ns` for
/// the perf software clocks (perf_event counts `task-clock` and `cpu-clock` in ns).
fn unit_of(name: &str, code: c_int) -> Option<String> {
    let info = event_info(code);
    if let Some(u) = info.as_ref().map(|i| cstr_field(&i.units)) {
        if !u.is_empty() {
            return Some(u);
        }
    }
    let base = name
        .rsplit("::")
        .next()
        .unwrap_or(name)
        .to_ascii_uppercase();
    let base = base.split(':').next().unwrap_or(&base);
    matches!(base, "TASK-CLOCK" | "CPU-CLOCK").then(|| "ns".to_string())
}

fn event_info(code: c_int) -> Option<Box<ffi::PAPI_event_info_t>> {
    // SAFETY: PAPI_event_info_t is plain old data; all-zero is a valid value.
    let mut info: Box<ffi::PAPI_event_info_t> = Box::new(unsafe { std::mem::zeroed() });
    // SAFETY: info points to a writable PAPI_event_info_t.
    let r = unsafe { ffi::PAPI_get_event_info(code, &mut *info) };
    (r == ffi::PAPI_OK as c_int).then_some(info)
}

fn name_to_code(name: &str) -> Result<c_int, c_int> {
    let c = CString::new(name).map_err(|_| ffi::PAPI_EINVAL)?;
    let mut code: c_int = 0;
    // SAFETY: c is NUL-terminated; code is writable.
    let r = unsafe { ffi::PAPI_event_name_to_code(c.as_ptr(), &mut code) };
    if r == ffi::PAPI_OK as c_int {
        Ok(code)
    } else {
        Err(r)
    }
}

const OK: c_int = ffi::PAPI_OK as c_int;

/// One PAPI event set (one component).
struct EventSet {
    handle: c_int,
    cidx: c_int,
    /// Events added, in set order: index into [`PapiCounters::events`].
    members: Vec<usize>,
    multiplexed: bool,
    running: bool,
    /// Why the set counts user space only, when it does.
    user_only: Option<String>,
}

/// One requested event.
struct Event {
    name: String,
    unit: Option<String>,
    /// (set index, position in the set) while the event counts; the failure otherwise.
    state: Result<(usize, usize), (EventStatus, String)>,
    last: i64,
    total: Option<i64>,
    read_error: Option<String>,
}

/// Only one set of counters per process (see the module docs on threads).
static IN_USE: AtomicBool = AtomicBool::new(false);

/// What a [`PapiCounters`] counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PapiTarget {
    /// A process (powerperf's child paused before `exec`), with its future threads and
    /// children (`PAPI_INHERIT`, `PAPI_attach`).
    Process(i32),
    /// The thread that calls [`PapiCounters::open`] (PAPI's default: no attach, no
    /// inherit). Used by tests and probes on powerperf itself.
    CallingThread,
}

/// The requested PAPI events, attached to one process (and inherited by its threads and
/// children), read as cumulative counts and turned into per-sample increases.
pub struct PapiCounters {
    events: Vec<Event>,
    sets: Vec<EventSet>,
    owns_lock: bool,
    notes: Vec<String>,
}

impl PapiCounters {
    /// Set up `names` on `target`. Never fails as a whole: an event that cannot be counted
    /// carries its status and reason into [`records`](Self::records).
    pub fn open(names: &[String], target: PapiTarget) -> Self {
        let mut me = PapiCounters {
            events: names
                .iter()
                .map(|n| Event {
                    name: n.clone(),
                    unit: None,
                    state: Err((EventStatus::NotSupported, String::new())),
                    last: 0,
                    total: None,
                    read_error: None,
                })
                .collect(),
            sets: vec![],
            owns_lock: false,
            notes: vec![],
        };
        let fail_all = |me: &mut PapiCounters, st: EventStatus, why: String| {
            for e in &mut me.events {
                e.state = Err((st, why.clone()));
            }
        };
        if let Err(why) = init() {
            fail_all(&mut me, EventStatus::NotSupported, why);
            return me;
        }
        if IN_USE.swap(true, Ordering::SeqCst) {
            fail_all(
                &mut me,
                EventStatus::NotSupported,
                "PAPI is already counting for another collection in this process (powerperf uses one PAPI context per process)".into(),
            );
            return me;
        }
        me.owns_lock = true;
        // Resolve names and components.
        let mut codes: Vec<Option<c_int>> = vec![None; names.len()];
        for (i, e) in me.events.iter_mut().enumerate() {
            match name_to_code(&e.name) {
                Err(code) => {
                    e.state = Err((EventStatus::NotSupported, explain_unknown(&e.name, code)))
                }
                Ok(code) => {
                    e.unit = unit_of(&e.name, code);
                    codes[i] = Some(code);
                }
            }
        }
        for (i, code) in codes.iter().enumerate() {
            let Some(code) = *code else { continue };
            // SAFETY: plain library call on a valid code.
            let cidx = unsafe { ffi::PAPI_get_event_component(code) };
            let comp = component(cidx);
            if let Some(c) = &comp {
                if let Some(r) = &c.disabled {
                    me.events[i].state = Err((
                        EventStatus::NotSupported,
                        format!("PAPI component `{}` is disabled: {r}. {LIST_FIX}", c.name),
                    ));
                    continue;
                }
                if !c.attach {
                    me.events[i].state = Err((
                        EventStatus::NotSupported,
                        format!(
                            "PAPI component `{}` cannot attach to a process (it counts a whole machine or device); powerperf's PAPI backend counts the command only: use collect's own RAPL/NVML sources for such values",
                            c.name
                        ),
                    ));
                    continue;
                }
            }
            let s = match me.sets.iter().position(|s| s.cidx == cidx) {
                Some(s) => s,
                None => match EventSet::create(cidx) {
                    Ok(set) => {
                        me.sets.push(set);
                        me.sets.len() - 1
                    }
                    Err(err) => {
                        me.events[i].state = Err(err);
                        continue;
                    }
                },
            };
            me.events[i].state = me.sets[s].add(code, &me.events[i].name).map(|pos| {
                me.sets[s].members.push(i);
                (s, pos)
            });
        }
        // Follow the command's threads and children and attach.
        let PapiTarget::Process(pid) = target else {
            return me;
        };
        for s in 0..me.sets.len() {
            if me.sets[s].members.is_empty() {
                continue;
            }
            let result = me.sets[s].inherit().and_then(|_| me.sets[s].attach(pid));
            if let Err(err) = result {
                for &i in &me.sets[s].members {
                    me.events[i].state = Err(err.clone());
                }
                me.sets[s].members.clear();
            }
        }
        if me.sets.iter().any(|s| s.multiplexed) {
            me.notes.push("PAPI multiplexed an event set (more events than counters); PAPI scales the counts by time_enabled/time_running and does not report the ratio".into());
        }
        me
    }

    /// Start every attached set (`PAPI_start`); call just before the command is let go.
    /// A set that does not start turns its events into failures with PAPI's reason.
    pub fn start(&mut self) {
        if self.sets.is_empty() || init().is_err() {
            return;
        }
        for s in 0..self.sets.len() {
            if self.sets[s].members.is_empty() {
                continue;
            }
            // SAFETY: handle is a valid event set.
            let r = unsafe { ffi::PAPI_start(self.sets[s].handle) };
            if r == OK {
                self.sets[s].running = true;
            } else {
                let err = classify("PAPI_start", r);
                for &i in &self.sets[s].members {
                    self.events[i].state = Err(err.clone());
                }
                self.sets[s].members.clear();
            }
        }
    }

    /// Timeline columns, one per event that counts, in request order.
    pub fn columns(&self) -> Vec<String> {
        self.events
            .iter()
            .filter(|e| e.state.is_ok())
            .map(|e| e.name.clone())
            .collect()
    }

    /// Read every set (`PAPI_read`, cumulative counts since `PAPI_start`); the increase of
    /// each counting event since the previous call, in [`columns`](Self::columns) order
    /// (`None` where the read failed).
    pub fn sample(&mut self) -> Vec<Option<f64>> {
        if !self.sets.is_empty() {
            // Registers the sampler thread with PAPI (a cheap lookup after the first call);
            // init succeeded when the sets were made.
            let _ = init();
        }
        let mut values: Vec<Option<Vec<c_longlong>>> = Vec::with_capacity(self.sets.len());
        for s in &self.sets {
            if !s.running || s.members.is_empty() {
                values.push(None);
                continue;
            }
            let mut v: Vec<c_longlong> = vec![0; s.members.len()];
            // SAFETY: v holds one value per event in the set.
            let r = unsafe { ffi::PAPI_read(s.handle, v.as_mut_ptr()) };
            if r == OK {
                values.push(Some(v));
            } else {
                for &i in &s.members {
                    self.events[i].read_error = Some(format!("PAPI_read: {}", strerror(r)));
                }
                values.push(None);
            }
        }
        let mut out = Vec::new();
        for e in &mut self.events {
            let Ok((s, pos)) = e.state else { continue };
            match values[s].as_ref().map(|v| v[pos]) {
                Some(now) => {
                    let d = (now - e.last).max(0);
                    e.last = now;
                    e.total = Some(now);
                    out.push(Some(d as f64));
                }
                None => out.push(None),
            }
        }
        out
    }

    /// Notes for run.toml (multiplexing).
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// One `[[events]]` record per requested event, backend `papi`, in request order. An
    /// event that never gave a value has no column and no total.
    pub fn records(&self) -> Vec<EventRecord> {
        self.events
            .iter()
            .map(|e| {
                let base = EventRecord {
                    name: e.name.clone(),
                    backend: Backend::Papi,
                    status: EventStatus::NotSupported,
                    reason: None,
                    column: None,
                    total: None,
                    unit: e.unit.clone(),
                    scale: None,
                    running_ratio: None,
                };
                match (&e.state, e.total) {
                    (Err((st, why)), _) => EventRecord {
                        status: *st,
                        reason: Some(why.clone()),
                        ..base
                    },
                    (Ok(_), None) => EventRecord {
                        status: EventStatus::NotCounted,
                        reason: Some(
                            e.read_error
                                .clone()
                                .unwrap_or_else(|| "attached but never read".into()),
                        ),
                        ..base
                    },
                    (Ok((s, _)), Some(t)) => {
                        let mpx = self.sets[*s].multiplexed;
                        let mut why: Vec<String> = self.sets[*s].user_only.iter().cloned().collect();
                        if mpx {
                            why.push("PAPI multiplexed the event set (PAPI_set_multiplex after PAPI_ECNFLCT); the count is scaled by PAPI, which does not report time_running/time_enabled".into());
                        }
                        EventRecord {
                            status: if mpx {
                                EventStatus::Multiplexed
                            } else {
                                EventStatus::Counted
                            },
                            reason: (!why.is_empty()).then(|| why.join("; ")),
                            column: Some(e.name.clone()),
                            total: Some(t as f64),
                            scale: Some(1.0),
                            running_ratio: (!mpx).then_some(1.0),
                            ..base
                        }
                    }
                }
            })
            .collect()
    }
}

impl Drop for PapiCounters {
    fn drop(&mut self) {
        if !self.sets.is_empty() {
            let _ = init();
        }
        for s in &mut self.sets {
            s.destroy();
        }
        if self.owns_lock {
            IN_USE.store(false, Ordering::SeqCst);
        }
    }
}

impl EventSet {
    /// An event set of component `cidx` counting user and kernel space, as perf stat does
    /// for root (PAPI's default is user space only): `PAPI_set_opt(PAPI_DEFDOM)` before the
    /// set is bound to its component. Where the kernel domain is refused the set counts
    /// user space only and `user_only` says why.
    fn create(cidx: c_int) -> Result<Self, (EventStatus, String)> {
        // SAFETY: PAPI_option_t is a C union of plain data; zero is valid.
        let mut opt: ffi::PAPI_option_t = unsafe { std::mem::zeroed() };
        opt.defdomain = ffi::PAPI_domain_option_t {
            def_cidx: cidx,
            eventset: 0,
            domain: (ffi::PAPI_DOM_USER | ffi::PAPI_DOM_KERNEL) as c_int,
        };
        // SAFETY: opt is a valid PAPI_DEFDOM option.
        let d = unsafe { ffi::PAPI_set_opt(ffi::PAPI_DEFDOM as c_int, &mut opt) };
        let user_only = (d != OK).then(|| {
            format!(
                "user space only (PAPI's default domain): PAPI_set_opt(PAPI_DEFDOM, PAPI_DOM_USER|PAPI_DOM_KERNEL): {}; {}",
                strerror(d),
                powerperf_node::perf_event::permission_fix()
            )
        });
        let mut handle: c_int = ffi::PAPI_NULL;
        // SAFETY: handle is writable.
        let r = unsafe { ffi::PAPI_create_eventset(&mut handle) };
        if r != OK {
            return Err(classify("PAPI_create_eventset", r));
        }
        let mut set = EventSet {
            handle,
            cidx,
            members: vec![],
            multiplexed: false,
            running: false,
            user_only,
        };
        // SAFETY: valid event set and component index.
        let r = unsafe { ffi::PAPI_assign_eventset_component(handle, cidx) };
        if r != OK {
            set.destroy();
            return Err(classify(
                &format!("PAPI_assign_eventset_component(component {cidx})"),
                r,
            ));
        }
        Ok(set)
    }

    /// Add one event; on a counter conflict switch the set to multiplexing and retry.
    /// Returns the event's position in the set.
    fn add(&mut self, code: c_int, name: &str) -> Result<usize, (EventStatus, String)> {
        // SAFETY: valid event set, event code from PAPI_event_name_to_code.
        let mut r = unsafe { ffi::PAPI_add_event(self.handle, code) };
        if r == ffi::PAPI_ECNFLCT && !self.multiplexed {
            // SAFETY: plain library calls; multiplex_init may be called more than once.
            let m = unsafe {
                ffi::PAPI_multiplex_init();
                ffi::PAPI_set_multiplex(self.handle)
            };
            if m == OK {
                self.multiplexed = true;
                // SAFETY: as above.
                r = unsafe { ffi::PAPI_add_event(self.handle, code) };
            } else {
                let (st, why) = classify(&format!("PAPI_add_event(`{name}`)"), r);
                return Err((
                    st,
                    format!(
                        "{why}; multiplexing the set failed too: PAPI_set_multiplex: {}",
                        strerror(m)
                    ),
                ));
            }
        }
        if r != OK {
            return Err(classify(&format!("PAPI_add_event(`{name}`)"), r));
        }
        Ok(self.members.len())
    }

    fn inherit(&mut self) -> Result<(), (EventStatus, String)> {
        // SAFETY: PAPI_option_t is a C union of plain data; zero is valid.
        let mut opt: ffi::PAPI_option_t = unsafe { std::mem::zeroed() };
        opt.inherit = ffi::PAPI_inherit_option_t {
            eventset: self.handle,
            inherit: ffi::PAPI_INHERIT_ALL as c_int,
        };
        // SAFETY: opt is a valid option for PAPI_INHERIT.
        let r = unsafe { ffi::PAPI_set_opt(ffi::PAPI_INHERIT as c_int, &mut opt) };
        if r != OK {
            return Err(classify("PAPI_set_opt(PAPI_INHERIT, PAPI_INHERIT_ALL)", r));
        }
        Ok(())
    }

    fn attach(&mut self, pid: i32) -> Result<(), (EventStatus, String)> {
        // SAFETY: valid event set.
        let r = unsafe { ffi::PAPI_attach(self.handle, pid as std::os::raw::c_ulong) };
        if r != OK {
            return Err(classify(&format!("PAPI_attach(pid {pid})"), r));
        }
        Ok(())
    }

    fn destroy(&mut self) {
        if self.handle == ffi::PAPI_NULL {
            return;
        }
        // SAFETY: valid event set; errors on teardown are ignored (nothing to report to).
        unsafe {
            if self.running {
                let mut sink: Vec<c_longlong> = vec![0; self.members.len().max(1) + 64];
                ffi::PAPI_stop(self.handle, sink.as_mut_ptr());
            }
            ffi::PAPI_cleanup_eventset(self.handle);
            ffi::PAPI_destroy_eventset(&mut self.handle);
        }
        self.handle = ffi::PAPI_NULL;
        self.running = false;
    }
}

/// A PAPI preset as `events list` shows it.
#[derive(Debug, Clone)]
pub struct Preset {
    pub name: String,
    pub description: String,
    /// `Err(reason)` when it cannot be added to an event set on this process.
    pub usable: Result<(), String>,
}

/// The presets PAPI maps on this CPU (`PAPI_enum_event` with `PAPI_PRESET_ENUM_AVAIL`, as
/// `papi_avail -a`), each tried on this process (an event set per preset, `PAPI_add_event`;
/// a mapped preset may still not count, e.g. on a virtual machine without a PMU).
///
/// # Errors
/// PAPI could not be initialised (the reason), or another collection holds PAPI.
pub fn list_presets() -> Result<Vec<Preset>, String> {
    init()?;
    if IN_USE.swap(true, Ordering::SeqCst) {
        return Err("PAPI is in use by a collection in this process".into());
    }
    let mut out = Vec::new();
    let mut code: c_int = PRESET_MASK;
    // SAFETY: code is writable; the enumeration starts at the first preset.
    let mut r = unsafe { ffi::PAPI_enum_event(&mut code, ffi::PAPI_ENUM_FIRST as c_int) };
    while r == OK {
        if let Some(info) = event_info(code) {
            let name = cstr_field(&info.symbol);
            let usable = match EventSet::create(0) {
                Err((_, why)) => Err(why),
                Ok(mut set) => {
                    let res = set.add(code, &name).map(drop).map_err(|(_, w)| w);
                    set.destroy();
                    res
                }
            };
            out.push(Preset {
                name,
                description: cstr_field(&info.long_descr),
                usable,
            });
        }
        // SAFETY: as above.
        r = unsafe { ffi::PAPI_enum_event(&mut code, ffi::PAPI_PRESET_ENUM_AVAIL as c_int) };
    }
    IN_USE.store(false, Ordering::SeqCst);
    Ok(out)
}

#[cfg(test)]
mod tests;
