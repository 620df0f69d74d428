//! End-to-end: `powerperf import` on the bundled public datasets (`datasets/`, beside the
//! specs; `datasets/README.md`). Expected values are cells of the CSV files (line numbers in
//! comments) or sums over them computed independently of powerperf.

mod common;

use assert_cmd::Command;
use powerperf_format::set::{CounterKind, TrainingSet};
use std::path::{Path, PathBuf};

fn spec(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("datasets")
        .join(name)
}

/// Import `spec_name` (the bundled data `needs` must exist) with POWERPERF_DATA_DIR set;
/// returns the set and the stdout.
fn import(spec_name: &str, needs: &str) -> (TrainingSet, String) {
    let data = common::datasets();
    assert!(
        data.join(needs).exists(),
        "{} absent",
        data.join(needs).display()
    );
    let out = tempfile::tempdir().unwrap();
    let set_dir = out.path().join("set");
    let assert = Command::cargo_bin("powerperf")
        .unwrap()
        .env("POWERPERF_DATA_DIR", &data)
        .arg("import")
        .arg(spec(spec_name))
        .arg("-o")
        .arg(&set_dir)
        .assert()
        .success();
    let stdout = String::from_utf8(assert.get_output().stdout.clone()).unwrap();
    (TrainingSet::read(&set_dir).unwrap(), stdout)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

fn point<'a>(
    set: &'a TrainingSet,
    workload: &str,
    knobs: &[(&str, f64)],
    repeat: Option<i64>,
) -> &'a powerperf_format::set::Point {
    set.points
        .iter()
        .find(|p| {
            p.workload == workload
                && p.repeat == repeat
                && knobs.iter().all(|(k, v)| p.knobs.get(*k) == Some(v))
        })
        .unwrap_or_else(|| panic!("no point {workload} {knobs:?} {repeat:?}"))
}

#[test]
fn titanx_micro_140_workloads_32_settings_with_ptx_features() {
    let (set, stdout) = import("titanx-micro.toml", "titanx-dvfs/micro_140.csv");
    assert!(stdout.contains("4480 points, 140 workloads"), "{stdout}");
    assert_eq!(set.points.len(), 4480);
    assert_eq!(set.workloads().len(), 140);
    assert_eq!(set.knob_values("core_freq_mhz").len(), 16);
    assert_eq!(set.knob_values("mem_freq_mhz"), vec![810.0, 3505.0]);
    for w in set.workloads() {
        assert_eq!(set.points_of(&w).count(), 32, "{w}");
    }
    // micro_140.csv line 2: DP,810,595,36.479786,48.350079,1763.800537
    let p = point(
        &set,
        "DP",
        &[("mem_freq_mhz", 810.0), ("core_freq_mhz", 595.0)],
        None,
    );
    assert!(close(p.time_s.unwrap(), 36.479786));
    assert!(close(p.power_w.unwrap(), 48.350079));
    assert!(close(p.energy_j.unwrap(), 1763.800537));
    // ptx_instruction_counts.csv: DP has one kernel with add 1, fma 4087, mov 2;
    // global_l1_hit has two kernels whose ld counts sum to 226.
    assert_eq!(set.meta.static_features.len(), 101);
    assert_eq!(p.static_features["ptx_fma"], 4087.0);
    assert_eq!(p.static_features["ptx_add"], 1.0);
    assert_eq!(p.static_features["ptx_mov"], 2.0);
    assert_eq!(p.static_features["ptx_add_cc"], 0.0);
    let g = set.points_of("global_l1_hit").next().unwrap();
    assert_eq!(g.static_features["ptx_ld"], 226.0);
    assert_eq!(g.static_features["ptx_add"], 41.0);
    assert!(set.points.iter().all(|p| p.static_features.len() == 101));
    assert!(set.meta.unreliable.is_empty());
}

