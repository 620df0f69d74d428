//! Build script of the `powerperf` package (the CLI; the bundled data are embedded by
//! crates/powerperf-core/build.rs).
//!
//! **A position-dependent `powerperf` on x86-64 Linux.** Why: a PIE `powerperf` (about
//! 100 MB, 128,000 relative relocations, 2.4 MB of `.data.rel.ro`) spends about 3 ms of
//! CPU at every start applying relocations and copying the pages they touch (`perf stat
//! -r 30 powerperf --version`: 5.0 ms task-clock as PIE, 1.8 ms without). That start-up is
//! part of powerperf's own CPU time under `collect` (issue 4's ≤ 0.5 % of the program's),
//! once per rank under srun or mpirun. The cost: the main executable's code is not
//! address-randomised (libraries, stack and heap still are); docs/overhead.md says so.
//! `POWERPERF_PIE=1` at build time keeps PIE.

fn main() {
    println!("cargo:rerun-if-env-changed=POWERPERF_PIE");
    println!("cargo:rerun-if-changed=build.rs");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    let keep_pie = std::env::var("POWERPERF_PIE").is_ok_and(|v| v == "1");
    if os == "linux" && arch == "x86_64" && env == "gnu" && !keep_pie {
        println!("cargo:rustc-link-arg-bin=powerperf=-no-pie");
    }
}
