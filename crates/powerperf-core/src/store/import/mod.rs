//! Importing tabular measurements into a [`TrainingSet`] through a small TOML spec.
//!
//! A spec (see `docs/import.md` for every key) names a data file (or a glob of files), how
//! to read it (separator, header, comment prefix), which column is the workload id (or how
//! to take it from the file name), the knob columns and their units, time, power and energy
//! (a column with a unit, or derived from the other two), counter columns with their
//! [`CounterKind`], static features joined from a second file, constant knobs, and targets
//! that are unreliable for named workloads.
//!
//! Two layouts:
//! - `rows` (default): one row is one point.
//! - `timeline`: one row is one sample; the points are the groups of rows with the same
//!   (workload, knob values, repeat). For a group with samples at t_0 < … < t_{n-1} and a
//!   sample period T: time = t_{n-1} − t_0 + T; energy = Σ P_i·Δ_i with Δ_0 = T and
//!   Δ_i = t_i − t_{i−1}; power = energy / time; each counter is the sum of its per-interval
//!   counts (kind `count`). This is the rule of the ODROID-XU3 dataset's README
//!   (`datasets/README.md`, "xu3-pmu-power"): "Run time of a run = last − first
//!   timestamp + one sample period; energy = Σ power × interval".
//!
//! Files are read with polars' CSV reader. A relative data file name is resolved by
//! [`resolve_data_file`].

use anyhow::{Context, Result};
use polars::prelude::{Column, CsvReadOptions, DataFrame, DataType, SerReader};
use powerperf_format::set::{CounterKind, Point, SetMeta, TrainingSet, Unreliable, TARGETS};
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// Environment variable naming the directory that holds the public data files.
pub const DATA_DIR_ENV: &str = "POWERPERF_DATA_DIR";

/// Errors of reading a spec or the files it names.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImportError {
    /// The spec names a column the data file does not have.
    #[error("{file}: no column `{column}` (the spec's {role}); the file has: {have}. Fix: correct the column name in the spec, or pass the right file with --file")]
    MissingColumn {
        file: PathBuf,
        column: String,
        role: String,
        have: String,
    },
    /// A cell could not be read as a number in the expected unit.
    #[error("{file}: line {line}, column `{column}`: `{value}` {why}")]
    BadValue {
        file: PathBuf,
        line: usize,
        column: String,
        value: String,
        why: String,
    },
    /// No file matched the spec's `file` anywhere it was looked for.
    #[error("data file `{name}` not found; looked in: {tried}. Fix: pass --file PATH, set {DATA_DIR_ENV} to the directory that holds it, or import a set bundled with powerperf by name (`powerperf datasets` lists them)")]
    NotFound { name: String, tried: String },
    /// The workload id could not be taken from a file name.
    #[error("file name `{file}` does not match workload_from_file = \"{pattern}\" (`{{workload}}` marks the id)")]
    WorkloadFromFile { file: String, pattern: String },
    /// The spec is valid TOML but not a usable spec.
    #[error("spec {spec}: {why}")]
    Spec { spec: PathBuf, why: String },
}

/// Dimensions and range checks of a set's columns: the set format's
/// ([`powerperf_format::quantity`]; `set.rs` checks a `points.parquet` it reads with them).
pub use powerperf_format::quantity::{check_value, Dimension};

/// A number as a user would have written it (`-1000`, `1e308`, `NaN`, `inf`).
fn show_number(x: f64) -> String {
    if x.is_finite() && x != 0.0 && !(1e-4..1e15).contains(&x.abs()) {
        format!("{x:e}")
    } else {
        format!("{x}")
    }
}

