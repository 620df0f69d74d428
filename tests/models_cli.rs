//! End-to-end tests of `powerperf fit`, `predict` and `evaluate` on small sets with a known
//! answer, written through `TrainingSet::write`.

mod common;
use common::powerperf as pp;

use powerperf_format::set::{CounterKind, Point, SetMeta, TrainingSet};
use std::path::Path;

/// t = a + b·1000/f, P = 20 + c·(f/1000)^3, two repeats each (means are exact), with counters.
fn dvfs_set(dir: &Path) {
    let mut meta = SetMeta {
        source: "test".into(),
        knobs: vec!["core_freq_mhz".into()],
        targets: vec!["time_s".into(), "power_w".into(), "energy_j".into()],
        ..SetMeta::default()
    };
    meta.counters.insert("cycles".into(), CounterKind::Count);
    meta.counters.insert("mem_ops".into(), CounterKind::Count);
    let mut points = Vec::new();
    for (i, (w, a, b, c)) in [
        ("alpha", 1.0, 2.0, 30.0),
        ("beta", 3.0, 0.5, 50.0),
        ("gamma", 0.5, 4.0, 40.0),
        ("delta", 2.0, 2.0, 35.0),
    ]
    .iter()
    .enumerate()
    {
        for f in [500.0, 600.0, 700.0, 800.0, 900.0, 1000.0] {
            for (r, d) in [(0, -0.01), (1, 0.01)] {
                let t = a + b * 1000.0 / f + d;
                let p = 20.0 + c * (f / 1000.0f64).powi(3);
                points.push(Point {
                    workload: w.to_string(),
                    knobs: [("core_freq_mhz".to_string(), f)].into_iter().collect(),
                    repeat: Some(r),
                    time_s: Some(t),
                    power_w: Some(p),
                    energy_j: None,
                    counters: [
                        ("cycles".to_string(), f * 1e6 * t),
                        ("mem_ops".to_string(), (i as f64 + 1.0) * 1e8 * t),
                    ]
                    .into_iter()
                    .collect(),
                    static_features: Default::default(),
                });
            }
        }
    }
    TrainingSet { meta, points }.write(dir).unwrap();
}

