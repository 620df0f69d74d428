//! `powerperf datasets`: the public measurement sets bundled in the binary (`datasets/` of
//! the repository, embedded compressed by build.rs; `store::bundled`): list them with their
//! sources and licences, or write them out.

use anyhow::Result;
use powerperf_core::store::bundled;
use std::path::PathBuf;

/// `powerperf datasets` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum DatasetsCommand {
    /// List the bundled sets: name (what `powerperf import NAME` takes), description, files,
    /// sizes, source and licence.
    #[command(
        after_help = "Examples:\n  powerperf datasets list\n  powerperf datasets list --format json\n  powerperf import titanx-micro -o titanx"
    )]
    List {
        /// Output format: table for people (`text` also works), json for scripts (one object
        /// on stdout).
        #[arg(long, default_value = "table")]
        format: powerperf_core::output::OutputFormat,
    },
    /// Write the bundled specs, data, licence files and README into DIR (created; existing
    /// files are never overwritten).
    #[command(
        after_help = "Examples:\n  powerperf datasets extract -o my-datasets\n  powerperf import my-datasets/titanx-micro.toml -o titanx"
    )]
    Extract {
        /// The directory to write (the specs at DIR/NAME.toml, the data below).
        #[arg(short, long, value_name = "DIR")]
        output: PathBuf,
    },
}

/// Run `powerperf datasets`.
///
/// # Errors
/// A file that cannot be written (or already exists, for `extract`).
pub fn run(cmd: DatasetsCommand) -> Result<i32> {
    match cmd {
        DatasetsCommand::List { format } => {
            format.check(
                "datasets list",
                &powerperf_core::output::OutputFormat::TABLE_JSON,
            )?;
            let sets = bundled::sets()?;
            if format == powerperf_core::output::OutputFormat::Json {
                let o = powerperf_core::output::commands::DatasetsOutput { sets };
                outln!("{}", powerperf_core::output::json_sorted(&o)?);
                return Ok(0);
            }
            for s in &sets {
                outln!("{}", s.name);
                outln!("  {}", s.description);
                outln!(
                    "  files: {} ({} kB, {} kB compressed in the binary)",
                    s.files
                        .iter()
                        .map(|f| f.strip_prefix(bundled::DATASETS).unwrap_or(f))
                        .collect::<Vec<_>>()
                        .join(", "),
                    s.bytes.div_ceil(1000),
                    s.compressed_bytes.div_ceil(1000)
                );
                outln!("  source: {}", s.source);
                outln!("  licence: {}", s.licence);
            }
            outln!(
                "\nThese data keep their own licences (datasets/README.md); powerperf's licence does not cover them.\nImport one by name: powerperf import {} -o SET",
                sets.first().map(|s| s.name.as_str()).unwrap_or("NAME")
            );
            Ok(0)
        }
        DatasetsCommand::Extract { output } => {
            let written = bundled::extract(bundled::DATASETS, &output)?;
            outln!(
                "wrote {} files into {} (specs: {}/<name>.toml; licences and provenance: README.md)",
                written.len(),
                output.display(),
                output.display()
            );
            Ok(0)
        }
    }
}
