//! `powerperf apply` through powerperfd (docs/cluster.md): a static CPU core frequency set
//! in a daemon session while the command runs, and the daemon named as a fix when a user
//! cannot write cpufreq. The connection and protocol are [`crate::daemon`].

use crate::daemon::client::{for_apply, is_root, Client};
use crate::daemon::{DEFAULT_SOCKET, ENV_DAEMON};
use anyhow::{Context, Result};
use std::path::Path;

/// "powerperfd at SOCKET (session N)": how apply and sweep name a daemon session in their
/// messages and switch logs.
pub(super) fn describe_session(socket: &Path, client: &Client) -> String {
    format!(
        "powerperfd at {} (session {})",
        socket.display(),
        client
            .session
            .map(|s| s.to_string())
            .unwrap_or_else(|| "?".into())
    )
}

/// Add the daemon to an error of a user who could not write cpufreq and has no daemon
/// configured, as one more fix.
pub fn hint_without_daemon(e: anyhow::Error, explicit: Option<&Path>) -> anyhow::Error {
    let denied = e.chain().any(|c| {
        matches!(
            c.downcast_ref::<crate::dvfs::controller::ControllerError>(),
            Some(crate::dvfs::controller::ControllerError::NoPermission { .. })
        )
    });
    if denied && !is_root() && for_apply(explicit).is_none() {
        e.context(format!(
            "no powerperfd either (the node service that sets CPU frequencies for users within a policy, docs/cluster.md): none at {DEFAULT_SOCKET}; if one runs elsewhere, pass --daemon PATH or set ${ENV_DAEMON}"
        ))
    } else {
        e
    }
}

/// `powerperf apply` of a static CPU core frequency through the daemon: connect, set, run
/// the command, restore (the daemon also restores when this process dies). Returns the
/// command's shell status and lines for the summary.
///
/// # Errors
/// No daemon, a refusal (the daemon's reason), a command that cannot start.
pub fn apply_static(
    socket: &Path,
    mhz: f64,
    command: &[String],
    env: &[(String, String)],
    run_as: Option<&super::RunAs>,
) -> Result<(i32, String)> {
    let req = crate::daemon::Request::SetCoreFreq { mhz, cpus: None };
    apply_requests(socket, &[req], command, env, run_as)
}

/// `powerperf apply` of a static setting through the daemon, every controller in one
/// session: the requests of [`StaticSetting::daemon_requests`] (CPU core frequency, GPU SM
/// and memory clocks locked, GPU power limit; the same the SPANK plugin sends), each checked
/// by the daemon against the caller's grants and the device's own list or range; then the
/// command; then the restore (the daemon also restores when this process dies). A refusal
/// restores what the earlier requests set, and the command does not run. Returns the
/// command's shell status and the controller line for the summary.
///
/// # Errors
/// No daemon, a refusal (the daemon's reason), a command that cannot start, a failed
/// restore.
pub fn apply_requests(
    socket: &Path,
    reqs: &[crate::daemon::Request],
    command: &[String],
    env: &[(String, String)],
    run_as: Option<&super::RunAs>,
) -> Result<(i32, String)> {
    if command.is_empty() {
        anyhow::bail!(
            "no command given: write it after `--`, e.g. `powerperf apply --plan PLAN -- ./app`"
        );
    }
    let mut c = Client::connect(socket)?;
    let what = describe_session(socket, &c);
    for req in reqs {
        let asked = describe_request(req);
        let r = match c.request(req) {
            Ok(r) => r,
            Err(e) => {
                // put back what the earlier requests of this setting changed
                let _ = c.restore();
                return Err(e.context(format!(
                    "the plan's setting ({asked}) was not applied, nothing it set is left in place, and the command did not run"
                )));
            }
        };
        eprintln!("powerperf: {asked} set through {what}:");
        for w in &r.writes {
            eprintln!("  {w}");
        }
    }
    let sig = super::SignalForwarder::install()?;
    let caught = sig.caught();
    let status = if caught != 0 {
        eprintln!("powerperf: caught signal {caught} before the command started; restoring");
        128 + caught
    } else {
        super::run_child_as(command, env, &sig, run_as)?
    };
    match c.restore() {
        Ok(r) => {
            eprintln!(
                "powerperf: original settings restored by powerperfd ({} write(s))",
                r.writes.len()
            );
            Ok((status, what))
        }
        Err(e) => Err(e.context(
            "the restore through powerperfd failed; the daemon restores a session's settings when it ends or restarts (its journal), see `journalctl -u powerperfd`",
        )),
    }
}