/// Parse `text` as a quantity of `dim` into the base unit. A unit suffix in the text (e.g.
/// `2.20GHz`, `450ms`) wins over `default_unit`; a bare number is in `default_unit`.
///
/// # Errors
/// A message saying why (not a number, unknown suffix).
pub fn parse_quantity(text: &str, dim: Dimension, default_unit: &str) -> Result<f64, String> {
    let t = text.trim();
    if dim == Dimension::Frequency {
        // The one frequency parser (any case: `2.2GHz`, `2.2ghz`), shared with the CLI's
        // `units::parse_freq_mhz`.
        if let Some(v) = powerperf_node::units::freq_with_unit(t) {
            return Ok(v);
        }
    } else {
        let mut units: Vec<&(&str, f64)> =
            dim.units().iter().filter(|(u, _)| !u.is_empty()).collect();
        units.sort_by_key(|(u, _)| std::cmp::Reverse(u.len()));
        for (u, f) in units {
            if let Some(num) = t.strip_suffix(u) {
                if let Ok(v) = num.trim().parse::<f64>() {
                    return Ok(v * f);
                }
            }
        }
    }
    let f = dim.factor(default_unit)?;
    t.parse::<f64>().map(|v| v * f).map_err(|_| {
        let names: Vec<&str> = dim
            .units()
            .iter()
            .map(|(u, _)| *u)
            .filter(|u| !u.is_empty())
            .collect();
        if names.is_empty() {
            "is not a number".to_string()
        } else {
            format!(
                "is not a number with an optional unit ({})",
                names.join(", ")
            )
        }
    })
}

/// How a file's text is laid out. Shared by the main file and the static-features file.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct FormatSpec {
    /// Field separator, one byte (`","` default, `"\t"`, `";"`).
    #[serde(default)]
    pub separator: Option<String>,
    /// Whether the first line (after `skip_lines`) is a header (default true).
    #[serde(default)]
    pub has_header: Option<bool>,
    /// A prefix removed from the first header name (`"#"` for `#Timestamp`).
    #[serde(default)]
    pub header_prefix: Option<String>,
    /// Lines starting with this are skipped (polars `comment_prefix`).
    #[serde(default)]
    pub comment_prefix: Option<String>,
    /// Raw lines skipped before the header.
    #[serde(default)]
    pub skip_lines: Option<usize>,
    /// Column names to use instead of the header (the header line, if any, is skipped).
    #[serde(default)]
    pub column_names: Option<Vec<String>>,
    /// A file with more column names, one per line, appended after `column_names`.
    #[serde(default)]
    pub column_names_file: Option<String>,
}

/// A target column or how to derive it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetSpec {
    /// Column holding the target.
    #[serde(default)]
    pub column: Option<String>,
    /// Its unit (time: s ms us ns min h; power: W mW kW; energy: J mJ kJ Wh kWh).
    #[serde(default)]
    pub unit: Option<String>,
    /// Derivation instead of a column: `power*time` (energy), `energy/time` (power),
    /// `energy/power` (time).
    #[serde(default)]
    pub derive: Option<String>,
}

/// A knob column.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KnobSpec {
    /// Name in the set (`core_freq_mhz`, `mem_freq_mhz`, `threads`).
    pub name: String,
    /// Column in the file.
    pub column: String,
    /// Unit of bare numbers (default MHz for `*_mhz` knobs). A suffix in a value wins.
    #[serde(default)]
    pub unit: Option<String>,
    /// The device whose setting this knob is: `cpu`, `gpu` (GPU 0) or `gpu<i>`. Optional;
    /// without it the set says the device is unknown and `plan` asks for `--device`.
    #[serde(default)]
    pub device: Option<String>,
}

/// A counter column.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CounterSpec {
    /// Column in the file.
    pub column: String,
    /// Name in the set (default: the column name).
    #[serde(default)]
    pub name: Option<String>,
    /// `count` or `rate`.
    pub kind: CounterKind,
}

