//! The metrics endpoint (`powerperfd --metrics-listen ADDR`, off by default; docs/cluster.md
//! "Metrics"): `GET /metrics` in the Prometheus text format (version 0.0.4), encoded by
//! prometheus-client and served by hyper.
//!
//! Two threads of their own, apart from the control socket's:
//! - the sampler owns every number: it reads RAPL (powercap `energy_uj`, wrap-around through
//!   [`powerperf_node::rapl::RaplReader`]), the GPUs' energy counters and power, and the
//!   current CPU and uncore frequencies, every [`SAMPLE_INTERVAL`], at each scrape and at
//!   each start and end of a session carrying a job id; it learns of sessions through a
//!   channel the control threads send to without waiting ([`Event`]);
//! - the HTTP thread (hyper on a single-threaded tokio runtime) answers one request per
//!   connection: it asks the sampler for the text and writes it. At most
//!   [`MAX_CONNECTIONS`] connections at once, each closed after [`CONNECTION_TIMEOUT`]; the
//!   request headers must come within [`IO_TIMEOUT`]. A slow or silent scraper holds one
//!   connection slot for at most that, and never a control request.
//!
//! Energy per job: the node's energy (per RAPL domain, per GPU) accumulated while at least
//! one session carrying that job id was open (a root client's `hello` with
//! `on_behalf_of.job`). It is the node's, not the job's processes': two jobs sharing a node
//! are both charged the whole node. The totals of the last [`MAX_FINISHED_JOBS`] finished
//! jobs are kept.

