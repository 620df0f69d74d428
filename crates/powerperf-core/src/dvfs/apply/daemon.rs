//! `powerperf apply` through powerperfd (docs/cluster.md): a static CPU core frequency set
//! in a daemon session while the command runs, and the daemon named as a fix when a user
//! cannot write cpufreq. The connection and protocol are [`crate::daemon`].

use crate::daemon::client::{for_apply, is_root, Client};
use crate::daemon::{DEFAULT_SOCKET, ENV_DAEMON};
use anyhow::{Context, Result};
use std::path::Path;

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
    if command.is_empty() {
        anyhow::bail!(
            "no command given: write it after `--`, e.g. `powerperf apply --plan PLAN -- ./app`"
        );
    }
    let mut c = Client::connect(socket)?;
    let what = format!(
        "powerperfd at {} (session {})",
        socket.display(),
        c.session
            .map(|s| s.to_string())
            .unwrap_or_else(|| "?".into())
    );
    let r = c
        .set_core_freq(mhz, None)
        .context("the plan's setting was not applied; the command did not run")?;
    eprintln!("powerperf: core frequency {mhz} MHz set through {what}:");
    for w in &r.writes {
        eprintln!("  {w}");
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
    let what = format!(
        "powerperfd at {} (session {})",
        socket.display(),
        client
            .session
            .map(|s| s.to_string())
            .unwrap_or_else(|| "?".into())
    );
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
