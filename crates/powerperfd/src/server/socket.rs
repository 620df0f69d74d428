//! The control socket: its directory checked or created, the socket bound 0666 (clients are
//! identified by SO_PEERCRED, not by the file's mode).

use anyhow::{Context, Result};
use std::os::unix::net::UnixListener;
use std::path::Path;

/// Create the socket's directory (0755, when missing) and bind the socket (0666). The
/// directory must be a real directory of this user that nobody else can write; a stale
/// socket at the path is replaced, anything else there is refused.
///
/// # Errors
/// As above, naming the path and the fix.
pub fn bind_socket(path: &Path) -> Result<UnixListener> {
    use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .context("the socket path has no directory: give an absolute path")?;
    if !path.is_absolute() {
        anyhow::bail!("the socket {} is not an absolute path", path.display());
    }
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::fs::DirBuilder::new()
            .mode(0o755)
            .create(dir)
            .with_context(|| format!("cannot create the socket directory {}", dir.display()))?,
        Err(e) => {
            return Err(anyhow::Error::new(e).context(format!("cannot inspect {}", dir.display())))
        }
        Ok(_) => {}
    }
    let m = std::fs::symlink_metadata(dir)?;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if !m.is_dir() || m.uid() != me || m.mode() & 0o022 != 0 {
        anyhow::bail!(
            "refusing the socket directory {}: it must be a real directory owned by uid {me} that nobody else can write (it is {}owned by uid {} with mode {:04o}); remove it and let powerperfd create it, or use another --socket",
            dir.display(),
            if m.file_type().is_symlink() { "a symbolic link " } else { "" },
            m.uid(),
            m.mode() & 0o7777
        );
    }
    if let Ok(old) = std::fs::symlink_metadata(path) {
        if old.file_type().is_socket() {
            std::fs::remove_file(path)
                .with_context(|| format!("cannot remove the stale socket {}", path.display()))?;
        } else {
            anyhow::bail!(
                "refusing to replace {}: it is not a socket; remove it or use another --socket",
                path.display()
            );
        }
    }
    let l = UnixListener::bind(path).with_context(|| format!("cannot bind {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))
        .with_context(|| format!("cannot chmod 0666 {}", path.display()))?;
    Ok(l)
}