use anyhow::{Context, Result};
use powerperf_node::nvml::GpuSource;
use powerperf_node::rapl::{RaplDomain, RaplReader};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The sampler reads everything at least this often (RAPL counters wrap after minutes at
/// full power; one wrap between two reads is handled, two are not).
pub const SAMPLE_INTERVAL: Duration = Duration::from_secs(5);
/// The sampler must answer a scrape within this.
pub const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// A scraper must send its whole request head within this from the connection's accept
/// (Prometheus sends it at once; a client that sends one byte a second is cut here).
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(2);
/// A scrape connection is closed after this, whatever the scraper does (a slow reader
/// included).
pub const CONNECTION_TIMEOUT: Duration = Duration::from_secs(10);
/// Scrape connections open at once, all peers together. When they are all taken, a
/// connection from a peer address with fewer open connections than the busiest address
/// closes the oldest connection of that busiest address (so a new scraper is let in while
/// one address, or a few, hold the slots); otherwise it is closed at once.
pub const MAX_CONNECTIONS: usize = 64;
/// Scrape connections open at once from one peer address; more are closed at once.
pub const MAX_CONNECTIONS_PER_PEER: usize = 4;
/// Finished jobs whose energy is still served (the oldest finished is dropped first).
pub const MAX_FINISHED_JOBS: usize = 1000;
/// Power gauges are averages over at least this long.
pub(crate) const POWER_WINDOW: Duration = Duration::from_secs(1);

/// One setting a session applied, for `powerperf_session_setting_*`.
#[derive(Debug, Clone, PartialEq)]
pub enum Applied {
    /// A frequency range in hertz (`cpu.core_freq` and `cpu.uncore_freq` pin min = max).
    Hertz {
        control: &'static str,
        target: String,
        min: f64,
        max: f64,
    },
    /// A power limit in watts (`gpu.power_limit`).
    Watts {
        control: &'static str,
        target: String,
        watts: f64,
    },
    /// A cpufreq governor (`cpu.governor`).
    Governor { target: String, governor: String },
}

/// What the control threads tell the sampler (never waiting for it).
#[derive(Debug)]
pub(crate) enum Event {
    Open {
        id: u64,
        uid: u32,
    },
    /// `hello` with `on_behalf_of`.
    Identity {
        id: u64,
        uid: u32,
        job: Option<String>,
    },
    Applied {
        id: u64,
        what: Vec<Applied>,
    },
    /// The session's settings were put back (`restore`, or its end).
    Restored {
        id: u64,
    },
    End {
        id: u64,
    },
    /// Render the text now.
    Scrape(tokio::sync::oneshot::Sender<String>),
}

/// The control threads' side: a channel to the sampler.
#[derive(Debug)]
pub(crate) struct Hook {
    tx: mpsc::Sender<Event>,
}

impl Hook {
    pub(crate) fn send(&self, e: Event) {
        // the sampler is gone only when the process ends
        let _ = self.tx.send(e);
    }
}

/// What the sampler is given at start.
pub(crate) struct Sources {
    pub rapl: Vec<RaplDomain>,
    pub sysfs_root: PathBuf,
    pub gpu: Option<Box<dyn GpuSource>>,
    /// The sysfs power devices (amdgpu, xe, i915, hwmon; [`crate::devices`]).
    pub devices: Vec<Box<dyn powerperf_node::devices::PowerDevice>>,
}

pub(crate) type Labels = Vec<(String, String)>;
pub(crate) type F64Counter = Counter<f64, AtomicU64>;
pub(crate) type F64Gauge = Gauge<f64, AtomicU64>;

/// Prometheus labels from `(name, value)` pairs.
pub(crate) fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The unit of the frequency metrics (`_hertz`).
pub(crate) fn hertz() -> Unit {
    Unit::Other("hertz".into())
}

/// The unit of the power metrics (`_watts`).
pub(crate) fn watts() -> Unit {
    Unit::Other("watts".into())
}

#[derive(Debug, Default)]
struct Job {
    /// Sessions of the job open now.
    open: usize,
    rapl_uj: Vec<u64>,
    gpu_mj: Vec<u64>,
    /// Per sysfs power device, J.
    device_j: Vec<f64>,
}

#[derive(Debug)]
struct SessionView {
    uid: u32,
    job: Option<String>,
    applied: Vec<Applied>,
}

/// The sampler's state.
struct State {
    rapl: RaplReader,
    gpu: Option<Box<dyn GpuSource>>,
    gpu_last_mj: Vec<Option<u64>>,
    gpu_total_mj: Vec<u64>,
    gpu_power_w: Vec<Option<f64>>,
    gpu_sm_hz: Vec<Option<f64>>,
    /// The RAPL totals at the start of the current power window.
    power_ref: (Instant, Vec<u64>),
    rapl_power_w: Vec<Option<f64>>,
    /// The sysfs power devices' energy, power and clock.
    devices: crate::devices::DeviceMeters,
    /// `(cpu, scaling_cur_freq path)`.
    cpu_freq: Vec<(u32, PathBuf)>,
    /// `(domain, current_freq_khz path)`.
    uncore_freq: Vec<(String, PathBuf)>,
    sessions: BTreeMap<u64, SessionView>,
    jobs: BTreeMap<String, Job>,
    /// Finished jobs, oldest first.
    finished: VecDeque<String>,
}

fn cpu_freq_files(root: &Path) -> Vec<(u32, PathBuf)> {
    let base = root.join("sys/devices/system/cpu");
    let mut v: Vec<(u32, PathBuf)> = std::fs::read_dir(&base)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let n = e.file_name().to_str()?.strip_prefix("cpu")?.parse().ok()?;
            let p = e.path().join("cpufreq/scaling_cur_freq");
            p.exists().then_some((n, p))
        })
        .collect();
    v.sort();
    v
}

fn uncore_freq_files(root: &Path) -> Vec<(String, PathBuf)> {
    let base = root.join("sys/devices/system/cpu/intel_uncore_frequency");
    let mut v: Vec<(String, PathBuf)> = std::fs::read_dir(&base)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let p = e.path().join("current_freq_khz");
            p.exists()
                .then(|| (e.file_name().to_string_lossy().into_owned(), p))
        })
        .collect();
    v.sort();
    v
}

/// A kHz file as hertz (finite and positive, else `None`).
fn khz_file(p: &Path) -> Option<f64> {
    let khz: f64 = powerperf_node::sysfs::read_small(p)?.parse().ok()?;
    (khz.is_finite() && khz > 0.0).then_some(khz * 1e3)
}

fn finite(v: Option<f64>) -> Option<f64> {
    v.filter(|x| x.is_finite())
}

