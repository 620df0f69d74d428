//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::PathBuf;

pub mod apply;
pub mod daemon;

/// uid and gid of the unprivileged user the attack tests act as (`nobody` on Debian/Ubuntu).
pub const NOBODY: u32 = 65534;

/// Whether this test process runs as root (apply's attack tests need it: powerperf runs as
/// root and the attacker as [`NOBODY`]).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// True when running as root with setpriv(1) available; otherwise prints `skipped: TEST: …`
/// (CI runs as root) and returns false.
pub fn root_with_setpriv(test: &str) -> bool {
    if !is_root() {
        println!("skipped: {test}: needs root (powerperf must run as root, the attacker as uid {NOBODY})");
        return false;
    }
    if std::process::Command::new("setpriv")
        .arg("--version")
        .output()
        .is_err()
    {
        println!("skipped: {test}: running as root and setpriv(1) is not available");
        return false;
    }
    true
}

/// A command that runs `prog` as uid/gid [`NOBODY`] with no supplementary groups, through
/// `setpriv --reuid --regid --clear-groups`, from `/` (the test's working directory may be
/// unreadable for that user).
pub fn as_nobody(prog: impl AsRef<std::ffi::OsStr>) -> std::process::Command {
    let mut c = std::process::Command::new("setpriv");
    c.arg(format!("--reuid={NOBODY}"))
        .arg(format!("--regid={NOBODY}"))
        .arg("--clear-groups")
        .arg(prog)
        .current_dir("/");
    c
}

/// Run a shell script as [`NOBODY`] (see [`as_nobody`]); panics with its stderr when it fails.
pub fn sh_as_nobody(script: &str) {
    let o = as_nobody("sh").args(["-c", script]).output().unwrap();
    assert!(
        o.status.success(),
        "the script run as uid {NOBODY} failed: {}\n{script}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// chown `path` to [`NOBODY`].
pub fn chown_nobody(path: &std::path::Path) {
    std::os::unix::fs::chown(path, Some(NOBODY), Some(NOBODY)).unwrap();
}

/// The powerperf binary at a path every user can read: a hard link (or a copy) in `dir`,
/// which is made 0755. CI's target directory is under /root (0700), so a process that has
/// dropped to another user cannot execute it there.
pub fn world_readable_bin(dir: &std::path::Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let bin = dir.join("powerperf");
    if !bin.exists() {
        let src = assert_cmd::cargo::cargo_bin("powerperf");
        if std::fs::hard_link(&src, &bin).is_err() {
            std::fs::copy(&src, &bin).unwrap();
        }
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

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

/// The bundled datasets: `datasets/` of this repository, the import specs with the public
/// measurement sets beside them (`datasets/README.md`). Always present: the tests that need
/// real data read it and never skip for lack of it.
pub fn datasets() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("datasets")
}

/// The `powerperf` binary under test, as an assert_cmd command.
pub fn powerperf() -> assert_cmd::Command {
    assert_cmd::Command::cargo_bin("powerperf").unwrap()
}

/// Run `cmd`, which must exit 0, and parse its stdout as one JSON value.
pub fn json_stdout(cmd: &mut assert_cmd::Command) -> serde_json::Value {
    let out = cmd.assert().success().get_output().stdout.clone();
    serde_json::from_slice(&out).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}",
            String::from_utf8_lossy(&out)
        )
    })
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
    chown_nobody(&d);
    d
}

/// Copy `from` (a file, or a directory tree) to `to`, creating parent directories: fixture
/// sysfs trees and runs are copied before a test changes them.
pub fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
    if from.is_dir() {
        std::fs::create_dir_all(to).unwrap();
        for e in std::fs::read_dir(from).unwrap() {
            let e = e.unwrap();
            copy_tree(&e.path(), &to.join(e.file_name()));
        }
    } else {
        if let Some(p) = to.parent() {
            std::fs::create_dir_all(p).unwrap();
        }
        std::fs::copy(from, to)
            .unwrap_or_else(|e| panic!("copy {} -> {}: {e}", from.display(), to.display()));
    }
}

