//! Where `powerperf apply` keeps its state (the restore record and the switch log), how it
//! creates files there, the lock per sysfs root, and who owns a record.
//!
//! `apply` runs as root, so every path it is given or finds is treated as hostile
//! (docs/security.md):
//! - state lives in a private directory: `/var/lib/powerperf` for root (0700, created when
//!   missing), `$XDG_RUNTIME_DIR` for other users, or `--state-dir DIR` /
//!   `POWERPERF_STATE_DIR`. Each must be a real directory (not a symbolic link) owned by the
//!   effective uid with no group or other permissions, inside directories nobody else can
//!   rename it from ([`private_dir`]). Never a shared `/tmp` name; `/run/powerperf` is left
//!   for a future node service;
//! - files are opened with `O_NOFOLLOW`; new ones with `O_CREAT|O_EXCL` (mode 0600); an
//!   existing file is used only when it is a regular file with one link, owned by the
//!   effective uid and not writable by group or others ([`check_own_file`]);
//! - one `flock` per canonical sysfs root ([`SysfsLock`]), held for the whole apply;
//! - a record names its writer by pid, process start time and boot id ([`ProcessId`]), so
//!   that a reused pid does not pass for a live apply.

use anyhow::{Context, Result};
use std::fs::File;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Root's state directory.
pub const ROOT_STATE_DIR: &str = "/var/lib/powerperf";
/// Environment variable that names the state directory (as `--state-dir`).
pub const ENV_STATE_DIR: &str = "POWERPERF_STATE_DIR";
/// File name of the restore record in the state directory.
pub const RECORD_NAME: &str = "powerperf-restore.toml";
/// File name of the switch log in the state directory.
pub const LOG_NAME: &str = "powerperf-switches.log";
/// The largest restore record read (a real one is a few kB: six lines per CPU).
pub const MAX_RECORD_BYTES: u64 = 4 << 20;

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// Check that `dir` is a private directory of the effective user: a directory, not a
/// symbolic link, owned by the effective uid, mode without group/other bits, and every
/// directory above it owned by root or the effective uid and not writable by others
/// (unless sticky, as /tmp), so that nobody else can swap it. With `create`, a missing
/// `dir` is created with mode 0700 (its parent must exist). Returns the canonical path.
///
/// # Errors
/// A message naming the directory, what is wrong (owner, mode, link) and the fix.
pub fn private_dir(dir: &Path, create: bool, what: &str) -> Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    if !dir.is_absolute() {
        anyhow::bail!(
            "{what} {} is not an absolute path: give the full path of a directory you own with mode 0700",
            dir.display()
        );
    }
    let meta = match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => {
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(dir)
                .or_else(|e| {
                    if e.kind() == std::io::ErrorKind::AlreadyExists {
                        Ok(())
                    } else {
                        Err(e)
                    }
                })
                .with_context(|| format!("cannot create the {what} {}", dir.display()))?;
            std::fs::symlink_metadata(dir)
                .with_context(|| format!("cannot inspect the {what} {}", dir.display()))?
        }
        Err(e) => {
            return Err(
                anyhow::Error::new(e).context(format!("cannot use the {what} {}", dir.display()))
            )
        }
        Ok(m) => m,
    };
    let me = euid();
    if meta.file_type().is_symlink() {
        anyhow::bail!(
            "refusing the {what} {}: it is a symbolic link; use a real directory you own with mode 0700",
            dir.display()
        );
    }
    if !meta.is_dir() {
        anyhow::bail!(
            "refusing the {what} {}: it is not a directory",
            dir.display()
        );
    }
    if meta.uid() != me || meta.mode() & 0o077 != 0 {
        anyhow::bail!(
            "refusing the {what} {}: it is owned by uid {} with mode {:04o}, but must be owned by uid {me} (this user) with mode 0700; fix it with `chown {me} {0}; chmod 0700 {0}` if it is yours, or use another directory",
            dir.display(),
            meta.uid(),
            meta.mode() & 0o7777
        );
    }
    let canon = dir
        .canonicalize()
        .with_context(|| format!("cannot resolve the {what} {}", dir.display()))?;
    for up in canon.ancestors().skip(1) {
        let m = std::fs::metadata(up)
            .with_context(|| format!("cannot inspect {} (above the {what})", up.display()))?;
        let sticky = m.mode() & 0o1000 != 0;
        if (m.uid() != 0 && m.uid() != me) || (m.mode() & 0o022 != 0 && !sticky) {
            anyhow::bail!(
                "refusing the {what} {}: the directory above it, {}, is owned by uid {} with mode {:04o}, so another user could replace it; use a directory inside directories only root or you can write",
                dir.display(),
                up.display(),
                m.uid(),
                m.mode() & 0o7777
            );
        }
    }
    Ok(canon)
}

