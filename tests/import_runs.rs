//! End-to-end: run directories written by `powerperf collect` (here hand-written run.toml
//! fixtures) become a training set through `powerperf import RUN… -o SET`.

use assert_cmd::Command;
use powerperf_format::set::{CounterKind, TrainingSet};
use std::path::{Path, PathBuf};

fn write_run(
    dir: &Path,
    cmd: &str,
    threads: u32,
    freq: f64,
    dur_ns: u64,
    instructions: f64,
    pkg_j: f64,
) {
    std::fs::create_dir_all(dir).unwrap();
    let text = format!(
        r#"[run]
id = "{id}"
command = ["{cmd}", "-9"]
ended = "exited"
exit_status = 0
start_unix_ns = 1700000000000000000
start_monotonic_ns = 1000
duration_ns = {dur_ns}
host = "node1"
cpu_model = "Test CPU"
kernel = "6.1"
tool_version = "0.1.0"
interval_ns = 10000000
samples = 10

[knobs]
core_freq_mhz = {freq}
threads = {threads}

[[events]]
name = "instructions"
backend = "perf_event"
status = "multiplexed"
total = {instructions}
running_ratio = 0.5

[[events]]
name = "task-clock"
backend = "perf_event"
status = "counted"
total = 1.5e9

[[events]]
name = "cycles"
backend = "perf_event"
status = "not_supported"
reason = "no hardware PMU in this VM"

[[events]]
name = "energy-package-0"
backend = "rapl"
status = "counted"
total = {pkg_j}
unit = "J"
"#,
        id = dir.file_name().unwrap().to_string_lossy()
    );
    std::fs::write(dir.join("run.toml"), text).unwrap();
}

fn runs(tmp: &Path) -> Vec<PathBuf> {
    let mut v = Vec::new();
    for (i, (t, f, dur, ins, e)) in [
        (1, 2000.0, 4_000_000_000u64, 8e9, 40.0),
        (2, 2000.0, 2_000_000_000, 8e9, 30.0),
        (2, 2000.0, 2_200_000_000, 8.2e9, 33.0),
        (2, 1000.0, 3_000_000_000, 8e9, 24.0),
    ]
    .into_iter()
    .enumerate()
    {
        let d = tmp.join(format!("run{i}"));
        write_run(&d, "/usr/bin/xz", t, f, dur, ins, e);
        v.push(d);
    }
    v
}

#[test]
fn run_directories_become_a_set() {
    let tmp = tempfile::tempdir().unwrap();
    let dirs = runs(tmp.path());
    let out = tmp.path().join("set");
    Command::cargo_bin("powerperf")
        .unwrap()
        .arg("import")
        .args(&dirs)
        .arg("-o")
        .arg(&out)
        .assert()
        .success()
        .stdout(predicates::str::contains("4 points, 1 workloads"));
    let set = TrainingSet::read(&out).unwrap();
    assert_eq!(set.meta.source, "collect");
    assert_eq!(set.meta.knobs, vec!["core_freq_mhz", "threads"]);
    assert_eq!(set.meta.counters["instructions"], CounterKind::Count);
    assert!(set.meta.counters.contains_key("task_clock"));
    assert!(
        !set.meta.counters.contains_key("cycles"),
        "an unsupported event is not a column"
    );
    let p = &set.points[1];
    assert_eq!(p.workload, "xz");
    assert_eq!(
        (p.knobs["threads"], p.knobs["core_freq_mhz"]),
        (2.0, 2000.0)
    );
    assert_eq!(p.time_s, Some(2.0));
    assert_eq!(p.energy_j, Some(30.0));
    assert_eq!(p.power_w, Some(15.0));
    assert_eq!(p.counters["instructions"], 8e9);
    assert_eq!(
        (
            set.points[1].repeat,
            set.points[2].repeat,
            set.points[3].repeat
        ),
        (Some(0), Some(1), Some(0))
    );
    // Mean over the two repeats at (2 threads, 2000 MHz).
    let m = set.means();
    assert_eq!(m.points.len(), 3);
    assert!((m.points[1].time_s.unwrap() - 2.1).abs() < 1e-12);
    assert!((m.points[1].energy_j.unwrap() - 31.5).abs() < 1e-12);
}

#[test]
fn runs_flag_and_workload_label() {
    let tmp = tempfile::tempdir().unwrap();
    let dirs = runs(tmp.path());
    let out = tmp.path().join("set");
    Command::cargo_bin("powerperf")
        .unwrap()
        .args(["import", "--workload", "compress", "-o"])
        .arg(&out)
        .arg("--runs")
        .args(&dirs[..2])
        .assert()
        .success();
    let set = TrainingSet::read(&out).unwrap();
    assert_eq!(set.workloads(), vec!["compress"]);
    assert_eq!(set.points.len(), 2);
}

#[test]
fn a_directory_without_run_toml_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let empty = tmp.path().join("notarun");
    std::fs::create_dir(&empty).unwrap();
    Command::cargo_bin("powerperf")
        .unwrap()
        .arg("import")
        .arg(&empty)
        .arg("-o")
        .arg(tmp.path().join("set"))
        .assert()
        .failure()
        .stderr(predicates::str::contains("notarun"))
        .stderr(predicates::str::contains("run.toml"));
}
