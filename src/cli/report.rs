//! `powerperf report`: the text, JSON, CSV or Markdown summary of a run; its plots
//! (`--plot DIR`); a self-contained HTML report (`--html FILE`); plots of model outputs
//! (`--evaluate CSV`, `--predictions JSON [--plan PLAN]`).

use anyhow::Context;
use powerperf_core::output::OutputFormat as Format;
use powerperf_core::report::plots::{self, ImageFormat, NamedPlot};
use powerperf_format::run::RunMeta;
use std::path::PathBuf;

/// Arguments of `powerperf report`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  powerperf report run1
  powerperf report run1 --format json | jq .events
  powerperf report run1 --html run1.html
  powerperf report run1 --plot plots/ --plot-format png
  powerperf report --evaluate points.csv --plot plots/
  powerperf report --predictions pred.json --plan plan.toml --plot plots/

--plot writes timeline_power, timeline_clocks, timeline_cpus, timeline_rates (regions shaded)
and lcpi for a run, predicted_vs_measured for --evaluate, pareto (pareto_<workload> for several workloads)
for --predictions; each plot that has data. See docs/report.md.")]
pub struct ReportArgs {
    /// A run directory written by `powerperf collect`, or a directory of per-rank run
    /// directories (`collect -o JOB/rank%r` under srun/mpirun): then min, mean, max and
    /// imbalance over ranks of every event and region, and the node energy summed per node
    /// (sampled by local rank 0 of each node) and over nodes; a shard that cannot be read is
    /// named and left out, and the status is 1 (optional with --evaluate or --predictions).
    #[arg(required_unless_present_any = ["evaluate", "predictions"])]
    pub run: Option<PathBuf>,
    /// Output format of the text report (default: table; with --html or --plot it is printed
    /// only when given).
    #[arg(long)]
    pub format: Option<Format>,
    /// Also print the LCPI table (PerfExpert's six categories, upper bounds in cycles per
    /// instruction) of the whole run and of each region; a category whose events the run
    /// lacks is shown as not computable, with the missing events.
    #[arg(long, requires = "run")]
    pub lcpi: bool,
    /// Machine constants for --lcpi: a machine-constants TOML or a PerfExpert
    /// machine.properties (default: the shipped file for the run's CPU, if any).
    #[arg(long, requires = "lcpi")]
    pub constants: Option<PathBuf>,
    /// Write a self-contained HTML report of RUN (tables, inline SVG plots) to FILE (`-`:
    /// stdout).
    #[arg(long, value_name = "FILE", requires = "run")]
    pub html: Option<PathBuf>,
    /// Write plots into DIR (created if missing), one file per plot.
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
    /// Image format of --plot.
    #[arg(long, default_value = "svg")]
    pub plot_format: ImageFormat,
    /// Plot predicted against measured from the CSV of `powerperf evaluate -o FILE`.
    #[arg(long, value_name = "CSV")]
    pub evaluate: Option<PathBuf>,
    /// Plot the time–energy Pareto front from `powerperf predict --format json` output.
    #[arg(long, value_name = "JSON")]
    pub predictions: Option<PathBuf>,
    /// Mark this plan's choice (`powerperf plan -o PLAN.toml`) on the Pareto plot.
    #[arg(long, value_name = "PLAN", requires = "predictions")]
    pub plan: Option<PathBuf>,
}

