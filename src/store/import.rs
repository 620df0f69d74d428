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

use crate::store::set::{CounterKind, Point, SetMeta, TrainingSet, Unreliable, TARGETS};
use anyhow::{Context, Result};
use polars::prelude::{Column, CsvReadOptions, DataFrame, DataType, SerReader};
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
        if let Some(v) = powerperf_format::quantity::freq_with_unit(t) {
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

fn has_glob(s: &str) -> bool {
    s.contains(['*', '?', '['])
}

/// Expand `pattern` (a path or a glob) to the existing files it names, sorted.
fn expand(pattern: &Path) -> Vec<PathBuf> {
    let s = pattern.to_string_lossy();
    if has_glob(&s) {
        let mut v: Vec<PathBuf> = glob::glob(&s)
            .map(|g| g.filter_map(|p| p.ok()).filter(|p| p.is_file()).collect())
            .unwrap_or_default();
        v.sort();
        v
    } else if pattern.is_file() {
        vec![pattern.to_path_buf()]
    } else {
        Vec::new()
    }
}

/// Directories searched for a relative data file name, in order:
/// 1. `$POWERPERF_DATA_DIR`,
/// 2. `spec_dir`, the directory of the spec being imported: the bundled copy, for the specs
///    in the repository's `datasets/` (`datasets/README.md`),
/// 3. `../shared/datasets` relative to the current directory, then `shared/datasets` in each
///    further ancestor of it (`../../shared/datasets`, … — a git worktree under
///    `REPO/../wt/NAME` finds the same data),
/// 4. the same relative to the repository the binary was built from (the nearest ancestor of
///    the executable holding a `Cargo.toml`, then the source directory recorded at build
///    time, `CARGO_MANIFEST_DIR`).
///
/// Only directories that exist are returned, without duplicates.
pub fn data_search_dirs(spec_dir: Option<&Path>) -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = Vec::new();
    if let Ok(cwd) = std::env::current_dir() {
        roots.push(cwd);
    }
    if let Ok(exe) = std::env::current_exe() {
        if let Some(repo) = exe
            .ancestors()
            .skip(1)
            .find(|a| a.join("Cargo.toml").is_file())
        {
            roots.push(repo.to_path_buf());
        }
    }
    roots.push(PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(d) = std::env::var_os(DATA_DIR_ENV) {
        dirs.push(PathBuf::from(d));
    }
    if let Some(d) = spec_dir.filter(|d| d.is_dir()) {
        let d = d.canonicalize().unwrap_or_else(|_| d.to_path_buf());
        if !dirs.contains(&d) {
            dirs.push(d);
        }
    }
    for root in roots {
        for a in root.ancestors().skip(1) {
            let d = a.join("shared/datasets");
            if d.is_dir() {
                let d = d.canonicalize().unwrap_or(d);
                if !dirs.contains(&d) {
                    dirs.push(d);
                }
            }
        }
    }
    dirs
}

/// Resolve a data file name (or glob) from a spec to existing files.
///
/// An absolute name is used as it is. A relative name is tried, in order, in `near` (when
/// given: only its base name, in that directory), then under each of [`data_search_dirs`]
/// (`spec` is the spec file being imported: its directory holds the bundled copy); the first
/// place with at least one match wins.
///
/// # Errors
/// [`ImportError::NotFound`] listing every place tried.
pub fn resolve_data_file(
    name: &str,
    near: Option<&Path>,
    spec: Option<&Path>,
) -> Result<Vec<PathBuf>> {
    let p = Path::new(name);
    let mut tried = Vec::new();
    let mut candidates = Vec::new();
    if p.is_absolute() {
        candidates.push(p.to_path_buf());
    } else {
        if let (Some(dir), Some(base)) = (near, p.file_name()) {
            candidates.push(dir.join(base));
        }
        candidates.extend(
            data_search_dirs(spec.and_then(Path::parent))
                .into_iter()
                .map(|d| d.join(p)),
        );
    }
    for c in candidates {
        let found = expand(&c);
        if !found.is_empty() {
            tracing::info!(name, at = %c.display(), files = found.len(), "data file found");
            return Ok(found);
        }
        tracing::debug!(name, at = %c.display(), "no data file here");
        tried.push(c.display().to_string());
    }
    if tried.is_empty() {
        tried.push(format!("no data directory (${DATA_DIR_ENV} unset, no shared/datasets above the current directory or the binary)"));
    }
    Err(ImportError::NotFound {
        name: name.to_string(),
        tried: tried.join(", "),
    }
    .into())
}

/// A table read from one file, with what is needed for error messages.
struct Table {
    df: DataFrame,
    file: PathBuf,
    /// Line number of the first data row (1-based).
    first_line: usize,
}

impl Table {
    fn have(&self) -> String {
        self.df
            .get_column_names()
            .iter()
            .map(|s| s.as_str())
            .filter(|s| !s.is_empty())
            .map(|s| format!("`{s}`"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn column(&self, name: &str, role: &str) -> Result<&Column> {
        self.df.column(name).map_err(|_| {
            ImportError::MissingColumn {
                file: self.file.clone(),
                column: name.to_string(),
                role: role.to_string(),
                have: self.have(),
            }
            .into()
        })
    }

    /// Values of a column as quantities of `dim`, in its base unit. Numeric columns are
    /// scaled by `unit`; string columns are parsed with [`parse_quantity`].
    fn quantities(
        &self,
        name: &str,
        role: &str,
        dim: Dimension,
        unit: &str,
    ) -> Result<Vec<Option<f64>>> {
        let col = self.column(name, role)?;
        let factor = dim.factor(unit).map_err(anyhow::Error::msg)?;
        match col.dtype() {
            DataType::String => {
                let ca = col.str()?;
                ca.iter()
                    .enumerate()
                    .map(|(i, v)| match v {
                        None => Ok(None),
                        Some(s) if s.trim().is_empty() => Ok(None),
                        Some(s) => parse_quantity(s, dim, unit)
                            .and_then(|x| check_value(dim, role, x).map(|_| x))
                            .map(Some)
                            .map_err(|why| {
                                ImportError::BadValue {
                                    file: self.file.clone(),
                                    line: self.first_line + i,
                                    column: name.to_string(),
                                    value: s.to_string(),
                                    why,
                                }
                                .into()
                            }),
                    })
                    .collect()
            }
            DataType::Null => Ok(vec![None; col.len()]),
            dt if dt.is_primitive_numeric() || dt.is_bool() => {
                let c = col.cast(&DataType::Float64)?;
                c.f64()?
                    .iter()
                    .enumerate()
                    .map(|(i, v)| match v {
                        None => Ok(None),
                        Some(raw) => check_value(dim, role, raw * factor)
                            .map(|_| Some(raw * factor))
                            .map_err(|why| {
                                ImportError::BadValue {
                                    file: self.file.clone(),
                                    line: self.first_line + i,
                                    column: name.to_string(),
                                    value: show_number(raw),
                                    why,
                                }
                                .into()
                            }),
                    })
                    .collect()
            }
            dt => Err(anyhow::anyhow!(
                "{}: column `{name}` ({role}) has type {dt}, not numbers",
                self.file.display()
            )),
        }
    }

    /// Values of a column as text (numbers are formatted).
    fn strings(&self, name: &str, role: &str) -> Result<Vec<Option<String>>> {
        let col = self.column(name, role)?.cast(&DataType::String)?;
        Ok(col.str()?.iter().map(|v| v.map(str::to_string)).collect())
    }
}

fn separator_byte(fmt: &FormatSpec, spec: &Path) -> Result<u8> {
    let s = fmt.separator.as_deref().unwrap_or(",");
    let s = if s == "\\t" { "\t" } else { s };
    if s.len() != 1 {
        return Err(ImportError::Spec {
            spec: spec.to_path_buf(),
            why: format!("separator = {s:?} must be one byte"),
        }
        .into());
    }
    Ok(s.as_bytes()[0])
}

/// Read one delimited file with polars' CSV reader as `fmt` says.
fn read_table(
    path: &Path,
    fmt: &FormatSpec,
    spec: &Path,
    names_near: Option<&Path>,
) -> Result<Table> {
    let sep = separator_byte(fmt, spec)?;
    let skip = fmt.skip_lines.unwrap_or(0);
    let has_header = fmt.has_header.unwrap_or(true);
    let mut names: Option<Vec<String>> = fmt.column_names.clone();
    if let Some(f) = &fmt.column_names_file {
        let file = resolve_data_file(f, names_near, Some(spec))?.remove(0);
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("cannot read {}", file.display()))?;
        let mut v = names.unwrap_or_default();
        v.extend(
            text.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(str::to_string),
        );
        names = Some(v);
    }
    // With names given, a header line is skipped rather than parsed.
    let (polars_header, skip_lines) = match &names {
        Some(_) => (false, skip + usize::from(has_header)),
        None => (has_header, skip),
    };
    let comment = fmt.comment_prefix.clone();
    let opts = CsvReadOptions::default()
        .with_has_header(polars_header)
        .with_skip_lines(skip_lines)
        .with_infer_schema_length(None)
        .map_parse_options(move |o| {
            o.with_separator(sep)
                .with_comment_prefix(comment.as_deref())
        });
    let mut df = opts
        .try_into_reader_with_file_path(Some(path.to_path_buf()))
        .and_then(|r| r.finish())
        .with_context(|| {
            format!(
                "cannot read {} as a table separated by {:?}",
                path.display(),
                sep as char
            )
        })?;
    if let Some(names) = names {
        let width = df.width();
        if names.len() < width {
            // Trailing fields without a name (e.g. a trailing separator) must be empty.
            for c in &df.columns()[names.len()..] {
                if c.null_count() != c.len() {
                    return Err(anyhow::anyhow!(
                        "{}: rows have {width} fields but the spec names {} columns (column_names + column_names_file); name them all",
                        path.display(),
                        names.len()
                    ));
                }
            }
        } else if names.len() > width {
            return Err(anyhow::anyhow!(
                "{}: the spec names {} columns but rows have {width} fields",
                path.display(),
                names.len()
            ));
        }
        let mut all: Vec<String> = names;
        all.extend((all.len()..width).map(|i| format!("_unnamed_{i}")));
        df.set_column_names(&all)
            .with_context(|| format!("{}: column names", path.display()))?;
    } else if let Some(prefix) = &fmt.header_prefix {
        if let Some(first) = df.get_column_names().first().map(|s| s.to_string()) {
            if let Some(stripped) = first.strip_prefix(prefix.as_str()) {
                df.rename(&first, stripped.into())?;
            }
        }
    }
    Ok(Table {
        df,
        file: path.to_path_buf(),
        first_line: skip_lines + usize::from(polars_header) + 1,
    })
}

fn workload_from_name(file: &Path, pattern: &str) -> Result<String> {
    let base = file
        .file_name()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_default();
    let (pre, post) = pattern.split_once("{workload}").unwrap_or((pattern, ""));
    base.strip_prefix(pre)
        .and_then(|r| r.strip_suffix(post))
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .ok_or_else(|| {
            ImportError::WorkloadFromFile {
                file: base.clone(),
                pattern: pattern.to_string(),
            }
            .into()
        })
}

/// Per-row values read from one table, before rows become points.
struct Rows {
    workload: Vec<String>,
    repeat: Vec<Option<i64>>,
    knobs: Vec<(String, Vec<Option<f64>>)>,
    counters: Vec<(String, Vec<Option<f64>>)>,
}

fn read_rows(spec: &ImportSpec, t: &Table) -> Result<Rows> {
    let n = t.df.height();
    let workload = match (&spec.workload, &spec.workload_from_file) {
        (Some(col), _) => t
            .strings(col, "workload id")?
            .into_iter()
            .enumerate()
            .map(|(i, w)| {
                w.filter(|s| !s.trim().is_empty()).ok_or_else(|| {
                    anyhow::Error::from(ImportError::BadValue {
                        file: t.file.clone(),
                        line: t.first_line + i,
                        column: col.clone(),
                        value: String::new(),
                        why: "is empty; every row needs a workload id".into(),
                    })
                })
            })
            .collect::<Result<Vec<_>>>()?,
        (None, Some(p)) => vec![workload_from_name(&t.file, p)?; n],
        (None, None) => unreachable!("checked by ImportSpec::check"),
    };
    let repeat = match &spec.repeat {
        Some(col) => t
            .quantities(col, "repeat", Dimension::Count, "")?
            .into_iter()
            .map(|v| v.map(|x| x as i64))
            .collect(),
        None => vec![None; n],
    };
    let mut knobs = Vec::new();
    for k in &spec.knobs {
        let dim = Dimension::of_knob(&k.name);
        let unit = k
            .unit
            .clone()
            .unwrap_or_else(|| dim.base_unit().to_string());
        let vals = t.quantities(&k.column, &format!("knob {}", k.name), dim, &unit)?;
        if let Some(i) = vals.iter().position(Option::is_none) {
            return Err(ImportError::BadValue {
                file: t.file.clone(),
                line: t.first_line + i,
                column: k.column.clone(),
                value: String::new(),
                why: format!("is empty; every row needs a value of knob {}", k.name),
            }
            .into());
        }
        knobs.push((k.name.clone(), vals));
    }
    let mut counters = Vec::new();
    for c in &spec.counters {
        let name = c.name.clone().unwrap_or_else(|| c.column.clone());
        counters.push((
            name,
            t.quantities(&c.column, "counter", Dimension::Count, "")?,
        ));
    }
    Ok(Rows {
        workload,
        repeat,
        knobs,
        counters,
    })
}

fn target_values(
    spec: &ImportSpec,
    t: &Table,
    name: &str,
    dim: Dimension,
) -> Result<Option<Vec<Option<f64>>>> {
    match spec.target_spec(name) {
        Some(TargetSpec {
            column: Some(col),
            unit,
            ..
        }) => Ok(Some(t.quantities(
            col,
            name,
            dim,
            unit.as_deref().unwrap_or(dim.base_unit()),
        )?)),
        _ => Ok(None),
    }
}

fn points_from_rows(spec: &ImportSpec, t: &Table) -> Result<Vec<Point>> {
    let rows = read_rows(spec, t)?;
    let time = target_values(spec, t, "time", Dimension::Time)?;
    let power = target_values(spec, t, "power", Dimension::Power)?;
    let energy = target_values(spec, t, "energy", Dimension::Energy)?;
    let derived = |name: &str| {
        spec.target_spec(name)
            .and_then(|s| s.derive.clone())
            .is_some()
    };
    let at = |v: &Option<Vec<Option<f64>>>, i: usize| v.as_ref().and_then(|v| v[i]);
    let mut points = Vec::with_capacity(rows.workload.len());
    for i in 0..rows.workload.len() {
        let (mut ti, mut pi, mut ei) = (at(&time, i), at(&power, i), at(&energy, i));
        if derived("energy") {
            ei = ti.zip(pi).map(|(t, p)| t * p);
        }
        if derived("power") {
            pi = ei.zip(ti).map(|(e, t)| e / t);
        }
        if derived("time") {
            ti = ei.zip(pi).map(|(e, p)| e / p);
        }
        points.push(Point {
            workload: rows.workload[i].clone(),
            knobs: rows
                .knobs
                .iter()
                .map(|(k, v)| (k.clone(), v[i].unwrap_or(f64::NAN)))
                .collect(),
            repeat: rows.repeat[i],
            time_s: ti,
            power_w: pi,
            energy_j: ei,
            counters: rows
                .counters
                .iter()
                .filter_map(|(k, v)| v[i].map(|x| (k.clone(), x)))
                .collect(),
            static_features: BTreeMap::new(),
        });
    }
    Ok(points)
}

fn median(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    })
}

fn points_from_timeline(
    spec: &ImportSpec,
    t: &Table,
    notes: &mut Vec<String>,
    first_point: usize,
) -> Result<(Vec<Point>, Vec<SampleGroup>)> {
    let tl = spec
        .timeline
        .as_ref()
        .expect("checked: timeline layout has [timeline]");
    let rows = read_rows(spec, t)?;
    let ts_unit = tl.timestamp_unit.as_deref().unwrap_or("ns");
    let ts_factor = Dimension::Time
        .factor(ts_unit)
        .map_err(anyhow::Error::msg)?;
    // Integer timestamps stay integers until differenced (ns since the epoch exceed f64's
    // 53-bit mantissa).
    let ts_col = t.column(&tl.timestamp, "timeline timestamp")?;
    let ts: Vec<Option<f64>> = if ts_col.dtype().is_integer() {
        let c = ts_col.cast(&DataType::Int64)?;
        let v: Vec<Option<i64>> = c.i64()?.iter().collect();
        let base = v.iter().flatten().min().copied().unwrap_or(0);
        v.into_iter()
            .map(|x| x.map(|x| (x - base) as f64 * ts_factor))
            .collect()
    } else {
        t.quantities(
            &tl.timestamp,
            "timeline timestamp",
            Dimension::Time,
            ts_unit,
        )?
    };
    let power = t.quantities(
        &tl.power,
        "timeline power",
        Dimension::Power,
        tl.power_unit.as_deref().unwrap_or("W"),
    )?;
    for (what, col, v) in [
        ("timestamp", &tl.timestamp, &ts),
        ("power", &tl.power, &power),
    ] {
        if let Some(i) = v.iter().position(Option::is_none) {
            return Err(ImportError::BadValue {
                file: t.file.clone(),
                line: t.first_line + i,
                column: col.clone(),
                value: String::new(),
                why: format!("is empty; every sample needs a {what}"),
            }
            .into());
        }
    }
    // Group rows by (workload, knob values, repeat), in first-seen order.
    type Key = (String, Vec<u64>, Option<i64>);
    let mut order: Vec<Key> = Vec::new();
    let mut groups: HashMap<Key, Vec<usize>> = HashMap::new();
    for i in 0..rows.workload.len() {
        let key: Key = (
            rows.workload[i].clone(),
            rows.knobs
                .iter()
                .map(|(_, v)| v[i].unwrap_or(f64::NAN).to_bits())
                .collect(),
            rows.repeat[i],
        );
        let g = groups.entry(key.clone()).or_default();
        if g.is_empty() {
            order.push(key);
        }
        g.push(i);
    }
    for idx in groups.values_mut() {
        idx.sort_by(|&a, &b| ts[a].unwrap().total_cmp(&ts[b].unwrap()));
    }
    let period = match tl.sample_period_s {
        Some(p) => p,
        None => {
            let mut diffs: Vec<f64> = groups
                .values()
                .flat_map(|idx| {
                    idx.windows(2)
                        .map(|w| ts[w[1]].unwrap() - ts[w[0]].unwrap())
                })
                .filter(|d| *d > 0.0)
                .collect();
            let p = median(&mut diffs).ok_or_else(|| {
                spec.err("no group has two samples, so the sample period is unknown; set [timeline] sample_period_s")
            })?;
            notes.push(format!(
                "{}: sample period {p:.6} s (median interval between samples)",
                t.file.display()
            ));
            p
        }
    };
    let mut points = Vec::with_capacity(order.len());
    let mut samples = Vec::with_capacity(order.len());
    let source_column = |name: &str| {
        spec.counters
            .iter()
            .find(|c| c.name.as_deref().unwrap_or(&c.column) == name)
            .map_or_else(|| name.to_string(), |c| c.column.clone())
    };
    for key in order {
        let idx = &groups[&key];
        let first = idx[0];
        let mut energy = 0.0;
        let mut prev: Option<f64> = None;
        let mut g = SampleGroup {
            point: first_point + points.len(),
            t_ns: Vec::with_capacity(idx.len()),
            dur_ns: Vec::with_capacity(idx.len()),
            power_w: Vec::with_capacity(idx.len()),
            counters: rows
                .counters
                .iter()
                .map(|(name, v)| (source_column(name), idx.iter().map(|&i| v[i]).collect()))
                .collect(),
        };
        let t0 = ts[first].unwrap();
        for &i in idx {
            let ti = ts[i].unwrap();
            let dt = prev.map_or(period, |p| ti - p);
            energy += power[i].unwrap() * dt;
            prev = Some(ti);
            g.t_ns.push(((ti - t0 + period) * 1e9).round() as u64);
            g.dur_ns.push((dt * 1e9).round() as u64);
            g.power_w.push(power[i].unwrap());
        }
        samples.push(g);
        let time = ts[*idx.last().unwrap()].unwrap() - ts[first].unwrap() + period;
        let mut counters = BTreeMap::new();
        for (name, v) in &rows.counters {
            let vals: Vec<f64> = idx.iter().filter_map(|&i| v[i]).collect();
            if !vals.is_empty() {
                counters.insert(name.clone(), vals.iter().sum());
            }
        }
        points.push(Point {
            workload: key.0.clone(),
            knobs: rows
                .knobs
                .iter()
                .map(|(k, v)| (k.clone(), v[first].unwrap_or(f64::NAN)))
                .collect(),
            repeat: key.2,
            time_s: Some(time),
            power_w: Some(energy / time),
            energy_j: Some(energy),
            counters,
            static_features: BTreeMap::new(),
        });
    }
    Ok((points, samples))
}

fn feature_name(prefix: &str, name: &str) -> String {
    let clean: String = name
        .chars()
        .map(|c| {
            if c == '.' || c == '-' || c == ' ' {
                '_'
            } else {
                c
            }
        })
        .collect();
    format!("{prefix}{clean}")
}

/// Static features per workload id, aggregated over the rows with the same key.
fn read_static(
    spec: &ImportSpec,
    s: &StaticSpec,
    near: Option<&Path>,
) -> Result<(Vec<String>, HashMap<String, BTreeMap<String, f64>>, PathBuf)> {
    let file = resolve_data_file(&s.file, near, Some(&spec.path))?.remove(0);
    let t = read_table(&file, &s.format, &spec.path, file.parent())?;
    let keys = t.strings(&s.key, "static_features key")?;
    let mut keep = vec![true; keys.len()];
    for (col, want) in &s.filter {
        for (k, v) in keep
            .iter_mut()
            .zip(t.strings(col, "static_features where")?)
        {
            *k &= v.as_deref() == Some(want.as_str());
        }
    }
    let feature_cols: Vec<String> = match &s.features {
        Some(f) => f.clone(),
        None => {
            t.df.columns()
                .iter()
                .filter(|c| c.dtype().is_primitive_numeric())
                .map(|c| c.name().to_string())
                .filter(|n| *n != s.key && !s.filter.contains_key(n) && !n.starts_with("_unnamed_"))
                .collect()
        }
    };
    let prefix = s.prefix.clone().unwrap_or_default();
    let names: Vec<String> = feature_cols
        .iter()
        .map(|c| feature_name(&prefix, c))
        .collect();
    let mut seen = std::collections::HashSet::new();
    for n in &names {
        if !seen.insert(n) {
            return Err(spec.err(format!(
                "[static_features]: two columns become the feature name `{n}`"
            )));
        }
    }
    let mut values = Vec::new();
    for c in &feature_cols {
        values.push(t.quantities(c, "static feature", Dimension::Count, "")?);
    }
    let aggregate = s.aggregate.as_deref().unwrap_or("sum");
    let mut acc: HashMap<String, (usize, Vec<f64>)> = HashMap::new();
    for (i, key) in keys.iter().enumerate() {
        let (Some(key), true) = (key, keep[i]) else {
            continue;
        };
        let e = acc
            .entry(key.clone())
            .or_insert_with(|| (0, vec![0.0; names.len()]));
        for (j, v) in values.iter().enumerate() {
            let x = v[i].unwrap_or(0.0);
            match aggregate {
                "first" if e.0 > 0 => {}
                "first" => e.1[j] = x,
                _ => e.1[j] += x,
            }
        }
        e.0 += 1;
    }
    let map = acc
        .into_iter()
        .map(|(k, (n, v))| {
            let v = if aggregate == "mean" {
                v.into_iter().map(|x| x / n as f64).collect()
            } else {
                v
            };
            (k, names.iter().cloned().zip(v).collect())
        })
        .collect();
    Ok((names, map, file))
}

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
    use super::run::{
        Backend, Ending, EventRecord, EventStatus, Knobs, RunInfo, RunMeta, TIMELINE,
    };
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
        };
        meta.write(&run_dir)?;
        written.push(run_dir);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_with_units() {
        assert_eq!(
            parse_quantity("2.20GHz", Dimension::Frequency, "MHz").unwrap(),
            2200.0
        );
        assert_eq!(
            parse_quantity("945", Dimension::Frequency, "MHz").unwrap(),
            945.0
        );
        assert_eq!(
            parse_quantity("1.5", Dimension::Frequency, "GHz").unwrap(),
            1500.0
        );
        assert_eq!(parse_quantity("450ms", Dimension::Time, "s").unwrap(), 0.45);
        assert_eq!(
            parse_quantity("2", Dimension::Energy, "Wh").unwrap(),
            7200.0
        );
        assert_eq!(
            parse_quantity("3kWh", Dimension::Energy, "J").unwrap(),
            1.08e7
        );
        assert_eq!(
            parse_quantity("250mW", Dimension::Power, "W").unwrap(),
            0.25
        );
        assert!(parse_quantity("fast", Dimension::Frequency, "MHz")
            .unwrap_err()
            .contains("GHz"));
        assert!(Dimension::Time
            .factor("fortnight")
            .unwrap_err()
            .contains("`ms`"));
    }

    #[test]
    fn workload_from_file_name() {
        assert_eq!(
            workload_from_name(Path::new("/x/data-bt.csv"), "data-{workload}.csv").unwrap(),
            "bt"
        );
        assert!(workload_from_name(Path::new("/x/other.csv"), "data-{workload}.csv").is_err());
    }

    fn spec_from(text: &str, dir: &Path) -> Result<ImportSpec> {
        let p = dir.join("spec.toml");
        std::fs::write(&p, text).unwrap();
        ImportSpec::load(&p)
    }

    #[test]
    fn rows_layout_with_units_and_derivation() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("m.csv"),
            "#app;Cores;Freq;Time[ms];Power;x;\na;1;2.20GHz;1500;10;7;\na;2;1.1GHz;500;20;;\n",
        )
        .unwrap();
        let spec = spec_from(
            r##"
name = "t"
file = "m.csv"
separator = ";"
header_prefix = "#"
workload = "app"
[[knob]]
name = "threads"
column = "Cores"
[[knob]]
name = "core_freq_mhz"
column = "Freq"
[time]
column = "Time[ms]"
unit = "ms"
[power]
column = "Power"
unit = "W"
[energy]
derive = "power*time"
[[counter]]
column = "x"
name = "x_count"
kind = "count"
[constant_knobs]
mem_freq_mhz = 800
[[unreliable]]
targets = ["time_s"]
workloads = ["*"]
reason = "test"
"##,
            dir.path(),
        )
        .unwrap();
        let imp = import(&spec, Some(&dir.path().join("m.csv"))).unwrap();
        let s = imp.set;
        assert_eq!(s.points.len(), 2);
        let p = &s.points[0];
        assert_eq!(p.workload, "a");
        assert_eq!(p.knobs["core_freq_mhz"], 2200.0);
        assert_eq!(p.knobs["threads"], 1.0);
        assert_eq!(p.knobs["mem_freq_mhz"], 800.0);
        assert_eq!(p.time_s, Some(1.5));
        assert_eq!(p.energy_j, Some(15.0));
        assert_eq!(p.counters["x_count"], 7.0);
        assert!(s.points[1].counters.is_empty());
        assert_eq!(s.points[1].knobs["core_freq_mhz"], 1100.0);
        assert_eq!(
            s.meta.knobs,
            vec!["threads", "core_freq_mhz", "mem_freq_mhz"]
        );
        assert_eq!(s.meta.source, "import:t");
        assert!(!s.meta.is_reliable("time_s", "a"));
        assert!(s.meta.is_reliable("power_w", "a"));
    }

    #[test]
    fn timeline_layout_sums_intervals() {
        let dir = tempfile::tempdir().unwrap();
        // Two samples 1 s apart for run 1 (period 1 s), one sample for run 2.
        std::fs::write(
            dir.path().join("t.tsv"),
            "#Timestamp\tBench\tRun\tF\tP\tC\n1000000000\tb\t1\t1000\t2\t5\n2000000000\tb\t1\t1000\t4\t6\n9000000000\tb\t2\t1000\t3\t1\n",
        )
        .unwrap();
        let spec = spec_from(
            r##"
name = "tl"
file = "t.tsv"
separator = "\t"
header_prefix = "#"
layout = "timeline"
workload = "Bench"
repeat = "Run"
[[knob]]
name = "core_freq_mhz"
column = "F"
[timeline]
timestamp = "Timestamp"
power = "P"
[[counter]]
column = "C"
kind = "count"
"##,
            dir.path(),
        )
        .unwrap();
        let s = import(&spec, Some(&dir.path().join("t.tsv"))).unwrap().set;
        assert_eq!(s.points.len(), 2);
        let p = &s.points[0];
        assert_eq!(p.repeat, Some(1));
        assert_eq!(p.time_s, Some(2.0)); // 1 s span + 1 s period
        assert_eq!(p.energy_j, Some(6.0)); // 2 W × 1 s + 4 W × 1 s
        assert_eq!(p.power_w, Some(3.0));
        assert_eq!(p.counters["C"], 11.0);
        assert_eq!(s.points[1].time_s, Some(1.0));
        assert_eq!(s.points[1].energy_j, Some(3.0));
    }

    #[test]
    fn missing_column_names_column_file_and_columns() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("m.csv"), "app,f,t\na,1,2\n").unwrap();
        let spec = spec_from(
            "name = \"t\"\nfile = \"m.csv\"\nworkload = \"app\"\n[[knob]]\nname = \"core_freq_mhz\"\ncolumn = \"sm_clock\"\n",
            dir.path(),
        )
        .unwrap();
        let err = import(&spec, Some(&dir.path().join("m.csv"))).unwrap_err();
        let msg = format!("{err:#}");
        assert!(
            msg.contains("`sm_clock`") && msg.contains("m.csv") && msg.contains("`app`, `f`, `t`"),
            "{msg}"
        );
    }

    #[test]
    fn bad_value_names_line() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("m.csv"), "app,f\na,1GHz\nb,fast\n").unwrap();
        let spec = spec_from(
            "name = \"t\"\nfile = \"m.csv\"\nworkload = \"app\"\n[[knob]]\nname = \"core_freq_mhz\"\ncolumn = \"f\"\n",
            dir.path(),
        )
        .unwrap();
        let msg = format!(
            "{:#}",
            import(&spec, Some(&dir.path().join("m.csv"))).unwrap_err()
        );
        assert!(msg.contains("line 3") && msg.contains("`fast`"), "{msg}");
    }

    #[test]
    fn inconsistent_specs_are_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let e = spec_from("name = \"t\"\nfile = \"m.csv\"\n", dir.path()).unwrap_err();
        assert!(format!("{e:#}").contains("workload"));
        let e = spec_from(
            "name = \"t\"\nfile = \"m.csv\"\nworkload = \"a\"\n[energy]\nderive = \"power*time\"\n",
            dir.path(),
        )
        .unwrap_err();
        assert!(format!("{e:#}").contains("needs [power]"), "{e:#}");
        let e = spec_from(
            "name = \"t\"\nfile = \"m.csv\"\nworkload = \"a\"\nsepartor = \";\"\n",
            dir.path(),
        )
        .unwrap_err();
        assert!(
            format!("{e:#}").contains("line 4: unknown key `separtor`"),
            "{e:#}"
        );
    }
}
