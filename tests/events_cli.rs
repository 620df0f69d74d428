//! `powerperf events` end to end through the real binary.

use assert_cmd::Command;
use predicates::prelude::*;
use std::path::Path;

use powerperf_format::run::{Backend, Ending, EventRecord, Knobs, RunInfo, RunMeta};
use powerperf_node::event_spec::EventStatus;

fn bin() -> Command {
    Command::cargo_bin("powerperf").unwrap()
}

fn event(name: &str, total: Option<f64>) -> EventRecord {
    EventRecord {
        name: name.into(),
        backend: Backend::PerfEvent,
        status: if total.is_some() {
            EventStatus::Counted
        } else {
            EventStatus::NotSupported
        },
        reason: total
            .is_none()
            .then(|| "the PMU has no such event (virtual machine)".to_string()),
        column: total.map(|_| name.to_string()),
        total,
        unit: None,
        scale: Some(1.0),
        running_ratio: Some(1.0),
    }
}

/// A run directory as `collect` writes it on a VM: software counters, no hardware counters.
fn write_run(dir: &Path) {
    let meta = RunMeta {
        run: RunInfo {
            id: "t".into(),
            command: vec!["true".into()],
            workload: None,
            ended: Ending::Exited,
            exit_status: Some(0),
            signal: None,
            signal_name: None,
            core_dumped: false,
            error: None,
            start_unix_ns: 0,
            start_monotonic_ns: 0,
            duration_ns: 2_000_000_000,
            host: "h".into(),
            cpu_model: "m".into(),
            cpu_vendor: Some("AuthenticAMD".into()),
            cpu_family: Some(16),
            cpu_model_number: Some(2),
            kernel: "k".into(),
            tool_version: "0".into(),
            rank: None,
            local_rank: None,
            node_sources: None,
            interval_ns: 10_000_000,
            samples: 200,
            truncated: false,
            self_cpu_ns: None,
            timeline_sampler: None,
        },
        knobs: Knobs::default(),
        events: vec![
            event("task-clock", Some(1.5e9)),
            event("page-faults", Some(300.0)),
            event("instructions", Some(4000.0)),
            event("branches", Some(500.0)),
            event("branch-misses", None),
            event("cycles", None),
        ],
        notes: vec![],
        threads: vec![],
        pc_sampling: None,
        gpu_attribution: None,
        gpu_setting: None,
        power_devices: vec![],
    };
    meta.write(dir).unwrap();
}

const DEFS: &str = "\
#define BR_lat 2
#define BR_miss_lat 12
Branch_cat, PAPI_BR_INS|BR_lat|*|PAPI_BR_MSP|BR_miss_lat|*|+|PAPI_TOT_INS|/
Br_per_ins, PAPI_BR_INS|PAPI_TOT_INS|/|
Faults_per_s, page-faults|duration_time|/
";

