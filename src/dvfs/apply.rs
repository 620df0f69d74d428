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
    /// The command ended.
    Exited(std::io::Result<std::process::ExitStatus>),
}

use powerperf_rt::events::unescape;

/// Serve one connection: check the peer, then turn `B`/`E` lines into switch requests.
/// The stack of open regions is per connection (per thread of the command).
fn serve_connection(
    conn: std::os::unix::net::UnixStream,
    tx: std::sync::mpsc::Sender<CtlEvent>,
    plan: &RegionSettings,
    job_pid: i32,
    job_uid: u32,
) {
    use std::io::BufRead;
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
    for line in std::io::BufReader::new(conn).lines() {
        let Ok(line) = line else { break };
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
    let base = req
        .log_file
        .parent()
        .filter(|p| p.is_dir())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    let mut sock = ControlSocket::create(&base)?;
    let listener = sock.listener.take().context("socket already in use")?;
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
    let job_uid = unsafe { libc::getuid() };
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
    let _ = std::os::unix::net::UnixStream::connect(sock.path());
    let _ = acceptor.join();
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