#[test]
fn v100_sweep_21_apps_time_trusted_only_for_dgemm_and_stream() {
    let (set, _) = import("v100-dcgm-sweep.toml", "v100-dcgm-sweep/spec_21apps.csv");
    assert_eq!(set.workloads().len(), 21);
    assert_eq!(set.points.len(), 21 * 117);
    assert_eq!(set.knob_values("core_freq_mhz").len(), 117);
    assert_eq!(set.meta.knobs, vec!["core_freq_mhz"]);
    // spec_21apps.csv line 2: bfs, sm_app_clock 510, power_usage 52.77245068, run_time 30.69
    let p = point(&set, "bfs", &[("core_freq_mhz", 510.0)], None);
    assert!(close(p.power_w.unwrap(), 52.77245068));
    assert!(close(p.time_s.unwrap(), 30.69));
    assert!(close(p.energy_j.unwrap(), 52.77245068 * 30.69));
    assert!(close(p.counters["pcie_tx_bytes_per_s"], 16715185.85));
    assert!(close(p.counters["gr_engine_active"], 0.93710887));
    assert_eq!(set.meta.counters["sm_active"], CounterKind::Rate);
    assert!(set.meta.counters.contains_key("tensor_active"));
    assert!(!set.meta.counters.contains_key("fp_active"));
    for w in set.workloads() {
        let trusted = w == "dgemm" || w == "stream";
        assert_eq!(set.meta.is_reliable("time_s", &w), trusted, "{w}");
        assert_eq!(set.meta.is_reliable("energy_j", &w), trusted, "{w}");
        assert!(set.meta.is_reliable("power_w", &w));
    }
}

#[test]
fn xu3_timeline_one_point_per_benchmark_frequency_run() {
    let (set, stdout) = import("xu3-cbench.toml", "xu3-pmu-power/cbench_timeline.tsv");
    assert_eq!(
        set.points.len(),
        180,
        "30 programs × 3 frequencies × 2 runs"
    );
    assert_eq!(set.workloads().len(), 30);
    assert_eq!(
        set.knob_values("core_freq_mhz"),
        vec![1000.0, 1500.0, 2000.0]
    );
    assert!(stdout.contains("sample period 0.509325 s"), "{stdout}");
    // automotive_bitcount at 2000 MHz, run 1: 29 samples (lines 2-30) spanning 14.243584321 s;
    // file-wide median sample period 0.509324512 s; Σ A15 power × interval = 31.703903 J;
    // Σ CPU_CYCLES = 28596037613, Σ INST_RETIRED = 45163375922.
    let p = point(
        &set,
        "automotive_bitcount",
        &[("core_freq_mhz", 2000.0)],
        Some(1),
    );
    assert!(
        (p.time_s.unwrap() - 14.752908833).abs() < 1e-6,
        "{:?}",
        p.time_s
    );
    assert!(
        (p.energy_j.unwrap() - 31.703903063).abs() < 1e-6,
        "{:?}",
        p.energy_j
    );
    assert!(
        (p.power_w.unwrap() - 2.148993356).abs() < 1e-6,
        "{:?}",
        p.power_w
    );
    assert_eq!(p.counters["cpu_cycles"], 28596037613.0);
    assert_eq!(p.counters["inst_retired"], 45163375922.0);
    assert_eq!(p.knobs["threads"], 1.0);
    assert_eq!(set.meta.counters.len(), 13);
    assert!(set.meta.counters.values().all(|k| *k == CounterKind::Count));
}

