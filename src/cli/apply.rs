//! `powerperf apply`.

/// Arguments of `powerperf apply`.
#[derive(Debug, clap::Args)]
pub struct ApplyArgs {}

/// Run `powerperf apply`.
pub fn run(_args: ApplyArgs) -> anyhow::Result<i32> {
    anyhow::bail!("`powerperf apply` is not built yet")
}
