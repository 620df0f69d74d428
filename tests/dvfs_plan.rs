//! `powerperf plan` end to end: fit a model on a set with a known answer, plan, read the plan
//! file back; `plan --evaluate` on the shared real datasets.

mod common;
use common::powerperf as pp;

use powerperf_format::set::{Point, SetMeta, TrainingSet};
use powerperf_node::plan_file::Plan;
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
    noisy_set(dir, &WORKLOADS, &FREQS, 0.0, Some("cpu"));
}

/// Moore-model points of `workloads` at `freqs`, with times off by up to ±`noise` (a fixed
/// pseudo-random pattern, so every run sees the same set), and `device` as the clock's
/// device in set.toml (`None`: device unknown).
fn noisy_set(
    dir: &Path,
    workloads: &[(&str, f64, f64, f64)],
    freqs: &[f64],
    noise: f64,
    device: Option<&str>,
) {
    let meta = SetMeta {
        source: "test".into(),
        knobs: vec!["core_freq_mhz".into()],
        targets: vec!["time_s".into(), "power_w".into(), "energy_j".into()],
        knob_devices: device
            .map(|d| {
                [("core_freq_mhz".to_string(), d.to_string())]
                    .into_iter()
                    .collect()
            })
            .unwrap_or_default(),
        ..SetMeta::default()
    };
    let mut points = Vec::new();
    let mut k = 0u64;
    for &(w, a, b, c) in workloads {
        for &f in freqs {
            let (t, e) = truth(a, b, c, f);
            // a fixed pattern in [-1, 1] (a linear congruential sequence)
            k = k
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let u = ((k >> 33) as f64 / (1u64 << 31) as f64) * 2.0 - 1.0;
            let t = t * (1.0 + noise * u);
            let e = e / truth(a, b, c, f).0 * t;
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
            "--slowdown-margin",
            "0",
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
            "--slowdown-margin",
            "0",
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
        Some(u64::from(powerperf_core::dvfs::export::geopm_region_hash(
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
        .args(["--workload", "zeta", "--slowdown-margin", "0"])
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

/// Eight workloads from memory-bound to compute-bound on eight clocks, times off by up to
/// ±1 %: the guard has errors to work with.
const MIXED: [(&str, f64, f64, f64); 8] = [
    ("w0", 0.0, 3.0, 40.0),
    ("w1", 0.3, 2.7, 45.0),
    ("w2", 0.6, 2.4, 35.0),
    ("w3", 1.0, 2.0, 50.0),
    ("w4", 1.5, 1.5, 40.0),
    ("w5", 2.0, 1.0, 30.0),
    ("w6", 2.5, 0.5, 45.0),
    ("w7", 2.8, 0.2, 50.0),
];
const MIXED_FREQS: [f64; 8] = [650.0, 700.0, 750.0, 800.0, 850.0, 900.0, 950.0, 1000.0];

fn fit(set: &Path, model: &Path, extra: &[&str]) {
    pp().arg("fit")
        .arg(set)
        .arg("-o")
        .arg(model)
        .args(extra)
        .assert()
        .success();
}

/// Issue 20, item 1: `fit` stores the held-out slowdown errors, `plan --model` guards the
/// bound with them by default and records the guard in the plan; `--slowdown-margin 0`
/// gives the raw plan; a model without errors (`--no-loo`, or a file from before) is
/// refused with the fix named, and old model files still load.
#[test]
fn fit_stores_slowdown_errors_and_plan_guards_by_default() {
    let tmp = tempfile::tempdir().unwrap();
    let set = tmp.path().join("set");
    noisy_set(&set, &MIXED, &MIXED_FREQS, 0.01, Some("cpu"));
    let model = tmp.path().join("model.json");
    fit(&set, &model, &[]);
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&model).unwrap()).unwrap();
    let e = &m["slowdown_errors"];
    assert_eq!(e["protocol"], "leave-one-out");
    assert_eq!(e["knob"], "core_freq_mhz");
    // the interior clocks: 6 of 8, for 8 workloads
    assert_eq!(e["error"].as_array().unwrap().len(), 48, "{e}");
    assert_eq!(e["predicted_slowdown"].as_array().unwrap().len(), 48);
    assert_eq!(m["knob_devices"]["core_freq_mhz"], "cpu");

    let plan = tmp.path().join("plan.toml");
    pp().args(["plan", "--model"])
        .arg(&model)
        .args(["--max-slowdown", "5%", "-o"])
        .arg(&plan)
        .assert()
        .success();
    let p = Plan::read(&plan).unwrap();
    assert_eq!(p.plan.guard.as_deref(), Some("risk"));
    assert_eq!(p.plan.risk, Some(0.05));
    let share = p.plan.expected_over_bound.unwrap();
    assert!((0.0..=0.05 + 1e-9).contains(&share), "{share}");
    assert!(p
        .plan
        .guard_errors
        .as_deref()
        .unwrap()
        .contains("leave-one-out, 48 errors"));
    for r in &p.regions {
        assert!(r.slowdown <= 0.05 + 1e-9, "{r:?}");
    }
    // a job: one bound on the total, the errors' 95th percentile taken off it
    let job = tmp.path().join("job.toml");
    pp().args(["plan", "--model"])
        .arg(&model)
        .args(["--max-slowdown", "5%", "--job", "-o"])
        .arg(&job)
        .assert()
        .success();
    let j = Plan::read(&job).unwrap();
    assert_eq!(j.plan.guard.as_deref(), Some("risk"));
    assert!(
        j.plan.expected_over_bound.unwrap() <= 0.05 + 1e-9,
        "{:?}",
        j.plan
    );
    let (t, rt) = (j.plan.time_s.unwrap(), j.plan.reference_time_s.unwrap());
    assert!(t / rt - 1.0 <= 0.05 + 1e-9);
    // the raw plan
    let raw = tmp.path().join("raw.toml");
    pp().args(["plan", "--model"])
        .arg(&model)
        .args(["--max-slowdown", "5%", "--slowdown-margin", "0", "-o"])
        .arg(&raw)
        .assert()
        .success();
    let r = Plan::read(&raw).unwrap();
    assert_eq!(r.plan.guard.as_deref(), Some("none"));
    assert_eq!(r.plan.expected_over_bound, None);
    // no error data: refused, naming the refit and the margin
    let bare = tmp.path().join("bare.json");
    fit(&set, &bare, &["--no-loo"]);
    pp().args(["plan", "--model"])
        .arg(&bare)
        .args(["--max-slowdown", "5%"])
        .assert()
        .failure()
        .stderr(
            predicate::str::contains("fitted with --no-loo")
                .and(predicate::str::contains("--cv 10"))
                .and(predicate::str::contains("--slowdown-margin 1%")),
        );
    // no bound: nothing to guard, the plan is made
    pp().args(["plan", "--model"])
        .arg(&bare)
        .args(["--max-slowdown", "none", "--objective", "edp"])
        .assert()
        .success();
    // a model file from before the new keys: loads, and the guard names why it cannot run
    let mut old = m.clone();
    let o = old.as_object_mut().unwrap();
    o.remove("slowdown_errors");
    o.remove("knob_devices");
    let old_path = tmp.path().join("old.json");
    std::fs::write(&old_path, serde_json::to_string_pretty(&old).unwrap()).unwrap();
    pp().args(["plan", "--model"])
        .arg(&old_path)
        .args(["--max-slowdown", "5%", "--device", "cpu"])
        .assert()
        .failure()
        .stderr(predicate::str::contains(
            "written before powerperf stored them",
        ));
    pp().args(["plan", "--model"])
        .arg(&old_path)
        .args([
            "--max-slowdown",
            "5%",
            "--device",
            "cpu",
            "--slowdown-margin",
            "0.5%",
        ])
        .assert()
        .success();
}

/// Issue 20, item 2: `plan --model` (after `fit`) and `plan --evaluate` (training on every
/// clock, so both fit the same points and choose among the same settings) make the same
/// choice for every workload, with the default guard and with the others.
#[test]
fn plan_model_and_plan_evaluate_choose_alike() {
    let tmp = tempfile::tempdir().unwrap();
    let set = tmp.path().join("set");
    noisy_set(&set, &MIXED, &MIXED_FREQS, 0.01, Some("cpu"));
    let model = tmp.path().join("model.json");
    fit(&set, &model, &[]);
    let train = format!(
        "core_freq_mhz={}",
        MIXED_FREQS.map(|f| f.to_string()).join(",")
    );
    let mut differs_from_raw = false;
    let mut raw: Option<Vec<f64>> = None;
    for guard in ["0", "risk", "risk-class", "1%"] {
        let plan = tmp.path().join(format!("plan-{guard}.toml"));
        pp().args(["plan", "--model"])
            .arg(&model)
            .args(["--max-slowdown", "5%", "--slowdown-margin", guard, "-o"])
            .arg(&plan)
            .assert()
            .success();
        let p = Plan::read(&plan).unwrap();
        let out = pp()
            .args(["plan", "--evaluate"])
            .arg(&set)
            .args([
                "--train",
                &train,
                "--max-slowdown",
                "5%",
                "--slowdown-margin",
                guard,
            ])
            .args(["--format", "json"])
            .assert()
            .success()
            .get_output()
            .stdout
            .clone();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let per = v["per_workload"].as_array().unwrap();
        assert_eq!(per.len(), MIXED.len());
        let mut chosen = Vec::new();
        for w in per {
            let name = w["workload"].as_str().unwrap();
            let f = w["chosen"]["core_freq_mhz"].as_f64().unwrap();
            let r = p.regions.iter().find(|r| r.name == name).unwrap();
            assert_eq!(
                r.setting["core_freq_mhz"], f,
                "guard {guard}, workload {name}"
            );
            chosen.push(f);
        }
        if guard == "0" {
            raw = Some(chosen);
        } else if raw.as_ref() != Some(&chosen) {
            differs_from_raw = true;
        }
        if guard == "risk" {
            let g = &v["risk_guard"];
            let share = p.plan.expected_over_bound.unwrap();
            let expected = g["expected_violations"].as_f64().unwrap();
            assert!(
                (share * MIXED.len() as f64 - expected).abs() < 1e-9,
                "{share} {g}"
            );
        }
    }
    // the guards act on this set: at least one of them moves a workload off the raw choice
    assert!(differs_from_raw);
}

/// Issue 20, item 4: the device comes from the data. A set recording its clock as the
/// GPU's gives a GPU plan without --device; --device overrides it; a set that does not say
/// asks for --device; the bundled Titan X spec records the GPU, so the README's example
/// (`fit titanx`, `plan --model`) writes `kind = "gpu"`.
#[test]
fn the_plan_device_comes_from_the_set() {
    let tmp = tempfile::tempdir().unwrap();
    let gpu_set = tmp.path().join("gpu");
    noisy_set(&gpu_set, &WORKLOADS, &FREQS, 0.0, Some("gpu1"));
    let gpu_model = tmp.path().join("gpu.json");
    fit(&gpu_set, &gpu_model, &["--no-loo"]);
    let plan = tmp.path().join("plan.toml");
    let args = ["--max-slowdown", "5%", "--slowdown-margin", "0", "-o"];
    pp().args(["plan", "--model"])
        .arg(&gpu_model)
        .args(args)
        .arg(&plan)
        .assert()
        .success();
    let p = Plan::read(&plan).unwrap();
    assert_eq!(
        p.devices[0].kind,
        powerperf_node::plan_file::DeviceKind::Gpu
    );
    assert_eq!(p.devices[0].index, Some(1));
    pp().args(["plan", "--model"])
        .arg(&gpu_model)
        .args(["--device", "cpu"])
        .args(args)
        .arg(&plan)
        .assert()
        .success()
        .stderr(predicate::str::contains("--device cpu overrides it"));
    assert_eq!(
        Plan::read(&plan).unwrap().devices[0].kind,
        powerperf_node::plan_file::DeviceKind::Cpu
    );
    // device unknown: plan asks for --device
    let bare_set = tmp.path().join("bare");
    noisy_set(&bare_set, &WORKLOADS, &FREQS, 0.0, None);
    let bare_model = tmp.path().join("bare.json");
    fit(&bare_set, &bare_model, &["--no-loo"]);
    pp().args(["plan", "--model"])
        .arg(&bare_model)
        .args(args)
        .arg(&plan)
        .assert()
        .failure()
        .stderr(
            predicate::str::contains("device unknown").and(predicate::str::contains(
                "give --device cpu or --device gpu",
            )),
        );
    pp().args(["plan", "--model"])
        .arg(&bare_model)
        .args(["--device", "gpu"])
        .args(args)
        .arg(&plan)
        .assert()
        .success();
    assert_eq!(Plan::read(&plan).unwrap().devices[0].index, Some(0));

    // The README's example on the bundled Titan X set (--cv 2 keeps the test short).
    let tx = tmp.path().join("titanx");
    pp().args(["import", "titanx-micro", "-o"])
        .arg(&tx)
        .assert()
        .success();
    let meta = std::fs::read_to_string(tx.join("set.toml")).unwrap();
    assert!(meta.contains("core_freq_mhz = \"gpu0\""), "{meta}");
    let txm = tmp.path().join("titanx-model.json");
    fit(&tx, &txm, &["--cv", "2"]);
    let txp = tmp.path().join("titanx-plan.toml");
    pp().args(["plan", "--model"])
        .arg(&txm)
        .args([
            "--workload",
            "DP",
            "--workload",
            "SP",
            "--objective",
            "energy",
            "--max-slowdown",
            "5%",
            "-o",
        ])
        .arg(&txp)
        .assert()
        .success();
    let text = std::fs::read_to_string(&txp).unwrap();
    assert!(text.contains("kind = \"gpu\""), "{text}");
    assert!(text.contains("guard = \"risk\""), "{text}");
}
