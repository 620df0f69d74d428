//! `powerperf fit SET -o MODEL.json [--model KIND] [--explain]`.
//!
//! Fits a model on the set's mean points, measures leave-one-out error (each (workload, knobs)
//! mean predicted from all other points, the model refitted every time; see
//! [`powerperf_core::models::eval`]), prints it, and writes `MODEL.json` ([`ModelFile`]).

use anyhow::Context;
use powerperf_core::models::features::mean_points;
use powerperf_core::models::scoring::TargetError;
use powerperf_core::models::{fit_kind, FitParams, ModelFile, ModelKind};
use powerperf_format::set::{TrainingSet, TARGETS};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Arguments of `powerperf fit`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  powerperf fit titanx -o titanx.json\n  powerperf fit titanx --model spca --explain -o titanx-spca.json\n  powerperf fit mixed-threads --model threads -o threads.json --no-loo\n  powerperf fit v100 --model scaling --cv 10 -o v100-scaling.json\n\nThe leave-one-out (or --cv K cross-validation) error is printed for time, power and energy (targets the set marks unreliable are skipped)."
)]
pub struct FitArgs {
    /// Training-set directory (`set.toml` + `points.parquet`, from `powerperf import`).
    pub set: PathBuf,
    /// Where to write the model (JSON).
    #[arg(short = 'o', long = "output")]
    pub output: PathBuf,
    /// Model kind; `auto` picks `joint` where the points vary two or more knobs and no
    /// one-knob curve reaches the other settings (a cross design), `threads` for
    /// thread-count sets, else `analytic`.
    #[arg(long = "model", default_value = "auto")]
    pub model: ModelKind,
    /// Print what was fitted: parameters per workload, and for `spca`/`linear` the counters
    /// kept at each selection step and why.
    #[arg(long)]
    pub explain: bool,
    /// Skip the leave-one-out error (faster; the model file then has no held-out error).
    #[arg(long)]
    pub no_loo: bool,
    /// K-fold cross-validation instead of leave-one-out: K refits instead of one per
    /// point (each workload's points dealt round-robin over the K folds). For large sets and slow models, e.g.
    /// `--model scaling` on the V100 sweep (2457 points). Without it, sets over 1,000 points
    /// get 10 folds, with a note (`--cv N` with N the points asks for leave-one-out).
    #[arg(long = "cv", value_name = "K", conflicts_with = "no_loo", value_parser = clap::value_parser!(u32).range(2..))]
    pub cv: Option<u32>,
    /// `json`: print one object (model file, kind, points, leave-one-out error) on stdout;
    /// the human lines go to stderr.
    #[arg(long, default_value = "table")]
    pub format: powerperf_core::output::OutputFormat,
    /// Model parameters as a JSON object (`FitParams`), e.g.
    /// `{"regression":{"spca":{"rho_min":0.5}}}`.
    #[arg(long)]
    pub params: Option<String>,
}

/// Format an error table (targets as rows).
pub(crate) fn error_table(targets: &BTreeMap<String, TargetError>, skipped: &[&str]) -> String {
    let mut s = format!(
        "{:<10} {:>9} {:>9} {:>7}\n",
        "target", "MAPE_%", "max_%", "points"
    );
    for t in TARGETS {
        if let Some(e) = targets.get(t) {
            s += &format!(
                "{:<10} {:>9.3} {:>9.2} {:>7}\n",
                t, e.mape_pct, e.max_pct, e.n
            );
        } else if skipped.contains(&t) {
            s += &format!("{t:<10} {:>9}\n", "skipped");
        }
    }
    s
}

/// Above this projected held-out cost `fit` says what it will cost before it starts: the
/// progress bar is hidden where stderr is not a terminal (a batch job's log), and a
/// leave-one-out over thousands of points of a slow model (the stack on the Titan X grid,
/// 4,480 refits of about 4 s) otherwise looks like a hang.
const HELD_OUT_NOTE_AFTER: std::time::Duration = std::time::Duration::from_secs(60);

