//! End-to-end tests of `powerperf collect` and `powerperf report` through the real binary.

use powerperf_format::run::{Ending, RunMeta};
use powerperf_node::event_spec::EventStatus;
use std::path::{Path, PathBuf};

mod common;
use common::copy_tree;
use common::powerperf as pp;

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
    let tl = powerperf_format::timeline::read_parquet(&run.join("timeline.parquet")).unwrap();
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
    let sum: f64 = powerperf_format::timeline::column_f64(&tl, "task-clock")
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
    // SAFETY: kill(2) takes two integers and touches no memory of ours; the pid is our child's,
    // not yet reaped, so it names no other process.
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
    let tl = powerperf_format::timeline::read_parquet(&run.join("timeline.parquet")).unwrap();
    let sum: f64 = powerperf_format::timeline::column_f64(&tl, "energy_package_0_j")
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

#[test]
fn a_power_pmu_counter_that_never_advances_is_not_supported() {
    if !Path::new("/sys/bus/event_source/devices/power/events/energy-psys").exists() {
        println!("skipped: this machine has no perf power PMU with energy-psys");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("r");
    pp().args(["collect", "-q", "-e", "power/energy-psys/,task-clock", "-o"])
        .arg(&run)
        .args(["--", "sleep", "0.2"])
        .assert()
        .success();
    let meta = RunMeta::read(&run).unwrap();
    let e = meta
        .events
        .iter()
        .find(|e| e.name == "power/energy-psys/")
        .unwrap();
    if e.status.has_value() {
        // A real RAPL PMU: energy over 0.2 s of a live machine is positive.
        assert!(e.total.unwrap() > 0.0);
    } else {
        assert_eq!(e.status, EventStatus::NotSupported);
        assert!(e.reason.as_deref().unwrap().contains("did not advance"));
    }
}

#[test]
fn attach_and_system_wide_modes_count() {
    let dir = tempfile::tempdir().unwrap();
    // Attach to a running busy process until it exits.
    let mut busy = std::process::Command::new("sh")
        .args(["-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done"])
        .spawn()
        .unwrap();
    let run = dir.path().join("attach");
    pp().args(["collect", "-q", "-e", "task-clock", "-p"])
        .arg(busy.id().to_string())
        .arg("-o")
        .arg(&run)
        .assert()
        .success();
    busy.wait().unwrap();
    let meta = RunMeta::read(&run).unwrap();
    assert!(meta.events[0].total.unwrap() > 0.0, "{:?}", meta.events[0]);
    // System-wide on CPU 0 for the length of a command.
    let run = dir.path().join("sys");
    pp().args([
        "collect",
        "-q",
        "-e",
        "task-clock,context-switches",
        "-C",
        "0",
        "-o",
    ])
    .arg(&run)
    .args(["--", "sleep", "0.2"])
    .assert()
    .success();
    let meta = RunMeta::read(&run).unwrap();
    let tc = meta.events[0].total.unwrap();
    assert!(
        tc > 1e8 && tc < 1e9,
        "one CPU for ~0.2 s counts ~2e8 ns of task-clock, got {tc}"
    );
}

/// `-p PID --per-thread` keeps each thread's totals apart (as `perf stat --per-thread`), they
/// add up to the process total, and the busy thread is the one with the CPU time.
#[test]
fn per_thread_totals_of_an_attached_process() {
    let dir = tempfile::tempdir().unwrap();
    // Two threads: one busy for about a second, the main thread waiting in join().
    let mut busy = std::process::Command::new("python3")
        .args([
            "-c",
            "import threading\n\
             def spin():\n    sum(range(30_000_000))\n\
             t = threading.Thread(target=spin); t.start(); t.join()",
        ])
        .spawn()
        .unwrap();
    let pid = busy.id() as i32;
    // Attach once the second thread exists.
    let t0 = std::time::Instant::now();
    while powerperf_node::perf_event::threads_of(pid)
        .map(|t| t.len())
        .unwrap_or(0)
        < 2
    {
        assert!(
            t0.elapsed().as_secs() < 10,
            "python3 never started its thread"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let run = dir.path().join("attach");
    pp().args([
        "collect",
        "-e",
        "task-clock,context-switches",
        "--per-thread",
        "-p",
    ])
    .arg(pid.to_string())
    .arg("-o")
    .arg(&run)
    .assert()
    .success()
    .stderr(predicates::str::contains("Per thread:"));
    busy.wait().unwrap();
    let meta = RunMeta::read(&run).unwrap();
    assert_eq!(meta.threads.len(), 2, "{:?}", meta.threads);
    let total = meta.events[0].total.unwrap();
    let per: Vec<f64> = meta
        .threads
        .iter()
        .map(|t| t.counts["task-clock"])
        .collect();
    let sum: f64 = per.iter().sum();
    assert!(
        (sum - total).abs() <= 1e-6 * total,
        "per-thread task-clock {per:?} must add up to {total}"
    );
    // The main thread's tid is the pid; the other one spins.
    let spin = meta.threads.iter().find(|t| t.tid != pid).unwrap();
    assert!(
        spin.counts["task-clock"] > 0.8 * total,
        "the spinning thread has the CPU time: {:?}",
        meta.threads
    );
    // Without -p it is refused, as perf stat refuses it.
    pp().args(["collect", "--per-thread", "-o"])
        .arg(dir.path().join("no"))
        .args(["--", "true"])
        .assert()
        .failure();
}

#[test]
fn output_path_takes_rank_and_host() {
    let dir = tempfile::tempdir().unwrap();
    let pattern = dir.path().join("shard-%r-%h");
    pp().env("OMPI_COMM_WORLD_RANK", "3")
        .env("OMPI_COMM_WORLD_LOCAL_RANK", "1")
        .args(["collect", "-q", "--sysfs-root"])
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sysfs/rapl-wrap"))
        .arg("-o")
        .arg(&pattern)
        .args(["--", "true"])
        .assert()
        .success();
    let host = powerperf_core::collect::sysinfo::host_and_kernel().0;
    let run = dir.path().join(format!("shard-3-{host}"));
    let meta = RunMeta::read(&run).unwrap();
    assert_eq!(meta.run.rank, Some(3));
    // Local rank 1 is not the first on its node: no RAPL from it, and it says why.
    assert!(meta
        .events
        .iter()
        .all(|e| e.backend != powerperf_format::run::Backend::Rapl));
    assert!(
        meta.notes
            .iter()
            .any(|n| n.contains("first rank on each node")),
        "{:?}",
        meta.notes
    );
}

/// A disk that fills up while the command runs: the run directory keeps the samples written
/// before (the journal), says it is truncated, and `report` still reads it. The full disk is
/// a 1 MiB tmpfs in a private mount namespace (`unshare -m`, root only), which the command
/// itself fills.
#[test]
fn a_full_disk_keeps_the_samples_written_and_says_truncated() {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    let saved = dir.path().join("saved");
    std::fs::create_dir_all(&mnt).unwrap();
    let bin = assert_cmd::cargo::cargo_bin("powerperf");
    let script = format!(
        "mount -t tmpfs -o size=1m tmpfs {m} || exit 77; \
         {bin} collect --interval 1ms -o {m}/run -- sh -c 'sleep 0.4; head -c 100M /dev/zero > {m}/fill 2>/dev/null; sleep 0.4'; \
         rc=$?; cp -r {m}/run {saved}; exit $rc",
        m = mnt.display(),
        bin = bin.display(),
        saved = saved.display()
    );
    let out = match std::process::Command::new("unshare")
        .args(["-m", "sh", "-c", &script])
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            println!("skipped: cannot run unshare: {e}");
            return;
        }
    };
    if out.status.code() == Some(77) || (!out.status.success() && !saved.exists()) {
        println!(
            "skipped: no private tmpfs to fill (unshare -m and mount need root): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        return;
    }
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta = RunMeta::read(&saved).unwrap();
    assert_eq!(meta.run.ended, Ending::Exited);
    assert_eq!(meta.run.exit_status, Some(0));
    assert!(meta.run.truncated, "{:?}", meta.notes);
    assert!(
        meta.notes
            .iter()
            .any(|n| n.contains("timeline could not be written") && n.contains("journal")),
        "{:?}",
        meta.notes
    );
    assert!(!saved.join("timeline.parquet").exists());
    assert!(!saved.join(".reserve").exists());
    // What was written before the disk filled is readable, and is less than the whole run.
    let df = powerperf_format::timeline::read_run(&saved)
        .unwrap()
        .unwrap();
    assert!(df.height() >= 100, "{} rows kept", df.height());
    assert!((df.height() as u64) < meta.run.samples);
    pp().arg("report")
        .arg(&saved)
        .assert()
        .success()
        .stdout(predicates::str::contains("journal"));
}

/// A run collected into the directory of an earlier one does not read the earlier run's
/// region events (or GPU recordings): they are removed first, and a note says so.
#[test]
fn a_reused_run_directory_drops_the_earlier_runs_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    // The earlier run (a directory without run.toml is not one: it is refused, see
    // a_directory_that_is_not_a_run_is_not_emptied).
    pp().args(["collect", "-q", "-e", "task-clock", "-o"])
        .arg(&run)
        .args(["--", "true"])
        .assert()
        .success();
    std::fs::create_dir_all(run.join("region_events")).unwrap();
    std::fs::write(
        run.join("region_events/4242.tsv"),
        "# powerperf-rt region events v1 pid=4242\nR\t1\told\nB\t1\t4242\t1\nE\t2\t4242\t1\n",
    )
    .unwrap();
    std::fs::write(run.join("regions.parquet"), b"stale").unwrap();
    pp().args(["collect", "-q", "-e", "task-clock", "-o"])
        .arg(&run)
        .args(["--", "true"])
        .assert()
        .success();
    assert!(!run.join("region_events").exists());
    assert!(!run.join("regions.parquet").exists());
    let meta = RunMeta::read(&run).unwrap();
    assert!(
        meta.notes
            .iter()
            .any(|n| n.contains("earlier run") && n.contains("region_events")),
        "{:?}",
        meta.notes
    );
}

/// `--sampler kernel` (leader sampling): the kernel reads the counters in the command's
/// context; rows stay on the interval's grid and add up to the exact totals.
#[test]
fn leader_sampling_gives_grid_rows_that_add_up_to_the_totals() {
    let dir = tempfile::tempdir().unwrap();
    let bin = assert_cmd::cargo::cargo_bin("powerperf");
    // An empty sysfs root: no RAPL. Leader samples are then the timeline's only source and
    // its rows lie on the grid. Where a machine exposes the perf power PMU (some virtual
    // machines do, with an `energy-psys` that never advances), the sampler thread reads it
    // every interval and the rows follow the thread's wake-ups instead, by design.
    let root = dir.path().join("empty-sysfs");
    std::fs::create_dir(&root).unwrap();
    let mut runs = vec![];
    for sampler in ["kernel", "thread"] {
        let run = dir.path().join(sampler);
        pp().args(["collect", "-q", "--nvml", "off", "--interval", "10ms"])
            .args(["-e", "task-clock,page-faults,context-switches"])
            .arg("--sysfs-root")
            .arg(&root)
            .args(["--sampler", sampler, "-o"])
            .arg(&run)
            .arg("--")
            .arg(&bin)
            .args([
                "microbench",
                "kernel",
                "fma",
                "--threads",
                "2",
                "--scale",
                "0.15",
            ])
            .assert()
            .success();
        runs.push(RunMeta::read(&run).unwrap());
    }
    let (kernel, thread) = (&runs[0], &runs[1]);
    assert_eq!(thread.run.timeline_sampler.as_deref(), Some("thread"));
    if kernel.run.timeline_sampler.as_deref() != Some("kernel") {
        let why = kernel
            .notes
            .iter()
            .find(|n| n.contains("leader sampling"))
            .expect("a note says why leader sampling was not used");
        println!("skipped: {why}");
        return;
    }
    let tl = powerperf_format::timeline::read_parquet(&dir.path().join("kernel/timeline.parquet"))
        .unwrap();
    let col = |n: &str| -> Vec<f64> {
        powerperf_format::timeline::column_f64(&tl, n)
            .unwrap()
            .into_iter()
            .map(|v| v.expect("a value in every row"))
            .collect()
    };
    let t = powerperf_format::timeline::or_default(
        powerperf_format::timeline::column_u64(&tl, "t_ns").unwrap(),
    );
    let tc = col("task-clock");
    let n = t.len();
    assert!(n >= 10, "{n} rows");
    // Every row but the last ends on the 10 ms grid.
    for (k, t) in t[..n - 1].iter().enumerate() {
        assert_eq!(*t, 10_000_000 * (k as u64 + 1), "row {k}");
    }
    // The rows add up to the exact total (the last row is closed by read(2)).
    for e in ["task-clock", "page-faults", "context-switches"] {
        let total = kernel.totals().values[e];
        let sum: f64 = col(e).iter().sum();
        assert!(
            (sum - total).abs() <= 1e-6 * total.max(1.0),
            "{e}: {sum} vs {total}"
        );
    }
    // The run's work shows up in the rows as it happens, not all in the last row. A row
    // holds what the samples up to its end show: per thread and CPU (each its own copy of
    // the group, with its own timer) at most one interval more than was done in it.
    let before_last: f64 = tc[..n - 1].iter().sum();
    assert!(before_last > 0.6 * tc.iter().sum::<f64>(), "{tc:?}");
    let ncpu = std::thread::available_parallelism().map_or(2, |n| n.get()) as f64;
    let slack = 2.0 * ncpu * 10e6 + 5e6;
    for (k, v) in tc[..n - 1].iter().enumerate() {
        assert!(
            *v <= 2.0 * 10e6 + slack,
            "row {k}: {v} ns of task-clock in 10 ms from 2 threads"
        );
    }
    for (k, w) in tc[..n - 1].windows(10).enumerate() {
        let s: f64 = w.iter().sum();
        assert!(
            s <= 2.0 * 100e6 + slack,
            "rows {k}..{}: {s} ns in 100 ms",
            k + 10
        );
    }
    // Both samplers count the same program alike.
    let (a, b) = (
        kernel.totals().values["task-clock"],
        thread.totals().values["task-clock"],
    );
    assert!((a / b - 1.0).abs() < 0.3, "kernel {a} vs thread {b}");
}

#[test]
fn leader_sampling_of_an_attached_process_falls_back_to_the_thread_with_a_note() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let mut child = std::process::Command::new("sleep")
        .arg("0.5")
        .spawn()
        .unwrap();
    pp().args([
        "collect",
        "-q",
        "--nvml",
        "off",
        "--sampler",
        "kernel",
        "-e",
        "task-clock",
    ])
    .args(["-p", &child.id().to_string(), "-o"])
    .arg(&run)
    .assert()
    .success();
    child.wait().unwrap();
    let meta = RunMeta::read(&run).unwrap();
    assert_eq!(meta.run.timeline_sampler.as_deref(), Some("thread"));
    assert!(
        meta.notes
            .iter()
            .any(|n| n.contains("--sampler kernel samples a command")),
        "{:?}",
        meta.notes
    );
}

