//! The recording runtime: per-thread event buffers, the region name table, the events file.
//!
//! Hot path (a begin or an end by handle): one acquire load of the global state, one
//! thread-local access, one uncontended lock of the thread's own buffer (only the owner
//! locks it, except [`flush_all`] and the exit handler), one `clock_gettime`, one push.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::hash::{BuildHasherDefault, Hasher};
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use crate::codes;
use crate::counters::{ThreadCounters, MAX_COUNTERS};

/// First counter slot of a record without counter values.
const NO_VALUES: u64 = u64::MAX;

/// The counter values of a record without any.
static NO_COUNTERS: [u64; MAX_COUNTERS] = [NO_VALUES; MAX_COUNTERS];

/// Environment variable naming the run directory; without it every call is a no-op.
pub const ENV_RUN_DIR: &str = "POWERPERF_RUN_DIR";

/// Events a thread buffers before it writes them to the events file.
pub const BUFFER_EVENTS: usize = 8192;

/// First line of every text (v1) events file (followed by ` pid=<pid>`).
pub const FILE_MAGIC: &str = "# powerperf-rt region events v1";

/// First 8 bytes of every binary (v2) events file, `RUN/region_events/<pid>.bin`: what
/// the runtime writes (rt/README.md, "File format").
pub const BIN_MAGIC: [u8; 8] = *b"PPRTEV2\n";
/// v2 frame: region names (`id: u32, len: u32, UTF-8 bytes`, repeated).
pub const TAG_NAMES: u32 = 1;
/// v2 frame: one thread's events (`tid, count, counters, 0: u32`, then `count` times
/// `t_ns: u64`, `count` times `id << 2 | kind: u32`, `count x counters` values `u64`).
pub const TAG_EVENTS: u32 = 2;

static RT: OnceLock<Option<Runtime>> = OnceLock::new();

/// `id_kind` low bits: the record's kind (`B`, `E`, `X` in the file).
const KIND_BEGIN: u32 = 0;
const KIND_END: u32 = 1;
const KIND_EXIT: u32 = 2;

/// Deepest nesting recorded per thread; deeper begins return `PP_ENOSPC`, are not
/// recorded, and their ends are skipped.
pub const MAX_DEPTH: usize = 1024;

/// One thread's events and open regions. Only the owner thread appends (no lock, no
/// read-modify-write on the hot path: slots are atomics written with plain stores, the
/// count is published with a release store). Writers of the file (the owner when the
/// buffer is full or the thread exits, `pp_flush` and the exit handler from any thread)
/// serialise on `flush`, which holds how many of the published events are written.
struct ThreadBuf {
    tid: u32,
    t_ns: Box<[AtomicU64]>,
    /// `id << 2 | kind` (0 begin, 1 end, 2 exit).
    id_kind: Box<[AtomicU32]>,
    len: AtomicUsize,
    /// Counters per event (`nc` slots from `i * nc`).
    nc: usize,
    ctr: Box<[AtomicU64]>,
    stack: Box<[AtomicU32]>,
    depth: AtomicUsize,
    flush: Mutex<FlushState>,
}

struct FlushState {
    written: usize,
    done: bool,
}

impl ThreadBuf {
    fn new(tid: u32, nc: usize) -> ThreadBuf {
        ThreadBuf {
            tid,
            t_ns: (0..BUFFER_EVENTS).map(|_| AtomicU64::new(0)).collect(),
            id_kind: (0..BUFFER_EVENTS).map(|_| AtomicU32::new(0)).collect(),
            len: AtomicUsize::new(0),
            nc,
            ctr: (0..BUFFER_EVENTS * nc).map(|_| AtomicU64::new(0)).collect(),
            stack: (0..MAX_DEPTH).map(|_| AtomicU32::new(0)).collect(),
            depth: AtomicUsize::new(0),
            flush: Mutex::new(FlushState {
                written: 0,
                done: false,
            }),
        }
    }

    /// Owner only: the slot for the next event, writing the buffer first when it is
    /// full; `None` once the thread's buffer is closed.
    #[inline]
    fn slot(&self, rt: &Runtime) -> Option<usize> {
        let n = self.len.load(Ordering::Relaxed);
        if n < BUFFER_EVENTS {
            return Some(n);
        }
        self.drain(rt)
    }

    #[cold]
    #[inline(never)]
    fn drain(&self, rt: &Runtime) -> Option<usize> {
        let mut st = lock(&self.flush);
        if st.done {
            return None;
        }
        rt.write_events(self, st.written, BUFFER_EVENTS, &[]);
        st.written = 0;
        self.len.store(0, Ordering::Release);
        Some(0)
    }

