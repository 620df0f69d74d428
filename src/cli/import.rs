//! `powerperf import`: a training set from tabular data through a spec, or from run
//! directories written by `powerperf collect`. See `docs/import.md`.

use anyhow::{bail, Result};
use powerperf_core::store::import::{import, ImportSpec};
use powerperf_format::run::RUN_TOML;
use powerperf_format::set::{from_runs_labelled, TrainingSet};
use std::path::PathBuf;

/// Arguments of `powerperf import`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  powerperf import datasets/titanx-micro.toml -o titanx\n  powerperf import titanx-micro -o titanx          # a set bundled in the binary, by name (`powerperf datasets`)\n  powerperf import datasets/v100-dcgm-sweep.toml --file /data/spec_21apps.csv -o v100\n  powerperf import run1 run2 run3 -o my-set        # runs written by powerperf collect\n  powerperf import run1 run2 --regions -o by-region  # one point per outermost region of each run\n\nSpecs name their data files, looked for in POWERPERF_DATA_DIR, then beside the spec (the bundled copy), then in shared/datasets above; --file replaces them (docs/import.md)."
)]
pub struct ImportArgs {
    /// An import spec (TOML, e.g. datasets/titanx-micro.toml), the name of a set bundled in
    /// the binary (e.g. titanx-micro; `powerperf datasets` lists them), or run directories
    /// written by `powerperf collect` (each holds a run.toml).
    #[arg(value_name = "SPEC|RUN", required_unless_present = "runs")]
    pub inputs: Vec<PathBuf>,
    /// The training set directory to write (set.toml + points.parquet).
    #[arg(short, long, value_name = "SET")]
    pub output: PathBuf,
    /// Read this file (or glob) instead of the one the spec names.
    #[arg(long, value_name = "PATH")]
    pub file: Option<PathBuf>,
    /// Run directories to import (e.g. `--runs runs/*`).
    #[arg(long, value_name = "RUN", num_args = 1..)]
    pub runs: Vec<PathBuf>,
    /// Workload label for imported runs (default: the base name of each run's command).
    #[arg(long, value_name = "NAME")]
    pub workload: Option<String>,
    /// With run directories: one point per outermost region of each run (workload = the
    /// region's name; its time, package energy and power) instead of one per run, for
    /// `plan --job --regions-from RUN` (docs/import.md).
    #[arg(long, conflicts_with = "workload")]
    pub regions: bool,
    /// Also write one run directory per point under DIR (timeline specs only), as `collect`
    /// writes them: `report DIR/<run> --lcpi` then works on the dataset.
    #[arg(long, value_name = "DIR")]
    pub as_runs: Option<PathBuf>,
    /// Derived counters: evaluate every definition of this file (PAPI, perf JSON, LIKWID,
    /// PerfExpert, infix; docs/events.md) on every point and add each as a counter (a model
    /// feature).
    #[arg(long, value_name = "FILE")]
    pub derive: Option<PathBuf>,
    /// Format of the --derive file (default: found from its name and content).
    #[arg(long, requires = "derive", value_parser = super::events::syntax_parser())]
    pub syntax: Option<powerperf_events::Syntax>,
    /// Machine constants for --derive: a machine-constants TOML or a PerfExpert
    /// machine.properties (default: the shipped file for the spec's [machine], if any).
    #[arg(long, requires = "derive", value_name = "FILE")]
    pub constants: Option<PathBuf>,
    /// Output format: table for people (`text` also works), json for scripts (one object on
    /// stdout).
    #[arg(long, default_value = "table")]
    pub format: powerperf_core::output::OutputFormat,
}

/// What the inputs are.
enum Inputs {
    Spec(PathBuf),
    Runs(Vec<PathBuf>),
}

