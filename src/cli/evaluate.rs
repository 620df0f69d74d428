//! `powerperf evaluate SET --protocol knob-holdout|workload-holdout [--model KIND]
//! [--train K=A,B,…] [--baseline K=V,…] [-o points.csv] [--plot DIR|FILE.svg]
//! [--format table|json|csv|markdown]`.
//!
//! Held-out evaluation under docs/architecture.md's rules (see [`powerperf_core::models::eval`]). `points`
//! counts held-out (workload, knob values) means.

use super::fit::{error_table, parse_params};
use super::predict::{parse_knob, parse_knob_flag};
use anyhow::Context;
use powerperf_core::models::eval::{split_holdout, workload_holdout, Evaluation};
use powerperf_core::models::features::mean_points;
use powerperf_core::models::split::TrainSplit;
use powerperf_core::models::ModelKind;
use powerperf_core::output::csv_cell;
use powerperf_core::output::evaluate::EvaluateOutput;
use powerperf_core::output::OutputFormat as Format;
use powerperf_core::report::plots::{self, ImageFormat, ScatterPanel};
use powerperf_format::set::{SetMeta, TrainingSet, TARGETS};
use powerperf_node::plan_file::Knobs;
use std::io::Write;
use std::path::PathBuf;

/// Held-out protocols.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Protocol {
    /// Per workload, train on some values of one knob, predict the others.
    KnobHoldout,
    /// Leave one workload out; predict it from its baseline point and the other workloads.
    WorkloadHoldout,
}

/// Arguments of `powerperf evaluate`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  powerperf evaluate titanx --protocol knob-holdout --train core_freq_mhz=595,861,1164\n  powerperf evaluate titanx --protocol workload-holdout --baseline core_freq_mhz=1164,mem_freq_mhz=3505 --format json\n  powerperf evaluate v100 --protocol knob-holdout --train core_freq_mhz=510,945,1380 -o points.csv\n  powerperf evaluate titanx --protocol knob-holdout --train core_freq_mhz=595,861,1164 --plot plots/\n\nMeasured errors on the shared datasets: docs/models.md."
)]
pub struct EvaluateArgs {
    /// Training-set directory.
    pub set: PathBuf,
    #[arg(long, value_enum)]
    pub protocol: Protocol,
    /// Model kind (`auto`: in knob holdout `joint` where the training points vary two or more
    /// knobs and no one-knob curve reaches the held-out settings, `threads` for thread counts,
    /// else `analytic`; in workload holdout `scaling` choosing its transfer per target, or the
    /// `stack` on sets with DCGM activity fractions or with cycles and instructions counts on
    /// a clock sweep).
    #[arg(long = "model", default_value = "auto")]
    pub model: ModelKind,
    /// Knob holdout: training values of a knob, `NAME=A,B,…`; every point with one of them
    /// (at any value of the other knobs) trains, the rest are predicted. Repeat the flag (or
    /// join with `;`: `core_freq_mhz=595,1164;mem_freq_mhz=810`) for several knobs: the
    /// points in the cross product of the lists train. Default: the first knob with two or
    /// more values, its lowest, middle and highest value (with three values, the lowest and
    /// highest: the middle one is predicted).
    #[arg(long)]
    pub train: Vec<String>,
    /// Knob holdout over any subset of the settings (a joint split): a CSV whose header names
    /// knobs and whose rows are the training settings, e.g. `threads,core_freq_mhz` then
    /// `1,1000`, `1,1400`, `1,1800`, `2,1000`; every other point is predicted.
    #[arg(long, value_name = "FILE", conflicts_with = "train")]
    pub train_points: Option<PathBuf>,
    /// Workload holdout: the baseline setting, `NAME=V[,NAME2=V2]` or repeated; default: the
    /// maximum of every knob.
    #[arg(long)]
    pub baseline: Vec<String>,
    /// Write one row per held-out point: workload, knobs, measured and predicted targets.
    #[arg(short = 'o', long = "output")]
    pub output: Option<PathBuf>,
    /// Output format: table, json, or csv and markdown (one row per target: target,
    /// mape_pct, max_pct, n).
    #[arg(long, default_value = "table")]
    pub format: powerperf_core::output::OutputFormat,
    /// Model parameters as a JSON object (see `powerperf fit --params`).
    #[arg(long)]
    pub params: Option<String>,
    /// Plot predicted against measured per target (time, power, energy) with the y = x line:
    /// `FILE.svg` or `FILE.png` writes that file; any other path is a directory (created if
    /// missing) that gets `predicted_vs_measured.<--plot-format>`. Targets the set marks
    /// unreliable for a workload are left out, as in the error table.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Image format of --plot when it names a directory.
    #[arg(long, default_value = "svg")]
    pub plot_format: ImageFormat,
    /// Instead of a held-out protocol, print the IN-SAMPLE noise floor: a polynomial of this
    /// degree in the clock knob (`--train`'s knob, else the first knob with two or more
    /// values) fitted per workload to ALL its points, and the error of that fit at those
    /// points (nothing held out).
    #[arg(long, value_name = "DEGREE")]
    pub noise_floor: Option<usize>,
}

