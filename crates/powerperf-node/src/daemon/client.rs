//! The client side of `powerperfd`: a connection (one session), the socket lookup
//! (`--daemon PATH`, else `$POWERPERF_DAEMON`, else [`DEFAULT_SOCKET`] when it exists), and
//! RAPL energy read by the daemon for `collect`. `apply` of a static setting through the
//! daemon is `dvfs::apply::daemon` (the daemon module sits below `collect` and `dvfs`,
//! docs/architecture.md).

use super::{
    read_line_bounded, EnergyReading, Request, Response, DEFAULT_SOCKET, ENV_DAEMON, MAX_LINE,
};
use anyhow::{Context, Result};
use std::io::{BufReader, Write as _};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The socket given on the command line (`collect --daemon PATH`), for code that has no
/// other way to receive it (the energy sources of `collect`).
static EXPLICIT: OnceLock<PathBuf> = OnceLock::new();

/// Record the socket named by `--daemon PATH` (first call wins).
pub fn set_explicit_socket(path: PathBuf) {
    let _ = EXPLICIT.set(path);
}

/// The daemon's socket: `explicit` (`--daemon`), else the one recorded by
/// [`set_explicit_socket`], else `$POWERPERF_DAEMON`, else [`DEFAULT_SOCKET`] when something
/// is there. `None`: no daemon is configured on this node.
pub fn socket_path(explicit: Option<&Path>) -> Option<PathBuf> {
    if let Some(p) = explicit {
        return Some(p.to_path_buf());
    }
    if let Some(p) = EXPLICIT.get() {
        return Some(p.clone());
    }
    if let Some(p) = std::env::var_os(ENV_DAEMON).filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let d = Path::new(DEFAULT_SOCKET);
    std::fs::symlink_metadata(d)
        .is_ok()
        .then(|| d.to_path_buf())
}

/// The daemon `powerperf apply` goes through: `--daemon` when given; else, when powerperf
/// is not root, `$POWERPERF_DAEMON` or the default socket when something is there. `None`:
/// apply writes cpufreq itself, as before.
pub fn for_apply(explicit: Option<&Path>) -> Option<PathBuf> {
    if let Some(p) = explicit {
        return Some(p.to_path_buf());
    }
    if is_root() {
        return None;
    }
    socket_path(None)
}

/// Whether this process runs as root (effective uid 0).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// One connection to the daemon: one session. Dropping it (or the process ending) makes
/// the daemon restore what the session changed.
#[derive(Debug)]
pub struct Client {
    path: PathBuf,
    writer: UnixStream,
    reader: BufReader<UnixStream>,
    /// The session number the daemon gave.
    pub session: Option<u64>,
}

impl Client {
    /// Connect and say hello.
    ///
    /// # Errors
    /// No daemon at `path` (the message names the fixes), or a refusal.
    pub fn connect(path: &Path) -> Result<Self> {
        Self::connect_with(path, None)
    }

    /// Connect and say hello on behalf of a job's user (`on_behalf_of`): only a uid-0
    /// client may (the Slurm SPANK plugin in slurmstepd); the daemon then judges the session
    /// by that uid's policy and logs the job id. `None` is [`connect`](Self::connect).
    ///
    /// # Errors
    /// As `connect`; the daemon refuses `on_behalf_of` from any uid but 0.
    pub fn connect_with(path: &Path, on_behalf_of: Option<super::OnBehalf>) -> Result<Self> {
        Self::connect_inner(path, on_behalf_of, std::time::Duration::from_secs(60))
    }

    /// [`connect`](Self::connect) with `timeout` on every read and write (a query such as
    /// `powerperf devices`' [`access`](Self::access) should not wait a minute on a socket
    /// that accepts and never answers).
    ///
    /// # Errors
    /// As `connect`, and a daemon that does not answer `hello` within `timeout`.
    pub fn connect_with_timeout(path: &Path, timeout: std::time::Duration) -> Result<Self> {
        Self::connect_inner(path, None, timeout)
    }

    fn connect_inner(
        path: &Path,
        on_behalf_of: Option<super::OnBehalf>,
        timeout: std::time::Duration,
    ) -> Result<Self> {
        let s = UnixStream::connect(path).map_err(|e| {
            anyhow::anyhow!(
                "cannot reach powerperfd at {}: {e}. Start the node service (`systemctl start powerperfd`, docs/cluster.md), or name its socket with --daemon PATH or ${ENV_DAEMON}",
                path.display()
            )
        })?;
        s.set_read_timeout(Some(timeout))?;
        s.set_write_timeout(Some(timeout))?;
        let reader = BufReader::new(s.try_clone()?);
        let mut c = Client {
            path: path.to_path_buf(),
            writer: s,
            reader,
            session: None,
        };
        let r = c.request(&Request::Hello {
            version: Some(super::PROTOCOL_VERSION),
            on_behalf_of,
        })?;
        c.session = r.session;
        Ok(c)
    }

