//! How long `powerperf export` takes, and how large its output is against the run
//! directory, for a run of 100,000 region events and 20,000 GPU kernels (issue 40, item 5:
//! under 5 s, to a file of at most about 3× the run directory). Prints a table.
//!
//! ```sh
//! cargo bench --bench export                              # 100,000 events, 20,000 kernels
//! cargo bench --bench export -- --events 1000000 --kernels 200000 --runs 3
//! ```
//!
//! The run is synthetic, written with the run directory's own writers: a run.toml; 4 threads
//! of one process, each entering `outer` and, 4 times inside each, `inner` (region events as
//! `collect` leaves them: `region_events/<pid>.tsv`, v1 text); 20,000 kernels on 4 streams
//! with their launching `cudaLaunchKernel` calls on the first thread inside its regions
//! (`gpu_activity.parquet`, `gpu_api.parquet`, written by powerperf_format::gpu_activity);
//! a 1 ms timeline of 10 s with RAPL package and DRAM energy, three counters and a GPU's
//! power, energy and SM clock. Times are wall-clock seconds of the whole command (start to
//! exit) with the run in the page cache; sizes are of the output (all files of the OTF2
//! archive) and of the run directory.

use powerperf_format::gpu_activity::{self, Activity, ApiCall, Kind};
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

struct Args {
    events: usize,
    kernels: usize,
    runs: usize,
}

fn args() -> Args {
    let mut a = Args {
        events: 100_000,
        kernels: 20_000,
        runs: 3,
    };
    let mut it = std::env::args().skip(1);
    while let Some(x) = it.next() {
        let mut num = |what: &str| -> usize {
            it.next()
                .and_then(|v| v.replace(['_', ','], "").parse().ok())
                .unwrap_or_else(|| panic!("{what} N"))
        };
        match x.as_str() {
            "--events" => a.events = num("--events"),
            "--kernels" => a.kernels = num("--kernels"),
            "--runs" => a.runs = num("--runs"),
            "--bench" => {}
            n => panic!("unknown argument {n:?}: --events N, --kernels N, --runs N"),
        }
    }
    a
}

const PID: u32 = 4242;
const START: u64 = 5_000_000_000;
const DURATION: u64 = 10_000_000_000;

