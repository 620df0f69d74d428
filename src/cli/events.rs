//! `powerperf events`: check and evaluate derived-event definitions (PAPI user events,
//! `papi_events.csv`, PerfExpert, LIKWID, perf metric JSON, infix) on a run or on values.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use powerperf_core::output::OutputFormat as OutFormat;
use powerperf_events::alias::{candidates, Resolution, Resolver};
use powerperf_events::{constants, lcpi, load_file, DefinitionSet, LoadOptions, Syntax};
use powerperf_format::run::RunMeta;

/// What `events eval --per` evaluates over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Per {
    /// Every timeline sample (`timeline.parquet`); durations are the samples' lengths.
    Sample,
    /// Every region and thread (`regions.parquet`); durations are inclusive times.
    Region,
}

/// `--syntax NAME` (of `events` and `import --derive`): one of [`Syntax::NAMES`], listed in
/// the help and checked by clap.
pub(crate) fn syntax_parser() -> impl clap::builder::TypedValueParser<Value = Syntax> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(Syntax::NAMES).try_map(|s| s.parse::<Syntax>())
}

/// The definitions file and how to read it.
#[derive(Debug, Clone, clap::Args)]
pub struct FileArgs {
    /// Definition file. Without it, the file named by PAPI_USER_EVENTS_FILE is read.
    pub file: Option<PathBuf>,
    /// Format of FILE (default: found from its name and content).
    #[arg(long, value_parser = syntax_parser())]
    pub syntax: Option<Syntax>,
    /// papi_events.csv: the `CPU,<pmu>` section to use (e.g. skx, icl, amd64_fam17h).
    #[arg(long)]
    pub cpu: Option<String>,
}

/// Where values come from.
#[derive(Debug, Clone, clap::Args)]
pub struct ValueArgs {
    /// Values as NAME=NUMBER,NAME=NUMBER,… (use --values-file for names with `,` or `=`).
    #[arg(long)]
    pub values: Option<String>,
    /// A JSON object {"NAME": number, …}.
    #[arg(long)]
    pub values_file: Option<PathBuf>,
    /// Machine constants: a machine-constants TOML or a PerfExpert machine.properties
    /// (default: the shipped file for the run's CPU vendor/family/model, if any).
    #[arg(long)]
    pub constants: Option<PathBuf>,
}

