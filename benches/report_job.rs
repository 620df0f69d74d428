//! How long `powerperf report JOB` takes over a job directory of N shards (issue 23, item 3:
//! 100,000 shards in under 10 s). Prints a table.
//!
//! ```sh
//! cargo bench --bench report_job                      # 4,096 and 100,000 shards
//! cargo bench --bench report_job -- 4096 100000 --runs 3 --regions --bin /tmp/powerperf-old
//! ```
//!
//! The job is synthetic, made from one real shard: `powerperf collect` of a short shell loop
//! over the powercap fixture `tests/fixtures/sysfs/rapl-wrap` (so it has RAPL energy). Shard
//! `rank<i>` gets that run.toml re-labelled as rank i, local rank i mod 32 on host
//! `node<i / 32>` (local rank 0 keeps the RAPL events, the others leave them to it, as
//! `collect` writes them), its duration and task-clock varied by rank, and the template's
//! `timeline.parquet` as a hard link. With `--regions` each shard also links one
//! `regions.parquet` of 8 region paths on 4 threads. Times are wall-clock seconds of the
//! whole command (start to exit, output to /dev/null) with the files in the page cache
//! (the job was just written); `--bin` times another powerperf binary on the same job.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

const RANKS_PER_NODE: u32 = 32;

struct Args {
    counts: Vec<usize>,
    runs: usize,
    regions: bool,
    bin: PathBuf,
}

fn args() -> Args {
    let mut a = Args {
        counts: vec![],
        runs: 3,
        regions: false,
        bin: PathBuf::from(env!("CARGO_BIN_EXE_powerperf")),
    };
    let mut it = std::env::args().skip(1);
    while let Some(x) = it.next() {
        match x.as_str() {
            "--runs" => a.runs = it.next().and_then(|v| v.parse().ok()).expect("--runs N"),
            "--regions" => a.regions = true,
            "--bin" => a.bin = it.next().map(PathBuf::from).expect("--bin PATH"),
            // cargo bench passes --bench to harness-less benches.
            "--bench" => {}
            n => a
                .counts
                .push(n.replace(['_', ','], "").parse().unwrap_or_else(|_| {
                    panic!("unknown argument {n:?}: shard counts, --runs N, --regions, --bin PATH")
                })),
        }
    }
    if a.counts.is_empty() {
        a.counts = vec![4096, 100_000];
    }
    a
}

fn copy_tree(from: &Path, to: &Path) {
    if from.is_dir() {
        std::fs::create_dir_all(to).unwrap();
        for e in std::fs::read_dir(from).unwrap() {
            let e = e.unwrap();
            copy_tree(&e.path(), &to.join(e.file_name()));
        }
    } else {
        std::fs::copy(from, to).unwrap();
    }
}

/// One real shard: collect of a short loop over a copy of the powercap fixture, whose
/// package counter the command advances.
fn template(dir: &Path, bin: &Path) -> PathBuf {
    let root = dir.join("sysfs");
    copy_tree(
        &PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sysfs/rapl-wrap"),
        &root,
    );
    let pkg = root.join("sys/class/powercap/intel-rapl:0/energy_uj");
    let out = dir.join("template");
    let script = format!(
        "echo 1000000 > {}; i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done",
        pkg.display()
    );
    let st = Command::new(bin)
        .args([
            "collect",
            "-q",
            "--nvml",
            "off",
            "--interval",
            "10ms",
            "--sysfs-root",
        ])
        .arg(&root)
        .arg("-o")
        .arg(&out)
        .args(["--", "sh", "-c", &script])
        .env_remove("OMPI_COMM_WORLD_LOCAL_RANK")
        .env_remove("SLURM_LOCALID")
        .status()
        .unwrap();
    assert!(st.success(), "collect of the template shard failed");
    out
}