#[test]
fn multicore_sets_take_workload_from_file_name_and_parse_ghz() {
    for (spec_name, sys, n_workloads, n_cores) in [
        ("multicore-xeon.toml", "xeon", 10, 20),
        ("multicore-amd.toml", "amd", 7, 48),
        ("multicore-i7.toml", "i7", 10, 8),
    ] {
        let (set, _) = import(spec_name, &format!("multicore-scaling/{sys}"));
        assert_eq!(set.workloads().len(), n_workloads, "{sys}");
        assert_eq!(set.points.len(), n_workloads * n_cores, "{sys}");
        assert_eq!(set.knob_values("threads").len(), n_cores, "{sys}");
        assert_eq!(set.knob_values("core_freq_mhz").len(), 1, "{sys}");
    }
    // amd/data-ep.csv line 3: 1;2;2.10GHz;264.32;28.8;103680.0;396.301149425;
    let (set, _) = import("multicore-amd.toml", "multicore-scaling/amd");
    let p = point(&set, "ep", &[("threads", 2.0)], None);
    assert_eq!(p.knobs["core_freq_mhz"], 2100.0);
    assert!(close(p.time_s.unwrap(), 264.32));
    assert!(close(p.energy_j.unwrap(), 103680.0));
    assert!(close(p.power_w.unwrap(), 396.301149425));
}

#[test]
fn file_flag_overrides_the_spec_file() {
    let file = common::datasets().join("multicore-scaling/i7/data-sp.csv");
    // The xeon spec reads the i7 file: same columns, one workload.
    let out = tempfile::tempdir().unwrap();
    Command::cargo_bin("powerperf")
        .unwrap()
        .args(["import"])
        .arg(spec("multicore-xeon.toml"))
        .arg("--file")
        .arg(&file)
        .arg("-o")
        .arg(out.path())
        .assert()
        .success();
    let set = TrainingSet::read(out.path()).unwrap();
    assert_eq!(set.workloads(), vec!["sp"]);
    assert_eq!(set.points.len(), 8);
    // i7/data-sp.csv line 5: 1;4;4.00GHz;264.79;4.6;16560.0;63.8467680608;
    let p = point(&set, "sp", &[("threads", 4.0)], None);
    assert_eq!(p.knobs["core_freq_mhz"], 4000.0);
    assert!(close(p.time_s.unwrap(), 264.79));
}

#[test]
fn spec_naming_a_missing_column_fails_naming_it() {
    let file = common::datasets().join("v100-dcgm-sweep/spec_21apps.csv");
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    let text = std::fs::read_to_string(spec("v100-dcgm-sweep.toml"))
        .unwrap()
        .replace("\"sm_app_clock\"", "\"sm_clock\"");
    std::fs::write(&bad, text).unwrap();
    Command::cargo_bin("powerperf")
        .unwrap()
        .arg("import")
        .arg(&bad)
        .arg("--file")
        .arg(&file)
        .arg("-o")
        .arg(dir.path().join("set"))
        .assert()
        .failure()
        .stderr(predicates::str::contains("no column `sm_clock`"))
        .stderr(predicates::str::contains("spec_21apps.csv"))
        .stderr(predicates::str::contains("`sm_app_clock`"));
    assert!(!dir.path().join("set").exists());
}

#[test]
fn missing_data_file_lists_where_it_looked() {
    let dir = tempfile::tempdir().unwrap();
    let s = dir.path().join("s.toml");
    std::fs::write(
        &s,
        "name = \"x\"\nfile = \"nowhere/none.csv\"\nworkload = \"a\"\n",
    )
    .unwrap();
    Command::cargo_bin("powerperf")
        .unwrap()
        .env("POWERPERF_DATA_DIR", dir.path())
        .arg("import")
        .arg(&s)
        .arg("-o")
        .arg(dir.path().join("set"))
        .assert()
        .failure()
        .stderr(predicates::str::contains("`nowhere/none.csv` not found"))
        .stderr(predicates::str::contains(
            dir.path().join("nowhere/none.csv").display().to_string(),
        ))
        .stderr(predicates::str::contains("--file"));
}

#[test]
fn every_shipped_spec_loads() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("datasets");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "toml") {
            let s = powerperf_core::store::import::ImportSpec::load(&p)
                .unwrap_or_else(|e| panic!("{e:#}"));
            assert!(
                !s.source.is_empty() && !s.licence.is_empty(),
                "{} must name its source and licence",
                p.display()
            );
            n += 1;
        }
    }
    assert_eq!(n, 7);
}