impl State {
    fn new(src: Sources) -> Self {
        let rapl = RaplReader::new(src.rapl);
        let n = rapl.domains.len();
        let g = src.gpu.as_ref().map_or(0, |g| g.count() as usize);
        let mut s = State {
            power_ref: (Instant::now(), rapl.total_uj.clone()),
            rapl,
            gpu: src.gpu,
            gpu_last_mj: vec![None; g],
            gpu_total_mj: vec![0; g],
            gpu_power_w: vec![None; g],
            gpu_sm_hz: vec![None; g],
            rapl_power_w: vec![None; n],
            devices: crate::devices::DeviceMeters::new(src.devices),
            cpu_freq: cpu_freq_files(&src.sysfs_root),
            uncore_freq: uncore_freq_files(&src.sysfs_root),
            sessions: BTreeMap::new(),
            jobs: BTreeMap::new(),
            finished: VecDeque::new(),
        };
        s.sample();
        s
    }

    /// Read the energy counters; what the node used since the last read goes to every job
    /// with a session open.
    fn sample(&mut self) {
        let before = self.rapl.total_uj.clone();
        self.rapl.sample();
        let d_rapl: Vec<u64> = self
            .rapl
            .total_uj
            .iter()
            .zip(&before)
            .map(|(a, b)| a.saturating_sub(*b))
            .collect();
        let now = Instant::now();
        let d_dev = self.devices.sample(now);
        let dt = now.duration_since(self.power_ref.0);
        if dt >= POWER_WINDOW {
            let secs = dt.as_secs_f64();
            self.rapl_power_w = self
                .rapl
                .total_uj
                .iter()
                .zip(&self.power_ref.1)
                .map(|(a, b)| finite(Some(a.saturating_sub(*b) as f64 * 1e-6 / secs)))
                .collect();
            self.power_ref = (now, self.rapl.total_uj.clone());
        }
        let mut d_gpu = vec![0u64; self.gpu_total_mj.len()];
        if let Some(g) = self.gpu.as_mut() {
            for (i, d) in d_gpu.iter_mut().enumerate() {
                let r = g.read(i as u32);
                self.gpu_power_w[i] = finite(r.power_w);
                self.gpu_sm_hz[i] = finite(r.sm_clock_mhz.map(|m| m * 1e6));
                if let Some(now_mj) = r.energy_mj {
                    // NVML's counter only grows while the driver stays loaded: a smaller
                    // value is a new baseline, not negative energy
                    if let Some(last) = self.gpu_last_mj[i] {
                        *d = now_mj.saturating_sub(last);
                    }
                    self.gpu_last_mj[i] = Some(now_mj);
                }
                self.gpu_total_mj[i] = self.gpu_total_mj[i].saturating_add(*d);
            }
        }
        for j in self.jobs.values_mut().filter(|j| j.open > 0) {
            for (t, d) in j.rapl_uj.iter_mut().zip(&d_rapl) {
                *t = t.saturating_add(*d);
            }
            for (t, d) in j.gpu_mj.iter_mut().zip(&d_gpu) {
                *t = t.saturating_add(*d);
            }
            for (t, d) in j.device_j.iter_mut().zip(&d_dev) {
                *t += d;
            }
        }
    }

    fn job_opened(&mut self, job: &str) {
        let (n, g) = (self.rapl.domains.len(), self.gpu_total_mj.len());
        let j = self.jobs.entry(job.to_string()).or_insert_with(|| Job {
            open: 0,
            rapl_uj: vec![0; n],
            gpu_mj: vec![0; g],
            device_j: vec![0.0; self.devices.len()],
        });
        j.open += 1;
        if j.open == 1 {
            // a job that comes back (another step) is no longer finished
            self.finished.retain(|f| f != job);
        }
    }

    fn job_closed(&mut self, job: &str) {
        let Some(j) = self.jobs.get_mut(job) else {
            return;
        };
        j.open = j.open.saturating_sub(1);
        if j.open == 0 {
            self.finished.push_back(job.to_string());
            while self.finished.len() > MAX_FINISHED_JOBS {
                if let Some(old) = self.finished.pop_front() {
                    self.jobs.remove(&old);
                }
            }
        }
    }

