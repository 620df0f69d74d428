//! GPU activity of a run from a CUPTI recording made on an H100 (`rt/tests/fixtures/cupti/
//! fixture_nested_driver.bin`, whose nested driver calls exercise the host-idle rule;
//! see its README): decoding, clock mapping, HPCToolkit metrics, occupancy, host idle,
//! the Parquet files, the report section and the per-stream plot.

use powerperf_core::collect::gpu_activity::{self, Kind};
use std::path::Path;

fn run_with_fixture() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("gpu_activity");
    std::fs::create_dir_all(&sub).unwrap();
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("rt/tests/fixtures/cupti/fixture_nested_driver.bin"),
        sub.join("470.bin"),
    )
    .unwrap();
    dir
}

#[test]
fn fixture_becomes_activity_tables_with_hpctoolkit_metrics() {
    let dir = run_with_fixture();
    // Origin: the run started 1 ms before CUPTI's first clock pair (CLOCK_MONOTONIC ns).
    let origin = 25_635_142_359 - 1_000_000;
    let notes = gpu_activity::write_gpu_activity(dir.path(), origin, &|_, _| None)
        .unwrap()
        .unwrap();
    assert!(
        notes
            .last()
            .unwrap()
            .contains("1 process(es): 25 activities (6 kernels), 50 CUDA API calls, 1 device(s)"),
        "{notes:?}"
    );
    let (acts, calls) = gpu_activity::read(dir.path()).unwrap().unwrap();
    assert_eq!(acts.len(), 25);
    assert_eq!(calls.len(), 50);
    // Mapped times start after the origin and within the program's life.
    assert!(acts
        .iter()
        .all(|a| a.start_ns > 0 && a.end_ns >= a.start_ns && a.start_ns < 60_000_000_000));
    let m = gpu_activity::metrics(&acts);
    let ns = |v: f64| (v * 1e9).round() as u64;
    assert_eq!(ns(m["GKER"]), 64_224 + 49_283);
    assert_eq!(m["GKER:COUNT"], 6.0);
    assert_eq!(m["GXCOPY:H2D"], 3.0 * 16_777_216.0);
    assert_eq!(m["GXCOPY:D2H"], 16_777_216.0 + 4096.0);
    assert_eq!(m["GXCOPY:COUNT"], 5.0);
    assert_eq!(m["GMSET:DEV"], 16_777_216.0);
    assert_eq!(m["GSYNC:COUNT"], 3.0);
    assert_eq!(ns(m["GSYNC:CTX"]), 17_581);
    assert_eq!(
        m["GMEM:DEV"],
        2.0 * 51_380_224.0,
        "allocations and frees of device memory"
    );
    let ks = gpu_activity::kernels(&acts);
    assert_eq!(ks.len(), 2);
    assert_eq!(ks[0].name, "_Z4axpyPfPKffi");
    assert_eq!((ks[0].count, ks[0].blk_thr, ks[0].blk), (3, 256.0, 16384.0));
    let occ = ks[0]
        .occ_thr
        .expect("the DEVICE record gives the H100's limits");
    assert!(occ > 0.0 && occ <= 1.0, "{occ}");
    // Kernels launched by the runtime call (the outer of the pair sharing the id).
    let k = acts.iter().find(|a| a.kind == Some(Kind::Kernel)).unwrap();
    assert_eq!(k.launch_api.as_deref(), Some("cudaLaunchKernel"));
    // Host idle: the blocking runtime calls (cudaDeviceSynchronize 22,408 ns,
    // cudaEventSynchronize 5,893 ns, cudaStreamSynchronize 35,379 ns, 4 × cudaMemcpy
    // 1,283,408 ns; `cupti_dump` of the fixture), the driver calls they made not counted again.
    let idle: u64 = gpu_activity::host_idle_calls(&calls)
        .iter()
        .map(|c| c.exit_ns - c.enter_ns)
        .sum();
    let runtime_blocking = 22_408 + 5_893 + 35_379 + 1_283_408;
    assert_eq!(
        idle, runtime_blocking,
        "nested driver calls are not counted twice"
    );
    let r = gpu_activity::per_region(&acts, &calls);
    assert_eq!(ns(r["(no region)"].host_idle_s), idle);
}

