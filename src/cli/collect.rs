//! `powerperf collect`.

/// Arguments of `powerperf collect`.
#[derive(Debug, clap::Args)]
pub struct CollectArgs {}

/// Run `powerperf collect`.
pub fn run(_args: CollectArgs) -> anyhow::Result<i32> {
    anyhow::bail!("`powerperf collect` is not built yet")
}
