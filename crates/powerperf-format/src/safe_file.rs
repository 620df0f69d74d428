//! Files created without following links (issue 18): a run directory may be writable by
//! other users (a shared /tmp path, a directory someone else made), and powerperf may run as
//! root, so a name planted there as a symbolic link must never lead a write elsewhere.
//! Files are created with `O_CREAT|O_EXCL|O_NOFOLLOW`; temporary files get unpredictable
//! names.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Create `path` as a new file (`O_CREAT|O_EXCL|O_NOFOLLOW`, mode 0644 less the umask): an
/// existing file or link at the path makes it fail (`AlreadyExists`) instead of being
/// opened or followed.
///
/// # Errors
/// The open's error.
pub fn create_new(path: &Path) -> io::Result<File> {
    create_new_mode(path, 0o644)
}

/// [`create_new`] with the permission bits `mode` (less the umask), e.g. 0600 for root's
/// private state.
///
/// # Errors
/// The open's error.
pub fn create_new_mode(path: &Path, mode: u32) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// Replace whatever file or link is at `path` (the link itself is removed, its target is not
/// touched) by a new file created with [`create_new`].
///
/// # Errors
/// A directory at `path`, or the unlink's or open's error.
pub fn replace(path: &Path) -> io::Result<File> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} is a directory", path.display()),
            ))
        }
        Ok(_) => std::fs::remove_file(path)?,
        Err(_) => {}
    }
    create_new(path)
}

/// 64 unpredictable bits from getrandom(2) (the clock and pid where it fails), for the
/// names of temporary files.
pub fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: b has room for the 8 bytes asked for.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n == b.len() as isize {
        u64::from_ne_bytes(b)
    } else {
        monotonic_ns() ^ (u64::from(std::process::id()) << 32)
    }
}

/// CLOCK_MONOTONIC in ns (as `powerperf::collect::monotonic_ns`), for [`random_u64`]'s
/// fallback.
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// 16 hex digits of [`random_u64`].
fn random_suffix() -> String {
    format!("{:016x}", random_u64())
}

/// Write `bytes` to `dir/name` atomically: into a new temporary file of an unpredictable
/// name in `dir` (`.NAME.<random>.tmp`, [`create_new`]), then renamed over `name` (rename
/// replaces a link at `name` itself and does not follow it).
///
/// # Errors
/// I/O errors; the temporary file is removed.
pub fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
    for _ in 0..16 {
        let tmp = dir.join(format!(".{name}.{}.tmp", random_suffix()));
        let mut f = match create_new(&tmp) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            r => r?,
        };
        let r = f
            .write_all(bytes)
            .and_then(|_| f.flush())
            .and_then(|_| std::fs::rename(&tmp, dir.join(name)));
        if r.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        return r;
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!("no temporary file could be created in {}", dir.display()),
    ))
}

/// A file of `len` zero bytes in `dir` that has no name (`O_TMPFILE`, else created with
/// [`create_new`] and unlinked at once): it holds the space while it is open and gives it
/// back when closed, also when the process is killed, and leaves nothing behind.
///
/// # Errors
/// No file could be created, or the bytes not written (a full disk).
pub fn anonymous_reserve(dir: &Path, len: usize) -> io::Result<File> {
    let mut f = anonymous(dir)?;
    f.write_all(&vec![0u8; len])?;
    f.sync_data()?;
    Ok(f)
}

/// A new empty file in `dir` that has no name, open for reading and writing (`O_TMPFILE`,
/// else created `O_CREAT|O_EXCL|O_NOFOLLOW` under a random name and unlinked at once): its
/// space is given back when it is closed, also when the process is killed, and it leaves
/// nothing behind.
///
/// # Errors
/// No file could be created.
pub fn anonymous(dir: &Path) -> io::Result<File> {
    match OpenOptions::new()
        .read(true)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_TMPFILE | libc::O_CLOEXEC)
        .open(dir)
    {
        Ok(f) => Ok(f),
        Err(_) => {
            let p = dir.join(format!(".reserve.{}", random_suffix()));
            let f = OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&p)?;
            std::fs::remove_file(&p)?;
            Ok(f)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_not_followed() {
        let d = tempfile::tempdir().unwrap();
        let target = d.path().join("target");
        std::fs::write(&target, "keep").unwrap();
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(create_new(&link).is_err());
        replace(&link).unwrap().write_all(b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
        assert_eq!(std::fs::read_to_string(&link).unwrap(), "new");
        let planted = d.path().join("run.toml");
        std::os::unix::fs::symlink(&target, &planted).unwrap();
        write_atomic(d.path(), "run.toml", b"x").unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
        assert_eq!(std::fs::read_to_string(&planted).unwrap(), "x");
        let r = anonymous_reserve(d.path(), 4096).unwrap();
        assert_eq!(r.metadata().unwrap().len(), 4096);
        let names: Vec<_> = std::fs::read_dir(d.path()).unwrap().collect();
        assert_eq!(names.len(), 3, "{names:?}");
    }
}