    /// The socket path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Send a request and read its response (refusals are `Ok` with `ok = false`).
    ///
    /// # Errors
    /// The connection broke, or the answer is not a response.
    pub fn call(&mut self, req: &Request) -> Result<Response> {
        let mut line = serde_json::to_vec(req)?;
        line.push(b'\n');
        self.writer
            .write_all(&line)
            .with_context(|| format!("powerperfd at {} went away", self.path.display()))?;
        let mut buf = Vec::new();
        let got = read_line_bounded(&mut self.reader, &mut buf, MAX_LINE)
            .with_context(|| format!("no answer from powerperfd at {}", self.path.display()))?;
        if !got {
            anyhow::bail!(
                "powerperfd at {} closed the connection (its log says why: `journalctl -u powerperfd`)",
                self.path.display()
            );
        }
        serde_json::from_slice(&buf).with_context(|| {
            format!(
                "powerperfd at {} answered something that is not a response",
                self.path.display()
            )
        })
    }

    /// [`call`](Self::call), with a refusal turned into an error carrying the daemon's
    /// reason.
    ///
    /// # Errors
    /// As `call`, and the daemon's refusal.
    pub fn request(&mut self, req: &Request) -> Result<Response> {
        let r = self.call(req)?;
        if !r.ok {
            anyhow::bail!(
                "powerperfd refused: {}",
                r.error.as_deref().unwrap_or("(no reason given)")
            );
        }
        Ok(r)
    }

    /// Pin the core frequency of `cpus` (all when `None`).
    ///
    /// # Errors
    /// The daemon's refusal (policy, range, another session holding a CPU).
    pub fn set_core_freq(&mut self, mhz: f64, cpus: Option<Vec<u32>>) -> Result<Response> {
        self.request(&Request::SetCoreFreq { mhz, cpus })
    }

    /// Set the cpufreq governor of `cpus` (all when `None`).
    ///
    /// # Errors
    /// The daemon's refusal (policy, a governor the CPU does not list, another session
    /// holding a CPU).
    pub fn set_governor(&mut self, governor: &str, cpus: Option<Vec<u32>>) -> Result<Response> {
        self.request(&Request::SetGovernor {
            governor: governor.to_string(),
            cpus,
        })
    }

    /// Pin the uncore frequency of `domains` (all when `None`).
    ///
    /// # Errors
    /// The daemon's refusal (policy, range, no uncore control, another session holding a
    /// domain).
    pub fn set_uncore_freq(&mut self, mhz: f64, domains: Option<Vec<String>>) -> Result<Response> {
        self.request(&Request::SetUncoreFreq { mhz, domains })
    }

    /// Lock GPU `gpu`'s SM clock to `[min_mhz, max_mhz]`.
    ///
    /// # Errors
    /// The daemon's refusal.
    pub fn set_gpu_locked_clocks(
        &mut self,
        gpu: u32,
        min_mhz: f64,
        max_mhz: f64,
    ) -> Result<Response> {
        self.request(&Request::SetGpuLockedClocks {
            gpu,
            min_mhz,
            max_mhz: Some(max_mhz),
        })
    }

    /// Lock GPU `gpu`'s memory clock to `[min_mhz, max_mhz]`.
    ///
    /// # Errors
    /// The daemon's refusal.
    pub fn set_gpu_mem_locked_clocks(
        &mut self,
        gpu: u32,
        min_mhz: f64,
        max_mhz: f64,
    ) -> Result<Response> {
        self.request(&Request::SetGpuMemLockedClocks {
            gpu,
            min_mhz,
            max_mhz: Some(max_mhz),
        })
    }

    /// Set GPU `gpu`'s power limit, W.
    ///
    /// # Errors
    /// The daemon's refusal.
    pub fn set_gpu_power_limit(&mut self, gpu: u32, watts: f64) -> Result<Response> {
        self.request(&Request::SetGpuPowerLimit { gpu, watts })
    }

    /// Ask whether `req` (a `set_gpu_*` request) would be allowed, changing nothing
    /// ([`Request::Check`]).
    ///
    /// # Errors
    /// The refusal `req` would get (policy, range, the device's list, another session's
    /// hold), or a daemon that does not know `check` (an older powerperfd).
    pub fn check(&mut self, req: &Request) -> Result<Response> {
        self.request(&Request::Check {
            request: Box::new(req.clone()),
        })
    }

    /// The caller's own access under the daemon's policy ([`Request::Access`]): the
    /// signals it may read and the controls it may set. `Ok(None)`: the daemon is older
    /// than `access` (it refuses it as an unknown op).
    ///
    /// # Errors
    /// The connection broke, or another refusal (the rate limit, a stopping daemon).
    pub fn access(&mut self) -> Result<Option<super::CallerAccess>> {
        let r = self.call(&Request::Access {})?;
        if !r.ok {
            let why = r.error.unwrap_or_default();
            if why.contains("unknown variant `access`") {
                return Ok(None);
            }
            anyhow::bail!("powerperfd refused `access`: {why}");
        }
        r.access.map(Some).ok_or_else(|| {
            anyhow::anyhow!(
                "powerperfd at {} answered `access` without the access",
                self.path.display()
            )
        })
    }

