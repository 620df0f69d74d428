//! The apply runtime: set a static setting through a [`FrequencyController`], run a
//! command, and restore every changed setting on every exit path.
//!
//! Order of work (each step before the command starts can fail without changing anything):
//! 1. SIGINT, SIGTERM, SIGHUP and SIGQUIT are caught (signal-hook) and forwarded to the
//!    command once it runs; powerperf then restores and exits with the command's status.
//! 2. The target is checked against the controller's range; every file to be written is
//!    opened for writing (privilege check).
//! 3. A restore record (TOML: the root and the original value of every file) is written
//!    atomically. `powerperf apply --restore` replays a record left behind when powerperf
//!    itself was killed (SIGKILL, a node failure); a Slurm epilog can run it.
//! 4. The setting is written; each switch is logged with its CLOCK_MONOTONIC time (ns).
//! 5. The command runs; when it ends (exit, crash, signal), the snapshot is restored and
//!    the record removed. A guard restores on early returns and panics too.
//!
//! Exit status: the command's exit code, or 128 + the signal number when it was killed.

use super::controller::{FrequencyController, Snapshot, Write};
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

/// The restore record written before anything is changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RestoreRecord {
    /// The powerperf process that wrote it.
    pub pid: u32,
    pub created_unix_ns: u64,
    /// The sysfs root the paths are relative to.
    pub sysfs_root: PathBuf,
    /// The controller description.
    pub controller: String,
    pub command: Vec<String>,
    #[serde(flatten)]
    pub snapshot: Snapshot,
}

impl RestoreRecord {
    /// Read a record.
    ///
    /// # Errors
    /// Unreadable file or TOML that is not a record (the message names the path).
    pub fn read(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the restore record {}", path.display()))?;
        toml::from_str(&text)
            .with_context(|| format!("{} is not a powerperf restore record", path.display()))
    }

    /// Write a record atomically (temporary file + rename).
    ///
    /// # Errors
    /// I/O errors with the path.
    pub fn write(&self, path: &Path) -> Result<()> {
        let text = format!(
            "# powerperf restore record: original settings to put back. Replay with `powerperf apply --restore --restore-file {}`\n{}",
            path.display(),
            toml::to_string_pretty(self).context("serialising the restore record")?
        );
        let tmp = path.with_extension("toml.tmp");
        std::fs::write(&tmp, text)
            .with_context(|| format!("cannot write the restore record {}", tmp.display()))?;
        std::fs::rename(&tmp, path)
            .with_context(|| format!("cannot write the restore record {}", path.display()))
    }
}

/// The default restore record path: `$XDG_RUNTIME_DIR/powerperf-restore.toml`, else
/// `/tmp/powerperf-restore-<uid>.toml`.
pub fn default_restore_path() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) if Path::new(&d).is_dir() => Path::new(&d).join("powerperf-restore.toml"),
        _ => PathBuf::from(format!("/tmp/powerperf-restore-{}.toml", unsafe {
            libc::getuid()
        })),
    }
}

/// The default switch log: next to the restore record, `powerperf-switches[-<uid>].log`.
pub fn default_log_path() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) if Path::new(&d).is_dir() => Path::new(&d).join("powerperf-switches.log"),
        _ => PathBuf::from(format!("/tmp/powerperf-switches-{}.log", unsafe {
            libc::getuid()
        })),
    }
}

/// CLOCK_MONOTONIC now, ns.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The switch log: one tab-separated line per file write:
/// `t_monotonic_ns pid action path old new` (header written when the file is new).
pub struct SwitchLog {
    file: Option<std::fs::File>,
    path: PathBuf,
}

impl SwitchLog {
    /// Open (append) the log at `path`.
    ///
    /// # Errors
    /// The file cannot be created.
    pub fn open(path: &Path) -> Result<Self> {
        let new = !path.exists();
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("cannot open the switch log {}", path.display()))?;
        if new {
            writeln!(file, "t_monotonic_ns\tpid\taction\tpath\told\tnew")?;
        }
        Ok(SwitchLog {
            file: Some(file),
            path: path.to_path_buf(),
        })
    }

    /// Log writes of one action (`set`, `restore`).
    pub fn log(&mut self, action: &str, writes: &[Write]) {
        if let Some(f) = &mut self.file {
            let t = monotonic_ns();
            for w in writes {
                let _ = writeln!(
                    f,
                    "{t}\t{}\t{action}\t{}\t{}\t{}",
                    std::process::id(),
                    w.path,
                    w.old.as_deref().unwrap_or(""),
                    w.new
                );
            }
            let _ = f.flush();
        }
    }

    /// Path of the log.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// A frequency session: the restore record is written when it begins, every switch is
/// logged, and the snapshot is put back by [`Session::restore`] or, failing that, when the
/// session is dropped (early returns, panics).
pub struct Session<'a> {
    ctl: &'a mut dyn FrequencyController,
    snap: Snapshot,
    record: PathBuf,
    log: SwitchLog,
    active: bool,
}

