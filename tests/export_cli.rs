//! `powerperf export` end to end (issue 40): the C and Fortran region examples collected and
//! exported in the three formats, with their known call counts and nesting; a recorded CUPTI
//! run (PyTorch on an H100) whose kernels land on their streams; a two-rank job that gives
//! two processes. Perfetto is decoded with the `perfetto` PyPI package's protos
//! (tests/export/perfetto_check.py), OTF2 read with `otf2-print` and python3-otf2
//! (tests/export/otf2_check.py), Chrome JSON checked against the format's rules. Tools or
//! compilers that are missing make their part print `skipped: <reason>`.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn ok(cmd: &mut std::process::Command) -> std::process::Output {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    out
}

fn have(tool: &str, arg: &str) -> bool {
    let ok = std::process::Command::new(tool)
        .arg(arg)
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        println!("skipped: `{tool}` is not installed");
    }
    ok
}

/// The Python with the `perfetto` and `protobuf` packages (pip install perfetto protobuf),
/// or None (said).
fn perfetto_python() -> Option<&'static str> {
    let ok = std::process::Command::new("python3")
        .args([
            "-c",
            "import perfetto.protos.perfetto.trace.perfetto_trace_pb2",
        ])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        println!("skipped: the Perfetto check needs `python3 -m pip install perfetto protobuf`");
    }
    ok.then_some("python3")
}

/// Debian's Python with python3-otf2, or None (said).
fn otf2_python() -> Option<&'static str> {
    let ok = std::process::Command::new("/usr/bin/python3")
        .args(["-c", "import otf2"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        println!("skipped: the OTF2 reader check needs Debian's python3-otf2");
    }
    ok.then_some("/usr/bin/python3")
}

fn export(run: &Path, format: &str, out: &Path) {
    common::powerperf()
        .arg("export")
        .arg(run)
        .args(["--format", format, "-o"])
        .arg(out)
        .assert()
        .success();
}

/// Chrome's rules: every B has its E on the same (pid, tid), LIFO; X has a duration, and
/// on a thread each X lies inside the one open around its start (regions and API calls
/// are complete events); C args are numbers; times never go back on a track. Returns begins per name, their
/// deepest nesting, the process names and the X events per track name.
struct Chrome {
    begins: BTreeMap<String, usize>,
    depth: BTreeMap<String, usize>,
    processes: Vec<String>,
    complete_per_track: BTreeMap<String, usize>,
    counters: usize,
    flows: (usize, usize),
    /// For each flow: (innermost region open at the launch, the activity's region arg).
    launch_regions: Vec<(Option<String>, Option<String>)>,
}

