//! `powerperf predict`.

/// Arguments of `powerperf predict`.
#[derive(Debug, clap::Args)]
pub struct PredictArgs {}

/// Run `powerperf predict`.
pub fn run(_args: PredictArgs) -> anyhow::Result<i32> {
    anyhow::bail!("`powerperf predict` is not built yet")
}