impl<'a> Session<'a> {
    /// Refuse when a restore record is left over; snapshot the controller; write the record.
    ///
    /// # Errors
    /// A left-over record (run `powerperf apply --restore` first), unreadable settings, an
    /// unwritable record or log.
    pub fn begin(
        ctl: &'a mut dyn FrequencyController,
        restore_file: &Path,
        log_file: &Path,
        sysfs_root: &Path,
        command: &[String],
    ) -> Result<Self> {
        if restore_file.exists() {
            let old = RestoreRecord::read(restore_file).ok();
            anyhow::bail!(
                "a restore record from an earlier apply (pid {}) is still at {}: its settings may not have been put back. Run `powerperf apply --restore --restore-file {}` first",
                old.map(|r| r.pid.to_string()).unwrap_or_else(|| "?".into()),
                restore_file.display(),
                restore_file.display()
            );
        }
        let snap = ctl.snapshot()?;
        let record = RestoreRecord {
            pid: std::process::id(),
            created_unix_ns: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0),
            // absolute, so that `--restore` works from any directory
            sysfs_root: sysfs_root
                .canonicalize()
                .unwrap_or_else(|_| sysfs_root.to_path_buf()),
            controller: ctl.describe(),
            command: command.to_vec(),
            snapshot: snap.clone(),
        };
        let log = SwitchLog::open(log_file)?;
        record.write(restore_file)?;
        Ok(Session {
            ctl,
            snap,
            record: restore_file.to_path_buf(),
            log,
            active: true,
        })
    }

    /// Set `mhz` and log the writes.
    ///
    /// # Errors
    /// The controller's error (the session stays active, so a later restore undoes any
    /// partial write).
    pub fn set(&mut self, mhz: f64) -> Result<()> {
        let w = self.ctl.set(mhz)?;
        self.log.log("set", &w);
        Ok(())
    }

    /// Put the snapshot back, log it and remove the record.
    ///
    /// # Errors
    /// A failed write: the record is kept and the message says how to replay it.
    pub fn restore(&mut self) -> Result<()> {
        if !self.active {
            return Ok(());
        }
        self.active = false;
        match self.ctl.restore(&self.snap) {
            Ok(w) => {
                self.log.log("restore", &w);
                let _ = std::fs::remove_file(&self.record);
                Ok(())
            }
            Err(e) => Err(anyhow::Error::new(e).context(format!(
                "restoring the original settings failed; the record {} is kept: run `powerperf apply --restore --restore-file {}` with the needed privileges",
                self.record.display(),
                self.record.display()
            ))),
        }
    }
}

impl Drop for Session<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.restore() {
            eprintln!("powerperf: {e:#}");
        }
    }
}

/// What to run and where.
#[derive(Debug, Clone)]
pub struct ApplyRequest {
    /// Core frequency to set, MHz (`None`: nothing to set on the CPU).
    pub core_freq_mhz: Option<f64>,
    /// Environment for the command (e.g. `OMP_NUM_THREADS`).
    pub env: Vec<(String, String)>,
    pub command: Vec<String>,
    pub restore_file: PathBuf,
    pub log_file: PathBuf,
    pub sysfs_root: PathBuf,
}

/// Caught signals, forwarded to the child.
pub struct SignalForwarder {
    last: Arc<AtomicI32>,
    child: Arc<AtomicI32>,
    handle: signal_hook::iterator::Handle,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl SignalForwarder {
    /// Catch SIGINT, SIGTERM, SIGHUP, SIGQUIT from now on.
    ///
    /// # Errors
    /// The handlers cannot be installed.
    pub fn install() -> Result<Self> {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM};
        let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP, SIGQUIT])
            .context("installing signal handlers")?;
        let handle = signals.handle();
        let last = Arc::new(AtomicI32::new(0));
        let child = Arc::new(AtomicI32::new(0));
        let (l, c) = (last.clone(), child.clone());
        let thread = std::thread::spawn(move || {
            for sig in signals.forever() {
                l.store(sig, Ordering::SeqCst);
                let pid = c.load(Ordering::SeqCst);
                if pid > 0 {
                    // SAFETY: kill(2) on our own child's pid.
                    unsafe { libc::kill(pid, sig) };
                }
            }
        });
        Ok(SignalForwarder {
            last,
            child,
            handle,
            thread: Some(thread),
        })
    }

    /// The last signal caught (0: none).
    pub fn caught(&self) -> i32 {
        self.last.load(Ordering::SeqCst)
    }

    /// Forward signals to `pid` from now on, and now if one was caught before.
    pub fn set_child(&self, pid: i32) {
        self.child.store(pid, Ordering::SeqCst);
        let s = self.caught();
        if s != 0 {
            // SAFETY: kill(2) on our own child's pid.
            unsafe { libc::kill(pid, s) };
        }
    }

    /// Stop forwarding (the child has ended).
    pub fn clear_child(&self) {
        self.child.store(0, Ordering::SeqCst);
    }
}

