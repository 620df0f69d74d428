//! End-to-end tests of `powerperf collect` and `powerperf report` through the real binary.

use assert_cmd::Command;
use powerperf::store::run::{Ending, EventStatus, RunMeta};
use std::path::{Path, PathBuf};

fn pp() -> Command {
    Command::cargo_bin("powerperf").unwrap()
}

fn copy_tree(from: &Path, to: &Path) {
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&dest).unwrap();
            copy_tree(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), &dest).unwrap();
        }
    }
}

fn has_cpu_pmu() -> bool {
    Path::new("/sys/bus/event_source/devices/cpu").exists()
        || Path::new("/sys/bus/event_source/devices/armv8_pmuv3_0").exists()
}

#[test]
fn counts_a_real_program_software_nonzero_hardware_marked() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    // A real program: compress a directory tree (this repository's sources).
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let out = dir.path().join("src.tgz");
    pp().args(["collect", "--interval", "5ms", "-o"])
        .arg(&run)
        .args(["--", "tar", "czf"])
        .arg(&out)
        .arg("-C")
        .arg(&src)
        .arg(".")
        .assert()
        .success();
    let meta = RunMeta::read(&run).unwrap();
    assert_eq!(meta.run.ended, Ending::Exited);
    assert_eq!(meta.run.exit_status, Some(0));
    let ev = |n: &str| {
        meta.events
            .iter()
            .find(|e| e.name == n)
            .unwrap_or_else(|| panic!("no event {n}"))
    };
    assert!(
        ev("task-clock").total.unwrap() > 0.0,
        "task-clock must be counted"
    );
    assert!(
        ev("page-faults").total.unwrap() > 0.0,
        "page-faults must be counted"
    );
    for hw in [
        "cycles",
        "instructions",
        "branches",
        "branch-misses",
        "cache-references",
        "cache-misses",
    ] {
        let e = ev(hw);
        if has_cpu_pmu() {
            assert!(e.status.has_value() || e.reason.is_some(), "{hw}: {e:?}");
        } else {
            assert_eq!(
                e.status,
                EventStatus::NotSupported,
                "{hw} must be not supported without a PMU"
            );
            assert!(
                e.total.is_none(),
                "{hw}: never a zero for an unsupported event"
            );
            assert!(
                e.reason.as_deref().unwrap().contains("perf_event_open"),
                "{e:?}"
            );
        }
    }
    let tl = powerperf::collect::timeline::read_parquet(&run.join("timeline.parquet")).unwrap();
    assert!(tl.height() >= 1);
    assert!(
        tl.column("task-clock").is_ok() && tl.column("t_ns").is_ok() && tl.column("dur_ns").is_ok()
    );
    if !has_cpu_pmu() {
        assert!(
            tl.column("cycles").is_err(),
            "no column for an unsupported event"
        );
    }
    // The timeline deltas add up to the total.
    let sum: f64 = powerperf::collect::timeline::column_f64(&tl, "task-clock")
        .unwrap()
        .into_iter()
        .flatten()
        .sum();
    assert!((sum - ev("task-clock").total.unwrap()).abs() <= 1e-6 * sum.max(1.0));

    let table = pp()
        .args(["report"])
        .arg(&run)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let table = String::from_utf8(table).unwrap();
    assert!(
        table.contains("task-clock") && table.contains("seconds time elapsed"),
        "{table}"
    );
    if !has_cpu_pmu() {
        assert!(table.contains("<not supported>      cycles"), "{table}");
    }
    for fmt in ["json", "csv", "markdown"] {
        let o = pp()
            .args(["report", "--format", fmt])
            .arg(&run)
            .assert()
            .success()
            .get_output()
            .stdout
            .clone();
        assert!(
            String::from_utf8(o).unwrap().contains("page-faults"),
            "{fmt}"
        );
    }
}

#[test]
fn exit_status_is_the_commands() {
    let dir = tempfile::tempdir().unwrap();
    pp().args(["collect", "-q", "-o"])
        .arg(dir.path().join("r"))
        .args(["--", "sh", "-c", "exit 3"])
        .assert()
        .code(3);
    let meta = RunMeta::read(&dir.path().join("r")).unwrap();
    assert_eq!(meta.run.exit_status, Some(3));
}

