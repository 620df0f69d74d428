//! `powerperf predict --from RUN` without `--model` (issue 39, item 3): the time at other SM
//! clocks from the run's GPM activity fractions, through the bound-and-bottleneck form of
//! analytic_counters. The same code path, fed the V100 DCGM sweep's fractions at 1380 MHz,
//! gives docs/models.md's workload-holdout errors for that form.

mod common;

use powerperf_core::models::features::mean_points;
use powerperf_core::models::from_counters::{model_of, predict_time, Measured};
use powerperf_core::store::import::{import, ImportSpec};
use powerperf_format::timeline::Timeline;
use std::collections::BTreeMap;
use std::path::Path;

/// docs/models.md, "workload holdout from 1380 MHz, bound and bottleneck": time MAPE 9.57 %
/// over 232 points (dgemm 7.05 %, stream 12.09 %), each workload predicted from its 1380 MHz
/// point alone.
#[test]
fn v100_fractions_at_1380_mhz_give_the_documented_errors() {
    let spec = ImportSpec::load(&common::datasets().join("v100-dcgm-sweep.toml")).unwrap();
    let set = import(&spec, None).unwrap().set;
    let pts = mean_points(&set);
    let (mut all, mut per) = (Vec::new(), BTreeMap::new());
    for w in ["dgemm", "stream"] {
        let mine: Vec<_> = pts.iter().filter(|p| p.workload == w).collect();
        let base = mine
            .iter()
            .find(|p| p.knobs["core_freq_mhz"] == 1380.0)
            .expect("a 1380 MHz point");
        // what a run gives: its clock, its time, its activity fractions
        let run = Measured {
            name: w.into(),
            clock_mhz: 1380.0,
            time_s: base.time_s.unwrap(),
            fractions: base.counters.clone(),
        };
        let model = model_of(&[run]).unwrap();
        let mut ape = Vec::new();
        for p in mine.iter().filter(|p| p.knobs["core_freq_mhz"] != 1380.0) {
            let t = predict_time(&model, w, p.knobs["core_freq_mhz"]).unwrap();
            let m = p.time_s.unwrap();
            ape.push(100.0 * (t - m).abs() / m);
        }
        per.insert(w, ape.iter().sum::<f64>() / ape.len() as f64);
        all.extend(ape);
    }
    let mape = all.iter().sum::<f64>() / all.len() as f64;
    println!(
        "v100 from 1380 MHz: time {mape:.2} % over {} points; {per:?}",
        all.len()
    );
    assert_eq!(all.len(), 232);
    for (got, want) in [(mape, 9.57), (per["dgemm"], 7.05), (per["stream"], 12.09)] {
        assert!(
            (got - want).abs() < 0.005,
            "{got:.3} against docs/models.md's {want}"
        );
    }
}

/// A run directory of 4 samples of 20 ms at 1980 MHz: a memory-bound region `copy` (the
/// first 40 ms) and a compute-bound one `dgemm` (the last 40 ms).
fn gpu_run(dir: &Path) {
    let toml = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/runs/loop/run.toml"),
    )
    .unwrap()
    .replace("duration_ns = 74253607", "duration_ns = 80000000");
    std::fs::write(dir.join("run.toml"), toml).unwrap();
    let cols: Vec<String> = [
        "gpu0_sm_clock_mhz",
        "gpu0_gr_engine_active",
        "gpu0_dram_active",
        "gpu0_fp64_active",
        "gpu0_fp32_active",
    ]
    .map(String::from)
    .to_vec();
    let mut t = Timeline::new(&cols);
    for k in 1..=4u64 {
        let (dram, fp64) = if k <= 2 { (0.9, 0.05) } else { (0.1, 0.95) };
        t.push(
            k * 20_000_000,
            20_000_000,
            &[Some(1980.0), Some(1.0), Some(dram), Some(fp64), Some(0.0)],
        );
    }
    t.write_parquet(&dir.join("timeline.parquet")).unwrap();
    let ev = dir.join("region_events");
    std::fs::create_dir(&ev).unwrap();
    std::fs::write(
        ev.join("1.tsv"),
        "# powerperf-rt region events v1 pid=1\nR\t1\tcopy\nR\t2\tdgemm\nB\t1000\t1\t1\nE\t40001000\t1\t1\nB\t40001000\t1\t2\nE\t80001000\t1\t2\n",
    )
    .unwrap();
    powerperf_core::collect::attribution::write_regions(dir, &t, 1000, None)
        .unwrap()
        .unwrap();
}

