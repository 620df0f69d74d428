//! The command line: clap derive, one file per subcommand. Each subcommand's `run` returns
//! the process exit status (0 on success; `collect` and `apply` return the command's).

use clap::{Parser, Subcommand};

/// A write to stdout that failed: a closed pipe (`| head`), a full disk, /dev/full. `main`
/// turns it into exit status 1 (quietly for a closed pipe, as other CLIs do) instead of the
/// panic of `println!`.
#[derive(Debug, thiserror::Error)]
#[error("cannot write to stdout: {0}")]
pub struct StdoutError(pub std::io::Error);

/// Write to stdout through its lock; errors propagate (see [`StdoutError`]).
///
/// # Errors
/// The write's error.
pub fn out_fmt(args: std::fmt::Arguments) -> Result<(), StdoutError> {
    use std::io::Write;
    std::io::stdout()
        .lock()
        .write_fmt(args)
        .map_err(StdoutError)
}

/// Flush stdout (its buffer is otherwise flushed at exit, where an error is lost).
///
/// # Errors
/// The flush's error.
pub fn out_flush() -> Result<(), StdoutError> {
    use std::io::Write;
    std::io::stdout().lock().flush().map_err(StdoutError)
}

/// `print!` whose error returns from the enclosing function (`?`) instead of panicking.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::cli::out_fmt(format_args!($($arg)*))?
    };
}

/// `println!` whose error returns from the enclosing function (`?`) instead of panicking.
macro_rules! outln {
    () => {
        $crate::cli::out_fmt(format_args!("\n"))?
    };
    ($($arg:tt)*) => {
        $crate::cli::out_fmt(format_args!("{}\n", format_args!($($arg)*)))?
    };
}

pub mod apply;
pub mod collect;
pub mod datasets;
pub mod devices;
pub mod evaluate;
pub mod events;
pub mod export;
pub mod fit;
pub mod import;
pub mod microbench;
pub mod plan;
pub mod predict;
pub mod predict_counters;
pub mod quickstart;
pub mod report;
pub mod sweep;
pub mod values;

/// powerperf: where a program spends time and energy, why, what happens at another
/// frequency or thread count, and which DVFS schedule saves the most energy.
#[derive(Debug, Parser)]
#[command(name = "powerperf", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// More log output on stderr: `-v` info, `-vv` debug, `-vvv` trace (default: warnings).
    /// `RUST_LOG` (e.g. `RUST_LOG=powerperf_core::dvfs=debug`), when set, takes precedence.
    #[arg(short = 'v', long = "verbose", action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// Less log output: errors only, given before the subcommand (`powerperf -q fit …`;
    /// `collect -q` has its own meaning, no summary, and also quiets the log). The command's
    /// own report and notes are unchanged.
    #[arg(short = 'q', long = "quiet", conflicts_with = "verbose")]
    pub quiet: bool,
}

/// The log level that `-v`/`-q` select when `RUST_LOG` is not set.
#[must_use]
pub fn log_level(verbose: u8, quiet: bool) -> tracing::Level {
    use tracing::Level;
    match (quiet, verbose) {
        (true, _) => Level::ERROR,
        (false, 0) => Level::WARN,
        (false, 1) => Level::INFO,
        (false, 2) => Level::DEBUG,
        (false, _) => Level::TRACE,
    }
}