#[test]
fn report_shows_the_gpu_section_and_plots_the_streams() {
    let dir = run_with_fixture();
    gpu_activity::write_gpu_activity(dir.path(), 25_000_000_000, &|_, _| None).unwrap();
    let s = powerperf_core::report::gpu::load(dir.path())
        .unwrap()
        .unwrap();
    assert_eq!(s.streams.len(), 3, "{:?}", s.streams);
    let text = powerperf_core::report::gpu::render_text(&s, 1.0);
    println!("{text}");
    assert!(text.contains("GKER"), "{text}");
    assert!(text.contains("_Z4axpyPfPKffi"), "{text}");
    assert!(text.contains("GXCOPY:H2D 50,331,648 B"), "{text}");
    assert!(text.contains("@CUDA_HOST_IDLE"), "{text}");
    // The per-stream plot renders (SVG with one row label per stream).
    let meta_dir = dir.path();
    let meta: powerperf_format::run::RunMeta = toml::from_str(
        r#"
[run]
id = "fixture"
command = ["./fix"]
ended = "exited"
exit_status = 0
start_unix_ns = 0
start_monotonic_ns = 25000000000
duration_ns = 1000000000
host = "h100"
cpu_model = ""
kernel = ""
tool_version = "0"
interval_ns = 10000000
samples = 0

[knobs]
"#,
    )
    .unwrap();
    let p = powerperf_core::report::plots::gpu_streams_plot(meta_dir, &meta)
        .unwrap()
        .unwrap();
    let svg = p.plot.svg().unwrap();
    assert_eq!(p.name, "gpu_streams");
    assert!(svg.contains("gpu0 stream"), "row labels");
    assert!(svg.matches("<rect").count() > 10, "bars drawn");
}