/// Write the synthetic run into `dir`.
fn make_run(dir: &Path, events: usize, kernels: usize) {
    std::fs::create_dir_all(dir.join("region_events")).unwrap();
    let toml = format!(
        "[run]\nid = \"export-bench\"\ncommand = [\"bench\"]\nended = \"exited\"\nexit_status = 0\n\
         start_unix_ns = 1795000000000000000\nstart_monotonic_ns = {START}\nduration_ns = {DURATION}\n\
         host = \"bench\"\ncpu_model = \"\"\nkernel = \"\"\ntool_version = \"\"\ninterval_ns = 1000000\n\
         samples = 10000\n\n[knobs]\n\n[[events]]\nname = \"task-clock\"\nbackend = \"perf_event\"\n\
         status = \"counted\"\ncolumn = \"task-clock\"\ntotal = 1.0\nunit = \"ns\"\n"
    );
    let meta = powerperf_format::run::RunMeta::from_toml(&toml).unwrap();
    meta.write(dir).unwrap();
    // Regions: per thread, outer > 4 × inner: 10 events per outer.
    let threads = 4u32;
    let outers = events / 10 / threads as usize;
    let step = DURATION / (outers as u64 + 1);
    let mut text = format!("# powerperf-rt region events v1 pid={PID}\nR\t1\touter\nR\t2\tinner\n");
    let mut first_thread_inner: Vec<(u64, u64)> = Vec::new();
    for t in 0..threads {
        let tid = PID + t;
        for o in 0..outers as u64 {
            let b = START + o * step + u64::from(t);
            let _ = writeln!(text, "B\t{b}\t{tid}\t1");
            for i in 0..4u64 {
                let s = b + 10 + i * step / 5;
                let e = s + step / 6;
                let _ = writeln!(text, "B\t{s}\t{tid}\t2");
                let _ = writeln!(text, "E\t{e}\t{tid}\t2");
                if t == 0 {
                    first_thread_inner.push((s, e));
                }
            }
            let _ = writeln!(text, "E\t{}\t{tid}\t1", b + step - step / 10);
        }
    }
    std::fs::write(dir.join(format!("region_events/{PID}.tsv")), text).unwrap();
    // Kernels, launched inside the first thread's inner regions.
    let mut acts = Vec::with_capacity(kernels);
    let mut calls = Vec::with_capacity(kernels);
    for k in 0..kernels {
        let (s, e) = first_thread_inner[k % first_thread_inner.len()];
        let per = (kernels / first_thread_inner.len()).max(1) as u64 + 1;
        let slot = (e - s) / (per + 1);
        let launch = s + 1 + (k / first_thread_inner.len()) as u64 * slot;
        let corr = k as u32 + 1;
        calls.push(ApiCall {
            pid: PID,
            tid: PID,
            correlation_id: corr,
            name: "cudaLaunchKernel".into(),
            enter_ns: launch,
            exit_ns: launch + slot / 4,
            region: Some("outer/inner".into()),
        });
        acts.push(Activity {
            pid: PID,
            kind: Some(Kind::Kernel),
            name: Some(format!("_Z6kernelILi{}EEvPf", k % 50)),
            start_ns: launch + slot / 3,
            end_ns: launch + slot / 3 + slot / 2,
            device: 0,
            context: 1,
            stream: 7 + (k % 4) as u32,
            correlation_id: corr,
            grid: [1024, 1, 1],
            block: [256, 1, 1],
            launch_tid: Some(PID),
            launch_api: Some("cudaLaunchKernel".into()),
            launch_ns: Some(launch),
            region: Some("outer/inner".into()),
            region_rule: Some("thread".into()),
            ..Activity::default()
        });
    }
    gpu_activity::write(dir, &acts, &calls, START).unwrap();
    // The timeline.
    let names: Vec<String> = [
        "task-clock",
        "context-switches",
        "page-faults",
        "energy_package_0_j",
        "energy_dram_0_j",
        "gpu0_power_w",
        "gpu0_energy_j",
        "gpu0_sm_clock_mhz",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut t = powerperf_format::timeline::Timeline::new(&names);
    let rows = (DURATION / 1_000_000) as usize;
    for i in 1..=rows as u64 {
        let f = (i % 97) as f64;
        t.push(
            i * 1_000_000,
            1_000_000,
            &[
                Some(9.5e5 + f),
                Some(f),
                Some(2.0 * f),
                Some(0.03 + f * 1e-4),
                Some(0.005),
                Some(250.0 + f),
                Some(0.25),
                Some(1980.0),
            ],
        );
    }
    t.write_parquet(&dir.join("timeline.parquet")).unwrap();
}

fn size_of(p: &Path) -> u64 {
    let m = std::fs::metadata(p).unwrap();
    if m.is_dir() {
        std::fs::read_dir(p)
            .unwrap()
            .flatten()
            .map(|e| size_of(&e.path()))
            .sum()
    } else {
        m.len()
    }
}

fn main() {
    let a = args();
    let bin = env!("CARGO_BIN_EXE_powerperf");
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    make_run(&run, a.events, a.kernels);
    let run_bytes = size_of(&run);
    println!(
        "run: {} region events, {} kernels (+ {} API calls), 10,000 timeline rows; run directory {:.2} MB",
        a.events,
        a.kernels,
        a.kernels,
        run_bytes as f64 / 1e6
    );
    println!(
        "{:<10} {:>10} {:>10} {:>10} {:>12} {:>8}",
        "format", "best s", "median s", "worst s", "output MB", "× run"
    );
    for (format, out) in [
        ("otf2", "out-otf2"),
        ("perfetto", "out.pftrace"),
        ("chrome", "out.json"),
        ("chrome", "out.json.gz"),
    ] {
        let out = dir.path().join(out);
        let mut times = Vec::new();
        for _ in 0..a.runs {
            let _ = std::fs::remove_dir_all(&out);
            let _ = std::fs::remove_file(&out);
            let t0 = Instant::now();
            let o = Command::new(bin)
                .arg("export")
                .arg(&run)
                .args(["--format", format, "-o"])
                .arg(&out)
                .output()
                .unwrap();
            let dt = t0.elapsed().as_secs_f64();
            if !o.status.success() {
                println!(
                    "{format:<10} failed: {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                );
                break;
            }
            times.push(dt);
        }
        if times.is_empty() {
            continue;
        }
        times.sort_by(f64::total_cmp);
        let bytes = size_of(&out);
        let label = if out.to_string_lossy().ends_with(".gz") {
            "chrome.gz"
        } else {
            format
        };
        println!(
            "{:<10} {:>10.2} {:>10.2} {:>10.2} {:>12.2} {:>8.2}",
            label,
            times[0],
            times[times.len() / 2],
            times[times.len() - 1],
            bytes as f64 / 1e6,
            bytes as f64 / run_bytes as f64
        );
    }
}
