//! `powerperf plan`.

/// Arguments of `powerperf plan`.
#[derive(Debug, clap::Args)]
pub struct PlanArgs {}

/// Run `powerperf plan`.
pub fn run(_args: PlanArgs) -> anyhow::Result<i32> {
    anyhow::bail!("`powerperf plan` is not built yet")
}
