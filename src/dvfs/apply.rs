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
use super::state;
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
    /// ([`CpufreqController::validate`](super::controller::CpufreqController::validate)).
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

    /// Log one line that is not a file write: a region event (`region`), a refused
    /// switch (`refuse`), a refused connection (`deny`).
    pub fn note(&mut self, action: &str, what: &str, old: &str, new: &str) {
        if let Some(f) = &mut self.file {
            let clean = |x: &str| x.replace(['\t', '\n'], " ");
            let _ = writeln!(
                f,
                "{}\t{}\t{action}\t{}\t{}\t{}",
                monotonic_ns(),
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
    /// Run the command as this user (`--as-invoking-user`); `None`: with powerperf's own
    /// credentials.
    pub run_as: Option<RunAs>,
}

/// A user to run the command as: uid, gid, no supplementary groups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunAs {
    pub uid: u32,
    pub gid: u32,
    /// The user name (`SUDO_USER`), given to the command as `USER` and `LOGNAME`.
    pub user: Option<String>,
    /// The home directory from the password database, given as `HOME`.
    pub home: Option<PathBuf>,
}

impl RunAs {
    /// The user who ran `sudo powerperf ...`: `SUDO_UID`, `SUDO_GID` (and `SUDO_USER`),
    /// which sudo sets. Needs powerperf to run as root (otherwise the command runs as the
    /// caller anyway; the same uid is accepted).
    ///
    /// # Errors
    /// No or malformed `SUDO_UID`/`SUDO_GID`, or not root and another uid.
    pub fn invoking_user() -> Result<Self> {
        let num = |k: &str| -> Result<u32> {
            let v = std::env::var(k).map_err(|_| {
                anyhow::anyhow!(
                    "--as-invoking-user: {k} is not set; it is set by sudo, so the option works only under `sudo powerperf apply --as-invoking-user ...` (as root without sudo, the command runs as root)"
                )
            })?;
            match v.parse::<u32>() {
                Ok(n) if n != u32::MAX => Ok(n),
                _ => anyhow::bail!("--as-invoking-user: {k}=`{v}` is not a user or group id"),
            }
        };
        let (uid, gid) = (num("SUDO_UID")?, num("SUDO_GID")?);
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        if me != 0 && me != uid {
            anyhow::bail!(
                "--as-invoking-user: powerperf runs as uid {me}, not root, and cannot switch the command to uid {uid} (SUDO_UID)"
            );
        }
        Ok(RunAs {
            uid,
            gid,
            user: std::env::var("SUDO_USER").ok().filter(|u| !u.is_empty()),
            home: home_of(uid),
        })
    }

    /// Make `cmd` run as this user: `setgid`, `setgroups(0)` (no supplementary groups),
    /// `setuid` in the child before `exec` (std's `CommandExt::gid`/`uid` do these three,
    /// in this order, and fail the spawn when one fails); `HOME`, `USER`, `LOGNAME` of the
    /// user.
    pub fn configure(&self, cmd: &mut std::process::Command) {
        use std::os::unix::process::CommandExt;
        cmd.gid(self.gid).uid(self.uid);
        if let Some(h) = &self.home {
            cmd.env("HOME", h);
        }
        if let Some(u) = &self.user {
            cmd.env("USER", u).env("LOGNAME", u);
        }
    }
}

/// The home directory of `uid` from the password database (`getpwuid_r`).
fn home_of(uid: u32) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 16384];
    let mut out: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: getpwuid_r writes into `pw` and `buf`, which we own, and sets `out` to `&pw`
    // or null.
    let rc = unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr(), buf.len(), &mut out) };
    if rc != 0 || out.is_null() || pw.pw_dir.is_null() {
        return None;
    }
    // SAFETY: pw_dir points into `buf`, NUL-terminated by getpwuid_r.
    let dir = unsafe { std::ffi::CStr::from_ptr(pw.pw_dir) };
    Some(PathBuf::from(std::ffi::OsStr::from_bytes(dir.to_bytes())))
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
    run_child_as(command, env, sig, None)
}