/// `powerperf events` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum EventsCommand {
    /// Evaluate every definition of FILE on a run's totals or on given values.
    #[command(
        after_help = "Examples:\n  powerperf events eval my_events.txt run1\n  powerperf events eval papi_events.csv --cpu skx --values PAPI_TOT_INS=1e9,PAPI_TOT_CYC=2e9 --format json\n  powerperf events eval events/lcpi/papi.txt run1 --constants machine-constants/amd-opteron-8358.toml"
    )]
    Eval {
        #[command(flatten)]
        file: FileArgs,
        /// Run directory written by `powerperf collect`.
        #[arg(long = "run", value_name = "RUN")]
        run_flag: Option<PathBuf>,
        /// Run directory (positional form of --run).
        #[arg(value_name = "RUN")]
        run: Option<PathBuf>,
        #[command(flatten)]
        values: ValueArgs,
        #[arg(long, default_value = "table")]
        format: powerperf_core::output::OutputFormat,
        /// Evaluate over RUN's timeline (one value per sample) or its regions (one per region
        /// and thread) instead of its totals, with the vectorised evaluator.
        #[arg(long, value_enum)]
        per: Option<Per>,
        /// With --per: write the derived columns as Parquet (`t_ns`/`dur_ns` or
        /// `pid`/`tid`/`path`, then one f64 column per definition), usable as model features.
        #[arg(short = 'o', long = "output", requires = "per")]
        output: Option<PathBuf>,
    },
    /// List each definition with its RPN form, the events and constants it needs, and how
    /// they resolve (through the alias table; against RUN's events with --run).
    #[command(
        after_help = "Examples:\n  powerperf events check my_events.txt\n  powerperf events check /usr/share/likwid/perfgroups/skylakex/FLOPS_DP.txt --run run1"
    )]
    Check {
        #[command(flatten)]
        file: FileArgs,
        /// Check the events against this run's columns.
        #[arg(long)]
        run: Option<PathBuf>,
        /// Machine constants file (see `events eval`).
        #[arg(long)]
        constants: Option<PathBuf>,
        /// Filesystem root for the sysfs PMU lookup (a fixture tree in tests).
        #[arg(long, default_value = "/")]
        sysfs_root: PathBuf,
    },
    /// The events this machine offers, as `perf list`: perf's generic hardware and software
    /// events (each opened once on powerperf itself to see whether it counts here) and the
    /// named events of every PMU in sysfs, with their scale and unit; in a build with
    /// `--features papi` also PAPI's presets (each tried on powerperf itself).
    #[command(
        after_help = "Examples:\n  powerperf events list\n  powerperf events list --format json | jq '.[] | select(.available)'"
    )]
    List {
        /// Filesystem root for sysfs reads (a fixture tree in tests).
        #[arg(long, default_value = "/")]
        sysfs_root: PathBuf,
        #[arg(long, default_value = "table")]
        format: powerperf_core::output::OutputFormat,
    },
    /// The LCPI table (PerfExpert's six categories) of a run or of given values.
    #[command(
        after_help = "Examples:\n  powerperf events lcpi run1\n  powerperf events lcpi --values PAPI_TOT_INS=1e9,PAPI_TOT_CYC=1.5e9,PAPI_L1_DCA=4e8 --constants machine-constants/amd-opteron-8358.toml"
    )]
    Lcpi {
        /// Run directory.
        run: Option<PathBuf>,
        #[command(flatten)]
        values: ValueArgs,
        /// Use this LCPI definition file instead of the shipped ones.
        #[arg(long)]
        definitions: Option<PathBuf>,
        #[arg(long, default_value = "table")]
        format: powerperf_core::output::OutputFormat,
    },
}

/// Run `powerperf events ...`.
///
/// # Errors
/// A malformed definition line (with file:line:col and the token), unreadable files,
/// malformed `--values`.
pub fn run(cmd: EventsCommand) -> Result<i32> {
    match &cmd {
        EventsCommand::Eval { format, .. } => {
            format.check("events eval", &OutFormat::TABLE_JSON)?
        }
        EventsCommand::List { format, .. } => {
            format.check("events list", &OutFormat::TABLE_JSON)?
        }
        EventsCommand::Lcpi { format, .. } => {
            format.check("events lcpi", &OutFormat::TABLE_JSON)?
        }
        EventsCommand::Check { .. } => {}
    }
    match cmd {
        EventsCommand::Eval {
            file,
            run_flag,
            run,
            values,
            format,
            per: Some(per),
            output,
        } => eval_per(
            &file,
            run_flag.or(run).as_deref(),
            &values,
            format,
            per,
            output.as_deref(),
        ),
        EventsCommand::Eval {
            file,
            run_flag,
            run,
            values,
            format,
            per: None,
            ..
        } => eval(&file, run_flag.or(run).as_deref(), &values, format),
        EventsCommand::Check {
            file,
            run,
            constants,
            sysfs_root,
        } => check(&file, run.as_deref(), constants.as_deref(), &sysfs_root),
        EventsCommand::List { sysfs_root, format } => list_cmd(&sysfs_root, format),
        EventsCommand::Lcpi {
            run,
            values,
            definitions,
            format,
        } => lcpi_cmd(run.as_deref(), &values, definitions.as_deref(), format),
    }
}

fn load_defs(f: &FileArgs) -> Result<DefinitionSet> {
    let (path, env_default) = match &f.file {
        Some(p) => (p.clone(), false),
        None => match std::env::var_os("PAPI_USER_EVENTS_FILE") {
            Some(p) => (PathBuf::from(p), true),
            None => bail!("no definition file: name one (`powerperf events eval FILE RUN`) or set PAPI_USER_EVENTS_FILE"),
        },
    };
    let syntax = match f.syntax {
        Some(s) => Some(s),
        None if env_default => Some(Syntax::PapiUser),
        None => None,
    };
    let set = load_file(&path, syntax, &LoadOptions { cpu: f.cpu.clone() })?;
    Ok(set)
}

