//! The recording runtime: per-thread event buffers, the region name table, the events file.
//!
//! Hot path (a begin or an end by handle): one acquire load of the global state, one
//! thread-local access, one uncontended lock of the thread's own buffer (only the owner
//! locks it, except [`flush_all`] and the exit handler), one `clock_gettime`, one push.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::hash::{BuildHasherDefault, Hasher};
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use crate::codes;
use crate::counters::{ThreadCounters, MAX_COUNTERS};

/// `Ev::ctr[0]` of a record without counter values.
const NO_VALUES: u64 = u64::MAX;

/// Environment variable naming the run directory; without it every call is a no-op.
pub const ENV_RUN_DIR: &str = "POWERPERF_RUN_DIR";

/// Events a thread buffers before it writes them to the events file.
pub const BUFFER_EVENTS: usize = 8192;

/// First line of every events file (followed by ` pid=<pid>`).
pub const FILE_MAGIC: &str = "# powerperf-rt region events v1";

static RT: OnceLock<Option<Runtime>> = OnceLock::new();

/// Event kinds as recorded in the per-thread buffer.
#[derive(Clone, Copy)]
enum Kind {
    Begin,
    End,
    Exit,
}

#[derive(Clone, Copy)]
struct Ev {
    t_ns: u64,
    id: u32,
    kind: Kind,
    /// Counter values (`POWERPERF_RT_COUNTERS`), `ctr[0] == NO_VALUES` when none.
    ctr: [u64; MAX_COUNTERS],
}

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

    /// Published events not yet written (caller holds `flush`).
    fn pending(&self, st: &FlushState) -> Vec<Ev> {
        let len = self.len.load(Ordering::Acquire);
        (st.written..len)
            .map(|i| {
                let ik = self.id_kind[i].load(Ordering::Relaxed);
                let mut ctr = [NO_VALUES; MAX_COUNTERS];
                for (k, c) in ctr.iter_mut().take(self.nc).enumerate() {
                    *c = self.ctr[i * self.nc + k].load(Ordering::Relaxed);
                }
                Ev {
                    t_ns: self.t_ns[i].load(Ordering::Relaxed),
                    id: ik >> 2,
                    kind: match ik & 3 {
                        0 => Kind::Begin,
                        1 => Kind::End,
                        _ => Kind::Exit,
                    },
                    ctr,
                }
            })
            .collect()
    }

    /// Owner only: append one event (with the counter values `ctr`, `ctr[0] ==
    /// NO_VALUES` for none), writing the buffer first when it is full.
    #[inline]
    fn push(&self, rt: &Runtime, t_ns: u64, id: u32, kind: u32, ctr: &[u64; MAX_COUNTERS]) {
        let mut n = self.len.load(Ordering::Relaxed);
        if n == BUFFER_EVENTS {
            let mut st = lock(&self.flush);
            if st.done {
                return;
            }
            let evs = self.pending(&st);
            rt.write_events(self.tid, &evs);
            st.written = 0;
            self.len.store(0, Ordering::Release);
            n = 0;
        }
        self.t_ns[n].store(t_ns, Ordering::Relaxed);
        self.id_kind[n].store(id << 2 | kind, Ordering::Relaxed);
        for k in 0..self.nc {
            self.ctr[n * self.nc + k].store(ctr[k], Ordering::Relaxed);
        }
        self.len.store(n + 1, Ordering::Release);
    }
}

