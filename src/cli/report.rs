//! `powerperf report`.

use crate::report::Format;
use crate::store::run::RunMeta;
use std::path::PathBuf;

/// Arguments of `powerperf report`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  powerperf report run1\n  powerperf report run1 --format json | jq .events"
)]
pub struct ReportArgs {
    /// A run directory written by `powerperf collect`, or a directory of per-rank run
    /// directories (`collect -o JOB/rank%r` under srun/mpirun): then min, mean, max and
    /// imbalance over ranks of every event and region.
    pub run: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
    /// Also print the LCPI table (PerfExpert's six categories, upper bounds in cycles per
    /// instruction) of the whole run and of each region; a category whose events the run
    /// lacks is shown as not computable, with the missing events.
    #[arg(long)]
    pub lcpi: bool,
    /// Machine constants for --lcpi: a machine-constants TOML or a PerfExpert
    /// machine.properties (default: the shipped file for the run's CPU, if any).
    #[arg(long, requires = "lcpi")]
    pub constants: Option<PathBuf>,
}

/// Run `powerperf report`.
///
/// # Errors
/// A directory that is not a run.
pub fn run(args: ReportArgs) -> anyhow::Result<i32> {
    if !crate::report::ranks::shards(&args.run).is_empty() {
        // A directory of per-rank shards (collect -o JOB/rank%r under srun/mpirun).
        let r = crate::report::ranks::rank_report(&args.run)?;
        match args.format {
            Format::Json => println!("{}", serde_json::to_string_pretty(&r)?),
            _ => print!("{}", crate::report::ranks::render_text(&r)),
        }
        return Ok(0);
    }
    let meta = RunMeta::read(&args.run)?;
    let mut s = crate::report::summarize(&meta);
    s.regions = crate::collect::attribution::read_regions(&args.run)?.unwrap_or_default();
    print!("{}", crate::report::render_summary(&s, args.format)?);
    if args.lcpi {
        print!("{}", lcpi_report(&args, &s.regions)?);
    }
    Ok(0)
}

/// The LCPI tables of the run and of each region (summed over threads), as text.
fn lcpi_report(
    args: &ReportArgs,
    regions: &[crate::collect::attribution::RegionRecord],
) -> anyhow::Result<String> {
    use crate::events_dsl::lcpi;
    use std::collections::BTreeMap;
    use std::fmt::Write;
    let values = crate::cli::events::ValueArgs {
        values: None,
        values_file: None,
        constants: args.constants.clone(),
    };
    let (r, notes) = crate::cli::events::resolver(Some(&args.run), &values)?;
    let mut o = String::new();
    for n in &notes {
        let _ = writeln!(o, "note: {n}");
    }
    let _ = writeln!(o, "\nWhole run:");
    let _ = write!(o, "{}", lcpi::table(&|n: &str| r.get(n)));
    // Per region path: counters summed over threads; the run's constants and missing list.
    let mut by_path: BTreeMap<&str, (u64, BTreeMap<String, f64>)> = BTreeMap::new();
    for reg in regions {
        let e = by_path.entry(reg.path.as_str()).or_default();
        e.0 += reg.incl_ns;
        for (k, v) in &reg.values {
            *e.1.entry(k.clone()).or_default() += v;
        }
    }
    for (path, (incl_ns, vals)) in by_path {
        let mut rr = r.clone();
        rr.values = vals;
        rr.duration_s = Some(incl_ns as f64 * 1e-9);
        let _ = writeln!(o, "\nRegion {path}:");
        let _ = write!(o, "{}", lcpi::table(&|n: &str| rr.get(n)));
    }
    Ok(o)
}
