//! The protocol of `powerperfd`, the privileged node service (crates/powerperfd,
//! docs/cluster.md), and its client: `powerperf apply` and `powerperf collect` run by a user
//! who may not write cpufreq or read `energy_uj` go through it.
//!
//! Transport: a Unix stream socket (default [`DEFAULT_SOCKET`]); each message is one line of
//! JSON (newline-delimited), at most [`MAX_LINE`] bytes with its newline, in both directions.
//! The client sends a [`Request`], the daemon answers with one [`Response`]. The daemon
//! identifies the client by `SO_PEERCRED` (uid, gid, pid), never by anything it sends; only
//! uid 0 may send [`OnBehalf`] (a Slurm SPANK plugin acting for a job's user).
//!
//! Every change belongs to the connection (the session) that made it: the daemon puts it back
//! when the client sends [`Request::Restore`], closes the connection or its process ends.

pub mod client;

use serde::{Deserialize, Serialize};

/// The daemon's socket when neither `--daemon` nor [`ENV_DAEMON`] names one.
pub const DEFAULT_SOCKET: &str = "/run/powerperf/powerperfd.sock";
/// Environment variable naming the daemon's socket (as `--daemon PATH`).
pub const ENV_DAEMON: &str = "POWERPERF_DAEMON";
/// The longest protocol line, newline included (bytes), in both directions.
pub const MAX_LINE: usize = 64 * 1024;
/// Protocol version sent in [`Request::Hello`] and answered by the daemon.
pub const PROTOCOL_VERSION: u32 = 1;

/// "On behalf of uid N, job J": sent by a uid-0 client (a Slurm SPANK plugin); the daemon
/// then applies uid N's policy to the session. From any other uid it is refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OnBehalf {
    pub uid: u32,
    /// The job id (at most 128 printable characters).
    #[serde(default)]
    pub job: Option<String>,
}

/// A request: one JSON object per line, `{"op": "...", ...}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// Optional first request: the protocol version, and `on_behalf_of` (uid 0 only).
    Hello {
        #[serde(default)]
        version: Option<u32>,
        #[serde(default)]
        on_behalf_of: Option<OnBehalf>,
    },
    /// The raw RAPL counters (`energy_uj`) of every domain (read signal `energy`).
    ReadEnergy {},
    /// Pin the CPU core frequency (write control `cpu.core_freq`) of `cpus` (default: every
    /// CPU), MHz, through the same controller `powerperf apply` uses as root.
    SetCoreFreq {
        mhz: f64,
        #[serde(default)]
        cpus: Option<Vec<u32>>,
    },
    /// Set the cpufreq governor (write control `cpu.governor`) of `cpus` (default: every
    /// CPU) to one of the CPUs' `scaling_available_governors`.
    SetGovernor {
        governor: String,
        #[serde(default)]
        cpus: Option<Vec<u32>>,
    },
    /// Pin the Intel uncore frequency (write control `cpu.uncore_freq`), MHz, of `domains`
    /// (the `intel_uncore_frequency` directory names, `package_00_die_00` or `uncore00`;
    /// default: every one): `min_freq_khz` = `max_freq_khz`, through the same controller.
    SetUncoreFreq {
        mhz: f64,
        #[serde(default)]
        domains: Option<Vec<String>>,
    },
    /// Lock GPU `gpu`'s SM clock to `[min_mhz, max_mhz]` (write control
    /// `gpu.locked_clocks`; `max_mhz` defaults to `min_mhz`). Restored by a reset.
    SetGpuLockedClocks {
        gpu: u32,
        min_mhz: f64,
        #[serde(default)]
        max_mhz: Option<f64>,
    },
    /// Set GPU `gpu`'s power limit, W (write control `gpu.power_limit`). Restored to the
    /// value before.
    SetGpuPowerLimit { gpu: u32, watts: f64 },
    /// Lock GPU `gpu`'s memory clock to `[min_mhz, max_mhz]` (write control
    /// `gpu.mem_locked_clocks`, `nvmlDeviceSetMemoryLockedClocks`; `max_mhz` defaults to
    /// `min_mhz`). Restored by a reset. Refused where the GPU has no memory-clock lock.
    SetGpuMemLockedClocks {
        gpu: u32,
        min_mhz: f64,
        #[serde(default)]
        max_mhz: Option<f64>,
    },
    /// Power and energy readings that need privileges (read signal `power`): the perf
    /// `power` PMU's RAPL events (opened by the daemon for this session; energy since the
    /// session's first `read_power`) and NVML's power and total energy per GPU.
    ReadPower {},
    /// Put back everything this session changed, in reverse order.
    Restore {},
    /// What this session holds, who the daemon thinks the client is.
    Status {},
    /// Check `request` (one of the `set_gpu_*` requests) as the daemon would before a
    /// write: the caller's grants, the values, another session's hold, the device's own
    /// list or range. Nothing is saved or written; the answer is `ok` (with an `info` line)
    /// or the refusal the request would get. `powerperf sweep` checks every point of its
    /// grid this way before it changes anything. Other requests are refused.
    Check { request: Box<Request> },
    /// What this session's identity may do (GEOPM's `PlatformGetUserAccess`): the signals
    /// it may read and the controls it may set, with each grant's range, from the daemon's
    /// policy; answered in [`Response::access`]. Only the caller's own access: the session's
    /// identity (the peer's uid from `SO_PEERCRED`, or the uid a uid-0 client named in
    /// `hello`'s `on_behalf_of`), never another user's. Reads nothing from the hardware and
    /// changes nothing. A daemon older than this request refuses it as an unknown op
    /// (its error names the unknown variant `access`).
    Access {},
}
// The ops without parameters are empty struct variants, not unit variants: serde ignores
// every other field of a unit variant of an internally tagged enum, where
// `deny_unknown_fields` refuses them on a struct variant (`{"op":"restore","uid":0}` is
// refused, issue 38).

