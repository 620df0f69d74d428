//! The config file (TOML) and its access policy: which users and groups may read which
//! signals and set which controls within which ranges. Default: everyone may read energy,
//! nobody may write (root, uid 0, may do what the hardware allows).
//!
//! ```toml
//! [[grant]]
//! users = ["alice"]            # and/or groups = ["hpc"]
//! read = ["energy", "power"]
//! write = ["cpu.core_freq"]
//! [grant.ranges]
//! "cpu.core_freq" = [1200, 2400]   # MHz, inclusive
//! ```

use crate::users::{gid_of, Identity};
use anyhow::{Context, Result};
use powerperf_node::daemon::{CallerAccess, WriteAccess};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The signals a grant may let users read.
pub const READ_SIGNALS: [&str; 2] = ["energy", "power"];
/// The controls a grant may let users set.
pub const WRITE_CONTROLS: [&str; 6] = [
    "cpu.core_freq",
    "cpu.governor",
    "cpu.uncore_freq",
    "gpu.locked_clocks",
    "gpu.mem_locked_clocks",
    "gpu.power_limit",
];
/// The unit of each control's range.
pub fn range_unit(control: &str) -> &'static str {
    match control {
        "gpu.power_limit" => "W",
        _ => "MHz",
    }
}
/// The largest config file read.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Limits on what a client may send and hold.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// The longest request line, bytes (at most the protocol's 65536).
    pub max_request_bytes: usize,
    /// Connections open at once, all users.
    pub max_connections: usize,
    /// Connections open at once per uid.
    pub max_connections_per_uid: usize,
    /// Requests per second per connection (a token bucket of this size); more are refused.
    pub requests_per_second: u32,
    /// Seconds a started request line may take to arrive.
    pub request_timeout_s: f64,
    /// Seconds a connection that holds no setting may stay silent.
    pub idle_timeout_s: f64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_request_bytes: powerperf_node::daemon::MAX_LINE,
            max_connections: 256,
            max_connections_per_uid: 32,
            requests_per_second: 1000,
            request_timeout_s: 10.0,
            idle_timeout_s: 600.0,
        }
    }
}

/// What every user may do.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Everyone {
    /// Signals every user may read (default: `["energy"]`).
    #[serde(default = "default_read")]
    pub read: Vec<String>,
}

fn default_read() -> Vec<String> {
    vec!["energy".into()]
}

impl Default for Everyone {
    fn default() -> Self {
        Everyone {
            read: default_read(),
        }
    }
}

/// One `[[grant]]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grant {
    /// A name for messages and logs (default: `#N`, its place in the file).
    #[serde(default)]
    pub name: Option<String>,
    /// User names or numeric uids.
    #[serde(default)]
    pub users: Vec<String>,
    /// Group names or numeric gids (primary or supplementary, from the user database).
    #[serde(default)]
    pub groups: Vec<String>,
    #[serde(default)]
    pub read: Vec<String>,
    #[serde(default)]
    pub write: Vec<String>,
    /// Inclusive `[min, max]` per control (MHz; W for `gpu.power_limit`). A control without
    /// a range may be set to anything the hardware allows.
    #[serde(default)]
    pub ranges: BTreeMap<String, [f64; 2]>,
    /// The CPUs this grant's CPU controls may touch (default: all).
    #[serde(default)]
    pub cpus: Option<Vec<u32>>,
}

/// The config file.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The socket (the `--socket` flag takes precedence).
    #[serde(default)]
    pub socket: Option<PathBuf>,
    /// The state directory (the `--state-dir` flag takes precedence).
    #[serde(default)]
    pub state_dir: Option<PathBuf>,
    /// The sysfs root (the `--sysfs-root` flag takes precedence).
    #[serde(default)]
    pub sysfs_root: Option<PathBuf>,
    /// Serve Prometheus metrics on this IP:PORT (the `--metrics-listen` flag takes
    /// precedence); off when absent.
    #[serde(default)]
    pub metrics_listen: Option<std::net::SocketAddr>,
    #[serde(default)]
    pub everyone: Everyone,
    #[serde(default)]
    pub limits: Limits,
    #[serde(default, rename = "grant")]
    pub grants: Vec<Grant>,
    /// The file it was read from ([`Config::read`]); `None`: parsed from text, or the
    /// defaults (no `--config`). Named in `access` answers: where a grant is added.
    #[serde(skip)]
    pub file: Option<PathBuf>,
}

