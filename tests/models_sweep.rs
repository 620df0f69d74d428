//! Every shared set × every model × every protocol: nothing panics, nothing fails silently
//! (issue 21, item 5 and "Done when").
//!
//! Sets: every import spec under `datasets/` (the bundled data) and, where
//! `/work/shared/datasets/` exists (or `$POWERPERF_SHARED_DATASETS` names another folder),
//! the same specs imported from there when its data files differ from the bundled copy (a
//! byte-identical copy is checked once). Two synthetic sets in the layout of per-kernel
//! nvprof metrics over a GPU's DVFS grid join them ([`nvprof_shaped_sets`]: a core × memory
//! clock grid and a core-clock sweep), the shape of public GPU DVFS data the project does not
//! ship. Each set is
//! cut to a small subset so the whole loop stays fast in a debug build: the first 6 workloads
//! (by name) and at most 5 values of each knob (the lowest, the highest and three between).
//! Models: every kind and `auto`. Protocols: `evaluate --protocol knob-holdout` (default
//! training values), `--protocol workload-holdout` (default baseline), a joint split
//! (`--train-points`) where the set varies two knobs, and `fit` (leave-one-out).
//!
//! Each command must not panic (exit code 101, or `panicked` on stderr) and must either exit 0
//! with a score over at least one point (a JSON object with `points` > 0 for `evaluate`), or
//! exit non-zero with a reason on stderr.

mod common;

use powerperf_core::models::features::mean_points;
use powerperf_format::set::{Point, TrainingSet};
use std::path::{Path, PathBuf};
use std::process::Command;

const MODELS: [&str; 12] = [
    "auto",
    "analytic",
    "analytic-counters",
    "analytic-mem",
    "linear",
    "spca",
    "threads",
    "threads-bw",
    "scaling",
    "joint",
    "neighbors",
    "stack",
];

fn pp() -> Command {
    Command::new(env!("CARGO_BIN_EXE_powerperf"))
}

/// At most 5 values: the lowest, the highest and three evenly between.
fn pick(values: &[f64]) -> Vec<f64> {
    if values.len() <= 5 {
        return values.to_vec();
    }
    let n = values.len() - 1;
    (0..5).map(|i| values[i * n / 4]).collect()
}

/// The subset of `set` described in the module docs, as mean points (one per setting).
fn subset(set: &TrainingSet) -> TrainingSet {
    let mut workloads = set.workloads();
    workloads.sort();
    workloads.truncate(6);
    let keep: Vec<(String, Vec<f64>)> = set
        .meta
        .knobs
        .iter()
        .map(|k| (k.clone(), pick(&set.knob_values(k))))
        .collect();
    let points: Vec<Point> = mean_points(set)
        .into_iter()
        .filter(|p| workloads.contains(&p.workload))
        .filter(|p| {
            keep.iter().all(|(k, vals)| {
                p.knobs
                    .get(k)
                    .is_none_or(|v| vals.iter().any(|x| (x - v).abs() < 1e-9))
            })
        })
        .collect();
    TrainingSet {
        meta: set.meta.clone(),
        points,
    }
}