    /// The perf power PMU's and NVML's readings.
    ///
    /// # Errors
    /// The connection broke, or the daemon refused (policy, no source).
    pub fn read_power(&mut self) -> Result<Vec<super::PowerReading>> {
        Ok(self.request(&Request::ReadPower {})?.power)
    }

    /// Put back everything this session changed.
    ///
    /// # Errors
    /// The connection broke or the restore failed.
    pub fn restore(&mut self) -> Result<Response> {
        self.request(&Request::Restore {})
    }

    /// The raw RAPL counters.
    ///
    /// # Errors
    /// The connection broke, or the daemon refused (policy, no RAPL).
    pub fn read_energy(&mut self) -> Result<Vec<EnergyReading>> {
        Ok(self.request(&Request::ReadEnergy {})?.energy)
    }
}

/// RAPL energy of the perf `power` PMU read by the daemon (`read_power`), for `collect`
/// when this user may not open the PMU (system-wide perf events need
/// `kernel.perf_event_paranoid` <= 0 or CAP_PERFMON) and powercap gives nothing: the daemon's
/// readings are J since the session's first `read_power`, so a sample is the difference of
/// two readings.
#[derive(Debug)]
pub struct DaemonPower {
    client: Client,
    /// The perf domains (`package-0`, `psys`), in the daemon's order.
    pub domains: Vec<super::PowerReading>,
    last: Vec<Option<f64>>,
}

impl DaemonPower {
    /// Connect and take the first reading.
    ///
    /// # Errors
    /// No daemon, a refusal, or no perf power PMU reading.
    pub fn open(socket: &Path) -> Result<Self> {
        let mut client = Client::connect(socket)?;
        let r = client.request(&Request::ReadPower {})?;
        let domains: Vec<super::PowerReading> = r
            .power
            .into_iter()
            .filter(|p| p.origin == super::ORIGIN_PERF)
            .collect();
        if domains.is_empty() {
            anyhow::bail!(
                "powerperfd at {} has no perf power PMU readings ({})",
                socket.display(),
                r.info.join("; ")
            );
        }
        let last = domains.iter().map(|d| d.energy_j).collect();
        Ok(DaemonPower {
            client,
            domains,
            last,
        })
    }

    /// The socket.
    pub fn path(&self) -> &Path {
        self.client.path()
    }

    /// Energy per domain since the previous call, J (`None` where a read failed).
    pub fn sample(&mut self) -> Vec<Option<f64>> {
        let now: Vec<super::PowerReading> = match self.client.request(&Request::ReadPower {}) {
            Ok(r) => r
                .power
                .into_iter()
                .filter(|p| p.origin == super::ORIGIN_PERF)
                .collect(),
            Err(_) => return vec![None; self.domains.len()],
        };
        let mut out = Vec::with_capacity(self.domains.len());
        for (i, d) in self.domains.iter().enumerate() {
            let cur = now
                .iter()
                .find(|r| r.name == d.name)
                .and_then(|r| r.energy_j);
            out.push(match (self.last[i], cur) {
                (Some(b), Some(n)) => Some((n - b).max(0.0)),
                _ => None,
            });
            if cur.is_some() {
                self.last[i] = cur;
            }
        }
        out
    }
}

/// RAPL energy read by the daemon, for `collect` when `energy_uj` is root-only: keeps the
/// last counter of each domain and accumulates with the wrap at `max_energy_range_uj`.
#[derive(Debug)]
pub struct DaemonEnergy {
    client: Client,
    /// The domains, in the daemon's order.
    pub domains: Vec<EnergyReading>,
    last: Vec<Option<u64>>,
}

impl DaemonEnergy {
    /// Connect and take the first reading.
    ///
    /// # Errors
    /// No daemon, a refusal, or no domains.
    pub fn open(socket: &Path) -> Result<Self> {
        let mut client = Client::connect(socket)?;
        let domains = client.read_energy()?;
        if domains.is_empty() {
            anyhow::bail!("powerperfd at {} has no RAPL domains", socket.display());
        }
        let last = domains.iter().map(|d| d.energy_uj).collect();
        Ok(DaemonEnergy {
            client,
            domains,
            last,
        })
    }

    /// The socket.
    pub fn path(&self) -> &Path {
        self.client.path()
    }

    /// Energy per domain since the previous call, J (`None` where a read failed).
    pub fn sample(&mut self) -> Vec<Option<f64>> {
        let now = match self.client.read_energy() {
            Ok(v) if v.len() == self.domains.len() => v,
            _ => return vec![None; self.domains.len()],
        };
        let mut out = Vec::with_capacity(now.len());
        for (i, (d, r)) in self.domains.iter().zip(&now).enumerate() {
            let delta = match (self.last[i], r.energy_uj) {
                (Some(b), Some(n)) if r.name == d.name => {
                    Some(crate::units::delta_uj(b, n, d.max_energy_range_uj) as f64 * 1e-6)
                }
                _ => None,
            };
            if r.energy_uj.is_some() {
                self.last[i] = r.energy_uj;
            }
            out.push(delta);
        }
        out
    }
}