    fn handle(&mut self, e: Event) {
        match e {
            Event::Open { id, uid } => {
                self.sessions.insert(
                    id,
                    SessionView {
                        uid,
                        job: None,
                        applied: Vec::new(),
                    },
                );
            }
            Event::Identity { id, uid, job } => {
                // the node's energy until now belongs to the jobs open until now
                self.sample();
                let old = self.sessions.get_mut(&id).and_then(|s| {
                    s.uid = uid;
                    std::mem::replace(&mut s.job, job.clone())
                });
                if let Some(o) = old {
                    self.job_closed(&o);
                }
                if let Some(j) = &job {
                    self.job_opened(j);
                }
            }
            Event::Applied { id, what } => {
                if let Some(s) = self.sessions.get_mut(&id) {
                    for a in what {
                        let key = |x: &Applied| match x {
                            Applied::Hertz {
                                control, target, ..
                            }
                            | Applied::Watts {
                                control, target, ..
                            } => (*control, target.clone()),
                            Applied::Governor { target, .. } => ("cpu.governor", target.clone()),
                        };
                        let k = key(&a);
                        s.applied.retain(|x| key(x) != k);
                        s.applied.push(a);
                    }
                }
            }
            Event::Restored { id } => {
                if let Some(s) = self.sessions.get_mut(&id) {
                    s.applied.clear();
                }
            }
            Event::End { id } => {
                if let Some(s) = self.sessions.remove(&id) {
                    if let Some(j) = s.job {
                        self.sample();
                        self.job_closed(&j);
                    }
                }
            }
            Event::Scrape(reply) => {
                self.sample();
                let _ = reply.send(self.render());
            }
        }
    }

    /// RAPL and GPU energy counters and power gauges.
    fn register_energy(&self, reg: &mut Registry) {
        let rapl_energy = Family::<Labels, F64Counter>::default();
        let rapl_power = Family::<Labels, F64Gauge>::default();
        for (i, d) in self.rapl.domains.iter().enumerate() {
            let lab = labels(&[("domain", &d.name)]);
            rapl_energy
                .get_or_create(&lab)
                .inc_by(self.rapl.total_uj[i] as f64 / 1e6);
            if let Some(w) = self.rapl_power_w[i] {
                rapl_power.get_or_create(&lab).set(w);
            }
        }
        reg.register_with_unit(
            "rapl_energy",
            "Energy of each RAPL domain (powercap energy_uj, wrap-around handled) since powerperfd started; package-N includes core-N and uncore-N, psys is the platform: do not sum domains",
            Unit::Joules,
            rapl_energy,
        );
        reg.register_with_unit(
            "rapl_power",
            "Average power of each RAPL domain over the last window of at least 1 s",
            watts(),
            rapl_power,
        );

        let gpu_energy = Family::<Labels, F64Counter>::default();
        let gpu_power = Family::<Labels, F64Gauge>::default();
        let gpu_clock = Family::<Labels, F64Gauge>::default();
        for i in 0..self.gpu_total_mj.len() {
            let lab = labels(&[("gpu", &i.to_string())]);
            if self.gpu_last_mj[i].is_some() {
                gpu_energy
                    .get_or_create(&lab)
                    .inc_by(self.gpu_total_mj[i] as f64 / 1e3);
            }
            if let Some(w) = self.gpu_power_w[i] {
                gpu_power.get_or_create(&lab).set(w);
            }
            if let Some(h) = self.gpu_sm_hz[i] {
                gpu_clock.get_or_create(&lab).set(h);
            }
        }
        reg.register_with_unit(
            "gpu_energy",
            "Energy of each GPU (NVML's total energy counter) since powerperfd started",
            Unit::Joules,
            gpu_energy,
        );
        reg.register_with_unit(
            "gpu_power",
            "Power of each GPU as NVML reports it",
            watts(),
            gpu_power,
        );
        reg.register_with_unit(
            "gpu_sm_clock",
            "Current SM clock of each GPU",
            hertz(),
            gpu_clock,
        );
        self.devices.register(reg);
    }

    /// Current CPU and uncore frequencies (cpufreq, intel_uncore_frequency).
    fn register_frequencies(&self, reg: &mut Registry) {
        let cpu_freq = Family::<Labels, F64Gauge>::default();
        for (cpu, p) in &self.cpu_freq {
            if let Some(h) = khz_file(p) {
                cpu_freq
                    .get_or_create(&labels(&[("cpu", &cpu.to_string())]))
                    .set(h);
            }
        }
        reg.register_with_unit(
            "cpu_frequency",
            "Current frequency of each CPU (cpufreq scaling_cur_freq)",
            hertz(),
            cpu_freq,
        );
        let uncore_freq = Family::<Labels, F64Gauge>::default();
        for (dom, p) in &self.uncore_freq {
            if let Some(h) = khz_file(p) {
                uncore_freq
                    .get_or_create(&labels(&[("domain", dom)]))
                    .set(h);
            }
        }
        reg.register_with_unit(
            "uncore_frequency",
            "Current uncore frequency of each Intel uncore domain (intel_uncore_frequency current_freq_khz)",
            hertz(),
            uncore_freq,
        );
    }

