//! `--model auto`, the default (issue 41):
//! - `fit` on a set whose only varying knob is a GPU power limit (issue 39's `sweep
//!   --gpu-power-limit` on a copy of tests/fixtures/fake-gpu; no GPU, no root needed):
//!   `power_limit_w` has no analytic form, so `auto` takes `scaling`'s curve per setting
//!   instead of failing with `analytic`'s error;
//! - `evaluate --protocol workload-holdout` says per target which candidate the nested
//!   cross-validation chose and its inner estimate beside the outer error (item 4), in the
//!   protocol line and as `--format json`'s `auto_choice`.

mod common;
use common::{copy_tree, powerperf as pp};

use predicates::prelude::*;
use std::path::Path;

/// A power-limit sweep of one command whose run time is 15/limit s (50, 30 and 21 ms at
/// 300, 500 and 700 W), two repeats each, into `dir/set`.
fn power_limit_set(dir: &Path) {
    let gpu = dir.join("fake-gpu");
    std::fs::create_dir_all(&gpu).unwrap();
    copy_tree(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fake-gpu"),
        &gpu,
    );
    let child = format!(
        "l=$(cat {}/gpu0/power_limit_w); sleep $(awk -v c=$l 'BEGIN {{ printf \"%.3f\", 15 / c }}')",
        gpu.display()
    );
    pp().arg("sweep")
        .arg("-o")
        .arg(dir.join("set"))
        .arg("--fake-gpu")
        .arg(&gpu)
        .arg("--restore-file")
        .arg(dir.join("restore.toml"))
        .arg("--log")
        .arg(dir.join("switches.log"))
        .args([
            "--gpu-power-limit",
            "300,500,700",
            "--repeat",
            "2",
            "--interval",
            "5ms",
        ])
        .args(["--", "sh", "-c", &child])
        .assert()
        .success();
}

#[test]
fn auto_fits_scaling_on_a_power_limit_sweep() {
    let dir = tempfile::tempdir().unwrap();
    power_limit_set(dir.path());
    let set = dir.path().join("set");
    let model = dir.path().join("model.json");
    // The default model and the default held-out error (leave-one-out on 3 points).
    pp().arg("fit")
        .arg(&set)
        .arg("-o")
        .arg(&model)
        .assert()
        .success()
        .stdout(predicate::str::contains("fitted scaling"));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&model).unwrap()).unwrap();
    assert_eq!(json["kind"], "scaling", "{json}");
    assert!(json.pointer("/model/scaling").is_some(), "{json}");
    // The model predicts the workload along the limit: slower at 300 W than at 700 W (the
    // command sleeps 50 against 21 ms).
    let w = powerperf_format::set::TrainingSet::read(&set)
        .unwrap()
        .workloads()[0]
        .clone();
    let time_at = |limit: &str| -> f64 {
        let out = pp()
            .args(["predict", "--model"])
            .arg(&model)
            .args([
                "--workload",
                &w,
                "--knob",
                &format!("power_limit_w={limit}"),
            ])
            .args(["--format", "json"])
            .assert()
            .success()
            .get_output()
            .stdout
            .clone();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let t = v.pointer("/predictions/0/time_s").and_then(|t| t.as_f64());
        t.unwrap_or_else(|| panic!("no time_s in {v}"))
    };
    let (slow, fast) = (time_at("300"), time_at("700"));
    assert!(slow > fast, "300 W: {slow} s, 700 W: {fast} s");
    // An explicit `--model analytic` still says why it cannot and names the fix.
    pp().arg("fit")
        .arg(&set)
        .args(["--no-loo", "--model", "analytic", "-o"])
        .arg(dir.path().join("analytic.json"))
        .assert()
        .failure()
        .stderr(predicate::str::contains(
            "--model scaling (or linear) for a GPU power-limit sweep",
        ));
}

/// Issue 41, item 4, on the bundled multicore-i7 thread sweep (no counters: `auto` is
/// `scaling` choosing among its transfers per held-out workload).
#[test]
fn evaluate_reports_auto_s_choice_beside_the_outer_error() {
    let dir = tempfile::tempdir().unwrap();
    let set = dir.path().join("multicore-i7");
    pp().args(["import", "multicore-i7", "-o"])
        .arg(&set)
        .assert()
        .success();
    let v = common::json_stdout(pp().arg("evaluate").arg(&set).args([
        "--protocol",
        "workload-holdout",
        "--format",
        "json",
    ]));
    let held_out_workloads = powerperf_format::set::TrainingSet::read(&set)
        .unwrap()
        .workloads()
        .len() as u64;
    for (t, key) in [("time_s", "time"), ("power_w", "power")] {
        let c = &v["auto_choice"][t];
        // One choice per held-out workload, by candidate name.
        let n: u64 = c["chosen"]
            .as_object()
            .unwrap_or_else(|| panic!("{t}: {v}"))
            .values()
            .map(|k| k.as_u64().unwrap())
            .sum();
        assert!(n > 0 && n <= held_out_workloads, "{t}: {c}");
        assert!(c["inner_mape_pct"].as_f64().is_some_and(|e| e > 0.0), "{c}");
        // The outer error is the held-out MAPE `evaluate` reports for the target.
        assert_eq!(c["outer_mape_pct"], v[key]["mape_pct"], "{c}");
        let protocol = v["protocol"].as_str().unwrap();
        assert!(
            protocol.contains(&format!(
                "inner {:.2} % beside outer {:.2} %",
                c["inner_mape_pct"].as_f64().unwrap(),
                c["outer_mape_pct"].as_f64().unwrap()
            )),
            "{protocol}"
        );
    }
    // Another model makes no choice: no key.
    let s = common::json_stdout(pp().arg("evaluate").arg(&set).args([
        "--protocol",
        "workload-holdout",
        "--model",
        "neighbors",
        "--format",
        "json",
    ]));
    assert!(s.get("auto_choice").is_none(), "{s}");
}
