//! `powerperf microbench`: workload kernels for training runs.

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
}

/// Run `powerperf microbench ...`.
///
/// # Errors
/// None today; kept for the machine-constant measurements.
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
                .unwrap_or_else(crate::collect::sysinfo::online_cpus);
            let r = microbench::run_kernel(kernel, threads, scale);
            let s = r.elapsed.as_secs_f64();
            println!(
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
    }
}
