//! The daemon: the socket, one thread per connection (a session), the policy check of every
//! request, per-CPU ownership of settings, the journal, and the restore of a session's
//! settings in reverse order when it ends (request, disconnect, end of the client process,
//! daemon shutdown).

use crate::journal::{self, Entry, Journal};
use crate::policy::Config;
use crate::users::Identity;
use anyhow::{Context, Result};
use powerperf_node::controller::{CpufreqController, FrequencyController, Snapshot};
use powerperf_node::daemon::{EnergyReading, OnBehalf, Request, Response};
use powerperf_node::gpu_control::{GpuControl, GpuSaved};
use powerperf_node::rapl::{self, RaplDomain};
use powerperf_node::state::{self, ProcessId};
use std::collections::{BTreeMap, HashMap};
use std::io::{Read as _, Write as _};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Where the daemon listens and keeps state.
#[derive(Debug, Clone)]
pub struct Options {
    pub socket: PathBuf,
    pub state_dir: PathBuf,
    pub sysfs_root: PathBuf,
    pub config: Config,
    /// GPUs described by files (`--fake-gpu DIR`, tests) instead of NVML.
    pub fake_gpu: Option<PathBuf>,
}

/// A CPU held by a session.
#[derive(Debug, Clone)]
struct Hold {
    session: u64,
    uid: u32,
    pid: i32,
    /// The session's last setting of it (`1600 MHz`, `governor performance`).
    setting: String,
}

/// A per-CPU setting a session asks for.
#[derive(Debug, Clone)]
enum Setting {
    /// `cpu.core_freq`, MHz.
    CoreFreq(f64),
    /// `cpu.governor`.
    Governor(String),
}

impl Setting {
    fn control(&self) -> &'static str {
        match self {
            Setting::CoreFreq(_) => "cpu.core_freq",
            Setting::Governor(_) => "cpu.governor",
        }
    }
    fn describe(&self) -> String {
        match self {
            Setting::CoreFreq(m) => format!("{m} MHz"),
            Setting::Governor(g) => format!("governor {g}"),
        }
    }
}

/// What a session changed, in order, to be put back latest first.
#[derive(Debug)]
enum Saved {
    /// CPUs (core frequency, governor) and their values before.
    Cpus(Vec<u32>, Snapshot),
    /// Uncore domains' `min_freq_khz`/`max_freq_khz` before.
    Uncore(Snapshot),
    /// A GPU control.
    Gpu(GpuSaved),
}

/// One client connection.
#[derive(Debug)]
struct Session {
    /// Who the peer is (SO_PEERCRED).
    peer_uid: u32,
    peer_pid: i32,
    /// Whose policy applies (the peer, or the uid a root client acts for).
    who: Identity,
    job: Option<String>,
    /// What the session changed, in order.
    saves: Vec<Saved>,
    /// The perf power PMU counters this session opened (`read_power`).
    power: Option<power::PowerCounters>,
    /// Whether a request other than hello came.
    started: bool,
}

struct Inner {
    journal: Journal,
    next_session: u64,
    held: BTreeMap<u32, Hold>,
    /// Uncore domains (`uncore package_00_die_00`) and GPUs (`GPU 0`) held by sessions.
    held_other: BTreeMap<String, Hold>,
    /// The GPU controls (NVML read-only, or the fake GPUs of `--fake-gpu`).
    gpu: Option<Box<dyn GpuControl>>,
    /// NVML power and energy reads (`read_power`).
    nvml: Option<Box<dyn powerperf_node::nvml::GpuSource>>,
    /// The sysfs power devices under the sysfs root (`read_power`; [`crate::devices`]).
    devices: Vec<Box<dyn powerperf_node::devices::PowerDevice>>,
    sessions: BTreeMap<u64, Session>,
    conns_total: usize,
    conns_per_uid: HashMap<u32, usize>,
}

/// The answer to a write: the writes made, or the refusal saying that what the session
/// changed is restored when it ends (logged with `what`, e.g. `cpufreq`).
fn write_answer<W: std::fmt::Display, E: std::fmt::Display>(
    session: u64,
    (uid, pid): (u32, i32),
    what: &str,
    done: std::result::Result<Vec<W>, E>,
) -> Response {
    match done {
        Ok(w) => Response {
            ok: true,
            session: Some(session),
            writes: w.iter().map(|x| x.to_string()).collect(),
            ..Default::default()
        },
        Err(e) => {
            tracing::error!(session, uid, pid, error = %e, "a {what} write failed; the session restores what it changed when it ends");
            Response::refused(format!(
                "{e}; what this session changed is restored when it ends"
            ))
        }
    }
}