fn check_chrome(path: &Path) -> Chrome {
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let mut stacks: BTreeMap<(u64, u64), Vec<(String, String)>> = BTreeMap::new();
    let mut last: BTreeMap<(u64, u64), f64> = BTreeMap::new();
    let mut names: BTreeMap<(u64, u64), String> = BTreeMap::new();
    let mut c = Chrome {
        begins: BTreeMap::new(),
        depth: BTreeMap::new(),
        processes: Vec::new(),
        complete_per_track: BTreeMap::new(),
        counters: 0,
        flows: (0, 0),
        launch_regions: Vec::new(),
    };
    let mut flow_src: BTreeMap<u64, Option<String>> = BTreeMap::new();
    let mut flow_dst: BTreeMap<u64, Option<String>> = BTreeMap::new();
    let mut last_x: BTreeMap<(u64, u64), Option<String>> = BTreeMap::new();
    // Open complete events per thread: (name, category, end).
    type Open = Vec<(String, String, f64)>;
    let mut x_stacks: BTreeMap<(u64, u64), Open> = BTreeMap::new();
    for e in v["traceEvents"].as_array().unwrap() {
        let ph = e["ph"].as_str().unwrap();
        let key = (
            e["pid"].as_u64().unwrap(),
            e["tid"].as_u64().unwrap_or(u64::MAX),
        );
        if ph == "M" {
            match e["name"].as_str().unwrap() {
                "process_name" => c
                    .processes
                    .push(e["args"]["name"].as_str().unwrap().to_string()),
                "thread_name" => {
                    names.insert(key, e["args"]["name"].as_str().unwrap().to_string());
                }
                _ => {}
            }
            continue;
        }
        let ts = e["ts"].as_f64().unwrap();
        if matches!(ph, "B" | "E" | "X") {
            let l = last.entry(key).or_insert(f64::MIN);
            assert!(ts >= *l, "time goes back on {key:?}: {e}");
            *l = ts;
        }
        match ph {
            "B" => {
                let st = stacks.entry(key).or_default();
                let name = e["name"].as_str().unwrap().to_string();
                st.push((name.clone(), e["cat"].as_str().unwrap().to_string()));
                *c.begins.entry(name.clone()).or_default() += 1;
                let d = c.depth.entry(name).or_default();
                *d = (*d).max(st.len());
            }
            "E" => assert!(
                stacks.entry(key).or_default().pop().is_some(),
                "E without B on {key:?}: {e}"
            ),
            "X" if key.1 < 1 << 30 => {
                // A thread's slice (stream tracks have tids from 2^30).
                let dur = e["dur"].as_f64().unwrap();
                assert!(dur >= 0.0, "X without dur: {e}");
                let st = x_stacks.entry(key).or_default();
                while st.last().is_some_and(|t| t.2 <= ts) {
                    st.pop();
                }
                if let Some(top) = st.last() {
                    assert!(ts + dur <= top.2 + 1e-3, "X not inside {top:?}: {e}");
                }
                let name = e["name"].as_str().unwrap().to_string();
                st.push((
                    name.clone(),
                    e["cat"].as_str().unwrap().to_string(),
                    ts + dur,
                ));
                *c.begins.entry(name.clone()).or_default() += 1;
                let d = c.depth.entry(name).or_default();
                *d = (*d).max(st.len());
            }
            "X" => {
                assert!(e["dur"].as_f64().unwrap() >= 0.0, "X without dur: {e}");
                let track = names.get(&key).cloned().unwrap_or_default();
                *c.complete_per_track.entry(track).or_default() += 1;
                last_x.insert(key, e["args"]["region"].as_str().map(String::from));
            }
            "C" => {
                let args = e["args"].as_object().unwrap();
                assert!(
                    !args.is_empty() && args.values().all(|x| x.is_number()),
                    "C args not numeric: {e}"
                );
                c.counters += 1;
            }
            "s" => {
                c.flows.0 += 1;
                let region = stacks
                    .get(&key)
                    .and_then(|st| st.iter().rev().find(|(_, cat)| cat == "region"))
                    .map(|(n, _)| n.clone())
                    .or_else(|| {
                        x_stacks
                            .get(&key)?
                            .iter()
                            .rev()
                            .find(|(_, cat, end)| cat == "region" && *end > ts)
                            .map(|(n, _, _)| n.clone())
                    });
                flow_src.insert(e["id"].as_u64().unwrap(), region);
            }
            "f" => {
                c.flows.1 += 1;
                assert_eq!(e["bp"], "e", "{e}");
                // The flow end follows its activity's X event on the same track.
                flow_dst.insert(e["id"].as_u64().unwrap(), last_x[&key].clone());
            }
            _ => {}
        }
    }
    for (k, s) in stacks {
        assert!(s.is_empty(), "B without E on {k:?}: {s:?}");
    }
    for (id, dst) in flow_dst {
        c.launch_regions
            .push((flow_src.get(&id).cloned().flatten(), dst));
    }
    c
}

/// Run the Perfetto checker; its JSON summary.
fn check_perfetto(path: &Path) -> Option<serde_json::Value> {
    let py = perfetto_python()?;
    let out = ok(std::process::Command::new(py)
        .arg(root().join("tests/export/perfetto_check.py"))
        .arg(path));
    Some(serde_json::from_slice(&out.stdout).unwrap())
}

/// Run the OTF2 Python reader's checker and otf2-print; the checker's summary and
/// otf2-print's output.
fn check_otf2(dir: &Path) -> Option<(serde_json::Value, String)> {
    if !powerperf_core::export::otf2::available() {
        println!(
            "skipped: the OTF2 library is not installed (apt-get install libopen-trace-format2-10)"
        );
        return None;
    }
    let anchor = dir.join("traces.otf2");
    let print = if have("otf2-print", "--version") {
        String::from_utf8(ok(std::process::Command::new("otf2-print").arg(&anchor)).stdout).unwrap()
    } else {
        String::new()
    };
    let py = otf2_python()?;
    let out = ok(std::process::Command::new(py)
        .arg(root().join("tests/export/otf2_check.py"))
        .arg(&anchor));
    Some((serde_json::from_slice(&out.stdout).unwrap(), print))
}

fn n(v: &serde_json::Value, key: &str, name: &str) -> u64 {
    v[key][name].as_u64().unwrap_or(0)
}