/// Start the `tracing` subscriber: log lines go to stderr, filtered by `RUST_LOG` when it is
/// set (tracing-subscriber's `EnvFilter` syntax), else by [`log_level`]. A `RUST_LOG` that
/// does not parse is reported once and the flags' level is used.
fn init_logging(verbose: u8, quiet: bool) {
    use tracing_subscriber::EnvFilter;
    let level = log_level(verbose, quiet);
    let (filter, bad) = match std::env::var("RUST_LOG") {
        Ok(v) if !v.trim().is_empty() => match EnvFilter::try_new(&v) {
            Ok(f) => (f, None),
            Err(e) => (EnvFilter::new(level.as_str()), Some(format!("{v:?}: {e}"))),
        },
        _ => (EnvFilter::new(level.as_str()), None),
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(true)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .without_time()
        .try_init();
    if let Some(bad) = bad {
        tracing::warn!("RUST_LOG ignored, it does not parse: {bad}");
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a command and record counters, RAPL energy and a timeline into a run directory.
    Collect(collect::CollectArgs),
    /// Summarise a run like `perf stat`: totals, rates, IPC, energy per domain, mean power.
    Report(report::ReportArgs),
    /// Derived events: check and evaluate PAPI, perf, LIKWID, PerfExpert and infix formulas.
    #[command(subcommand)]
    Events(events::EventsCommand),
    /// Write a run (or a job of ranks) as an OTF2, Perfetto or Chrome trace for Vampir,
    /// the Perfetto UI or chrome://tracing.
    Export(export::ExportArgs),
    /// Turn tabular measurements into a training set through a TOML spec.
    Import(import::ImportArgs),
    /// The public measurement sets bundled in the binary: list them, or write them out.
    #[command(subcommand)]
    Datasets(datasets::DatasetsCommand),
    /// Fit models on a training set and print leave-one-out error.
    Fit(fit::FitArgs),
    /// Predict time, power and energy at other knob values.
    Predict(predict::PredictArgs),
    /// Held-out evaluation of a model kind on a training set.
    Evaluate(evaluate::EvaluateArgs),
    /// Choose a frequency per workload or region under a slowdown bound.
    Plan(plan::PlanArgs),
    /// Run a command under a plan, restoring every setting afterwards.
    Apply(apply::ApplyArgs),
    /// Collect training runs over a grid of core frequencies and thread counts.
    Sweep(sweep::SweepArgs),
    /// Workload kernels for training runs (and machine-constant measurements).
    #[command(subcommand)]
    Microbench(microbench::MicrobenchCommand),
    /// List this node's power, energy and control sources (RAPL, NVML, AMD and Intel GPUs,
    /// ACPI power meters, hwmon sensors) and whether this user can read or set each.
    Devices(devices::DevicesArgs),
    /// Run the whole pipeline on a bundled default input.
    Quickstart(quickstart::QuickstartArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    #[command(
        after_help = "Examples:\n  powerperf completions bash > /etc/bash_completion.d/powerperf\n  powerperf completions zsh > ~/.zfunc/_powerperf"
    )]
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write man pages (powerperf.1 and one per subcommand) generated from these
    /// definitions.
    #[command(
        after_help = "Examples:\n  powerperf man -o /usr/local/share/man/man1\n  powerperf man -o man && man -l man/powerperf-collect.1"
    )]
    Man {
        /// Directory to write the pages into (created if missing).
        #[arg(short = 'o', long = "output", default_value = ".")]
        out: std::path::PathBuf,
    },
}

/// Parse arguments and run; returns the exit status.
///
/// # Errors
/// Whatever the subcommand reports; `main` prints the chain.
pub fn run() -> anyhow::Result<i32> {
    let cli = Cli::parse();
    let quiet = cli.quiet || matches!(&cli.command, Command::Collect(a) if a.quiet);
    init_logging(cli.verbose, quiet);
    tracing::debug!(command = ?std::env::args().collect::<Vec<_>>(), "powerperf {}", env!("CARGO_PKG_VERSION"));
    let code = dispatch(cli)?;
    out_flush()?;
    Ok(code)
}

fn dispatch(cli: Cli) -> anyhow::Result<i32> {
    match cli.command {
        Command::Devices(a) => devices::run(a),
        Command::Collect(a) => collect::run(a),
        Command::Report(a) => report::run(a),
        Command::Events(a) => events::run(a),
        Command::Export(a) => export::run(a),
        Command::Import(a) => import::run(a),
        Command::Datasets(a) => datasets::run(a),
        Command::Fit(a) => fit::run(a),
        Command::Predict(a) => predict::run(a),
        Command::Evaluate(a) => evaluate::run(a),
        Command::Plan(a) => plan::run(a),
        Command::Apply(a) => apply::run(a),
        Command::Sweep(a) => sweep::run(a),
        Command::Microbench(a) => microbench::run(a),
        Command::Quickstart(a) => quickstart::run(a),
        Command::Completions { shell } => {
            use clap::CommandFactory;
            clap_complete::generate(
                shell,
                &mut Cli::command(),
                "powerperf",
                &mut std::io::stdout(),
            );
            Ok(0)
        }
        Command::Man { out } => {
            use clap::CommandFactory;
            std::fs::create_dir_all(&out)?;
            clap_mangen::generate_to(Cli::command(), &out)?;
            eprintln!("wrote man pages into {}", out.display());
            Ok(0)
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn verbosity_flags_select_the_log_level() {
        use tracing::Level;
        assert_eq!(super::log_level(0, false), Level::WARN);
        assert_eq!(super::log_level(1, false), Level::INFO);
        assert_eq!(super::log_level(2, false), Level::DEBUG);
        assert_eq!(super::log_level(5, false), Level::TRACE);
        assert_eq!(super::log_level(0, true), Level::ERROR);
    }

    #[test]
    fn cli_definition_is_consistent() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