    /// Owner only: append one event with the counter values `ctr` (`ctr[0] ==
    /// NO_VALUES` for none, e.g. [`NO_COUNTERS`]). Always inlined: it is the hot path of
    /// every begin and end.
    #[inline(always)]
    fn push(&self, rt: &Runtime, t_ns: u64, id: u32, kind: u32, ctr: &[u64; MAX_COUNTERS]) {
        let Some(n) = self.slot(rt) else { return };
        self.t_ns[n].store(t_ns, Ordering::Relaxed);
        self.id_kind[n].store(id << 2 | kind, Ordering::Relaxed);
        let row = &self.ctr[n * self.nc..(n + 1) * self.nc];
        for (slot, &v) in row.iter().zip(ctr) {
            slot.store(v, Ordering::Relaxed);
        }
        self.len.store(n + 1, Ordering::Release);
    }
}

struct Output {
    file: Option<File>,
    /// Region ids below this have their `R` line in the file.
    defined: usize,
    /// The text of one write, kept between writes (its capacity is reused).
    text: Vec<u8>,
}

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

type FastMap = HashMap<Box<[u8]>, u32, BuildHasherDefault<Fnv>>;

struct Names {
    ids: FastMap,
    /// Index = region id; index 0 is unused (handle 0 is the no-op handle).
    list: Vec<String>,
}

struct Runtime {
    pid: u32,
    path: PathBuf,
    out: Mutex<Output>,
    names: Mutex<Names>,
    /// `names.list.len()`, readable without the lock to validate handles.
    n_names: AtomicU32,
    threads: Mutex<Vec<Arc<ThreadBuf>>>,
    finished: AtomicBool,
    /// The frequency controller (`POWERPERF_CTL_SOCKET`), when switching is on.
    ctl: Option<crate::ctl::Ctl>,
    /// Counters read at every begin and end (`POWERPERF_RT_COUNTERS`), as (perf type,
    /// config); the file's `# counters` line names them.
    counters: Vec<(u32, u64)>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// CLOCK_MONOTONIC in nanoseconds.
#[inline]
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

#[inline]
fn runtime() -> Option<&'static Runtime> {
    let rt = RT.get_or_init(Runtime::from_env).as_ref()?;
    if rt.finished.load(Ordering::Relaxed) {
        return None;
    }
    Some(rt)
}

/// Whether this process records regions (`POWERPERF_RUN_DIR` set and its events file
/// open). Decided at the first call and cached for the life of the process.
pub fn enabled() -> bool {
    runtime().is_some()
}

extern "C" fn at_exit() {
    // Never unwind into libc.
    let _ = std::panic::catch_unwind(|| {
        if let Some(Some(rt)) = RT.get() {
            rt.finish();
        }
    });
}

impl Runtime {
    fn from_env() -> Option<Runtime> {
        let dir = std::env::var_os(ENV_RUN_DIR)?;
        if dir.is_empty() {
            return None;
        }
        let pid = std::process::id();
        let events_dir = PathBuf::from(dir).join("region_events");
        let path = events_dir.join(format!("{pid}.bin"));
        let counters = std::env::var(crate::counters::ENV_COUNTERS)
            .map(|s| crate::counters::probe(&s))
            .unwrap_or_default();
        // v2 header: magic, pid, number of counters, each counter's name (length, UTF-8).
        let mut header = BIN_MAGIC.to_vec();
        put_u32(&mut header, pid);
        put_u32(&mut header, counters.len() as u32);
        for (name, _) in &counters {
            put_u32(&mut header, name.len() as u32);
            header.extend_from_slice(name.as_bytes());
        }
        let opened = std::fs::create_dir_all(&events_dir).and_then(|_| {
            let mut f = OpenOptions::new().create(true).append(true).open(&path)?;
            f.write_all(&header)?;
            Ok(f)
        });
        let file = match opened {
            Ok(f) => f,
            Err(e) => {
                eprintln!(
                    "powerperf-rt: cannot write {}: {e}; regions are not recorded",
                    path.display()
                );
                return None;
            }
        };
        // SAFETY: `at_exit` is an `extern "C" fn()` that lives for the whole process.
        unsafe { libc::atexit(at_exit) };
        Some(Runtime {
            pid,
            path,
            out: Mutex::new(Output {
                file: Some(file),
                defined: 1,
                text: Vec::new(),
            }),
            names: Mutex::new(Names {
                ids: FastMap::default(),
                list: vec![String::new()],
            }),
            n_names: AtomicU32::new(1),
            threads: Mutex::new(Vec::new()),
            finished: AtomicBool::new(false),
            ctl: crate::ctl::Ctl::from_env(),
            counters: counters.into_iter().map(|(_, ev)| ev).collect(),
        })
    }