/// Static features joined from a second file on the workload id.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StaticSpec {
    /// The features file, resolved like the data file (first next to the data file).
    pub file: String,
    #[serde(flatten)]
    pub format: FormatSpec,
    /// Column whose value is matched (exactly) against the workload id.
    pub key: String,
    /// Only rows whose columns have these exact values.
    #[serde(default, rename = "where")]
    pub filter: BTreeMap<String, String>,
    /// Feature columns (default: every numeric column other than `key` and `where`).
    #[serde(default)]
    pub features: Option<Vec<String>>,
    /// How rows with the same key are combined: `sum` (default), `mean`, `first`.
    #[serde(default)]
    pub aggregate: Option<String>,
    /// Prepended to every feature name; `.`, `-` and spaces become `_`.
    #[serde(default)]
    pub prefix: Option<String>,
}

/// Targets unreliable for some workloads.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnreliableSpec {
    /// Targets (`time_s`, `power_w`, `energy_j`).
    pub targets: Vec<String>,
    /// Workloads, `["*"]` for all.
    pub workloads: Vec<String>,
    /// Workloads excluded from `workloads` (each must exist in the data).
    #[serde(default)]
    pub except: Vec<String>,
    /// Why, shown to users.
    pub reason: String,
}

/// `[timeline]`: how samples become points (layout `timeline`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimelineSpec {
    /// Timestamp column.
    pub timestamp: String,
    /// Its unit (default `ns`).
    #[serde(default)]
    pub timestamp_unit: Option<String>,
    /// Power column (mean power over the interval ending at the sample).
    pub power: String,
    /// Its unit (default `W`).
    #[serde(default)]
    pub power_unit: Option<String>,
    /// Sample period in seconds (default: the median of all positive intervals between
    /// consecutive samples of a group, over the file).
    #[serde(default)]
    pub sample_period_s: Option<f64>,
}

/// `[machine]`: the processor the data was measured on. `import --as-runs` writes it into
/// each run's `[run]` table, so `report --lcpi` selects that processor's machine constants
/// (by vendor, family and model number, as `collect` reads them from /proc/cpuinfo).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MachineSpec {
    /// Host name, if the source gives one.
    #[serde(default)]
    pub host: Option<String>,
    /// Processor name (as /proc/cpuinfo's `model name` would say it).
    #[serde(default)]
    pub cpu_model: Option<String>,
    /// `GenuineIntel`, `AuthenticAMD`, `ARM` (the implementer 0x41), ...
    #[serde(default)]
    pub cpu_vendor: Option<String>,
    /// x86 family, or the ARM architecture version.
    #[serde(default)]
    pub cpu_family: Option<u32>,
    /// x86 model, or the ARM part number (Cortex-A15: 0xc0f = 3087).
    #[serde(default)]
    pub cpu_model_number: Option<u32>,
}

/// The samples of one timeline group (one point), as the file gave them, for
/// `import --as-runs` (layout `timeline` only).
#[derive(Debug, Clone)]
pub struct SampleGroup {
    /// Index of the group's point in [`Imported::set`]`.points`.
    pub point: usize,
    /// Sample end times, ns from the group's first sample.
    pub t_ns: Vec<u64>,
    /// Sample lengths, ns (the first one is the sample period).
    pub dur_ns: Vec<u64>,
    /// Power over each sample, W.
    pub power_w: Vec<f64>,
    /// (source column, per-sample values) of each counter the spec names.
    pub counters: Vec<(String, Vec<Option<f64>>)>,
}