impl Inner {
    /// Journal what session `session`'s first change of a control overwrites (the journal
    /// first, so a crash after the write still restores it), then keep it for the session's
    /// restore. `Err`: why the request is refused (for [`Response::refused`]); nothing was
    /// changed.
    fn save_first(
        &mut self,
        session: u64,
        who: (u32, i32, Option<String>),
        control: &str,
        saved: Saved,
    ) -> Result<(), String> {
        let (uid, pid, job) = who;
        let (snapshot, gpu) = match &saved {
            Saved::Cpus(_, s) | Saved::Uncore(s) => (s.clone(), None),
            Saved::Gpu(g) => (Snapshot::default(), Some(g.clone())),
        };
        if let Err(e) = self.journal.append(&Entry::Save {
            session,
            uid,
            pid,
            job,
            control: control.into(),
            snapshot,
            gpu,
        }) {
            tracing::error!(error = %format!("{e:#}"), "journal");
            return Err(format!("nothing was changed: {e:#}"));
        }
        if let Some(sess) = self.sessions.get_mut(&session) {
            sess.saves.push(saved);
        }
        Ok(())
    }
}

/// The daemon's state shared by the connection threads.
pub struct Daemon {
    opts: Options,
    ctl: Option<CpufreqController>,
    /// Why there is no controller.
    no_ctl: Option<String>,
    rapl: Vec<RaplDomain>,
    no_rapl: Option<String>,
    /// Why there is no GPU control.
    no_gpu: Option<String>,
    /// The perf power PMU's RAPL events, or why there are none.
    power_pmu: Result<Vec<powerperf_node::pmu::PowerEvent>, String>,
    /// Why there are no NVML power reads.
    no_nvml: Option<String>,
    inner: Mutex<Inner>,
    /// The metrics sampler's channel, once `serve_metrics` started it (`--metrics-listen`).
    metrics: std::sync::OnceLock<crate::metrics::Hook>,
    /// Held for the daemon's life: no `powerperf apply` as root races it on this tree.
    _lock: state::SysfsLock,
    /// Set by [`Daemon::shutdown`]: no request is served and no client accepted after it.
    stopping: std::sync::atomic::AtomicBool,
}

pub use powerperf_node::daemon::peer_cred;

mod access;
mod power;
mod socket;
mod uncore;

pub use socket::bind_socket;

impl Daemon {
    /// Start: check the state directory, lock the sysfs tree, open the controller, replay
    /// the journal left by a previous run (before any client), create a new journal.
    ///
    /// # Errors
    /// A state directory that is not private, a sysfs tree locked by another process, a
    /// journal that fails validation or cannot be replayed.
    pub fn start(opts: Options) -> Result<Arc<Self>> {
        let state_dir = state::private_dir(&opts.state_dir, true, "state directory (--state-dir)")?;
        let lock = state::SysfsLock::acquire(&opts.sysfs_root)?;
        let (ctl, no_ctl) = match CpufreqController::open(&opts.sysfs_root) {
            Ok(c) => {
                tracing::info!(controller = %c.describe(), "cpufreq");
                (Some(c), None)
            }
            Err(e) => {
                tracing::warn!(reason = %e, "no CPU frequency control: writes of cpu.core_freq are refused");
                (None, Some(e.to_string()))
            }
        };
        let (mut gpu, no_gpu) = power::open_gpu(opts.fake_gpu.as_deref(), &opts.sysfs_root);
        let rec = journal::recover(&state_dir, ctl.as_ref(), gpu.as_deref_mut())?;
        if let Some(n) = &rec.note {
            tracing::info!(note = %n, "journal");
        }
        if !rec.sessions.is_empty() {
            tracing::warn!(sessions = ?rec.sessions, writes = ?rec.writes, "restored the settings of sessions left by a previous run from the journal");
        }
        let sysfs_root = opts.sysfs_root.canonicalize().with_context(|| {
            format!(
                "cannot resolve the sysfs root {}",
                opts.sysfs_root.display()
            )
        })?;
        let journal = Journal::create(&state_dir, &sysfs_root)?;
        let d = rapl::discover(&opts.sysfs_root);
        let no_rapl = if d.domains.is_empty() {
            Some(
                d.absent_reason
                    .clone()
                    .or_else(|| d.unreadable.first().map(|u| u.reason.clone()))
                    .unwrap_or_else(|| "no RAPL domains".into()),
            )
        } else {
            None
        };
        let power_pmu = powerperf_node::pmu::power_events(&opts.sysfs_root);
        let (nvml, no_nvml) = gpu_readings(opts.fake_gpu.as_deref());
        let devices = crate::devices::open(&opts.sysfs_root);
        tracing::info!(gpu = %gpu.as_ref().map(|g| g.describe()).unwrap_or_else(|| no_gpu.clone().unwrap_or_default()), power_pmu = ?power_pmu.as_ref().map(|v| v.len()), nvml_reads = %no_nvml.as_deref().unwrap_or("yes"), "signals and controls");
        Ok(Arc::new(Daemon {
            ctl,
            no_ctl,
            rapl: d.domains,
            no_rapl,
            no_gpu,
            power_pmu,
            no_nvml,
            inner: Mutex::new(Inner {
                journal,
                next_session: 1,
                held: BTreeMap::new(),
                held_other: BTreeMap::new(),
                gpu,
                nvml,
                devices,
                sessions: BTreeMap::new(),
                conns_total: 0,
                conns_per_uid: HashMap::new(),
            }),
            opts: Options { state_dir, ..opts },
            metrics: std::sync::OnceLock::new(),
            _lock: lock,
            stopping: std::sync::atomic::AtomicBool::new(false),
        }))
    }