/// `powerperf datasets list` names every bundled set with its licence, and `extract` writes
/// specs whose data import from the extracted directory alone (no POWERPERF_DATA_DIR).
#[test]
fn datasets_list_and_extract_give_importable_specs() {
    let v = common::json_stdout(common::powerperf().args(["datasets", "list", "--format", "json"]));
    let sets = v["sets"].as_array().unwrap();
    assert_eq!(sets.len(), 7, "{v}");
    for s in sets {
        assert!(!s["licence"].as_str().unwrap().is_empty(), "{s}");
        assert!(s["compressed_bytes"].as_u64() < s["bytes"].as_u64(), "{s}");
    }
    let dir = tempfile::tempdir().unwrap();
    let ex = dir.path().join("ex");
    common::powerperf()
        .args(["datasets", "extract", "-o"])
        .arg(&ex)
        .assert()
        .success();
    assert!(ex.join("README.md").is_file());
    assert!(ex.join("multicore-scaling/LICENSE").is_file());
    let set = dir.path().join("set");
    common::powerperf()
        .env_remove("POWERPERF_DATA_DIR")
        .current_dir(dir.path())
        .arg("import")
        .arg(ex.join("multicore-i7.toml"))
        .arg("-o")
        .arg(&set)
        .assert()
        .success()
        .stdout(predicates::str::contains(
            ex.join("multicore-scaling/i7/").display().to_string(),
        ));
    assert_eq!(TrainingSet::read(&set).unwrap().points.len(), 80);
    // A second extract into the same directory overwrites nothing and says so.
    common::powerperf()
        .args(["datasets", "extract", "-o"])
        .arg(&ex)
        .assert()
        .failure()
        .stderr(predicates::str::contains("already exists"));
}

/// `powerperf import NAME` reads the copy embedded in the binary, and POWERPERF_DATA_DIR
/// still overrides its data files.
#[test]
fn a_bundled_set_imports_by_name_and_the_data_dir_overrides_it() {
    let dir = tempfile::tempdir().unwrap();
    let v = common::json_stdout(
        common::powerperf()
            .env_remove("POWERPERF_DATA_DIR")
            .current_dir(dir.path())
            .args(["import", "multicore-xeon", "-o", "x", "--format", "json"]),
    );
    assert_eq!(v["points"], 200, "{v}");
    assert!(
        v["files"][0]
            .as_str()
            .unwrap()
            .starts_with("bundled:datasets/multicore-scaling/xeon/"),
        "{v}"
    );
    // Another copy of the files, with one program only: it wins over the bundled copy.
    let other = dir.path().join("other/multicore-scaling/xeon");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::copy(
        common::datasets().join("multicore-scaling/xeon/data-ep.csv"),
        other.join("data-ep.csv"),
    )
    .unwrap();
    common::powerperf()
        .env("POWERPERF_DATA_DIR", dir.path().join("other"))
        .current_dir(dir.path())
        .args(["import", "multicore-xeon", "-o", "y"])
        .assert()
        .success();
    let y = TrainingSet::read(&dir.path().join("y")).unwrap();
    assert_eq!(y.workloads(), vec!["ep"]);
    // A name that is neither a file nor a bundled set lists the bundled names.
    common::powerperf()
        .current_dir(dir.path())
        .args(["import", "no-such-set", "-o", "z"])
        .assert()
        .failure()
        .stderr(predicates::str::contains("titanx-micro"));
}