    /// Open sessions and the settings each holds.
    fn register_sessions(&self, reg: &mut Registry) {
        let sessions = Gauge::<i64, std::sync::atomic::AtomicI64>::default();
        sessions.set(self.sessions.len() as i64);
        reg.register(
            "sessions",
            "Sessions (client connections) open now",
            sessions,
        );

        let set_hz = Family::<Labels, F64Gauge>::default();
        let set_w = Family::<Labels, F64Gauge>::default();
        let set_gov = Family::<Labels, Gauge>::default();
        for (id, s) in &self.sessions {
            let (id, uid) = (id.to_string(), s.uid.to_string());
            let job = s.job.as_deref().unwrap_or("");
            let base = [
                ("session", id.as_str()),
                ("uid", uid.as_str()),
                ("job", job),
            ];
            for a in &s.applied {
                match a {
                    Applied::Hertz {
                        control,
                        target,
                        min,
                        max,
                    } => {
                        for (bound, v) in [("min", min), ("max", max)] {
                            let mut lab = labels(&base);
                            lab.extend(labels(&[
                                ("control", control),
                                ("target", target),
                                ("bound", bound),
                            ]));
                            set_hz.get_or_create(&lab).set(*v);
                        }
                    }
                    Applied::Watts {
                        control,
                        target,
                        watts,
                    } => {
                        let mut lab = labels(&base);
                        lab.extend(labels(&[("control", control), ("target", target)]));
                        set_w.get_or_create(&lab).set(*watts);
                    }
                    Applied::Governor { target, governor } => {
                        let mut lab = labels(&base);
                        lab.extend(labels(&[("target", target), ("governor", governor)]));
                        set_gov.get_or_create(&lab).set(1);
                    }
                }
            }
        }
        reg.register_with_unit(
            "session_setting",
            "A frequency range a session set and holds: cpu.core_freq (target cpuN) and cpu.uncore_freq (target: the uncore domain) pin min = max; gpu.locked_clocks (target gpuN)",
            hertz(),
            set_hz,
        );
        reg.register_with_unit(
            "session_setting",
            "A power limit a session set and holds: gpu.power_limit (target gpuN)",
            watts(),
            set_w,
        );
        reg.register(
            "session_governor",
            "The cpufreq governor a session set and holds on a CPU (value 1)",
            set_gov,
        );
    }

    /// Node energy per job while its sessions are open.
    fn register_jobs(&self, reg: &mut Registry) {
        let job_rapl = Family::<Labels, F64Counter>::default();
        let job_gpu = Family::<Labels, F64Counter>::default();
        let job_open = Family::<Labels, Gauge>::default();
        for (name, j) in &self.jobs {
            for (d, uj) in self.rapl.domains.iter().zip(&j.rapl_uj) {
                job_rapl
                    .get_or_create(&labels(&[("job", name), ("domain", &d.name)]))
                    .inc_by(*uj as f64 / 1e6);
            }
            for (i, mj) in j.gpu_mj.iter().enumerate() {
                if self.gpu_last_mj[i].is_some() {
                    job_gpu
                        .get_or_create(&labels(&[("job", name), ("gpu", &i.to_string())]))
                        .inc_by(*mj as f64 / 1e3);
                }
            }
            job_open
                .get_or_create(&labels(&[("job", name)]))
                .set(j.open as i64);
        }
        reg.register_with_unit(
            "job_energy",
            "Node energy of each RAPL domain while at least one session of the job was open (the node's, not the job's processes'); the last 1000 finished jobs are kept",
            Unit::Joules,
            job_rapl,
        );
        reg.register_with_unit(
            "job_gpu_energy",
            "Energy of each GPU of the node while at least one session of the job was open",
            Unit::Joules,
            job_gpu,
        );
        self.devices.register_jobs(
            reg,
            self.jobs.iter().map(|(n, j)| (n, j.device_j.as_slice())),
        );
        reg.register(
            "job_sessions",
            "Sessions of the job open now (0: finished, its energy final)",
            job_open,
        );
    }

