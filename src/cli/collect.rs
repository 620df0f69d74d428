//! `powerperf collect`.

use crate::collect::CollectConfig;
use std::path::PathBuf;

/// Arguments of `powerperf collect`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  powerperf collect -o run1 -- tar czf /tmp/src.tgz src\n  powerperf collect -e task-clock,page-faults,cycles --interval 100ms -o run2 -- ./a.out\n\nThe run directory holds run.toml and timeline.parquet (docs/run-format.md).\npowerperf exits with the command's status (128 + signal number when it was killed)."
)]
pub struct CollectArgs {
    /// Events to count, comma-separated, as `perf stat -e` takes them (default: perf stat's).
    #[arg(short = 'e', long = "events")]
    pub events: Option<String>,
    /// Sampling interval of the timeline (e.g. 10ms, 1s; 0 for totals only).
    #[arg(long, default_value = "10ms", value_parser = humantime::parse_duration)]
    pub interval: std::time::Duration,
    /// Filesystem root for sysfs reads (a fixture tree in tests).
    #[arg(long, default_value = "/")]
    pub sysfs_root: PathBuf,
    /// Run directory to write.
    #[arg(short = 'o', long = "output")]
    pub output: PathBuf,
    /// Workload label stored in run.toml (default: the command's base name).
    #[arg(long)]
    pub workload: Option<String>,
    /// Do not print the summary after the run.
    #[arg(short, long)]
    pub quiet: bool,
    /// The command and its arguments.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

/// Run `powerperf collect`.
///
/// # Errors
/// Bad events, an unwritable run directory, or a failed fork.
#[cfg(target_os = "linux")]
pub fn run(args: CollectArgs) -> anyhow::Result<i32> {
    let cfg = CollectConfig {
        events: args.events,
        interval: args.interval,
        sysfs_root: args.sysfs_root,
        out: args.output.clone(),
        command: args.command,
        workload: args.workload,
        env: vec![],
    };
    let outcome = crate::collect::collect_run(&cfg)?;
    if let Some(e) = &outcome.meta.run.error {
        eprintln!("powerperf: {e}");
    }
    if !args.quiet {
        let text = crate::report::render(&outcome.meta, crate::report::Format::Table)?;
        eprint!("{text}");
        eprintln!("run directory: {}", args.output.display());
    }
    Ok(outcome.shell_status)
}

/// Run `powerperf collect` (Linux only).
#[cfg(not(target_os = "linux"))]
pub fn run(_args: CollectArgs) -> anyhow::Result<i32> {
    anyhow::bail!("`powerperf collect` needs Linux perf_event; this platform has none")
}