/// Export `run` in the three formats and check each has `expect` (region, calls, depth).
fn export_all_and_check(dir: &Path, run: &Path, expect: &[(&str, usize, usize)]) {
    let json = dir.join("trace.json");
    export(run, "chrome", &json);
    let c = check_chrome(&json);
    for &(name, calls, depth) in expect {
        assert_eq!(
            c.begins.get(name),
            Some(&calls),
            "chrome {name}: {:?}",
            c.begins
        );
        assert_eq!(
            c.depth.get(name),
            Some(&depth),
            "chrome {name}: {:?}",
            c.depth
        );
    }
    assert!(c.counters > 0, "no counters");
    let pf = dir.join("trace.pftrace");
    export(run, "perfetto", &pf);
    if let Some(v) = check_perfetto(&pf) {
        for &(name, calls, depth) in expect {
            assert_eq!(n(&v, "begins", name), calls as u64, "perfetto {name}: {v}");
            assert_eq!(n(&v, "depth", name), depth as u64, "perfetto {name}: {v}");
        }
        let tracks = v["counter_tracks"].as_array().unwrap();
        assert!(tracks.iter().any(|t| t == "task-clock rate (ns/s)"), "{v}");
    }
    let otf2 = dir.join("otf2");
    if powerperf_core::export::otf2::available() {
        export(run, "otf2", &otf2);
    }
    if let Some((v, print)) = check_otf2(&otf2) {
        for &(name, calls, depth) in expect {
            assert_eq!(n(&v, "enters", name), calls as u64, "otf2 {name}: {v}");
            assert_eq!(n(&v, "depth", name), depth as u64, "otf2 {name}: {v}");
        }
        assert!(
            v["metrics"]
                .as_object()
                .unwrap()
                .keys()
                .any(|k| k.starts_with("task-clock rate [ns/s]")),
            "{v}"
        );
        if !print.is_empty() {
            let count = |what: &str| print.lines().filter(|l| l.starts_with(what)).count();
            let calls: usize = expect.iter().map(|e| e.1).sum();
            assert!(
                count("ENTER ") >= calls && count("ENTER ") == count("LEAVE "),
                "{print}"
            );
            assert!(count("METRIC ") > 0, "{print}");
        }
    }
}

fn collect(run: &Path, prog: &[&str], env: &[(&str, &str)]) {
    let mut c = common::powerperf();
    c.args(["collect", "-q", "--nvml", "off", "--interval", "2ms", "-o"])
        .arg(run)
        .arg("--")
        .args(prog);
    for (k, v) in env {
        c.env(k, v);
    }
    c.assert().success();
}