fn parse_baseline(specs: &[String]) -> anyhow::Result<Knobs> {
    let mut k = Knobs::new();
    for spec in specs {
        for part in spec.split(',').filter(|p| !p.trim().is_empty()) {
            let (n, v) = parse_knob(part).with_context(|| {
                format!("--baseline `{spec}` (expected NAME=V, e.g. core_freq_mhz=1380)")
            })?;
            if v.len() != 1 {
                anyhow::bail!("--baseline `{spec}`: one value per knob");
            }
            k.insert(n, v[0]);
        }
    }
    Ok(k)
}

/// `--train` values: `NAME=A,B,…`, repeated or joined with `;` (one list per knob).
pub(crate) fn parse_train_grid(specs: &[String]) -> anyhow::Result<Vec<(String, Vec<f64>)>> {
    let mut lists: Vec<(String, Vec<f64>)> = Vec::new();
    for spec in specs {
        for part in spec.split(';').filter(|p| !p.trim().is_empty()) {
            let (k, v) = parse_knob_flag(part.trim(), "--train")?;
            if lists.iter().any(|(n, _)| *n == k) {
                anyhow::bail!(
                    "--train names knob `{k}` twice (fix: one list per knob, e.g. --train {k}=A,B)"
                );
            }
            lists.push((k, v));
        }
    }
    if lists.is_empty() {
        anyhow::bail!("--train is empty (fix: --train NAME=A,B, e.g. core_freq_mhz=595,861,1164)");
    }
    Ok(lists)
}

fn write_points(path: &PathBuf, ev: &Evaluation) -> anyhow::Result<()> {
    let knob_names: std::collections::BTreeSet<&String> =
        ev.results.iter().flat_map(|r| r.knobs.keys()).collect();
    let mut out = String::new();
    let mut header = vec!["workload".to_string()];
    header.extend(knob_names.iter().map(|s| s.to_string()));
    for t in TARGETS {
        header.push(format!("measured_{t}"));
        header.push(format!("predicted_{t}"));
    }
    out += &header.join(",");
    out += "\n";
    let f = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v}"));
    for r in &ev.results {
        let mut cells = vec![csv_cell(&r.workload)];
        cells.extend(
            knob_names
                .iter()
                .map(|n| r.knobs.get(*n).map_or(String::new(), |v| v.to_string())),
        );
        for t in TARGETS {
            cells.push(f(r.measured.target(t)));
            cells.push(f(r.predicted.target(t)));
        }
        out += &cells.join(",");
        out += "\n";
    }
    let mut file =
        std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    file.write_all(out.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

/// Draw predicted against measured for `ev` (the plot of `report --evaluate CSV`) into
/// `path`: a `.svg`/`.png` file, else a directory. Returns the file written.
fn write_plot(
    path: &std::path::Path,
    format: ImageFormat,
    meta: &SetMeta,
    ev: &Evaluation,
) -> anyhow::Result<PathBuf> {
    let panels: Vec<ScatterPanel> = TARGETS
        .iter()
        .map(|t| ScatterPanel {
            target: t.to_string(),
            points: ev
                .results
                .iter()
                .filter(|r| meta.is_reliable(t, &r.workload))
                .filter_map(|r| {
                    let (m, p) = (r.measured.target(t)?, r.predicted.target(t)?);
                    (m.is_finite() && p.is_finite()).then(|| (r.workload.clone(), m, p))
                })
                .collect(),
        })
        .collect();
    let plot = plots::predicted_vs_measured_plot(
        // The protocol's name without its details ("knob holdout: train on …"): the title
        // must fit the plot's width.
        format!(
            "Predicted against measured, {}, model {}",
            ev.summary.protocol.split(':').next().unwrap_or_default(),
            ev.kind.name()
        ),
        panels,
    );
    let is_file = path
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("svg") || e.eq_ignore_ascii_case("png"));
    if is_file {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
        }
        plot.plot.write(path, ImageFormat::from_path(path)?)?;
        Ok(path.to_path_buf())
    } else {
        Ok(plots::write_all(&[plot], path, format)?.remove(0))
    }
}

