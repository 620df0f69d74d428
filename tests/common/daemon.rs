//! The world of the powerperfd tests (tests/daemon.rs, tests/daemon_controls.rs): the
//! daemon as root on a copy of the fixture trees (cpufreq-userspace, rapl-wrap with
//! `energy_uj` root-only, intel-uncore) and the fake GPUs of `tests/fixtures/fake-gpu`,
//! with a private socket and state directory; clients through setpriv.

use super::{copy_tree, shared_tempdir};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A second unprivileged uid (no passwd entry needed: setpriv takes numbers).
pub const OTHER: u32 = 65533;

pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/sysfs")
        .join(name)
}

/// `powerperfd`, the binary of the powerperfd package (crates/powerperfd/src/main.rs):
/// `target/<profile>/powerperfd`, next to `powerperf`. `cargo test --workspace` builds it (for
/// crates/powerperfd's own tests); where it is missing or older than its sources (a
/// `cargo test --test daemon` alone), it is built here with `cargo build -p powerperfd` in the
/// same profile and target directory (cargo's lock serializes test binaries doing the same).
pub fn powerperfd_src() -> PathBuf {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        let powerperf = PathBuf::from(env!("CARGO_BIN_EXE_powerperf"));
        let profile_dir = powerperf.parent().expect("target/<profile>");
        let bin = profile_dir.join("powerperfd");
        let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let built = std::fs::metadata(&bin).and_then(|m| m.modified()).ok();
        let newest = ["crates/powerperfd", "crates/powerperf-node", "rt/src"]
            .iter()
            .filter_map(|d| newest_mtime(&repo.join(d)))
            .max();
        if built.is_none() || newest.is_some_and(|n| Some(n) > built) {
            let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
                Some("debug") | None => "dev".to_string(),
                Some(p) => p.to_string(),
            };
            let target_dir = profile_dir.parent().expect("the target directory");
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            let status = Command::new(cargo)
                .args([
                    "build",
                    "--quiet",
                    "-p",
                    "powerperfd",
                    "--profile",
                    &profile,
                ])
                .arg("--manifest-path")
                .arg(repo.join("Cargo.toml"))
                .arg("--target-dir")
                .arg(target_dir)
                .status()
                .expect("cargo runs");
            assert!(
                status.success(),
                "cargo build -p powerperfd --profile {profile} failed"
            );
        }
        assert!(bin.is_file(), "{} was not built", bin.display());
        bin
    })
    .clone()
}

/// The newest modification time of the files under `dir` (sources and manifests).
fn newest_mtime(dir: &std::path::Path) -> Option<std::time::SystemTime> {
    let mut newest = None;
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let p = e.path();
        let t = if p.is_dir() {
            newest_mtime(&p)
        } else {
            e.metadata().and_then(|m| m.modified()).ok()
        };
        newest = newest.max(t);
    }
    newest
}

pub fn as_uid(uid: u32, prog: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new("setpriv");
    c.arg(format!("--reuid={uid}"))
        .arg(format!("--regid={uid}"))
        .arg("--clear-groups")
        .arg(prog)
        .current_dir("/")
        .env_remove(powerperf_node::daemon::ENV_DAEMON);
    c
}

/// One test's world: a 0755 directory under /tmp holding the binaries, the sysfs tree,
/// the config, the socket and the state directory.
pub struct World {
    pub dir: tempfile::TempDir,
    pub bin: PathBuf,
    pub daemon_bin: PathBuf,
    pub root: PathBuf,
    pub socket: PathBuf,
    pub state: PathBuf,
    pub config: PathBuf,
    pub log: PathBuf,
    pub daemon: Option<Child>,
    /// More arguments for the daemon (e.g. `--metrics-listen 127.0.0.1:0`).
    pub daemon_args: Vec<String>,
}

pub const CPUFREQ: &str = "sys/devices/system/cpu";