fn build_c(dir: &Path, lib: &Path) -> Option<PathBuf> {
    if !have("gcc", "--version") {
        return None;
    }
    let exe = dir.join("regions");
    ok(std::process::Command::new("gcc")
        .args(["-O2", "-pthread", "-I"])
        .arg(root().join("rt/include"))
        .arg(root().join("rt/examples/c/regions.c"))
        .arg("-o")
        .arg(&exe)
        .arg("-L")
        .arg(lib)
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-lpowerperf_rt"));
    Some(exe)
}

/// rt/examples/c/regions.c: main > solve > step (10) > compute (10) on the main thread,
/// worker (2 threads) > chunk (5 each).
#[test]
fn c_example_regions_in_all_three_formats() {
    let Some(lib) = common::rt_lib_dir() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = build_c(dir.path(), &lib) else {
        return;
    };
    let run = dir.path().join("run");
    collect(&run, &[exe.to_str().unwrap()], &[]);
    export_all_and_check(
        dir.path(),
        &run,
        &[
            ("main", 1, 1),
            ("solve", 1, 2),
            ("step", 10, 3),
            ("compute", 10, 4),
            ("worker", 2, 1),
            ("chunk", 10, 2),
        ],
    );
}

/// The issue's check: a program that enters `inner` 3 times inside each of 5 `outer`s gives
/// 15 slices nested in 5 in every format (Perfetto decoded with the perfetto package's
/// protos), with counter tracks.
#[test]
fn fifteen_inner_slices_nested_in_five_outer_ones() {
    let Some(lib) = common::rt_lib_dir() else {
        return;
    };
    if !have("gcc", "--version") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("nested.c");
    std::fs::write(
        &src,
        r#"#include "powerperf.h"
int main(void) {
    volatile long x = 0;
    for (int o = 0; o < 5; o++) {
        pp_region_begin("outer");
        for (int i = 0; i < 3; i++) {
            pp_region_begin("inner");
            for (long k = 0; k < 200000; k++) x += k;
            pp_region_end("inner");
        }
        pp_region_end("outer");
    }
    return 0;
}
"#,
    )
    .unwrap();
    let exe = dir.path().join("nested");
    ok(std::process::Command::new("gcc")
        .args(["-O2", "-I"])
        .arg(root().join("rt/include"))
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .arg("-L")
        .arg(&lib)
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-lpowerperf_rt"));
    let run = dir.path().join("run");
    collect(&run, &[exe.to_str().unwrap()], &[]);
    export_all_and_check(dir.path(), &run, &[("outer", 5, 1), ("inner", 15, 2)]);
    let v = check_perfetto(&dir.path().join("trace.pftrace"));
    if let Some(v) = v {
        assert!(!v["counter_tracks"].as_array().unwrap().is_empty(), "{v}");
        assert!(v["counter_values"].as_u64().unwrap() > 0, "{v}");
    }
}

/// rt/examples/fortran/regions.f90: main > iterate (4) > residual (4).
#[test]
fn fortran_example_regions_in_all_three_formats() {
    let Some(lib) = common::rt_lib_dir() else {
        return;
    };
    if !have("gfortran", "--version") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("regions");
    ok(std::process::Command::new("gfortran")
        .current_dir(dir.path())
        .arg("-J")
        .arg(dir.path())
        .arg(root().join("rt/fortran/powerperf.f90"))
        .arg(root().join("rt/examples/fortran/regions.f90"))
        .arg("-o")
        .arg(&exe)
        .arg("-L")
        .arg(&lib)
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-lpowerperf_rt"));
    let run = dir.path().join("run");
    collect(&run, &[exe.to_str().unwrap()], &[]);
    export_all_and_check(
        dir.path(),
        &run,
        &[("main", 1, 1), ("iterate", 4, 2), ("residual", 4, 3)],
    );
}

/// The minimal run.toml of a recording made elsewhere (the fixture has only the recordings).
fn run_toml(dir: &Path, start_monotonic_ns: u64) {
    let text = format!(
        "[run]\nid = \"torch-nvtx-threads\"\ncommand = [\"python3\", \"train_nvtx.py\"]\n\
         ended = \"exited\"\nexit_status = 0\nstart_unix_ns = 1795000000000000000\n\
         start_monotonic_ns = {start_monotonic_ns}\nduration_ns = 30000000000\nhost = \"h100\"\n\
         cpu_model = \"\"\nkernel = \"\"\ntool_version = \"\"\ninterval_ns = 0\nsamples = 0\n\n[knobs]\n"
    );
    let meta = powerperf_format::run::RunMeta::from_toml(&text).unwrap();
    meta.write(dir).unwrap();
}

/// A CUPTI recording of PyTorch on an H100 (tests/fixtures/runs/torch-nvtx-threads, README
/// there): its 56 kernels land on their stream's track with a flow from their launch, and
/// the kernels launched inside an NVTX range on the Python thread carry that range.
#[test]
fn recorded_cupti_run_kernels_land_on_their_streams() {
    let fixture = root().join("tests/fixtures/runs/torch-nvtx-threads");
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    for sub in ["gpu_activity/551.bin", "region_events/551.tsv"] {
        let to = run.join(sub);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(fixture.join(sub), &to).unwrap();
    }
    powerperf_core::collect::gpu_activity::write_gpu_activity_attributed(
        &run,
        49_126_447_518,
        &|_, _| None,
    )
    .unwrap()
    .unwrap();
    run_toml(&run, 49_126_447_518);
    let (acts, _) = powerperf_core::collect::gpu_activity::read(&run)
        .unwrap()
        .unwrap();
    let mut per_stream: BTreeMap<String, usize> = BTreeMap::new();
    for a in &acts {
        let s = powerperf_core::export::Stream {
            device: a.device,
            stream: a.stream,
            ..Default::default()
        };
        *per_stream.entry(s.label()).or_default() += 1;
    }
    let kernels = acts
        .iter()
        .filter(|a| a.kind == Some(powerperf_core::collect::gpu_activity::Kind::Kernel))
        .count();
    assert_eq!(kernels, 56);
    let json = dir.path().join("t.json");
    export(&run, "chrome", &json);
    let c = check_chrome(&json);
    assert_eq!(
        c.complete_per_track, per_stream,
        "every activity on its stream"
    );
    assert_eq!(c.flows.0, c.flows.1);
    assert!(c.flows.1 >= 54, "flows {:?}", c.flows);
    // Launched on the Python thread inside a range: the activity carries that range.
    let thread_rule: Vec<_> = c
        .launch_regions
        .iter()
        .filter(|(src, _)| src.is_some())
        .collect();
    assert!(!thread_rule.is_empty());
    for (src, dst) in &thread_rule {
        let leaf = dst.as_deref().and_then(|d| d.rsplit('/').next());
        assert_eq!(leaf, src.as_deref(), "{:?}", c.launch_regions);
    }
    let pf = dir.path().join("t.pftrace");
    export(&run, "perfetto", &pf);
    if let Some(v) = check_perfetto(&pf) {
        let streams: Vec<String> = v["streams"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap().to_string())
            .collect();
        assert_eq!(streams, per_stream.keys().cloned().collect::<Vec<_>>());
        for (s, count) in &per_stream {
            assert_eq!(n(&v, "slices_per_track", s), *count as u64, "{s}: {v}");
        }
        assert_eq!(v["flows"], v["flows_ended"], "{v}");
        assert_eq!(
            v["flows_from_the_activitys_region"].as_u64().unwrap() as usize,
            thread_rule.len(),
            "{v}"
        );
    }
    let otf2 = dir.path().join("otf2");
    if powerperf_core::export::otf2::available() {
        export(&run, "otf2", &otf2);
    }
    if let Some((v, _)) = check_otf2(&otf2) {
        for (s, count) in &per_stream {
            assert_eq!(n(&v, "enters_per_location", s), *count as u64, "{s}: {v}");
        }
        // OTF2_LOCATION_TYPE_ACCELERATOR_STREAM (2), which python3-otf2 3.0 calls GPU.
        let locs = v["locations"].to_string();
        assert!(locs.contains("stream 7 (LocationType.GPU)"), "{locs}");
    }
}

/// Two ranks (`collect -o JOB/rank%r` with OMPI_COMM_WORLD_RANK) of the C example give two
/// processes, named by rank and host, in all three formats.
#[test]
fn two_rank_job_gives_two_processes() {
    let Some(lib) = common::rt_lib_dir() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = build_c(dir.path(), &lib) else {
        return;
    };
    let job = dir.path().join("job");
    let out = format!("{}/rank%r", job.display());
    for r in 0..2 {
        collect(
            Path::new(&out),
            &[exe.to_str().unwrap()],
            &[
                ("OMPI_COMM_WORLD_RANK", &r.to_string()),
                ("OMPI_COMM_WORLD_LOCAL_RANK", &r.to_string()),
            ],
        );
    }
    let host = powerperf_format::run::RunMeta::read(&job.join("rank0"))
        .unwrap()
        .run
        .host;
    let json = dir.path().join("job.json");
    export(&job, "chrome", &json);
    let c = check_chrome(&json);
    assert_eq!(c.processes.len(), 2, "{:?}", c.processes);
    for (r, p) in c.processes.iter().enumerate() {
        assert!(
            p.starts_with(&format!("rank {r} (pid ")) && p.ends_with(&format!(" on {host}")),
            "{p}"
        );
    }
    assert_eq!(c.begins["compute"], 20);
    let pf = dir.path().join("job.pftrace");
    export(&job, "perfetto", &pf);
    if let Some(v) = check_perfetto(&pf) {
        assert_eq!(v["processes"].as_array().unwrap().len(), 2, "{v}");
        assert_eq!(n(&v, "begins", "compute"), 20);
    }
    let otf2 = dir.path().join("otf2");
    if powerperf_core::export::otf2::available() {
        export(&job, "otf2", &otf2);
    }
    if let Some((v, _)) = check_otf2(&otf2) {
        let groups = v["location_groups"].as_array().unwrap();
        assert_eq!(groups.len(), 2, "{v}");
        assert!(groups[0].as_str().unwrap().starts_with("rank 0"), "{v}");
        assert!(v["system_tree_nodes"].to_string().contains(&host), "{v}");
        assert_eq!(n(&v, "enters", "compute"), 20);
    }
}

#[test]
fn bad_input_and_a_missing_otf2_library_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let out = common::powerperf()
        .arg("export")
        .arg(dir.path())
        .args(["--format", "chrome", "-o"])
        .arg(dir.path().join("x.json"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("not a run directory"), "{e}");
    let run = dir.path().join("run");
    std::fs::create_dir(&run).unwrap();
    run_toml(&run, 1);
    let out = common::powerperf()
        .arg("export")
        .arg(&run)
        .args(["--format", "otf2", "-o"])
        .arg(dir.path().join("o"))
        .env(
            powerperf_core::export::otf2::LIBRARY_ENV,
            "/nonexistent/libotf2.so",
        )
        .output()
        .unwrap();
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("apt-get install libopen-trace-format2-10"),
        "{e}"
    );
    let out = common::powerperf()
        .args(["export", "--format", "vampir", "-o", "x"])
        .arg(&run)
        .output()
        .unwrap();
    assert!(!out.status.success());
}