/// One RAPL domain's counter as read by the daemon.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnergyReading {
    /// `package-0`, `dram-0`, `psys` (as `powerperf_node::rapl` names them).
    pub name: String,
    /// Timeline column, `energy_package_0_j`.
    pub column: String,
    /// The counter, µJ (`None`: the read failed this time).
    pub energy_uj: Option<u64>,
    /// Where it wraps, µJ.
    pub max_energy_range_uj: u64,
}

/// [`PowerReading::origin`] of the perf `power` PMU's RAPL events.
pub const ORIGIN_PERF: &str = "perf_power_pmu";
/// [`PowerReading::origin`] of NVML's readings.
pub const ORIGIN_NVML: &str = "nvml";

/// One power or energy reading of `read_power`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PowerReading {
    /// `package-0`, `dram-0`, `psys` (perf power PMU), `gpu-0` (NVML), or a sysfs power
    /// device's timeline stem (`amdgpu0`, `xe0_card`, `power_meter0_module`).
    pub name: String,
    /// [`ORIGIN_PERF`], [`ORIGIN_NVML`], or a sysfs power device's origin (`amdgpu`, `xe`,
    /// `i915`, `hwmon`: [`crate::devices::Origin::as_str`]).
    #[serde(default)]
    pub origin: String,
    /// Where it comes from: `perf power/energy-pkg/ on CPU 0` (its sysfs `.scale` and
    /// `.unit` applied), `NVML GPU 0 (NVIDIA H100 80GB HBM3)`.
    pub source: String,
    /// Energy, J: for the perf PMU since this session's first `read_power`; for NVML
    /// `nvmlDeviceGetTotalEnergyConsumption` (since the driver loaded). `None`: not read.
    #[serde(default)]
    pub energy_j: Option<f64>,
    /// Power, W (NVML `nvmlDeviceGetPowerUsage` or the instantaneous field); `None` for
    /// the perf PMU, which counts energy only.
    #[serde(default)]
    pub power_w: Option<f64>,
}

/// One control a grant lets the caller set ([`CallerAccess::write`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WriteAccess {
    /// The control: `cpu.core_freq`, `cpu.governor`, `cpu.uncore_freq`,
    /// `gpu.locked_clocks`, `gpu.mem_locked_clocks`, `gpu.power_limit`.
    pub control: String,
    /// The grant that allows it: its `name`, else `#N` (its place in the config).
    pub grant: String,
    /// Inclusive `[min, max]` (MHz; W for `gpu.power_limit`); `None`: any value the
    /// hardware allows.
    #[serde(default)]
    pub range: Option<[f64; 2]>,
    /// The CPUs a per-CPU control may touch; `None`: all.
    #[serde(default)]
    pub cpus: Option<Vec<u32>>,
}