/// `--noise-floor`: the in-sample floor of every target (see [`powerperf_core::models::noise`]).
fn print_noise_floor(
    args: &EvaluateArgs,
    set: &TrainingSet,
    points: &[powerperf_format::set::Point],
    degree: usize,
) -> anyhow::Result<i32> {
    let knob = match args.train.first() {
        Some(s) => parse_knob_flag(s, "--train")?.0,
        // The knob the knob holdout would hold out by default, else the set's first.
        None => match powerperf_core::models::split::default_train(set) {
            Some((k, _)) => k,
            None => set
                .meta
                .knobs
                .first()
                .cloned()
                .context("the set has no knobs")?,
        },
    };
    args.format
        .check("evaluate --noise-floor", &Format::TABLE_JSON)?;
    let floors = powerperf_core::models::noise::noise_floor(&set.meta, points, &knob, degree);
    if args.format == Format::Json {
        outln!("{}", serde_json::to_string_pretty(&floors)?);
        return Ok(0);
    }
    outln!("IN-SAMPLE noise floor (not a held-out error): degree-{degree} polynomial in {knob} fitted per workload to all its points");
    for f in &floors {
        let worst: Vec<String> = f
            .groups
            .iter()
            .take(3)
            .map(|(g, e)| format!("{g} {e:.2} %"))
            .collect();
        outln!(
            "  {:<9} MAPE {:.2} %, median {:.2} % over {} points; worst: {}",
            f.target,
            f.mape_pct,
            f.median_pct,
            f.n,
            worst.join(", ")
        );
    }
    Ok(0)
}

/// The held-out points the model refused, on stderr: the count, then each point with its
/// reason (the first 20; all of them in `--format json`'s `refused`).
fn report_failures(ev: &Evaluation) {
    const SHOWN: usize = 20;
    eprintln!(
        "{} of {} held-out point(s) could not be predicted by {}:",
        ev.failures.len(),
        ev.held_out_points,
        ev.kind.name()
    );
    for (point, why) in ev.failures.iter().take(SHOWN) {
        eprintln!("  {point}: {why}");
    }
    if ev.failures.len() > SHOWN {
        eprintln!(
            "  … and {} more (every point and reason: --format json, key `refused`)",
            ev.failures.len() - SHOWN
        );
    }
}

