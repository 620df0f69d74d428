//! Overhead of `powerperf collect` on a CPU-bound program (issue 4, item 8): the program's
//! wall time alone and under `collect --interval 10ms`, interleaved, with the mean dilation
//! and its 95 % confidence interval (Student's t), and powerperf's own CPU time against the
//! program's (`run.self_cpu_ns` against `task-clock`), for both timeline samplers
//! (`--sampler kernel`: leader samples drained 4 times a second; `--sampler thread`: a
//! thread reading the counters every 10 ms).
//!
//! `cargo build --release && target/release/collect-overhead-bench [RUNS] [SCALE]`
//! (default 30 runs each way; SCALE sizes the `microbench kernel fma` workload). The program
//! is `powerperf microbench kernel fma --threads 1`, next to this binary.

use statrs::distribution::{ContinuousCDF, StudentsT};
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

fn mean_ci(x: &[f64]) -> (f64, f64, f64) {
    let n = x.len() as f64;
    let m = x.iter().sum::<f64>() / n;
    let sd = (x.iter().map(|v| (v - m).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
    let t = StudentsT::new(0.0, 1.0, n - 1.0)
        .map(|d| d.inverse_cdf(0.975))
        .unwrap_or(1.96);
    let h = t * sd / n.sqrt();
    (m, m - h, m + h)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let runs: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(30);
    let scale = args.next().unwrap_or_else(|| "0.5".into());
    let exe = std::env::current_exe().expect("own path");
    let pp: PathBuf = exe.with_file_name("powerperf");
    assert!(
        pp.is_file(),
        "{} not built (cargo build --release)",
        pp.display()
    );
    let dir = std::env::temp_dir().join(format!("pp-overhead-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let prog = |c: &mut Command| {
        c.args([
            "microbench",
            "kernel",
            "fma",
            "--threads",
            "1",
            "--scale",
            &scale,
        ]);
    };
    const SAMPLERS: [&str; 2] = ["kernel", "thread"];
    #[derive(Default)]
    struct Arm {
        under: Vec<f64>,
        under_total: Vec<f64>,
        self_cpu: Vec<f64>,
        fell_back: usize,
    }
    let mut alone = Vec::new();
    let mut arms: Vec<Arm> = SAMPLERS.iter().map(|_| Arm::default()).collect();
    // Warm-up of both (page cache, CPU frequency).
    for _ in 0..2 {
        let mut c = Command::new(&pp);
        prog(&mut c);
        c.output().expect("program runs");
    }
    for i in 0..runs {
        // Rotate which goes first, so drifts of the machine hit every arm alike.
        for k in 0..=SAMPLERS.len() {
            let which = (i + k) % (SAMPLERS.len() + 1);
            if which == SAMPLERS.len() {
                let mut c = Command::new(&pp);
                prog(&mut c);
                let t = Instant::now();
                let o = c.output().expect("program runs");
                assert!(o.status.success());
                alone.push(t.elapsed().as_secs_f64());
                continue;
            }
            let arm = &mut arms[which];
            let run = dir.join(format!("r{i}-{which}"));
            let mut c = Command::new(&pp);
            c.args(["collect", "-q", "--nvml", "off", "--interval", "10ms"])
                .args(["--sampler", SAMPLERS[which], "-o"])
                .arg(&run)
                .arg("--")
                .arg(&pp);
            prog(&mut c);
            let t = Instant::now();
            let o = c.output().expect("collect runs");
            arm.under_total.push(t.elapsed().as_secs_f64());
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            let meta = powerperf_format::run::RunMeta::read(&run).expect("run.toml");
            if meta.run.timeline_sampler.as_deref() != Some(SAMPLERS[which]) {
                arm.fell_back += 1;
            }
            arm.under.push(meta.run.duration_ns as f64 * 1e-9);
            let tc = meta.totals().values.get("task-clock").copied();
            if let (Some(s), Some(tc)) = (meta.run.self_cpu_ns, tc) {
                arm.self_cpu.push(100.0 * s as f64 / tc);
            }
            std::fs::remove_dir_all(&run).ok();
        }
    }
    std::fs::remove_dir_all(&dir).ok();
    let (ma, _, _) = mean_ci(&alone);
    println!("collect overhead, {runs} interleaved runs each way, `powerperf microbench kernel fma --threads 1 --scale {scale}`, --interval 10ms");
    println!("{:<58} {:>10}", "quantity", "value");
    println!(
        "{:<58} {:>10.4} s",
        "program wall time alone (mean, incl. exec)", ma
    );
    for (name, arm) in SAMPLERS.iter().zip(&arms) {
        let dil = |u: &[f64]| -> Vec<f64> {
            alone
                .iter()
                .zip(u)
                .map(|(a, u)| 100.0 * (u / a - 1.0))
                .collect()
        };
        let (mu, _, _) = mean_ci(&arm.under);
        let (d, lo, hi) = mean_ci(&dil(&arm.under));
        let (dt, lot, hit) = mean_ci(&dil(&arm.under_total));
        let (sc, slo, shi) = mean_ci(&arm.self_cpu);
        println!(
            "--sampler {name}{}",
            if arm.fell_back > 0 {
                format!(" (fell back to thread in {} runs)", arm.fell_back)
            } else {
                String::new()
            }
        );
        println!(
            "{:<58} {:>10.4} s",
            "  program wall time under collect (mean, run.duration_ns)", mu
        );
        println!(
            "{:<58} {:>+9.2} %  95 % CI [{lo:+.2}, {hi:+.2}]",
            "  dilation of the program", d
        );
        println!(
            "{:<58} {:>+9.2} %  95 % CI [{lot:+.2}, {hit:+.2}]",
            "  dilation end to end (powerperf start, run, write)", dt
        );
        println!(
            "{:<58} {:>9.3} %  95 % CI [{slo:.3}, {shi:.3}]",
            "  powerperf's own CPU time / the program's task-clock", sc
        );
    }
    let floor_us = wakeup_floor_us(300, std::time::Duration::from_millis(10));
    println!(
        "{:<58} {:>9.1} us = {:.3} % of a core at 10 ms",
        "floor: CPU per wake-up of a thread that only sleeps 10 ms",
        floor_us,
        floor_us / 10_000.0 * 100.0
    );
}

/// CPU time per wake-up (µs) of a thread that does nothing but sleep `period`, `n` times:
/// the floor under any periodic sampler thread on this machine (getrusage RUSAGE_THREAD).
fn wakeup_floor_us(n: u32, period: std::time::Duration) -> f64 {
    std::thread::spawn(move || {
        let cpu = || {
            // SAFETY: `rusage` is plain C data (integers and timevals): all zeros is valid.
            let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
            // SAFETY: getrusage fills the struct it is given, a local `rusage`.
            unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
            let us = |t: libc::timeval| t.tv_sec as f64 * 1e6 + t.tv_usec as f64;
            us(ru.ru_utime) + us(ru.ru_stime)
        };
        let c0 = cpu();
        for _ in 0..n {
            std::thread::sleep(period);
        }
        (cpu() - c0) / f64::from(n)
    })
    .join()
    .unwrap_or(f64::NAN)
}