/// The state directory: `explicit` (`--state-dir`), else `$POWERPERF_STATE_DIR`, else
/// [`ROOT_STATE_DIR`] for root, else `$XDG_RUNTIME_DIR`. Checked by [`private_dir`]
/// (created when missing, except `$XDG_RUNTIME_DIR`, which the login creates).
///
/// # Errors
/// No usable directory (the message names it and the fix).
pub fn state_dir(explicit: Option<&Path>) -> Result<PathBuf> {
    let dir = state_dir_unlogged(explicit)?;
    tracing::debug!(dir = %dir.display(), "state directory");
    Ok(dir)
}

fn state_dir_unlogged(explicit: Option<&Path>) -> Result<PathBuf> {
    if let Some(d) = explicit {
        return private_dir(d, true, "state directory (--state-dir)");
    }
    if let Some(d) = std::env::var_os(ENV_STATE_DIR).filter(|d| !d.is_empty()) {
        return private_dir(
            Path::new(&d),
            true,
            &format!("state directory (${ENV_STATE_DIR})"),
        );
    }
    if euid() == 0 {
        return private_dir(Path::new(ROOT_STATE_DIR), true, "state directory");
    }
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        Some(d) => private_dir(Path::new(&d), false, "state directory ($XDG_RUNTIME_DIR)"),
        None => anyhow::bail!(
            "no private directory for the restore record and the switch log: XDG_RUNTIME_DIR is not set (a systemd login sets it). Pass --state-dir DIR (a directory you own, mode 0700), or --restore-file PATH and --log PATH"
        ),
    }
}

/// Check an open file: a regular file with one link, owned by the effective uid, not
/// writable by group or others.
///
/// # Errors
/// What is wrong, naming `path`.
pub fn check_own_file(f: &File, path: &Path, what: &str) -> Result<()> {
    let m = f
        .metadata()
        .with_context(|| format!("cannot inspect the {what} {}", path.display()))?;
    let me = euid();
    if !m.file_type().is_file() {
        anyhow::bail!(
            "refusing the {what} {}: it is not a regular file",
            path.display()
        );
    }
    if m.uid() != me {
        anyhow::bail!(
            "refusing the {what} {}: it is owned by uid {}, not by uid {me} (this user), so someone else may have written it; check it and remove it, or use another path",
            path.display(),
            m.uid()
        );
    }
    if m.mode() & 0o022 != 0 {
        anyhow::bail!(
            "refusing the {what} {}: its mode {:04o} lets others write it; `chmod go-w {0}` after checking it",
            path.display(),
            m.mode() & 0o7777
        );
    }
    if m.nlink() != 1 {
        anyhow::bail!(
            "refusing the {what} {}: it has {} hard links (another name may point at another file); remove it or use another path",
            path.display(),
            m.nlink()
        );
    }
    Ok(())
}

fn nofollow_error(e: std::io::Error, path: &Path, what: &str) -> anyhow::Error {
    if e.raw_os_error() == Some(libc::ELOOP) {
        anyhow::anyhow!(
            "refusing the {what} {}: it is a symbolic link (someone may have planted it to make powerperf write elsewhere); remove it or use another path",
            path.display()
        )
    } else {
        anyhow::Error::new(e).context(format!("cannot open the {what} {}", path.display()))
    }
}

/// Open a file of ours for reading: `O_NOFOLLOW` (a symbolic link is refused),
/// `O_NONBLOCK` (a FIFO does not hang), then [`check_own_file`].
///
/// # Errors
/// As [`check_own_file`], and open errors (`NotFound` kept as the source).
pub fn open_own_read(path: &Path, what: &str) -> Result<File> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| nofollow_error(e, path, what))?;
    check_own_file(&f, path, what)?;
    Ok(f)
}

/// Open (create, mode 0600) a file for appending: `O_NOFOLLOW|O_APPEND|O_CREAT`; an
/// existing file must pass [`check_own_file`]. Returns the file and whether it is empty.
///
/// # Errors
/// A symbolic link, a file of someone else's, open errors; each names the path.
pub fn open_append(path: &Path, what: &str) -> Result<(File, bool)> {
    let f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| nofollow_error(e, path, what))?;
    check_own_file(&f, path, what)?;
    let empty = f.metadata().map(|m| m.len() == 0).unwrap_or(false);
    Ok((f, empty))
}

/// Create a new file, mode 0600: `O_NOFOLLOW|O_CREAT|O_EXCL` (nothing at `path` is
/// followed or replaced).
///
/// # Errors
/// `path` exists (`AlreadyExists` kept as the source), or cannot be created.
pub fn create_new(path: &Path) -> std::io::Result<File> {
    crate::safe_file::create_new_mode(path, 0o600)
}