#[test]
fn child_killed_by_a_signal_leaves_a_complete_run() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("r");
    pp().args(["collect", "-q", "-o"])
        .arg(&run)
        .args(["--", "sh", "-c", "kill -SEGV $$"])
        .assert()
        .code(128 + 11);
    let meta = RunMeta::read(&run).unwrap();
    assert_eq!(meta.run.ended, Ending::Signaled);
    assert_eq!(meta.run.signal_name.as_deref(), Some("SIGSEGV"));
    assert!(run.join("timeline.parquet").exists());
    let out = pp()
        .arg("report")
        .arg(&run)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    assert!(String::from_utf8(out)
        .unwrap()
        .contains("killed by SIGSEGV"));
}

#[test]
fn sigterm_to_powerperf_is_forwarded_and_the_run_flushed() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("r");
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("powerperf"))
        .args(["collect", "-q", "-o"])
        .arg(&run)
        .args(["--", "sleep", "30"])
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(128 + 15));
    let meta = RunMeta::read(&run).unwrap();
    assert_eq!(meta.run.ended, Ending::Signaled);
    assert_eq!(meta.run.signal_name.as_deref(), Some("SIGTERM"));
    assert!(meta.run.duration_ns < 10_000_000_000);
}

#[test]
fn unknown_event_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    pp().args(["collect", "-e", "cycles,frobnicate", "-o"])
        .arg(dir.path().join("r"))
        .args(["--", "true"])
        .assert()
        .code(1)
        .stderr(predicates::str::contains(
            "unknown event `frobnicate` (position 2",
        ));
}

#[test]
fn missing_command_is_reported_in_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("r");
    pp().args(["collect", "-q", "-o"])
        .arg(&run)
        .args(["--", "/nonexistent/prog"])
        .assert()
        .code(127);
    let meta = RunMeta::read(&run).unwrap();
    assert_eq!(meta.run.ended, Ending::NotStarted);
    assert!(meta.run.error.unwrap().contains("No such file"));
}

#[test]
fn rapl_energy_with_wraparound_and_a_counter_that_never_advances() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    copy_tree(
        &PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sysfs/rapl-wrap"),
        &root,
    );
    let pkg = root.join("sys/class/powercap/intel-rapl:0/energy_uj");
    let dram = root.join("sys/class/powercap/intel-rapl:0:1/energy_uj");
    // The command plays the hardware: the package counter wraps (262143000000 -> 1000000
    // with max_energy_range_uj 262143328850), dram advances by 0.25 J, core and psys stay.
    let script = format!(
        "sleep 0.05; echo 1000000 > {}; echo 750000 > {}; sleep 0.05",
        pkg.display(),
        dram.display()
    );
    let run = dir.path().join("r");
    pp().args(["collect", "-q", "--interval", "10ms", "--sysfs-root"])
        .arg(&root)
        .arg("-o")
        .arg(&run)
        .args(["--", "sh", "-c", &script])
        .assert()
        .success();
    let meta = RunMeta::read(&run).unwrap();
    let ev = |n: &str| meta.events.iter().find(|e| e.name == n).unwrap().clone();
    let p = ev("energy-package-0");
    assert_eq!(p.status, EventStatus::Counted);
    assert!((p.total.unwrap() - 1.32885).abs() < 1e-9, "{p:?}");
    assert!((ev("energy-dram-0").total.unwrap() - 0.25).abs() < 1e-9);
    for dead in ["energy-psys", "energy-core-0"] {
        let e = ev(dead);
        assert_eq!(e.status, EventStatus::NotSupported, "{dead}");
        assert!(e.total.is_none());
        assert!(e.reason.unwrap().contains("did not advance"));
    }
    let tl = powerperf::collect::timeline::read_parquet(&run.join("timeline.parquet")).unwrap();
    let sum: f64 = powerperf::collect::timeline::column_f64(&tl, "energy_package_0_j")
        .unwrap()
        .into_iter()
        .flatten()
        .sum();
    assert!((sum - 1.32885).abs() < 1e-9);
    assert!(
        tl.column("energy_psys_j").is_err(),
        "a dead counter gets no column"
    );
    let json = pp()
        .args(["report", "--format", "json"])
        .arg(&run)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let v: serde_json::Value = serde_json::from_slice(&json).unwrap();
    assert!((v["energy_j"]["package-0"].as_f64().unwrap() - 1.32885).abs() < 1e-9);
    assert!(v["mean_power_w"]["package-0"].as_f64().unwrap() > 0.0);
}
