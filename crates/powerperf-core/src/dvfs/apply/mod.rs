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

use anyhow::{Context, Result};
use powerperf_node::controller::FrequencyController;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

pub mod daemon;
pub mod daemon_gpu;
mod session;
pub use session::{
    default_log_path, default_restore_path, replay_restore, RestoreRecord, Session, SwitchLog,
};

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
    powerperf_node::daemon::peer_cred(s).map(|c| (c.pid, c.uid))
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
    let sock = control_socket(req)?;
    let mut session = Session::begin(
        ctl,
        &req.restore_file,
        &req.log_file,
        &req.sysfs_root,
        &req.command,
    )?;
    session.set(plan.default_mhz)?;
    switch_at_regions(&mut session, sock, req, plan, sig)
}

/// Where region switches go: the root [`Session`] (cpufreq written by this process) or a
/// powerperfd session ([`daemon::apply_regions`]).
pub trait Switcher {
    /// Switch the core frequency to `mhz`.
    ///
    /// # Errors
    /// The switch was refused or failed (the command goes on at the current setting).
    fn set(&mut self, mhz: f64) -> Result<()>;
    /// Log a line that is not a write (`region`, `refuse`, `deny`).
    fn note(&mut self, action: &str, what: &str, old: &str, new: &str);
    /// Put back the original settings.
    ///
    /// # Errors
    /// The restore failed.
    fn restore(&mut self) -> Result<()>;
}

impl Switcher for Session<'_> {
    fn set(&mut self, mhz: f64) -> Result<()> {
        Session::set(self, mhz)
    }
    fn note(&mut self, action: &str, what: &str, old: &str, new: &str) {
        Session::note(self, action, what, old, new);
    }
    fn restore(&mut self) -> Result<()> {
        Session::restore(self)
    }
}

/// The controller socket for a region-switching run: in /tmp when the command runs as
/// another user (handed to it), else next to the switch log.
///
/// # Errors
/// The socket or its directory cannot be created or handed over.
pub fn control_socket(req: &ApplyRequest) -> Result<ControlSocket> {
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
    let sock = ControlSocket::create(&base)?;
    if let Some(u) = &req.run_as {
        sock.give_to(u.uid, u.gid)?;
    }
    Ok(sock)
}

/// With the plan's default already set through `session`: run the command with the
/// controller socket `sock`, switch at region boundaries as its powerperf-rt reports them,
/// restore. Returns the command's shell status.
///
/// # Errors
/// A command that cannot start, a failed restore.
pub fn switch_at_regions(
    session: &mut dyn Switcher,
    mut sock: ControlSocket,
    req: &ApplyRequest,
    plan: &RegionSettings,
    sig: &SignalForwarder,
) -> Result<i32> {
    use std::sync::mpsc;
    let listener = sock.listener.take().context("socket already in use")?;
    // to wake the acceptor at the end: shutdown(2) on the listening socket makes accept
    // return (connecting to the path would trust a directory the command may own)
    let waker = listener
        .try_clone()
        .context("cannot duplicate the controller socket")?;
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

#[cfg(test)]
mod tests;