struct Output {
    file: Option<File>,
    /// Region ids below this have their `R` line in the file.
    defined: usize,
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
        let path = events_dir.join(format!("{pid}.tsv"));
        let counters = std::env::var(crate::counters::ENV_COUNTERS)
            .map(|s| crate::counters::probe(&s))
            .unwrap_or_default();
        let mut header = format!("{FILE_MAGIC} pid={pid}\n");
        if !counters.is_empty() {
            header.push_str(crate::events::COUNTERS_LINE);
            let names: Vec<&str> = counters.iter().map(|(n, _)| n.as_str()).collect();
            header.push_str(&names.join("\t"));
            header.push('\n');
        }
        let opened = std::fs::create_dir_all(&events_dir).and_then(|_| {
            let mut f = OpenOptions::new().create(true).append(true).open(&path)?;
            f.write_all(header.as_bytes())?;
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

    /// Write a thread's buffered events (and `R` lines for new names) to the file.
    fn write_events(&self, tid: u32, events: &[Ev]) {
        // A child forked without exec shares our buffers and file: it writes nothing.
        if events.is_empty() || std::process::id() != self.pid {
            return;
        }
        let mut out = lock(&self.out);
        let mut text = String::new();
        {
            let names = lock(&self.names);
            for (id, name) in names.list.iter().enumerate().skip(out.defined) {
                text.push_str("R\t");
                let _ = write!(text, "{id}\t");
                escape_into(&mut text, name);
                text.push('\n');
            }
            out.defined = names.list.len();
        }
        let mut bytes = text.into_bytes();
        let mut tid_digits = Vec::with_capacity(12);
        push_dec(&mut tid_digits, u64::from(tid));
        // Each line is at most 1 + 1 + 20 + 1 + 10 + 1 + 10 + 1 bytes.
        let (mut hi_cached, mut hi_digits) = (0u64, Vec::with_capacity(12));
        let mut pos = bytes.len();
        // Each line is at most 48 bytes plus 21 per counter value.
        let nc = self.counters.len();
        bytes.resize(pos + events.len() * (48 + 21 * nc), 0);
        for e in events {
            bytes[pos] = match e.kind {
                Kind::Begin => b'B',
                Kind::End => b'E',
                Kind::Exit => b'X',
            };
            bytes[pos + 1] = b'\t';
            pos += 2;
            // t_ns = hi * 10^8 + lo: hi changes every 0.1 s, so its digits are cached
            // and lo is written as exactly 8 digits.
            let hi = e.t_ns / 100_000_000;
            if hi == 0 {
                pos = put_dec(&mut bytes, pos, e.t_ns);
            } else {
                if hi != hi_cached {
                    hi_cached = hi;
                    hi_digits.clear();
                    push_dec(&mut hi_digits, hi);
                }
                bytes[pos..pos + hi_digits.len()].copy_from_slice(&hi_digits);
                pos += hi_digits.len();
                put_8_digits(&mut bytes[pos..pos + 8], (e.t_ns % 100_000_000) as u32);
                pos += 8;
            }
            bytes[pos] = b'\t';
            bytes[pos + 1..pos + 1 + tid_digits.len()].copy_from_slice(&tid_digits);
            pos += 1 + tid_digits.len();
            bytes[pos] = b'\t';
            pos = put_dec(&mut bytes, pos + 1, u64::from(e.id));
            if nc > 0 && e.ctr[0] != NO_VALUES {
                for &v in &e.ctr[..nc] {
                    bytes[pos] = b'\t';
                    pos = put_dec(&mut bytes, pos + 1, v);
                }
            }
            bytes[pos] = b'\n';
            pos += 1;
        }
        bytes.truncate(pos);
        if let Some(f) = out.file.as_mut() {
            if let Err(e) = f.write_all(&bytes) {
                eprintln!(
                    "powerperf-rt: writing {} failed: {e}; later region events are dropped",
                    self.path.display()
                );
                out.file = None;
            }
        }
    }

    /// Write a thread's pending events, then close its open regions with `X` records
    /// (thread or process exit). After this the buffer records nothing.
    fn close_thread(&self, b: &ThreadBuf) {
        let mut st = lock(&b.flush);
        if st.done {
            return;
        }
        st.done = true;
        let mut evs = b.pending(&st);
        let t_ns = now_ns();
        let depth = b.depth.load(Ordering::Acquire).min(MAX_DEPTH);
        for i in (0..depth).rev() {
            evs.push(Ev {
                t_ns,
                id: b.stack[i].load(Ordering::Relaxed),
                kind: Kind::Exit,
                ctr: [NO_VALUES; MAX_COUNTERS],
            });
        }
        self.write_events(b.tid, &evs);
    }

    fn flush_all(&self) {
        let threads: Vec<Arc<ThreadBuf>> = lock(&self.threads).clone();
        for b in threads {
            let mut st = lock(&b.flush);
            if !st.done {
                let evs = b.pending(&st);
                self.write_events(b.tid, &evs);
                st.written += evs.len();
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

/// Append the decimal digits of `v` (the event lines are the hot part of a flush).
fn push_dec(out: &mut Vec<u8>, mut v: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&buf[i..]);
}

const DIGIT_PAIRS: &[u8; 200] = b"\
0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

/// Write the decimal digits of `v` at `out[pos..]` (room for 20 bytes needed); returns
/// the position after them.
#[inline]
fn put_dec(out: &mut [u8], pos: usize, mut v: u64) -> usize {
    let mut n = 1;
    let mut x = v;
    while x >= 10 {
        x /= 10;
        n += 1;
    }
    let mut i = pos + n;
    while v >= 100 {
        let d = (v % 100) as usize * 2;
        v /= 100;
        i -= 2;
        out[i] = DIGIT_PAIRS[d];
        out[i + 1] = DIGIT_PAIRS[d + 1];
    }
    if v >= 10 {
        let d = v as usize * 2;
        out[pos] = DIGIT_PAIRS[d];
        out[pos + 1] = DIGIT_PAIRS[d + 1];
    } else {
        out[pos] = b'0' + v as u8;
    }
    pos + n
}

/// Write `v < 10^8` as exactly 8 digits.
#[inline]
fn put_8_digits(out: &mut [u8], v: u32) {
    let (a, b) = (v / 10_000, v % 10_000);
    for (k, q) in [a / 100, a % 100, b / 100, b % 100].into_iter().enumerate() {
        let d = q as usize * 2;
        out[2 * k] = DIGIT_PAIRS[d];
        out[2 * k + 1] = DIGIT_PAIRS[d + 1];
    }
}

/// Escape a region name for the `R` line: `\` -> `\\`, tab -> `\t`, LF -> `\n`, CR -> `\r`.
pub(crate) fn escape_into(out: &mut String, name: &str) {
    for c in name.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
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
            b.push(rt, t_ns, id, 0, &l.read_counters());
            codes::PP_OK
        })
        .map(|rc| {
            if let Some(c) = &rt.ctl {
                if rc == codes::PP_OK {
                    rt.switch(c, b'B', id);
                }
            }
            rc
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
            b.push(rt, t_ns, id, 1, &l.read_counters());
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

#[cfg(test)]
mod tests {
    #[test]
    fn decimal_formatting() {
        for v in [0u64, 7, 10, 99, 100, 101, 12345, 1_000_000_007, u64::MAX] {
            let mut a = Vec::new();
            super::push_dec(&mut a, v);
            let mut b = [0u8; 24];
            let n = super::put_dec(&mut b, 2, v);
            assert_eq!(&b[2..n], v.to_string().as_bytes());
            assert_eq!(a, v.to_string().as_bytes());
            if v < 100_000_000 {
                let mut c = [0u8; 8];
                super::put_8_digits(&mut c, v as u32);
                assert_eq!(c, format!("{v:08}").as_bytes());
            }
        }
    }
}