    /// The id of `name`, registering it on first use.
    fn register(&self, name: &[u8]) -> Result<u32, i32> {
        let mut names = lock(&self.names);
        if let Some(&id) = names.ids.get(name) {
            return Ok(id);
        }
        let id = u32::try_from(names.list.len()).map_err(|_| codes::PP_ENOSPC)?;
        if id >= 1 << 30 {
            return Err(codes::PP_ENOSPC);
        }
        names.list.push(String::from_utf8_lossy(name).into_owned());
        names.ids.insert(name.into(), id);
        self.n_names.store(id + 1, Ordering::Release);
        Ok(id)
    }

    /// Tell the frequency controller (if any) that region `id` begins (`B`) or ends (`E`).
    #[cold]
    fn switch(&self, ctl: &crate::ctl::Ctl, kind: u8, id: u32) {
        let name = lock(&self.names).list.get(id as usize).cloned();
        if let Some(name) = name {
            ctl.send(kind, &name);
        }
    }

    /// Write the events `from..to` of thread buffer `b`, then `exits` (`X` records: time,
    /// region id), as one `T` frame, preceded by an `R` frame for names not yet in the
    /// file (binary format v2, rt/README.md). Caller holds `b.flush`. The frame is the
    /// buffer's slots copied as they are (no formatting in the program's thread; `powerperf
    /// collect` turns the file into the v1 text afterwards) and written with one `write(2)`.
    fn write_events(&self, b: &ThreadBuf, from: usize, to: usize, exits: &[(u64, u32)]) {
        // A child forked without exec shares our buffers and file: it writes nothing.
        if (from >= to && exits.is_empty()) || std::process::id() != self.pid {
            return;
        }
        let mut guard = lock(&self.out);
        let out = &mut *guard;
        let mut bytes = std::mem::take(&mut out.text);
        bytes.clear();
        {
            let names = lock(&self.names);
            if names.list.len() > out.defined {
                let start = begin_frame(&mut bytes, TAG_NAMES);
                for (id, name) in names.list.iter().enumerate().skip(out.defined) {
                    put_u32(&mut bytes, id as u32);
                    put_u32(&mut bytes, name.len() as u32);
                    bytes.extend_from_slice(name.as_bytes());
                }
                end_frame(&mut bytes, start);
                out.defined = names.list.len();
            }
        }
        let count = to.saturating_sub(from) + exits.len();
        let nc = b.nc;
        let start = begin_frame(&mut bytes, TAG_EVENTS);
        bytes.reserve(16 + count * (12 + 8 * nc));
        put_u32(&mut bytes, b.tid);
        put_u32(&mut bytes, count as u32);
        put_u32(&mut bytes, nc as u32);
        put_u32(&mut bytes, 0);
        let to = to.max(from);
        put_slots(&mut bytes, &b.t_ns[from..to], |a| {
            a.load(Ordering::Relaxed).to_le_bytes()
        });
        for &(t_ns, _) in exits {
            bytes.extend_from_slice(&t_ns.to_le_bytes());
        }
        put_slots(&mut bytes, &b.id_kind[from..to], |a| {
            a.load(Ordering::Relaxed).to_le_bytes()
        });
        for &(_, id) in exits {
            put_u32(&mut bytes, id << 2 | KIND_EXIT);
        }
        if nc > 0 {
            put_slots(&mut bytes, &b.ctr[from * nc..to * nc], |a| {
                a.load(Ordering::Relaxed).to_le_bytes()
            });
            for _ in 0..exits.len() * nc {
                bytes.extend_from_slice(&NO_VALUES.to_le_bytes());
            }
        }
        end_frame(&mut bytes, start);
        if let Some(f) = out.file.as_mut() {
            if let Err(e) = f.write_all(&bytes) {
                eprintln!(
                    "powerperf-rt: writing {} failed: {e}; later region events are dropped",
                    self.path.display()
                );
                out.file = None;
            }
        }
        out.text = bytes;
    }

