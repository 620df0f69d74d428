//! `powerperf import`.

/// Arguments of `powerperf import`.
#[derive(Debug, clap::Args)]
pub struct ImportArgs {}

/// Run `powerperf import`.
pub fn run(_args: ImportArgs) -> anyhow::Result<i32> {
    anyhow::bail!("`powerperf import` is not built yet")
}