    /// Serve `GET /metrics` on `addr` (`--metrics-listen`; [`crate::metrics`]): a sampler
    /// thread and an HTTP thread of their own; the control threads only send it events,
    /// never waiting. Returns the address bound (port 0 picks a free one).
    ///
    /// # Errors
    /// The address cannot be bound, or the metrics were started already.
    pub fn serve_metrics(
        self: &Arc<Self>,
        addr: std::net::SocketAddr,
    ) -> Result<std::net::SocketAddr> {
        if self.metrics.get().is_some() {
            anyhow::bail!("the metrics endpoint is already started");
        }
        let gpu = match gpu_readings(self.opts.fake_gpu.as_deref()) {
            (Some(g), _) => Some(g),
            (None, why) => {
                tracing::info!(reason = %why.unwrap_or_default(), "metrics: no GPU energy or power");
                None
            }
        };
        let (hook, bound) = crate::metrics::start(
            addr,
            crate::metrics::Sources {
                rapl: self.rapl.clone(),
                sysfs_root: self.opts.sysfs_root.clone(),
                gpu,
                devices: crate::devices::open(&self.opts.sysfs_root),
            },
        )?;
        // sessions open before now are not in the metrics (the binary starts the metrics
        // before it accepts clients)
        let _ = self.metrics.set(hook);
        Ok(bound)
    }