/// The answer to [`Request::Access`]: what the session's identity may read and set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallerAccess {
    /// The identity the policy is applied to: `uid 1000 (alice)`.
    pub identity: String,
    pub uid: u32,
    /// uid 0: every signal and control, within what the hardware allows; no grant is
    /// consulted and [`write`](Self::write) is empty.
    #[serde(default)]
    pub unrestricted: bool,
    /// The signals it may read (`energy`: `read_energy`; `power`: `read_power`), from
    /// `[everyone]` and its grants.
    #[serde(default)]
    pub read: Vec<String>,
    /// One entry per control per grant that names this identity.
    #[serde(default)]
    pub write: Vec<WriteAccess>,
    /// The config file the policy comes from (where an administrator adds a grant);
    /// `None`: the daemon runs without `--config` (everyone reads energy, nobody writes).
    #[serde(default)]
    pub config: Option<String>,
}

impl CallerAccess {
    /// Whether it may read `signal`.
    pub fn may_read(&self, signal: &str) -> bool {
        self.unrestricted || self.read.iter().any(|s| s == signal)
    }

    /// Whether some value of `control` may be set (the grant's range aside).
    pub fn may_write(&self, control: &str) -> bool {
        self.unrestricted || self.write.iter().any(|w| w.control == control)
    }

    /// `gpu.power_limit [300, 500] W (grant gpu-users)` for each control, `; `-joined;
    /// `every control (uid 0)` when unrestricted, `nothing` when no grant writes.
    pub fn describe_writes(&self) -> String {
        if self.unrestricted {
            return "every control (uid 0)".into();
        }
        if self.write.is_empty() {
            return "nothing".into();
        }
        self.write
            .iter()
            .map(|w| {
                let unit = if w.control == "gpu.power_limit" {
                    "W"
                } else {
                    "MHz"
                };
                let range = w
                    .range
                    .map(|[lo, hi]| format!(" [{lo}, {hi}] {unit}"))
                    .unwrap_or_default();
                let cpus = w
                    .cpus
                    .as_ref()
                    .map(|c| format!(" on CPUs {c:?}"))
                    .unwrap_or_default();
                format!("{}{range}{cpus} (grant {})", w.control, w.grant)
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// The daemon's answer to one request.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Response {
    pub ok: bool,
    /// Why the request was refused or failed (with the fix).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// This session's number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub energy: Vec<EnergyReading>,
    /// `read_power`'s readings.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub power: Vec<PowerReading>,
    /// File writes done (`path: old -> new`), for set and restore.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub writes: Vec<String>,
    /// Free text: the controller, the identity, what the session holds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub info: Vec<String>,
    /// `access`'s answer: the caller's own access.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access: Option<CallerAccess>,
}

impl Response {
    /// A success without data.
    pub fn ok() -> Self {
        Response {
            ok: true,
            ..Default::default()
        }
    }
    /// A refusal or failure.
    pub fn refused(why: impl Into<String>) -> Self {
        Response {
            ok: false,
            error: Some(why.into()),
            ..Default::default()
        }
    }
}

/// Read one line of at most `max` bytes (newline included) into `buf` (cleared first),
/// holding at most `max + 1` bytes. `Ok(false)` at the end of the stream.
///
/// # Errors
/// I/O errors, and `InvalidData` for a line longer than `max`.
pub fn read_line_bounded(
    r: &mut impl std::io::BufRead,
    buf: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<bool> {
    use std::io::BufRead as _;
    buf.clear();
    let n = std::io::Read::take(&mut *r, max as u64 + 1).read_until(b'\n', buf)?;
    if n == 0 {
        return Ok(false);
    }
    if buf.last() != Some(&b'\n') {
        if buf.len() > max {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("a line longer than {max} bytes"),
            ));
        }
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "the stream ended inside a line",
        ));
    }
    Ok(true)
}

