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
    let meta = powerperf_format::run::RunMeta::read(&run).unwrap();
    assert_eq!(meta.knobs.threads, Some(1));
    let gov = std::fs::read_to_string(
        out.join("sysfs-cpufreq-userspace/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"),
    )
    .unwrap();
    assert_eq!(gov.trim(), "schedutil");
}

/// `powerperf quickstart` as an installed binary runs it: the binary alone, copied into an
/// empty directory, run from there with no repository, no `shared/` and no
/// `POWERPERF_DATA_DIR`. Every dataset step runs on the data embedded in the binary: held-out
/// error from real frequency data, a guarded plan judged on measured clocks, a GPU plan
/// whose NVML calls the dry run describes, and a CPU plan applied to the bundled fixture.
#[test]
fn quickstart_runs_every_step_on_the_bundled_data_with_no_repository() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("powerperf");
    std::fs::copy(assert_cmd::cargo::cargo_bin("powerperf"), &bin).unwrap();
    let o = std::process::Command::new(&bin)
        .args([
            "quickstart",
            "--repeat",
            "1",
            "--scale",
            "0.05",
            "--format",
            "json",
        ])
        .current_dir(dir.path())
        .env_remove("POWERPERF_DATA_DIR")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{text}");
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["data"], "bundled", "{j}");
    let ran: Vec<&serde_json::Value> = j["steps"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["commands"].as_array().unwrap())
        .collect();
    assert!(ran.iter().all(|c| c["exit_status"] == 0), "{j}");
    let args = |c: &serde_json::Value| -> Vec<String> {
        c["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_string())
            .collect()
    };
    let find = |first: &str, has: &str| {
        ran.iter()
            .copied()
            .find(|c| {
                let a = args(c);
                a[0] == first && a.iter().any(|x| x == has)
            })
            .unwrap_or_else(|| {
                panic!(
                    "no `{first} … {has}` command in {:?}",
                    ran.iter().map(|c| args(c)).collect::<Vec<_>>()
                )
            })
    };
    // The three frequency sets, imported by name from the binary.
    for set in ["titanx-micro", "v100-dcgm-sweep", "xu3-cbench"] {
        let c = find("import", set);
        assert!(
            c["stdout"].as_str().unwrap().contains("bundled:datasets/"),
            "{c}"
        );
    }
    // Held-out error on the Titan X: a knob holdout over the 13 clocks not trained on.
    let ev = find("evaluate", "core_freq_mhz=595,861,1164");
    let e: serde_json::Value = serde_json::from_str(ev["stdout"].as_str().unwrap()).unwrap();
    assert_eq!(e["points"], 3640, "{e}");
    let mape = e["time"]["mape_pct"].as_f64().unwrap();
    assert!(mape > 0.0 && mape < 2.0, "{e}");
    // The guarded plan, judged on the measured clocks.
    let pe = find("plan", "risk");
    let pe_out = pe["stdout"].as_str().unwrap();
    assert!(pe_out.contains("guard: risk budget"), "{pe_out}");
    assert!(
        pe_out.contains("mean fraction of the oracle's gain"),
        "{pe_out}"
    );
    // The GPU plan file targets the GPU, and its dry run describes the NVML calls.
    let out = dir.path().join("powerperf-quickstart");
    let plan = std::fs::read_to_string(out.join("plans/titanx.toml")).unwrap();
    assert!(plan.contains("kind = \"gpu\""), "{plan}");
    let gpu_apply = find("apply", "powerperf-quickstart/plans/titanx.toml");
    assert!(
        gpu_apply["stderr"]
            .as_str()
            .unwrap()
            .contains("nvmlDeviceSetGpuLockedClocks(device 0"),
        "{gpu_apply}"
    );
    // Issue 39: checked against a fake GPU with the Titan X set's clocks (never this
    // machine's GPU), whose files the dry run left byte-identical.
    let apply_args: Vec<&str> = gpu_apply["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(
        apply_args.contains(&"--fake-gpu") && apply_args.contains(&"--dry-run"),
        "{apply_args:?}"
    );
    let gpu_err = gpu_apply["stderr"].as_str().unwrap();
    assert!(
        gpu_err.contains("of the fake GPU in") && gpu_err.contains("GeForce GTX Titan X"),
        "{gpu_err}"
    );
    assert!(
        gpu_err.contains("nvmlDeviceSetMemoryLockedClocks(device 0, minMemClockMHz 810"),
        "{gpu_err}"
    );
    assert!(
        text.contains("fake GPU carrying the Titan X's clocks")
            && text.contains("byte-identical (nothing was set)"),
        "{text}"
    );
    // The CPU plan from the XU3 set, applied in a dry run to the bundled cpufreq fixture.
    let cpu_apply = find("apply", "powerperf-quickstart/plans/xu3.toml");
    let err = cpu_apply["stderr"].as_str().unwrap();
    assert!(err.contains("dry-run: cpufreq under"), "{err}");
    assert!(err.contains("scaling_setspeed"), "{err}");
    // Thread counts: only those measured here (the collect runs' OMP_NUM_THREADS) are
    // predicted.
    let mut collected: Vec<String> = ran
        .iter()
        .filter(|c| c["args"][0] == "collect")
        .map(|c| c["env"][0][1].as_str().unwrap().to_string())
        .collect();
    collected.dedup();
    if collected.len() >= 2 {
        let pr = find("predict", "mixed");
        let knob = args(pr)
            .into_iter()
            .find(|a| a.starts_with("threads="))
            .unwrap();
        assert_eq!(knob, format!("threads={}", collected.join(",")));
    }
    assert!(text.contains("(unchanged)"), "{text}");
}