    /// Tell the metrics sampler (when there is one); never waits.
    fn note(&self, e: crate::metrics::Event) {
        if let Some(h) = self.metrics.get() {
            h.send(e);
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // a panicking thread must not stop the restores of the others
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Accept clients on `listener` until the process ends.
    pub fn serve(self: &Arc<Self>, listener: UnixListener) {
        for s in listener.incoming() {
            if self.stopping() {
                // closed unanswered: the daemon is stopping
                continue;
            }
            let s = match s {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
            };
            let d = Arc::clone(self);
            if let Err(e) = std::thread::Builder::new()
                .name("powerperfd-conn".into())
                .spawn(move || d.connection(s))
            {
                tracing::error!(error = %e, "cannot start a connection thread");
            }
        }
    }

    /// Whether [`Daemon::shutdown`] has begun.
    pub fn stopping(&self) -> bool {
        self.stopping.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Stop (SIGTERM, SIGINT, SIGHUP; issue 38): no request is served from now on (a
    /// request already holding the state lock finishes first), every session is restored,
    /// then the process exits with the lock still held, so no connection can set anything
    /// between the restore and the exit. Exits 0 when every restore succeeded, else 1 (the
    /// journal keeps what failed for the next start).
    pub fn shutdown(&self) -> ! {
        self.stopping
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let mut g = self.lock();
        let ok = self.restore_all_locked(&mut g);
        if ok && g.journal.open_sessions().is_empty() {
            // nothing left to undo: the journal holds its header only
            if let Err(e) = g.journal.compact() {
                tracing::warn!(error = %format!("{e:#}"), "cannot compact the journal");
            }
        }
        tracing::info!(restored_all = ok, "stopped");
        std::process::exit(if ok { 0 } else { 1 });
    }

    /// Restore every session (shutdown): see [`Daemon::shutdown`], which also stops serving.
    pub fn restore_all(&self) {
        let mut g = self.lock();
        self.restore_all_locked(&mut g);
    }

    /// Restore every session under the held lock; whether all restores succeeded.
    fn restore_all_locked(&self, g: &mut Inner) -> bool {
        let mut ok = true;
        let ids: Vec<u64> = g.sessions.keys().rev().copied().collect();
        for id in ids {
            match self.restore_session(g, id) {
                Ok(w) if !w.is_empty() => {
                    tracing::info!(session = id, writes = ?w, "restored at shutdown")
                }
                Ok(_) => {}
                Err(e) => {
                    ok = false;
                    tracing::error!(session = id, error = %format!("{e:#}"), "restore at shutdown failed; the journal keeps it")
                }
            }
        }
        ok
    }

    fn refuse(&self, s: &Session, session: u64, why: String) -> Response {
        tracing::warn!(
            uid = s.peer_uid,
            pid = s.peer_pid,
            as_uid = s.who.uid,
            job = s.job.as_deref().unwrap_or(""),
            session,
            reason = %why,
            "refused"
        );
        Response::refused(why)
    }

    fn connection(&self, mut s: UnixStream) {
        let cred = match peer_cred(&s) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "refused a connection: no peer credentials");
                return;
            }
        };
        let limits = self.opts.config.limits.clone();
        let id = {
            let mut g = self.lock();
            let per = g.conns_per_uid.get(&cred.uid).copied().unwrap_or(0);
            let why = if g.conns_total >= limits.max_connections {
                Some(format!(
                    "too many connections ({} open, the limit is {})",
                    g.conns_total, limits.max_connections
                ))
            } else if per >= limits.max_connections_per_uid {
                Some(format!(
                    "too many connections of uid {} ({per} open, the limit is {})",
                    cred.uid, limits.max_connections_per_uid
                ))
            } else {
                None
            };
            if let Some(why) = why {
                drop(g);
                tracing::warn!(uid = cred.uid, pid = cred.pid, reason = %why, "refused");
                let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
                let _ = write_response(&mut s, &Response::refused(why));
                return;
            }
            g.conns_total += 1;
            *g.conns_per_uid.entry(cred.uid).or_insert(0) += 1;
            let id = g.next_session;
            g.next_session += 1;
            g.sessions.insert(
                id,
                Session {
                    peer_uid: cred.uid,
                    peer_pid: cred.pid,
                    who: Identity::of_uid(cred.uid, Some(cred.gid)),
                    job: None,
                    saves: Vec::new(),
                    power: None,
                    started: false,
                },
            );
            self.note(crate::metrics::Event::Open { id, uid: cred.uid });
            id
        };
        tracing::debug!(session = id, uid = cred.uid, pid = cred.pid, "connected");
        let why_closed = self.session_loop(&mut s, id, cred.pid, &limits);
        let mut g = self.lock();
        match self.restore_session(&mut g, id) {
            Ok(w) if !w.is_empty() => {
                tracing::info!(session = id, uid = cred.uid, pid = cred.pid, why = %why_closed, writes = ?w, "session ended: its settings restored")
            }
            Ok(_) => tracing::debug!(session = id, why = %why_closed, "session ended"),
            Err(e) => {
                tracing::error!(session = id, uid = cred.uid, pid = cred.pid, error = %format!("{e:#}"), "session ended but its restore failed; the journal keeps it for the next start")
            }
        }
        g.sessions.remove(&id);
        self.note(crate::metrics::Event::End { id });
        g.conns_total = g.conns_total.saturating_sub(1);
        if let Some(n) = g.conns_per_uid.get_mut(&cred.uid) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                g.conns_per_uid.remove(&cred.uid);
            }
        }
    }

    /// Read requests until the client goes; returns why it ended.
    fn session_loop(
        &self,
        s: &mut UnixStream,
        id: u64,
        peer_pid: i32,
        limits: &crate::policy::Limits,
    ) -> String {
        let tick = Duration::from_millis(200);
        let _ = s.set_read_timeout(Some(tick));
        let _ = s.set_write_timeout(Some(Duration::from_secs(10)));
        let peer = u32::try_from(peer_pid).ok().map(|pid| ProcessId {
            pid,
            start_ticks: state::process_start_ticks(pid),
            boot_id: state::boot_id(),
        });
        let max = limits.max_request_bytes;
        let mut pending: Vec<u8> = Vec::new();
        let mut line_started: Option<Instant> = None;
        let mut last_activity = Instant::now();
        let rate = f64::from(limits.requests_per_second);
        let mut tokens = rate;
        let mut refill = Instant::now();
        let mut over_rate = 0u32;
        let mut chunk = [0u8; 4096];
        loop {
            // complete lines first
            while let Some(nl) = pending.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = pending.drain(..=nl).collect();
                line_started = (!pending.is_empty()).then(Instant::now);
                last_activity = Instant::now();
                let now = Instant::now();
                tokens = (tokens + now.duration_since(refill).as_secs_f64() * rate).min(rate);
                refill = now;
                let resp = if tokens < 1.0 {
                    over_rate += 1;
                    let g = self.lock();
                    let r = match g.sessions.get(&id) {
                        Some(sess) => self.refuse(
                            sess,
                            id,
                            format!(
                                "rate limit: more than {} requests per second on this connection",
                                limits.requests_per_second
                            ),
                        ),
                        None => Response::refused("rate limit"),
                    };
                    drop(g);
                    if over_rate > 100 {
                        return "closed: over the rate limit".into();
                    }
                    r
                } else {
                    tokens -= 1.0;
                    over_rate = 0;
                    self.handle(id, &line[..line.len() - 1])
                };
                if write_response(s, &resp).is_err() {
                    return "the client stopped reading".into();
                }
            }
            if pending.len() >= max {
                let g = self.lock();
                if let Some(sess) = g.sessions.get(&id) {
                    let r = self.refuse(
                        sess,
                        id,
                        format!("a request longer than {max} bytes; the connection is closed"),
                    );
                    drop(g);
                    let _ = write_response(s, &r);
                }
                return "closed: request too long".into();
            }
            match s.read(&mut chunk[..(max + 1 - pending.len()).min(4096)]) {
                Ok(0) => return "the client closed the connection".into(),
                Ok(n) => {
                    if pending.is_empty() {
                        line_started = Some(Instant::now());
                    }
                    pending.extend_from_slice(&chunk[..n]);
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    if let Some(t) = line_started {
                        if !pending.is_empty()
                            && t.elapsed().as_secs_f64() > limits.request_timeout_s
                        {
                            let g = self.lock();
                            if let Some(sess) = g.sessions.get(&id) {
                                let r = self.refuse(sess, id, format!("a request line took longer than {} s to arrive; the connection is closed", limits.request_timeout_s));
                                drop(g);
                                let _ = write_response(s, &r);
                            }
                            return "closed: request timeout".into();
                        }
                    }
                    if let Some(p) = &peer {
                        if !p.is_alive() {
                            return format!("the client process {} ended", p.pid);
                        }
                    }
                    let holds = self
                        .lock()
                        .sessions
                        .get(&id)
                        .is_some_and(|x| !x.saves.is_empty());
                    if !holds && last_activity.elapsed().as_secs_f64() > limits.idle_timeout_s {
                        return format!("closed: idle for {} s", limits.idle_timeout_s);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return format!("read error: {e}"),
            }
        }
    }

    /// Answer one request line.
    fn handle(&self, id: u64, line: &[u8]) -> Response {
        let mut g = self.lock();
        if self.stopping() {
            return Response::refused("powerperfd is stopping: nothing was changed");
        }
        let req: Request = match serde_json::from_slice(line) {
            Ok(r) => r,
            Err(e) => {
                let Some(sess) = g.sessions.get(&id) else {
                    return Response::refused("no session");
                };
                return self.refuse(sess, id, format!("not a request: {e}"));
            }
        };
        let r = match req {
            Request::Hello {
                version,
                on_behalf_of,
            } => self.hello(&mut g, id, version, on_behalf_of),
            Request::ReadEnergy {} => self.read_energy(&mut g, id),
            Request::SetCoreFreq { mhz, cpus } => {
                self.set_cpus(&mut g, id, Setting::CoreFreq(mhz), cpus)
            }
            Request::SetGovernor { governor, cpus } => {
                self.set_cpus(&mut g, id, Setting::Governor(governor), cpus)
            }
            Request::SetUncoreFreq { mhz, domains } => self.set_uncore(&mut g, id, mhz, domains),
            Request::SetGpuLockedClocks {
                gpu,
                min_mhz,
                max_mhz,
            } => self.set_gpu(
                &mut g,
                id,
                gpu,
                power::GpuAsk::LockedClocks(min_mhz, max_mhz.unwrap_or(min_mhz)),
            ),
            Request::SetGpuPowerLimit { gpu, watts } => {
                self.set_gpu(&mut g, id, gpu, power::GpuAsk::PowerLimit(watts))
            }
            Request::SetGpuMemLockedClocks {
                gpu,
                min_mhz,
                max_mhz,
            } => self.set_gpu(
                &mut g,
                id,
                gpu,
                power::GpuAsk::MemLockedClocks(min_mhz, max_mhz.unwrap_or(min_mhz)),
            ),
            Request::ReadPower {} => self.read_power(&mut g, id),
            Request::Restore {} => match self.restore_session(&mut g, id) {
                Ok(w) => Response {
                    ok: true,
                    session: Some(id),
                    writes: w,
                    ..Default::default()
                },
                Err(e) => Response::refused(format!(
                    "{e:#}; the journal keeps the saved values for the next start of powerperfd"
                )),
            },
            Request::Status {} => self.status(&g, id),
            Request::Check { request } => self.check(&g, id, &request),
            Request::Access {} => self.access(&g, id),
        };
        if let Some(sess) = g.sessions.get_mut(&id) {
            sess.started = true;
        }
        r
    }

    fn hello(
        &self,
        g: &mut Inner,
        id: u64,
        version: Option<u32>,
        on_behalf: Option<OnBehalf>,
    ) -> Response {
        let Some(sess) = g.sessions.get(&id) else {
            return Response::refused("no session");
        };
        if let Some(v) = version {
            if v != powerperf_node::daemon::PROTOCOL_VERSION {
                return self.refuse(sess, id, format!("protocol version {v} is not this daemon's ({}); use the powerperf of the same version", powerperf_node::daemon::PROTOCOL_VERSION));
            }
        }
        let Some(ob) = on_behalf else {
            return Response {
                ok: true,
                session: Some(id),
                info: vec![format!("identity {}", sess.who.describe())],
                ..Default::default()
            };
        };
        if sess.peer_uid != 0 {
            return self.refuse(
                sess,
                id,
                format!(
                    "only uid 0 may act on behalf of another user; this client is uid {}",
                    sess.peer_uid
                ),
            );
        }
        if sess.started || !sess.saves.is_empty() {
            return self.refuse(
                sess,
                id,
                "on_behalf_of must come in the first request of a session".into(),
            );
        }
        if let Some(j) = &ob.job {
            if j.is_empty() || j.len() > 128 || !j.chars().all(|c| c.is_ascii_graphic()) {
                return self.refuse(
                    sess,
                    id,
                    "the job id must be 1 to 128 printable ASCII characters without spaces".into(),
                );
            }
        }
        let who = Identity::of_uid(ob.uid, None);
        let info = vec![format!(
            "identity {} on behalf of uid 0{}",
            who.describe(),
            ob.job
                .as_deref()
                .map(|j| format!(", job {j}"))
                .unwrap_or_default()
        )];
        tracing::info!(
            session = id,
            uid = 0,
            as_uid = ob.uid,
            job = ob.job.as_deref().unwrap_or(""),
            "acting on behalf of a user"
        );
        self.note(crate::metrics::Event::Identity {
            id,
            uid: ob.uid,
            job: ob.job.clone(),
        });
        if let Some(sess) = g.sessions.get_mut(&id) {
            sess.who = who;
            sess.job = ob.job;
        }
        Response {
            ok: true,
            session: Some(id),
            info,
            ..Default::default()
        }
    }

    fn read_energy(&self, g: &mut Inner, id: u64) -> Response {
        let Some(sess) = g.sessions.get(&id) else {
            return Response::refused("no session");
        };
        if let Err(why) = self.opts.config.may_read(&sess.who, "energy") {
            return self.refuse(sess, id, why);
        }
        if let Some(why) = &self.no_rapl {
            return self.refuse(sess, id, format!("no RAPL energy on this node: {why}"));
        }
        let energy = self
            .rapl
            .iter()
            .map(|d| EnergyReading {
                name: d.name.clone(),
                column: d.column.clone(),
                // a counter above its wrap point is no reading (issue 38)
                energy_uj: read_counter(&d.energy_path)
                    .filter(|v| d.max_energy_range_uj == 0 || *v <= d.max_energy_range_uj),
                max_energy_range_uj: d.max_energy_range_uj,
            })
            .collect();
        Response {
            ok: true,
            session: Some(id),
            energy,
            ..Default::default()
        }
    }

    /// Set `setting` on `cpus` (all when `None`) for session `id`: the value checked, the
    /// policy, the CPUs known and not held by another session, the controller's own check
    /// (the CPU's frequency list or `scaling_available_governors`), then the values it will
    /// overwrite saved in the journal before the first change of each CPU, then the writes.
    fn set_cpus(
        &self,
        g: &mut Inner,
        id: u64,
        setting: Setting,
        cpus: Option<Vec<u32>>,
    ) -> Response {
        let Some(sess) = g.sessions.get(&id) else {
            return Response::refused("no session");
        };
        let control = setting.control();
        let value = match &setting {
            Setting::CoreFreq(mhz) => {
                let mhz = *mhz;
                if !(mhz.is_finite() && mhz > 0.0 && mhz <= 1e6) {
                    return self.refuse(
                        sess,
                        id,
                        format!("{mhz} is not a frequency in MHz (0, 1e6]"),
                    );
                }
                Some(mhz)
            }
            Setting::Governor(gov) => {
                // a kernel governor name is at most 15 characters (CPUFREQ_NAME_LEN)
                if gov.is_empty()
                    || gov.len() > 32
                    || !gov
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
                {
                    return self.refuse(
                        sess,
                        id,
                        format!(
                            "`{}` is not a governor name (1 to 32 letters, digits, `_` or `-`); ask for one of the CPU's scaling_available_governors",
                            gov.escape_debug().to_string().chars().take(64).collect::<String>()
                        ),
                    );
                }
                None
            }
        };
        let Some(ctl) = &self.ctl else {
            return self.refuse(
                sess,
                id,
                format!(
                    "no CPU frequency control on this node: {}",
                    self.no_ctl.as_deref().unwrap_or("?")
                ),
            );
        };
        let mut cpus = cpus.unwrap_or_else(|| ctl.cpus());
        if cpus.len() > 65536 {
            return self.refuse(sess, id, "more than 65536 CPUs named".into());
        }
        cpus.sort_unstable();
        cpus.dedup();
        if let Err(why) = self.opts.config.may_write(&sess.who, control, value, &cpus) {
            return self.refuse(sess, id, why);
        }
        let sub = match ctl.only_cpus(&cpus) {
            Ok(c) => c,
            Err(e) => return self.refuse(sess, id, e.to_string()),
        };
        for c in &cpus {
            if let Some(h) = g.held.get(c) {
                if h.session != id {
                    let why = format!(
                        "CPU {c} is held by session {} of uid {} (pid {}) at {}: two sessions may not set one CPU, so this request is refused (nothing was changed); wait until that session ends, or ask for other CPUs",
                        h.session, h.uid, h.pid, h.setting
                    );
                    return self.refuse(sess, id, why);
                }
            }
        }
        let planned = match &setting {
            Setting::CoreFreq(mhz) => sub.plan_set(*mhz),
            Setting::Governor(gov) => sub.plan_governor(gov),
        };
        if let Err(e) = planned {
            return self.refuse(sess, id, e.to_string());
        }
        // save what the first change of each CPU will overwrite, in the journal first
        let new: Vec<u32> = cpus
            .iter()
            .copied()
            .filter(|c| !g.held.contains_key(c))
            .collect();
        let (uid, pid, job) = (sess.who.uid, sess.peer_pid, sess.job.clone());
        if !new.is_empty() {
            let snap = match ctl.only_cpus(&new).and_then(|c| c.snapshot_with_governor()) {
                Ok(s) => s,
                Err(e) => {
                    return Response::refused(format!("cannot read the current settings: {e}"))
                }
            };
            if let Err(r) = g.save_first(
                id,
                (uid, pid, job.clone()),
                control,
                Saved::Cpus(new.clone(), snap),
            ) {
                return Response::refused(r);
            }
        }
        let what = setting.describe();
        for c in &cpus {
            g.held.insert(
                *c,
                Hold {
                    session: id,
                    uid,
                    pid,
                    setting: what.clone(),
                },
            );
        }
        let mut sub = sub;
        let done = match &setting {
            Setting::CoreFreq(mhz) => sub.set(*mhz),
            Setting::Governor(gov) => sub.set_governor(gov),
        };
        if done.is_ok() {
            tracing::info!(session = id, uid, pid, control, value = %what, cpus = ?cpus, "set");
            let what = cpus
                .iter()
                .map(|c| match &setting {
                    Setting::CoreFreq(mhz) => crate::metrics::Applied::Hertz {
                        control,
                        target: format!("cpu{c}"),
                        min: mhz * 1e6,
                        max: mhz * 1e6,
                    },
                    Setting::Governor(gov) => crate::metrics::Applied::Governor {
                        target: format!("cpu{c}"),
                        governor: gov.clone(),
                    },
                })
                .collect();
            self.note(crate::metrics::Event::Applied { id, what });
        }
        write_answer(id, (uid, pid), "cpufreq", done)
    }

    /// Put back what session `id` changed, latest first; journal `end`; release its CPUs.
    fn restore_session(&self, g: &mut Inner, id: u64) -> Result<Vec<String>> {
        let saves = match g.sessions.get_mut(&id) {
            Some(s) => std::mem::take(&mut s.saves),
            None => return Ok(vec![]),
        };
        if saves.is_empty() {
            return Ok(vec![]);
        }
        let mut writes = Vec::new();
        let mut first_err: Option<anyhow::Error> = None;
        for s in saves.iter().rev() {
            let r: Result<Vec<String>> = match s {
                Saved::Cpus(cpus, snap) => self
                    .ctl
                    .as_ref()
                    .context("no cpufreq controller")
                    .and_then(|ctl| {
                        Ok(ctl
                            .only_cpus(cpus)
                            .and_then(|mut c| c.restore(snap))?
                            .iter()
                            .map(|x| x.to_string())
                            .collect())
                    }),
                Saved::Uncore(snap) => {
                    self.ctl
                        .as_ref()
                        .context("no cpufreq controller")
                        .and_then(|ctl| {
                            Ok(ctl
                                .clone()
                                .restore(snap)?
                                .iter()
                                .map(|x| x.to_string())
                                .collect())
                        })
                }
                Saved::Gpu(gs) => match g.gpu.as_mut() {
                    Some(gc) => gc.restore(gs).map(|w| vec![w]).map_err(anyhow::Error::new),
                    None => Err(anyhow::anyhow!("no GPU control")),
                },
            };
            match r {
                Ok(w) => writes.extend(w),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        g.held.retain(|_, h| h.session != id);
        g.held_other.retain(|_, h| h.session != id);
        if let Some(e) = first_err {
            return Err(e.context(format!("restoring session {id}")));
        }
        g.journal.append(&Entry::End { session: id })?;
        self.note(crate::metrics::Event::Restored { id });
        Ok(writes)
    }

    fn status(&self, g: &Inner, id: u64) -> Response {
        let Some(sess) = g.sessions.get(&id) else {
            return Response::refused("no session");
        };
        let mut info = vec![format!("identity {}", sess.who.describe())];
        if let Some(j) = &sess.job {
            info.push(format!("job {j}"));
        }
        for (c, h) in &g.held {
            if h.session == id {
                info.push(format!("holds CPU {c} at {}", h.setting));
            }
        }
        for (k, h) in &g.held_other {
            if h.session == id {
                info.push(format!("holds {k} at {}", h.setting));
            }
        }
        info.push(match &self.ctl {
            Some(c) => c.describe(),
            None => format!("no cpufreq: {}", self.no_ctl.as_deref().unwrap_or("?")),
        });
        info.push(match &g.gpu {
            Some(c) => c.describe(),
            None => format!("no GPU control: {}", self.no_gpu.as_deref().unwrap_or("?")),
        });
        Response {
            ok: true,
            session: Some(id),
            info,
            ..Default::default()
        }
    }
}

/// Read a counter file (at most 64 bytes) as a number.
fn read_counter(p: &Path) -> Option<u64> {
    powerperf_node::sysfs::read_small(p)?.parse().ok()
}

/// Where GPU power and energy readings come from: the fake GPUs of `--fake-gpu DIR` (the
/// same ones the GPU controls act on), else NVML; `(None, why)` when neither is there.
fn gpu_readings(
    fake_gpu: Option<&Path>,
) -> (
    Option<Box<dyn powerperf_node::nvml::GpuSource>>,
    Option<String>,
) {
    let opened = match fake_gpu {
        Some(d) => powerperf_node::gpu_control::FakeGpu::open(d)
            .map(|g| Box::new(g) as Box<dyn powerperf_node::nvml::GpuSource>)
            .map_err(|e| format!("fake GPUs: {e}")),
        None => powerperf_node::nvml::open_nvml(),
    };
    match opened {
        Ok(g) => (Some(g), None),
        Err(why) => (None, Some(why)),
    }
}

fn write_response(s: &mut UnixStream, r: &Response) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(r).map_err(std::io::Error::other)?;
    line.push(b'\n');
    s.write_all(&line)
}
