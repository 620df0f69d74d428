//! `powerperf fit`.

/// Arguments of `powerperf fit`.
#[derive(Debug, clap::Args)]
pub struct FitArgs {}

/// Run `powerperf fit`.
pub fn run(_args: FitArgs) -> anyhow::Result<i32> {
    anyhow::bail!("`powerperf fit` is not built yet")
}