/// [`run_child`] as another user (`run_as`, see [`RunAs::configure`]).
///
/// # Errors
/// The command cannot be started (or its credentials cannot be set).
pub fn run_child_as(
    command: &[String],
    env: &[(String, String)],
    sig: &SignalForwarder,
    run_as: Option<&RunAs>,
) -> Result<i32> {
    let (prog, args) = command
        .split_first()
        .context("no command given after `--`")?;
    let mut cmd = std::process::Command::new(prog);
    cmd.args(args);
    if let Some(u) = run_as {
        u.configure(&mut cmd);
    }
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
        return run_child_as(&req.command, &req.env, sig, req.run_as.as_ref());
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
        run_child_as(&req.command, &req.env, sig, req.run_as.as_ref())?
    };
    session.restore()?;
    Ok(status)
}

/// Environment variable through which the command's powerperf-rt finds the controller.
pub const ENV_CTL_SOCKET: &str = "POWERPERF_CTL_SOCKET";
/// Environment variable naming the run directory of powerperf-rt.
pub const ENV_RUN_DIR: &str = "POWERPERF_RUN_DIR";

/// Per-region settings for region-triggered switching (`core_freq_mhz`, MHz).
#[derive(Debug, Clone, PartialEq)]
pub struct RegionSettings {
    /// The setting of each planned region, by region name.
    pub regions: std::collections::BTreeMap<String, f64>,
    /// The setting outside every planned region (the plan's default); set at start.
    pub default_mhz: f64,
}

/// The controller's socket in a private directory (mode 0700), removed when dropped.
pub struct ControlSocket {
    dir: PathBuf,
    path: PathBuf,
    listener: Option<std::os::unix::net::UnixListener>,
}

impl ControlSocket {
    /// Create `<base>/powerperf-ctl-<pid>-<n>/ctl.sock` (0700 directory). Falls back to
    /// `$XDG_RUNTIME_DIR`, then `/tmp`, when the path would be too long for a socket.
    ///
    /// # Errors
    /// No directory could be created or the socket cannot be bound.
    pub fn create(base: &Path) -> Result<Self> {
        use std::os::unix::fs::DirBuilderExt;
        let mut bases = vec![base.to_path_buf()];
        if let Some(x) = std::env::var_os("XDG_RUNTIME_DIR") {
            bases.push(PathBuf::from(x));
        }
        bases.push(PathBuf::from("/tmp"));
        let mut last_err = None;
        for b in bases {
            for n in 0..100u32 {
                let dir = b.join(format!("powerperf-ctl-{}-{n}", std::process::id()));
                let path = dir.join("ctl.sock");
                if path.as_os_str().len() >= 100 {
                    break;
                }
                match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                    Err(e) => {
                        last_err = Some(format!("{}: {e}", dir.display()));
                        break;
                    }
                }
                return match std::os::unix::net::UnixListener::bind(&path) {
                    Ok(l) => Ok(ControlSocket {
                        dir,
                        path,
                        listener: Some(l),
                    }),
                    Err(e) => {
                        let _ = std::fs::remove_dir(&dir);
                        Err(anyhow::anyhow!(
                            "cannot create the controller socket {}: {e}",
                            path.display()
                        ))
                    }
                };
            }
        }
        anyhow::bail!(
            "cannot create a private directory for the controller socket ({})",
            last_err.unwrap_or_else(|| "every path was too long for a Unix socket".into())
        )
    }

    /// The socket path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The private directory holding the socket.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Hand the directory and the socket to the command's user (`--as-invoking-user`), so
    /// that the command can connect and powerperf-rt can write its region events there.
    /// powerperf only listens on the socket and removes the directory at the end
    /// (`remove_dir_all` does not follow links).
    ///
    /// # Errors
    /// chown fails.
    pub fn give_to(&self, uid: u32, gid: u32) -> Result<()> {
        // the socket first: once the directory is the user's, its entries are too (lchown
        // never follows a link put in the socket's place)
        for p in [&self.path, &self.dir] {
            std::os::unix::fs::lchown(p, Some(uid), Some(gid))
                .with_context(|| format!("cannot give {} to uid {uid}", p.display()))?;
        }
        Ok(())
    }
}