impl Grant {
    /// `grant `hpc-freq`` or `grant #2 (users alice; groups hpc)`.
    pub fn label(&self, index: usize) -> String {
        let who = {
            let mut w = Vec::new();
            if !self.users.is_empty() {
                w.push(format!("users {}", self.users.join(", ")));
            }
            if !self.groups.is_empty() {
                w.push(format!("groups {}", self.groups.join(", ")));
            }
            w.join("; ")
        };
        match &self.name {
            Some(n) => format!("grant `{n}` ({who})"),
            None => format!("grant #{} ({who})", index + 1),
        }
    }

    /// Whether the grant names this identity (by user name or uid, or one of its groups).
    pub fn applies_to(&self, who: &Identity) -> bool {
        let user = self.users.iter().any(|u| {
            u.parse::<u32>().ok() == Some(who.uid) || who.name.as_deref() == Some(u.as_str())
        });
        user || self
            .groups
            .iter()
            .any(|g| gid_of(g).is_some_and(|gid| who.gids.contains(&gid)))
    }

    /// Whether the grant allows `control` at `value` on `cpus` (whoever it names).
    fn allows(&self, control: &str, value: Option<f64>, cpus: &[u32]) -> bool {
        if !self.write.iter().any(|w| w == control) {
            return false;
        }
        if let (Some(v), Some([lo, hi])) = (value, self.ranges.get(control)) {
            if !(v >= *lo && v <= *hi) {
                return false;
            }
        }
        if let Some(allowed) = &self.cpus {
            if control.starts_with("cpu.") && !cpus.iter().all(|c| allowed.contains(c)) {
                return false;
            }
        }
        true
    }
}

impl Config {
    /// Parse and check a config text (`what` names it in errors).
    ///
    /// # Errors
    /// TOML errors, unknown keys, unknown signals or controls, a grant naming nobody, a
    /// range that is not `[min, max]` of finite numbers with min ≤ max, or limits out of
    /// bounds; each names the grant and the fix.
    pub fn parse(text: &str, what: &str) -> Result<Self> {
        let c: Config = toml::from_str(text)
            .with_context(|| format!("{what} is not a valid powerperfd config"))?;
        c.check(what)?;
        Ok(c)
    }

    /// Read, parse and check the config file at `path` (at most [`MAX_CONFIG_BYTES`]).
    ///
    /// # Errors
    /// As [`parse`](Self::parse), and read errors naming the file.
    pub fn read(path: &Path) -> Result<Self> {
        use std::io::Read as _;
        let f = std::fs::File::open(path)
            .with_context(|| format!("cannot open the config {}", path.display()))?;
        let mut text = String::new();
        f.take(MAX_CONFIG_BYTES + 1)
            .read_to_string(&mut text)
            .with_context(|| format!("cannot read the config {}", path.display()))?;
        if text.len() as u64 > MAX_CONFIG_BYTES {
            anyhow::bail!(
                "the config {} is larger than {MAX_CONFIG_BYTES} bytes",
                path.display()
            );
        }
        let mut c = Self::parse(&text, &path.display().to_string())?;
        c.file = Some(path.to_path_buf());
        Ok(c)
    }

    fn check(&self, what: &str) -> Result<()> {
        for s in &self.everyone.read {
            if !READ_SIGNALS.contains(&s.as_str()) {
                anyhow::bail!(
                    "{what}: [everyone] read names `{s}`, which is not a signal (the signals are {})",
                    READ_SIGNALS.join(", ")
                );
            }
        }
        let l = &self.limits;
        if l.max_request_bytes < 256 || l.max_request_bytes > powerperf_node::daemon::MAX_LINE {
            anyhow::bail!(
                "{what}: [limits] max_request_bytes = {} is outside 256..={}",
                l.max_request_bytes,
                powerperf_node::daemon::MAX_LINE
            );
        }
        if l.max_connections == 0 || l.max_connections_per_uid == 0 || l.requests_per_second == 0 {
            anyhow::bail!("{what}: [limits] max_connections, max_connections_per_uid and requests_per_second must be at least 1");
        }
        for (k, v) in [
            ("request_timeout_s", l.request_timeout_s),
            ("idle_timeout_s", l.idle_timeout_s),
        ] {
            if !(v.is_finite() && v > 0.0 && v <= 1e7) {
                anyhow::bail!("{what}: [limits] {k} = {v} is not a number of seconds in (0, 1e7]");
            }
        }
        for (i, g) in self.grants.iter().enumerate() {
            let label = g.label(i);
            if g.users.is_empty() && g.groups.is_empty() {
                anyhow::bail!(
                    "{what}: grant #{} names nobody: give it users = [\"NAME\"] and/or groups = [\"GROUP\"]",
                    i + 1
                );
            }
            for n in g.users.iter().chain(&g.groups) {
                if n.is_empty()
                    || n.len() > 256
                    || n.chars().any(|c| c.is_whitespace() || c.is_control())
                {
                    anyhow::bail!(
                        "{what}: {label} has the name `{n}`, which is no user or group name"
                    );
                }
            }
            for s in &g.read {
                if !READ_SIGNALS.contains(&s.as_str()) {
                    anyhow::bail!(
                        "{what}: {label} reads `{s}`, which is not a signal (the signals are {})",
                        READ_SIGNALS.join(", ")
                    );
                }
            }
            for w in &g.write {
                if !WRITE_CONTROLS.contains(&w.as_str()) {
                    anyhow::bail!(
                        "{what}: {label} writes `{w}`, which is not a control (the controls are {})",
                        WRITE_CONTROLS.join(", ")
                    );
                }
            }
            for (k, [lo, hi]) in &g.ranges {
                if !g.write.contains(k) {
                    anyhow::bail!(
                        "{what}: {label} has a range for `{k}` but does not write it: add \"{k}\" to its write list or remove the range"
                    );
                }
                if !(lo.is_finite() && hi.is_finite() && *lo >= 0.0 && lo <= hi && *hi <= 1e6) {
                    anyhow::bail!(
                        "{what}: {label}: the range of `{k}` = [{lo}, {hi}] is not [min, max] with 0 <= min <= max <= 1e6 ({})",
                        range_unit(k)
                    );
                }
            }
        }
        Ok(())
    }

