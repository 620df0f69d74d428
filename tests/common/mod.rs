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

/// The bundled datasets: `datasets/` of this repository, the import specs with the public
/// measurement sets beside them (`datasets/README.md`). Always present: the tests that need
/// real data read it and never skip for lack of it.
pub fn datasets() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("datasets")
}
