//! Regions end to end (issue 20, item 5): runs collected with region markers at several CPU
//! frequencies → `import --regions` (one point per outermost region) → `fit` → `plan --job
//! --regions-from RUN` with switch costs → `apply` switching at region boundaries on the
//! userspace cpufreq fixture. The applied sequence of settings is checked against the plan.
//!
//! This VM has no cpufreq and no RAPL, so the program plays the hardware, as
//! `collect_cli.rs::rapl_energy_with_wraparound_and_a_counter_that_never_advances` does: it
//! reads the CPU frequency from a file of the fixture tree (`scaling_cur_freq` of the
//! collect root, which the test sets before each run; `scaling_setspeed`, which `apply`
//! writes, under apply), spends in each region the time a memory-bound (`load`) or a
//! compute-bound (`compute`) region would take at that frequency (t = t_mem + t_comp·f_max/f,
//! Moore 2012's DVFS model) and advances the fixture's RAPL package counter by P(f)·t with
//! P(f) = 5 + 20·(f/f_max)³ W. Everything else is real: collect, regions.parquet, import,
//! fit, the planner, the plan file, apply's controller socket, powerperf-rt in the program,
//! the sysfs writes and the switch log.

mod common;

use assert_cmd::Command;
use common::apply::{fixture_src, region_switches, snapshot};
use common::copy_tree;
use powerperf_node::plan_file::Plan;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const SIM: &str = r#"
import os, sys, time
import powerperf_rt as pp
freq_file, energy_file, seen_file = sys.argv[1], sys.argv[2], sys.argv[3]
F_MAX = 2400.0
def mhz():
    with open(freq_file) as f:
        return int(f.read().split()[0]) / 1000.0
def advance(joules):
    if energy_file == "-":
        return
    rng = int(open(os.path.join(os.path.dirname(energy_file), "max_energy_range_uj")).read())
    v = (int(open(energy_file).read()) + int(joules * 1e6)) % (rng + 1)
    with open(energy_file, "w") as f:
        f.write(f"{v}\n")
def spend(t_mem, t_comp):
    f = mhz()
    t = t_mem + t_comp * F_MAX / f
    watts = 5.0 + 20.0 * (f / F_MAX) ** 3
    for _ in range(10):
        time.sleep(t / 10)
        advance(watts * t / 10)
seen = open(seen_file, "w")
def show(where):
    seen.write(f"{where} {int(mhz() * 1000)}\n")
show("start")
spend(0.02, 0.0)
with pp.region("load"):
    show("load")
    spend(0.10, 0.005)
    with pp.region("parse"):
        show("parse")
        spend(0.05, 0.005)
show("between")
with pp.region("compute"):
    show("compute")
    spend(0.0, 0.30)
seen.close()
"#;