/// An import spec (`datasets/*.toml`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImportSpec {
    /// Short name; the set's source becomes `import:<name>`.
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Public source of the data (repository, commit, path).
    #[serde(default)]
    pub source: String,
    #[serde(default)]
    pub licence: String,
    /// The data file, relative to the data directory, or a glob (`multicore-scaling/xeon/data-*.csv`).
    pub file: String,
    #[serde(flatten)]
    pub format: FormatSpec,
    /// `rows` (default) or `timeline`.
    #[serde(default)]
    pub layout: Option<String>,
    /// Column holding the workload id.
    #[serde(default)]
    pub workload: Option<String>,
    /// Workload id from the file name: a pattern with `{workload}`, e.g. `data-{workload}.csv`.
    #[serde(default)]
    pub workload_from_file: Option<String>,
    /// Further columns whose values join the workload id, each after a `:` (per-kernel data:
    /// `workload = "appName"`, `workload_columns = ["kernel"]` gives `backprop:bpnn_adjust`).
    #[serde(default)]
    pub workload_columns: Vec<String>,
    /// Column holding the repeat number.
    #[serde(default)]
    pub repeat: Option<String>,
    #[serde(default, rename = "knob")]
    pub knobs: Vec<KnobSpec>,
    /// Knobs with one value for the whole file (e.g. `threads = 1`).
    #[serde(default)]
    pub constant_knobs: BTreeMap<String, f64>,
    #[serde(default)]
    pub time: Option<TargetSpec>,
    #[serde(default)]
    pub power: Option<TargetSpec>,
    #[serde(default)]
    pub energy: Option<TargetSpec>,
    #[serde(default)]
    pub timeline: Option<TimelineSpec>,
    #[serde(default, rename = "counter")]
    pub counters: Vec<CounterSpec>,
    #[serde(default)]
    pub static_features: Option<StaticSpec>,
    #[serde(default)]
    pub unreliable: Vec<UnreliableSpec>,
    #[serde(default)]
    pub machine: Option<MachineSpec>,
    /// Where the spec was read from (not a key).
    #[serde(skip)]
    pub path: PathBuf,
}

/// The result of an import: the set, the files read and notes for the user.
#[derive(Debug, Clone)]
pub struct Imported {
    pub set: TrainingSet,
    pub files: Vec<PathBuf>,
    pub notes: Vec<String>,
    /// Per-point samples of a `timeline` layout (empty for `rows`).
    pub samples: Vec<SampleGroup>,
}

