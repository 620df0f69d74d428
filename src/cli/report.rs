//! `powerperf report`.

/// Arguments of `powerperf report`.
#[derive(Debug, clap::Args)]
pub struct ReportArgs {}

/// Run `powerperf report`.
pub fn run(_args: ReportArgs) -> anyhow::Result<i32> {
    anyhow::bail!("`powerperf report` is not built yet")
}