/// One request in words, for the user's lines (`core frequency 1600 MHz`, `GPU 0 SM clock
/// locked at 1200 MHz`, …).
fn describe_request(req: &crate::daemon::Request) -> String {
    use crate::daemon::Request;
    match req {
        Request::SetCoreFreq { mhz, .. } => format!("core frequency {mhz} MHz"),
        Request::SetGpuLockedClocks {
            gpu,
            min_mhz,
            max_mhz,
        } => format!(
            "GPU {gpu} SM clock locked at {min_mhz}..{} MHz",
            max_mhz.unwrap_or(*min_mhz)
        ),
        Request::SetGpuMemLockedClocks {
            gpu,
            min_mhz,
            max_mhz,
        } => format!(
            "GPU {gpu} memory clock locked at {min_mhz}..{} MHz",
            max_mhz.unwrap_or(*min_mhz)
        ),
        Request::SetGpuPowerLimit { gpu, watts } => format!("GPU {gpu} power limit {watts} W"),
        other => serde_json::to_string(other).unwrap_or_else(|_| format!("{other:?}")),
    }
}

/// Region switches through a powerperfd session: each switch is a `set_core_freq` on the
/// open [`Client`], logged (with the daemon's writes) in the user's switch log; the restore
/// is the daemon's.
struct DaemonSwitcher {
    client: Client,
    log: super::SwitchLog,
}

impl DaemonSwitcher {
    /// Log the daemon's writes (`path: old -> new`) as the switch log's columns.
    fn log_writes(&mut self, action: &str, writes: &[String]) {
        for w in writes {
            let (path, rest) = w.split_once(": ").unwrap_or((w.as_str(), ""));
            let (old, new) = rest.split_once(" -> ").unwrap_or(("", rest));
            self.log.note(action, path, old, new);
        }
    }
}

impl super::Switcher for DaemonSwitcher {
    fn set(&mut self, mhz: f64) -> Result<()> {
        let r = self.client.set_core_freq(mhz, None)?;
        self.log_writes("set", &r.writes);
        Ok(())
    }
    fn note(&mut self, action: &str, what: &str, old: &str, new: &str) {
        self.log.note(action, what, old, new);
    }
    fn restore(&mut self) -> Result<()> {
        let r = self.client.restore().context(
            "the restore through powerperfd failed; the daemon restores a session's settings when it ends or restarts (its journal), see `journalctl -u powerperfd`",
        )?;
        self.log_writes("restore", &r.writes);
        eprintln!(
            "powerperf: original settings restored by powerperfd ({} write(s))",
            r.writes.len()
        );
        Ok(())
    }
}

/// `powerperf apply` of a job plan with region-triggered switching through the daemon: one
/// session; the plan's default is set before the command starts (a refusal stops here,
/// the command does not run), each region switch the command's powerperf-rt reports is a
/// `set_core_freq` in that session (a refused one is logged as `refuse` and the region
/// runs at the enclosing setting, as for root), and the daemon restores at the end, or
/// when this process dies. Switches are logged in `req.log_file` (the user's). Returns the
/// command's shell status and the controller line for the summary.
///
/// # Errors
/// No daemon, the default refused, a socket or log that cannot be created, a command that
/// cannot start, a failed restore.
pub fn apply_regions(
    socket: &Path,
    req: &super::ApplyRequest,
    plan: &super::RegionSettings,
    sig: &super::SignalForwarder,
) -> Result<(i32, String)> {
    if req.command.is_empty() {
        anyhow::bail!(
            "no command given: write it after `--`, e.g. `powerperf apply --plan PLAN -- ./app`"
        );
    }
    let log = super::SwitchLog::open(&req.log_file)?;
    let sock = super::control_socket(req)?;
    let client = Client::connect(socket)?;
    let what = describe_session(socket, &client);
    let mut sw = DaemonSwitcher { client, log };
    super::Switcher::set(&mut sw, plan.default_mhz)
        .context("the plan's default setting was not applied; the command did not run")?;
    eprintln!(
        "powerperf: default {} MHz set through {what}; region switches go through it",
        plan.default_mhz
    );
    let st = super::switch_at_regions(&mut sw, sock, req, plan, sig)?;
    Ok((st, what))
}