    /// Write a thread's pending events, then close its open regions with `X` records
    /// (thread or process exit). After this the buffer records nothing.
    fn close_thread(&self, b: &ThreadBuf) {
        let mut st = lock(&b.flush);
        if st.done {
            return;
        }
        st.done = true;
        let t_ns = now_ns();
        let depth = b.depth.load(Ordering::Acquire).min(MAX_DEPTH);
        let exits: Vec<(u64, u32)> = (0..depth)
            .rev()
            .map(|i| (t_ns, b.stack[i].load(Ordering::Relaxed)))
            .collect();
        let len = b.len.load(Ordering::Acquire);
        self.write_events(b, st.written, len, &exits);
        st.written = len;
    }

    fn flush_all(&self) {
        let threads: Vec<Arc<ThreadBuf>> = lock(&self.threads).clone();
        for b in threads {
            let mut st = lock(&b.flush);
            if !st.done {
                let len = b.len.load(Ordering::Acquire);
                self.write_events(&b, st.written, len, &[]);
                st.written = len;
            }
        }
    }

    /// Process exit: from here on every call is a no-op; every thread's buffer is written,
    /// joined or not, and its open regions are closed with `X`.
    fn finish(&self) {
        self.finished.store(true, Ordering::SeqCst);
        let threads: Vec<Arc<ThreadBuf>> = std::mem::take(&mut *lock(&self.threads));
        for b in threads {
            self.close_thread(&b);
        }
    }
}