    /// What `who` may read and set (the `access` request): the signals of `[everyone]` and
    /// of the grants naming `who`, and each control of those grants with its range and CPUs.
    /// Grants that do not name `who` are left out (issue 38: other users' business). uid 0 is
    /// unrestricted, as in [`may_read`](Self::may_read) and [`may_write`](Self::may_write).
    pub fn access_of(&self, who: &Identity) -> CallerAccess {
        let unrestricted = who.uid == 0;
        let mine: Vec<(usize, &Grant)> = self
            .grants
            .iter()
            .enumerate()
            .filter(|(_, g)| !unrestricted && g.applies_to(who))
            .collect();
        let read = READ_SIGNALS
            .iter()
            .filter(|s| unrestricted || self.may_read(who, s).is_ok())
            .map(|s| s.to_string())
            .collect();
        let write = mine
            .iter()
            .flat_map(|(i, g)| {
                let grant = g.name.clone().unwrap_or_else(|| format!("#{}", i + 1));
                g.write.iter().map(move |c| WriteAccess {
                    control: c.clone(),
                    grant: grant.clone(),
                    range: g.ranges.get(c).copied(),
                    cpus: g
                        .cpus
                        .clone()
                        .filter(|_| c.starts_with("cpu.") && c != "cpu.uncore_freq"),
                })
            })
            .collect();
        CallerAccess {
            identity: who.describe(),
            uid: who.uid,
            unrestricted,
            read,
            write,
            config: self.file.as_ref().map(|p| p.display().to_string()),
        }
    }

    /// Whether `who` may read `signal`.
    ///
    /// # Errors
    /// The refusal, naming the grant that would allow it or the fix.
    pub fn may_read(&self, who: &Identity, signal: &str) -> Result<(), String> {
        if who.uid == 0 || self.everyone.read.iter().any(|s| s == signal) {
            return Ok(());
        }
        if self
            .grants
            .iter()
            .any(|g| g.applies_to(who) && g.read.iter().any(|s| s == signal))
        {
            return Ok(());
        }
        // only grants that name the caller are named: the others are other users' business
        // (issue 38)
        let other = format!("; no grant of this user allows it: an administrator adds `read = [\"{signal}\"]` to a [[grant]] naming this user (docs/cluster.md)");
        Err(format!("{} may not read `{signal}`{other}", who.describe()))
    }