    /// The text of one scrape.
    fn render(&self) -> String {
        let mut reg = Registry::with_prefix("powerperf");
        self.register_energy(&mut reg);
        self.register_frequencies(&mut reg);
        self.register_sessions(&mut reg);
        self.register_jobs(&mut reg);

        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::prometheus_text::encode(&mut out, &reg) {
            tracing::error!(error = %e, "cannot encode the metrics");
        }
        out
    }
}

/// Check `--metrics-listen`: an IP address and a port (no host names: nothing is resolved).
///
/// # Errors
/// Anything else, with the expected shape.
pub fn parse_listen(s: &str) -> Result<SocketAddr> {
    s.parse::<SocketAddr>().with_context(|| {
        format!("--metrics-listen `{s}` is not IP:PORT (e.g. 127.0.0.1:9712 or [::1]:9712)")
    })
}

/// Bind `addr`, start the sampler and the HTTP thread; returns the hook for the control
/// threads and the address bound (port 0 picks a free one).
pub(crate) fn start(addr: SocketAddr, src: Sources) -> Result<(Hook, SocketAddr)> {
    let listener = std::net::TcpListener::bind(addr)
        .with_context(|| format!("cannot listen for metrics on {addr}"))?;
    listener.set_nonblocking(true)?;
    let bound = listener.local_addr()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .context("cannot start the metrics server's runtime")?;
    let (tx, rx) = mpsc::channel::<Event>();
    let scrape_tx = tx.clone();
    std::thread::Builder::new()
        .name("powerperfd-metrics-sampler".into())
        .spawn(move || {
            let mut st = State::new(src);
            loop {
                match rx.recv_timeout(SAMPLE_INTERVAL) {
                    Ok(e) => st.handle(e),
                    Err(mpsc::RecvTimeoutError::Timeout) => st.sample(),
                    Err(mpsc::RecvTimeoutError::Disconnected) => return,
                }
            }
        })
        .context("cannot start the metrics sampler")?;
    std::thread::Builder::new()
        .name("powerperfd-metrics-http".into())
        .spawn(move || rt.block_on(serve_http(listener, scrape_tx)))
        .context("cannot start the metrics server")?;
    Ok((Hook { tx }, bound))
}

/// The open scrape connections, by peer address (issue 38, finding 4).
#[derive(Default)]
struct Conns {
    next: u64,
    /// Per address: (connection id, its task) oldest first.
    by_peer: std::collections::HashMap<std::net::IpAddr, VecDeque<(u64, tokio::task::AbortHandle)>>,
    total: usize,
}

impl Conns {
    /// Whether a connection from `ip` may open, closing the oldest connection of the busiest
    /// address when every slot is taken and `ip` has fewer; `Err`: why it is refused.
    fn admit(&mut self, ip: std::net::IpAddr) -> Result<(), &'static str> {
        let mine = self.by_peer.get(&ip).map_or(0, VecDeque::len);
        if mine >= MAX_CONNECTIONS_PER_PEER {
            return Err("the per-address limit");
        }
        if self.total < MAX_CONNECTIONS {
            return Ok(());
        }
        let busiest = self
            .by_peer
            .iter()
            .max_by_key(|(_, v)| v.len())
            .map(|(a, v)| (*a, v.len()));
        match busiest {
            Some((a, n)) if n > mine => {
                if let Some((_, h)) = self.by_peer.get_mut(&a).and_then(VecDeque::pop_front) {
                    h.abort();
                    self.total -= 1;
                }
                if self.by_peer.get(&a).is_some_and(VecDeque::is_empty) {
                    self.by_peer.remove(&a);
                }
                Ok(())
            }
            _ => Err("the total limit"),
        }
    }

    fn add(&mut self, ip: std::net::IpAddr, id: u64, h: tokio::task::AbortHandle) {
        self.by_peer.entry(ip).or_default().push_back((id, h));
        self.total += 1;
    }

    fn remove(&mut self, ip: std::net::IpAddr, id: u64) {
        if let Some(v) = self.by_peer.get_mut(&ip) {
            let before = v.len();
            v.retain(|(i, _)| *i != id);
            self.total -= before - v.len();
            if v.is_empty() {
                self.by_peer.remove(&ip);
            }
        }
    }
}