#[test]
fn predict_from_a_run_without_a_model_is_flat_for_memory_and_one_over_f_for_compute() {
    let d = tempfile::tempdir().unwrap();
    gpu_run(d.path());
    let run = d.path().to_str().unwrap();
    let v = common::json_stdout(common::powerperf().args([
        "predict",
        "--from",
        run,
        "--knob",
        "core_freq_mhz=990,1980",
        "--format",
        "json",
    ]));
    let time = |w: &str, f: f64| {
        v["predictions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["workload"] == w && p["knobs"]["core_freq_mhz"] == f)
            .unwrap_or_else(|| panic!("{w} at {f}: {v}"))["time_s"]
            .as_f64()
            .unwrap()
    };
    // copy: 0.04 s · [max(0.05·2, 0.9) + (1 − 0.9)·2] = 0.044 s at half the clock
    assert!((time("copy", 990.0) - 0.044).abs() < 1e-9);
    assert!((time("copy", 1980.0) - 0.04).abs() < 1e-9);
    // dgemm: 0.04 s · [max(0.95·2, 0.1) + (1 − 0.95)·2] = 0.08 s
    assert!((time("dgemm", 990.0) - 0.08).abs() < 1e-9);
    // the whole run: mean fractions 0.5 and 0.5
    assert!((time("(whole run)", 990.0) - 0.16).abs() < 1e-9);
    for p in v["predictions"].as_array().unwrap() {
        assert!(
            p["power_w"].is_null() && p["energy_j"].is_null(),
            "time only: {p}"
        );
    }
    let notes = v["notes"].to_string();
    assert!(
        notes.contains("from counters") && notes.contains("not validated"),
        "{notes}"
    );
    assert!(notes.contains("time only"), "{notes}");
    // the table says the same
    let out = common::powerperf()
        .args(["predict", "--from", run, "--knob", "core_freq_mhz=990"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let text = String::from_utf8_lossy(&out);
    assert!(
        text.contains("from counters") && text.contains("not validated on this GPU"),
        "{text}"
    );
    assert!(
        text.contains("copy") && text.contains("dgemm") && text.contains("1980 MHz"),
        "{text}"
    );
}

#[test]
fn predict_from_a_run_without_fractions_or_with_another_knob_is_refused() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/runs/loop");
    let out = common::powerperf()
        .args(["predict", "--from"])
        .arg(&fixture)
        .args(["--knob", "core_freq_mhz=990"])
        .assert()
        .failure()
        .get_output()
        .stderr
        .clone();
    let e = String::from_utf8_lossy(&out);
    assert!(
        e.contains("no GPU activity fractions") && e.contains("--model"),
        "{e}"
    );
    let d = tempfile::tempdir().unwrap();
    gpu_run(d.path());
    let out = common::powerperf()
        .args(["predict", "--from"])
        .arg(d.path())
        .args(["--knob", "threads=2"])
        .assert()
        .failure()
        .get_output()
        .stderr
        .clone();
    let e = String::from_utf8_lossy(&out);
    assert!(
        e.contains("--knob threads") && e.contains("core_freq_mhz"),
        "{e}"
    );
}

/// Issue 39, item 3: `predict --from RUN --model MODEL` of a run with GPU activity
/// fractions keeps the time from the run's counters and takes power from the fitted model
/// of that GPU (here fitted on a fake-GPU clock sweep), energy = time × power; the output
/// says which number comes from where. A workload the model does not know is refused
/// naming the ones it knows.
#[test]
fn predict_from_a_run_with_a_model_takes_power_from_the_model() {
    use powerperf_core::models::{ModelFile, Predictor as _};
    let d = tempfile::tempdir().unwrap();
    let gpu = d.path().join("fake-gpu");
    common::copy_tree(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fake-gpu"),
        &gpu,
    );
    common::powerperf()
        .arg("sweep")
        .arg("-o")
        .arg(d.path().join("set"))
        .arg("--fake-gpu")
        .arg(&gpu)
        .arg("--restore-file")
        .arg(d.path().join("restore.toml"))
        .arg("--log")
        .arg(d.path().join("switches.log"))
        .args([
            "--gpu-clock",
            "990,1980",
            "--repeat",
            "2",
            "--workload",
            "sh",
        ])
        .args(["--", "sh", "-c", "sleep 0.05"])
        .assert()
        .success();
    let model = d.path().join("model.json");
    common::powerperf()
        .arg("fit")
        .arg(d.path().join("set"))
        .arg("-o")
        .arg(&model)
        .arg("--no-loo")
        .assert()
        .success();
    let run = d.path().join("run");
    std::fs::create_dir(&run).unwrap();
    gpu_run(&run);
    let v = common::json_stdout(
        common::powerperf()
            .args(["predict", "--from"])
            .arg(&run)
            .arg("--model")
            .arg(&model)
            .args(["--knob", "core_freq_mhz=990,1980", "--format", "json"]),
    );
    let m = ModelFile::read(&model).unwrap();
    let rows = v["predictions"].as_array().unwrap();
    assert_eq!(rows.len(), 6, "{v}");
    for p in rows {
        let f = p["knobs"]["core_freq_mhz"].as_f64().unwrap();
        let want = m
            .predict("sh", &[("core_freq_mhz".to_string(), f)].into())
            .unwrap()
            .power_w
            .expect("the fitted model predicts power");
        let (t, w, e) = (
            p["time_s"].as_f64().unwrap(),
            p["power_w"].as_f64().unwrap(),
            p["energy_j"].as_f64().unwrap(),
        );
        assert_eq!(w, want, "{p}");
        assert!((e - t * w).abs() < 1e-9, "{p}");
    }
    // the time is still the counters' (as without --model)
    let t = |w: &str, f: f64| {
        rows.iter()
            .find(|p| p["workload"] == w && p["knobs"]["core_freq_mhz"] == f)
            .unwrap()["time_s"]
            .as_f64()
            .unwrap()
    };
    assert!((t("copy", 990.0) - 0.044).abs() < 1e-9);
    assert!((t("dgemm", 990.0) - 0.08).abs() < 1e-9);
    let notes = v["notes"].to_string();
    assert!(
        notes.contains("time_s: from counters")
            && notes.contains("power_w: from the fitted model")
            && notes.contains("energy_j = time_s (from counters) × power_w (from the model)")
            && notes.contains("workload sh (the run's command)")
            && !notes.contains("time only"),
        "{notes}"
    );
    assert!(v["kind"].as_str().unwrap().contains("for power"), "{v}");
    // the table has the columns and the notes
    let out = common::powerperf()
        .args(["predict", "--from"])
        .arg(&run)
        .arg("--model")
        .arg(&model)
        .args(["--knob", "core_freq_mhz=990"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let text = String::from_utf8_lossy(&out);
    assert!(
        text.contains("power_w")
            && text.contains("energy_j")
            && text.contains("note: power_w: from the fitted model"),
        "{text}"
    );
    // a workload the model does not know
    let out = common::powerperf()
        .args(["predict", "--from"])
        .arg(&run)
        .arg("--model")
        .arg(&model)
        .args(["--workload", "nope", "--knob", "core_freq_mhz=990"])
        .assert()
        .failure()
        .get_output()
        .stderr
        .clone();
    let e = String::from_utf8_lossy(&out);
    assert!(
        e.contains("does not know workload `nope`") && e.contains("sh"),
        "{e}"
    );
}
