//! `powerperf predict --model MODEL (--from RUN | --workload NAME) --knob K=A,B,… [--format]`.
//!
//! Predicts time, power and energy at every combination of the `--knob` values. Knobs not
//! given take the value of the run (`--from`) or else the workload's reference setting in the
//! model's training grid (the maximum of each knob), and a note on stderr says so.

use anyhow::Context;
use powerperf_core::models::{ModelFile, Predictor};
use powerperf_format::run::RunMeta;
use powerperf_node::plan_file::Knobs;
use std::collections::BTreeMap;
use std::path::PathBuf;

use powerperf_core::output::predict::{PredictOutput, PredictionRow};
use powerperf_core::output::OutputFormat as Format;
use powerperf_core::output::Table;

/// Arguments of `powerperf predict`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  powerperf predict --model titanx.json --workload DP --knob core_freq_mhz=595,861,1164\n  powerperf predict --from gpu-run --knob core_freq_mhz=1200,1500,1980      # from the run's GPU counters, no model\n  powerperf predict --model threads.json --workload mixed --knob threads=1,2,4,8 --format json\n  powerperf predict --model titanx.json --from run1 --knob core_freq_mhz=700,900\n  powerperf predict --from gpu-run --model gpu-model.json --knob core_freq_mhz=1200,1980   # time from the run's counters, power from the model"
)]
pub struct PredictArgs {
    /// Model file from `powerperf fit`. Without it, `--from RUN` of a run with GPU activity
    /// fractions (GPM, `collect` on Hopper or newer) predicts the time at other SM clocks
    /// (`--knob core_freq_mhz=…`) from those counters, per region and for the whole run
    /// (the bound-and-bottleneck form of analytic_counters; time only). With it, such a run
    /// (and only `--knob core_freq_mhz=…`) keeps the time from its counters and takes power
    /// from the model at each clock (energy = time × power); the output says which number
    /// comes from where.
    #[arg(long = "model", required_unless_present = "from")]
    pub model: Option<PathBuf>,
    /// A run directory: its program name is the workload (unless --workload is given) and its
    /// knobs fill the knobs not given with --knob.
    #[arg(long = "from", required_unless_present = "workload")]
    pub from: Option<PathBuf>,
    /// Workload name as in the training set.
    #[arg(long = "workload")]
    pub workload: Option<String>,
    /// Knob values, `NAME=V1,V2,…` (repeatable; all combinations are predicted), e.g.
    /// `core_freq_mhz=595,861,1164`.
    #[arg(long = "knob", required = true)]
    pub knob: Vec<String>,
    /// Output format: table, json (what `report --predictions` reads), or csv and markdown
    /// (one row per setting).
    #[arg(long, default_value = "table")]
    pub format: powerperf_core::output::OutputFormat,
}

/// Parse `NAME=V1,V2,…` (errors name `--knob`).
pub(crate) fn parse_knob(spec: &str) -> anyhow::Result<(String, Vec<f64>)> {
    parse_knob_flag(spec, "--knob")
}

/// Parse `NAME=V1,V2,…`; errors name `flag` (`--knob`, `--train`).
pub(crate) fn parse_knob_flag(spec: &str, flag: &str) -> anyhow::Result<(String, Vec<f64>)> {
    let (name, vals) = spec.split_once('=').with_context(|| {
        format!("{flag} `{spec}`: expected NAME=V1,V2,… (e.g. core_freq_mhz=595,861,1164)")
    })?;
    let name = name.trim();
    if name.is_empty() {
        anyhow::bail!("{flag} `{spec}`: empty knob name (e.g. core_freq_mhz=595)");
    }
    let mut out = Vec::new();
    for (i, v) in vals.split(',').enumerate() {
        let v = v.trim();
        let x: f64 = v.parse().map_err(|_| {
            anyhow::anyhow!(
                "{flag} `{spec}`: value {} `{v}` is not a number (e.g. {name}=595,861)",
                i + 1
            )
        })?;
        // Issue 18: 0, -5 and 1e300 MHz predicted NaN, -4099 s and inf.
        powerperf_core::store::import::check_value(
            powerperf_core::store::import::Dimension::of_knob(name),
            "knob",
            x,
        )
        .map_err(|why| anyhow::anyhow!("{flag} `{spec}`: value {} `{v}` {why}", i + 1))?;
        out.push(x);
    }
    Ok((name.to_string(), out))
}

/// All combinations of the knob lists.
pub(crate) fn combinations(lists: &[(String, Vec<f64>)]) -> Vec<Knobs> {
    let mut out = vec![Knobs::new()];
    for (name, vals) in lists {
        let mut next = Vec::new();
        for k in &out {
            for v in vals {
                let mut k = k.clone();
                k.insert(name.clone(), *v);
                next.push(k);
            }
        }
        out = next;
    }
    out
}