impl Drop for ControlSocket {
    fn drop(&mut self) {
        self.listener = None;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The credentials of the peer of a Unix socket (SO_PEERCRED): pid, uid.
///
/// # Errors
/// getsockopt fails.
pub fn peer_credentials(s: &std::os::unix::net::UnixStream) -> std::io::Result<(i32, u32)> {
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
    Ok((cred.pid, cred.uid))
}

/// The parent pid of `pid` from `/proc/<pid>/stat` (the field after the `(comm)`).
pub fn parent_pid(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Whether `pid` is `root` or one of its descendants (walking the parent pids).
pub fn is_descendant(pid: i32, root: i32) -> bool {
    let mut p = pid;
    for _ in 0..4096 {
        if p == root {
            return true;
        }
        if p <= 1 {
            return false;
        }
        match parent_pid(p) {
            Some(q) => p = q,
            None => return false,
        }
    }
    false
}

/// What a connection handler asks the thread that owns the session.
enum CtlEvent {
    /// A region event: `what` (`B name`, `E name`, `close`) and the setting to switch to
    /// (`None`: keep the current one). The handler waits for the ack byte on `reply`.
    Switch {
        what: String,
        target: Option<f64>,
        reply: std::sync::mpsc::Sender<u8>,
    },
    /// A connection refused by the credential check.
    Denied(String),
    /// A connection closed for breaking the protocol's limits (line length, depth).
    Refused(String),
    /// The command ended.
    Exited(std::io::Result<std::process::ExitStatus>),
}

use powerperf_rt::events::unescape;

/// The longest control line, newline included (bytes); a longer one closes the connection.
pub const MAX_CTL_LINE: usize = powerperf_rt::ctl::MAX_LINE;
/// The most regions open at once on one connection; one more closes the connection.
pub const MAX_CTL_DEPTH: usize = 4096;

/// Read one line of at most `max` bytes (newline included) into `buf`, without ever
/// holding more than `max + 1` bytes. `Ok(false)` at the end of the stream.
///
/// # Errors
/// I/O errors, and `InvalidData` for a line longer than `max`.
fn read_bounded_line(
    r: &mut impl std::io::BufRead,
    buf: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<bool> {
    use std::io::{BufRead as _, Read as _};
    buf.clear();
    let n = r.take(max as u64 + 1).read_until(b'\n', buf)?;
    if n == 0 {
        return Ok(false);
    }
    if buf.len() > max || (buf.len() == max && buf.last() != Some(&b'\n')) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("line longer than {max} bytes"),
        ));
    }
    if buf.last() == Some(&b'\n') {
        buf.pop();
    }
    Ok(true)
}

/// Serve one connection: check the peer, then turn `B`/`E` lines into switch requests.
/// The stack of open regions is per connection (per thread of the command).
fn serve_connection(
    conn: std::os::unix::net::UnixStream,
    tx: std::sync::mpsc::Sender<CtlEvent>,
    plan: &RegionSettings,
    job_pid: i32,
    job_uid: u32,
) {
    match peer_credentials(&conn) {
        Ok((pid, uid)) if uid == job_uid && is_descendant(pid, job_pid) => {}
        Ok((pid, uid)) => {
            let _ = tx.send(CtlEvent::Denied(format!(
                "pid {pid} uid {uid}: not the command (pid {job_pid}) or its descendant with uid {job_uid}"
            )));
            return;
        }
        Err(e) => {
            let _ = tx.send(CtlEvent::Denied(format!("no peer credentials: {e}")));
            return;
        }
    }
    let Ok(mut w) = conn.try_clone() else { return };
    let mut stack: Vec<(String, Option<f64>)> = Vec::new();
    let effective = |st: &[(String, Option<f64>)]| {
        st.iter()
            .rev()
            .find_map(|(_, m)| *m)
            .unwrap_or(plan.default_mhz)
    };
    let ask = |what: String, target: Option<f64>| -> Option<u8> {
        let (rtx, rrx) = std::sync::mpsc::channel();
        tx.send(CtlEvent::Switch {
            what,
            target,
            reply: rtx,
        })
        .ok()?;
        rrx.recv().ok()
    };
    let mut reader = std::io::BufReader::with_capacity(MAX_CTL_LINE, conn);
    let mut buf = Vec::with_capacity(MAX_CTL_LINE);
    loop {
        match read_bounded_line(&mut reader, &mut buf, MAX_CTL_LINE) {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                let _ = tx.send(CtlEvent::Refused(format!(
                    "{e} from pid {job_pid}'s connection: closed"
                )));
                break;
            }
            Err(_) => break,
        }
        let Ok(line) = std::str::from_utf8(&buf).map(str::to_string) else {
            let _ = tx.send(CtlEvent::Refused(
                "a line that is not UTF-8: connection closed".into(),
            ));
            break;
        };
        if line.starts_with("B ") && stack.len() >= MAX_CTL_DEPTH {
            let _ = tx.send(CtlEvent::Refused(format!(
                "more than {MAX_CTL_DEPTH} regions open on one connection: closed"
            )));
            break;
        }
        let (kind, name) = line.split_once(' ').unwrap_or((line.as_str(), ""));
        let name = unescape(name);
        let target = match kind {
            "B" => {
                let m = plan.regions.get(&name).copied();
                stack.push((name, m));
                m
            }
            "E" => match stack.iter().rposition(|(n, _)| *n == name) {
                Some(pos) => {
                    let had = stack[pos..].iter().any(|(_, m)| m.is_some());
                    stack.truncate(pos);
                    had.then(|| effective(&stack))
                }
                None => None,
            },
            _ => break,
        };
        let Some(ack) = ask(line.clone(), target) else {
            break;
        };
        if std::io::Write::write_all(&mut w, &[ack]).is_err() {
            break;
        }
    }
    // the thread or process ended inside planned regions: back to the default
    if stack.iter().any(|(_, m)| m.is_some()) {
        let _ = ask("close".into(), Some(plan.default_mhz));
    }
}

