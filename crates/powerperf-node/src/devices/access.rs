//! What powerperfd lets this user do, for `powerperf devices`' `daemon` answers (issue 43's
//! follow-up 44d): the daemon's `access` request gives the caller's own signals and controls
//! (`powerperf_node::daemon::CallerAccess`); a sensor is `daemon` only where they include its
//! signal (`power` for the sysfs devices, `energy` for RAPL), a control only where they
//! include its control (`gpu.power_limit`, `gpu.locked_clocks`). A refusal names the grant
//! key an administrator adds and the config file it goes in. A daemon older than `access`
//! keeps the old answer (`daemon`: it answers) with a note saying its grants were not
//! checked.

use super::Access;
use crate::daemon::CallerAccess;
use std::path::{Path, PathBuf};

/// How long `powerperf devices` waits for powerperfd's answers.
const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// What powerperfd said about this user.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum DaemonView {
    /// Not asked (powerperfd's own discovery, collect), or no daemon answers on the socket.
    Absent,
    /// It answers on `socket`, but `access` failed (a refusal, a timeout): `why`.
    Unanswered { socket: PathBuf, why: String },
    /// It answers on `socket` and is older than `access`: its grants cannot be asked.
    Old { socket: PathBuf },
    /// Its answer on `socket`.
    Granted {
        socket: PathBuf,
        access: CallerAccess,
    },
}

/// Ask the daemon (`$POWERPERF_DAEMON`, else the default socket) what this user may do.
pub(crate) fn probe() -> DaemonView {
    let Some(socket) = crate::daemon::client::socket_path(None) else {
        return DaemonView::Absent;
    };
    if std::os::unix::net::UnixStream::connect(&socket).is_err() {
        return DaemonView::Absent;
    }
    let asked = crate::daemon::client::Client::connect_with_timeout(&socket, TIMEOUT)
        .and_then(|mut c| c.access());
    match asked {
        Ok(Some(access)) => DaemonView::Granted { socket, access },
        Ok(None) => DaemonView::Old { socket },
        Err(e) => DaemonView::Unanswered {
            socket,
            why: format!("{e:#}"),
        },
    }
}

/// Where a grant is added: the daemon's config file, or where it would be.
fn config_of(a: &CallerAccess) -> String {
    match &a.config {
        Some(f) => format!("powerperfd's config {f}"),
        None => "a config file for powerperfd (it runs without --config; dist/powerperfd.service reads /etc/powerperf/powerperfd.toml)".into(),
    }
}

impl DaemonView {
    /// `readable` of a power or energy source this user cannot read himself (`err`: why,
    /// with the fix), which powerperfd reads under the signal `signal` (`power`: `read_power`;
    /// `energy`: `read_energy`).
    pub(crate) fn read(&self, signal: &str, err: &str) -> Access {
        match self {
            DaemonView::Absent => Access::No(err.to_string()),
            DaemonView::Old { .. } => Access::Daemon,
            DaemonView::Granted { access, .. } if access.may_read(signal) => Access::Daemon,
            DaemonView::Granted { socket, access } => Access::No(format!(
                "{err}; powerperfd ({}) does not let {} read `{signal}`: an administrator adds `read = [\"{signal}\"]` to a [[grant]] naming this user (or to [everyone]) in {} (docs/cluster.md)",
                socket.display(),
                access.identity,
                config_of(access)
            )),
            DaemonView::Unanswered { socket, why } => Access::No(format!(
                "{err}; powerperfd at {} answers but did not say what it grants: {why}",
                socket.display()
            )),
        }
    }

    /// `settable` of a control at `path` this user cannot write himself, which powerperfd
    /// sets under the control `control` (`gpu.power_limit`, `gpu.locked_clocks`).
    pub(crate) fn set(&self, control: &str, path: &Path) -> Access {
        match self {
            DaemonView::Absent => Access::No(format!(
                "{} is writable by root only: run as root, or start powerperfd and have it grant you `{control}`",
                path.display()
            )),
            DaemonView::Old { .. } => Access::Daemon,
            DaemonView::Granted { access, .. } if access.may_write(control) => Access::Daemon,
            DaemonView::Granted { socket, access } => Access::No(format!(
                "{} is writable by root only, and powerperfd ({}) does not let {} set `{control}`: an administrator adds `write = [\"{control}\"]` (and its range under [grant.ranges]) to a [[grant]] naming this user in {} (docs/cluster.md)",
                path.display(),
                socket.display(),
                access.identity,
                config_of(access)
            )),
            DaemonView::Unanswered { socket, why } => Access::No(format!(
                "{} is writable by root only, and powerperfd at {} answers but did not say what it grants: {why}",
                path.display(),
                socket.display()
            )),
        }
    }

