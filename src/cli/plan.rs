//! `powerperf plan`: choose a setting per workload (or per region of one job) from a
//! model's predictions, write a plan file, print the choices with the predicted savings.

use anyhow::{Context, Result};
use powerperf_core::dvfs::guard::GuardSpec;
use powerperf_core::dvfs::planner::{PlannerConfig, Transition};
use powerperf_core::dvfs::{export, from_model, parse_slowdown};
use powerperf_node::plan_file::Objective;
use powerperf_node::plan_file::{DeviceKind, Plan, Scope};
use std::path::PathBuf;

use powerperf_core::output::OutputFormat as Format;

/// Arguments of `powerperf plan`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  powerperf plan --model titanx.json --workload DP --workload SP --objective energy --max-slowdown 5% -o plan.toml\n  powerperf plan --model titanx.json --objective edp --max-slowdown none -o plan.toml\n  powerperf plan --evaluate titanx --train core_freq_mhz=595,861,1164 --max-slowdown 5% --format json\n\nPlan file format: docs/plan-format.md; planner and evaluation: docs/dvfs.md."
)]
pub struct PlanArgs {
    /// The model file written by `powerperf fit`.
    #[arg(long, value_name = "MODEL", required_unless_present = "evaluate")]
    pub model: Option<PathBuf>,
    /// Judge plans on measured data instead: fit on the --train settings of this set, plan
    /// from the predictions, compare with the measured values (docs/dvfs.md).
    #[arg(long, value_name = "SET", conflicts_with_all = ["model", "output", "job", "srun", "geopm"])]
    pub evaluate: Option<PathBuf>,
    /// With --evaluate: the training settings, `KNOB=A,B,C` (e.g. core_freq_mhz=595,861,1164);
    /// repeat the flag (or join with `;`) for several knobs: their cross product trains.
    #[arg(long, value_name = "KNOB=A,B,C")]
    pub train: Vec<String>,
    /// With --evaluate: the training settings as a CSV whose header names knobs and whose rows
    /// are settings (a joint split, as `evaluate --train-points`).
    #[arg(long, value_name = "FILE", conflicts_with = "train")]
    pub train_points: Option<PathBuf>,
    /// With --evaluate: the model kind to fit.
    #[arg(long, default_value = "auto")]
    pub kind: powerperf_core::models::ModelKind,
    /// With --evaluate: fit parameters, a FitParams JSON object as `powerperf fit --params`
    /// takes (e.g. '{"analytic":{"calibration":"ratio"}}').
    #[arg(long, value_name = "JSON", requires = "evaluate")]
    pub params: Option<String>,
    /// With --evaluate: idle power (W) for the race-to-idle baseline.
    #[arg(long, value_name = "W", value_parser = positive_f64)]
    pub idle_power: Option<f64>,
    /// Workloads to plan (repeat the flag); default: every workload the model knows.
    #[arg(long = "workload", value_name = "NAME")]
    pub workloads: Vec<String>,
    /// What to minimise. With --power-cap and no --objective: time.
    #[arg(long, value_enum)]
    pub objective: Option<Objective>,
    /// Largest total slowdown against the maximum setting of every knob: `5%`, `0.05`, or
    /// `none` [default: 5%, or none with --power-cap].
    #[arg(long, value_name = "BOUND")]
    pub max_slowdown: Option<String>,
    /// The guard of the bound against prediction error (docs/dvfs.md). Default `risk`: a
    /// risk budget, at most --risk of the workloads expected above the bound, each
    /// setting's risk from the model's held-out slowdown errors at interior clock values
    /// (stored by `fit`; --evaluate measures them on its training points); a `--job` plan
    /// takes the errors' 1 − risk quantile off the bound. `risk-class`: one error
    /// distribution per class (compute-bound or not); `risk-near`: only the errors predicted
    /// within the bound, and one standard deviation of the count added (did not generalise,
    /// docs/dvfs.md). A number (`1%` or `0.01`) plans against the bound minus that margin;
    /// `0` gives the raw plan. `auto`: the held-out time MAPE as the margin. The plan file
    /// records the guard.
    #[arg(long, default_value = "risk", value_name = "MARGIN")]
    pub slowdown_margin: GuardSpec,
    /// With --evaluate: measure the guard's slowdown errors by K-fold cross-validation on
    /// the training points (what `fit --cv K` stores) instead of leave-one-out.
    #[arg(long = "cv", value_name = "K", requires = "evaluate", value_parser = clap::value_parser!(u32).range(2..))]
    pub cv: Option<u32>,
    /// With --evaluate: a workload-class holdout. Judge only the workloads whose name starts
    /// with one of these prefixes (comma-separated, e.g. `fadd_,sp_`); the guard's errors
    /// then come only from the other workloads.
    #[arg(
        long,
        value_name = "PREFIX,...",
        value_delimiter = ',',
        requires = "evaluate"
    )]
    pub judge_on: Vec<String>,
    /// With --slowdown-margin risk: the allowed expected share of workloads whose measured
    /// slowdown exceeds the bound (0.05: one in twenty).
    #[arg(long, default_value_t = powerperf_core::dvfs::guard::DEFAULT_RISK, value_name = "FRACTION", value_parser = non_negative_f64)]
    pub risk: f64,
    /// Settings whose predicted mean power is above this many watts are not chosen.
    #[arg(long, value_name = "W", value_parser = positive_f64)]
    pub power_cap: Option<f64>,
    /// Treat the workloads as consecutive regions of one job (bound on their total time,
    /// switch costs between neighbours) instead of independent workloads.
    #[arg(long)]
    pub job: bool,
    /// With --job: plan the outermost regions of this run directory (`powerperf collect -o
    /// RUN` of a program with region markers or NVTX ranges) in the order they first began,
    /// from a model fitted on `import RUN… --regions`; regions the model does not know keep
    /// the default setting (docs/dvfs.md, "Regions end to end").
    #[arg(
        long,
        value_name = "RUN",
        requires = "job",
        conflicts_with = "workloads"
    )]
    pub regions_from: Option<PathBuf>,
    /// Cost of one frequency switch between consecutive regions, seconds.
    #[arg(long, default_value_t = 0.0, value_name = "S", value_parser = non_negative_f64)]
    pub transition_latency: f64,
    /// Cost of one frequency switch between consecutive regions, joules.
    #[arg(long, default_value_t = 0.0, value_name = "J", value_parser = non_negative_f64)]
    pub transition_energy: f64,
    /// Regions shorter than this (seconds, at the maximum setting) fold into their parent;
    /// `inf` gives one static setting for the whole job.
    #[arg(long, default_value_t = 0.0, value_name = "S", value_parser = non_negative_f64)]
    pub min_region: f64,
    /// The device whose clocks the frequency knobs are [default: the device the set records
    /// for them (the import spec's `device`); required when the set does not say].
    #[arg(long, value_enum)]
    pub device: Option<DeviceKind>,
    /// Reference thread count for the slowdown (default: the largest).
    #[arg(long, value_name = "N")]
    pub reference_threads: Option<f64>,
    /// Write the plan here (TOML, docs/plan-format.md).
    #[arg(short = 'o', long = "output", value_name = "PLAN")]
    pub output: Option<PathBuf>,
    /// How to print the choices.
    #[arg(long, default_value = "table")]
    pub format: powerperf_core::output::OutputFormat,
    /// Also print `srun` arguments (`--cpu-freq` / `--gpu-freq`) for each workload's setting.
    #[arg(long)]
    pub srun: bool,
    /// Also print GEOPM `frequency_map` agent policies (JSON, Hz): one per workload, or one
    /// region map for a --job plan.
    #[arg(long)]
    pub geopm: bool,
}