/// The note on the held-out error's cost: `refits` refits at about `fit` each (the fit of
/// the whole set just made, an upper bound since each refit has fewer points), spread over
/// the evaluation's worker threads; `None` below [`HELD_OUT_NOTE_AFTER`]. For
/// leave-one-out it names the cheaper options.
fn held_out_cost_note(
    what: &str,
    refits: usize,
    fit: std::time::Duration,
    leave_one_out: bool,
) -> Option<String> {
    let threads = powerperf_core::models::scoring::worker_threads(refits);
    let cost = |n: usize| fit.mul_f64(n.div_ceil(threads) as f64);
    let total = cost(refits);
    if total < HELD_OUT_NOTE_AFTER {
        return None;
    }
    let mut note = format!(
        "note: the {what} error refits the model {refits} times; fitting the whole set took {:.1} s, so expect about {} on {threads} thread(s)",
        fit.as_secs_f64(),
        indicatif::HumanDuration(total)
    );
    if leave_one_out {
        note += &format!(
            " (fix: `--cv 10` refits 10 times, about {}; `--no-loo` skips the held-out error)",
            indicatif::HumanDuration(cost(10.min(refits)))
        );
    }
    Some(note)
}

/// Above this many points `fit` measures 10-fold cross-validation instead of leave-one-out
/// by default, and says so (issue 41: leave-one-out on the 4,480-point Titan X grid refits the
/// whole model 4,480 times, 26 minutes on a 2-core machine; 10 folds take seconds there).
pub(crate) const LOO_MAX_POINTS: usize = 1000;

/// The folds `fit` measures: `--cv K` (leave-one-out where K is at least the points), else
/// leave-one-out (`None`) up to [`LOO_MAX_POINTS`] points and 10 folds above, with the note
/// that says why and how to get leave-one-out.
fn default_folds(cv: Option<u32>, points: usize) -> (Option<usize>, Option<String>) {
    if let Some(k) = cv {
        return (Some(k as usize).filter(|&k| k < points), None);
    }
    if points > LOO_MAX_POINTS {
        let note = format!(
            "note: {points} points: leave-one-out would refit the model {points} times, so the held-out error is 10-fold cross-validation (the default over {LOO_MAX_POINTS} points; fix: `--cv {points}` for leave-one-out)"
        );
        return (Some(10), Some(note));
    }
    (None, None)
}

/// Parse `--params`.
pub(crate) fn parse_params(text: Option<&str>) -> anyhow::Result<FitParams> {
    match text {
        None => Ok(FitParams::default()),
        Some(t) => serde_json::from_str(t).with_context(|| {
            format!("--params `{t}` is not a FitParams JSON object (fix: e.g. --params '{{\"analytic\":{{\"power_exponent\":3}}}}')")
        }),
    }
}

/// What fit's held-out evaluation gives: the error summary, the slowdown errors for plan's
/// guard (or why there are none), and the baseline rule with the model's error against it.
type HeldOut = (
    Option<powerperf_core::models::HeldOutError>,
    Result<powerperf_core::models::slowdown_errors::SlowdownErrors, String>,
    Option<(
        String,
        BTreeMap<String, powerperf_core::models::baseline::Versus>,
    )>,
);

/// Run `powerperf fit`.
pub fn run(args: FitArgs) -> anyhow::Result<i32> {
    // csv and markdown: the held-out error table on stdout, the human lines on stderr.
    let json = args.format != powerperf_core::output::OutputFormat::Table;
    // With --format json the human lines go to stderr and stdout carries one JSON object.
    // Lines for stdout wait until the model file is written: a closed stdout must not cost
    // the model (issue 18).
    let stdout_lines = std::cell::RefCell::new(Vec::<String>::new());
    let say = |line: String| {
        if json {
            eprintln!("{line}");
        } else {
            stdout_lines.borrow_mut().push(line);
        }
    };
    let set = TrainingSet::read(&args.set)?;
    warn_off_setting(&args.set);
    let params = parse_params(args.params.as_deref())?;
    let points = mean_points(&set);
    if points.is_empty() {
        anyhow::bail!(
            "set {} has no points (fix: import data into it with `powerperf import`)",
            args.set.display()
        );
    }
    let kind = args.model.resolve(&points, false);
    tracing::info!(requested = ?args.model, resolved = kind.name(), points = points.len(), "model kind");
    let t0 = std::time::Instant::now();
    let fitted = fit_kind(kind, &set.meta, &points, &params)
        .with_context(|| format!("fitting `{}` on {}", kind.name(), args.set.display()))?;
    tracing::debug!(elapsed_s = t0.elapsed().as_secs_f64(), "fitted");
    say(format!(
        "fitted {} on {} ({} workloads, {} points = means over repeats)",
        fitted.kind(),
        args.set.display(),
        set.workloads().len(),
        points.len()
    ));
    let (held_out_error, slowdown_errors, versus) = if args.no_loo {
        (None, Err("fitted with --no-loo".to_string()), None)
    } else {
        held_out(&args, &set, &points, kind, &params, t0.elapsed(), &say)
    };
    if args.explain {
        say(format!("\n{}", fitted.explain()));
    }
    let file = ModelFile::of_fit(
        &set,
        &args.set,
        &points,
        fitted,
        held_out_error,
        slowdown_errors,
    );
    file.write(&args.output)?;
    say(format!("wrote {}", args.output.display()));
    for line in stdout_lines.take() {
        outln!("{line}");
    }
    if matches!(
        args.format,
        powerperf_core::output::OutputFormat::Csv | powerperf_core::output::OutputFormat::Markdown
    ) {
        let targets = file
            .held_out_error
            .as_ref()
            .map(|h| h.targets.clone())
            .unwrap_or_default();
        let table = powerperf_core::output::evaluate::error_table(&targets);
        out!("{}", table.render(args.format).unwrap_or_default());
    } else if json {
        let (baseline_rule, versus_baseline) = versus.unzip();
        let out = powerperf_core::output::fit::FitOutput {
            baseline_rule,
            held_out_error: file.held_out_error,
            kind: file.kind,
            model: args.output.display().to_string(),
            points: points.len(),
            set: file.set_path,
            versus_baseline,
            workloads: set.workloads().len(),
        };
        outln!("{}", out.to_json()?);
    }
    Ok(0)
}