impl Drop for SignalForwarder {
    fn drop(&mut self) {
        self.handle.close();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The shell status of an ended child: its code, or 128 + the signal.
pub fn shell_status(st: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0))
}

/// Run the command with `OMP_NUM_THREADS` etc., forwarding signals.
///
/// # Errors
/// The command cannot be started.
pub fn run_child(
    command: &[String],
    env: &[(String, String)],
    sig: &SignalForwarder,
) -> Result<i32> {
    let (prog, args) = command
        .split_first()
        .context("no command given after `--`")?;
    let mut cmd = std::process::Command::new(prog);
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot start `{prog}`"))?;
    sig.set_child(child.id() as i32);
    let st = child.wait().context("waiting for the command")?;
    sig.clear_child();
    Ok(shell_status(st))
}

/// Set the setting, run the command, restore. Returns the command's shell status.
///
/// # Errors
/// A setting outside the range, missing privileges, a left-over record (run
/// `--restore` first), a command that cannot start, or a failed restore. Nothing is
/// changed when an error happens before the first write; after it, the session restores.
pub fn apply_with(
    ctl: &mut dyn FrequencyController,
    req: &ApplyRequest,
    sig: &SignalForwarder,
) -> Result<i32> {
    let Some(f) = req.core_freq_mhz else {
        return run_child(&req.command, &req.env, sig);
    };
    let writes = ctl.plan_set(f)?;
    ctl.check_access(&writes)?;
    let mut session = Session::begin(
        ctl,
        &req.restore_file,
        &req.log_file,
        &req.sysfs_root,
        &req.command,
    )?;
    session.set(f)?;
    let caught = sig.caught();
    let status = if caught != 0 {
        eprintln!("powerperf: caught signal {caught} before the command started; restoring");
        128 + caught
    } else {
        run_child(&req.command, &req.env, sig)?
    };
    session.restore()?;
    Ok(status)
}

/// Replay a restore record: put back every saved value through a cpufreq controller on
/// the record's root (or `root` when given). Returns the writes done; `Ok(None)` when
/// there is no record.
///
/// # Errors
/// An unreadable record, no cpufreq under the root, or write errors (the record is kept).
pub fn replay_restore(record_path: &Path, root: Option<&Path>) -> Result<Option<Vec<Write>>> {
    if !record_path.exists() {
        return Ok(None);
    }
    let rec = RestoreRecord::read(record_path)?;
    let root = root
        .map(Path::to_path_buf)
        .unwrap_or(rec.sysfs_root.clone());
    let mut ctl = super::controller::CpufreqController::open(&root)?;
    let w = ctl.restore(&rec.snapshot).with_context(|| {
        format!(
            "restoring from {} failed; the record is kept (run again as root)",
            record_path.display()
        )
    })?;
    std::fs::remove_file(record_path)
        .with_context(|| format!("removing {}", record_path.display()))?;
    Ok(Some(w))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dvfs::controller::FakeController;

    #[test]
    fn fake_controller_is_restored_after_the_command() {
        let d = tempfile::tempdir().unwrap();
        let mut f = FakeController::new(&[1000.0, 2000.0]);
        let log = f.log.clone();
        let sig = SignalForwarder::install().unwrap();
        let req = ApplyRequest {
            core_freq_mhz: Some(1000.0),
            env: vec![("OMP_NUM_THREADS".into(), "2".into())],
            command: vec![
                "sh".into(),
                "-c".into(),
                "test \"$OMP_NUM_THREADS\" = 2 && exit 3".into(),
            ],
            restore_file: d.path().join("r.toml"),
            log_file: d.path().join("s.log"),
            sysfs_root: d.path().to_path_buf(),
        };
        let st = apply_with(&mut f, &req, &sig).unwrap();
        assert_eq!(st, 3);
        assert_eq!(
            *log.lock().unwrap(),
            vec!["set 1000".to_string(), "restore 2000".to_string()]
        );
        assert_eq!(f.current_mhz, 2000.0);
        assert!(!req.restore_file.exists());
        let text = std::fs::read_to_string(&req.log_file).unwrap();
        assert_eq!(text.lines().count(), 3, "{text}");
        // out of range: nothing changed, no record
        let e = apply_with(
            &mut f,
            &ApplyRequest {
                core_freq_mhz: Some(1500.0),
                ..req.clone()
            },
            &sig,
        )
        .unwrap_err();
        assert!(e.to_string().contains("1500"), "{e}");
        assert_eq!(log.lock().unwrap().len(), 2);
        // a command that cannot start: restored
        let e = apply_with(
            &mut f,
            &ApplyRequest {
                command: vec!["/nonexistent/x".into()],
                ..req.clone()
            },
            &sig,
        )
        .unwrap_err();
        assert!(format!("{e:#}").contains("cannot start"), "{e:#}");
        assert_eq!(*log.lock().unwrap().last().unwrap(), "restore 2000");
    }
}
