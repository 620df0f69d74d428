//! `powerperf collect --backend papi` through the real binary. Without the `papi` feature:
//! the error that says how to rebuild. With it (`cargo test --features papi --test
//! papi_backend`): preset and native names, the same run format with `backend = "papi"`, a
//! preset the machine cannot count reported with PAPI's reason, and software events compared
//! with the perf backend's counts of the same program.

mod common;
use common::powerperf as pp;

#[cfg(not(feature = "papi"))]
#[test]
fn papi_backend_without_the_feature_says_how_to_rebuild() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let out = pp()
        .args(["collect", "--backend", "papi", "-o"])
        .arg(&run)
        .args(["--", "true"])
        .assert()
        .failure();
    let err = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    for needle in [
        "--features papi",
        "libpapi-dev",
        "libclang-dev",
        "--backend perf",
    ] {
        assert!(err.contains(needle), "`{needle}` missing from: {err}");
    }
    assert!(!run.exists(), "nothing is run or written");
}

#[cfg(feature = "papi")]
mod with_papi {
    use super::pp;
    use powerperf_format::run::{Backend, EventRecord, RunMeta};
    use powerperf_node::event_spec::EventStatus;
    use std::path::Path;

    fn has_hardware_pmu() -> bool {
        ["cpu", "cpu_core", "armv8_pmuv3_0", "armv8_pmuv3"]
            .iter()
            .any(|p| Path::new("/sys/bus/event_source/devices").join(p).exists())
    }

    /// A fixed amount of work in a child process: powerperf's own mixed microbenchmark
    /// kernel, one thread.
    fn program() -> Vec<String> {
        let bin = assert_cmd::cargo::cargo_bin("powerperf");
        [
            bin.display().to_string(),
            "microbench".into(),
            "kernel".into(),
            "mixed".into(),
            "--threads".into(),
            "1".into(),
            "--scale".into(),
            "0.05".into(),
        ]
        .to_vec()
    }