/// Issue 20, item 5, without a GPU: a multi-threaded Python client of the real NVTX
/// injection (the `nvtx` package under `powerperf collect`) holds `epoch/backward` on its
/// main thread while a second thread, with no range of its own, stands in for autograd's
/// device thread and notes its OS thread id and CLOCK_MONOTONIC time where it would launch a
/// kernel; then it does the same after the ranges are closed. Kernel records with those
/// threads and times are attributed against the regions the injection recorded.
#[test]
fn a_launch_from_a_thread_without_a_range_takes_the_range_open_on_another_thread() {
    let test = "a_launch_from_a_thread_without_a_range";
    let ok = std::process::Command::new("python3")
        .args(["-c", "import nvtx"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        println!("skipped: {test}: the Python module `nvtx` is not installed (pip install nvtx)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("client.py");
    std::fs::write(
        &script,
        r#"import os, sys, threading, time
import nvtx
out = open(sys.argv[1], "w")
def launch(tag):
    out.write(f"{tag} {os.getpid()} {threading.get_native_id()} {time.clock_gettime_ns(time.CLOCK_MONOTONIC)}\n")
def worker(tag):
    t = threading.Thread(target=launch, args=(tag,))
    t.start()
    t.join()
nvtx.push_range("epoch")
nvtx.push_range("forward")
launch("forward")
nvtx.pop_range()
nvtx.push_range("backward")
worker("backward")
nvtx.pop_range()
nvtx.pop_range()
worker("outside")
out.close()
"#,
    )
    .unwrap();
    let run = dir.path().join("run");
    let launches = dir.path().join("launches");
    assert_cmd::Command::cargo_bin("powerperf")
        .unwrap()
        .args(["collect", "-q", "--nvml", "off", "-o"])
        .arg(&run)
        .args(["--", "python3"])
        .arg(&script)
        .arg(&launches)
        .assert()
        .success();
    let events = powerperf_rt::events::read_dir(&run).unwrap();
    let mut intervals = powerperf_rt::events::intervals(&events);
    if intervals.is_empty() {
        println!("skipped: {test}: no NVTX range was recorded (libpowerperf_rt.so is not built beside the powerperf binary: cargo build -p powerperf-rt)");
        return;
    }
    intervals.sort_by_key(|i| (i.pid, i.tid, i.start_ns, i.depth));
    let text = std::fs::read_to_string(&launches).unwrap();
    let mut calls = Vec::new();
    let mut acts = Vec::new();
    let mut tags = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let f: Vec<&str> = line.split(' ').collect();
        let corr = i as u32 + 1;
        calls.push(gpu_activity::ApiCall {
            pid: f[1].parse().unwrap(),
            tid: f[2].parse().unwrap(),
            correlation_id: corr,
            name: "cudaLaunchKernel".into(),
            enter_ns: f[3].parse().unwrap(),
            exit_ns: f[3].parse::<u64>().unwrap() + 1,
            region: None,
        });
        acts.push(gpu_activity::Activity {
            pid: f[1].parse().unwrap(),
            kind: Some(Kind::Kernel),
            correlation_id: corr,
            ..Default::default()
        });
        tags.push(f[0].to_string());
    }
    assert_eq!(tags, ["forward", "backward", "outside"]);
    // the stand-in for autograd's thread is not the thread that holds the ranges
    assert_ne!(calls[1].tid, calls[0].tid);
    let counts = gpu_activity::attribute(&mut acts, &mut calls, &intervals);
    let got: Vec<(Option<&str>, Option<&str>)> = acts
        .iter()
        .map(|a| (a.region.as_deref(), a.region_rule.as_deref()))
        .collect();
    assert_eq!(
        got,
        [
            (Some("epoch/forward"), Some("thread")),
            (Some("epoch/backward"), Some("process")),
            (None, None)
        ],
        "{intervals:#?}"
    );
    assert_eq!(
        (
            counts.kernels.thread,
            counts.kernels.process,
            counts.kernels.no_region
        ),
        (1, 1, 1)
    );
}

/// Issue 20, item 5, on a recording from the GPU machine (`tests/fixtures/runs/
/// torch-nvtx-threads`, README there): PyTorch's autograd thread launches the backward
/// kernels while `epoch/backward` is open on the Python thread. With the launching thread's
/// rule alone they were `(no region)`; now they take the Python thread's range.
#[test]
fn pytorch_backward_kernels_take_the_backward_range_of_the_python_thread() {
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/runs/torch-nvtx-threads");
    let dir = tempfile::tempdir().unwrap();
    for sub in ["gpu_activity/551.bin", "region_events/551.tsv"] {
        let to = dir.path().join(sub);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(fixture.join(sub), &to).unwrap();
    }
    let (notes, counts) =
        gpu_activity::write_gpu_activity_attributed(dir.path(), 49_126_447_518, &|_, _| None)
            .unwrap()
            .unwrap();
    assert!(
        notes
            .iter()
            .any(|n| n.contains("GPU kernels by region rule")
                && n.contains("32 on another thread's region")),
        "{notes:?}"
    );
    let k = counts.kernels;
    assert_eq!(
        (
            k.thread,
            k.process,
            k.process_latest,
            k.no_region,
            k.no_launch
        ),
        (22, 32, 0, 2, 0)
    );
    let (acts, calls) = gpu_activity::read(dir.path()).unwrap().unwrap();
    let kernels: Vec<_> = acts
        .iter()
        .filter(|a| a.kind == Some(Kind::Kernel))
        .collect();
    assert_eq!(kernels.len(), 56);
    // Every range is on the Python thread (tid = pid 551); every kernel found by the
    // process rule was launched by another thread, and lies in epoch/backward.
    for a in kernels
        .iter()
        .filter(|a| a.region_rule.as_deref() == Some("process"))
    {
        assert_ne!(a.launch_tid, Some(551), "{a:?}");
        assert_eq!(a.region.as_deref(), Some("epoch/backward"), "{a:?}");
    }
    for a in kernels
        .iter()
        .filter(|a| a.region_rule.as_deref() == Some("thread"))
    {
        assert_eq!(a.launch_tid, Some(551), "{a:?}");
    }
    // Before (the launching thread's rule alone) and after, as report prints them.
    let g = powerperf_core::report::gpu::summarize(&acts, &calls);
    let share = |rules: &[&str]| -> (f64, f64) {
        let (mut n, mut s) = (0u64, 0.0);
        for r in rules {
            if let Some(x) = g.region_rules.get(*r) {
                n += x.kernels;
                s += x.gker_s;
            }
        }
        let tot_s: f64 = g.region_rules.values().map(|x| x.gker_s).sum();
        (n as f64 / 56.0, s / tot_s)
    };
    let (before_k, before_s) = share(&["none", "process", "process_latest"]);
    let (after_k, after_s) = share(&["none"]);
    println!(
        "(no region): {:.1} % of kernels and {:.1} % of GKER with the launching thread's rule alone; {:.1} % and {:.1} % now",
        100.0 * before_k,
        100.0 * before_s,
        100.0 * after_k,
        100.0 * after_s
    );
    assert!((before_k - 34.0 / 56.0).abs() < 1e-12 && (after_k - 2.0 / 56.0).abs() < 1e-12);
    assert!(after_s < before_s);
    assert_eq!(g.regions["epoch/backward"].launches, 34);
}