/// Write `text` to `path` atomically and exclusively: a temporary file with an unpredictable
/// name is created `O_EXCL` next to it, written and synced, then hard-linked to `path`
/// (`link(2)` fails when `path` exists, even as a dangling symbolic link) and removed.
///
/// # Errors
/// `path` exists (the message says so), or I/O errors naming the path.
pub fn write_new_atomically(path: &Path, text: &str, what: &str) -> Result<()> {
    use std::io::Write as _;
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_else(|| "record".into());
    let mut last = None;
    for _ in 0..16 {
        let tmp = dir.join(format!(
            ".{name}.{}.{:016x}.tmp",
            std::process::id(),
            crate::safe_file::random_u64()
        ));
        let mut f = match create_new(&tmp) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                last = Some(e);
                continue;
            }
            Err(e) => {
                return Err(anyhow::Error::new(e)
                    .context(format!("cannot write the {what} {}", tmp.display())))
            }
        };
        let written = f
            .write_all(text.as_bytes())
            .and_then(|()| f.sync_all())
            .with_context(|| format!("cannot write the {what} {}", tmp.display()));
        drop(f);
        let linked = written.and_then(|()| {
            std::fs::hard_link(&tmp, path).map_err(|e| {
                if e.kind() == std::io::ErrorKind::AlreadyExists {
                    anyhow::anyhow!(
                        "a {what} is already at {} (another apply's, or a file put there): it was not replaced",
                        path.display()
                    )
                } else {
                    anyhow::Error::new(e)
                        .context(format!("cannot write the {what} {}", path.display()))
                }
            })
        });
        let _ = std::fs::remove_file(&tmp);
        return linked;
    }
    Err(anyhow::anyhow!(
        "cannot create a temporary file for the {what} in {}: {}",
        dir.display(),
        last.map(|e| e.to_string()).unwrap_or_default()
    ))
}

/// A process named by pid, start time (clock ticks after boot, `/proc/PID/stat` field 22)
/// and boot id, so that a reused pid or a reboot is told apart from the process itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessId {
    pub pid: u32,
    pub start_ticks: Option<u64>,
    pub boot_id: Option<String>,
}

/// The start time of `pid` in clock ticks after boot (`/proc/PID/stat` field 22).
pub fn process_start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // fields after `(comm)`: state is field 3, starttime field 22
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// This boot's id (`/proc/sys/kernel/random/boot_id`).
pub fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|s| s.trim().to_string())
}

impl ProcessId {
    /// This process.
    pub fn current() -> Self {
        let pid = std::process::id();
        ProcessId {
            pid,
            start_ticks: process_start_ticks(pid),
            boot_id: boot_id(),
        }
    }

    /// Whether the process is still running: same boot, the pid exists and has the same
    /// start time. Without a start time (a record of an older powerperf), a live pid counts
    /// as alive.
    pub fn is_alive(&self) -> bool {
        if self.pid == 0 || self.pid > i32::MAX as u32 {
            return false;
        }
        if let (Some(b), Some(now)) = (&self.boot_id, boot_id()) {
            if *b != now {
                return false;
            }
        }
        match (self.start_ticks, process_start_ticks(self.pid)) {
            (_, None) => false,
            (Some(t), Some(now)) => t == now,
            (None, Some(_)) => true,
        }
    }
}

/// An exclusive `flock` on a canonical sysfs root (its `sys/devices/system/cpu` directory,
/// or the root itself when that is missing), held until dropped. Every `apply`, `sweep` and
/// `apply --restore` on the same tree takes it, whatever its record path or user.
#[derive(Debug)]
pub struct SysfsLock {
    _file: File,
    /// The locked directory.
    pub path: PathBuf,
}

impl SysfsLock {
    /// Take the lock without waiting.
    ///
    /// # Errors
    /// The root cannot be resolved, or another process holds the lock (the message names its
    /// pid when `/proc/locks` shows it).
    pub fn acquire(sysfs_root: &Path) -> Result<Self> {
        use std::os::fd::AsRawFd;
        let canon = sysfs_root
            .canonicalize()
            .with_context(|| format!("cannot resolve the sysfs root {}", sysfs_root.display()))?;
        let cpu = canon.join("sys/devices/system/cpu");
        let path = match cpu.canonicalize() {
            Ok(p) if p.is_dir() && p.starts_with(&canon) => p,
            _ => canon,
        };
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY)
            .open(&path)
            .with_context(|| format!("cannot open {} to lock it", path.display()))?;
        // SAFETY: flock on a descriptor we own.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc != 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
                let who = file
                    .metadata()
                    .ok()
                    .and_then(|m| lock_holder(m.dev(), m.ino()))
                    .map(|p| format!("pid {p}"))
                    .unwrap_or_else(|| "another process".into());
                anyhow::bail!(
                    "another powerperf apply or sweep ({who}) is changing the CPU frequencies under {} (it holds the lock on {}): CPU frequency is node-wide, so only one may run at a time. Wait for it to end, or stop it (it restores its settings when it ends)",
                    sysfs_root.display(),
                    path.display()
                );
            }
            return Err(anyhow::Error::new(e).context(format!("cannot lock {}", path.display())));
        }
        tracing::debug!(lock = %path.display(), "holding the sysfs lock");
        Ok(SysfsLock { _file: file, path })
    }
}