/// Parse `NAME=NUMBER,NAME=NUMBER`.
///
/// # Errors
/// An item without `=` or with a value that is not a number, naming the item.
pub fn parse_values(s: &str) -> Result<BTreeMap<String, f64>> {
    let mut out = BTreeMap::new();
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let Some((k, v)) = item.split_once('=') else {
            bail!("--values: `{item}` is not NAME=NUMBER (names with `,` or `=` go in --values-file F.json)");
        };
        let x: f64 = v
            .trim()
            .parse()
            .with_context(|| format!("--values: `{v}` in `{item}` is not a number"))?;
        out.insert(k.trim().to_string(), x);
    }
    Ok(out)
}

fn values_file(p: &Path) -> Result<BTreeMap<String, f64>> {
    let text =
        std::fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", p.display()))?;
    let obj = v.as_object().with_context(|| {
        format!(
            "{}: expected a JSON object {{\"NAME\": number}}",
            p.display()
        )
    })?;
    let mut out = BTreeMap::new();
    for (k, x) in obj {
        match x {
            serde_json::Value::Number(n) => {
                out.insert(k.clone(), n.as_f64().unwrap_or(f64::NAN));
            }
            serde_json::Value::Null => {}
            other => bail!("{}: value of `{k}` is {other}, not a number", p.display()),
        }
    }
    Ok(out)
}

/// CPU identity from `/proc/cpuinfo`: (vendor_id, cpu family, model) on x86; on Arm
/// ("ARM" for implementer 0x41, CPU architecture, CPU part).
fn this_cpu() -> Option<(String, u32, u32)> {
    powerperf_core::collect::sysinfo::cpu_id().constants_key()
}

/// Parse a `/proc/cpuinfo` text into (vendor, family, model) as the constants files name them
/// (through [`powerperf_core::collect::sysinfo::parse_cpuinfo`], the one cpuinfo parser).
pub fn cpu_identity(text: &str) -> Option<(String, u32, u32)> {
    powerperf_core::collect::sysinfo::parse_cpuinfo(text).constants_key()
}

/// Build the resolver: run totals or values, constants (explicit or selected by CPU), and
/// values derived from the run's knobs. Returns notes for the user.
pub(crate) fn resolver(run: Option<&Path>, v: &ValueArgs) -> Result<(Resolver, Vec<String>)> {
    let mut r = Resolver::default();
    let mut notes = Vec::new();
    let mut cpu = None;
    if let Some(dir) = run {
        let meta = RunMeta::read(dir)?;
        let t = meta.totals();
        r.values = t.values;
        r.missing = t.missing;
        r.duration_s = Some(t.duration_s);
        if let Some(f) = meta.knobs.core_freq_mhz {
            r.values.entry("core_freq_mhz".into()).or_insert(f);
            r.values
                .entry("inverseClock".into())
                .or_insert(1.0 / (f * 1e6));
        }
        if let Some(f) = meta.knobs.core_freq_max_mhz {
            r.values
                .entry(powerperf_events::CPU_MAX_HZ.into())
                .or_insert(f * 1e6);
        }
        if let (Some(vn), Some(fa), Some(mo)) = (
            meta.run.cpu_vendor.clone(),
            meta.run.cpu_family,
            meta.run.cpu_model_number,
        ) {
            cpu = Some((vn, fa, mo));
        }
    } else {
        cpu = this_cpu();
    }
    if let Some(s) = &v.values {
        r.values.extend(parse_values(s)?);
    }
    if let Some(p) = &v.values_file {
        r.values.extend(values_file(p)?);
    }
    if run.is_none() && v.values.is_none() && v.values_file.is_none() {
        bail!("no values to evaluate on: give a RUN directory, --values NAME=NUMBER,… or --values-file F.json");
    }
    if let Some(p) = &v.constants {
        let m = constants::load(p)?;
        notes.push(format!(
            "constants: {} ({} values)",
            p.display(),
            m.constants.len()
        ));
        r.constants = m.as_map();
    } else if let Some((vn, fa, mo)) = cpu {
        match constants::select(&vn, fa, mo) {
            Some((name, m)) => {
                notes.push(format!("constants: machine-constants/{name} (CPU {vn} family {fa} model {mo})"));
                r.constants = m.as_map();
            }
            None => notes.push(format!("constants: none shipped for CPU {vn} family {fa} model {mo}; give --constants FILE")),
        }
    }
    Ok((r, notes))
}

