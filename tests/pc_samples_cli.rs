//! CPU PC samples end to end (issue 4): a C program with two functions of known share
//! (hot() runs 3x the iterations of cold()) and regions around them runs under
//! `powerperf collect --pc-sampling cpu`; pc_samples.parquet, run.toml and `report` are
//! checked. cpu-clock sampling works without hardware counters (this VM has none).

mod common;

use assert_cmd::Command;
use powerperf_core::collect::pc_samples::{self, PcRow};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn lib_dir() -> Option<PathBuf> {
    common::rt_lib_dir()
}

fn have_gcc() -> bool {
    let ok = std::process::Command::new("gcc")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        println!("skipped: `gcc` is not installed (apt-get install gcc)");
    }
    ok
}

/// perf_event sampling may be refused (a container without perf_event_open).
fn can_sample() -> bool {
    let p = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok());
    if p.is_none() {
        println!("skipped: no /proc/sys/kernel/perf_event_paranoid (no perf_event here)");
        return false;
    }
    true
}

/// Line numbers of the lines of `src` containing `marker`.
fn line_of(src: &str, marker: &str) -> u32 {
    src.lines().position(|l| l.contains(marker)).unwrap() as u32 + 1
}

fn build(lib: &Path, dir: &Path) -> PathBuf {
    let exe = dir.join("hot_cold");
    let out = std::process::Command::new("gcc")
        .args(["-O2", "-g", "-pthread", "-I"])
        .arg(root().join("rt/include"))
        .arg(root().join("tests/fixtures/pc/hot_cold.c"))
        .arg("-o")
        .arg(&exe)
        .arg("-L")
        .arg(lib)
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-lpowerperf_rt")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "gcc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

#[test]
fn hot_function_tops_the_pc_samples_with_its_share_line_and_region() {
    let Some(lib) = lib_dir() else { return };
    if !have_gcc() || !can_sample() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let exe = build(&lib, dir.path());
    let run = dir.path().join("run");
    Command::cargo_bin("powerperf")
        .unwrap()
        .args([
            "collect",
            "-q",
            "--nvml",
            "off",
            "--pc-sampling",
            "cpu",
            "--sample-freq",
            "999",
            "-o",
        ])
        .arg(&run)
        .arg("--")
        .arg(&exe)
        .arg("1")
        .assert()
        .success();
    let meta = powerperf_format::run::RunMeta::read(&run).unwrap();
    let ps = meta.pc_sampling.clone().expect("[pc_sampling] in run.toml");
    assert!(ps.status.has_value(), "{ps:?} notes {:?}", meta.notes);
    assert_eq!(ps.frequency_hz, 999);
    assert!(ps.event == "cycles" || ps.event == "cpu-clock", "{ps:?}");
    let rows: Vec<PcRow> = pc_samples::read(&run).unwrap().expect("pc_samples.parquet");
    let total: u64 = rows.iter().map(|r| r.samples).sum();
    assert_eq!(total, ps.samples, "every sample read is in the table");
    let sum = |f: &str| -> u64 {
        rows.iter()
            .filter(|r| r.function == f)
            .map(|r| r.samples)
            .sum()
    };
    let (hot, cold) = (sum("hot"), sum("cold"));
    // Hundreds of samples for a run of about a second at 999 Hz.
    assert!(hot + cold >= 100, "hot {hot} cold {cold}: {rows:#?}");
    let share = hot as f64 / (hot + cold) as f64;
    assert!(
        (0.6..=0.9).contains(&share),
        "hot share {share:.3} (expected about 0.75): hot {hot} cold {cold}"
    );
    let top = pc_samples::top_functions(&rows, 5);
    assert_eq!(top[0].function, "hot", "{top:#?}");
    assert!(
        top[0].overhead_pct > 50.0,
        "hot overhead {}",
        top[0].overhead_pct
    );

    // Source lines: the hottest line of each function is its loop (gcc may put a sample on
    // the loop's `for` line or on its body).
    let src = std::fs::read_to_string(root().join("tests/fixtures/pc/hot_cold.c")).unwrap();
    let (hot_line, cold_line) = (line_of(&src, "HOT LOOP"), line_of(&src, "COLD LOOP"));
    let t = &top[0];
    assert!(
        t.file.as_deref().is_some_and(|f| f.ends_with("hot_cold.c")),
        "{t:?}"
    );
    let l = t.line.unwrap();
    assert!(
        (hot_line - 3..=hot_line + 2).contains(&l),
        "hot's hottest line {l}, loop at {hot_line}"
    );
    let c = top.iter().find(|f| f.function == "cold").unwrap();
    let l = c.line.unwrap();
    assert!(
        (cold_line - 3..=cold_line + 2).contains(&l),
        "cold's hottest line {l}, loop at {cold_line}"
    );
    assert!(
        t.module
            .as_deref()
            .is_some_and(|m| m.ends_with("/hot_cold")),
        "{t:?}"
    );

    // Regions: hot runs in compute/hot on the main thread, cold in `cold` on another.
    let in_region = |f: &str, region: &str| -> (u64, u64) {
        let of_f: Vec<&PcRow> = rows.iter().filter(|r| r.function == f).collect();
        (
            of_f.iter()
                .filter(|r| r.region.as_deref() == Some(region))
                .map(|r| r.samples)
                .sum(),
            of_f.iter().map(|r| r.samples).sum(),
        )
    };
    let (h_in, h_all) = in_region("hot", "compute/hot");
    let (c_in, c_all) = in_region("cold", "cold");
    assert_eq!(h_in, h_all, "every hot sample is in compute/hot: {rows:#?}");
    assert_eq!(c_in, c_all, "every cold sample is in cold: {rows:#?}");
    let hot_tids: Vec<u32> = rows
        .iter()
        .filter(|r| r.function == "hot")
        .map(|r| r.tid)
        .collect();
    let cold_tids: Vec<u32> = rows
        .iter()
        .filter(|r| r.function == "cold")
        .map(|r| r.tid)
        .collect();
    assert!(
        hot_tids.iter().all(|t| !cold_tids.contains(t)),
        "hot and cold ran on different threads"
    );
    assert!(rows
        .iter()
        .all(|r| r.device == "cpu" && r.stall_reason.is_none()));

    // report: the text section and JSON.
    let out = Command::cargo_bin("powerperf")
        .unwrap()
        .arg("report")
        .arg(&run)
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("Top functions (PC samples)"), "{text}");
    let hot_row = text
        .lines()
        .find(|l| l.contains(" hot ") && l.contains('%'))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(hot_row.contains("hot_cold.c:"), "{hot_row}");
    assert!(text.contains("compute/hot"), "{text}");
    let json = Command::cargo_bin("powerperf")
        .unwrap()
        .args(["report", "--format", "json"])
        .arg(&run)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v["pc_samples"]["top_functions"][0]["function"], "hot");
    assert_eq!(v["pc_samples"]["samples"], total);
}