/// The inputs, and for a set bundled in the binary (named instead of a spec file) the private
/// temporary copy of the bundled datasets its spec is read from.
fn classify(args: &ImportArgs) -> Result<(Inputs, Option<tempfile::TempDir>)> {
    let mut runs: Vec<PathBuf> = args.runs.clone();
    let mut spec = None;
    let mut bundled = None;
    for p in &args.inputs {
        if !p.exists() && p.components().count() == 1 {
            let name = p.to_string_lossy();
            if powerperf_core::store::bundled::set(&name)?.is_some() {
                if spec.is_some() || bundled.is_some() {
                    bail!("give one import spec at a time ({name} is a second one)");
                }
                bundled = Some(name.trim_end_matches(".toml").to_string());
                continue;
            }
        }
        if p.is_dir() {
            if !p.join(RUN_TOML).is_file() {
                bail!("{} is a directory without a {RUN_TOML}: not a run directory written by `powerperf collect`", p.display());
            }
            runs.push(p.clone());
        } else if p.is_file() {
            if spec.is_some() || bundled.is_some() {
                bail!(
                    "give one import spec at a time ({} is a second one)",
                    p.display()
                );
            }
            spec = Some(p.clone());
        } else {
            let names: Vec<String> = powerperf_core::store::bundled::sets()?
                .into_iter()
                .map(|s| s.name)
                .collect();
            bail!(
                "{} does not exist (expected an import spec file, a run directory, or the name of a bundled set: {})",
                p.display(),
                names.join(", ")
            );
        }
    }
    for r in &args.runs {
        if !r.join(RUN_TOML).is_file() {
            bail!(
                "{} has no {RUN_TOML}: not a run directory written by `powerperf collect`",
                r.display()
            );
        }
    }
    if let Some(name) = bundled {
        if !runs.is_empty() {
            bail!("give either an import spec or run directories, not both");
        }
        let dir = powerperf_core::store::bundled::materialise_datasets()?;
        let spec = dir.path().join(format!("{name}.toml"));
        return Ok((Inputs::Spec(spec), Some(dir)));
    }
    match (spec, runs.is_empty()) {
        (Some(s), true) => Ok((Inputs::Spec(s), None)),
        (None, false) => Ok((Inputs::Runs(runs), None)),
        (Some(_), false) => bail!("give either an import spec or run directories, not both"),
        (None, true) => bail!("nothing to import: give an import spec or run directories"),
    }
}

fn range(v: &[f64]) -> String {
    match (v.first(), v.last()) {
        (Some(a), Some(b)) if v.len() > 1 => format!("{} values {a}..{b}", v.len()),
        (Some(a), _) => format!("{a}"),
        _ => "none".into(),
    }
}

/// A few lines describing a set, for the terminal.
pub fn summary(set: &TrainingSet) -> Vec<String> {
    let mut lines = vec![format!(
        "{} points, {} workloads",
        set.points.len(),
        set.workloads().len()
    )];
    let knobs: Vec<String> = set
        .meta
        .knobs
        .iter()
        .map(|k| format!("{k} {}", range(&set.knob_values(k))))
        .collect();
    lines.push(format!("knobs: {}", knobs.join("; ")));
    lines.push(format!(
        "targets: {}; counters: {}; static features: {}",
        set.meta.targets.join(", "),
        set.meta.counters.len(),
        set.meta.static_features.len()
    ));
    for u in &set.meta.unreliable {
        let w = if u.workloads.len() > 6 {
            format!("{} workloads", u.workloads.len())
        } else {
            u.workloads.join(", ")
        };
        lines.push(format!("unreliable: {} for {w}: {}", u.target, u.reason));
    }
    lines
}