/// Every file under `dir`, by its path relative to `dir`, with its bytes: a tree is compared
/// before and after a test writes to it (sysfs fixture copies put back byte for byte).
pub fn files(dir: &std::path::Path) -> std::collections::BTreeMap<PathBuf, Vec<u8>> {
    fn walk(
        base: &std::path::Path,
        d: &std::path::Path,
        m: &mut std::collections::BTreeMap<PathBuf, Vec<u8>>,
    ) {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(base, &p, m);
            } else {
                m.insert(
                    p.strip_prefix(base).unwrap().to_path_buf(),
                    std::fs::read(&p).unwrap(),
                );
            }
        }
    }
    let mut m = std::collections::BTreeMap::new();
    walk(dir, dir, &mut m);
    m
}

/// `shared/corpora` (PAPI, LIKWID, PerfExpert and perf definition files; GPL among them,
/// so never copied into the repository): `../shared` beside the checkout, or further up
/// for a nested git worktree. `None`, after printing `skipped: …`, when absent.
pub fn shared_corpora() -> Option<PathBuf> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let p = root
        .ancestors()
        .skip(1)
        .map(|a| a.join("shared/corpora"))
        .find(|p| p.is_dir())
        .unwrap_or_else(|| root.join("../shared/corpora"));
    if p.is_dir() {
        Some(p)
    } else {
        println!(
            "skipped: {} is absent (the shared corpora are not on this machine)",
            p.display()
        );
        None
    }
}

/// A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0, then released), for
/// the real servers the tests start (Prometheus, slurmctld, slurmd).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `powerperf report --format json JOB`: its output and its JSON (the caller checks the
/// exit status: a job with an unreadable shard exits 1 and still reports the others).
pub fn report_json(job: &std::path::Path) -> (std::process::Output, serde_json::Value) {
    let o = std::process::Command::new(assert_cmd::cargo::cargo_bin("powerperf"))
        .args(["report", "--format", "json"])
        .arg(job)
        .output()
        .unwrap();
    let v = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "report JSON of {}: {e}\nstderr: {}",
            job.display(),
            String::from_utf8_lossy(&o.stderr)
        )
    });
    (o, v)
}

/// A client of apply's controller socket, as powerperf-rt and the NVTX injection speak to
/// it (`B name` / `E name`, one ack byte each): it records the fake GPU's lock in each
/// region.
pub const GPU_REGIONS_PY: &str = r#"
import os, socket, sys
gpu, seen = sys.argv[1], open(sys.argv[2], "w")
s = socket.socket(socket.AF_UNIX)
s.connect(os.environ["POWERPERF_CTL_SOCKET"])
def lock():
    return open(gpu + "/gpu0/locked_clocks_mhz").read().strip()
def say(line):
    s.sendall((line + "\n").encode())
    assert s.recv(1) == b"K", line
seen.write("start " + lock() + "\n")
say("B dgemm"); seen.write("dgemm " + lock() + "\n")
say("B inner"); seen.write("inner " + lock() + "\n")
say("E inner"); say("E dgemm"); seen.write("between " + lock() + "\n")
for _ in range(20):
    say("B stream"); say("E stream")
say("B stream"); seen.write("stream " + lock() + "\n")
say("E stream"); seen.write("end " + lock() + "\n")
"#;

/// A job plan (scope = "job") for GPU 0 whose `core_freq_mhz` is `default_mhz` outside every
/// region and each region's clock inside it.
pub fn gpu_job_plan(default_mhz: f64, regions: &[(&str, f64)]) -> String {
    let mut t = format!(
        "[plan]\nobjective = \"energy\"\nmodel = \"hand-written\"\ncreated = \"2026-01-01T00:00:00Z\"\nscope = \"job\"\ntransition_latency_s = 0.0\ntransition_energy_j = 0.0\nmin_region_s = 0.0\n\n[[device]]\nkind = \"gpu\"\nindex = 0\nknobs = [\"core_freq_mhz\"]\ndefault = {{ core_freq_mhz = {default_mhz:.1} }}\n\n"
    );
    for (name, mhz) in regions {
        t.push_str(&format!(
            "[[region]]\nname = \"{name}\"\nsetting = {{ core_freq_mhz = {mhz:.1} }}\ntime_s = 1.0\nenergy_j = 1.0\npower_w = 1.0\nreference_time_s = 1.0\nreference_energy_j = 1.0\nenergy_saving = 0.0\nslowdown = 0.0\n\n"
        ));
    }
    t
}