/// Accept scrapers: at most [`MAX_CONNECTIONS_PER_PEER`] per peer address and
/// [`MAX_CONNECTIONS`] in all (see there for which is closed when all are taken); every
/// connection beyond is accepted and closed at once, so the listen backlog never fills.
/// One request per connection, its head within [`HEADER_TIMEOUT`], each connection closed
/// after [`CONNECTION_TIMEOUT`] whatever the client does (hyper reads the request, the
/// sampler writes the text).
async fn serve_http(listener: std::net::TcpListener, tx: mpsc::Sender<Event>) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(error = %e, "metrics: cannot serve");
            return;
        }
    };
    // one thread runs this loop and every connection task: a plain Mutex, never held
    // across an await
    let conns = std::sync::Arc::new(std::sync::Mutex::new(Conns::default()));
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                // EMFILE and the like: wait, the listener stays
                tracing::warn!(error = %e, "metrics: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let ip = peer.ip();
        let mut c = conns
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Err(why) = c.admit(ip) {
            tracing::debug!(peer = %ip, limit = why, "metrics: a connection over the limit closed");
            continue;
        }
        let id = c.next;
        c.next += 1;
        let tx = tx.clone();
        let done = std::sync::Arc::clone(&conns);
        let task = tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |rq| {
                let tx = tx.clone();
                async move { Ok::<_, std::convert::Infallible>(answer(&rq, &tx).await) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .keep_alive(false)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), svc);
            if tokio::time::timeout(CONNECTION_TIMEOUT, conn)
                .await
                .is_err()
            {
                tracing::debug!("metrics: a connection timed out");
            }
            done.lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .remove(ip, id);
        });
        c.add(ip, id, task.abort_handle());
    }
}

type Body = http_body_util::Full<hyper::body::Bytes>;

