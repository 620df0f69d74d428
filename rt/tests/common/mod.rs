//! Helpers shared by the integration tests: temp dirs, the built cdylib, compilers.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use powerperf_rt::events::{self, Interval, Stats};

/// Repository path of the rt crate.
pub fn rt_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A fresh empty directory under the system temp dir.
pub fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("pp-rt-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Directory holding `libpowerperf_rt.so` built by this `cargo test`: target/<profile>
/// after a `cargo build`, else target/<profile>/deps, where `cargo test` leaves the cdylib
/// on a fresh target directory (it copies it up only for `cargo build`).
pub fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap().to_path_buf();
    let profile_dir = deps.parent().unwrap().to_path_buf();
    for d in [&profile_dir, &deps] {
        if d.join("libpowerperf_rt.so").exists() {
            return d.clone();
        }
    }
    panic!(
        "libpowerperf_rt.so is in neither {} nor {} (cargo test builds the cdylib)",
        profile_dir.display(),
        deps.display()
    );
}

/// Whether `tool --version` runs; prints `skipped: <reason>` when it does not.
pub fn have(tool: &str, test: &str) -> bool {
    let ok = Command::new(tool)
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !ok {
        eprintln!("skipped: {test}: `{tool}` is not installed (apt-get install {tool})");
    }
    ok
}

pub fn run_ok(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Compile a C file against the header and the cdylib (rpath set).
pub fn compile_c(src: &Path, exe: &Path) {
    let lib = lib_dir();
    run_ok(
        Command::new("gcc")
            .args(["-O2", "-Wall", "-Wextra", "-Werror", "-pthread", "-I"])
            .arg(rt_dir().join("include"))
            .arg(src)
            .arg("-o")
            .arg(exe)
            .arg("-L")
            .arg(&lib)
            .arg(format!("-Wl,-rpath,{}", lib.display()))
            .arg("-lpowerperf_rt"),
    );
}

/// Read a run directory: intervals and stats, asserting no truncation.
pub fn read_run(run: &Path) -> (Vec<events::RegionEvent>, Vec<Interval>, Vec<Stats>) {
    let r = events::read_dir_report(run).unwrap();
    assert!(r.truncated_files.is_empty(), "{:?}", r.truncated_files);
    let iv = events::intervals(&r.events);
    let st = events::stats(&iv);
    (r.events, iv, st)
}

/// Calls of `path` summed over threads.
pub fn calls(st: &[Stats], path: &str) -> u64 {
    st.iter().filter(|s| s.path == path).map(|s| s.calls).sum()
}

/// Threads on which `path` ran.
pub fn threads(st: &[Stats], path: &str) -> usize {
    st.iter().filter(|s| s.path == path).count()
}
