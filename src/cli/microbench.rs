//! `powerperf microbench`: workload kernels for training runs, and the measurement of
//! machine constants (`run`).

use std::path::PathBuf;

use powerperf_core::output::OutputFormat as Format;

/// `powerperf microbench` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum MicrobenchCommand {
    /// Run one workload kernel (triad: memory bound; fma: compute bound; mixed) and print
    /// its time, bandwidth and flop rate. Threads: --threads, else OMP_NUM_THREADS, else all CPUs.
    #[command(
        after_help = "Example:\n  powerperf collect -o run1 -- powerperf microbench kernel mixed --threads 2"
    )]
    Kernel {
        /// triad | fma | mixed
        kernel: microbench::Kernel,
        #[arg(long)]
        threads: Option<usize>,
        /// Amount of work (1.0 ≈ 0.5 s of one core).
        #[arg(long, default_value_t = 1.0)]
        scale: f64,
    },
    /// Measure machine constants: memory latency per cache level (pointer chase over working
    /// sets chosen from sysfs cache sizes), STREAM bandwidth on 1 thread and on every CPU,
    /// branch, FP, TLB, timer and counter costs, and the core clock used for ns -> cycles.
    /// Under 60 s (--quick: under 10 s).
    #[command(
        after_help = "Example:\n  powerperf microbench run -o machine-constants/amd-epyc-zen4.toml --curve latency.csv"
    )]
    Run {
        /// Fewer repeats and a coarser curve (under 10 s; for tests).
        #[arg(long)]
        quick: bool,
        /// Write the constants TOML (format of machine-constants/*.toml; `-` for stdout).
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Write the latency curve CSV (size_bytes,ns_per_load,cycles_per_load; `-` for stdout).
        #[arg(long)]
        curve: Option<PathBuf>,
        /// How to print the results.
        #[arg(long, default_value = "table")]
        format: powerperf_core::output::OutputFormat,
        /// Root of the sysfs tree with devices/system/cpu/cpu0/cache (for tests).
        #[arg(long, default_value = "/sys")]
        sysfs_root: PathBuf,
        /// Run STREAM under the normal scheduler instead of SCHED_RR (by default its
        /// threads ask for SCHED_RR priority 1, so other tasks' time slices stay out of
        /// the wall time; without root or CAP_SYS_NICE the request is refused and said so).
        #[arg(long)]
        no_realtime: bool,
    },
}

/// Run `powerperf microbench ...`.
///
/// # Errors
/// `run`: the cache sizes cannot be read from sysfs, or an output file cannot be written.
pub fn run(cmd: MicrobenchCommand) -> anyhow::Result<i32> {
    match cmd {
        MicrobenchCommand::Kernel {
            kernel,
            threads,
            scale,
        } => {
            let threads = threads
                .or_else(|| {
                    std::env::var("OMP_NUM_THREADS")
                        .ok()
                        .and_then(|s| s.trim().parse().ok())
                })
                .unwrap_or_else(powerperf_core::collect::sysinfo::available_cpus);
            let r = microbench::run_kernel(kernel, threads, scale);
            let s = r.elapsed.as_secs_f64();
            outln!(
                "kernel {:?} threads {} time {:.4} s bandwidth {:.2} GB/s flops {:.3} GFLOP/s checksum {:.6e}",
                r.kernel,
                r.threads,
                s,
                r.bytes as f64 / s * 1e-9,
                r.flops as f64 / s * 1e-9,
                r.checksum
            );
            Ok(0)
        }
        MicrobenchCommand::Run {
            quick,
            output,
            curve,
            format,
            sysfs_root,
            no_realtime,
        } => {
            format.check("microbench run", &Format::TABLE_JSON)?;
            let mut cfg = microbench::SuiteConfig::live(quick);
            cfg.sysfs_root = sysfs_root;
            cfg.realtime = !no_realtime;
            let report =
                microbench::run_suite(&cfg, &mut |stage| eprintln!("microbench: {stage}"))?;
            match format {
                Format::Json => outln!("{}", serde_json::to_string_pretty(&report)?),
                Format::Table | Format::Csv | Format::Markdown => out!("{}", report.table()),
            }
            if let Some(p) = curve {
                microbench::suite::write_out(&p, &report.curve_csv())?;
            }
            if let Some(p) = output {
                microbench::suite::write_out(&p, &report.constants_toml()?)?;
                if p.as_os_str() != "-" {
                    eprintln!("microbench: wrote {}", p.display());
                }
            }
            Ok(0)
        }
    }
}