    /// The note of the listing: what the daemon grants, or why it was not asked.
    pub(crate) fn note(&self) -> Option<String> {
        match self {
            DaemonView::Absent => None,
            DaemonView::Granted { socket, access } => Some(format!(
                "powerperfd at {} lets {} read {} and set {} ({}); `daemon` rows are within these grants",
                socket.display(),
                access.identity,
                if access.read.is_empty() {
                    "nothing".to_string()
                } else {
                    access.read.join(", ")
                },
                access.describe_writes(),
                access
                    .config
                    .as_deref()
                    .map(|f| format!("policy {f}"))
                    .unwrap_or_else(|| "no config file: the defaults".into())
            )),
            DaemonView::Old { socket } => Some(format!(
                "powerperfd at {} is older than its `access` request, so `daemon` means only that it answers: whether its policy grants this user a reading or a control was not checked (update powerperfd; a refused request names the grant it needs)",
                socket.display()
            )),
            DaemonView::Unanswered { socket, why } => Some(format!(
                "powerperfd at {} answers but did not say what it grants this user, so no row is `daemon`: {why}",
                socket.display()
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::WriteAccess;

    fn granted(read: &[&str], write: &[&str]) -> DaemonView {
        DaemonView::Granted {
            socket: "/run/powerperf/powerperfd.sock".into(),
            access: CallerAccess {
                identity: "uid 65534 (nobody)".into(),
                uid: 65534,
                unrestricted: false,
                read: read.iter().map(|s| s.to_string()).collect(),
                write: write
                    .iter()
                    .map(|c| WriteAccess {
                        control: c.to_string(),
                        grant: "g".into(),
                        range: None,
                        cpus: None,
                    })
                    .collect(),
                config: Some("/etc/powerperf/powerperfd.toml".into()),
            },
        }
    }

    #[test]
    fn daemon_only_within_the_grant() {
        let cap = Path::new("/sys/class/hwmon/hwmon2/power1_cap");
        let v = granted(&["energy", "power"], &["gpu.locked_clocks"]);
        assert_eq!(v.read("power", "e"), Access::Daemon);
        assert_eq!(v.set("gpu.locked_clocks", cap), Access::Daemon);
        let Access::No(why) = v.set("gpu.power_limit", cap) else {
            panic!("a control outside the grant is `no`")
        };
        assert!(
            why.contains("write = [\"gpu.power_limit\"]")
                && why.contains("/etc/powerperf/powerperfd.toml")
                && why.contains("uid 65534 (nobody)")
                && why.contains("power1_cap"),
            "{why}"
        );
        let none = granted(&["energy"], &[]);
        let Access::No(why) = none.read("power", "mode 0400") else {
            panic!("a sensor without `power` is `no`")
        };
        assert!(
            why.starts_with("mode 0400; ") && why.contains("read = [\"power\"]"),
            "{why}"
        );
        assert_eq!(none.read("energy", "e"), Access::Daemon);
        assert!(none.note().unwrap().contains("read energy and set nothing"));
        // without a config file the refusal says where one goes
        let DaemonView::Granted { socket, mut access } = none else {
            unreachable!()
        };
        access.config = None;
        let v = DaemonView::Granted { socket, access };
        let Access::No(why) = v.set("gpu.power_limit", cap) else {
            panic!()
        };
        assert!(why.contains("without --config"), "{why}");
    }

    #[test]
    fn an_old_daemon_keeps_daemon_with_a_note_and_a_silent_one_gives_no() {
        let cap = Path::new("/x/power1_cap");
        let old = DaemonView::Old {
            socket: "/s".into(),
        };
        assert_eq!(old.read("power", "e"), Access::Daemon);
        assert_eq!(old.set("gpu.power_limit", cap), Access::Daemon);
        assert!(old.note().unwrap().contains("was not checked"));
        let quiet = DaemonView::Unanswered {
            socket: "/s".into(),
            why: "no answer within 5 s".into(),
        };
        assert!(matches!(quiet.read("power", "e"), Access::No(w) if w.contains("no answer")));
        assert!(matches!(quiet.set("gpu.power_limit", cap), Access::No(_)));
        assert_eq!(DaemonView::Absent.note(), None);
        assert!(
            matches!(DaemonView::Absent.set("gpu.power_limit", cap), Access::No(w) if w.contains("start powerperfd"))
        );
    }
}