/// Fit's held-out evaluation (leave-one-out, or K-fold where [`default_folds`] says), with
/// a progress bar on a terminal: prints the error table, the unscored targets, the points
/// that could not be predicted, the slowdown errors for plan's guard
/// ([`powerperf_core::dvfs::guard::fit_slowdown_errors`]) and the error against the baseline rule.
/// `fit_took` is the first fit's time, for the cost note.
fn held_out(
    args: &FitArgs,
    set: &TrainingSet,
    points: &[powerperf_format::set::Point],
    kind: ModelKind,
    params: &FitParams,
    fit_took: std::time::Duration,
    say: &dyn Fn(String),
) -> HeldOut {
    let (folds, note) = default_folds(args.cv, points.len());
    if let Some(note) = note {
        eprintln!("{note}");
    }
    let what = match folds {
        Some(k) => format!("{k}-fold CV"),
        None => "leave-one-out".to_string(),
    };
    let refits = folds.unwrap_or(points.len());
    if let Some(note) = held_out_cost_note(&what, refits, fit_took, folds.is_none()) {
        eprintln!("{note}");
    }
    // A progress bar on a terminal (hidden when stderr is not one, e.g. in a pipe).
    let pb = indicatif::ProgressBar::new(points.len() as u64);
    pb.set_style(
        indicatif::ProgressStyle::with_template(&format!(
            "{what} {{bar:30}} {{pos}}/{{len}} refits, {{elapsed}} elapsed, about {{eta}} left"
        ))
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let t0 = std::time::Instant::now();
    let ev = powerperf_core::models::eval::cross_validate_progress(
        kind, &set.meta, points, params, folds, &pb,
    );
    tracing::debug!(
        elapsed_s = t0.elapsed().as_secs_f64(),
        what,
        "held-out error"
    );
    match folds {
        Some(k) => say(format!("{k}-fold cross-validation error (each workload's points dealt round-robin over the folds; each (workload, knobs) mean predicted by a model refitted without its fold):")),
        None => say("leave-one-out error (each (workload, knobs) mean predicted from all other points; model refitted each time):".into()),
    }
    let skipped: Vec<&str> = TARGETS
        .iter()
        .copied()
        .filter(|t| set.meta.unreliable.iter().any(|u| u.target == *t))
        .collect();
    say(error_table(&ev.summary.targets, &skipped)
        .trim_end()
        .to_string());
    for u in &set.meta.unreliable {
        say(format!(
            "  {} not scored for {}: {}",
            u.target,
            u.workloads.join(", "),
            u.reason
        ));
    }
    if !ev.failures.is_empty() {
        say(format!(
            "  {} of {} point(s) could not be predicted when left out, e.g. {}: {}",
            ev.failures.len(),
            ev.held_out_points,
            ev.failures[0].0,
            ev.failures[0].1
        ));
    }
    // What `plan`'s guard needs (issue 20, item 1): the held-out slowdown errors at the
    // interior values of a clock knob, from the same refits.
    let slowdown_errors = powerperf_core::dvfs::guard::fit_slowdown_errors(
        &set.meta,
        points,
        &ev.results,
        params.analytic.calibration_tolerance,
        folds,
    );
    if let Ok(e) = &slowdown_errors {
        let v = e.pooled();
        let q = |x: f64| v[((x * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
        say(format!(
            "slowdown errors for plan's guard: {} {} predictions at interior values of {}: median {:+.2}%, 95th percentile {:+.2}%",
            e.len(),
            e.protocol,
            e.knob,
            q(0.5) * 100.0,
            q(0.95) * 100.0
        ));
    }
    let v = ev.versus(&set.meta);
    say(
        powerperf_core::output::evaluate::versus_text(&ev.baseline.rule, &v)
            .trim_end()
            .to_string(),
    );
    (
        Some(ev.summary),
        slowdown_errors,
        Some((ev.baseline.rule.clone(), v)),
    )
}

/// Name the points of a GPU sweep that are not at their requested setting (issue 39: the
/// 2 % rule, `[[off_setting]]` of `SET/sweep.toml`): they stay in the fit, never silently.
fn warn_off_setting(set: &std::path::Path) {
    let p = set.join("sweep.toml");
    let Ok(text) = powerperf_node::safe_file::read_to_string_bounded(
        &p,
        powerperf_core::dvfs::sweep::MAX_SWEEP_RECORD_BYTES,
        "sweep record",
    ) else {
        return;
    };
    let Ok(rec) = toml::from_str::<powerperf_core::dvfs::sweep::SweepRecord>(&text) else {
        return;
    };
    if rec.off_setting.is_empty() {
        return;
    }
    eprintln!(
        "powerperf fit: warning: {} point(s) of {} are not at their requested GPU setting (observed clock more than {} % off, or not observed); they are fitted as recorded, at the requested setting:",
        rec.off_setting.len(),
        set.display(),
        powerperf_core::dvfs::sweep_gpu::MAX_CLOCK_OFF * 100.0
    );
    for o in &rec.off_setting {
        eprintln!("  {}: {}", o.run, o.flag);
    }
}

#[cfg(test)]
mod tests {
    use super::{default_folds, held_out_cost_note, LOO_MAX_POINTS};
    use std::time::Duration;

    #[test]
    fn large_sets_default_to_ten_folds_with_a_note() {
        // Up to 1,000 points leave-one-out; above, 10 folds, announced with the fix.
        assert_eq!(default_folds(None, LOO_MAX_POINTS), (None, None));
        let (k, note) = default_folds(None, 4480);
        assert_eq!(k, Some(10));
        let note = note.expect("the switch to 10 folds is announced");
        assert!(
            note.contains("10-fold") && note.contains("`--cv 4480`"),
            "{note}"
        );
        // --cv is the user's: K folds, or leave-one-out where K reaches the points.
        assert_eq!(default_folds(Some(5), 4480), (Some(5), None));
        assert_eq!(default_folds(Some(4480), 4480), (None, None));
        assert_eq!(default_folds(Some(10), 5), (None, None));
    }

    #[test]
    fn a_long_leave_one_out_is_announced_with_its_cost_and_the_cheaper_options() {
        let threads = powerperf_core::models::scoring::worker_threads(4480);
        let note = held_out_cost_note("leave-one-out", 4480, Duration::from_secs(4), true)
            .expect("4,480 refits of 4 s are announced");
        assert!(note.contains("refits the model 4480 times"), "{note}");
        assert!(note.contains("whole set took 4.0 s"), "{note}");
        assert!(note.contains(&format!("on {threads} thread(s)")), "{note}");
        assert!(
            note.contains("`--cv 10`") && note.contains("`--no-loo`"),
            "{note}"
        );
        // k-fold: the cost, without the advice to use what is already used.
        let cv = held_out_cost_note("10-fold CV", 10, Duration::from_secs(600), false)
            .expect("10 refits of 10 min are announced");
        assert!(
            cv.contains("refits the model 10 times") && !cv.contains("--cv"),
            "{cv}"
        );
    }

    #[test]
    fn a_short_held_out_error_says_nothing() {
        assert_eq!(
            held_out_cost_note("leave-one-out", 48, Duration::from_millis(2), true),
            None
        );
        assert_eq!(
            held_out_cost_note("leave-one-out", 0, Duration::from_secs(3600), true),
            None
        );
    }
}