impl World {
    pub fn new(test: &str, config: &str) -> Option<Self> {
        if !super::root_with_setpriv(test) {
            return None;
        }
        let dir = shared_tempdir();
        let bin = super::world_readable_bin(dir.path());
        let daemon_bin = dir.path().join("powerperfd");
        if std::fs::hard_link(powerperfd_src(), &daemon_bin).is_err() {
            std::fs::copy(powerperfd_src(), &daemon_bin).unwrap();
        }
        let root = dir.path().join("sysfs");
        copy_tree(&fixture("cpufreq-userspace"), &root);
        copy_tree(&fixture("rapl-wrap"), &root);
        copy_tree(&fixture("intel-uncore"), &root);
        let gpu = dir.path().join("gpu");
        copy_tree(
            &PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fake-gpu"),
            &gpu,
        );
        // energy_uj is root-only, as on Linux >= 5.10
        for z in std::fs::read_dir(root.join("sys/class/powercap")).unwrap() {
            let f = z.unwrap().path().join("energy_uj");
            if f.exists() {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o400)).unwrap();
            }
        }
        let config_path = dir.path().join("powerperfd.toml");
        std::fs::write(&config_path, config).unwrap();
        let w = World {
            socket: dir.path().join("run/powerperfd.sock"),
            state: dir.path().join("state"),
            log: dir.path().join("powerperfd.log"),
            config: config_path,
            bin,
            daemon_bin,
            root,
            dir,
            daemon: None,
            daemon_args: Vec::new(),
        };
        Some(w)
    }

    /// Start the daemon and wait until its socket accepts.
    pub fn start(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let child = Command::new(&self.daemon_bin)
            .arg("--config")
            .arg(&self.config)
            .arg("--socket")
            .arg(&self.socket)
            .arg("--state-dir")
            .arg(&self.state)
            .arg("--sysfs-root")
            .arg(&self.root)
            .arg("--fake-gpu")
            .arg(self.dir.path().join("gpu"))
            .args(&self.daemon_args)
            .env("RUST_LOG", "powerperfd=debug")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.daemon = Some(child);
        let t = Instant::now();
        while std::os::unix::net::UnixStream::connect(&self.socket).is_err() {
            if let Some(st) = self.daemon.as_mut().unwrap().try_wait().unwrap() {
                panic!("powerperfd exited ({st}): {}", self.log_text());
            }
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "powerperfd did not start: {}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    pub fn kill_daemon(&mut self) {
        if let Some(mut c) = self.daemon.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn file(&self, cpu: u32, name: &str) -> PathBuf {
        self.root.join(format!("{CPUFREQ}/cpu{cpu}/cpufreq/{name}"))
    }

    pub fn read(&self, cpu: u32, name: &str) -> String {
        std::fs::read_to_string(self.file(cpu, name))
            .unwrap()
            .trim()
            .to_string()
    }

    /// Both CPUs as the fixture has them.
    pub fn assert_original(&self) {
        for cpu in [0, 1] {
            assert_eq!(self.read(cpu, "scaling_governor"), "schedutil", "cpu{cpu}");
        }
    }

    pub fn plan(&self, mhz: f64) -> PathBuf {
        let text = std::fs::read_to_string(
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/plans/cpu-static.toml"),
        )
        .unwrap()
        .replace(
            "core_freq_mhz = 1600.0",
            &format!("core_freq_mhz = {mhz:.1}"),
        );
        let p = self.dir.path().join(format!("plan-{mhz}.toml"));
        std::fs::write(&p, text).unwrap();
        p
    }

    /// `powerperf apply` of `mhz` through the daemon as `uid`, running `cmd`.
    pub fn apply(&self, uid: u32, mhz: f64, cmd: &[&str]) -> Command {
        let mut c = as_uid(uid, &self.bin);
        c.arg("apply")
            .arg("--daemon")
            .arg(&self.socket)
            .arg("--plan")
            .arg(self.plan(mhz))
            .arg("--")
            .args(cmd);
        c
    }

    /// `powerperfd request` as `uid`.
    pub fn request(&self, uid: u32, lines: &[&str]) -> std::process::Output {
        let mut c = if uid == 0 {
            Command::new(&self.daemon_bin)
        } else {
            as_uid(uid, &self.daemon_bin)
        };
        c.arg("request")
            .arg("--socket")
            .arg(&self.socket)
            .args(lines);
        c.output().unwrap()
    }

    /// Wait until `cond` holds (at most 20 s); returns how long it took.
    pub fn wait_for(&self, what: &str, mut cond: impl FnMut() -> bool) -> Duration {
        let t = Instant::now();
        while !cond() {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "timed out waiting for {what}; daemon log:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_micros(200));
        }
        t.elapsed()
    }
}

impl Drop for World {
    fn drop(&mut self) {
        self.kill_daemon();
    }
}

/// Kill a client started in its own process group, with everything it started.
pub fn kill_group(c: &mut Child) {
    // SAFETY: kill(2) on a process group this test created.
    unsafe { libc::kill(-(c.id() as i32), libc::SIGKILL) };
    let _ = c.wait();
}