/// Set the plan's default, run the command with the controller socket, switch at region
/// boundaries as the command's powerperf-rt reports them, restore. Returns the command's
/// shell status.
///
/// Every region setting outside the controller's range is refused when asked for (logged
/// as `refuse`, the command goes on); the default must be allowed (checked, with the
/// privileges, before anything is changed).
///
/// # Errors
/// As [`apply_with`], and a socket that cannot be created.
pub fn apply_regions(
    ctl: &mut dyn FrequencyController,
    req: &ApplyRequest,
    plan: &RegionSettings,
    sig: &SignalForwarder,
) -> Result<i32> {
    use std::sync::mpsc;
    let writes = ctl.plan_set(plan.default_mhz)?;
    ctl.check_access(&writes)?;
    let range = ctl.range()?;
    for (name, mhz) in &plan.regions {
        if !range.allows(*mhz) {
            eprintln!(
                "powerperf: region `{name}`: {mhz} MHz is outside what this CPU allows ({}); it will be refused and the region runs at the enclosing setting",
                range.describe()
            );
        }
    }
    let base = if req.run_as.is_some() {
        // The command's user must reach the socket, and the state directory (root's
        // /var/lib/powerperf, 0700) is closed to it. /tmp is sticky and root-owned: the
        // directory made there by mkdir (never an existing one) cannot be renamed or
        // replaced by anyone else before it is handed over.
        PathBuf::from("/tmp")
    } else {
        req.log_file
            .parent()
            .filter(|p| p.is_dir())
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("/tmp"))
    };
    let mut sock = ControlSocket::create(&base)?;
    if let Some(u) = &req.run_as {
        sock.give_to(u.uid, u.gid)?;
    }
    let listener = sock.listener.take().context("socket already in use")?;
    // to wake the acceptor at the end: shutdown(2) on the listening socket makes accept
    // return (connecting to the path would trust a directory the command may own)
    let waker = listener
        .try_clone()
        .context("cannot duplicate the controller socket")?;
    let mut session = Session::begin(
        ctl,
        &req.restore_file,
        &req.log_file,
        &req.sysfs_root,
        &req.command,
    )?;
    session.set(plan.default_mhz)?;
    let mut current = plan.default_mhz;
    let caught = sig.caught();
    if caught != 0 {
        eprintln!("powerperf: caught signal {caught} before the command started; restoring");
        session.restore()?;
        return Ok(128 + caught);
    }
    let (prog, args) = req
        .command
        .split_first()
        .context("no command given after `--`")?;
    let mut cmd = std::process::Command::new(prog);
    cmd.args(args);
    if let Some(u) = &req.run_as {
        u.configure(&mut cmd);
    }
    for (k, v) in &req.env {
        cmd.env(k, v);
    }
    cmd.env(ENV_CTL_SOCKET, sock.path());
    if std::env::var_os(ENV_RUN_DIR).is_none() && !req.env.iter().any(|(k, _)| k == ENV_RUN_DIR) {
        cmd.env(ENV_RUN_DIR, sock.dir());
    }
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot start `{prog}`"))?;
    let job_pid = child.id() as i32;
    sig.set_child(job_pid);
    // SAFETY: getuid has no preconditions.
    let job_uid = req
        .run_as
        .as_ref()
        .map(|u| u.uid)
        .unwrap_or_else(|| unsafe { libc::getuid() });
    let (tx, rx) = mpsc::channel::<CtlEvent>();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let waiter = {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let _ = tx.send(CtlEvent::Exited(child.wait()));
        })
    };
    let acceptor = {
        let (tx, stop, plan) = (tx.clone(), stop.clone(), Arc::new(plan.clone()));
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let (tx, plan) = (tx.clone(), plan.clone());
                std::thread::spawn(move || serve_connection(conn, tx, &plan, job_pid, job_uid));
            }
        })
    };
    drop(tx);
    let status = loop {
        let Ok(ev) = rx.recv() else {
            anyhow::bail!("the command's waiter ended without a status");
        };
        match ev {
            CtlEvent::Exited(st) => break st.context("waiting for the command")?,
            CtlEvent::Denied(who) => {
                eprintln!("powerperf: refused a controller connection from {who}");
                session.note("deny", &who, "", "");
            }
            CtlEvent::Refused(why) => {
                eprintln!("powerperf: controller socket: {why}");
                session.note("refuse", &why, "", "");
            }
            CtlEvent::Switch {
                what,
                target,
                reply,
            } => {
                let mut ack = b'K';
                if let Some(m) = target {
                    if m != current {
                        session.note("region", &what, &format!("{current}"), &format!("{m}"));
                        match session.set(m) {
                            Ok(()) => current = m,
                            Err(e) => {
                                eprintln!("powerperf: `{what}`: switch refused: {e:#}");
                                session.note(
                                    "refuse",
                                    &what,
                                    &format!("{current}"),
                                    &format!("{m}"),
                                );
                                ack = b'N';
                            }
                        }
                    }
                }
                let _ = reply.send(ack);
            }
        }
    };
    sig.clear_child();
    stop.store(true, Ordering::SeqCst);
    {
        use std::os::fd::AsRawFd;
        // SAFETY: shutdown(2) on a descriptor we own.
        unsafe { libc::shutdown(waker.as_raw_fd(), libc::SHUT_RDWR) };
    }
    let _ = acceptor.join();
    drop(waker);
    let _ = waiter.join();
    drop(rx);
    session.restore()?;
    drop(sock);
    Ok(shell_status(status))
}

