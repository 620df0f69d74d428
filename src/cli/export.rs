//! `powerperf export`: a run or a job directory as an OTF2, Perfetto or Chrome trace
//! (docs/export.md).

use std::path::PathBuf;

/// Arguments of `powerperf export`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  powerperf export run1 --format perfetto -o run1.pftrace     # open in ui.perfetto.dev
  powerperf export run1 --format chrome -o run1.json          # chrome://tracing, ui.perfetto.dev
  powerperf export run1 --format otf2 -o run1-otf2            # vampir run1-otf2/traces.otf2
  powerperf export job/ --format perfetto -o job.pftrace      # one process per rank

Regions and CUDA API calls nested on their threads, GPU kernels and copies on one track per
stream (with flows from the launching call), the timeline (power, energy, clocks, counter
rates) as counters with units, PC-sample hot spots as instant events. --format otf2 loads the
OTF2 library at run time (Debian: apt-get install libopen-trace-format2-10). See docs/export.md.")]
pub struct ExportArgs {
    /// A run directory written by `powerperf collect`, or a directory of per-rank run
    /// directories (`collect -o JOB/rank%r` under srun/mpirun): one process per rank.
    pub run: PathBuf,
    /// The trace format.
    #[arg(long)]
    pub format: powerperf_core::export::Format,
    /// Where to write: a file for perfetto and chrome (`-`: stdout), a directory for otf2
    /// (created; the archive's anchor file is DIR/traces.otf2).
    #[arg(short = 'o', long = "output", value_name = "PATH")]
    pub out: PathBuf,
}

/// Run `powerperf export`.
///
/// # Errors
/// A directory that is not a run nor a job; an output that cannot be written; for otf2, a
/// missing OTF2 library (the message names the package).
pub fn run(args: ExportArgs) -> anyhow::Result<i32> {
    let t0 = std::time::Instant::now();
    let w = powerperf_core::export::export(&args.run, args.format, &args.out)?;
    if args.out.as_os_str() != "-" {
        eprintln!(
            "wrote {} ({} format, {} bytes, {} process(es), {} region slices, {} GPU activities, {} counter points) in {:.2} s",
            w.path.display(),
            args.format.name(),
            w.bytes,
            w.processes,
            w.regions,
            w.gpu_activities,
            w.counter_points,
            t0.elapsed().as_secs_f64()
        );
    }
    Ok(0)
}