/// Run `powerperf import`.
///
/// # Errors
/// A spec or run that cannot be read (see [`powerperf_core::store::import::import`] and
/// [`from_runs_labelled`]); a set that cannot be written.
pub fn run(args: ImportArgs) -> Result<i32> {
    args.format
        .check("import", &powerperf_core::output::OutputFormat::TABLE_JSON)?;
    let mut runs_written = Vec::new();
    let mut source_names = std::collections::BTreeMap::new();
    let mut machine = None;
    // A bundled set is read from a private temporary copy of the bundled datasets, removed
    // when `bundled` drops; the files are shown as `bundled:<path>`.
    let (inputs, bundled) = classify(&args)?;
    let (mut set, files, mut notes) = match inputs {
        Inputs::Spec(spec_path) => {
            if args.regions {
                bail!("--regions reads the regions of run directories; an import spec has none");
            }
            if args.workload.is_some() {
                bail!(
                    "--workload labels run directories; an import spec names its workload column"
                );
            }
            let spec = ImportSpec::load(&spec_path)?;
            let imp = import(&spec, args.file.as_deref())?;
            if let Some(dir) = &args.as_runs {
                runs_written = powerperf_core::store::import::write_runs(&spec, &imp, dir)?;
            }
            for c in &spec.counters {
                if let Some(n) = &c.name {
                    source_names.insert(c.column.clone(), n.clone());
                }
            }
            machine = spec.machine.clone();
            (imp.set, imp.files, imp.notes)
        }
        Inputs::Runs(dirs) => {
            if args.file.is_some() {
                bail!("--file replaces an import spec's data file; it does not apply to run directories");
            }
            if args.as_runs.is_some() {
                bail!(
                    "--as-runs writes run directories from an import spec; these already are runs"
                );
            }
            let (set, notes) = if args.regions {
                powerperf_format::set_regions::from_runs_by_region(&dirs)?
            } else {
                from_runs_labelled(&dirs, args.workload.as_deref())?
            };
            (set, dirs, notes)
        }
    };
    if let Some(file) = &args.derive {
        notes.extend(powerperf_core::store::derive::derive_file(
            &mut set,
            file,
            args.syntax,
            args.constants.as_deref(),
            machine.as_ref(),
            &source_names,
        )?);
    }
    set.write(&args.output)?;
    if let Some(dir) = &bundled {
        let tmp = format!("{}/", dir.path().display());
        let shown = format!("bundled:{}", powerperf_core::store::bundled::DATASETS);
        for n in &mut notes {
            *n = n.replace(&tmp, &shown);
        }
    }
    let files: Vec<PathBuf> = match &bundled {
        Some(dir) => files
            .iter()
            .map(|f| match f.strip_prefix(dir.path()) {
                Ok(rel) => PathBuf::from(format!(
                    "bundled:{}{}",
                    powerperf_core::store::bundled::DATASETS,
                    rel.display()
                )),
                Err(_) => f.clone(),
            })
            .collect(),
        None => files,
    };
    print_import(&args, &set, &files, &notes, &runs_written)?;
    Ok(0)
}

/// Print what `import` did: with `--format json` one JSON object; else, for people, the inputs (three, and how many more), the set's
/// summary, the notes, and what was written.
///
/// # Errors
/// A closed or full stdout.
fn print_import(
    args: &ImportArgs,
    set: &powerperf_format::set::TrainingSet,
    files: &[PathBuf],
    notes: &[String],
    runs_written: &[PathBuf],
) -> Result<()> {
    if args.format == powerperf_core::output::OutputFormat::Json {
        let out = powerperf_core::output::commands::ImportOutput {
            set: args.output.clone(),
            source: set.meta.source.clone(),
            files: files.to_vec(),
            points: set.points.len(),
            workloads: set.workloads().into_iter().map(|w| w.to_string()).collect(),
            knobs: set.meta.knobs.clone(),
            targets: set.meta.targets.clone(),
            counters: set.meta.counters.keys().cloned().collect(),
            static_features: set.meta.static_features.clone(),
            runs: runs_written.to_vec(),
            notes: notes.to_vec(),
        };
        outln!("{}", powerperf_core::output::json_sorted(&out)?);
        return Ok(());
    }
    let shown: Vec<String> = files
        .iter()
        .take(3)
        .map(|f| f.display().to_string())
        .collect();
    let more = if files.len() > 3 {
        format!(" and {} more", files.len() - 3)
    } else {
        String::new()
    };
    outln!(
        "imported {} from {}{more}",
        set.meta.source,
        shown.join(", ")
    );
    for l in summary(set) {
        outln!("  {l}");
    }
    for n in notes {
        outln!("  note: {n}");
    }
    outln!("wrote {} (set.toml, points.parquet)", args.output.display());
    if let Some(dir) = &args.as_runs {
        outln!(
            "wrote {} run directories under {} (e.g. `powerperf report {} --lcpi`)",
            runs_written.len(),
            dir.display(),
            runs_written
                .first()
                .map(|d| d.display().to_string())
                .unwrap_or_default()
        );
    }
    Ok(())
}