/// A plan's static setting for one region or workload, sorted by controller: what
/// `powerperf apply` sets for a static plan and what the Slurm SPANK plugin
/// (crates/spank-powerperf) asks powerperfd for ([`StaticSetting::daemon_requests`]).
#[derive(Debug, Clone, PartialEq)]
pub struct StaticSetting {
    /// The plan region or workload chosen.
    pub region: String,
    /// Its knob settings as the plan has them.
    pub knobs: std::collections::BTreeMap<String, f64>,
    /// CPU core frequency, MHz (`core_freq_mhz` of a CPU device or of no device).
    pub core_mhz: Option<f64>,
    /// GPU SM clock, MHz, and the GPU's index (`core_freq_mhz` of a GPU device; index 0
    /// when the plan names none).
    pub gpu_core_mhz: Option<(u32, f64)>,
    /// GPU memory clock, MHz (`mem_freq_mhz` of a GPU device).
    pub gpu_mem_mhz: Option<(u32, f64)>,
    /// GPU power limit, W (`power_limit_w` of a GPU device).
    pub gpu_power_limit_w: Option<(u32, f64)>,
    /// Environment for the command: `OMP_NUM_THREADS` from `threads`.
    pub env: Vec<(String, String)>,
    /// Knobs no controller sets (left unchanged), one sentence each.
    pub notes: Vec<String>,
}

