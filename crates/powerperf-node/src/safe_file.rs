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
        powerperf_rt::now_ns() ^ (u64::from(std::process::id()) << 32)
    }
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

/// Open a file that a user may have written for reading, as every reader of such files does
/// (issue 38): `O_NONBLOCK` (a FIFO does not hang the open), `O_NOFOLLOW` (a symbolic link
/// at the last component is refused, not followed), `O_NOCTTY`, then `fstat` on the open
/// file: it must be a regular file. `what` names the file in errors (`run.toml`, `plan`).
///
/// # Errors
/// Each names the path, what it is, and the fix: a symbolic link, not a regular file (a
/// FIFO, a device, a directory, a socket), the open's error.
pub fn open_regular(path: &Path, what: &str) -> anyhow::Result<File> {
    use std::os::unix::fs::FileTypeExt as _;
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) {
                anyhow::anyhow!(
                    "the {what} {} is a symbolic link; powerperf does not follow links in files a user can write: put the file itself there",
                    path.display()
                )
            } else {
                anyhow::Error::new(e).context(format!("cannot open the {what} {}", path.display()))
            }
        })?;
    let m = f.metadata().map_err(|e| {
        anyhow::Error::new(e).context(format!("cannot stat the {what} {}", path.display()))
    })?;
    let t = m.file_type();
    if !t.is_file() {
        let kind = if t.is_fifo() {
            "a FIFO"
        } else if t.is_dir() {
            "a directory"
        } else if t.is_char_device() || t.is_block_device() {
            "a device"
        } else if t.is_socket() {
            "a socket"
        } else {
            "not a regular file"
        };
        anyhow::bail!(
            "the {what} {} is {kind}, not a regular file; put a regular file there",
            path.display()
        );
    }
    Ok(f)
}

/// Read a file that a user may have written ([`open_regular`]), at most `max` bytes: a file
/// whose `fstat` size is larger is refused before it is read, and one that grows past
/// `max` while read is refused too, so memory stays under `max` whatever is there (a
/// sparse file of many GB).
///
/// # Errors
/// As [`open_regular`]; larger than `max` (the size, the limit, the file); read errors.
pub fn read_bounded(path: &Path, max: u64, what: &str) -> anyhow::Result<Vec<u8>> {
    use anyhow::Context as _;
    use std::io::Read as _;
    let f = open_regular(path, what)?;
    let too_big = |n: u64| {
        anyhow::anyhow!(
            "the {what} {} has {n} bytes, more than the {max} a {what} may have; it is not read (is it the file powerperf wrote?)",
            path.display()
        )
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    if len > max {
        return Err(too_big(len));
    }
    let mut buf = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    f.take(max + 1)
        .read_to_end(&mut buf)
        .with_context(|| format!("cannot read the {what} {}", path.display()))?;
    if buf.len() as u64 > max {
        return Err(too_big(buf.len() as u64));
    }
    Ok(buf)
}

/// [`read_bounded`] as UTF-8 text.
///
/// # Errors
/// As [`read_bounded`], and text that is not UTF-8.
pub fn read_to_string_bounded(path: &Path, max: u64, what: &str) -> anyhow::Result<String> {
    String::from_utf8(read_bounded(path, max, what)?)
        .map_err(|e| anyhow::anyhow!("the {what} {} is not UTF-8 text: {e}", path.display()))
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

    #[test]
    fn bounded_reads_refuse_links_fifos_and_large_files() {
        let d = tempfile::tempdir().unwrap();
        let ok = d.path().join("run.toml");
        std::fs::write(&ok, "a = 1\n").unwrap();
        assert_eq!(
            read_to_string_bounded(&ok, 6, "run.toml").unwrap(),
            "a = 1\n"
        );
        let e = read_bounded(&ok, 5, "run.toml").unwrap_err().to_string();
        assert!(e.contains("6 bytes, more than the 5"), "{e}");
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&ok, &link).unwrap();
        let e = read_bounded(&link, 64, "run.toml").unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");
        let fifo = d.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = read_bounded(&fifo, 64, "run.toml").unwrap_err().to_string();
        assert!(e.contains("a FIFO"), "{e}");
        let e = read_bounded(d.path(), 64, "run.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("a directory"), "{e}");
        // a sparse file of 6 GB: refused from its size, nothing allocated
        let big = d.path().join("big");
        std::fs::File::create(&big)
            .unwrap()
            .set_len(6 << 30)
            .unwrap();
        let e = read_bounded(&big, 1 << 20, "run.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("6442450944 bytes"), "{e}");
    }
}