/// The peer's pid, uid and gid (SO_PEERCRED).
///
/// # Errors
/// getsockopt fails.
pub fn peer_cred(s: &std::os::unix::net::UnixStream) -> std::io::Result<libc::ucred> {
    use std::os::fd::AsRawFd;
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `cred`, which we own.
    let rc = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(cred)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_and_unknown_fields_are_refused() {
        let r: Request = serde_json::from_str(r#"{"op":"set_core_freq","mhz":1600}"#).unwrap();
        assert_eq!(
            r,
            Request::SetCoreFreq {
                mhz: 1600.0,
                cpus: None
            }
        );
        let h: Request =
            serde_json::from_str(r#"{"op":"hello","on_behalf_of":{"uid":1000,"job":"42"}}"#)
                .unwrap();
        assert!(matches!(
            h,
            Request::Hello {
                on_behalf_of: Some(OnBehalf { uid: 1000, .. }),
                ..
            }
        ));
        assert!(
            serde_json::from_str::<Request>(r#"{"op":"set_core_freq","mhz":1,"x":1}"#).is_err()
        );
        assert!(serde_json::from_str::<Request>(r#"{"op":"rm_rf"}"#).is_err());
        let g: Request =
            serde_json::from_str(r#"{"op":"set_governor","governor":"performance","cpus":[1]}"#)
                .unwrap();
        assert_eq!(
            g,
            Request::SetGovernor {
                governor: "performance".into(),
                cpus: Some(vec![1])
            }
        );
        assert!(serde_json::from_str::<Request>(r#"{"op":"set_governor"}"#).is_err());
        let u: Request = serde_json::from_str(
            r#"{"op":"set_uncore_freq","mhz":1800,"domains":["package_00_die_00"]}"#,
        )
        .unwrap();
        assert!(matches!(u, Request::SetUncoreFreq { mhz, domains: Some(_) } if mhz == 1800.0));
        let l: Request =
            serde_json::from_str(r#"{"op":"set_gpu_locked_clocks","gpu":0,"min_mhz":1200}"#)
                .unwrap();
        assert!(matches!(
            l,
            Request::SetGpuLockedClocks {
                gpu: 0,
                max_mhz: None,
                ..
            }
        ));
        let p: Request =
            serde_json::from_str(r#"{"op":"set_gpu_power_limit","gpu":0,"watts":300}"#).unwrap();
        assert!(matches!(p, Request::SetGpuPowerLimit { gpu: 0, .. }));
        assert!(serde_json::from_str::<Request>(
            r#"{"op":"set_gpu_power_limit","gpu":-1,"watts":300}"#
        )
        .is_err());
        assert_eq!(
            serde_json::to_string(&Request::ReadPower {}).unwrap(),
            r#"{"op":"read_power"}"#
        );
        let text = serde_json::to_string(&Request::ReadEnergy {}).unwrap();
        assert_eq!(text, r#"{"op":"read_energy"}"#);
        // ops without parameters refuse unknown fields too (issue 38)
        for op in ["read_energy", "read_power", "restore", "status", "access"] {
            let ok = format!(r#"{{"op":"{op}"}}"#);
            assert!(serde_json::from_str::<Request>(&ok).is_ok(), "{ok}");
            let bad = format!(r#"{{"op":"{op}","uid":0}}"#);
            let e = serde_json::from_str::<Request>(&bad)
                .unwrap_err()
                .to_string();
            assert!(e.contains("unknown field `uid`"), "{bad}: {e}");
        }
    }

    #[test]
    fn lines_are_read_with_a_bound() {
        let mut buf = Vec::new();
        let mut ok = std::io::BufReader::new(&b"{}\nrest"[..]);
        assert!(read_line_bounded(&mut ok, &mut buf, 8).unwrap());
        assert_eq!(buf, b"{}\n");
        let long = [b'x'; 100];
        let mut r = std::io::BufReader::new(&long[..]);
        let e = read_line_bounded(&mut r, &mut buf, 8).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
        assert!(buf.len() <= 9);
        let mut empty = std::io::BufReader::new(&b""[..]);
        assert!(!read_line_bounded(&mut empty, &mut buf, 8).unwrap());
    }
}