#[test]
fn fit_predict_evaluate_on_exact_dvfs_set() {
    let tmp = tempfile::tempdir().unwrap();
    let set = tmp.path().join("set");
    dvfs_set(&set);
    let model = tmp.path().join("m.json");
    let out = pp()
        .args([
            "fit",
            set.to_str().unwrap(),
            "-o",
            model.to_str().unwrap(),
            "--explain",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("leave-one-out"), "{text}");
    assert!(text.contains("analytic DVFS model"), "{text}");
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&model).unwrap()).unwrap();
    assert_eq!(m["kind"], "analytic");
    let loo = &m["held_out_error"]["targets"];
    assert!(loo["time_s"]["mape_pct"].as_f64().unwrap() < 1e-6, "{loo}");
    assert!(loo["power_w"]["mape_pct"].as_f64().unwrap() < 1e-4, "{loo}");
    assert_eq!(m["training_knobs"]["alpha"].as_array().unwrap().len(), 6);

    // predict: exact values of the generating curves.
    let out = pp()
        .args([
            "predict",
            "--model",
            model.to_str().unwrap(),
            "--workload",
            "beta",
            "--knob",
            "core_freq_mhz=550,1100",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let preds = v["predictions"].as_array().unwrap();
    assert_eq!(preds.len(), 2);
    for p in preds {
        let f = p["knobs"]["core_freq_mhz"].as_f64().unwrap();
        let t = 3.0 + 0.5 * 1000.0 / f;
        let w = 20.0 + 50.0 * (f / 1000.0f64).powi(3);
        assert!((p["time_s"].as_f64().unwrap() - t).abs() < 1e-9);
        assert!((p["power_w"].as_f64().unwrap() - w).abs() < 1e-6);
        assert!((p["energy_j"].as_f64().unwrap() - t * w).abs() < 1e-6);
    }
    let out = pp()
        .args([
            "predict",
            "--model",
            model.to_str().unwrap(),
            "--workload",
            "beta",
            "--knob",
            "core_freq_mhz=550",
            "--format",
            "csv",
        ])
        .output()
        .unwrap();
    let csv = String::from_utf8_lossy(&out.stdout);
    assert!(
        csv.starts_with("workload,core_freq_mhz,time_s,power_w,energy_j\nbeta,550,"),
        "{csv}"
    );

    // Unknown workload: a clear error naming the known ones.
    let out = pp()
        .args([
            "predict",
            "--model",
            model.to_str().unwrap(),
            "--workload",
            "zeta",
            "--knob",
            "core_freq_mhz=550",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("alpha"));

    // evaluate: knob holdout, JSON shape of issue 6, per-point CSV.
    let pts = tmp.path().join("points.csv");
    let out = pp()
        .args([
            "evaluate",
            set.to_str().unwrap(),
            "--protocol",
            "knob-holdout",
            "--train",
            "core_freq_mhz=500,700,1000",
            "--format",
            "json",
            "-o",
            pts.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["points"], 12);
    for t in ["time", "power", "energy"] {
        assert!(v[t]["mape_pct"].as_f64().unwrap() < 1e-6, "{v}");
        assert!(v[t]["max_pct"].is_number());
    }
    let csv = std::fs::read_to_string(&pts).unwrap();
    assert!(
        csv.starts_with("workload,core_freq_mhz,measured_time_s,predicted_time_s,"),
        "{csv}"
    );
    assert_eq!(csv.lines().count(), 13);
}

#[test]
fn spca_explain_lists_selection_steps() {
    let tmp = tempfile::tempdir().unwrap();
    let set = tmp.path().join("set");
    dvfs_set(&set);
    let model = tmp.path().join("m.json");
    let out = pp()
        .args([
            "fit",
            set.to_str().unwrap(),
            "-o",
            model.to_str().unwrap(),
            "--model",
            "spca",
            "--explain",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("Spearman"), "{text}");
    assert!(
        text.contains("PCA") || text.contains("one column or none left"),
        "{text}"
    );
    assert!(
        text.contains("mem_ops_per_cycle"),
        "rates are per cycle: {text}"
    );
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&model).unwrap()).unwrap();
    assert_eq!(m["kind"], "spca");
    assert!(
        m["model"]["regression"]["targets"][0]["steps"]
            .as_array()
            .unwrap()
            .len()
            >= 3
    );
}

#[test]
fn threads_model_from_two_thread_counts() {
    let tmp = tempfile::tempdir().unwrap();
    let set = tmp.path().join("set");
    let meta = SetMeta {
        source: "collect".into(),
        knobs: vec!["threads".into()],
        targets: vec!["time_s".into(), "energy_j".into()],
        ..SetMeta::default()
    };
    // t = 1 + 4/n, P = 10 + 5n (energy given, power derived).
    let points = [1.0, 2.0]
        .iter()
        .map(|n| {
            let t = 1.0 + 4.0 / n;
            Point {
                workload: "kernel".into(),
                knobs: [("threads".to_string(), *n)].into_iter().collect(),
                time_s: Some(t),
                energy_j: Some(t * (10.0 + 5.0 * n)),
                ..Point::default()
            }
        })
        .collect();
    TrainingSet { meta, points }.write(&set).unwrap();
    let model = tmp.path().join("m.json");
    let out = pp()
        .args(["fit", set.to_str().unwrap(), "-o", model.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("fitted threads"));
    let out = pp()
        .args([
            "predict",
            "--model",
            model.to_str().unwrap(),
            "--workload",
            "kernel",
            "--knob",
            "threads=4",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let p = &v["predictions"][0];
    assert!((p["time_s"].as_f64().unwrap() - 2.0).abs() < 1e-9, "{v}");
    assert!((p["power_w"].as_f64().unwrap() - 30.0).abs() < 1e-9, "{v}");
    assert!((p["energy_j"].as_f64().unwrap() - 60.0).abs() < 1e-9, "{v}");
}

#[test]
fn load_model_gives_a_predictor_with_the_training_grid() {
    let tmp = tempfile::tempdir().unwrap();
    let set = tmp.path().join("set");
    dvfs_set(&set);
    let model = tmp.path().join("m.json");
    assert!(pp()
        .args([
            "fit",
            set.to_str().unwrap(),
            "-o",
            model.to_str().unwrap(),
            "--no-loo"
        ])
        .output()
        .unwrap()
        .status
        .success());
    let m = powerperf_core::models::load_model(&model).unwrap();
    assert_eq!(m.kind(), "analytic");
    assert_eq!(m.workloads().len(), 4);
    let grid = m.knob_grid("gamma");
    assert_eq!(grid.len(), 6);
    let p = m.predict("gamma", &grid[0]).unwrap();
    assert!((p.time_s.unwrap() - (0.5 + 4.0 * 2.0)).abs() < 1e-9);
    let err = powerperf_core::models::load_model(&tmp.path().join("missing.json"))
        .err()
        .unwrap();
    assert!(format!("{err:#}").contains("missing.json"));
}

#[test]
fn fit_format_json_prints_one_object_with_the_loo_error() {
    let tmp = tempfile::tempdir().unwrap();
    let set = tmp.path().join("set");
    dvfs_set(&set);
    let model = tmp.path().join("sub/m.json");
    let out = pp()
        .args([
            "fit",
            set.to_str().unwrap(),
            "-o",
            model.to_str().unwrap(),
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["kind"], "analytic");
    assert!(v["points"].as_u64().unwrap() > 0);
    assert!(
        v["held_out_error"]["targets"]["time_s"]["mape_pct"].is_number(),
        "{v}"
    );
    // The model's folder is created.
    assert!(model.is_file());
}

/// `evaluate --plot`: predicted against measured per target with the y = x line, into a
/// directory (`predicted_vs_measured.svg`) or a named `.svg` file.
#[test]
fn evaluate_plot_writes_predicted_against_measured() {
    let tmp = tempfile::tempdir().unwrap();
    let set = tmp.path().join("set");
    dvfs_set(&set);
    let dir = tmp.path().join("plots");
    let file = tmp.path().join("sub").join("pvm.svg");
    for target in [&dir, &file] {
        let out = pp()
            .args([
                "evaluate",
                set.to_str().unwrap(),
                "--protocol",
                "knob-holdout",
                "--train",
                "core_freq_mhz=500,700,1000",
                "--format",
                "json",
                "--plot",
                target.to_str().unwrap(),
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // stdout stays one JSON object.
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap();
    }
    for svg in [dir.join("predicted_vs_measured.svg"), file] {
        let s = std::fs::read_to_string(&svg).unwrap();
        assert!(s.starts_with("<svg"), "{}", svg.display());
        assert!(s.contains("model analytic"), "title names the model");
        for t in ["time_s", "power_w", "energy_j", "y = x"] {
            assert!(s.contains(t), "{t} missing in {}", svg.display());
        }
        // 4 workloads are few enough for a legend entry each.
        for w in ["alpha", "beta", "gamma", "delta"] {
            assert!(s.contains(w), "series {w} missing");
        }
        // 12 held-out points per panel, 3 panels, plus one legend marker per workload and panel.
        let circles = s.matches("<circle").count();
        assert_eq!(circles, 3 * 12 + 3 * 4, "{circles} markers");
    }
    // A PNG into a directory.
    let png_dir = tmp.path().join("png");
    pp().args([
        "evaluate",
        set.to_str().unwrap(),
        "--protocol",
        "knob-holdout",
        "--train",
        "core_freq_mhz=500,700,1000",
        "--plot",
        png_dir.to_str().unwrap(),
        "--plot-format",
        "png",
    ])
    .assert()
    .success();
    let bytes = std::fs::read(png_dir.join("predicted_vs_measured.png")).unwrap();
    assert_eq!(&bytes[1..4], b"PNG");
}

/// The counter-based analytic model through the binary: `fit --explain` names the memory term
/// and the fitted α, and the model file records the kind.
#[test]
fn analytic_counters_fit_explain_and_evaluate() {
    let tmp = tempfile::tempdir().unwrap();
    let set = tmp.path().join("set");
    dvfs_set(&set);
    let model = tmp.path().join("m.json");
    let params = r#"{"analytic_counters":{"memory_terms":[{"counter":"mem_ops","kind":{"ns_per_event":10}}]}}"#;
    let out = pp()
        .args([
            "fit",
            set.to_str().unwrap(),
            "-o",
            model.to_str().unwrap(),
            "--model",
            "analytic-counters",
            "--params",
            params,
            "--explain",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("mem_ops NsPerEvent(10.0)"), "{text}");
    assert!(text.contains("α = "), "{text}");
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&model).unwrap()).unwrap();
    assert_eq!(m["kind"], "analytic_counters");
    // Without a memory counter the error names the fix.
    let out = pp()
        .args([
            "evaluate",
            set.to_str().unwrap(),
            "--protocol",
            "knob-holdout",
            "--train",
            "core_freq_mhz=500,1000",
            "--model",
            "analytic-counters",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("memory_terms"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The bound-and-bottleneck form through the binary: `fit` records `combine`, `--explain`
/// names the form and that nothing was fitted, `predict` reads the file back. The set has no
/// compute-pipe counter, so the form is the sum with α = 1: t(f) = M + (t0 − M)·f0/f.
#[test]
fn analytic_counters_bound_and_bottleneck_fit_and_predict() {
    let tmp = tempfile::tempdir().unwrap();
    let set = tmp.path().join("set");
    dvfs_set(&set);
    let model = tmp.path().join("m.json");
    let params = r#"{"analytic_counters":{"combine":"max","memory_terms":[{"counter":"mem_ops","kind":{"ns_per_event":1}}]}}"#;
    let out = pp()
        .args([
            "fit",
            set.to_str().unwrap(),
            "-o",
            model.to_str().unwrap(),
            "--model",
            "analytic-counters",
            "--params",
            params,
            "--explain",
            "--no-loo",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("bound and bottleneck"), "{text}");
    assert!(text.contains("nothing fitted"), "{text}");
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&model).unwrap()).unwrap();
    let ac = &m["model"]["analytic_counters"];
    assert_eq!(ac["combine"], "max", "{m}");
    let g = &ac["groups"][0];
    let (w, t0, ms, f0) = (
        g["workload"].as_str().unwrap().to_string(),
        g["t0_s"].as_f64().unwrap(),
        g["memory_s"].as_f64().unwrap(),
        g["f0_mhz"].as_f64().unwrap(),
    );
    assert!(ms > 0.0 && ms < t0, "{g}");
    let f = f0 / 2.0;
    let out = pp()
        .args([
            "predict",
            "--model",
            model.to_str().unwrap(),
            "--workload",
            &w,
            "--knob",
            &format!("core_freq_mhz={f}"),
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let want = ms + (t0 - ms) * 2.0;
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let got = find_f64(&v, "time_s").unwrap();
    assert!((got - want).abs() < 1e-9 * want, "{got} vs {want}: {text}");
}

fn find_f64(v: &serde_json::Value, key: &str) -> Option<f64> {
    match v {
        serde_json::Value::Object(o) => o
            .get(key)
            .and_then(|x| x.as_f64())
            .or_else(|| o.values().find_map(|x| find_f64(x, key))),
        serde_json::Value::Array(a) => a.iter().find_map(|x| find_f64(x, key)),
        _ => None,
    }
}

/// stdout on /dev/full, or a pipe whose reader has gone.
fn full_stdout() -> std::process::Stdio {
    std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap()
        .into()
}

/// Run `args` with its stdout a pipe whose read end is closed before it starts (as `| true`,
/// without the race of a reader that may read first); returns (exit code, stderr).
fn with_closed_stdout(args: &[&str]) -> (Option<i32>, String) {
    use std::os::fd::FromRawFd;
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 writes two fds into `fds`, an array of two c_int.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: `fds[0]` is the read end pipe2 just created, owned here and closed once.
    unsafe { libc::close(fds[0]) };
    // SAFETY: fds[1] is the write end just created, owned by nothing else.
    let w = unsafe { std::os::fd::OwnedFd::from_raw_fd(fds[1]) };
    let out = std::process::Command::new(assert_cmd::cargo::cargo_bin("powerperf"))
        .args(args)
        .stdout(std::process::Stdio::from(w))
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// Issue 18, item 8: a stdout that is full or closed is an exit status of 1 with a message,
/// not a panic (101), and `fit` writes its model file before printing.
#[test]
fn a_full_or_closed_stdout_is_exit_1_and_the_model_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let set = tmp.path().join("set");
    dvfs_set(&set);
    let set = set.to_str().unwrap().to_string();
    let defs = tmp.path().join("defs.txt");
    std::fs::write(&defs, "r = A / B\n").unwrap();
    let defs = defs.to_str().unwrap().to_string();
    let good = tmp.path().join("good.json");
    pp().args(["fit", &set, "--no-loo", "-o", good.to_str().unwrap()])
        .assert()
        .success();
    let good = good.to_str().unwrap().to_string();
    for (i, closed) in [false, true].into_iter().enumerate() {
        let model = tmp.path().join(format!("m{i}.json"));
        let model = model.to_str().unwrap();
        let cmds: Vec<Vec<&str>> = vec![
            vec!["fit", &set, "--no-loo", "-o", model],
            vec!["fit", &set, "--no-loo", "--format", "json", "-o", model],
            vec![
                "predict",
                "--model",
                &good,
                "--workload",
                "beta",
                "--knob",
                "core_freq_mhz=550",
            ],
            vec!["events", "eval", &defs, "--values", "A=3,B=4"],
        ];
        for args in cmds {
            let _ = std::fs::remove_file(model);
            let (code, err) = if closed {
                with_closed_stdout(&args)
            } else {
                let out = std::process::Command::new(assert_cmd::cargo::cargo_bin("powerperf"))
                    .args(&args)
                    .stdout(full_stdout())
                    .output()
                    .unwrap();
                (
                    out.status.code(),
                    String::from_utf8_lossy(&out.stderr).into(),
                )
            };
            let what = format!(
                "{args:?} with stdout {}",
                if closed { "closed" } else { "/dev/full" }
            );
            assert!(!err.contains("panicked"), "{what}: {err}");
            assert_eq!(code, Some(1), "{what}: {err}");
            if !closed {
                assert!(err.contains("stdout"), "{what}: {err}");
            }
            if args[0] == "fit" {
                assert!(Path::new(model).is_file(), "{what}: no model file");
            }
        }
    }
}

/// A spec of one frequency knob and a time target over `m.csv`, in `dir`.
fn freq_time_spec(dir: &Path, csv: &str) -> std::path::PathBuf {
    std::fs::write(dir.join("m.csv"), csv).unwrap();
    let spec = dir.join("spec.toml");
    std::fs::write(
        &spec,
        "name = \"t\"\nfile = \"m.csv\"\nworkload = \"app\"\n[[knob]]\nname = \"core_freq_mhz\"\ncolumn = \"f\"\n[time]\ncolumn = \"t\"\nunit = \"s\"\n",
    )
    .unwrap();
    spec
}

// Issue 18, item 6: invalid numbers are refused at every boundary (import, the training
// set fit reads, model load, predict's knobs, plan's arguments), with a non-zero exit and a
// message that names the value, the file and the line.

/// Import: a frequency of 0, -1000, NaN, inf, 1e308; a negative or NaN time.
#[test]
fn import_refuses_invalid_numbers_naming_value_file_and_line() {
    let tmp = tempfile::tempdir().unwrap();
    for (f, t) in [
        ("0", "1.5"),
        ("-1000", "1.5"),
        ("NaN", "1.5"),
        ("inf", "1.5"),
        ("1e308", "1.5"),
        ("1000", "-2"),
        ("1000", "nan"),
    ] {
        let d = tmp.path().join(format!("imp-{f}-{t}"));
        std::fs::create_dir_all(&d).unwrap();
        let spec = freq_time_spec(&d, &format!("app,f,t\na,900,1.0\nb,{f},{t}\n"));
        let out = pp()
            .arg("import")
            .arg(&spec)
            .arg("-o")
            .arg(d.join("set"))
            .arg("--file")
            .arg(d.join("m.csv"))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "import accepted f={f} t={t}");
        let bad = if f == "1000" { t } else { f };
        assert!(
            err.contains("m.csv") && err.contains("line 3") && err.contains(&format!("`{bad}`")),
            "f={f} t={t}: {err}"
        );
    }
}

/// fit: a training set holding a negative time and a NaN power (written directly).
#[test]
fn fit_refuses_a_set_with_invalid_numbers() {
    let tmp = tempfile::tempdir().unwrap();
    let bad_set = tmp.path().join("bad-set");
    let mut meta = SetMeta {
        source: "test".into(),
        knobs: vec!["core_freq_mhz".into()],
        targets: vec!["time_s".into(), "power_w".into()],
        ..SetMeta::default()
    };
    meta.counters.clear();
    let points = [
        (500.0, 2.0, 30.0),
        (800.0, -1.0, 40.0),
        (1000.0, 1.0, f64::NAN),
    ]
    .iter()
    .map(|&(f, t, p)| Point {
        workload: "w".into(),
        knobs: [("core_freq_mhz".to_string(), f)].into_iter().collect(),
        repeat: None,
        time_s: Some(t),
        power_w: Some(p),
        energy_j: None,
        counters: Default::default(),
        static_features: Default::default(),
    })
    .collect();
    TrainingSet { meta, points }.write(&bad_set).unwrap();
    let out = pp()
        .arg("fit")
        .arg(&bad_set)
        .arg("-o")
        .arg(tmp.path().join("bad.json"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "fit accepted a negative time: {err}");
    assert!(
        err.contains("points.parquet") && err.contains("-1"),
        "{err}"
    );
    assert!(!tmp.path().join("bad.json").exists());
}

/// A fitted model of `dvfs_set` in `tmp`.
fn fitted_model(tmp: &Path) -> std::path::PathBuf {
    let set = tmp.join("set");
    dvfs_set(&set);
    let model = tmp.join("m.json");
    pp().arg("fit")
        .arg(&set)
        .args(["--no-loo", "-o"])
        .arg(&model)
        .assert()
        .success();
    model
}

/// Model load: a model file with a negative t_comp_s or f_ref_mhz = 0 (predict and plan).
#[test]
fn a_model_with_invalid_numbers_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let model = fitted_model(tmp.path());
    let text = std::fs::read_to_string(&model).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    for (key, bad) in [("t_comp_s", -3.5), ("f_ref_mhz", 0.0)] {
        let mut m = v.clone();
        fn set_first(v: &mut serde_json::Value, key: &str, x: f64) -> bool {
            match v {
                serde_json::Value::Object(o) => {
                    if let Some(slot) = o.get_mut(key) {
                        *slot = serde_json::json!(x);
                        return true;
                    }
                    o.values_mut().any(|c| set_first(c, key, x))
                }
                serde_json::Value::Array(a) => a.iter_mut().any(|c| set_first(c, key, x)),
                _ => false,
            }
        }
        assert!(set_first(&mut m, key, bad), "no {key} in the model");
        let p = tmp.path().join(format!("bad-{key}.json"));
        std::fs::write(&p, serde_json::to_string_pretty(&m).unwrap()).unwrap();
        for args in [
            vec![
                "predict",
                "--workload",
                "beta",
                "--knob",
                "core_freq_mhz=550",
                "--model",
            ],
            vec!["plan", "--model"],
        ] {
            let out = pp().args(&args).arg(&p).output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{args:?} accepted {key} = {bad}");
            assert!(
                err.contains(&format!("bad-{key}.json"))
                    && err.contains(key)
                    && err.contains("line "),
                "{args:?} {key}: {err}"
            );
        }
    }
}

/// predict: knob values that are no frequency.
#[test]
fn predict_refuses_knob_values_that_are_no_frequency() {
    let tmp = tempfile::tempdir().unwrap();
    let model = fitted_model(tmp.path());
    for knob in ["0", "-5", "1e300", "nan", "inf"] {
        let out = pp()
            .arg("predict")
            .arg("--model")
            .arg(&model)
            .args([
                "--workload",
                "beta",
                "--knob",
                &format!("core_freq_mhz=550,{knob}"),
            ])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "predict accepted core_freq_mhz={knob}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(err.contains(&format!("`{knob}`")), "{knob}: {err}");
    }
}

/// plan: arguments that are not numbers of their kind.
#[test]
fn plan_refuses_arguments_that_are_not_numbers_of_their_kind() {
    let tmp = tempfile::tempdir().unwrap();
    let model = fitted_model(tmp.path());
    for (flag, value) in [
        ("--transition-latency", "-1"),
        ("--transition-energy", "inf"),
        ("--min-region", "nan"),
        ("--power-cap", "nan"),
        ("--idle-power", "-5"),
        ("--max-slowdown", "nan"),
    ] {
        let plan = tmp.path().join("plan.toml");
        let out = pp()
            .arg("plan")
            .arg("--model")
            .arg(&model)
            .arg(format!("{flag}={value}"))
            .arg("-o")
            .arg(&plan)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        let written = std::fs::read_to_string(&plan).unwrap_or_default();
        let _ = std::fs::remove_file(&plan);
        assert!(
            !out.status.success(),
            "plan accepted {flag}={value}: {written}"
        );
        assert!(
            err.contains(flag) && err.contains(value),
            "{flag}={value}: {err}"
        );
    }
}