/// One command's outcome, checked.
fn check(label: &str, cmd: &mut Command, evaluate: bool) -> Result<String, String> {
    let out = cmd
        .output()
        .map_err(|e| format!("{label}: cannot run: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let code = out.status.code();
    if code == Some(101) || stderr.contains("panicked") {
        return Err(format!("{label}: PANIC (exit {code:?}): {stderr}"));
    }
    if out.status.success() {
        if stdout.trim().is_empty() {
            return Err(format!(
                "{label}: exit 0 with empty output; stderr: {stderr}"
            ));
        }
        if evaluate {
            let v: serde_json::Value = serde_json::from_str(&stdout)
                .map_err(|e| format!("{label}: not JSON ({e}): {stdout}"))?;
            let points = v["points"].as_u64().unwrap_or(0);
            let scored = ["time", "power", "energy"]
                .iter()
                .any(|t| v[t]["n"].as_u64().unwrap_or(0) > 0);
            if points == 0 || !scored {
                return Err(format!(
                    "{label}: exit 0 but no point scored (points {points}): {stdout}\n{stderr}"
                ));
            }
            if v["versus_baseline"]
                .as_object()
                .is_none_or(|o| o.is_empty())
            {
                return Err(format!("{label}: no baseline beside the score: {stdout}"));
            }
        }
        Ok(format!("{label}: ok"))
    } else {
        let why = stderr.lines().rev().find(|l| !l.trim().is_empty());
        match why {
            Some(l) => Ok(format!(
                "{label}: refused ({})",
                l.chars().take(140).collect::<String>()
            )),
            None => Err(format!("{label}: exit {code:?} without a reason on stderr")),
        }
    }
}

/// The commands of one set (see the module docs).
fn commands(set_dir: &Path, set: &TrainingSet, tmp: &Path) -> Vec<(String, Command, bool)> {
    let name = set_dir.file_name().unwrap().to_string_lossy().to_string();
    let varying: Vec<&String> = set
        .meta
        .knobs
        .iter()
        .filter(|k| set.knob_values(k).len() > 1)
        .collect();
    let mut out = Vec::new();
    for model in MODELS {
        for protocol in ["knob-holdout", "workload-holdout"] {
            let mut c = pp();
            c.arg("evaluate").arg(set_dir).args([
                "--protocol",
                protocol,
                "--model",
                model,
                "--format",
                "json",
            ]);
            out.push((
                format!("{name} evaluate {protocol} --model {model}"),
                c,
                true,
            ));
        }
        if varying.len() >= 2 {
            // A joint split: every value of the first knob at the lowest value of the second,
            // plus the lowest value of the first at the second's highest value.
            let (k1, k2) = (varying[0], varying[1]);
            let (v1, v2) = (set.knob_values(k1), set.knob_values(k2));
            let file = tmp.join(format!("{name}-joint.csv"));
            let mut text = format!("{k1},{k2}\n");
            for a in &v1 {
                text += &format!("{a},{}\n", v2[0]);
            }
            text += &format!("{},{}\n", v1[0], v2[v2.len() - 1]);
            std::fs::write(&file, text).unwrap();
            let mut c = pp();
            c.arg("evaluate").arg(set_dir).args([
                "--protocol",
                "knob-holdout",
                "--model",
                model,
                "--format",
                "json",
                "--train-points",
            ]);
            c.arg(&file);
            out.push((
                format!("{name} evaluate joint split --model {model}"),
                c,
                true,
            ));
        }
        let mut c = pp();
        c.arg("fit")
            .arg(set_dir)
            .args(["--model", model, "-o"])
            .arg(tmp.join(format!("{name}-{model}.json")));
        out.push((
            format!("{name} fit (leave-one-out) --model {model}"),
            c,
            false,
        ));
    }
    out
}

/// Two synthetic sets in the layout of per-kernel nvprof metrics over a GPU's DVFS grid (the
/// shape of public GPU DVFS data: warp instructions `inst_executed`, DRAM transactions,
/// an all-zero `flop_count_dp`, fractions such as `achieved_occupancy`): a core × memory
/// clock grid, and a core-clock sweep at one memory clock (where `auto`'s stack takes the
/// base-CPI form from `inst_executed`). Six kernels ([`powerperf_core::models::synthetic`]).
fn nvprof_shaped_sets() -> Vec<(&'static str, TrainingSet)> {
    use powerperf_core::models::synthetic;
    use powerperf_format::set::CounterKind;
    let grid = |mems: &[f64]| {
        let mut meta = synthetic::nvprof_meta();
        meta.counters
            .insert("flop_count_dp".into(), CounterKind::Count);
        for c in ["achieved_occupancy", "executed_ipc"] {
            meta.counters.insert(c.into(), CounterKind::Rate);
        }
        let mut points = Vec::new();
        for (w, n, d, lat) in synthetic::KERNELS {
            for &fm in mems {
                for fc in [400.0, 600.0, 800.0, 1000.0] {
                    let (t, sc, sm) = synthetic::gpu_kernel(n, d, lat, fc, fm);
                    let power = 30.0 + 50.0 * sc * fc / 1000.0 + 20.0 * sm;
                    let mut p = synthetic::gpu_kernel_point(w, (n, d, lat), fc, fm, power);
                    p.counters.insert("flop_count_dp".into(), 0.0);
                    p.counters
                        .insert("achieved_occupancy".into(), 0.5 + 0.4 * sc);
                    p.counters.insert("executed_ipc".into(), n / (t * fc * 1e6));
                    points.push(p);
                }
            }
        }
        for p in &mut points {
            p.energy_j = Some(p.time_s.unwrap() * p.power_w.unwrap());
        }
        TrainingSet { meta, points }
    };
    vec![
        ("nvprof-core-mem-grid", grid(&[400.0, 700.0, 1000.0])),
        ("nvprof-core-sweep", grid(&[715.0])),
    ]
}

/// Whether every data file the spec names (`file = "…"` lines) has a byte-identical copy
/// under `shared`.
fn same_data_files(spec: &Path, shared: &Path) -> bool {
    let text = std::fs::read_to_string(spec).unwrap();
    let files: Vec<String> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("file"))
        .filter_map(|r| r.trim().strip_prefix('='))
        .map(|r| r.trim().trim_matches('"').to_string())
        .collect();
    !files.is_empty()
        && files.iter().all(|f| {
            match (
                std::fs::read(common::datasets().join(f)),
                std::fs::read(shared.join(f)),
            ) {
                (Ok(a), Ok(b)) => a == b,
                _ => false,
            }
        })
}

#[test]
fn every_set_model_and_protocol_ends_cleanly() {
    let tmp = tempfile::tempdir().unwrap();
    let mut specs: Vec<PathBuf> = std::fs::read_dir(common::datasets())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    specs.sort();
    assert!(specs.len() >= 7, "{specs:?}");
    let shared = std::env::var_os("POWERPERF_SHARED_DATASETS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/work/shared/datasets"));
    if !shared.is_dir() {
        println!(
            "skipped: the shared copies: {} is absent (the bundled sets are still checked)",
            shared.display()
        );
    }
    let mut sets: Vec<(PathBuf, TrainingSet)> = Vec::new();
    for spec in &specs {
        let stem = spec.file_stem().unwrap().to_string_lossy().to_string();
        let mut sources = vec![("bundled", None)];
        if shared.is_dir() {
            if same_data_files(spec, &shared) {
                println!("{stem}: the shared copy of its data files is byte for byte the bundled one, checked once");
            } else {
                sources.push(("shared", Some(shared.clone())));
            }
        }
        let mut first: Option<Vec<Point>> = None;
        for (origin, data_dir) in sources {
            let full = tmp.path().join(format!("{stem}-{origin}-full"));
            let mut c = pp();
            c.arg("import").arg(spec).arg("-o").arg(&full);
            if let Some(d) = &data_dir {
                c.env("POWERPERF_DATA_DIR", d);
            }
            let out = c.output().unwrap();
            if !out.status.success() {
                assert!(
                    data_dir.is_some(),
                    "{stem}: import of the bundled data failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                println!(
                    "skipped: {stem} from {}: import failed: {}",
                    shared.display(),
                    String::from_utf8_lossy(&out.stderr).trim()
                );
                continue;
            }
            let set = subset(&TrainingSet::read(&full).unwrap());
            if first.as_ref().is_some_and(|f| *f == set.points) {
                println!("{stem}: the shared copy holds the bundled data, checked once");
                continue;
            }
            first.get_or_insert_with(|| set.points.clone());
            let dir = tmp.path().join(format!("{stem}-{origin}"));
            set.write(&dir).unwrap();
            sets.push((dir, set));
        }
    }
    for (name, set) in nvprof_shaped_sets() {
        let dir = tmp.path().join(name);
        set.write(&dir).unwrap();
        sets.push((dir, set));
    }
    let mut jobs: Vec<(String, Command, bool)> = Vec::new();
    for (dir, set) in &sets {
        jobs.extend(commands(dir, set, tmp.path()));
    }
    let n = jobs.len();
    // Two at a time (CI has two cores).
    let jobs = std::sync::Mutex::new(jobs);
    let results = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| loop {
                let Some((label, mut cmd, evaluate)) = jobs.lock().unwrap().pop() else {
                    break;
                };
                let r = check(&label, &mut cmd, evaluate);
                results.lock().unwrap().push(r);
            });
        }
    });
    let results = results.into_inner().unwrap();
    let mut bad = Vec::new();
    let mut refused = 0;
    for r in &results {
        match r {
            Ok(line) => {
                if line.contains(": refused") {
                    refused += 1;
                }
                println!("{line}");
            }
            Err(e) => bad.push(e.clone()),
        }
    }
    println!(
        "{} sets, {n} commands: {} ended cleanly ({refused} refused with a reason), {} did not",
        sets.len(),
        n - bad.len(),
        bad.len()
    );
    assert_eq!(results.len(), n);
    assert!(bad.is_empty(), "{}", bad.join("\n\n"));
}