/// Replay a restore record: put back every saved value through a cpufreq controller on
/// the record's root (or `root` when given). Returns the writes done; `Ok(None)` when
/// there is no record.
///
/// The record is hostile input until checked: it is read only when it is this user's own
/// file ([`RestoreRecord::read`]); its root must be an absolute canonical path with
/// cpufreq under it; the apply that wrote it must have ended (pid, start time and boot
/// id, so a reused pid does not count); the root's lock must be free; and every saved
/// setting must pass [`CpufreqController::validate`](super::controller::CpufreqController::validate)
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
    let mut ctl = super::controller::CpufreqController::open(&root)?;
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
            run_as: None,
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

    fn region_plan() -> RegionSettings {
        RegionSettings {
            regions: [("a", 1000.0), ("b", 1500.0), ("bad", 1234.0)]
                .into_iter()
                .map(|(n, v)| (n.to_string(), v))
                .collect(),
            default_mhz: 2000.0,
        }
    }

    fn region_req(d: &Path, command: Vec<String>) -> ApplyRequest {
        ApplyRequest {
            core_freq_mhz: Some(2000.0),
            env: vec![],
            command,
            restore_file: d.join("r.toml"),
            log_file: d.join("s.log"),
            sysfs_root: d.to_path_buf(),
            run_as: None,
        }
    }

    #[test]
    fn region_switches_follow_the_stack_and_out_of_range_is_refused() {
        if std::process::Command::new("python3")
            .arg("-c")
            .arg("pass")
            .status()
            .map(|s| !s.success())
            .unwrap_or(true)
        {
            eprintln!("skipped: region_switches_follow_the_stack: python3 is not installed");
            return;
        }
        let d = tempfile::tempdir().unwrap();
        let acks = d.path().join("acks");
        let client = format!(
            r#"
import os, socket
s = socket.socket(socket.AF_UNIX)
s.connect(os.environ["POWERPERF_CTL_SOCKET"])
assert os.path.isdir(os.environ["POWERPERF_RUN_DIR"])
out = []
for m in ["B a", "B other", "B b", "E b", "E other", "B bad", "E bad", "E a", "B b"]:
    s.sendall((m + "\n").encode())
    out.append(s.recv(1).decode())
open("{}", "w").write("".join(out))
"#,
            acks.display()
        );
        let mut f = FakeController::new(&[1000.0, 1500.0, 2000.0]);
        let log = f.log.clone();
        let sig = SignalForwarder::install().unwrap();
        let req = region_req(d.path(), vec!["python3".into(), "-c".into(), client]);
        let st = apply_regions(&mut f, &req, &region_plan(), &sig).unwrap();
        assert_eq!(st, 0);
        assert_eq!(std::fs::read_to_string(&acks).unwrap(), "KKKKKNKKK");
        // the connection ended inside `b`: back to the default, then the restore
        assert_eq!(
            *log.lock().unwrap(),
            [
                "set 2000",
                "set 1000",
                "set 1500",
                "set 1000",
                "set 2000",
                "set 1500",
                "set 2000",
                "restore 2000"
            ]
        );
        assert!(!req.restore_file.exists());
        let text = std::fs::read_to_string(&req.log_file).unwrap();
        let actions: Vec<String> = text
            .lines()
            .skip(1)
            .map(|l| {
                let c: Vec<&str> = l.split('\t').collect();
                format!("{} {}", c[2], if c[2] == "set" { c[5] } else { c[3] })
            })
            .collect();
        assert_eq!(
            actions,
            [
                "set 2000",
                "region B a",
                "set 1000",
                "region B b",
                "set 1500",
                "region E b",
                "set 1000",
                "region B bad",
                "refuse B bad",
                "region E a",
                "set 2000",
                "region B b",
                "set 1500",
                "region close",
                "set 2000",
                "restore fake/freq_mhz"
            ],
            "{text}"
        );
        // the private socket directory is gone
        assert!(std::fs::read_dir(d.path())
            .unwrap()
            .flatten()
            .all(|e| !e.file_name().to_string_lossy().starts_with("powerperf-ctl")));
    }

    #[test]
    fn a_connection_from_outside_the_command_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let mut f = FakeController::new(&[1000.0, 1500.0, 2000.0]);
        let log = f.log.clone();
        let sig = SignalForwarder::install().unwrap();
        let req = region_req(d.path(), vec!["sleep".into(), "1".into()]);
        let sock = d
            .path()
            .join(format!("powerperf-ctl-{}-0/ctl.sock", std::process::id()));
        let intruder = std::thread::spawn(move || {
            use std::io::{Read, Write};
            for _ in 0..200 {
                if let Ok(mut s) = std::os::unix::net::UnixStream::connect(&sock) {
                    // The controller may close a refused connection before this write lands
                    // (EPIPE) or after it: either way no acknowledgement comes back.
                    let _ = s.write_all(b"B a\n");
                    let mut buf = Vec::new();
                    // refused: closed without an acknowledgement
                    let _ = s.read_to_end(&mut buf);
                    return Some(buf);
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            None
        });
        assert_eq!(
            apply_regions(&mut f, &req, &region_plan(), &sig).unwrap(),
            0
        );
        assert_eq!(intruder.join().unwrap(), Some(vec![]));
        assert_eq!(*log.lock().unwrap(), ["set 2000", "restore 2000"]);
        let text = std::fs::read_to_string(&req.log_file).unwrap();
        assert!(
            text.contains(&format!("\tdeny\tpid {} uid", std::process::id())),
            "{text}"
        );
    }

    /// Item 5: a record is created exclusively: writing over an existing record (another
    /// apply's, or a file planted at its path) fails and leaves it as it was.
    #[test]
    fn record_write_never_replaces_an_existing_record() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("powerperf-restore.toml");
        let rec: RestoreRecord = toml::from_str(
            "pid = 1\ncreated_unix_ns = 0\nsysfs_root = \"/\"\ncontroller = \"c\"\ncommand = []\n",
        )
        .unwrap();
        rec.write(&path).unwrap();
        let first = std::fs::read_to_string(&path).unwrap();
        let other = RestoreRecord {
            pid: 2,
            ..rec.clone()
        };
        let e = other.write(&path).unwrap_err();
        assert!(format!("{e:#}").contains("already"), "{e:#}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), first);
        // no temporary file is left next to it
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
    }

    /// Item 11: a control line is read with a bound: never more than `max + 1` bytes are
    /// held, and a longer line is an error (the connection is then closed).
    #[test]
    fn control_lines_are_read_with_a_bound() {
        let mut buf = Vec::new();
        let data = b"B a\nE a\nB last".to_vec();
        let mut r = std::io::BufReader::new(&data[..]);
        assert!(read_bounded_line(&mut r, &mut buf, 8).unwrap());
        assert_eq!(buf, b"B a");
        assert!(read_bounded_line(&mut r, &mut buf, 8).unwrap());
        assert_eq!(buf, b"E a");
        // the last line without a newline is still a line
        assert!(read_bounded_line(&mut r, &mut buf, 8).unwrap());
        assert_eq!(buf, b"B last");
        assert!(!read_bounded_line(&mut r, &mut buf, 8).unwrap());
        // exactly the limit with its newline: accepted; one byte more: refused
        let data = b"B 123456\nB 1234567\n".to_vec();
        let mut r = std::io::BufReader::new(&data[..]);
        assert!(read_bounded_line(&mut r, &mut buf, 9).unwrap());
        assert_eq!(buf, b"B 123456");
        let e = read_bounded_line(&mut r, &mut buf, 9).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
        // a long line without a newline: at most max + 1 bytes were taken
        let long = vec![b'x'; 1 << 20];
        let mut r = std::io::BufReader::new(&long[..]);
        let e = read_bounded_line(&mut r, &mut buf, MAX_CTL_LINE).unwrap_err();
        assert!(e.to_string().contains("longer than 4096 bytes"), "{e}");
        assert!(buf.len() <= MAX_CTL_LINE + 1);
    }

    #[test]
    fn descendants_are_found_through_proc() {
        let me = std::process::id() as i32;
        let mut c = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let pid = c.id() as i32;
        assert_eq!(parent_pid(pid), Some(me));
        assert!(is_descendant(pid, me));
        assert!(!is_descendant(me, pid));
        c.kill().unwrap();
        c.wait().unwrap();
        assert_eq!(unescape("a\\tb\\\\c\\n"), "a\tb\\c\n");
    }
}
