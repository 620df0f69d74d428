//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::PathBuf;

/// The directory holding `libpowerperf_rt.so` of this target directory: target/<profile>
/// after a `cargo build`, else target/<profile>/deps, where `cargo test --workspace` leaves
/// the cdylib on a fresh target directory (it copies it up to target/<profile> only for
/// `cargo build`); `powerperf collect` looks in both (`collect::rt_library`). Prints
/// `skipped: …` and returns None when neither has it.
pub fn rt_lib_dir() -> Option<PathBuf> {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent()?.to_path_buf();
    let profile = deps.parent()?.to_path_buf();
    for d in [&profile, &deps] {
        if d.join("libpowerperf_rt.so").is_file() {
            return Some(d.clone());
        }
    }
    println!(
        "skipped: libpowerperf_rt.so is in neither {} nor {} (run `cargo test --workspace`, which builds powerperf-rt)",
        profile.display(),
        deps.display()
    );
    None
}

/// Whether `setpriv(1)` can run a command as `nobody` here (root with util-linux's setpriv).
/// Prints `skipped: …` when it cannot.
pub fn can_run_as_nobody() -> bool {
    if unsafe { libc::geteuid() } != 0 {
        println!("skipped: not root, so no other user can be taken on");
        return false;
    }
    if std::process::Command::new("setpriv")
        .arg("--version")
        .output()
        .is_err()
    {
        println!("skipped: setpriv(1) is not available");
        return false;
    }
    true
}

/// A command that runs `program` as `nobody` (uid and gid 65534, no supplementary groups)
/// through setpriv.
pub fn as_nobody(program: impl AsRef<std::ffi::OsStr>) -> std::process::Command {
    let mut c = std::process::Command::new("setpriv");
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(program);
    c
}

/// Run `sh -c script` as `nobody`; panics with its stderr when it fails.
pub fn sh_as_nobody(script: &str) {
    let out = as_nobody("sh").args(["-c", script]).output().unwrap();
    assert!(
        out.status.success(),
        "as nobody: {script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A temporary directory that other users can enter (mode 0755, under /tmp): CI's own
/// temporary and target directories are under /root (0700), where `nobody` cannot reach.
pub fn shared_tempdir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let d = tempfile::Builder::new()
        .prefix("powerperf-test-")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    d
}

/// A directory in `parent` owned by `nobody` (as a directory another user made for the run,
/// or left behind), so that `nobody` can plant files and links in it.
pub fn dir_owned_by_nobody(parent: &std::path::Path, name: &str) -> PathBuf {
    let d = parent.join(name);
    std::fs::create_dir_all(&d).unwrap();
    std::os::unix::fs::chown(&d, Some(65534), Some(65534)).unwrap();
    d
}
