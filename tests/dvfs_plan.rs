//! `powerperf plan` end to end: fit a model on a set with a known answer, plan, read the plan
//! file back; `plan --evaluate` on the shared real datasets.

mod common;
use common::powerperf as pp;

use powerperf::dvfs::plan_file::Plan;
use powerperf::store::set::{Point, SetMeta, TrainingSet};
use predicates::prelude::*;
use std::path::Path;

/// t = a + b·1000/f (s), P = 20 + c·(f/1000)³ (W), Moore 2012's DVFS model exactly.
const WORKLOADS: [(&str, f64, f64, f64); 3] = [
    ("alpha", 1.0, 2.0, 30.0),
    ("beta", 3.0, 0.5, 50.0),
    ("gamma", 2.0, 1.0, 40.0),
];
const FREQS: [f64; 6] = [500.0, 600.0, 700.0, 800.0, 900.0, 1000.0];

fn truth(a: f64, b: f64, c: f64, f: f64) -> (f64, f64) {
    let t = a + b * 1000.0 / f;
    (t, (20.0 + c * (f / 1000.0f64).powi(3)) * t)
}

fn exact_set(dir: &Path) {
    let meta = SetMeta {
        source: "test".into(),
        knobs: vec!["core_freq_mhz".into()],
        targets: vec!["time_s".into(), "power_w".into(), "energy_j".into()],
        ..SetMeta::default()
    };
    let mut points = Vec::new();
    for (w, a, b, c) in WORKLOADS {
        for f in FREQS {
            let (t, e) = truth(a, b, c, f);
            points.push(Point {
                workload: w.into(),
                knobs: [("core_freq_mhz".to_string(), f)].into_iter().collect(),
                repeat: Some(0),
                time_s: Some(t),
                power_w: Some(e / t),
                energy_j: Some(e),
                ..Default::default()
            });
        }
    }
    TrainingSet { meta, points }.write(dir).unwrap();
}

#[test]
fn plan_chooses_the_lowest_energy_within_the_bound_and_writes_a_plan_file() {
    let tmp = tempfile::tempdir().unwrap();
    let set = tmp.path().join("set");
    exact_set(&set);
    let model = tmp.path().join("model.json");
    pp().arg("fit")
        .arg(&set)
        .arg("-o")
        .arg(&model)
        .arg("--no-loo")
        .assert()
        .success();
    let plan = tmp.path().join("plan.toml");
    pp().args(["plan", "--model"])
        .arg(&model)
        .args([
            "--objective",
            "energy",
            "--max-slowdown",
            "5%",
            "--srun",
            "-o",
        ])
        .arg(&plan)
        .assert()
        .success()
        .stdout(
            predicate::str::contains("--cpu-freq=")
                .and(predicate::str::contains("plan written to")),
        );
    let p = Plan::read(&plan).unwrap();
    assert_eq!(p.regions.len(), 3);
    assert_eq!(p.devices[0].default["core_freq_mhz"], 1000.0);
    for (w, a, b, c) in WORKLOADS {
        // brute force on the true curves: least energy with t ≤ 1.05·t(1000)
        let (t_ref, _) = truth(a, b, c, 1000.0);
        let best = FREQS
            .iter()
            .filter(|&&f| truth(a, b, c, f).0 <= 1.05 * t_ref)
            .min_by(|x, y| truth(a, b, c, **x).1.total_cmp(&truth(a, b, c, **y).1))
            .unwrap();
        let r = p.regions.iter().find(|r| r.name == w).unwrap();
        assert_eq!(r.setting["core_freq_mhz"], *best, "{w}");
        assert!(r.slowdown <= 0.05 + 1e-9);
        let (t, e) = truth(a, b, c, *best);
        assert!(
            (r.time_s - t).abs() < 1e-3 * t && (r.energy_j - e).abs() < 1e-2 * e,
            "{w}: {r:?} vs {t} {e}"
        );
    }
    // JSON output and job scope
    let out = pp()
        .args(["plan", "--model"])
        .arg(&model)
        .args([
            "--workload",
            "alpha",
            "--workload",
            "beta",
            "--job",
            "--objective",
            "edp",
            "--max-slowdown",
            "0.05",
            "--format",
            "json",
        ])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["plan"]["plan"]["scope"], "job");
    // GEOPM frequency_map policy: default = maximum (Hz), region hashes (CRC-32C of the name)
    let out = pp()
        .args(["plan", "--model"])
        .arg(&model)
        .args([
            "--workload",
            "alpha",
            "--workload",
            "beta",
            "--job",
            "--geopm",
        ])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let text = String::from_utf8(out).unwrap();
    let line = text.lines().find(|l| l.starts_with("job\t")).unwrap();
    let policy: serde_json::Value = serde_json::from_str(line.split_once('\t').unwrap().1).unwrap();
    assert_eq!(policy["FREQ_DEFAULT"].as_f64(), Some(1e9));
    assert_eq!(
        policy["HASH_0"].as_u64(),
        Some(u64::from(powerperf::dvfs::export::geopm_region_hash(
            "alpha"
        )))
    );
    assert!(policy["FREQ_1"].as_f64().unwrap() <= 1e9);
    assert!(
        v["plan"]["plan"]["time_s"].as_f64().unwrap()
            <= 1.05 * v["plan"]["plan"]["reference_time_s"].as_f64().unwrap() + 1e-9
    );
}