    /// Whether `who` may set `control` to `value` on `cpus`.
    ///
    /// # Errors
    /// The refusal, naming the grant that would allow it (or the ranges this user has).
    pub fn may_write(
        &self,
        who: &Identity,
        control: &str,
        value: Option<f64>,
        cpus: &[u32],
    ) -> Result<(), String> {
        if who.uid == 0 {
            return Ok(());
        }
        let mine: Vec<(usize, &Grant)> = self
            .grants
            .iter()
            .enumerate()
            .filter(|(_, g)| g.applies_to(who))
            .collect();
        if mine.iter().any(|(_, g)| g.allows(control, value, cpus)) {
            return Ok(());
        }
        let unit = range_unit(control);
        let asked = match value {
            Some(v) => format!("`{control}` = {v} {unit}"),
            None => format!("`{control}`"),
        };
        // the per-CPU controls only: an uncore domain is not a CPU (issue 38)
        let asked = if control.starts_with("cpu.") && control != "cpu.uncore_freq" {
            format!("{asked} on CPUs {cpus:?}")
        } else {
            asked
        };
        let own: Vec<String> = mine
            .iter()
            .filter(|(_, g)| g.write.iter().any(|w| w == control))
            .map(|(i, g)| {
                let range = g
                    .ranges
                    .get(control)
                    .map(|[lo, hi]| format!("[{lo}, {hi}] {unit}"))
                    .unwrap_or_else(|| "any value".into());
                let cpus = g
                    .cpus
                    .as_ref()
                    .map(|c| format!(" on CPUs {c:?}"))
                    .unwrap_or_default();
                format!("{} allows {range}{cpus}", g.label(*i))
            })
            .collect();
        // only the grants that name the caller are named (issue 38)
        let mut msg = format!("{} may not set {asked}", who.describe());
        if !own.is_empty() {
            msg.push_str(&format!(": {}", own.join("; ")));
        }
        msg.push_str(&format!(
            "; no grant of this user allows it: an administrator adds a [[grant]] naming this user with write = [\"{control}\"] and a range that includes it to the config (docs/cluster.md)"
        ));
        Err(msg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn who(uid: u32, name: &str, gids: &[u32]) -> Identity {
        Identity {
            uid,
            name: Some(name.into()),
            gids: gids.to_vec(),
        }
    }

    const ISSUE_FORM: &str = r#"
[[grant]]
users = ["alice"]            # and/or groups = ["hpc"]
read = ["energy", "power"]
write = ["cpu.core_freq"]    # also e.g. "cpu.governor", "gpu.locked_clocks", "gpu.power_limit"
[grant.ranges]
"cpu.core_freq" = [1200, 2400]   # MHz, inclusive

[[grant]]
name = "wide"
groups = ["4242"]
write = ["cpu.core_freq"]
"#;

    #[test]
    fn the_issue_form_parses_and_defaults_hold() {
        let c = Config::parse(ISSUE_FORM, "test").unwrap();
        assert_eq!(c.grants[0].ranges["cpu.core_freq"], [1200.0, 2400.0]);
        let alice = who(1000, "alice", &[1000]);
        let bob = who(1001, "bob", &[1001]);
        let hpc = who(1002, "carol", &[1002, 4242]);
        // everyone reads energy; power only with a grant
        assert!(c.may_read(&bob, "energy").is_ok());
        assert!(c.may_read(&alice, "power").is_ok());
        let e = c.may_read(&bob, "power").unwrap_err();
        // alice's grant is not named to bob (issue 38)
        assert!(
            e.contains("uid 1001 (bob)")
                && !e.contains("grant #1")
                && e.contains("no grant of this user allows it"),
            "{e}"
        );
        // writes: inside the range, outside, nobody else, root
        assert!(c
            .may_write(&alice, "cpu.core_freq", Some(1600.0), &[0])
            .is_ok());
        assert!(c
            .may_write(&alice, "cpu.core_freq", Some(2400.0), &[0])
            .is_ok());
        let e = c
            .may_write(&alice, "cpu.core_freq", Some(3000.0), &[0])
            .unwrap_err();
        // her own grant's range is named; `wide` (group 4242, not hers) is not
        assert!(
            e.contains("[1200, 2400] MHz") && !e.contains("grant `wide`"),
            "{e}"
        );
        let e = c
            .may_write(&bob, "cpu.core_freq", Some(1600.0), &[0])
            .unwrap_err();
        // bob is in no grant: alice's is not named to him (issue 38)
        assert!(
            !e.contains("alice") && e.contains("no grant of this user allows it"),
            "{e}"
        );
        let e = c.may_write(&alice, "cpu.governor", None, &[0]).unwrap_err();
        assert!(e.contains("no grant of this user allows it"), "{e}");
        // an uncore refusal names no CPUs
        let e = c
            .may_write(&bob, "cpu.uncore_freq", Some(1800.0), &[])
            .unwrap_err();
        assert!(!e.contains("CPUs"), "{e}");
        assert!(c
            .may_write(&hpc, "cpu.core_freq", Some(5000.0), &[0])
            .is_ok());
        assert!(c
            .may_write(&who(0, "root", &[0]), "gpu.power_limit", Some(1.0), &[])
            .is_ok());
        // the default config: energy for all, no writes
        let d = Config::parse("", "empty").unwrap();
        assert!(d.may_read(&bob, "energy").is_ok());
        assert!(d
            .may_write(&bob, "cpu.core_freq", Some(1600.0), &[0])
            .is_err());
    }

    #[test]
    fn access_is_the_callers_own_grants_only() {
        let c = Config::parse(ISSUE_FORM, "test").unwrap();
        let alice = c.access_of(&who(1000, "alice", &[1000]));
        assert_eq!(alice.read, ["energy", "power"]);
        assert!(!alice.unrestricted);
        assert_eq!(
            alice.write,
            [WriteAccess {
                control: "cpu.core_freq".into(),
                grant: "#1".into(),
                range: Some([1200.0, 2400.0]),
                cpus: None
            }]
        );
        assert!(alice.may_write("cpu.core_freq") && !alice.may_write("gpu.power_limit"));
        // bob: [everyone]'s energy, no grant; alice's and `wide` are not named to him
        let bob = c.access_of(&who(1001, "bob", &[1001]));
        assert_eq!(
            (bob.read.as_slice(), bob.write.len()),
            (&["energy".to_string()][..], 0)
        );
        assert_eq!(bob.describe_writes(), "nothing");
        let carol = c.access_of(&who(1002, "carol", &[1002, 4242]));
        assert_eq!(carol.write.len(), 1);
        assert_eq!(
            (carol.write[0].grant.as_str(), carol.write[0].range),
            ("wide", None)
        );
        let root = c.access_of(&who(0, "root", &[0]));
        assert!(root.unrestricted && root.write.is_empty() && root.may_write("gpu.power_limit"));
        assert_eq!(root.read, READ_SIGNALS);
        // parsed from text: no file to name
        assert_eq!(alice.config, None);
        let mut f = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut f, ISSUE_FORM.as_bytes()).unwrap();
        let read = Config::read(f.path()).unwrap();
        let a = read.access_of(&who(1000, "alice", &[1000]));
        assert_eq!(a.config.as_deref(), Some(f.path().to_str().unwrap()));
    }

    #[test]
    fn bad_configs_are_refused_naming_the_grant() {
        for (text, named) in [
            ("[[grant]]\nwrite = [\"cpu.core_freq\"]\n", "names nobody"),
            ("[[grant]]\nusers = [\"a\"]\nwrite = [\"cpu.rm_rf\"]\n", "not a control"),
            ("[[grant]]\nusers = [\"a\"]\nread = [\"secrets\"]\n", "not a signal"),
            ("[[grant]]\nusers = [\"a\"]\nwrite = [\"cpu.core_freq\"]\n[grant.ranges]\n\"cpu.core_freq\" = [2400, 1200]\n", "[2400, 1200]"),
            ("[[grant]]\nusers = [\"a\"]\n[grant.ranges]\n\"cpu.core_freq\" = [1, 2]\n", "does not write it"),
            ("[[grant]]\nusers = [\"a b\"]\n", "no user or group name"),
            ("[[grant]]\nusers = [\"a\"]\nwrtie = []\n", "unknown field"),
            ("[limits]\nmax_request_bytes = 100000000\n", "max_request_bytes"),
            ("[limits]\nidle_timeout_s = nan\n", "idle_timeout_s"),
        ] {
            let e = format!("{:#}", Config::parse(text, "cfg").unwrap_err());
            assert!(e.contains(named), "{text}: {e}");
        }
    }

    #[test]
    fn metrics_listen_is_an_ip_and_a_port() {
        assert_eq!(Config::parse("", "cfg").unwrap().metrics_listen, None);
        let c = Config::parse("metrics_listen = \"127.0.0.1:9712\"\n", "cfg").unwrap();
        assert_eq!(c.metrics_listen, Some("127.0.0.1:9712".parse().unwrap()));
        // the shipped config's commented example, uncommented
        let shipped = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../dist/powerperfd.toml"),
        )
        .unwrap();
        let line = shipped
            .lines()
            .find_map(|l| l.strip_prefix("# metrics_listen = "))
            .expect("dist/powerperfd.toml documents metrics_listen");
        let c = Config::parse(&format!("metrics_listen = {line}\n"), "cfg").unwrap();
        assert!(c.metrics_listen.unwrap().ip().is_loopback());
        for bad in ["\"localhost:9712\"", "\"127.0.0.1\"", "9712"] {
            assert!(
                Config::parse(&format!("metrics_listen = {bad}\n"), "cfg").is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn the_shipped_config_parses() {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../dist/powerperfd.toml");
        let c = Config::read(&p).unwrap();
        assert!(c.grants.is_empty(), "the default config grants no writes");
        assert_eq!(c.everyone.read, ["energy"]);
    }
}