    fn event<'a>(meta: &'a RunMeta, name: &str) -> &'a EventRecord {
        meta.events
            .iter()
            .find(|e| e.name == name)
            .unwrap_or_else(|| panic!("no event {name} in {:?}", meta.events))
    }

    #[test]
    fn papi_counts_the_command_in_the_run_format() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("papi");
        pp().args([
            "collect",
            "-q",
            "--backend",
            "papi",
            "-e",
            "perf::TASK-CLOCK,perf::PAGE-FAULTS,PAPI_TOT_CYC,PAPI_NO_SUCH_EVENT",
            "--interval",
            "10ms",
            "-o",
        ])
        .arg(&run)
        .arg("--")
        .args(program())
        .assert()
        .success();
        let meta = RunMeta::read(&run).unwrap();
        let names: Vec<&str> = meta
            .events
            .iter()
            .filter(|e| e.backend == Backend::Papi)
            .map(|e| e.name.as_str())
            .collect();
        assert_eq!(
            names,
            [
                "perf::TASK-CLOCK",
                "perf::PAGE-FAULTS",
                "PAPI_TOT_CYC",
                "PAPI_NO_SUCH_EVENT"
            ]
        );
        assert!(meta.notes.iter().any(|n| n.contains("through PAPI")));
        let unknown = event(&meta, "PAPI_NO_SUCH_EVENT");
        assert_eq!(unknown.status, EventStatus::NotSupported);
        let why = unknown.reason.as_deref().unwrap();
        assert!(
            why.contains("PAPI_event_name_to_code") && why.contains("papi_avail"),
            "{why}"
        );
        let cyc = event(&meta, "PAPI_TOT_CYC");
        // PAPI's perf_event component can be disabled where libpfm4 does not recognise the
        // CPU (a virtual machine's generic model: "libpfm4 no default PMU found"); then no
        // perf event counts through PAPI, and the reason must say so and how to look.
        let disabled = "PAPI component `perf_event` is disabled";
        if let Some(why) = cyc.reason.as_deref().filter(|w| w.contains(disabled)) {
            assert_eq!(cyc.status, EventStatus::NotSupported);
            assert!(why.contains("papi_component_avail"), "{why}");
            let clock = event(&meta, "perf::TASK-CLOCK");
            assert_eq!(clock.status, EventStatus::NotSupported, "{clock:?}");
            assert!(clock.reason.as_deref().unwrap().contains(disabled));
            println!("skipped: {why}");
            return;
        }
        if !has_hardware_pmu() {
            assert_eq!(cyc.status, EventStatus::NotSupported);
            let why = cyc.reason.as_deref().unwrap();
            assert!(why.contains("(PAPI_E"), "PAPI's error is named: {why}");
            assert!(cyc.total.is_none() && cyc.column.is_none());
        }
        let tl = powerperf_format::timeline::read_parquet(&run.join("timeline.parquet")).unwrap();
        let cols: Vec<String> = tl
            .get_column_names()
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert!(!cols.iter().any(|c| c == "PAPI_NO_SUCH_EVENT"), "{cols:?}");
        let clock = event(&meta, "perf::TASK-CLOCK");
        if clock.status == EventStatus::NotSupported {
            let why = clock.reason.as_deref().unwrap();
            assert!(
                why.contains("PAPI_set_opt(PAPI_INHERIT") || why.contains("PAPI_attach"),
                "{why}"
            );
            assert!(!cols.iter().any(|c| c == "perf::TASK-CLOCK"), "{cols:?}");
            println!("skipped: PAPI cannot count another process on this machine: {why}");
            return;
        }
        // Counted: every sample's increase is in the column, and they add up to the total.
        assert_eq!(clock.status, EventStatus::Counted, "{clock:?}");
        assert_eq!(clock.unit.as_deref(), Some("ns"));
        let sum: f64 = powerperf_format::timeline::column_f64(&tl, "perf::TASK-CLOCK")
            .unwrap()
            .into_iter()
            .flatten()
            .sum();
        let papi_clock = clock.total.unwrap();
        assert!(
            (sum - papi_clock).abs() <= 1e-6 * papi_clock,
            "{sum} vs {papi_clock}"
        );
        let papi_faults = event(&meta, "perf::PAGE-FAULTS").total.unwrap();
        if has_hardware_pmu() {
            assert!(cyc.total.unwrap() > 0.0, "{cyc:?}");
        }

        // The perf backend on the same program.
        let prun = dir.path().join("perf");
        pp().args([
            "collect",
            "-q",
            "-e",
            "task-clock,page-faults",
            "--interval",
            "10ms",
            "-o",
        ])
        .arg(&prun)
        .arg("--")
        .args(program())
        .assert()
        .success();
        let pmeta = RunMeta::read(&prun).unwrap();
        let perf_clock = event(&pmeta, "task-clock").total.unwrap();
        let perf_faults = event(&pmeta, "page-faults").total.unwrap();
        println!(
            "task-clock ns: PAPI {papi_clock:.0}, perf {perf_clock:.0}; page-faults: PAPI {papi_faults:.0}, perf {perf_faults:.0}"
        );
        // Two runs of the same fixed work, one per backend: the CPU time of a single-thread
        // kernel varies run to run with the machine's other load (caches, SMT siblings), so
        // 25 %; the page faults of the same binary and input vary by a few pages (address
        // space layout), so 10 % + 20.
        assert!(
            (papi_clock - perf_clock).abs() <= 0.25 * perf_clock,
            "task-clock: PAPI {papi_clock} vs perf {perf_clock}"
        );
        assert!(
            (papi_faults - perf_faults).abs() <= 0.10 * perf_faults + 20.0,
            "page-faults: PAPI {papi_faults} vs perf {perf_faults}"
        );
    }

    #[test]
    fn papi_refuses_other_modes_and_groups() {
        let dir = tempfile::tempdir().unwrap();
        let out = pp()
            .args(["collect", "--backend", "papi", "-a", "-o"])
            .arg(dir.path().join("a"))
            .assert()
            .failure();
        let err = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
        assert!(err.contains("--backend perf"), "{err}");
        let out = pp()
            .args([
                "collect",
                "--backend",
                "papi",
                "-e",
                "{PAPI_TOT_INS,PAPI_TOT_CYC}",
                "-o",
            ])
            .arg(dir.path().join("g"))
            .args(["--", "true"])
            .assert()
            .failure();
        let err = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
        assert!(err.contains("groups are perf syntax"), "{err}");
    }
}