#[test]
fn plan_errors_name_the_problem() {
    let tmp = tempfile::tempdir().unwrap();
    let set = tmp.path().join("set");
    exact_set(&set);
    let model = tmp.path().join("model.json");
    pp().arg("fit")
        .arg(&set)
        .arg("-o")
        .arg(&model)
        .arg("--no-loo")
        .assert()
        .success();
    pp().args(["plan", "--model"])
        .arg(&model)
        .args(["--max-slowdown", "five"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("`five` is not a slowdown"));
    pp().args(["plan", "--model"])
        .arg(&model)
        .args(["--workload", "zeta"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("`zeta`").and(predicate::str::contains("alpha")));
}

fn import(spec: &str, data: &Path, out: &Path) {
    pp().arg("import")
        .arg(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("datasets")
                .join(spec),
        )
        .arg("-o")
        .arg(out)
        .env("POWERPERF_DATA_DIR", data)
        .assert()
        .success();
}

#[test]
fn evaluate_on_titanx_and_xu3() {
    let data = common::datasets();
    let tmp = tempfile::tempdir().unwrap();
    let set = tmp.path().join("titanx");
    import("titanx-micro.toml", &data, &set);
    let out = pp()
        .args(["plan", "--evaluate"])
        .arg(&set)
        .args([
            "--train",
            "core_freq_mhz=595,861,1164",
            "--max-slowdown",
            "5%",
            "--slowdown-margin",
            "0",
            "--format",
            "json",
        ])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["workloads"], 140);
    let per = v["per_workload"].as_array().unwrap();
    assert_eq!(per.len(), 140);
    let frac = v["mean_fraction_of_oracle"].as_f64().unwrap();
    let viol = v["bound_violations"].as_u64().unwrap();
    // No margin: the plan trusts the model fully. The figures are reported, not asserted
    // (issue 7's 95 % / one-in-twenty is judged with the a-priori risk guard in
    // `risk_guard_on_titanx_keeps_violations_within_one_in_twenty`, docs/dvfs.md).
    println!(
        "titanx-micro, 5 % bound, no margin: mean fraction of oracle {frac:.4}, violations {viol}"
    );
    // The summary agrees with the rows: violations are the workloads whose measured
    // slowdown exceeds the bound, and the mean is the mean of the rows' fractions.
    let mut count = 0;
    for w in per {
        let s = w["measured_slowdown"].as_f64().unwrap();
        let violated = w["violation"].as_bool().unwrap();
        assert_eq!(violated, s > 0.05 + 1e-12);
        count += u64::from(violated);
    }
    assert_eq!(count, viol);

    let xu3 = tmp.path().join("xu3");
    import("xu3-cbench.toml", &data, &xu3);
    let out = pp()
        .args(["plan", "--evaluate"])
        .arg(&xu3)
        .args([
            "--train",
            "core_freq_mhz=1000,2000",
            "--objective",
            "edp",
            "--max-slowdown",
            "none",
            "--format",
            "json",
        ])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let frac = v["mean_fraction_of_oracle"].as_f64().unwrap();
    println!(
        "xu3 EDP, trained on 1000 and 2000 MHz: mean fraction of the oracle's EDP gain {frac:.4}"
    );
    assert_eq!(v["workloads"], 30);
    assert!(frac > 0.9, "{frac}");
}

/// The risk-budget guard (docs/dvfs.md): errors from the 280 interior training points
/// (861 MHz × 2 memory clocks × 140 workloads), the expected number of violations within
/// the budget (5 % of 140), and the measured violations within one workload in twenty.
/// (Its mean fraction of the oracle, 94.1 % with 2 violations when written — joint clock
/// calibration, gains as shares of each workload's predicted oracle, docs/dvfs.md — is
/// printed, not asserted: it misses issue 7's 95 %, and no guard from training data only
/// has reached it.)
#[test]
fn risk_guard_on_titanx_keeps_violations_within_one_in_twenty() {
    let data = common::datasets();
    let tmp = tempfile::tempdir().unwrap();
    let set = tmp.path().join("titanx");
    import("titanx-micro.toml", &data, &set);
    let out = pp()
        .args(["plan", "--evaluate"])
        .arg(&set)
        .args([
            "--train",
            "core_freq_mhz=595,861,1164",
            "--max-slowdown",
            "5%",
            "--slowdown-margin",
            "risk",
            "--format",
            "json",
        ])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["workloads"], 140);
    let g = &v["risk_guard"];
    assert_eq!(g["errors"], 280);
    assert!(g["expected_violations"].as_f64().unwrap() <= 0.05 * 140.0 + 1e-9);
    let frac = v["mean_fraction_of_oracle"].as_f64().unwrap();
    let viol = v["bound_violations"].as_u64().unwrap();
    println!("titanx-micro, 5 % bound, risk guard 0.05: mean fraction of oracle {frac:.4}, violations {viol}");
    assert!(viol as f64 <= 140.0 / 20.0, "{viol}");
}

/// The risk guard on a set with two training clocks cannot measure interpolation errors: the
/// error names the missing value and gives a complete fix, a flag with its value (issue 20:
/// the message ended "give --slowdown-margin" with no value).
#[test]
fn risk_guard_without_interior_clocks_names_a_complete_fix() {
    let dir = tempfile::tempdir().unwrap();
    let set = dir.path().join("xu3");
    pp().args(["import", "xu3-cbench", "-o"])
        .arg(&set)
        .assert()
        .success();
    pp().args(["plan", "--evaluate"])
        .arg(&set)
        .args([
            "--train",
            "core_freq_mhz=1000,2000",
            "--slowdown-margin",
            "risk",
        ])
        .assert()
        .failure()
        .stderr(
            predicate::str::contains("strictly between the lowest and the highest (1000 and 2000)")
                .and(predicate::str::contains("e.g. --slowdown-margin 1%")),
        );
}