async fn answer(
    rq: &hyper::Request<hyper::body::Incoming>,
    tx: &mpsc::Sender<Event>,
) -> hyper::Response<Body> {
    use hyper::{header, Method, StatusCode};
    let reply = |code: StatusCode, text: String| {
        let mut r = hyper::Response::new(Body::from(text));
        *r.status_mut() = code;
        r
    };
    if rq.method() != Method::GET && rq.method() != Method::HEAD {
        let mut r = reply(StatusCode::METHOD_NOT_ALLOWED, "only GET /metrics\n".into());
        r.headers_mut()
            .insert(header::ALLOW, header::HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    if rq.uri().path() != "/metrics" {
        return reply(
            StatusCode::NOT_FOUND,
            "powerperfd serves GET /metrics\n".into(),
        );
    }
    let (otx, orx) = tokio::sync::oneshot::channel();
    if tx.send(Event::Scrape(otx)).is_err() {
        return reply(StatusCode::SERVICE_UNAVAILABLE, "no sampler\n".into());
    }
    match tokio::time::timeout(IO_TIMEOUT, orx).await {
        Ok(Ok(text)) => {
            let mut r = reply(StatusCode::OK, text);
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static(
                    prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
                ),
            );
            r
        }
        _ => reply(
            StatusCode::SERVICE_UNAVAILABLE,
            "the sampler did not answer\n".into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn domain(dir: &Path, name: &str, uj: u64, max: u64) -> RaplDomain {
        std::fs::write(dir.join(format!("{name}.uj")), uj.to_string()).unwrap();
        RaplDomain {
            name: name.into(),
            column: format!("energy_{name}_j"),
            energy_path: dir.join(format!("{name}.uj")),
            max_energy_range_uj: max,
        }
    }

    fn line<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
        text.lines()
            .find(|l| l.starts_with(prefix))
            .map(|l| l[prefix.len()..].trim())
    }

    #[test]
    fn job_energy_counts_the_node_while_a_session_of_the_job_is_open() {
        let t = tempfile::tempdir().unwrap();
        let d = domain(t.path(), "package-0", 900, 1000);
        let mut st = State::new(Sources {
            devices: vec![],
            rapl: vec![d.clone()],
            sysfs_root: t.path().into(),
            gpu: None,
        });
        let set = |v: u64| std::fs::write(&d.energy_path, v.to_string()).unwrap();
        st.handle(Event::Open { id: 1, uid: 0 });
        set(950); // before the job: not the job's
        st.handle(Event::Identity {
            id: 1,
            uid: 1000,
            job: Some("77".into()),
        });
        // a second session of the same job does not count the node twice
        st.handle(Event::Open { id: 2, uid: 0 });
        st.handle(Event::Identity {
            id: 2,
            uid: 1000,
            job: Some("77".into()),
        });
        set(20); // wraps at 1000: 70 µJ
        st.handle(Event::End { id: 2 });
        set(30);
        st.handle(Event::End { id: 1 });
        set(500); // after the job
        st.sample();
        let text = st.render();
        assert_eq!(
            line(
                &text,
                "powerperf_job_energy_joules_total{job=\"77\",domain=\"package-0\"}"
            ),
            Some("0.00008"),
            "{text}"
        );
        assert_eq!(
            line(
                &text,
                "powerperf_rapl_energy_joules_total{domain=\"package-0\"}"
            ),
            Some("0.0006"),
            "{text}"
        );
        assert_eq!(line(&text, "powerperf_job_sessions{job=\"77\"}"), Some("0"));
        assert_eq!(line(&text, "powerperf_sessions"), Some("0"));
    }

    #[test]
    fn finished_jobs_are_bounded_oldest_first() {
        let t = tempfile::tempdir().unwrap();
        let mut st = State::new(Sources {
            devices: vec![],
            rapl: vec![domain(t.path(), "package-0", 0, 1000)],
            sysfs_root: t.path().into(),
            gpu: None,
        });
        for i in 0..(MAX_FINISHED_JOBS as u64 + 5) {
            st.handle(Event::Open { id: i, uid: 0 });
            st.handle(Event::Identity {
                id: i,
                uid: 1,
                job: Some(format!("j{i}")),
            });
            st.handle(Event::End { id: i });
        }
        assert_eq!(st.jobs.len(), MAX_FINISHED_JOBS);
        assert!(!st.jobs.contains_key("j4") && st.jobs.contains_key("j5"));
    }

    #[test]
    fn settings_are_served_in_their_units_until_restored() {
        let t = tempfile::tempdir().unwrap();
        let mut st = State::new(Sources {
            devices: vec![],
            rapl: vec![],
            sysfs_root: t.path().into(),
            gpu: None,
        });
        st.handle(Event::Open { id: 3, uid: 1000 });
        st.handle(Event::Applied {
            id: 3,
            what: vec![
                Applied::Hertz {
                    control: "cpu.core_freq",
                    target: "cpu1".into(),
                    min: 1.6e9,
                    max: 1.6e9,
                },
                Applied::Watts {
                    control: "gpu.power_limit",
                    target: "gpu0".into(),
                    watts: 300.0,
                },
            ],
        });
        let text = st.render();
        assert_eq!(line(&text, "powerperf_session_setting_hertz{session=\"3\",uid=\"1000\",job=\"\",control=\"cpu.core_freq\",target=\"cpu1\",bound=\"max\"}"), Some("1600000000.0"), "{text}");
        assert_eq!(line(&text, "powerperf_session_setting_watts{session=\"3\",uid=\"1000\",job=\"\",control=\"gpu.power_limit\",target=\"gpu0\"}"), Some("300.0"), "{text}");
        assert!(text.contains("# TYPE powerperf_session_setting_hertz gauge"));
        st.handle(Event::Restored { id: 3 });
        assert!(!st.render().contains("powerperf_session_setting_hertz{"));
    }

    #[test]
    fn job_ids_are_escaped_in_labels() {
        let t = tempfile::tempdir().unwrap();
        let mut st = State::new(Sources {
            devices: vec![],
            rapl: vec![domain(t.path(), "package-0", 0, 1000)],
            sysfs_root: t.path().into(),
            gpu: None,
        });
        st.handle(Event::Open { id: 1, uid: 0 });
        // hello allows any printable ASCII but spaces
        st.handle(Event::Identity {
            id: 1,
            uid: 5,
            job: Some(r#"a"b\c}"#.into()),
        });
        let text = st.render();
        assert!(
            text.contains(r#"powerperf_job_sessions{job="a\"b\\c}"} 1"#),
            "{text}"
        );
    }

    #[test]
    fn listen_addresses_are_ip_and_port() {
        assert!(parse_listen("127.0.0.1:9712").is_ok());
        assert!(parse_listen("[::1]:0").is_ok());
        for bad in [
            "localhost:9712",
            "127.0.0.1",
            ":9712",
            "127.0.0.1:99999",
            "",
        ] {
            assert!(parse_listen(bad).is_err(), "{bad}");
        }
    }
}