/// The per-kernel GPU spec of docs/import.md, as printed there, on a file in that layout
/// (synthetic: kernels of [`common::gpu_kernel`] over a core-clock sweep
/// at one memory clock): one workload per kernel, and `evaluate --model auto` in workload
/// holdout takes the stack with the base-CPI form from `inst_executed`.
#[test]
fn the_documented_per_kernel_gpu_spec_imports_and_auto_takes_the_two_clock_stack() {
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/import.md"))
        .unwrap();
    let start = doc
        .find("name = \"p100-kernels\"")
        .expect("the example in docs/import.md");
    let spec_text = &doc[start..start + doc[start..].find("```").unwrap()];
    let dir = tempfile::tempdir().unwrap();
    let mut csv = String::from(
        ",appName,coreF,memF,kernel,time/ms,inst_executed,dram_read_transactions,dram_write_transactions,achieved_occupancy,power/W\n",
    );
    let kernels = [
        ("gemm", "sgemm_kernel", 6e8, 2e6, 1e-3),
        ("stream", "copy", 1e8, 9e7, 5e-4),
        ("stream", "triad", 1.5e8, 1.2e8, 5e-4),
        ("spmv", "csr_vector", 3e8, 3e7, 4e-3),
        ("stencil", "stencil27", 4e8, 2e7, 2e-3),
        ("nbody", "integrate", 8e8, 1e5, 0.0),
    ];
    let mut row = 0;
    // A core × memory clock grid; a kernel's DRAM transactions split 3:1 into reads and
    // writes.
    for (app, k, n, d, lat) in kernels {
        for fm in [500.0, 715.0] {
            for fc in [600.0, 800.0, 1000.0, 1200.0, 1328.0] {
                let (t, sc, _) = powerperf_core::models::synthetic::gpu_kernel(n, d, lat, fc, fm);
                csv += &format!(
                    "{row},{app},{fc},{fm},{k},{},{n},{},{},{},{}\n",
                    t * 1e3,
                    0.75 * d,
                    0.25 * d,
                    0.5 + 0.4 * sc,
                    40.0 + 80.0 * sc * fc / 1328.0 + 20.0 * fm / 715.0
                );
                row += 1;
            }
        }
    }
    std::fs::write(dir.path().join("p100-Performance-Power.csv"), csv).unwrap();
    std::fs::write(dir.path().join("spec.toml"), spec_text).unwrap();
    let set_dir = dir.path().join("set");
    Command::cargo_bin("powerperf")
        .unwrap()
        .arg("import")
        .arg(dir.path().join("spec.toml"))
        .arg("-o")
        .arg(&set_dir)
        .assert()
        .success();
    let set = TrainingSet::read(&set_dir).unwrap();
    let mut w = set.workloads();
    w.sort();
    assert_eq!(w.len(), 6);
    assert!(w.contains(&"stream:triad".to_string()), "{w:?}");
    assert_eq!(set.meta.counters["inst_executed"], CounterKind::Count);
    let out = Command::cargo_bin("powerperf")
        .unwrap()
        .arg("evaluate")
        .arg(&set_dir)
        .args([
            "--protocol",
            "workload-holdout",
            "--model",
            "auto",
            "--format",
            "json",
        ])
        .assert()
        .success();
    let v: serde_json::Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    assert_eq!(v["model"], "stack", "{v}");
    // 6 kernels × 9 settings besides the baseline (1328, 715).
    assert_eq!(v["points"], 54, "{v}");
    // The synthetic kernels follow the two-clock form exactly (powerperf_core::models::synthetic: issue at
    // 0.02 core cycles per warp instruction overlapped with 32-byte transfers at 256 B per
    // memory cycle), so a kernel known at its baseline point alone is predicted at both
    // memory clocks from the other kernels' β and γ; the median-ratio baseline is not.
    let t = &v["versus_baseline"]["time_s"];
    assert_eq!(t["model"]["n"], 54, "{v}");
    assert!(t["model"]["mape_pct"].as_f64().unwrap() < 1e-3, "{v}");
    assert!(t["baseline"]["mape_pct"].as_f64().unwrap() > 1.0, "{v}");
}
