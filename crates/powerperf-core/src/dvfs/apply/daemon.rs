//! `powerperf apply` through powerperfd (docs/cluster.md): a static CPU core frequency set
//! in a daemon session while the command runs, and the daemon named as a fix when a user
//! cannot write cpufreq. The connection and protocol are [`powerperf_node::daemon`].

use anyhow::{Context, Result};
use powerperf_node::daemon::client::{for_apply, is_root, Client};
use powerperf_node::daemon::{DEFAULT_SOCKET, ENV_DAEMON};
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
            c.downcast_ref::<powerperf_node::controller::ControllerError>(),
            Some(powerperf_node::controller::ControllerError::NoPermission { .. })
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
    let req = powerperf_node::daemon::Request::SetCoreFreq { mhz, cpus: None };
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
    reqs: &[powerperf_node::daemon::Request],
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
fn describe_request(req: &powerperf_node::daemon::Request) -> String {
    use powerperf_node::daemon::Request;
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