/// Issue 18, item 3: links that another user planted in a run directory (as `nobody`, in a
/// directory of theirs) are not followed: the files they point to keep their contents.
#[test]
fn links_planted_in_a_run_directory_are_not_followed() {
    if !common::root_with_setpriv("links_planted_in_a_run_directory_are_not_followed") {
        return;
    }
    let tmp = common::shared_tempdir();
    let victims: Vec<PathBuf> = ["victim-tmp", "victim-reserve"]
        .iter()
        .map(|n| tmp.path().join(n))
        .collect();
    for v in &victims {
        std::fs::write(v, "precious\n").unwrap();
    }
    let run = common::dir_owned_by_nobody(tmp.path(), "run");
    common::sh_as_nobody(&format!(
        "ln -s {} {r}/.run.toml.tmp && ln -s {} {r}/.reserve",
        victims[0].display(),
        victims[1].display(),
        r = run.display()
    ));
    let out = pp()
        .args(["collect", "-q", "-e", "task-clock", "-o"])
        .arg(&run)
        .args(["--", "true"])
        .output()
        .unwrap();
    for v in &victims {
        assert_eq!(
            std::fs::read_to_string(v).unwrap(),
            "precious\n",
            "{} was written through a planted link; collect said: {}",
            v.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(RunMeta::read(&run).unwrap().run.ended, Ending::Exited);
}

/// Issue 18, item 4: an interval below the documented minimum (1 ms, perf stat -I's) is
/// refused with the minimum in the message; 1 ms and 0 (totals only) are accepted.
#[test]
fn interval_below_the_minimum_is_refused() {
    use predicates::prelude::*;
    let dir = tempfile::tempdir().unwrap();
    for short in ["1ns", "100us", "999us"] {
        let run = dir.path().join(format!("r{short}"));
        pp().args([
            "collect",
            "-q",
            "-e",
            "task-clock",
            "--interval",
            short,
            "-o",
        ])
        .arg(&run)
        .args(["--", "true"])
        .assert()
        .code(1)
        .stderr(predicates::str::contains("--interval").and(predicates::str::contains("1ms")));
        assert!(!run.join("run.toml").exists(), "{short}: a run was started");
    }
    for ok in ["1ms", "0"] {
        pp().args(["collect", "-q", "-e", "task-clock", "--interval", ok, "-o"])
            .arg(dir.path().join("ok"))
            .args(["--", "true"])
            .assert()
            .success();
    }
}

/// Issue 18, item 7: powerperf SIGKILLed mid-run. run.toml says the run was `running`,
/// `report` rebuilds the totals from the journal, the command dies with powerperf, and no
/// `.reserve` is left behind.
#[test]
fn sigkilled_powerperf_leaves_a_running_run_that_report_rebuilds() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("r");
    let pidfile = dir.path().join("pid");
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("powerperf"))
        .args([
            "collect",
            "-q",
            "-e",
            "task-clock",
            "--interval",
            "10ms",
            "-o",
        ])
        .arg(&run)
        .args(["--", "sh", "-c"])
        .arg(format!(
            "echo $$ > {}; while :; do :; done",
            pidfile.display()
        ))
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(800));
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // SAFETY: kill(2) takes two integers and touches no memory of ours; `child` is not yet
    // reaped.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    child.wait().unwrap();
    // The command dies with powerperf (gone, or a zombie waiting for init to reap it).
    let alive = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                s.rsplit_once(')')
                    .and_then(|(_, r)| r.split_whitespace().next().map(String::from))
            })
            .is_some_and(|st| st != "Z" && st != "X")
    };
    for _ in 0..40 {
        if !alive() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let orphan = alive();
    if orphan {
        // SAFETY: kill(2) takes two integers and touches no memory of ours (the pid is the
        // workload this test started, found alive just above).
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    let toml = std::fs::read_to_string(run.join("run.toml")).unwrap();
    assert!(toml.contains("ended = \"running\""), "{toml}");
    assert!(
        !orphan,
        "the command {pid} kept running after powerperf was killed"
    );
    assert!(
        !run.join(".reserve").exists(),
        ".reserve was left in the run directory"
    );
    let v = common::json_stdout(pp().args(["report", "--format", "json"]).arg(&run));
    let tc = v["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["event"] == "task-clock")
        .unwrap_or_else(|| panic!("no task-clock in the report: {v}"));
    // Up to 0.8 s of a busy loop (less on a loaded machine), from the journal's rows.
    assert!(tc["value"].as_f64().unwrap() > 1e7, "{tc}");
    assert!(v["duration_s"].as_f64().unwrap() > 0.2, "{v}");
    assert!(
        v["notes"].to_string().contains("journal"),
        "the report must say the totals come from the journal: {v}"
    );
}

/// Issue 18, item 9: a directory that is not a powerperf run (no run.toml) is never emptied:
/// collect refuses and names the files it would have removed; `--force` replaces them.
#[test]
fn a_directory_that_is_not_a_run_is_not_emptied() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("mine");
    std::fs::create_dir_all(d.join("region_events")).unwrap();
    std::fs::create_dir_all(d.join("cubins")).unwrap();
    std::fs::write(d.join("timeline.parquet"), "my own file").unwrap();
    std::fs::write(d.join("regions.parquet"), "mine too").unwrap();
    std::fs::write(d.join("region_events/keep.txt"), "keep").unwrap();
    std::fs::write(d.join("cubins/k.cubin"), "keep").unwrap();
    let out = pp()
        .args(["collect", "-q", "-e", "task-clock", "-o"])
        .arg(&d)
        .args(["--", "true"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        std::fs::read_to_string(d.join("timeline.parquet")).unwrap_or_default(),
        "my own file",
        "{err}"
    );
    assert!(d.join("region_events/keep.txt").exists(), "{err}");
    assert!(d.join("cubins/k.cubin").exists(), "{err}");
    assert_eq!(out.status.code(), Some(1), "{err}");
    for name in [
        "timeline.parquet",
        "regions.parquet",
        "region_events",
        "cubins",
        "--force",
    ] {
        assert!(err.contains(name), "{name} not named: {err}");
    }
    assert!(!d.join("run.toml").exists());
    // With --force the run replaces them.
    pp().args(["collect", "-q", "--force", "-e", "task-clock", "-o"])
        .arg(&d)
        .args(["--", "true"])
        .assert()
        .success();
    assert!(!d.join("cubins").exists());
    assert_eq!(RunMeta::read(&d).unwrap().run.ended, Ending::Exited);
}

/// Issue 18, item 10: an event listed twice is counted once (with a note), and the timeline
/// is written.
#[test]
fn duplicate_events_keep_the_timeline() {
    let dir = tempfile::tempdir().unwrap();
    let five = "task-clock,page-faults,context-switches,cpu-migrations,minor-faults";
    for list in ["task-clock,task-clock".to_string(), [five; 10].join(",")] {
        let run = dir.path().join("r");
        pp().args(["collect", "-q", "--interval", "10ms", "-e", &list, "-o"])
            .arg(&run)
            .args(["--", "sh", "-c", "sleep 0.1"])
            .assert()
            .success();
        let meta = RunMeta::read(&run).unwrap();
        assert!(!meta.run.truncated, "{:?}", meta.notes);
        assert!(run.join("timeline.parquet").is_file(), "{:?}", meta.notes);
        let tc = meta
            .events
            .iter()
            .filter(|e| e.name == "task-clock")
            .count();
        assert_eq!(tc, 1, "{:?}", meta.events);
        assert!(
            meta.notes
                .iter()
                .any(|n| n.contains("task-clock") && n.contains("more than once")),
            "{:?}",
            meta.notes
        );
    }
}