impl ImportSpec {
    /// Read and check a spec.
    ///
    /// # Errors
    /// I/O errors; TOML errors (with line and column, from the toml crate); unknown keys;
    /// [`ImportError::Spec`] for an inconsistent spec (e.g. no workload id, a derivation
    /// that needs a missing target).
    pub fn load(path: &Path) -> Result<ImportSpec> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read import spec {}", path.display()))?;
        Self::from_toml(&text, path)
    }

    /// Parse and check the text of a spec (what [`ImportSpec::load`] does after reading
    /// it). `path` is the spec's path: it names the spec in messages, and relative data
    /// file names are resolved from its folder.
    ///
    /// # Errors
    /// As [`ImportSpec::load`], without the I/O errors.
    pub fn from_toml(text: &str, path: &Path) -> Result<ImportSpec> {
        let mut spec: ImportSpec = toml::from_str(text).map_err(|e| {
            // Flattened tables make serde report unknown keys at line 1; find the key's line.
            let msg = e.to_string();
            let located = msg
                .split("unknown field `")
                .nth(1)
                .and_then(|r| r.split('`').next())
                .and_then(|key| {
                    text.lines()
                        .position(|l| {
                            let l = l.trim_start();
                            l.strip_prefix(key)
                                .is_some_and(|r| r.trim_start().starts_with('='))
                        })
                        .map(|i| (key.to_string(), i + 1))
                });
            match located {
                Some((key, line)) => anyhow::anyhow!(
                    "{}: line {line}: unknown key `{key}`; the keys are listed in docs/import.md",
                    path.display()
                ),
                None => anyhow::Error::new(e).context(format!(
                    "{} is not a valid import spec (see docs/import.md)",
                    path.display()
                )),
            }
        })?;
        spec.path = path.to_path_buf();
        spec.check()?;
        Ok(spec)
    }

    fn err(&self, why: impl Into<String>) -> anyhow::Error {
        ImportError::Spec {
            spec: self.path.clone(),
            why: why.into(),
        }
        .into()
    }

    fn is_timeline(&self) -> bool {
        self.layout.as_deref() == Some("timeline")
    }

    fn check(&self) -> Result<()> {
        match self.layout.as_deref() {
            None | Some("rows") | Some("timeline") => {}
            Some(other) => {
                return Err(self.err(format!(
                    "layout = \"{other}\"; expected \"rows\" or \"timeline\""
                )))
            }
        }
        match (&self.workload, &self.workload_from_file) {
            (None, None) => return Err(self.err(
                "give `workload` (a column) or `workload_from_file` (a pattern with {workload})",
            )),
            (Some(_), Some(_)) => {
                return Err(self.err("give only one of `workload` and `workload_from_file`"))
            }
            (None, Some(p)) if !p.contains("{workload}") => {
                return Err(self.err(format!("workload_from_file = \"{p}\" lacks `{{workload}}`")))
            }
            _ => {}
        }
        if let Some(c) = self.workload_columns.iter().find(|c| c.trim().is_empty()) {
            return Err(self.err(format!(
                "workload_columns has an empty column name ({c:?}); give the columns whose values join the workload id"
            )));
        }
        let mut seen = std::collections::HashSet::new();
        for k in &self.knobs {
            if !seen.insert(k.name.as_str()) || self.constant_knobs.contains_key(&k.name) {
                return Err(self.err(format!(
                    "knob `{}` is given twice (in [[knob]] or [constant_knobs]); keep one",
                    k.name
                )));
            }
        }
        for k in &self.knobs {
            let unit = k
                .unit
                .clone()
                .unwrap_or_else(|| Dimension::of_knob(&k.name).base_unit().into());
            Dimension::of_knob(&k.name)
                .factor(&unit)
                .map_err(|e| self.err(format!("knob {}: {e}", k.name)))?;
        }
        if self.is_timeline() {
            if self.timeline.is_none() {
                return Err(
                    self.err("layout = \"timeline\" needs a [timeline] table (timestamp, power)")
                );
            }
            if self.time.is_some() || self.power.is_some() || self.energy.is_some() {
                return Err(self.err("with layout = \"timeline\" time, power and energy come from [timeline]; remove [time], [power], [energy]"));
            }
        } else if self.timeline.is_some() {
            return Err(self.err("[timeline] is only read with layout = \"timeline\""));
        }
        let dims = [
            ("time", Dimension::Time),
            ("power", Dimension::Power),
            ("energy", Dimension::Energy),
        ];
        for (name, dim) in dims {
            let Some(t) = self.target_spec(name) else {
                continue;
            };
            match (&t.column, &t.derive) {
                (Some(_), None) => {
                    dim.factor(t.unit.as_deref().unwrap_or(dim.base_unit()))
                        .map_err(|e| self.err(format!("[{name}]: {e}")))?;
                }
                (None, Some(d)) => {
                    let need: &[&str] = match (name, d.replace(' ', "").as_str()) {
                        ("energy", "power*time") | ("energy", "time*power") => &["power", "time"],
                        ("power", "energy/time") => &["energy", "time"],
                        ("time", "energy/power") => &["energy", "power"],
                        _ => {
                            return Err(self.err(format!(
                                "[{name}] derive = \"{d}\"; accepted: energy = \"power*time\", power = \"energy/time\", time = \"energy/power\""
                            )))
                        }
                    };
                    for n in need {
                        match self.target_spec(n) {
                            Some(TargetSpec {
                                column: Some(_), ..
                            }) => {}
                            _ => {
                                return Err(self.err(format!(
                                    "[{name}] derive = \"{d}\" needs [{n}] with a column"
                                )))
                            }
                        }
                    }
                }
                _ => {
                    return Err(self.err(format!(
                        "[{name}] needs exactly one of `column` and `derive`"
                    )))
                }
            }
        }
        for u in &self.unreliable {
            for t in &u.targets {
                if !TARGETS.contains(&t.as_str()) {
                    return Err(self.err(format!(
                        "[[unreliable]] target `{t}`; expected one of {TARGETS:?}"
                    )));
                }
            }
        }
        if let Some(s) = &self.static_features {
            match s.aggregate.as_deref() {
                None | Some("sum") | Some("mean") | Some("first") => {}
                Some(a) => {
                    return Err(self.err(format!(
                        "[static_features] aggregate = \"{a}\"; expected sum, mean or first"
                    )))
                }
            }
        }
        Ok(())
    }

    fn target_spec(&self, name: &str) -> Option<&TargetSpec> {
        match name {
            "time" => self.time.as_ref(),
            "power" => self.power.as_ref(),
            _ => self.energy.as_ref(),
        }
    }
}