/// A finite number ≥ 0 (a plan argument in seconds, joules or a fraction; issue 18).
fn non_negative_f64(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
        _ => Err(format!("`{s}` is not a finite number ≥ 0")),
    }
}

/// A finite number > 0 (a power in watts).
fn positive_f64(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        _ => Err(format!("`{s}` is not a finite number above 0")),
    }
}

/// Run `powerperf plan`.
///
/// # Errors
/// An unreadable model, a bad bound, an unknown workload, or a planner error.
pub fn run(args: PlanArgs) -> Result<i32> {
    if args.evaluate.is_some() {
        args.format.check("plan --evaluate", &Format::TABLE_JSON)?;
    }
    let bound_text = args.max_slowdown.clone().unwrap_or_else(|| {
        if args.power_cap.is_some() {
            "none".into()
        } else {
            "5%".into()
        }
    });
    let max_slowdown = parse_slowdown(&bound_text).context("--max-slowdown")?;
    let guard = args.slowdown_margin.with_risk(args.risk)?;
    let objective = args.objective.unwrap_or(if args.power_cap.is_some() {
        Objective::Time
    } else {
        Objective::Energy
    });
    let config = PlannerConfig {
        objective,
        max_slowdown,
        power_cap_w: args.power_cap,
        transition: Transition {
            latency_s: args.transition_latency,
            energy_j: args.transition_energy,
        },
        min_region_s: args.min_region,
        reference_threads: args.reference_threads,
        ticks: None,
    };
    if let Some(set_dir) = &args.evaluate {
        return run_evaluate(&args, set_dir, config, guard);
    }
    let model_path = args.model.clone().context("--model MODEL is required")?;
    let model = powerperf_core::models::load_model_file(&model_path)
        .with_context(|| format!("loading the model {}", model_path.display()))?;
    let guard = from_model::model_guard(&model, &model_path, max_slowdown, guard)?;
    let (device, device_index, note) = from_model::plan_device(&model, args.device, &model_path)?;
    if let Some(note) = note {
        eprintln!("powerperf: note: {note}");
    }
    let (workloads, unplanned_regions) = from_model::workloads_to_plan(
        &model,
        &model_path,
        args.regions_from.as_deref(),
        &args.workloads,
    )?;
    let req = from_model::PlanRequest {
        workloads,
        scope: if args.job {
            Scope::Job
        } else {
            Scope::PerWorkload
        },
        device,
        device_index,
        config,
        model_path: model_path.display().to_string(),
        guard,
        errors: model.slowdown_errors.clone(),
    };
    let mut out = from_model::plan_with_predictor(&model, &req)?;
    for r in unplanned_regions {
        out.skipped.push((
            r,
            "a region of the run that the model does not know: it runs at the default setting"
                .into(),
        ));
    }
    from_model::check_finite(&out.plan)?;
    if let Some(path) = &args.output {
        out.plan.write(path)?;
    }
    print_plan(&args, &out)?;
    Ok(0)
}