/// A regions.parquet of 8 paths on 4 threads.
fn regions_file(path: &Path) {
    let mut rows = vec![];
    for tid in 0..4u32 {
        for (k, p) in [
            "main",
            "main/init",
            "main/solve",
            "main/solve/halo",
            "main/solve/step",
            "main/solve/step/flux",
            "main/io",
            "main/finalize",
        ]
        .iter()
        .enumerate()
        {
            rows.push(powerperf_format::regions::RegionRow {
                stats: powerperf_rt::events::Stats {
                    pid: 1,
                    tid: 100 + tid,
                    path: p.to_string(),
                    region: p.rsplit('/').next().unwrap().to_string(),
                    depth: p.matches('/').count() as u32,
                    calls: 10,
                    incl_ns: 1_000_000 * (k as u64 + 1) + u64::from(tid),
                    min_ns: 1000,
                    max_ns: 200_000,
                    exit_closed: 0,
                    counters: vec![],
                    counted_calls: 0,
                },
                values: vec![],
            });
        }
    }
    powerperf_format::regions::write(path, &[], &rows, Some(0), &[]).unwrap();
}

/// Hard-link `src` as `dst`; where `src` has as many links as the file system allows
/// (65,000 on ext4), copy it and link the copy from then on.
fn link(src: &mut PathBuf, dst: &Path) {
    if std::fs::hard_link(&*src, dst).is_err() {
        std::fs::copy(&*src, dst).unwrap();
        *src = dst.to_path_buf();
    }
}

/// Write `n` shards into `job`, from `template`.
fn make_job(job: &Path, template: &Path, n: usize, regions: Option<&Path>) {
    use powerperf_format::run::{Backend, RunMeta, NODE_SOURCES_LEFT, NODE_SOURCES_SAMPLED};
    let t = RunMeta::read(template).unwrap();
    let mut tl = template.join(powerperf_format::timeline::TIMELINE);
    let mut rg = regions.map(Path::to_path_buf);
    std::fs::create_dir_all(job).unwrap();
    for i in 0..n {
        let r = i as u32;
        let mut m = t.clone();
        let local = r % RANKS_PER_NODE;
        m.run.rank = Some(r);
        m.run.local_rank = Some(local);
        m.run.host = format!("node{}", r / RANKS_PER_NODE);
        m.run.node_sources = Some(
            if local == 0 {
                NODE_SOURCES_SAMPLED
            } else {
                NODE_SOURCES_LEFT
            }
            .into(),
        );
        // Unequal ranks: up to 10 % longer, task-clock with it.
        let f = 1.0 + 0.1 * (i % 97) as f64 / 97.0;
        m.run.duration_ns = (m.run.duration_ns as f64 * f) as u64;
        for e in &mut m.events {
            if e.name == "task-clock" {
                e.total = e.total.map(|v| v * f);
            }
        }
        if local > 0 {
            m.events.retain(|e| e.backend != Backend::Rapl);
        }
        let d = job.join(format!("rank{i}"));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("run.toml"), toml::to_string_pretty(&m).unwrap()).unwrap();
        if tl.is_file() {
            link(&mut tl, &d.join(powerperf_format::timeline::TIMELINE));
        }
        if let Some(rg) = rg.as_mut() {
            link(rg, &d.join("regions.parquet"));
        }
    }
}

fn main() {
    let a = args();
    let tmp = tempfile::Builder::new()
        .prefix("report-job-bench")
        .tempdir()
        .unwrap();
    let t = template(tmp.path(), &a.bin);
    let regions = a.regions.then(|| {
        let p = tmp.path().join("regions.parquet");
        regions_file(&p);
        p
    });
    println!(
        "powerperf report JOB: {} ({} run{} each; regions.parquet: {})",
        a.bin.display(),
        a.runs,
        if a.runs == 1 { "" } else { "s" },
        if a.regions { "yes" } else { "no" }
    );
    println!(
        "{:>8} {:>8} {:>10} {:>10} {:>12}",
        "shards", "nodes", "min s", "median s", "µs/shard"
    );
    for &n in &a.counts {
        let job = tmp.path().join(format!("job{n}"));
        make_job(&job, &t, n, regions.as_deref());
        let mut times = vec![];
        for _ in 0..a.runs {
            let t0 = Instant::now();
            let out = Command::new(&a.bin)
                .arg("report")
                .arg(&job)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .output()
                .unwrap();
            times.push(t0.elapsed().as_secs_f64());
            assert!(
                out.status.success(),
                "report failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        times.sort_by(f64::total_cmp);
        println!(
            "{:>8} {:>8} {:>10.3} {:>10.3} {:>12.1}",
            n,
            n.div_ceil(RANKS_PER_NODE as usize),
            times[0],
            times[times.len() / 2],
            1e6 * times[times.len() / 2] / n as f64
        );
        std::fs::remove_dir_all(&job).unwrap();
    }
}