mod tables;
use tables::*;
pub use tables::{data_search_dirs, resolve_data_file};

/// Import the data `spec` names into a training set.
///
/// `file_override` replaces the spec's `file` (a path or a glob). Otherwise the spec's file
/// is resolved by [`resolve_data_file`].
///
/// # Errors
/// [`ImportError`] variants (missing column with the file and its columns, a bad value with
/// its line, a file not found with the places tried) and polars' read errors, with the file.
pub fn import(spec: &ImportSpec, file_override: Option<&Path>) -> Result<Imported> {
    spec.check()?;
    let files = match file_override {
        Some(f) => {
            let v = expand(f);
            if v.is_empty() {
                return Err(ImportError::NotFound {
                    name: f.display().to_string(),
                    tried: f.display().to_string(),
                }
                .into());
            }
            v
        }
        None => resolve_data_file(&spec.file, None, Some(&spec.path))?,
    };
    let mut notes = Vec::new();
    let mut points = Vec::new();
    let mut samples = Vec::new();
    for f in &files {
        let t = read_table(f, &spec.format, &spec.path, f.parent())?;
        if spec.is_timeline() {
            let (p, s) = points_from_timeline(spec, &t, &mut notes, points.len())?;
            points.extend(p);
            samples.extend(s);
        } else {
            points.extend(points_from_rows(spec, &t)?);
        }
    }
    let mut all_files = files.clone();
    for p in &mut points {
        for (k, v) in &spec.constant_knobs {
            p.knobs.insert(k.clone(), *v);
        }
    }
    let mut static_names = Vec::new();
    if let Some(s) = &spec.static_features {
        let (names, map, sfile) = read_static(spec, s, files[0].parent())?;
        let mut missing = Vec::new();
        for p in &mut points {
            match map.get(&p.workload) {
                Some(f) => p.static_features = f.clone(),
                None => {
                    if !missing.contains(&p.workload) {
                        missing.push(p.workload.clone());
                    }
                }
            }
        }
        let mut unused: Vec<&String> = map
            .keys()
            .filter(|k| !points.iter().any(|p| &p.workload == *k))
            .collect();
        unused.sort();
        let unused_text = match unused.len() {
            0 => String::new(),
            n if n <= 10 => format!(
                "; keys without measurements (ignored): {}",
                unused
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            n => format!("; {n} keys without measurements (ignored)"),
        };
        notes.push(format!(
            "static features: {} columns from {}, matched exactly on `{}` for {} workloads{unused_text}",
            names.len(),
            sfile.display(),
            s.key,
            map.len() - unused.len()
        ));
        if !missing.is_empty() {
            notes.push(format!(
                "static features: no row for workloads {} (their features are absent)",
                missing.join(", ")
            ));
        }
        static_names = names;
        all_files.push(sfile);
    }
    if points.is_empty() {
        let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
        return Err(spec.err(format!("no data rows in {}", names.join(", "))));
    }
    let mut set = TrainingSet {
        meta: SetMeta::default(),
        points,
    };
    let workloads = set.workloads();
    let mut unreliable = Vec::new();
    for u in &spec.unreliable {
        for e in &u.except {
            if !workloads.contains(e) {
                return Err(spec.err(format!(
                    "[[unreliable]] except names `{e}`, which is not a workload in the data"
                )));
            }
        }
        let listed: Vec<String> = if u.workloads.iter().any(|w| w == "*") {
            if u.except.is_empty() {
                vec!["*".to_string()]
            } else {
                workloads
                    .iter()
                    .filter(|w| !u.except.contains(w))
                    .cloned()
                    .collect()
            }
        } else {
            u.workloads
                .iter()
                .filter(|w| !u.except.contains(w))
                .cloned()
                .collect()
        };
        for target in &u.targets {
            unreliable.push(Unreliable {
                target: target.clone(),
                workloads: listed.clone(),
                reason: u.reason.clone(),
            });
        }
    }
    let mut knob_devices = BTreeMap::new();
    for k in &spec.knobs {
        if let Some(d) = &k.device {
            let d = powerperf_format::set::canonical_device(d).map_err(|why| {
                anyhow::anyhow!(
                    "spec `{}`, [[knob]] `{}`: {why} (fix: write device = \"cpu\" or device = \"gpu\", or leave it out)",
                    spec.name,
                    k.name
                )
            })?;
            knob_devices.insert(k.name.clone(), d);
        }
    }
    let mut knobs: Vec<String> = spec.knobs.iter().map(|k| k.name.clone()).collect();
    knobs.extend(
        spec.constant_knobs
            .keys()
            .filter(|k| !knobs.contains(k))
            .cloned()
            .collect::<Vec<_>>(),
    );
    let targets = TARGETS
        .iter()
        .filter(|t| set.points.iter().any(|p| p.target(t).is_some()))
        .map(|t| t.to_string())
        .collect();
    let mut description = spec.description.trim().to_string();
    if !spec.source.is_empty() {
        description.push_str(&format!(" Source: {}.", spec.source));
    }
    if !spec.licence.is_empty() {
        description.push_str(&format!(" Licence: {}.", spec.licence));
    }
    set.meta = SetMeta {
        source: format!("import:{}", spec.name),
        description: description.trim().to_string(),
        knobs,
        targets,
        counters: spec
            .counters
            .iter()
            .map(|c| (c.name.clone().unwrap_or_else(|| c.column.clone()), c.kind))
            .collect(),
        static_features: static_names,
        unreliable,
        knob_devices,
    };
    set.column_names()?;
    Ok(Imported {
        set,
        files: all_files,
        notes,
        samples,
    })
}

/// Write one run directory per point of a `timeline` import under `dir`, as `collect` would
/// have written it (`run.toml` + `timeline.parquet`, docs/run-format.md), so that `report`,
/// `report --lcpi` and `events eval --per sample` work on the dataset's runs. Counters keep
/// the names their source gave them (`CPU_CYCLES`), with backend `import`; the timeline's
/// power becomes `power_w` and `energy_j` per sample and an `energy` event (J). The
/// processor comes from the spec's `[machine]` table. Returns the directories written.
///
/// # Errors
/// A spec whose layout is not `timeline`; I/O errors with the path.
pub fn write_runs(spec: &ImportSpec, imp: &Imported, dir: &Path) -> Result<Vec<PathBuf>> {
    use powerperf_format::run::{Backend, Ending, EventRecord, Knobs, RunInfo, RunMeta};
    use powerperf_format::timeline::TIMELINE;
    use powerperf_node::event_spec::EventStatus;
    if !spec.is_timeline() {
        return Err(spec.err(
            "--as-runs needs a `timeline` layout (one row per sample); this spec has one row per measurement",
        ));
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let machine = spec.machine.clone().unwrap_or_default();
    let mut written = Vec::with_capacity(imp.samples.len());
    for g in &imp.samples {
        let p = &imp.set.points[g.point];
        let mut name = p.workload.clone();
        for v in p.knobs.values() {
            name.push_str(&format!("-{v}"));
        }
        if let Some(r) = p.repeat {
            name.push_str(&format!("-r{r}"));
        }
        let name: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let run_dir = dir.join(&name);
        std::fs::create_dir_all(&run_dir)
            .with_context(|| format!("cannot create {}", run_dir.display()))?;
        let mut names: Vec<String> = g.counters.iter().map(|(c, _)| c.clone()).collect();
        names.push("power_w".into());
        names.push("energy_j".into());
        let mut tl = powerperf_format::timeline::Timeline::new(&names);
        for i in 0..g.t_ns.len() {
            let mut row: Vec<Option<f64>> = g.counters.iter().map(|(_, v)| v[i]).collect();
            row.push(Some(g.power_w[i]));
            row.push(Some(g.power_w[i] * g.dur_ns[i] as f64 * 1e-9));
            tl.push(g.t_ns[i], g.dur_ns[i], &row);
        }
        tl.write_parquet(&run_dir.join(TIMELINE))?;
        let mut events: Vec<EventRecord> = g
            .counters
            .iter()
            .map(|(c, v)| {
                let have: Vec<f64> = v.iter().flatten().copied().collect();
                EventRecord {
                    name: c.clone(),
                    backend: Backend::Import,
                    status: if have.is_empty() {
                        EventStatus::NotSupported
                    } else {
                        EventStatus::Counted
                    },
                    reason: have
                        .is_empty()
                        .then(|| format!("no value in {}", spec.file)),
                    column: Some(c.clone()),
                    total: (!have.is_empty()).then(|| have.iter().sum()),
                    unit: None,
                    scale: None,
                    running_ratio: None,
                }
            })
            .collect();
        events.push(EventRecord {
            name: "energy".into(),
            backend: Backend::Import,
            status: EventStatus::Counted,
            reason: None,
            column: Some("energy_j".into()),
            total: p.energy_j,
            unit: Some("J".into()),
            scale: None,
            running_ratio: None,
        });
        let duration_ns = (p.time_s.unwrap_or(0.0) * 1e9).round() as u64;
        let meta = RunMeta {
            run: RunInfo {
                id: name.clone(),
                command: vec![],
                workload: Some(p.workload.clone()),
                ended: Ending::Exited,
                exit_status: None,
                signal: None,
                signal_name: None,
                core_dumped: false,
                error: None,
                start_unix_ns: 0,
                start_monotonic_ns: 0,
                duration_ns,
                host: machine.host.clone().unwrap_or_else(|| spec.name.clone()),
                cpu_model: machine.cpu_model.clone().unwrap_or_default(),
                cpu_vendor: machine.cpu_vendor.clone(),
                cpu_family: machine.cpu_family,
                cpu_model_number: machine.cpu_model_number,
                kernel: String::new(),
                tool_version: env!("CARGO_PKG_VERSION").to_string(),
                rank: None,
                local_rank: None,
                node_sources: None,
                interval_ns: g.dur_ns.first().copied().unwrap_or(0),
                samples: g.t_ns.len() as u64,
                truncated: false,
                self_cpu_ns: None,
                timeline_sampler: None,
            },
            knobs: Knobs {
                core_freq_mhz: p.knobs.get("core_freq_mhz").copied(),
                mem_freq_mhz: p.knobs.get("mem_freq_mhz").copied(),
                threads: p.knobs.get("threads").map(|t| *t as u32),
                ..Knobs::default()
            },
            events,
            notes: vec![format!(
                "imported from {} by `powerperf import --as-runs` (spec {}): values as the dataset gives them, not measured by powerperf{}",
                imp.files.first().map(|f| f.display().to_string()).unwrap_or_default(),
                spec.path.display(),
                if spec.source.is_empty() { String::new() } else { format!("; source: {}", spec.source) }
            )],
            threads: vec![],
            pc_sampling: None,
            gpu_attribution: None,
            gpu_setting: None,
            power_devices: vec![],
        };
        meta.write(&run_dir)?;
        written.push(run_dir);
    }
    Ok(written)
}

#[cfg(test)]
mod tests;
