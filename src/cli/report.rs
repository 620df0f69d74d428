//! `powerperf report`.

use crate::report::Format;
use crate::store::run::RunMeta;
use std::path::PathBuf;

/// Arguments of `powerperf report`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  powerperf report run1\n  powerperf report run1 --format json | jq .events"
)]
pub struct ReportArgs {
    /// A run directory written by `powerperf collect`.
    pub run: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
}

/// Run `powerperf report`.
///
/// # Errors
/// A directory that is not a run.
pub fn run(args: ReportArgs) -> anyhow::Result<i32> {
    let meta = RunMeta::read(&args.run)?;
    let mut s = crate::report::summarize(&meta);
    s.regions = crate::collect::attribution::read_regions(&args.run)?.unwrap_or_default();
    print!("{}", crate::report::render_summary(&s, args.format)?);
    Ok(0)
}