fn run_knobs(meta: &RunMeta) -> Knobs {
    let mut k = Knobs::new();
    if let Some(v) = meta.knobs.core_freq_mhz {
        k.insert("core_freq_mhz".into(), v);
    }
    if let Some(v) = meta.knobs.mem_freq_mhz {
        k.insert("mem_freq_mhz".into(), v);
    }
    if let Some(v) = meta.knobs.gpu_sm_clock_mhz {
        k.insert("gpu_sm_clock_mhz".into(), v);
    }
    if let Some(v) = meta.knobs.threads {
        k.insert("threads".into(), v as f64);
    }
    k
}

/// Knobs not given: from the run, else the workload's reference (max) in the training grid;
/// a note on stderr for each.
fn fill_knobs(model: &ModelFile, workload: &str, from_knobs: &Knobs, given: &[&String]) -> Knobs {
    let grid = model.knob_grid(workload);
    let mut reference: Knobs = BTreeMap::new();
    for k in &grid {
        for (n, v) in k {
            let e = reference.entry(n.clone()).or_insert(*v);
            if *v > *e {
                *e = *v;
            }
        }
    }
    let mut fill = Knobs::new();
    for (n, v) in &reference {
        if given.contains(&n) {
            continue;
        }
        let (val, src) = match from_knobs.get(n) {
            Some(r) => (*r, "the run"),
            None => (*v, "the reference (maximum) setting of the training grid"),
        };
        eprintln!("note: {n} = {val} (from {src})");
        fill.insert(n.clone(), val);
    }
    fill
}

/// The model's power for `predict --from RUN --model MODEL` of a run with GPU activity
/// fractions: its workload is `--workload`, else the run's command name, else the model's
/// only workload.
///
/// # Errors
/// A workload the model does not know (the names listed), an unreadable run.
fn power_model(
    args: &PredictArgs,
    dir: &std::path::Path,
    path: PathBuf,
    model: ModelFile,
) -> anyhow::Result<super::predict_counters::PowerModel> {
    let meta = RunMeta::read(dir).with_context(|| format!("reading run {}", dir.display()))?;
    let cmd = meta
        .run
        .command
        .first()
        .map(|c| c.rsplit('/').next().unwrap_or(c).to_string())
        .unwrap_or_default();
    let known = model.workloads();
    let (workload, from) = match &args.workload {
        Some(w) => (w.clone(), "(from --workload)".to_string()),
        None if known.contains(&cmd) => (cmd, "(the run's command)".to_string()),
        None if known.len() == 1 => (
            known[0].clone(),
            format!(
                "(the model's only workload; the run's command is `{cmd}`: name another with --workload)"
            ),
        ),
        None => anyhow::bail!(
            "model {} does not know the run's workload `{cmd}`; it knows: {} (fix: --workload NAME, the workload whose power to use)",
            path.display(),
            powerperf_core::models::name_list(&known)
        ),
    };
    if !known.contains(&workload) {
        anyhow::bail!(
            "model {} does not know workload `{workload}`; it knows: {} (fix: --workload NAME)",
            path.display(),
            powerperf_core::models::name_list(&known)
        );
    }
    let clock = powerperf_core::models::from_counters::CLOCK_KNOB.to_string();
    let fill = fill_knobs(&model, &workload, &run_knobs(&meta), &[&clock]);
    Ok(super::predict_counters::PowerModel {
        path,
        model,
        workload,
        fill,
        workload_from: from,
    })
}

/// Run `powerperf predict`.
pub fn run(args: PredictArgs) -> anyhow::Result<i32> {
    let Some(model_path) = args.model.clone() else {
        // clap: --from is given without --model
        let dir = args
            .from
            .clone()
            .context("--model MODEL or --from RUN is required")?;
        let lists: Vec<(String, Vec<f64>)> = args
            .knob
            .iter()
            .map(|s| parse_knob(s))
            .collect::<anyhow::Result<_>>()?;
        return super::predict_counters::run(&dir, &lists, args.format, None);
    };
    let model = ModelFile::read(&model_path)?;
    // a run with GPU activity fractions and only SM clocks asked: the time from the run's
    // counters, power and energy from the model (issue 39, item 3)
    if let Some(dir) = &args.from {
        let lists: Vec<(String, Vec<f64>)> = args
            .knob
            .iter()
            .map(|s| parse_knob(s))
            .collect::<anyhow::Result<_>>()?;
        if !lists.is_empty()
            && lists
                .iter()
                .all(|(k, _)| k == powerperf_core::models::from_counters::CLOCK_KNOB)
            && super::predict_counters::run_has_fractions(dir)
        {
            let pm = power_model(&args, dir, model_path, model)?;
            return super::predict_counters::run(dir, &lists, args.format, Some(&pm));
        }
    }
    let (workload, from_knobs) = match &args.from {
        Some(dir) => {
            let meta =
                RunMeta::read(dir).with_context(|| format!("reading run {}", dir.display()))?;
            let name = args.workload.clone().unwrap_or_else(|| {
                meta.run
                    .command
                    .first()
                    .map(|c| c.rsplit('/').next().unwrap_or(c).to_string())
                    .unwrap_or_default()
            });
            (name, run_knobs(&meta))
        }
        None => (
            args.workload
                .clone()
                .expect("clap requires --workload without --from"),
            Knobs::new(),
        ),
    };
    if !model.workloads().contains(&workload) {
        anyhow::bail!(
            "model {} does not know workload `{workload}`; it knows: {} (fix: --workload NAME)",
            model_path.display(),
            powerperf_core::models::name_list(&model.workloads())
        );
    }
    let lists: Vec<(String, Vec<f64>)> = args
        .knob
        .iter()
        .map(|s| parse_knob(s))
        .collect::<anyhow::Result<_>>()?;
    let given: Vec<&String> = lists.iter().map(|l| &l.0).collect();
    let fill = fill_knobs(&model, &workload, &from_knobs, &given);
    let settings: Vec<Knobs> = combinations(&lists)
        .into_iter()
        .map(|mut k| {
            k.extend(fill.iter().map(|(n, v)| (n.clone(), *v)));
            k
        })
        .collect();
    let rows = powerperf_core::models::predict_settings(&model, &model_path, &workload, settings)?;
    print_predictions(&args, &model, &model_path, &workload, &rows)?;
    Ok(0)
}

