//! `powerperf events`.

/// `powerperf events` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum EventsCommand {
    /// Evaluate every definition of FILE on a run's totals.
    Eval {},
}

/// Run `powerperf events ...`.
pub fn run(_cmd: EventsCommand) -> anyhow::Result<i32> {
    anyhow::bail!("`powerperf events` is not built yet")
}
