//! `powerperf evaluate`.

/// Arguments of `powerperf evaluate`.
#[derive(Debug, clap::Args)]
pub struct EvaluateArgs {}

/// Run `powerperf evaluate`.
pub fn run(_args: EvaluateArgs) -> anyhow::Result<i32> {
    anyhow::bail!("`powerperf evaluate` is not built yet")
}