/// Append the little-endian bytes of every slot: the output grows once, then each slot is
/// stored into its place (no capacity check per value).
#[inline]
fn put_slots<A, const N: usize>(out: &mut Vec<u8>, slots: &[A], le: impl Fn(&A) -> [u8; N]) {
    let start = out.len();
    out.resize(start + N * slots.len(), 0);
    for (dst, a) in out[start..].chunks_exact_mut(N).zip(slots) {
        dst.copy_from_slice(&le(a));
    }
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// Start a frame `tag: u32, len: u32, payload`; returns where its length goes.
fn begin_frame(out: &mut Vec<u8>, tag: u32) -> usize {
    put_u32(out, tag);
    put_u32(out, 0);
    out.len()
}

fn end_frame(out: &mut [u8], start: usize) {
    let len = (out.len() - start) as u32;
    out[start - 4..start].copy_from_slice(&len.to_le_bytes());
}

struct Local {
    buf: Arc<ThreadBuf>,
    /// This thread's counter group, when counters are read at region boundaries.
    counters: Option<ThreadCounters>,
    cache: RefCell<FastMap>,
    /// Begins beyond MAX_DEPTH not recorded (their ends are skipped).
    overflow: Cell<u32>,
}

impl Local {
    fn new() -> Local {
        let rt = runtime();
        let counters = rt
            .filter(|rt| !rt.counters.is_empty())
            .and_then(|rt| ThreadCounters::open(&rt.counters));
        let nc = counters.as_ref().map_or(0, ThreadCounters::len);
        let buf = Arc::new(ThreadBuf::new(gettid(), nc));
        if let Some(rt) = rt {
            lock(&rt.threads).push(Arc::clone(&buf));
        }
        Local {
            buf,
            counters,
            cache: RefCell::new(FastMap::default()),
            overflow: Cell::new(0),
        }
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        let Some(rt) = runtime() else { return };
        rt.close_thread(&self.buf);
        lock(&rt.threads).retain(|t| !Arc::ptr_eq(t, &self.buf));
    }
}

impl Local {
    /// Append an event to this thread's buffer, with the counter values read now when
    /// the thread counts (`POWERPERF_RT_COUNTERS`).
    #[inline]
    fn push(&self, rt: &Runtime, t_ns: u64, id: u32, kind: u32) {
        if self.counters.is_none() {
            self.buf.push(rt, t_ns, id, kind, &NO_COUNTERS);
        } else {
            self.push_counted(rt, t_ns, id, kind);
        }
    }

    /// Read the thread's counters and append the event with their values (kept out of
    /// line: the path without counters stays small).
    #[inline(never)]
    fn push_counted(&self, rt: &Runtime, t_ns: u64, id: u32, kind: u32) {
        self.buf.push(rt, t_ns, id, kind, &self.read_counters());
    }

    /// Append an end event. With counters, they are read before the timestamp is
    /// taken (a begin takes its timestamp first), so the counted window of a region lies
    /// inside its timed one: the read's own cost never makes a single thread's
    /// `task-clock` exceed the region's wall time. `t_early` is the timestamp taken on
    /// entry, used without counters.
    #[inline]
    fn push_end(&self, rt: &Runtime, t_early: u64, id: u32) {
        if self.counters.is_none() {
            self.buf.push(rt, t_early, id, KIND_END, &NO_COUNTERS);
        } else {
            self.push_end_counted(rt, id);
        }
    }

    #[inline(never)]
    fn push_end_counted(&self, rt: &Runtime, id: u32) {
        let ctr = self.read_counters();
        self.buf.push(rt, now_ns(), id, KIND_END, &ctr);
    }

    /// The thread's counters now (`ctr[0] == NO_VALUES` without counters or on a failed
    /// read).
    #[inline]
    fn read_counters(&self) -> [u64; MAX_COUNTERS] {
        let mut v = [NO_VALUES; MAX_COUNTERS];
        if let Some(c) = &self.counters {
            if !c.read(&mut v) {
                v[0] = NO_VALUES;
            }
        }
        v
    }
}

thread_local! {
    static LOCAL: Local = Local::new();
}

/// Id of `name` through the calling thread's cache (no global lock after the first use
/// on a thread). `Ok(0)` when the runtime is off.
pub(crate) fn id_of(name: &[u8]) -> Result<u32, i32> {
    let Some(rt) = runtime() else { return Ok(0) };
    LOCAL
        .try_with(|l| {
            if let Some(&id) = l.cache.borrow().get(name) {
                return Ok(id);
            }
            let id = rt.register(name)?;
            l.cache.borrow_mut().insert(name.into(), id);
            Ok(id)
        })
        .unwrap_or(Ok(0))
}

/// Handle (region id) for `name`, registered in the global table; 0 when the runtime is off.
pub(crate) fn handle_of(name: &[u8]) -> Result<u32, i32> {
    match runtime() {
        Some(rt) => rt.register(name),
        None => Ok(0),
    }
}

#[inline]
fn check(rt: &Runtime, id: u32) -> Result<(), i32> {
    if id == 0 || id >= rt.n_names.load(Ordering::Acquire) {
        Err(codes::PP_EINVAL)
    } else {
        Ok(())
    }
}

/// Begin region `id` on the calling thread.
#[inline]
pub(crate) fn begin_id(id: u32) -> i32 {
    let Some(rt) = runtime() else { return 0 };
    if let Err(e) = check(rt, id) {
        return e;
    }
    LOCAL
        .try_with(|l| {
            let b = &*l.buf;
            let d = b.depth.load(Ordering::Relaxed);
            if d >= MAX_DEPTH {
                l.overflow.set(l.overflow.get() + 1);
                return codes::PP_ENOSPC;
            }
            b.stack[d].store(id, Ordering::Relaxed);
            b.depth.store(d + 1, Ordering::Release);
            let t_ns = now_ns();
            l.push(rt, t_ns, id, KIND_BEGIN);
            codes::PP_OK
        })
        .inspect(|&rc| {
            if let Some(c) = &rt.ctl {
                if rc == codes::PP_OK {
                    rt.switch(c, b'B', id);
                }
            }
        })
        .unwrap_or(0)
}

/// End region `id` on the calling thread. The event is recorded even on misuse.
#[inline]
pub(crate) fn end_id(id: u32) -> i32 {
    let Some(rt) = runtime() else { return 0 };
    let t_ns = now_ns();
    if let Err(e) = check(rt, id) {
        return e;
    }
    LOCAL
        .try_with(|l| {
            if l.overflow.get() > 0 {
                l.overflow.set(l.overflow.get() - 1);
                return (codes::PP_OK, false);
            }
            let b = &*l.buf;
            let d = b.depth.load(Ordering::Relaxed);
            let rc = if d > 0 && b.stack[d - 1].load(Ordering::Relaxed) == id {
                b.depth.store(d - 1, Ordering::Release);
                codes::PP_OK
            } else {
                match (0..d)
                    .rev()
                    .find(|&i| b.stack[i].load(Ordering::Relaxed) == id)
                {
                    // Regions opened inside it are abandoned (the reader drops them too).
                    Some(pos) => {
                        b.depth.store(pos, Ordering::Release);
                        codes::PP_ENEST
                    }
                    None => codes::PP_ENOTOPEN,
                }
            };
            l.push_end(rt, t_ns, id);
            (rc, rc == codes::PP_OK || rc == codes::PP_ENEST)
        })
        .map(|(rc, was_open)| {
            if let Some(c) = &rt.ctl {
                if was_open {
                    rt.switch(c, b'E', id);
                }
            }
            rc
        })
        .unwrap_or(0)
}

/// Write every thread's buffered events to the events file.
pub(crate) fn flush_all() {
    if let Some(rt) = runtime() {
        rt.flush_all();
    }
}