/// The pid holding a `flock` on the file with `dev`/`ino`, from `/proc/locks`
/// (`1: FLOCK  ADVISORY  WRITE 1234 00:15:7 0 EOF`; device as hex major:minor).
fn lock_holder(dev: u64, ino: u64) -> Option<u32> {
    let text = std::fs::read_to_string("/proc/locks").ok()?;
    let (maj, min) = (libc::major(dev), libc::minor(dev));
    let want = format!("{maj:02x}:{min:02x}:{ino}");
    text.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        // a waiting lock has `->` after the number
        if f.get(1) != Some(&"FLOCK") || f.len() < 6 {
            return None;
        }
        (f[5] == want).then(|| f[4].parse().ok()).flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn private_dir_refuses_links_other_owners_and_open_modes() {
        let d = tempfile::tempdir().unwrap();
        let ok = d.path().join("state");
        // created 0700 when missing
        let c = private_dir(&ok, true, "state directory").unwrap();
        assert_eq!(
            std::fs::metadata(&c).unwrap().permissions().mode() & 0o777,
            0o700
        );
        // a symbolic link to it is refused
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&ok, &link).unwrap();
        let e = private_dir(&link, true, "state directory").unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        // group/other bits are refused
        std::fs::set_permissions(&ok, std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = private_dir(&ok, true, "state directory").unwrap_err();
        assert!(e.to_string().contains("mode 0755"), "{e}");
        // missing without create
        assert!(private_dir(&d.path().join("nope"), false, "x").is_err());
        // relative
        assert!(private_dir(Path::new("rel"), true, "x").is_err());
    }

    #[test]
    fn own_files_are_opened_without_following_links() {
        let d = tempfile::tempdir().unwrap();
        let target = d.path().join("target");
        std::fs::write(&target, "keep").unwrap();
        let link = d.path().join("log");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let e = open_append(&link, "switch log").unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        // a hard link to the file: two links, refused
        let hard = d.path().join("hard");
        std::fs::hard_link(&target, &hard).unwrap();
        let e = open_append(&hard, "switch log").unwrap_err();
        assert!(e.to_string().contains("hard links"), "{e}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
        // a new file: created 0600 and empty
        let (_, empty) = open_append(&d.path().join("new.log"), "switch log").unwrap();
        assert!(empty);
        // exclusive atomic write: a dangling link at the path is not followed or replaced
        let rec = d.path().join("rec.toml");
        std::os::unix::fs::symlink(d.path().join("elsewhere"), &rec).unwrap();
        assert!(write_new_atomically(&rec, "x", "restore record").is_err());
        assert!(!d.path().join("elsewhere").exists());
    }

    #[test]
    fn this_process_is_alive_and_a_reused_pid_is_not() {
        let me = ProcessId::current();
        assert!(me.start_ticks.is_some());
        assert!(me.is_alive());
        let reused = ProcessId {
            start_ticks: me.start_ticks.map(|t| t + 1),
            ..me.clone()
        };
        assert!(!reused.is_alive());
        let other_boot = ProcessId {
            boot_id: Some("not-this-boot".into()),
            ..me.clone()
        };
        assert!(!other_boot.is_alive());
        assert!(!ProcessId {
            pid: i32::MAX as u32 - 1,
            start_ticks: None,
            boot_id: None
        }
        .is_alive());
    }

    #[test]
    fn the_lock_is_per_canonical_root() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("root");
        std::fs::create_dir_all(root.join("sys/devices/system/cpu")).unwrap();
        let alias = d.path().join("alias");
        std::os::unix::fs::symlink(&root, &alias).unwrap();
        let l = SysfsLock::acquire(&root).unwrap();
        let e = SysfsLock::acquire(&alias).unwrap_err();
        assert!(
            e.to_string()
                .contains(&format!("pid {}", std::process::id())),
            "{e}"
        );
        drop(l);
        SysfsLock::acquire(&alias).unwrap();
    }
}