/// `plan --evaluate SET`: fit on the training settings, plan from the predictions and
/// judge the plans on the measured values; prints the report.
///
/// # Errors
/// An unreadable set, bad training settings or params, or an evaluation error.
fn run_evaluate(
    args: &PlanArgs,
    set_dir: &std::path::Path,
    config: PlannerConfig,
    guard: GuardSpec,
) -> Result<i32> {
    let set = powerperf_format::set::TrainingSet::read(set_dir)?;
    let split = match (&args.train_points, args.train.as_slice()) {
        (Some(file), _) => Some(powerperf_core::models::split::TrainSplit::read_settings(file)?),
        (None, []) => anyhow::bail!(
            "plan --evaluate needs the training settings: --train KNOB=A,B,C (e.g. core_freq_mhz=595,861,1164) or --train-points FILE"
        ),
        (None, [_]) if !args.train[0].contains(';') => None,
        (None, specs) => Some(powerperf_core::models::split::TrainSplit::Grid(
            crate::cli::evaluate::parse_train_grid(specs)?,
        )),
    };
    let (train_knob, train_values) = match &split {
        None => powerperf_core::dvfs::evaluate::parse_train(&args.train[0])?,
        // The guards' interior points run along the split's first knob.
        Some(s) => (s.knobs().first().cloned().unwrap_or_default(), Vec::new()),
    };
    if let Some(s) = &split {
        let means = powerperf_core::models::features::mean_points(&set);
        s.check(
            &means,
            &set.meta.knobs,
            if args.train_points.is_some() {
                "--train-points"
            } else {
                "--train"
            },
        )?;
    }
    let req = powerperf_core::dvfs::evaluate::EvalRequest {
        config,
        train_knob,
        train_values,
        split,
        kind: args.kind,
        params: crate::cli::fit::parse_params(args.params.as_deref())?,
        idle_power_w: args.idle_power,
        cv_folds: args.cv.map(|k| k as usize),
        judge_on: args.judge_on.clone(),
        guard,
    };
    let report = powerperf_core::dvfs::evaluate::evaluate(&set, &req)?;
    match args.format {
        Format::Table | Format::Csv | Format::Markdown => {
            out!("{}", powerperf_core::dvfs::evaluate::render(&report))
        }
        Format::Json => outln!("{}", serde_json::to_string_pretty(&report)?),
    }
    Ok(0)
}