#[test]
fn eval_on_a_run_json_and_table() {
    let d = tempfile::tempdir().unwrap();
    write_run(d.path());
    let defs = d.path().join("defs.txt");
    std::fs::write(&defs, DEFS).unwrap();
    let out = bin()
        .args(["events", "eval"])
        .arg(&defs)
        .arg(d.path())
        .args(["--format", "json"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(
        v["Branch_cat"],
        serde_json::Value::Null,
        "branch-misses is not supported in the run"
    );
    assert_eq!(v["Br_per_ins"], 0.125);
    assert_eq!(v["Faults_per_s"], 150.0);
    // The table names the missing event and the run's reason.
    bin()
        .args(["events", "eval"])
        .arg(&defs)
        .arg(d.path())
        .assert()
        .success()
        .stdout(predicate::str::contains("Br_per_ins"))
        .stdout(predicate::str::contains("0.125000"))
        .stdout(predicate::str::contains("not computable: missing PAPI_BR_MSP (branch-misses: the PMU has no such event (virtual machine))"));
}

#[test]
fn eval_with_values_and_values_file() {
    let d = tempfile::tempdir().unwrap();
    let defs = d.path().join("f.txt");
    std::fs::write(&defs, "r = A / B\nz = A / C\n").unwrap();
    bin()
        .args(["events", "eval"])
        .arg(&defs)
        .args(["--values", "A=3,B=4,C=0", "--format", "json"])
        .assert()
        .success()
        .stdout(predicate::str::contains("\"r\": 0.75"))
        .stdout(predicate::str::contains("\"z\": null"));
    bin()
        .args(["events", "eval"])
        .arg(&defs)
        .args(["--values", "A=3,B=4,C=0"])
        .assert()
        .success()
        .stdout(predicate::str::contains("division by zero"));
    let vf = d.path().join("v.json");
    std::fs::write(&vf, r#"{"A": 1, "B": 8, "x,y=z": 5}"#).unwrap();
    bin()
        .args(["events", "eval"])
        .arg(&defs)
        .arg("--values-file")
        .arg(&vf)
        .args(["--format", "json"])
        .assert()
        .success()
        .stdout(predicate::str::contains("\"r\": 0.125"));
    bin()
        .args(["events", "eval"])
        .arg(&defs)
        .args(["--values", "A3"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("`A3` is not NAME=NUMBER"));
}

#[test]
fn malformed_line_exits_non_zero_with_position_and_token() {
    let d = tempfile::tempdir().unwrap();
    let defs = d.path().join("defs.txt");
    std::fs::write(&defs, "#define A 1\nOk, A|A|+\nBad, PAPI_TOT_INS|*|\n").unwrap();
    bin()
        .args(["events", "check"])
        .arg(&defs)
        .assert()
        .failure()
        .stderr(predicate::str::contains(
            "defs.txt:3:19: unexpected token `*|`",
        ));
    bin()
        .args(["events", "eval"])
        .arg(&defs)
        .args(["--values", "A=1"])
        .assert()
        .failure()
        .stderr(predicate::str::contains(":3:19:"));
}

#[test]
fn check_lists_rpn_needs_and_aliases() {
    let d = tempfile::tempdir().unwrap();
    write_run(d.path());
    let defs = d.path().join("defs.txt");
    std::fs::write(&defs, DEFS).unwrap();
    bin()
        .args(["events", "check"])
        .arg(&defs)
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "rpn:     PAPI_BR_INS|2|*|PAPI_BR_MSP|12|*|+|PAPI_TOT_INS|/",
        ))
        .stdout(predicate::str::contains(
            "needs PAPI_BR_MSP: alias of `branch-misses`",
        ))
        .stdout(predicate::str::contains(
            "file constants: BR_lat=2, BR_miss_lat=12",
        ))
        .stdout(predicate::str::contains("3 definitions compiled"));
    bin()
        .args(["events", "check"])
        .arg(&defs)
        .arg("--run")
        .arg(d.path())
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "needs PAPI_BR_INS: ok: alias of column `branches`",
        ))
        .stdout(predicate::str::contains(
            "needs PAPI_BR_MSP: MISSING: missing: branch-misses: the PMU has no such event",
        ));
}

