//! The frequency session of `apply` (steps 3 to 5 of the parent module): the restore
//! record written before anything changes, the switch log, the session that restores on
//! every exit path, and the replay of a record left behind (`powerperf apply --restore`).

use anyhow::{Context, Result};
use powerperf_node::controller::{FrequencyController, Snapshot, Write};
use powerperf_node::state;
use serde::{Deserialize, Serialize};
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// The restore record written before anything is changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RestoreRecord {
    /// The powerperf process that wrote it.
    pub pid: u32,
    /// Its start time, clock ticks after boot (`/proc/PID/stat` field 22): with `boot_id`,
    /// tells the writer from a later process with the same pid. Absent in records of
    /// older versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid_start_ticks: Option<u64>,
    /// `/proc/sys/kernel/random/boot_id` when it was written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
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
    /// Read a record: opened without following a symbolic link, and only when it is a
    /// regular file with one link, owned by the effective uid and not writable by others
    /// (another user may have put it there), at most [`state::MAX_RECORD_BYTES`]. Its
    /// settings are checked separately, against the controller
    /// ([`CpufreqController::validate`](powerperf_node::controller::CpufreqController::validate)).
    ///
    /// # Errors
    /// Unreadable, someone else's, too long, or TOML that is not a record (the message
    /// names the path).
    pub fn read(path: &Path) -> Result<Self> {
        use std::io::Read as _;
        let f = state::open_own_read(path, "restore record")?;
        let mut text = String::new();
        f.take(state::MAX_RECORD_BYTES + 1)
            .read_to_string(&mut text)
            .with_context(|| format!("cannot read the restore record {}", path.display()))?;
        if text.len() as u64 > state::MAX_RECORD_BYTES {
            anyhow::bail!(
                "{} is longer than {} bytes: not a powerperf restore record",
                path.display(),
                state::MAX_RECORD_BYTES
            );
        }
        toml::from_str(&text)
            .with_context(|| format!("{} is not a powerperf restore record", path.display()))
    }

    /// Write a record atomically and exclusively: a temporary file with an unpredictable
    /// name created `O_NOFOLLOW|O_CREAT|O_EXCL`, then linked to `path`, which must not
    /// exist (see [`state::write_new_atomically`]).
    ///
    /// # Errors
    /// `path` exists, or I/O errors with the path.
    pub fn write(&self, path: &Path) -> Result<()> {
        let text = format!(
            "# powerperf restore record: original settings to put back. Replay with `powerperf apply --restore --restore-file {}`\n{}",
            path.display(),
            toml::to_string_pretty(self).context("serialising the restore record")?
        );
        state::write_new_atomically(path, &text, "restore record")
    }

    /// The process that wrote the record.
    pub fn owner(&self) -> state::ProcessId {
        state::ProcessId {
            pid: self.pid,
            start_ticks: self.pid_start_ticks,
            boot_id: self.boot_id.clone(),
        }
    }
}

/// The default restore record: `powerperf-restore.toml` in the state directory
/// ([`state::state_dir`]: `--state-dir`, `$POWERPERF_STATE_DIR`, `/var/lib/powerperf` for
/// root, `$XDG_RUNTIME_DIR` for other users).
///
/// # Errors
/// No private state directory (the message names it and the fix).
pub fn default_restore_path(state_dir: Option<&Path>) -> Result<PathBuf> {
    Ok(state::state_dir(state_dir)?.join(state::RECORD_NAME))
}

/// The default switch log: `powerperf-switches.log` in the state directory.
///
/// # Errors
/// As [`default_restore_path`].
pub fn default_log_path(state_dir: Option<&Path>) -> Result<PathBuf> {
    Ok(state::state_dir(state_dir)?.join(state::LOG_NAME))
}

/// The switch log: one tab-separated line per file write:
/// `t_monotonic_ns pid action path old new` (header written when the file is new).
pub struct SwitchLog {
    file: Option<std::fs::File>,
    path: PathBuf,
}

