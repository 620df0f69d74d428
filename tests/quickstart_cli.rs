//! `powerperf quickstart` end to end on what this machine can do alone (`--no-data`): collect
//! at each thread count, import, fit and predict a thread-count model, and apply the shipped
//! example plan with --dry-run to a copy of the cpufreq fixture. The dataset steps are
//! covered by tests/import_datasets.rs, tests/models_real.rs and tests/dvfs_plan.rs.

use assert_cmd::Command;

#[test]
fn quickstart_without_datasets_runs_every_local_step() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("qs");
    let o = Command::cargo_bin("powerperf")
        .unwrap()
        .args([
            "quickstart",
            "--no-data",
            "--repeat",
            "1",
            "--scale",
            "0.05",
            "--format",
            "json",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    // --format json: the transcript on stderr, one object on stdout.
    let text = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&o.stdout)
    );
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let steps = j["steps"].as_array().unwrap();
    assert!(
        steps[0]["title"]
            .as_str()
            .unwrap()
            .starts_with("1. collect"),
        "{j}"
    );
    let ran: Vec<&serde_json::Value> = steps
        .iter()
        .flat_map(|s| s["commands"].as_array().unwrap())
        .collect();
    assert!(ran.iter().any(|c| c["args"][0] == "collect"), "{j}");
    assert!(ran.iter().any(|c| c["args"][0] == "apply"), "{j}");
    assert!(ran.iter().all(|c| c["exit_status"] == 0), "{j}");
    assert!(text.contains("== 1. collect"), "{text}");
    assert!(
        text.contains("not found") || text.contains("skipped"),
        "{text}"
    );
    assert!(
        text.contains("== 3. apply the shipped example plan"),
        "{text}"
    );
    assert!(text.contains("dry-run"), "{text}");
    assert!(text.contains("(unchanged)"), "{text}");
    // Runs exist and are readable; the dry run changed nothing in the fixture copy.
    let run = out.join("runs/mixed-t1-r0");
    let meta = powerperf::store::run::RunMeta::read(&run).unwrap();
    assert_eq!(meta.knobs.threads, Some(1));
    let gov = std::fs::read_to_string(
        out.join("sysfs-cpufreq-userspace/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"),
    )
    .unwrap();
    assert_eq!(gov.trim(), "schedutil");
}