/// The plan region or workload whose setting is applied: `name` when given, else the
/// first when every region has the same setting.
///
/// # Errors
/// `name` is not in the plan (the message lists the names), or no name for a plan whose
/// regions differ.
pub fn select_region<'a>(
    plan: &'a crate::dvfs::plan_file::Plan,
    name: Option<&str>,
    path: &Path,
) -> Result<&'a crate::dvfs::plan_file::PlanRegion> {
    let names = || {
        plan.regions
            .iter()
            .map(|r| r.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if let Some(n) = name {
        return plan.regions.iter().find(|r| r.name == n).with_context(|| {
            format!(
                "{} has no region or workload `{n}`; it has: {}",
                path.display(),
                names()
            )
        });
    }
    let first = plan
        .regions
        .first()
        .with_context(|| format!("{} has no [[region]] entries", path.display()))?;
    if plan.regions.iter().all(|r| r.setting == first.setting) {
        return Ok(first);
    }
    anyhow::bail!(
        "{} has {} workloads with different settings ({}); name the one to apply with --workload NAME (switching at region boundaries needs a plan with scope = \"job\")",
        path.display(),
        plan.regions.len(),
        names()
    )
}

/// The static setting of `plan` for `workload` (see [`select_region`]), sorted by
/// controller.
///
/// # Errors
/// As [`select_region`].
pub fn static_setting(
    plan: &crate::dvfs::plan_file::Plan,
    workload: Option<&str>,
    path: &Path,
) -> Result<StaticSetting> {
    use crate::dvfs::plan_file::DeviceKind;
    let region = select_region(plan, workload, path)?;
    let mut s = StaticSetting {
        region: region.name.clone(),
        knobs: region
            .setting
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect(),
        core_mhz: None,
        gpu_core_mhz: None,
        gpu_mem_mhz: None,
        gpu_power_limit_w: None,
        env: Vec::new(),
        notes: Vec::new(),
    };
    for (knob, v) in &region.setting {
        let dev = plan.device_of(knob);
        let gpu = dev.and_then(|d| d.index).unwrap_or(0);
        match (knob.as_str(), dev.map(|d| d.kind)) {
            ("threads", _) => s.env.push((
                "OMP_NUM_THREADS".to_string(),
                format!("{}", v.round() as u64),
            )),
            ("core_freq_mhz", Some(DeviceKind::Gpu)) => s.gpu_core_mhz = Some((gpu, *v)),
            ("mem_freq_mhz", Some(DeviceKind::Gpu)) => s.gpu_mem_mhz = Some((gpu, *v)),
            ("power_limit_w", Some(DeviceKind::Gpu)) => s.gpu_power_limit_w = Some((gpu, *v)),
            ("core_freq_mhz", _) => s.core_mhz = Some(*v),
            (k, _) => s
                .notes
                .push(format!("no controller for knob {k} = {v}: left unchanged")),
        }
    }
    Ok(s)
}

impl StaticSetting {
    /// The GPU part of the setting and its GPU (`None`: no GPU knob). The knobs of one
    /// region name one GPU; the SM clock's index wins where they differ.
    pub fn gpu_setting(&self) -> Option<(u32, crate::dvfs::gpu_control::session::GpuSetting)> {
        let idx = self
            .gpu_core_mhz
            .or(self.gpu_mem_mhz)
            .or(self.gpu_power_limit_w)?
            .0;
        Some((
            idx,
            crate::dvfs::gpu_control::session::GpuSetting {
                sm_clock_mhz: self.gpu_core_mhz.map(|x| x.1),
                mem_clock_mhz: self.gpu_mem_mhz.map(|x| x.1),
                power_limit_w: self.gpu_power_limit_w.map(|x| x.1),
            },
        ))
    }

    /// The powerperfd requests that put this setting in place in one session: the CPU core
    /// frequency on every CPU (`set_core_freq`), the GPU SM clock locked
    /// (`set_gpu_locked_clocks`), the GPU memory clock locked (`set_gpu_mem_locked_clocks`)
    /// and the GPU power limit (`set_gpu_power_limit`). The notes are empty today.
    pub fn daemon_requests(&self) -> (Vec<crate::daemon::Request>, Vec<String>) {
        use crate::daemon::Request;
        let mut reqs = Vec::new();
        let notes = Vec::new();
        if let Some(mhz) = self.core_mhz {
            reqs.push(Request::SetCoreFreq { mhz, cpus: None });
        }
        if let Some((gpu, mhz)) = self.gpu_core_mhz {
            reqs.push(Request::SetGpuLockedClocks {
                gpu,
                min_mhz: mhz,
                max_mhz: Some(mhz),
            });
        }
        if let Some((gpu, watts)) = self.gpu_power_limit_w {
            reqs.push(Request::SetGpuPowerLimit { gpu, watts });
        }
        if let Some((gpu, mhz)) = self.gpu_mem_mhz {
            reqs.push(Request::SetGpuMemLockedClocks {
                gpu,
                min_mhz: mhz,
                max_mhz: Some(mhz),
            });
        }
        (reqs, notes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::Request;
    use crate::dvfs::plan_file::Plan;

    const TWO: &str = r#"
[plan]
objective = "energy"
model = "m.json"
model_kind = "none"
created = "2026-01-01T00:00:00Z"
scope = "per_workload"
transition_latency_s = 0.0
transition_energy_j = 0.0
min_region_s = 0.0

[[device]]
kind = "cpu"
knobs = ["core_freq_mhz"]
default = { core_freq_mhz = 2400.0 }

[[region]]
name = "dgemm"
setting = { core_freq_mhz = 2000.0, threads = 4.0 }
time_s = 1.0
energy_j = 1.0
power_w = 1.0
reference_time_s = 1.0
reference_energy_j = 1.0
energy_saving = 0.0
slowdown = 0.0

[[region]]
name = "stream"
setting = { core_freq_mhz = 1200.0, uncore_freq_mhz = 1800.0 }
time_s = 1.0
energy_j = 1.0
power_w = 1.0
reference_time_s = 1.0
reference_energy_j = 1.0
energy_saving = 0.0
slowdown = 0.0
"#;

    #[test]
    fn a_workload_becomes_daemon_requests() {
        let plan = Plan::from_toml(TWO).unwrap();
        let p = Path::new("plan.toml");
        let s = static_setting(&plan, Some("dgemm"), p).unwrap();
        assert_eq!(s.region, "dgemm");
        assert_eq!(s.core_mhz, Some(2000.0));
        assert_eq!(s.env, vec![("OMP_NUM_THREADS".into(), "4".into())]);
        let (reqs, notes) = s.daemon_requests();
        assert_eq!(
            reqs,
            vec![Request::SetCoreFreq {
                mhz: 2000.0,
                cpus: None
            }]
        );
        assert!(notes.is_empty());
        let s = static_setting(&plan, Some("stream"), p).unwrap();
        assert_eq!(s.notes.len(), 1, "{:?}", s.notes);
        assert!(s.notes[0].contains("uncore_freq_mhz"));
    }

    #[test]
    fn a_plan_with_different_workloads_needs_a_name() {
        let plan = Plan::from_toml(TWO).unwrap();
        let e = static_setting(&plan, None, Path::new("plan.toml")).unwrap_err();
        assert!(e.to_string().contains("dgemm, stream"), "{e}");
        let e = static_setting(&plan, Some("nope"), Path::new("plan.toml")).unwrap_err();
        assert!(
            e.to_string().contains("no region or workload `nope`"),
            "{e}"
        );
    }
}