/// Print a plan in `--format`, then its GEOPM policies (`--geopm`) and srun arguments
/// (`--srun`).
///
/// # Errors
/// A closed or full stdout, or a plan that cannot be exported.
fn print_plan(args: &PlanArgs, out: &from_model::PlanOutcome) -> Result<()> {
    match args.format {
        Format::Csv | Format::Markdown => {
            let table = powerperf_core::output::plan::plan_table(&out.plan);
            out!("{}", table.render(args.format).unwrap_or_default());
            for (w, why) in &out.skipped {
                eprintln!("skipped {w}: {why}");
            }
        }
        Format::Table => {
            out!("{}", render_table(&out.plan));
            for (w, why) in &out.skipped {
                outln!("skipped {w}: {why}");
            }
            if let Some(p) = &args.output {
                if p.as_os_str() != "-" {
                    outln!("plan written to {}", p.display());
                }
            }
        }
        Format::Json => {
            let v = powerperf_core::output::plan::PlanOutput {
                plan: out.plan.clone(),
                skipped: out
                    .skipped
                    .iter()
                    .map(|(w, why)| powerperf_core::output::plan::Skipped {
                        reason: why.clone(),
                        workload: w.clone(),
                    })
                    .collect(),
            };
            outln!("{}", v.to_json()?);
        }
    }
    if args.geopm {
        for (name, policy) in export::geopm_policies(&out.plan)? {
            outln!("{name}\t{}", serde_json::to_string(&policy)?);
        }
    }
    if args.srun {
        for r in &out.plan.regions {
            outln!("{}\t{}", r.name, export::srun_args(&out.plan, r)?);
        }
    }
    Ok(())
}

/// The plan as a text table: one row per region with setting, predicted time, slowdown,
/// energy and saving.
pub fn render_table(plan: &Plan) -> String {
    use std::fmt::Write;
    let bound = plan
        .plan
        .max_slowdown
        .map(|s| format!("{:.1}%", s * 100.0))
        .unwrap_or_else(|| "none".into());
    let mut s = format!(
        "objective {}, max slowdown {}, model {} ({})\n",
        plan.plan.objective.name(),
        bound,
        plan.plan.model,
        plan.plan.model_kind
    );
    match (plan.plan.guard.as_deref(), plan.plan.risk) {
        (Some(g), Some(r)) => {
            let _ = writeln!(
                s,
                "guard {g}: at most {:.1}% of workloads expected above the bound; expected {:.2}% (errors: {})",
                r * 100.0,
                plan.plan.expected_over_bound.unwrap_or(f64::NAN) * 100.0,
                plan.plan.guard_errors.as_deref().unwrap_or("?")
            );
        }
        (Some("margin"), None) => {
            let _ = writeln!(
                s,
                "guard margin: planned against the bound less {:.2}%",
                plan.plan.slowdown_margin * 100.0
            );
        }
        _ => {}
    }
    let w = plan
        .regions
        .iter()
        .map(|r| r.name.len())
        .max()
        .unwrap_or(8)
        .max(8);
    let _ = writeln!(
        s,
        "{:<w$}  {:<34}  {:>10}  {:>8}  {:>11}  {:>8}  {:>8}",
        "workload", "setting", "time_s", "slowdown", "energy_j", "saving", "power_w"
    );
    for r in &plan.regions {
        let setting = powerperf_core::dvfs::planner::format_knobs(&r.setting);
        let _ = writeln!(
            s,
            "{:<w$}  {:<34}  {:>10.4}  {:>7.2}%  {:>11.3}  {:>7.2}%  {:>8.2}",
            r.name,
            setting,
            r.time_s,
            r.slowdown * 100.0,
            r.energy_j,
            r.energy_saving * 100.0,
            r.power_w
        );
    }
    if let (Some(t), Some(e), Some(rt), Some(re)) = (
        plan.plan.time_s,
        plan.plan.energy_j,
        plan.plan.reference_time_s,
        plan.plan.reference_energy_j,
    ) {
        let _ = writeln!(
            s,
            "job: {t:.4} s ({:+.2}%), {e:.3} J (saving {:.2}%)",
            (t / rt - 1.0) * 100.0,
            (1.0 - e / re) * 100.0
        );
    } else {
        let e: f64 = plan.regions.iter().map(|r| r.energy_j).sum();
        let re: f64 = plan.regions.iter().map(|r| r.reference_energy_j).sum();
        let _ = writeln!(
            s,
            "all workloads: {e:.3} J against {re:.3} J at the maximum setting (saving {:.2}%)",
            (1.0 - e / re) * 100.0
        );
    }
    s
}