impl SwitchLog {
    /// Open (append) the log at `path`, never through a symbolic link, and only a file of
    /// this user's (created 0600 when missing).
    ///
    /// # Errors
    /// The file cannot be created, is a symbolic link or someone else's.
    pub fn open(path: &Path) -> Result<Self> {
        // O_NOFOLLOW, and an existing file must be ours (see state::open_append)
        let (mut file, new) = state::open_append(path, "switch log")?;
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
            let t = powerperf_rt::now_ns();
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

    /// Log one line that is not a file write: a region event (`region`), a refused
    /// switch (`refuse`), a refused connection (`deny`).
    pub fn note(&mut self, action: &str, what: &str, old: &str, new: &str) {
        if let Some(f) = &mut self.file {
            let clean = |x: &str| x.replace(['\t', '\n'], " ");
            let _ = writeln!(
                f,
                "{}\t{}\t{action}\t{}\t{}\t{}",
                powerperf_rt::now_ns(),
                std::process::id(),
                clean(what),
                clean(old),
                clean(new)
            );
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
    /// Held until the session is dropped, after the restore (fields drop after `drop`).
    _lock: state::SysfsLock,
}

impl<'a> Session<'a> {
    /// Lock the sysfs root (one session per canonical root, whatever the record path);
    /// refuse when a restore record is left over; snapshot the controller; write the record
    /// (exclusively).
    ///
    /// # Errors
    /// Another session on the same root, a left-over record (run `powerperf apply
    /// --restore` first), unreadable settings, an unwritable record or log.
    pub fn begin(
        ctl: &'a mut dyn FrequencyController,
        restore_file: &Path,
        log_file: &Path,
        sysfs_root: &Path,
        command: &[String],
    ) -> Result<Self> {
        let lock = state::SysfsLock::acquire(sysfs_root)?;
        // anything at the path counts, a dangling symbolic link too
        if std::fs::symlink_metadata(restore_file).is_ok() {
            let old = RestoreRecord::read(restore_file);
            let who = match &old {
                Ok(r) if r.owner().is_alive() => format!(
                    "the apply that wrote it (pid {}) is still running, on another sysfs root ({})",
                    r.pid,
                    r.sysfs_root.display()
                ),
                Ok(r) => format!("from an earlier apply (pid {}, no longer running)", r.pid),
                Err(e) => format!("unreadable: {e:#}"),
            };
            anyhow::bail!(
                "a restore record is still at {} ({who}): its settings may not have been put back. Run `powerperf apply --restore --restore-file {}` first, or give another --restore-file",
                restore_file.display(),
                restore_file.display()
            );
        }
        let snap = ctl.snapshot()?;
        let me = state::ProcessId::current();
        let record = RestoreRecord {
            pid: me.pid,
            pid_start_ticks: me.start_ticks,
            boot_id: me.boot_id,
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
            _lock: lock,
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

    /// Log a line that is not a file write (see [`SwitchLog::note`]).
    pub fn note(&mut self, action: &str, what: &str, old: &str, new: &str) {
        self.log.note(action, what, old, new);
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

/// Replay a restore record: put back every saved value through a cpufreq controller on
/// the record's root (or `root` when given). Returns the writes done; `Ok(None)` when
/// there is no record.
///
/// The record is hostile input until checked: it is read only when it is this user's own
/// file ([`RestoreRecord::read`]); its root must be an absolute canonical path with
/// cpufreq under it; the apply that wrote it must have ended (pid, start time and boot
/// id, so a reused pid does not count); the root's lock must be free; and every saved
/// setting must pass [`CpufreqController::validate`](powerperf_node::controller::CpufreqController::validate)
/// (files powerperf writes, inside the root, values from the files' own lists) before
/// anything is written.
///
/// # Errors
/// An unreadable or refused record, the writer still running, another apply on the root,
/// no cpufreq under the root, or write errors (the record is kept in every case).
pub fn replay_restore(record_path: &Path, root: Option<&Path>) -> Result<Option<Vec<Write>>> {
    match std::fs::symlink_metadata(record_path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        _ => {}
    }
    let rec = RestoreRecord::read(record_path)?;
    let root = match root {
        Some(r) => r.to_path_buf(),
        None => {
            let r = &rec.sysfs_root;
            if !r.is_absolute() || r.canonicalize().ok().as_deref() != Some(r.as_path()) {
                anyhow::bail!(
                    "refusing the restore record {}: its sysfs_root {} is not an absolute canonical path; pass the root with --sysfs-root DIR",
                    record_path.display(),
                    r.display()
                );
            }
            r.clone()
        }
    };
    let owner = rec.owner();
    if owner.pid != std::process::id() && owner.is_alive() {
        let older = if owner.start_ticks.is_none() {
            " (the record, from an older powerperf, has no start time: if that pid is not a powerperf apply, check the record and remove it)"
        } else {
            ""
        };
        anyhow::bail!(
            "the apply that wrote the restore record {} (pid {}) is still running; it puts the settings back itself when it ends. Stop it (`kill -TERM {}`) instead of replaying its record under it{older}",
            record_path.display(),
            owner.pid,
            owner.pid
        );
    }
    let _lock = state::SysfsLock::acquire(&root)?;
    let mut ctl = powerperf_node::controller::CpufreqController::open(&root)?;
    ctl.validate(&rec.snapshot).with_context(|| {
        format!(
            "refusing the restore record {} (kept; check it, then remove it)",
            record_path.display()
        )
    })?;
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