/// Run `powerperf evaluate`.
pub fn run(args: EvaluateArgs) -> anyhow::Result<i32> {
    let set = TrainingSet::read(&args.set)?;
    let params = parse_params(args.params.as_deref())?;
    let points = mean_points(&set);
    if points.is_empty() {
        anyhow::bail!("set {} has no points", args.set.display());
    }
    if let Some(degree) = args.noise_floor {
        return print_noise_floor(&args, &set, &points, degree);
    }
    let ev = match args.protocol {
        Protocol::KnobHoldout => {
            let split = knob_holdout_split(&args, &set, &points)?;
            split_holdout(args.model, &set.meta, &points, &split, &params)
        }
        Protocol::WorkloadHoldout => {
            let mut base = parse_baseline(&args.baseline)?;
            if base.is_empty() {
                base = powerperf_core::models::split::max_setting(&set);
                eprintln!(
                    "note: --baseline {} (the maximum of every knob)",
                    powerperf_core::models::features::knob_key(&base)
                );
            }
            workload_holdout(args.model, &set.meta, &points, &base, &params)
        }
    };
    if let Some(path) = &args.output {
        write_points(path, &ev)?;
    }
    if let Some(path) = &args.plot {
        let written = write_plot(path, args.plot_format, &set.meta, &ev)?;
        eprintln!("wrote {}", written.display());
    }
    print_evaluation(&args, &set, &ev)?;
    if !ev.failures.is_empty() {
        report_failures(&ev);
    }
    if ev.results.is_empty() {
        anyhow::bail!(
            "no held-out point could be predicted (first reason: {})",
            ev.failures
                .first()
                .map_or("none held out", |f| f.1.as_str())
        );
    }
    Ok(0)
}

/// The knob holdout's split: `--train-points`, `--train`, or (neither) the set's default
/// ([`powerperf_core::models::split::default_train`], announced on stderr); checked against the set.
///
/// # Errors
/// An unreadable or bad split, no knob that varies, or a split that leaves no point to
/// predict.
fn knob_holdout_split(
    args: &EvaluateArgs,
    set: &TrainingSet,
    points: &[powerperf_format::set::Point],
) -> anyhow::Result<TrainSplit> {
    let split = match (&args.train_points, args.train.is_empty()) {
        (Some(file), _) => TrainSplit::read_settings(file)?,
        (None, false) => TrainSplit::Grid(parse_train_grid(&args.train)?),
        (None, true) => {
            let (knob, v) = powerperf_core::models::split::default_train(set).with_context(|| {
                format!(
                    "set {} has no knob with two or more values, so no knob can be held out (fix: pass --train NAME=A,B, or use --protocol workload-holdout)",
                    args.set.display()
                )
            })?;
            let list: Vec<String> = v.iter().map(f64::to_string).collect();
            let which = if v.len() == 3 {
                "lowest, middle, highest"
            } else {
                "lowest and highest; the values between are predicted"
            };
            eprintln!("note: --train {knob}={} ({which})", list.join(","));
            TrainSplit::Grid(vec![(knob, v)])
        }
    };
    let flag = if args.train_points.is_some() {
        "--train-points"
    } else {
        "--train"
    };
    split.check(points, &set.meta.knobs, flag)?;
    if points.iter().all(|p| split.is_train(p)) {
        anyhow::bail!(
            "{flag}: every point of the set trains, none is left to predict (fix: train on fewer values)"
        );
    }
    Ok(split)
}

/// Print the evaluation in `--format`.
///
/// # Errors
/// A closed or full stdout.
fn print_evaluation(args: &EvaluateArgs, set: &TrainingSet, ev: &Evaluation) -> anyhow::Result<()> {
    match args.format {
        Format::Json => {
            outln!("{}", EvaluateOutput::new(ev, &set.meta).to_json()?);
        }
        Format::Csv | Format::Markdown => {
            // One row per target with a measured error.
            let table = powerperf_core::output::evaluate::error_table_versus(
                &ev.summary.targets,
                &ev.versus(&set.meta),
            );
            out!("{}", table.render(args.format).unwrap_or_default());
        }
        Format::Table => {
            outln!(
                "{} — model {} — {} held-out points",
                ev.summary.protocol,
                ev.kind.name(),
                ev.summary.points
            );
            let skipped: Vec<&str> = TARGETS
                .iter()
                .copied()
                .filter(|t| set.meta.unreliable.iter().any(|u| u.target == *t))
                .collect();
            out!("{}", error_table(&ev.summary.targets, &skipped));
            for u in &set.meta.unreliable {
                outln!(
                    "  {} not scored for {}: {}",
                    u.target,
                    u.workloads.join(", "),
                    u.reason
                );
            }
            out!(
                "{}",
                powerperf_core::output::evaluate::versus_text(
                    &ev.baseline.rule,
                    &ev.versus(&set.meta)
                )
            );
        }
    }
    Ok(())
}