fn have_python() -> bool {
    std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

const CPUFREQ: &str = "sys/devices/system/cpu";
const PKG: &str = "sys/class/powercap/intel-rapl:0/energy_uj";

/// The controller's rule (docs/dvfs.md, "Region-triggered switching"), applied to the
/// program's marker sequence with the plan's settings: the `region` lines the switch log
/// must hold, as `KIND REGION FROM->TO`.
fn expected_switches(default: f64, planned: &BTreeMap<String, f64>) -> Vec<String> {
    let events = [
        ("B", "load"),
        ("B", "parse"),
        ("E", "parse"),
        ("E", "load"),
        ("B", "compute"),
        ("E", "compute"),
    ];
    let mut stack: Vec<&str> = Vec::new();
    let mut current = default;
    let mut out = Vec::new();
    for (kind, name) in events {
        let target = if kind == "B" {
            stack.push(name);
            planned.get(name).copied()
        } else {
            stack.pop();
            if planned.contains_key(name) {
                Some(
                    stack
                        .iter()
                        .rev()
                        .find_map(|r| planned.get(*r).copied())
                        .unwrap_or(default),
                )
            } else {
                None
            }
        };
        if let Some(m) = target {
            if m != current {
                out.push(format!("{kind} {name} {current}->{m}"));
                current = m;
            }
        }
    }
    out
}

/// `powerperf collect` of the simulated program on `root` at 1200, 1600, 2000 and 2400 MHz
/// (scaling_cur_freq of both CPUs set before each run): the run directories, `dir/run-MHZ`.
fn collect_runs(
    dir: &Path,
    root: &Path,
    sim: &Path,
    pythonpath: &Path,
    lib: &Path,
) -> Vec<PathBuf> {
    let mut runs: Vec<PathBuf> = Vec::new();
    for mhz in [1200u32, 1600, 2000, 2400] {
        for cpu in 0..2 {
            std::fs::write(
                root.join(format!("{CPUFREQ}/cpu{cpu}/cpufreq/scaling_cur_freq")),
                format!("{}\n", mhz * 1000),
            )
            .unwrap();
        }
        let run = dir.join(format!("run-{mhz}"));
        Command::cargo_bin("powerperf")
            .unwrap()
            .args(["collect", "-q", "--nvml", "off", "--interval", "10ms"])
            .arg("--sysfs-root")
            .arg(root)
            .arg("-o")
            .arg(&run)
            .arg("--")
            .arg("python3")
            .arg(sim)
            .arg(root.join(format!("{CPUFREQ}/cpu0/cpufreq/scaling_cur_freq")))
            .arg(root.join(PKG))
            .arg(dir.join(format!("seen-{mhz}")))
            .env("PYTHONPATH", pythonpath)
            .env("POWERPERF_RT_LIB", lib)
            .assert()
            .success();
        runs.push(run);
    }
    runs
}

#[test]
fn regions_of_collected_runs_are_planned_and_applied_at_their_boundaries() {
    let test = "regions_of_collected_runs_are_planned_and_applied";
    let Some(lib_dir) = common::rt_lib_dir() else {
        println!("skipped: {test}: libpowerperf_rt.so is not built in this target directory (run `cargo build -p powerperf-rt` first)");
        return;
    };
    if !have_python() {
        println!("skipped: {test}: python3 is not installed");
        return;
    }
    let lib = lib_dir.join("libpowerperf_rt.so");
    let dir = tempfile::tempdir().unwrap();
    let sim = dir.path().join("sim.py");
    std::fs::write(&sim, SIM).unwrap();
    let pythonpath = Path::new(env!("CARGO_MANIFEST_DIR")).join("rt/python");
    // One machine for the runs: cpufreq (for the knob) and RAPL (for the energy).
    let root = dir.path().join("collect-root");
    copy_tree(&fixture_src("cpufreq-userspace"), &root);
    copy_tree(&fixture_src("rapl-wrap"), &root);
    let runs = collect_runs(dir.path(), &root, &sim, &pythonpath, &lib);
    // import: one point per (run, outermost region)
    let set = dir.path().join("set");
    let out = Command::cargo_bin("powerperf")
        .unwrap()
        .arg("import")
        .args(&runs)
        .arg("--regions")
        .arg("-o")
        .arg(&set)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let out = String::from_utf8(out).unwrap();
    assert!(out.contains("8 points, 2 workloads"), "{out}");
    let ts = powerperf_format::set::TrainingSet::read(&set).unwrap();
    let point = |w: &str, f: f64| {
        ts.points
            .iter()
            .find(|p| p.workload == w && p.knobs["core_freq_mhz"] == f)
            .unwrap_or_else(|| panic!("{w} at {f}: {:#?}", ts.points))
            .clone()
    };
    // The regions' measured times are at least the program's (nested `parse` inside `load`;
    // a busy VM's sleeps run long, so no upper bound is tight), and the energy the program
    // put on the counter came through regions.parquet.
    for (w, tm, tc) in [("load", 0.15, 0.01), ("compute", 0.0, 0.30)] {
        for f in [1200.0, 2400.0] {
            let p = point(w, f);
            let t = tm + tc * 2400.0 / f;
            let t_got = p.time_s.unwrap();
            assert!(
                t_got >= t && t_got < 3.0 * t,
                "{w} at {f}: {t_got} s vs {t}"
            );
            let e = p.energy_j.expect("region energy");
            let e_true = (5.0 + 20.0 * (f / 2400.0f64).powi(3)) * t;
            assert!(
                (e - e_true).abs() < 0.25 * e_true,
                "{w} at {f}: {e} J vs {e_true}"
            );
        }
    }
    // fit, then plan the job's regions in the order the run ran them, with switch costs
    let model = dir.path().join("model.json");
    Command::cargo_bin("powerperf")
        .unwrap()
        .arg("fit")
        .arg(&set)
        .arg("-o")
        .arg(&model)
        .assert()
        .success();
    let plan_path = dir.path().join("plan.toml");
    let out = Command::cargo_bin("powerperf")
        .unwrap()
        .args(["plan", "--model"])
        .arg(&model)
        .args(["--job", "--regions-from"])
        .arg(&runs[3])
        .args([
            "--objective",
            "energy",
            "--max-slowdown",
            "10%",
            "--transition-latency",
            "0.002",
            "--transition-energy",
            "0.05",
            "-o",
        ])
        .arg(&plan_path)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let out = String::from_utf8(out).unwrap();
    let plan = Plan::read(&plan_path).unwrap();
    let names: Vec<&str> = plan.regions.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["load", "compute"], "{out}");
    assert_eq!(plan.plan.transition_latency_s, 0.002);
    assert_eq!(plan.plan.transition_energy_j, 0.05);
    let default = plan.devices[0].default["core_freq_mhz"];
    assert_eq!(default, 2400.0);
    let planned: BTreeMap<String, f64> = plan
        .regions
        .iter()
        .map(|r| (r.name.clone(), r.setting["core_freq_mhz"]))
        .collect();
    assert!(
        planned.values().any(|&f| f < default),
        "the plan saves nothing: {out}"
    );
    assert!(
        plan.plan.time_s.unwrap() <= 1.10 * plan.plan.reference_time_s.unwrap() + 1e-9,
        "{out}"
    );
    // apply on a fresh userspace fixture; the same program switches at its region markers
    let aroot = dir.path().join("apply-root");
    copy_tree(&fixture_src("cpufreq-userspace"), &aroot);
    let original = snapshot(&aroot);
    let log = dir.path().join("switches.log");
    let seen = dir.path().join("seen-apply");
    Command::cargo_bin("powerperf")
        .unwrap()
        .args(["apply", "--plan"])
        .arg(&plan_path)
        .arg("--sysfs-root")
        .arg(&aroot)
        .arg("--restore-file")
        .arg(dir.path().join("restore.toml"))
        .arg("--log")
        .arg(&log)
        .arg("--")
        .arg("python3")
        .arg(&sim)
        .arg(aroot.join(format!("{CPUFREQ}/cpu0/cpufreq/scaling_setspeed")))
        .arg("-")
        .arg(&seen)
        .env("PYTHONPATH", &pythonpath)
        .env("POWERPERF_RT_LIB", &lib)
        .env_remove("POWERPERF_RUN_DIR")
        .assert()
        .success();
    let log = std::fs::read_to_string(&log).unwrap();
    println!("{out}\n{log}");
    let distinct: std::collections::BTreeSet<u64> = planned.values().map(|f| f.to_bits()).collect();
    let (seen_expected, switches_expected) = if distinct.len() == 1 {
        // one setting for every region: apply sets it statically, no region switching
        let f = *planned.values().next().unwrap();
        (
            [
                ("start", f),
                ("load", f),
                ("parse", f),
                ("between", f),
                ("compute", f),
            ],
            vec![],
        )
    } else {
        let (l, c) = (planned["load"], planned["compute"]);
        (
            [
                ("start", default),
                ("load", l),
                ("parse", l),
                ("between", default),
                ("compute", c),
            ],
            expected_switches(default, &planned),
        )
    };
    // the setting in place inside each region was the plan's
    let want: String = seen_expected
        .iter()
        .map(|(w, f)| format!("{w} {}\n", (*f as u64) * 1000))
        .collect();
    assert_eq!(std::fs::read_to_string(&seen).unwrap(), want, "{log}");
    // and the switch log holds exactly the plan's switches, in order
    assert_eq!(region_switches(&log), switches_expected, "{log}\n{out}");
    // every file restored (scaling_setspeed compared only where it held a frequency)
    let now = snapshot(&aroot);
    for ((p, v), (q, w)) in now.iter().zip(&original) {
        assert_eq!(p, q);
        if !(p.ends_with("scaling_setspeed") && w == "<unsupported>") {
            assert_eq!(v, w, "{} not restored", p.display());
        }
    }
}

#[test]
fn import_regions_and_plan_regions_from_name_what_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    // a run without regions
    let run = dir.path().join("plain");
    Command::cargo_bin("powerperf")
        .unwrap()
        .args(["collect", "-q", "--nvml", "off", "-o"])
        .arg(&run)
        .args(["--", "true"])
        .assert()
        .success();
    let err = Command::cargo_bin("powerperf")
        .unwrap()
        .arg("import")
        .arg(&run)
        .arg("--regions")
        .arg("-o")
        .arg(dir.path().join("set"))
        .assert()
        .failure()
        .get_output()
        .stderr
        .clone();
    let err = String::from_utf8(err).unwrap();
    assert!(
        err.contains("has no regions.parquet") && err.contains("NVTX"),
        "{err}"
    );
    // --regions-from needs --job
    let err = Command::cargo_bin("powerperf")
        .unwrap()
        .args(["plan", "--model", "m.json", "--regions-from"])
        .arg(&run)
        .assert()
        .failure()
        .get_output()
        .stderr
        .clone();
    assert!(String::from_utf8(err).unwrap().contains("--job"));
}