fn fmt_value(x: f64) -> String {
    if x != 0.0 && (x.abs() >= 1e7 || x.abs() < 1e-3) {
        format!("{x:.6e}")
    } else {
        format!("{x:.6}")
    }
}

fn explain_missing(r: &Resolver, names: &[String]) -> String {
    names
        .iter()
        .map(|n| match r.resolve(n) {
            Resolution::Missing { reason: Some(why) } if !why.starts_with(&format!("{n}:")) => {
                format!("{n} ({why})")
            }
            Resolution::Missing { reason: Some(why) } => why,
            _ => n.clone(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The CPU identity of a run (from its run.toml) or of this machine.
fn cpu_of(run: Option<&Path>) -> Option<(String, u32, u32)> {
    match run {
        Some(dir) => {
            let m = RunMeta::read(dir).ok()?;
            Some((
                m.run.cpu_vendor?,
                m.run.cpu_family?,
                m.run.cpu_model_number?,
            ))
        }
        None => this_cpu(),
    }
}

fn eval(f: &FileArgs, run: Option<&Path>, v: &ValueArgs, format: OutFormat) -> Result<i32> {
    let mut f = f.clone();
    let mut pre_notes = Vec::new();
    // papi_events.csv without --cpu: the section of the run's (or this machine's) CPU.
    if f.cpu.is_none() {
        if let Some(path) = &f.file {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            let syntax = match f.syntax {
                Some(s) => Some(s),
                None => powerperf_events::detect(&path.display().to_string(), &text).ok(),
            };
            if syntax == Some(Syntax::PapiCsv) {
                match cpu_of(run) {
                    Some((vn, fa, mo)) => match constants::papi_pmu_name(&vn, fa, mo) {
                        Some(pmu) => {
                            pre_notes.push(format!("papi_events.csv section `CPU,{pmu}` (CPU {vn} family {fa} model {mo}; --cpu overrides)"));
                            f.cpu = Some(pmu.to_string());
                        }
                        None => pre_notes.push(format!("no PAPI PMU name known for CPU {vn} family {fa} model {mo}: every section is evaluated; pick one with --cpu")),
                    },
                    None => pre_notes.push("CPU unknown: every papi_events.csv section is evaluated; pick one with --cpu".into()),
                }
            }
        }
    }
    let f = &f;
    let set = load_defs(f)?;
    let (r, notes) = resolver(run, v)?;
    let values = set.evaluate(&|n: &str| r.get(n));
    match format {
        OutFormat::Json => {
            // Written by hand to keep the definitions' order (serde_json's map sorts keys).
            let items: Vec<String> = values
                .iter()
                .map(|v| {
                    let val = v
                        .value
                        .map(serde_json::Value::from)
                        .unwrap_or(serde_json::Value::Null);
                    format!("  {}: {}", serde_json::Value::from(v.name.clone()), val)
                })
                .collect();
            outln!("{{\n{}\n}}", items.join(",\n"));
        }
        OutFormat::Table | OutFormat::Csv | OutFormat::Markdown => {
            for n in pre_notes.iter().chain(&notes).chain(&set.notes) {
                eprintln!("note: {n}");
            }
            let w = values
                .iter()
                .map(|v| v.name.chars().count())
                .max()
                .unwrap_or(4)
                .clamp(4, 60);
            outln!("{:<w$}  {:>16}  UNIT / NOTE", "NAME", "VALUE");
            for (val, d) in values.iter().zip(&set.definitions) {
                let shown = val.value.map(fmt_value).unwrap_or_else(|| "-".into());
                let note = match &val.problem {
                    Some(powerperf_events::Problem::Missing(m)) => {
                        format!("not computable: missing {}", explain_missing(&r, m))
                    }
                    Some(p) => p.to_string(),
                    None => d.unit.clone().unwrap_or_default(),
                };
                outln!("{:<w$}  {:>16}  {}", val.name, shown, note);
            }
        }
    }
    Ok(0)
}

/// Whether this machine counts `name`: the name itself and the perf events it is an alias
/// of are opened once on powerperf's own thread (as `events list` does), then the named
/// events of the sysfs PMUs are searched. A line for `events check`.
fn probe_machine(name: &str, root: &Path, pmus: &[powerperf_node::pmu::Pmu]) -> String {
    use powerperf_node::event_spec::parse_event;
    let mut tried: Vec<String> = Vec::new();
    let mut cands: Vec<String> = vec![name.to_string()];
    for (c, _) in candidates(name) {
        if !cands.iter().any(|x| x == c) {
            cands.push(c.to_string());
        }
    }
    for c in &cands {
        let Ok(spec) = parse_event(c, 0) else {
            continue;
        };
        #[cfg(target_os = "linux")]
        {
            use powerperf_node::perf_event::{open_all, Opened, Target};
            // SAFETY: gettid has no preconditions.
            let me = unsafe { libc::syscall(libc::SYS_gettid) } as i32;
            match open_all(std::slice::from_ref(&spec), &Target::Tasks(vec![me]), root)
                .into_iter()
                .next()
            {
                Some(Opened::Counter(_)) => {
                    return format!("this machine counts it (perf event `{c}`)")
                }
                Some(Opened::Failed { reason, .. }) => tried.push(format!("`{c}`: {reason}")),
                None => tried.push(format!("`{c}`: could not be opened")),
            }
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = spec;
            tried.push(format!("`{c}`: perf_event exists on Linux only"));
        }
    }
    let want = name.to_ascii_lowercase().replace('.', "_");
    for p in pmus {
        if let Some(e) = p
            .events
            .iter()
            .find(|e| e.name.to_ascii_lowercase().replace('.', "_") == want)
        {
            return format!(
                "this machine has it (sysfs PMU event `{}/{}/`)",
                p.name, e.name
            );
        }
    }
    if tried.is_empty() {
        "this machine: no perf event or sysfs PMU event of that name (`powerperf events list` shows what there is)".into()
    } else {
        format!("this machine: <not supported>: {}", tried.join("; "))
    }
}

fn check(
    f: &FileArgs,
    run: Option<&Path>,
    constants_file: Option<&Path>,
    sysfs_root: &Path,
) -> Result<i32> {
    let set = load_defs(f)?;
    let pmus = powerperf_node::pmu::list(sysfs_root);
    let mut r = Resolver::default();
    if let Some(dir) = run {
        let t = RunMeta::read(dir)?.totals();
        r.values = t.values;
        r.missing = t.missing;
        r.duration_s = Some(t.duration_s);
    }
    if let Some(p) = constants_file {
        r.constants = constants::load(p)?.as_map();
    }
    for n in &set.notes {
        eprintln!("note: {n}");
    }
    let mut unresolved = 0usize;
    for (i, d) in set.definitions.iter().enumerate() {
        let group = d
            .group
            .as_deref()
            .map(|g| format!(" [{g}]"))
            .unwrap_or_default();
        outln!("{}{}  ({}:{})", d.name, group, d.pos.file, d.pos.line);
        outln!("  formula: {}", d.source);
        outln!("  rpn:     {}", set.rpn(i));
        if !d.file_constants.is_empty() {
            let cs: Vec<String> = d
                .file_constants
                .iter()
                .map(|c| format!("{c}={}", set.file_constants[c]))
                .collect();
            outln!("  file constants: {}", cs.join(", "));
        }
        if !d.refs.is_empty() {
            outln!("  uses definitions: {}", d.refs.join(", "));
        }
        for name in &d.vars {
            let status = if run.is_some() || r.constants.contains_key(name) {
                let res = r.resolve(name);
                if res.value().is_none() {
                    unresolved += 1;
                }
                let mark = if res.value().is_some() {
                    "ok"
                } else {
                    "MISSING"
                };
                format!("{mark}: {res}")
            } else if powerperf_events::alias::DURATION_NAMES.contains(&name.as_str()) {
                "run duration, s".into()
            } else {
                let alias = match candidates(name).first() {
                    Some((col, _)) if *col == name.as_str() => String::new(),
                    Some((col, true)) => format!("alias of `{col}`; "),
                    Some((col, false)) => format!("approximate alias of `{col}`; "),
                    None => String::new(),
                };
                format!("{alias}{}", probe_machine(name, sysfs_root, &pmus))
            };
            outln!("  needs {name}: {status}");
        }
    }
    outln!(
        "{} definitions compiled from {} ({})",
        set.definitions.len(),
        set.file,
        set.syntax
    );
    if run.is_some() {
        outln!("{unresolved} needed names have no value in the run");
    }
    Ok(0)
}

fn lcpi_cmd(
    run: Option<&Path>,
    v: &ValueArgs,
    definitions: Option<&Path>,
    format: OutFormat,
) -> Result<i32> {
    let (r, notes) = resolver(run, v)?;
    let lookup = |n: &str| r.get(n);
    let table = match definitions {
        Some(p) => {
            let set = load_file(p, None, &LoadOptions::default())?;
            lcpi::table_with(&set, &p.display().to_string(), &lookup)
        }
        None => lcpi::table(&lookup),
    };
    match format {
        OutFormat::Table | OutFormat::Csv | OutFormat::Markdown => {
            for n in &notes {
                eprintln!("note: {n}");
            }
            out!("{table}");
        }
        OutFormat::Json => {
            let mut m = serde_json::Map::new();
            m.insert("source".into(), table.source.clone().into());
            let val = |x: &Result<f64, String>| {
                x.as_ref()
                    .ok()
                    .copied()
                    .map(serde_json::Value::from)
                    .unwrap_or(serde_json::Value::Null)
            };
            m.insert("overall_cpi".into(), val(&table.overall_cpi));
            for row in &table.rows {
                m.insert(row.category.clone(), val(&row.value));
            }
            outln!(
                "{}",
                serde_json::to_string_pretty(&serde_json::Value::Object(m))?
            );
        }
    }
    Ok(0)
}

/// One line of `events list`.
#[derive(Debug, serde::Serialize)]
struct Listed {
    name: String,
    kind: String,
    available: bool,
    /// Why the event cannot be counted here (perf's `<not supported>`), when it cannot.
    reason: Option<String>,
    unit: Option<String>,
    scale: Option<f64>,
}

fn list_cmd(root: &std::path::Path, format: OutFormat) -> Result<i32> {
    use powerperf_node::event_spec::{parse_event, symbolic, EventKind};
    let mut out = Vec::new();
    for (name, kind) in symbolic() {
        let kind_name = match kind {
            EventKind::Hardware(_) => "Hardware event",
            _ => "Software event",
        };
        #[cfg(target_os = "linux")]
        let (available, reason) = {
            use powerperf_node::perf_event::{open_all, Opened, Target};
            let spec = parse_event(name, 0).map_err(anyhow::Error::msg)?;
            // SAFETY: gettid has no preconditions.
            let me = unsafe { libc::syscall(libc::SYS_gettid) } as i32;
            match open_all(std::slice::from_ref(&spec), &Target::Tasks(vec![me]), root)
                .into_iter()
                .next()
            {
                Some(Opened::Counter(_)) => (true, None),
                Some(Opened::Failed { reason, .. }) => (false, Some(reason)),
                None => (false, Some("could not be opened".to_string())),
            }
        };
        #[cfg(not(target_os = "linux"))]
        let (available, reason) = {
            let _ = parse_event(name, 0);
            (false, Some("perf_event exists on Linux only".to_string()))
        };
        out.push(Listed {
            name: name.into(),
            kind: kind_name.into(),
            available,
            reason,
            unit: None,
            scale: None,
        });
    }
    for pmu in powerperf_node::pmu::list(root) {
        for e in &pmu.events {
            out.push(Listed {
                name: format!("{}/{}/", pmu.name, e.name),
                kind: if pmu.cpumask.is_some() {
                    "Kernel PMU event, per CPU/package".into()
                } else {
                    "Kernel PMU event".into()
                },
                available: true,
                reason: None,
                unit: e.unit.clone(),
                scale: e.scale,
            });
        }
    }
    // PAPI presets (a build with `--features papi`): those PAPI maps on this CPU, each tried
    // on powerperf itself.
    #[cfg(all(target_os = "linux", feature = "papi"))]
    match powerperf_core::collect::papi::list_presets() {
        Ok(presets) => {
            for p in presets {
                out.push(Listed {
                    name: p.name,
                    kind: "PAPI preset, --backend papi".into(),
                    available: p.usable.is_ok(),
                    reason: p.usable.err(),
                    unit: None,
                    scale: None,
                });
            }
        }
        Err(why) => out.push(Listed {
            name: "PAPI".into(),
            kind: "PAPI presets, --backend papi".into(),
            available: false,
            reason: Some(why),
            unit: None,
            scale: None,
        }),
    }
    match format {
        OutFormat::Json => outln!("{}", serde_json::to_string_pretty(&out)?),
        OutFormat::Table | OutFormat::Csv | OutFormat::Markdown => {
            outln!("List of events (to be used in -e):\n");
            for l in &out {
                let extra = match (&l.unit, l.scale) {
                    (Some(u), Some(s)) => format!(" ({u}, scale {s:e})"),
                    (Some(u), None) => format!(" ({u})"),
                    _ => String::new(),
                };
                let status = match &l.reason {
                    Some(r) => format!("  <not supported>: {r}"),
                    None => String::new(),
                };
                outln!("  {:<40} [{}{extra}]{status}", l.name, l.kind);
            }
            outln!("\nRaw events: rNNNN (hex), PMU/event=0x..,umask=0x../ as perf takes them.");
            #[cfg(feature = "papi")]
            outln!("PAPI native events (--backend papi): `papi_native_avail` lists them (perf::TASK-CLOCK, pmu::EVENT:umask).");
        }
    }
    Ok(0)
}

/// `events eval --per sample|region`: the definitions over every timeline sample or region
/// row, through [`powerperf_events::DefinitionSet::evaluate_columns`]. Event names reach
/// columns through the same resolution as the totals (constants, exact columns, the alias
/// table); `duration_time` and friends are the sample's or region's length in seconds.
fn eval_per(
    f: &FileArgs,
    run: Option<&Path>,
    v: &ValueArgs,
    format: OutFormat,
    per: Per,
    output: Option<&Path>,
) -> Result<i32> {
    use std::collections::BTreeMap;
    let run = run.context("--per needs a RUN directory")?;
    let set = load_defs(f)?;
    let (r, notes) = resolver(Some(run), v)?;
    // The rows: per-column values and per-row durations, plus key columns for the output.
    let mut cols: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let (n, dur_s, keys): (usize, Vec<f64>, Vec<polars::prelude::Column>) = match per {
        Per::Sample => {
            let df = powerperf_format::timeline::read_run(run)?
                .with_context(|| format!("{} has no timeline", run.display()))?;
            let t: Vec<u64> = df
                .column("t_ns")?
                .u64()?
                .iter()
                .map(|x| x.unwrap_or(0))
                .collect();
            let d: Vec<u64> = df
                .column("dur_ns")?
                .u64()?
                .iter()
                .map(|x| x.unwrap_or(0))
                .collect();
            for c in df.columns() {
                if let Ok(ca) = c.f64() {
                    cols.insert(
                        c.name().to_string(),
                        ca.iter().map(|x| x.unwrap_or(f64::NAN)).collect(),
                    );
                }
            }
            let dur = d.iter().map(|&x| x as f64 * 1e-9).collect();
            let keys = vec![
                polars::prelude::Column::new("t_ns".into(), &t),
                polars::prelude::Column::new("dur_ns".into(), &d),
            ];
            (t.len(), dur, keys)
        }
        Per::Region => {
            let regs =
                powerperf_core::collect::attribution::read_regions(run)?.with_context(|| {
                    format!(
                        "{} has no regions.parquet (mark regions with powerperf-rt)",
                        run.display()
                    )
                })?;
            for reg in &regs {
                for name in reg.values.keys() {
                    cols.entry(name.clone()).or_default();
                }
            }
            for (name, col) in cols.iter_mut() {
                *col = regs
                    .iter()
                    .map(|g| g.values.get(name).copied().unwrap_or(f64::NAN))
                    .collect();
            }
            let dur = regs.iter().map(|g| g.incl_ns as f64 * 1e-9).collect();
            let keys = vec![
                polars::prelude::Column::new(
                    "pid".into(),
                    regs.iter().map(|g| g.pid).collect::<Vec<_>>(),
                ),
                polars::prelude::Column::new(
                    "tid".into(),
                    regs.iter().map(|g| g.tid).collect::<Vec<_>>(),
                ),
                polars::prelude::Column::new(
                    "path".into(),
                    regs.iter().map(|g| g.path.clone()).collect::<Vec<_>>(),
                ),
            ];
            (regs.len(), dur, keys)
        }
    };
    // Each variable of the set becomes a column: a run column (directly or through an
    // alias), a constant broadcast to every row, or the rows' durations.
    let bound = set.bind_columns(&r, &cols, &dur_s);
    let out = set.evaluate_columns(&|name: &str| bound.get(name).map(|c| c.as_slice()), n);
    let names: Vec<&str> = set.definitions.iter().map(|d| d.name.as_str()).collect();
    if let Some(path) = output {
        let mut columns = keys.clone();
        for (name, vals) in names.iter().zip(&out) {
            columns.push(polars::prelude::Column::new((*name).into(), vals));
        }
        let mut df = polars::prelude::DataFrame::new(n, columns)?;
        powerperf_format::timeline::write_frame(&mut df, path)?;
        eprintln!(
            "wrote {} ({} rows, {} definitions)",
            path.display(),
            n,
            names.len()
        );
    }
    match format {
        OutFormat::Json => {
            let rows: Vec<serde_json::Value> = (0..n)
                .map(|i| {
                    let mut m = serde_json::Map::new();
                    for (name, vals) in names.iter().zip(&out) {
                        let x = vals[i];
                        m.insert(
                            name.to_string(),
                            if x.is_finite() {
                                x.into()
                            } else {
                                serde_json::Value::Null
                            },
                        );
                    }
                    serde_json::Value::Object(m)
                })
                .collect();
            outln!("{}", serde_json::to_string_pretty(&rows)?);
        }
        OutFormat::Table | OutFormat::Csv | OutFormat::Markdown => {
            for note in notes.iter().chain(&set.notes) {
                eprintln!("note: {note}");
            }
            let missing: Vec<&String> = set
                .variables
                .iter()
                .filter(|v| !bound.contains_key(*v))
                .collect();
            if !missing.is_empty() {
                eprintln!(
                    "note: not in this run, so NaN where used: {}",
                    missing
                        .iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
            outln!("{:>8}  {}", "row", names.join("  "));
            for i in 0..n {
                let vals: Vec<String> = out.iter().map(|c| fmt_value(c[i])).collect();
                outln!("{i:>8}  {}", vals.join("  "));
            }
        }
    }
    Ok(0)
}