/// Run `powerperf report`.
///
/// # Errors
/// A directory that is not a run; unreadable inputs; plots or HTML that cannot be written.
pub fn run(args: ReportArgs) -> anyhow::Result<i32> {
    if let Some(dir) = args
        .run
        .as_deref()
        .filter(|d| !powerperf_core::report::ranks::shards(d).is_empty())
    {
        // A directory of per-rank shards (collect -o JOB/rank%r under srun/mpirun).
        let format = args.format.unwrap_or_default();
        format.check(
            "report (of a directory of per-rank runs)",
            &[Format::Table, Format::Json],
        )?;
        let r = powerperf_core::report::ranks::rank_report(dir)?;
        match args.format {
            Some(Format::Json) => outln!("{}", serde_json::to_string_pretty(&r)?),
            _ => out!("{}", powerperf_core::report::ranks::render_text(&r)),
        }
        // The others are reported; the broken shards are named, and the status says so
        // (as grep's 2 after a file it could not read).
        for u in &r.unreadable {
            eprintln!("powerperf report: left out {}: {}", u.shard, u.error);
        }
        return Ok(if r.unreadable.is_empty() { 0 } else { 1 });
    }
    if (args.evaluate.is_some() || args.predictions.is_some())
        && args.plot.is_none()
        && args.html.is_none()
    {
        anyhow::bail!(
            "--evaluate and --predictions make plots: give --plot DIR (or --html FILE with a RUN)"
        );
    }
    let mut model_plots: Vec<NamedPlot> = Vec::new();
    if let Some(csv) = &args.evaluate {
        model_plots.push(plots::predicted_vs_measured(csv)?);
    }
    if let Some(json) = &args.predictions {
        model_plots.extend(plots::pareto_plots(json, args.plan.as_deref())?);
    }
    let mut written = Vec::new();
    if let Some(dir) = &args.run {
        let meta = RunMeta::read(dir)?;
        let mut s = powerperf_core::report::summarize(&meta);
        s.regions = powerperf_core::collect::attribution::read_regions(dir)?.unwrap_or_default();
        s.gpu_activity = powerperf_core::report::gpu::load(dir)?;
        s.pc_samples = powerperf_core::report::pc::load(dir, &meta)?;
        let quiet = args.html.is_some() || args.plot.is_some();
        if let Some(f) = args.format.or((!quiet).then_some(Format::Table)) {
            out!("{}", powerperf_core::report::render_summary(&s, f)?);
        }
        if args.lcpi {
            out!(
                "{}",
                lcpi_report(dir, args.constants.as_deref(), &s.regions)?
            );
        }
        if args.html.is_some() || args.plot.is_some() {
            let lcpi = plots::lcpi_tables(&meta, &s.regions);
            let mut run_plots = plots::timeline_plots(dir, &meta)?;
            run_plots.extend(plots::gpu_streams_plot(dir, &meta)?);
            run_plots.extend(plots::lcpi_plot(&lcpi));
            if let Some(out) = &args.plot {
                written.extend(plots::write_all(&run_plots, out, args.plot_format)?);
            }
            if let Some(out) = &args.html {
                run_plots.extend(model_plots.iter().cloned());
                let html = powerperf_core::report::html::render(&s, &meta, &run_plots, &lcpi)?;
                if out.as_os_str() == "-" {
                    out!("{html}");
                } else {
                    std::fs::write(out, html)
                        .with_context(|| format!("cannot write {}", out.display()))?;
                    written.push(out.clone());
                }
            }
        }
    }
    if let Some(out) = &args.plot {
        written.extend(plots::write_all(&model_plots, out, args.plot_format)?);
    }
    for p in written {
        eprintln!("wrote {}", p.display());
    }
    Ok(0)
}

/// The LCPI tables of the run and of each region (summed over threads), as text.
fn lcpi_report(
    run: &std::path::Path,
    constants: Option<&std::path::Path>,
    regions: &[powerperf_core::collect::attribution::RegionRecord],
) -> anyhow::Result<String> {
    use std::fmt::Write;
    let values = crate::cli::events::ValueArgs {
        values: None,
        values_file: None,
        constants: constants.map(PathBuf::from),
    };
    let (r, notes) = crate::cli::events::resolver(Some(run), &values)?;
    let mut o = String::new();
    for n in &notes {
        let _ = writeln!(o, "note: {n}");
    }
    for (name, table) in plots::lcpi_tables_with(&r, regions) {
        match name.as_str() {
            "whole run" => {
                let _ = writeln!(o, "\nWhole run:");
            }
            path => {
                let _ = writeln!(o, "\nRegion {path}:");
            }
        }
        let _ = write!(o, "{table}");
    }
    Ok(o)
}