/// Print the predictions of `workload` in `--format`: JSON, a flat CSV or Markdown table,
/// or a text table with the model's held-out error.
///
/// # Errors
/// A closed or full stdout.
fn print_predictions(
    args: &PredictArgs,
    model: &ModelFile,
    model_path: &std::path::Path,
    workload: &str,
    rows: &[(Knobs, powerperf_core::models::Prediction)],
) -> anyhow::Result<()> {
    let err = model.held_out_error.as_ref();
    match args.format {
        Format::Json => {
            let out = PredictOutput {
                held_out_error: err.cloned(),
                kind: model.kind().to_string(),
                model: model_path.display().to_string(),
                notes: vec![],
                predictions: rows
                    .iter()
                    .map(|(k, p)| PredictionRow {
                        energy_j: p.energy_j,
                        knobs: k.clone(),
                        power_w: p.power_w,
                        time_s: p.time_s,
                        workload: workload.to_string(),
                    })
                    .collect(),
            };
            outln!("{}", out.to_json()?);
        }
        Format::Csv | Format::Markdown | Format::Table => {
            let knob_names: Vec<String> = rows
                .first()
                .map(|r| r.0.keys().cloned().collect())
                .unwrap_or_default();
            let f = |v: Option<f64>, d: usize| v.map_or(String::new(), |v| format!("{v:.d$}"));
            if args.format != Format::Table {
                // CSV or Markdown: one flat table (Table::render gives both).
                let mut header = vec!["workload".to_string()];
                header.extend(knob_names.iter().cloned());
                header.extend(["time_s", "power_w", "energy_j"].map(String::from));
                let cells = rows
                    .iter()
                    .map(|(k, p)| {
                        let mut cells = vec![workload.to_string()];
                        cells.extend(knob_names.iter().map(|n| k[n].to_string()));
                        cells.extend([f(p.time_s, 6), f(p.power_w, 4), f(p.energy_j, 4)]);
                        cells
                    })
                    .collect();
                let table = Table {
                    header,
                    rows: cells,
                };
                out!("{}", table.render(args.format).unwrap_or_default());
            } else {
                outln!(
                    "model {} ({}), workload {workload}",
                    model_path.display(),
                    model.kind()
                );
                let mut h = String::new();
                for n in &knob_names {
                    h += &format!("{n:>16} ");
                }
                outln!("{h}{:>12} {:>10} {:>12}", "time_s", "power_w", "energy_j");
                for (k, p) in rows {
                    let mut l = String::new();
                    for n in &knob_names {
                        l += &format!("{:>16} ", k[n]);
                    }
                    let g = |v: Option<f64>, d: usize| {
                        v.map_or("-".to_string(), |v| format!("{v:.d$}"))
                    };
                    outln!(
                        "{l}{:>12} {:>10} {:>12}",
                        g(p.time_s, 4),
                        g(p.power_w, 2),
                        g(p.energy_j, 2)
                    );
                }
                if let Some(e) = err {
                    let parts: Vec<String> = e
                        .targets
                        .iter()
                        .map(|(t, x)| format!("{t} {:.2} %", x.mape_pct))
                        .collect();
                    if parts.is_empty() {
                        outln!(
                            "held-out error ({}): none measurable (no point could be predicted with itself left out: too few training points)",
                            e.protocol
                        );
                    } else {
                        outln!("held-out error ({}): {}", e.protocol, parts.join(", "));
                    }
                } else {
                    outln!("held-out error: not measured (model fitted with --no-loo)");
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knob_specs_parse_and_combine() {
        let a = parse_knob("core_freq_mhz=595, 861").unwrap();
        assert_eq!(a, ("core_freq_mhz".to_string(), vec![595.0, 861.0]));
        let b = parse_knob("mem_freq_mhz=810").unwrap();
        assert_eq!(combinations(&[a, b]).len(), 2);
        let e = parse_knob("core_freq_mhz=5x").unwrap_err().to_string();
        assert!(e.contains("`5x`"), "{e}");
        assert!(parse_knob("core_freq_mhz").is_err());
    }
}
