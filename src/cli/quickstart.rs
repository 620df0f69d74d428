//! `powerperf quickstart`.

/// Arguments of `powerperf quickstart`.
#[derive(Debug, clap::Args)]
pub struct QuickstartArgs {}

/// Run `powerperf quickstart`.
pub fn run(_args: QuickstartArgs) -> anyhow::Result<i32> {
    anyhow::bail!("`powerperf quickstart` is not built yet")
}