#[test]
fn papi_user_events_file_env() {
    let d = tempfile::tempdir().unwrap();
    let defs = d.path().join("user_events");
    std::fs::write(&defs, "IPC, PAPI_TOT_INS|PAPI_TOT_CYC|/\n").unwrap();
    bin()
        .env("PAPI_USER_EVENTS_FILE", &defs)
        .args([
            "events",
            "eval",
            "--values",
            "instructions=10,cycles=20",
            "--format",
            "json",
        ])
        .assert()
        .success()
        .stdout(predicate::str::contains("\"IPC\": 0.5"));
    bin()
        .env_remove("PAPI_USER_EVENTS_FILE")
        .args(["events", "eval", "--values", "a=1"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("PAPI_USER_EVENTS_FILE"));
}

#[test]
fn lcpi_command_with_constants() {
    let d = tempfile::tempdir().unwrap();
    let mp = d.path().join("m.machine.properties");
    std::fs::write(&mp, "version = 1.0\nBR_lat = 2\nBR_miss_lat = 10\n").unwrap();
    bin()
        .args([
            "events",
            "lcpi",
            "--values",
            "instructions=1000,cycles=1200,branches=200,branch-misses=10",
            "--format",
            "json",
            "--constants",
        ])
        .arg(&mp)
        .assert()
        .success()
        .stdout(predicate::str::contains("\"branches\": 0.5"))
        .stdout(predicate::str::contains("\"overall_cpi\": 1.2"));
}

#[test]
fn syntax_and_cpu_flags() {
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("p.csv");
    std::fs::write(
        &f,
        "CPU,a\nPRESET,PAPI_X,DERIVED_ADD,E1,E2\nCPU,b\nPRESET,PAPI_X,DERIVED_SUB,E1,E2\n",
    )
    .unwrap();
    bin()
        .args(["events", "eval"])
        .arg(&f)
        .args(["--cpu", "b", "--values", "E1=5,E2=2", "--format", "json"])
        .assert()
        .success()
        .stdout(predicate::str::contains("\"PAPI_X\": 3"));
    bin()
        .args(["events", "eval"])
        .arg(&f)
        .args(["--cpu", "zz", "--values", "E1=5"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("no `CPU,zz` section"));
    let g = d.path().join("g.txt");
    std::fs::write(&g, "A, B\n").unwrap();
    bin()
        .args(["events", "check"])
        .arg(&g)
        .args(["--syntax", "infix"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("g.txt:1:2: unexpected token `,`"));
}

#[test]
fn events_list_offers_software_events_and_sysfs_pmu_events() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sysfs/power-pmu");
    let out = Command::cargo_bin("powerperf")
        .unwrap()
        .args(["events", "list", "--format", "json", "--sysfs-root"])
        .arg(&root)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let find = |n: &str| {
        v.as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == n)
            .unwrap_or_else(|| panic!("{n} not listed"))
            .clone()
    };
    // Software events count on every Linux machine, this VM included.
    assert_eq!(find("task-clock")["available"], true);
    // A hardware event is either available or says why not (never silently absent).
    let cyc = find("cycles");
    assert!(
        cyc["available"] == true || cyc["reason"].is_string(),
        "{cyc}"
    );
    let pkg = find("power/energy-pkg/");
    assert_eq!(pkg["unit"], "Joules");
    assert!(pkg["scale"].as_f64().unwrap() > 0.0);
    let text = Command::cargo_bin("powerperf")
        .unwrap()
        .args(["events", "list", "--sysfs-root"])
        .arg(&root)
        .output()
        .unwrap();
    let t = String::from_utf8(text.stdout).unwrap();
    assert!(
        t.contains("task-clock") && t.contains("[Software event]"),
        "{t}"
    );
}

/// `events check` without a run probes this machine: perf events (and the perf events a
/// name is an alias of) are opened once, sysfs PMU events are looked up under --sysfs-root.
#[test]
fn check_probes_this_machine_for_each_event() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("u.txt");
    std::fs::write(
        &f,
        "A, context-switches|energy-pkg|+|PAPI_TOT_CYC|+|NO_SUCH_EVENT|+|\n",
    )
    .unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sysfs/power-pmu");
    let out = bin()
        .args(["events", "check", "--syntax", "papi-user"])
        .arg(&f)
        .arg("--sysfs-root")
        .arg(&root)
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    println!("{text}");
    assert!(
        text.contains(
            "needs context-switches: this machine counts it (perf event `context-switches`)"
        ),
        "{text}"
    );
    assert!(
        text.contains("needs energy-pkg: alias of `energy_package_0_j`; this machine has it (sysfs PMU event `power/energy-pkg/`)"),
        "{text}"
    );
    let cycles = text
        .lines()
        .find(|l| l.contains("needs PAPI_TOT_CYC: alias of `cycles`; "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        cycles.contains("this machine counts it (perf event `cycles`)")
            || cycles.contains("this machine: <not supported>: `cycles`: perf_event_open"),
        "{cycles}"
    );
    assert!(
        text.contains(
            "needs NO_SUCH_EVENT: this machine: no perf event or sysfs PMU event of that name"
        ),
        "{text}"
    );
}