/// Sum of the samples of function `f`.
fn samples_of(rows: &[PcRow], f: &str) -> u64 {
    rows.iter()
        .filter(|r| r.function == f)
        .map(|r| r.samples)
        .sum()
}

/// `-p PID`, as `perf record -p`: a process that was running before collect started is
/// sampled on all its threads, and its functions are named from the mappings that existed
/// then (read from /proc/PID/maps, since the kernel reports only later mmaps).
#[test]
fn pc_sampling_attaches_to_a_running_process() {
    let Some(lib) = lib_dir() else { return };
    if !have_gcc() || !can_sample() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let exe = build(&lib, dir.path());
    // Not under collect: POWERPERF_RUN_DIR unset, the region markers are no-ops.
    let mut child = std::process::Command::new(&exe)
        .arg("1")
        .env_remove("POWERPERF_RUN_DIR")
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(100));
    let run = dir.path().join("run");
    Command::cargo_bin("powerperf")
        .unwrap()
        .args([
            "collect",
            "-q",
            "--nvml",
            "off",
            "--pc-sampling",
            "cpu",
            "-p",
        ])
        .arg(child.id().to_string())
        .arg("-o")
        .arg(&run)
        .assert()
        .success();
    let _ = child.wait();
    let meta = powerperf_format::run::RunMeta::read(&run).unwrap();
    let ps = meta.pc_sampling.expect("[pc_sampling]");
    assert!(ps.status.has_value(), "{ps:?} notes {:?}", meta.notes);
    let rows: Vec<PcRow> = pc_samples::read(&run).unwrap().expect("pc_samples.parquet");
    let (hot, cold) = (samples_of(&rows, "hot"), samples_of(&rows, "cold"));
    assert!(hot + cold >= 100, "hot {hot} cold {cold}: {rows:#?}");
    // Attached about 0.1 s late, so hot()'s share is at least its 75 %, minus noise.
    let share = hot as f64 / (hot + cold) as f64;
    assert!((0.6..=0.95).contains(&share), "hot share {share:.3}");
    let top = pc_samples::top_functions(&rows, 3);
    assert_eq!(top[0].function, "hot", "{top:#?}");
}

/// `-a`, as `perf record -a -- CMD`: every process on every CPU is sampled while CMD runs;
/// the command's own hot function is found among them.
#[test]
fn pc_sampling_system_wide_finds_the_busy_process() {
    let Some(lib) = lib_dir() else { return };
    if !have_gcc() || !can_sample() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let exe = build(&lib, dir.path());
    let run = dir.path().join("run");
    let out = Command::cargo_bin("powerperf")
        .unwrap()
        .args([
            "collect",
            "-q",
            "--nvml",
            "off",
            "--pc-sampling",
            "cpu",
            "-a",
            "-o",
        ])
        .arg(&run)
        .arg("--")
        .arg(&exe)
        .arg("0.5")
        .output()
        .unwrap();
    let meta = powerperf_format::run::RunMeta::read(&run).unwrap();
    let ps = meta.pc_sampling.expect("[pc_sampling]");
    if ps.status == powerperf_node::event_spec::EventStatus::PermissionDenied {
        println!("skipped: system-wide sampling refused: {:?}", ps.reason);
        return;
    }
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(ps.status.has_value(), "{ps:?} notes {:?}", meta.notes);
    let rows: Vec<PcRow> = pc_samples::read(&run).unwrap().expect("pc_samples.parquet");
    let (hot, cold) = (samples_of(&rows, "hot"), samples_of(&rows, "cold"));
    assert!(hot + cold >= 50, "hot {hot} cold {cold}");
    assert!(hot > cold, "hot {hot} cold {cold}");
}
