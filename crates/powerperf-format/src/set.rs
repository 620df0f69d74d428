//! A training set: `SET/set.toml` (what the set holds) and `SET/points.parquet` (one row per
//! workload, knob values and repeat). This is the contract between `import`, `collect`
//! (a collected run is a member of a set), `fit`, `evaluate`, `predict` and `plan`.
//!
//! Columns of `points.parquet`: `workload` (str), `repeat` (i64, may be null), one f64 column
//! per knob (`core_freq_mhz`, `mem_freq_mhz`, `threads`), `time_s`, `power_w`, `energy_j`
//! (f64, null where not measured), then one f64 column per counter and per static feature,
//! named as in `set.toml`.

use anyhow::{Context, Result};
use polars::prelude::{Column, DataFrame, DataType, ParquetReader, ParquetWriter, SerReader};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// File name of the set metadata inside a set directory.
pub const SET_TOML: &str = "set.toml";
/// File name of the points table inside a set directory.
pub const POINTS: &str = "points.parquet";

/// Errors of reading and writing a training set.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SetError {
    /// `points.parquet` lacks a column that `set.toml` names.
    #[error("{file}: no column `{column}` (set.toml names it as a {role}); the file has: {have}. Fix: rewrite the set with `powerperf import` or correct set.toml")]
    MissingColumn {
        file: PathBuf,
        column: String,
        role: &'static str,
        have: String,
    },
    /// A point carries a knob, counter or static feature that `set.toml` does not declare.
    #[error("point {index} (workload `{workload}`) has {role} `{name}` that the set's meta does not list; add it to SetMeta::{field}")]
    Undeclared {
        index: usize,
        workload: String,
        role: &'static str,
        name: String,
        field: &'static str,
    },
    /// Two columns of the set would have the same name.
    #[error("column name `{0}` is used twice (as a knob, target, counter or static feature); rename one")]
    DuplicateColumn(String),
}

/// Targets a model predicts. Units: seconds, watts, joules.
pub const TARGETS: [&str; 3] = ["time_s", "power_w", "energy_j"];

/// How a counter column is to be read when features are built from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CounterKind {
    /// An event count over the whole measurement (e.g. instructions). Features divide it by
    /// cycles (when the set has a cycles counter) or by time.
    Count,
    /// Already a rate or an activity fraction (e.g. DCGM `sm_active`, 0..1, or bytes/s).
    Rate,
}

/// One measurement: a (workload, knob values, repeat) with its targets and counters.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Point {
    pub workload: String,
    /// Knob values by knob name (`core_freq_mhz`, `mem_freq_mhz`, `threads`).
    pub knobs: BTreeMap<String, f64>,
    pub repeat: Option<i64>,
    /// Run time, seconds.
    pub time_s: Option<f64>,
    /// Mean power, watts.
    pub power_w: Option<f64>,
    /// Energy, joules.
    pub energy_j: Option<f64>,
    /// Counter values by counter name (see [`SetMeta::counters`] for their kind).
    pub counters: BTreeMap<String, f64>,
    /// Static features known before running (e.g. PTX instruction counts), by name.
    pub static_features: BTreeMap<String, f64>,
}

impl Point {
    /// The value of a target by its name in [`TARGETS`].
    pub fn target(&self, name: &str) -> Option<f64> {
        match name {
            "time_s" => self.time_s,
            "power_w" => self.power_w,
            "energy_j" => self.energy_j,
            _ => None,
        }
    }
}

/// Targets that must not be trusted for some workloads (e.g. the V100 sweep's copied
/// `run_time` series).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Unreliable {
    /// One of [`TARGETS`].
    pub target: String,
    /// Workloads whose value of this target is unreliable. `["*"]` means all.
    pub workloads: Vec<String>,
    /// Why (shown to users).
    pub reason: String,
}

/// `SET/set.toml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct SetMeta {
    /// Where the points came from: `collect` or `import:<spec name>`.
    pub source: String,
    /// A human description (the dataset, its public name and licence).
    #[serde(default)]
    pub description: String,
    /// Knob names present as columns, e.g. `["core_freq_mhz", "mem_freq_mhz"]`.
    pub knobs: Vec<String>,
    /// Targets that have values in this set.
    pub targets: Vec<String>,
    /// Counter columns and how to read them.
    #[serde(default)]
    pub counters: BTreeMap<String, CounterKind>,
    /// Static feature columns (known before running).
    #[serde(default)]
    pub static_features: Vec<String>,
    /// Targets unreliable for some workloads.
    #[serde(default)]
    pub unreliable: Vec<Unreliable>,
    /// The device each knob belongs to: `cpu`, or `gpu<i>` for GPU `i` (`gpu0`). A knob
    /// not listed (every knob of a set written before this field) is on an unknown device.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub knob_devices: BTreeMap<String, String>,
}

pub use crate::device::canonical_device;

impl SetMeta {
    /// Parse the text of a `set.toml` (what [`TrainingSet::read`] does after reading it).
    ///
    /// # Errors
    /// TOML that is not a set's meta (the toml crate's error, with line and column).
    pub fn from_toml(text: &str) -> Result<Self, toml::de::Error> {
        toml::from_str(text)
    }

    /// Whether `target` is trusted for `workload`.
    pub fn is_reliable(&self, target: &str, workload: &str) -> bool {
        !self
            .unreliable
            .iter()
            .any(|u| u.target == target && u.workloads.iter().any(|w| w == "*" || w == workload))
    }
}

/// A training set in memory.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TrainingSet {
    pub meta: SetMeta,
    pub points: Vec<Point>,
}

/// The largest set.toml read (one column description per feature and target).
pub const MAX_SET_TOML_BYTES: u64 = 16 << 20;

impl TrainingSet {
    /// Workload names in first-seen order.
    pub fn workloads(&self) -> Vec<String> {
        let mut seen = Vec::new();
        for p in &self.points {
            if !seen.contains(&p.workload) {
                seen.push(p.workload.clone());
            }
        }
        seen
    }

    /// Distinct values of knob `name` over all points, ascending (NaN-free). Empty when no point
    /// has the knob.
    pub fn knob_values(&self, name: &str) -> Vec<f64> {
        distinct_sorted(
            self.points
                .iter()
                .filter_map(|p| p.knobs.get(name).copied()),
        )
    }

    /// Distinct values of knob `name` over the points of `workload`, ascending.
    pub fn knob_values_of(&self, workload: &str, name: &str) -> Vec<f64> {
        distinct_sorted(
            self.points
                .iter()
                .filter(|p| p.workload == workload)
                .filter_map(|p| p.knobs.get(name).copied()),
        )
    }

    /// The reference setting of `workload`: the maximum value of every knob over its points
    /// (docs/architecture.md, "Slowdown is always measured against the maximum setting of every knob").
    pub fn reference_knobs(&self, workload: &str) -> BTreeMap<String, f64> {
        let mut out: BTreeMap<String, f64> = BTreeMap::new();
        for p in self.points.iter().filter(|p| p.workload == workload) {
            for (k, &v) in &p.knobs {
                let e = out.entry(k.clone()).or_insert(v);
                if v > *e {
                    *e = v;
                }
            }
        }
        out
    }

    /// The points of one workload, in set order.
    pub fn points_of<'a>(&'a self, workload: &'a str) -> impl Iterator<Item = &'a Point> + 'a {
        self.points.iter().filter(move |p| p.workload == workload)
    }

    /// A set with the same meta holding only the points `keep` accepts.
    pub fn filter(&self, mut keep: impl FnMut(&Point) -> bool) -> TrainingSet {
        TrainingSet {
            meta: self.meta.clone(),
            points: self.points.iter().filter(|p| keep(p)).cloned().collect(),
        }
    }

    /// Counter names of the set (the keys of [`SetMeta::counters`]), sorted.
    pub fn counter_names(&self) -> Vec<String> {
        self.meta.counters.keys().cloned().collect()
    }

    /// One point per (workload, knob values): the mean over repeats.
    ///
    /// Targets and counters are arithmetic means over the repeats that have a value (a target
    /// no repeat measured stays `None`; a counter no repeat has stays absent). Static features
    /// are taken from the first repeat (they do not vary between runs). `repeat` becomes `None`.
    /// Groups keep the order in which they are first seen. This is docs/architecture.md's definition of
    /// a point for held-out evaluation ("A point is the mean over repeats of one (workload,
    /// knob values)").
    pub fn means(&self) -> TrainingSet {
        type Key = (String, Vec<(String, u64)>);
        let mut order: Vec<Key> = Vec::new();
        let mut groups: std::collections::HashMap<Key, Vec<&Point>> =
            std::collections::HashMap::new();
        for p in &self.points {
            let key: Key = (
                p.workload.clone(),
                p.knobs
                    .iter()
                    .map(|(k, v)| (k.clone(), v.to_bits()))
                    .collect(),
            );
            let g = groups.entry(key.clone()).or_default();
            if g.is_empty() {
                order.push(key);
            }
            g.push(p);
        }
        let points = order
            .into_iter()
            .map(|key| {
                let members = &groups[&key];
                let first = members[0];
                let mean_of = |f: &dyn Fn(&Point) -> Option<f64>| -> Option<f64> {
                    let vals: Vec<f64> = members.iter().filter_map(|p| f(p)).collect();
                    (!vals.is_empty()).then(|| vals.iter().sum::<f64>() / vals.len() as f64)
                };
                let mut counters = BTreeMap::new();
                let names: std::collections::BTreeSet<&String> =
                    members.iter().flat_map(|p| p.counters.keys()).collect();
                for name in names {
                    if let Some(m) = mean_of(&|p: &Point| p.counters.get(name).copied()) {
                        counters.insert(name.clone(), m);
                    }
                }
                Point {
                    workload: first.workload.clone(),
                    knobs: first.knobs.clone(),
                    repeat: None,
                    time_s: mean_of(&|p: &Point| p.time_s),
                    power_w: mean_of(&|p: &Point| p.power_w),
                    energy_j: mean_of(&|p: &Point| p.energy_j),
                    counters,
                    static_features: first.static_features.clone(),
                }
            })
            .collect();
        TrainingSet {
            meta: self.meta.clone(),
            points,
        }
    }

    /// Column names of `points.parquet` in order: `workload`, `repeat`, knobs, targets,
    /// counters, static features.
    ///
    /// # Errors
    /// [`SetError::DuplicateColumn`] when two of them share a name.
    pub fn column_names(&self) -> Result<Vec<String>, SetError> {
        let mut cols: Vec<String> = vec!["workload".into(), "repeat".into()];
        cols.extend(self.meta.knobs.iter().cloned());
        cols.extend(TARGETS.iter().map(|s| s.to_string()));
        cols.extend(self.meta.counters.keys().cloned());
        cols.extend(self.meta.static_features.iter().cloned());
        let mut seen = std::collections::HashSet::new();
        for c in &cols {
            if !seen.insert(c.as_str()) {
                return Err(SetError::DuplicateColumn(c.clone()));
            }
        }
        Ok(cols)
    }

    /// The points as a polars table with the columns of `points.parquet` (module docs).
    ///
    /// # Errors
    /// [`SetError::Undeclared`] when a point has a knob, counter or static feature that the
    /// meta does not list; [`SetError::DuplicateColumn`].
    pub fn to_dataframe(&self) -> Result<DataFrame> {
        self.column_names()?;
        for (i, p) in self.points.iter().enumerate() {
            let undeclared = |role, name: &String, field| SetError::Undeclared {
                index: i,
                workload: p.workload.clone(),
                role,
                name: name.clone(),
                field,
            };
            if let Some(k) = p.knobs.keys().find(|k| !self.meta.knobs.contains(k)) {
                return Err(undeclared("knob", k, "knobs").into());
            }
            if let Some(k) = p
                .counters
                .keys()
                .find(|k| !self.meta.counters.contains_key(*k))
            {
                return Err(undeclared("counter", k, "counters").into());
            }
            if let Some(k) = p
                .static_features
                .keys()
                .find(|k| !self.meta.static_features.contains(k))
            {
                return Err(undeclared("static feature", k, "static_features").into());
            }
        }
        let n = self.points.len();
        let f64_col = |name: &str, get: &dyn Fn(&Point) -> Option<f64>| -> Column {
            Column::new(
                name.into(),
                self.points.iter().map(get).collect::<Vec<Option<f64>>>(),
            )
        };
        let mut cols: Vec<Column> = vec![
            Column::new(
                "workload".into(),
                self.points
                    .iter()
                    .map(|p| p.workload.as_str())
                    .collect::<Vec<&str>>(),
            ),
            Column::new(
                "repeat".into(),
                self.points
                    .iter()
                    .map(|p| p.repeat)
                    .collect::<Vec<Option<i64>>>(),
            ),
        ];
        for k in &self.meta.knobs {
            cols.push(f64_col(k, &|p| p.knobs.get(k).copied()));
        }
        for t in TARGETS {
            cols.push(f64_col(t, &|p| p.target(t)));
        }
        for c in self.meta.counters.keys() {
            cols.push(f64_col(c, &|p| p.counters.get(c).copied()));
        }
        for s in &self.meta.static_features {
            cols.push(f64_col(s, &|p| p.static_features.get(s).copied()));
        }
        Ok(DataFrame::new(n, cols)?)
    }

    /// Write the set into directory `dir` (created if needed): `dir/set.toml` (the meta, TOML)
    /// and `dir/points.parquet` (one row per point, columns in the module docs; a missing
    /// value is a null).
    ///
    /// # Errors
    /// As [`TrainingSet::to_dataframe`]; I/O errors with the path.
    pub fn write(&self, dir: &Path) -> Result<()> {
        let mut df = self.to_dataframe()?;
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create set directory {}", dir.display()))?;
        let meta_path = dir.join(SET_TOML);
        let text = toml::to_string_pretty(&self.meta).context("serialising set.toml")?;
        std::fs::write(&meta_path, text)
            .with_context(|| format!("cannot write {}", meta_path.display()))?;
        let pq = dir.join(POINTS);
        let tmp = dir.join(".points.parquet.tmp");
        let file = std::fs::File::create(&tmp)
            .with_context(|| format!("cannot create {}", tmp.display()))?;
        ParquetWriter::new(file)
            .finish(&mut df)
            .with_context(|| format!("cannot write {}", pq.display()))?;
        std::fs::rename(&tmp, &pq).with_context(|| format!("cannot write {}", pq.display()))?;
        Ok(())
    }

    /// Read a set written by [`TrainingSet::write`] from directory `dir` (`set.toml` at
    /// most [`MAX_SET_TOML_BYTES`]; both files through [`powerperf_node::safe_file::open_regular`]).
    ///
    /// Every column named in `set.toml` must be present in `points.parquet` (any numeric
    /// type; it is cast to f64); nulls become absent values.
    ///
    /// # Errors
    /// A missing or invalid `set.toml` or `points.parquet` (with the path);
    /// [`SetError::MissingColumn`] naming the column, the file and the columns it has.
    pub fn read(dir: &Path) -> Result<TrainingSet> {
        let meta_path = dir.join(SET_TOML);
        // files a user may have written: no link, no FIFO, a stated size (issue 38)
        let text = powerperf_node::safe_file::read_to_string_bounded(
            &meta_path,
            MAX_SET_TOML_BYTES,
            SET_TOML,
        )
        .with_context(|| {
            format!(
                "cannot read {} (is {} a set directory written by `powerperf import`?)",
                meta_path.display(),
                dir.display()
            )
        })?;
        let meta = SetMeta::from_toml(&text)
            .with_context(|| format!("{} is not a valid set.toml", meta_path.display()))?;
        let pq = dir.join(POINTS);
        let file = powerperf_node::safe_file::open_regular(&pq, POINTS)?;
        Self::from_parquet(meta, file, &pq)
    }

    /// The set of `meta` (a parsed `set.toml`) and the `points.parquet` read from `file`,
    /// as [`TrainingSet::read`] builds it. `pq` names the Parquet file in messages.
    ///
    /// # Errors
    /// As [`TrainingSet::read`] for `points.parquet`.
    pub fn from_parquet<R: polars::io::mmap::MmapBytesReader>(
        meta: SetMeta,
        mut file: R,
        pq: &Path,
    ) -> Result<TrainingSet> {
        let pq = pq.to_path_buf();
        // Footer and page headers first: a damaged file is an error naming it, not an abort
        // on a huge allocation (issue 18, fuzz/crashes/set_parquet-alloc-2pow61.parquet).
        crate::parquet_check::check(&mut file, &pq)?;
        // polars' Parquet reader panics on some damaged files (e.g. a page length past the
        // end of the file: a slice index out of range; found by tests/readers_random.rs).
        // The file is input: its panic becomes this error.
        let df = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            ParquetReader::new(file).finish()
        }))
        .map_err(|panic| {
            let why = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            anyhow::anyhow!(
                "{} is not a readable Parquet file (the Parquet reader failed: {why})",
                pq.display()
            )
        })?
        .with_context(|| format!("{} is not a readable Parquet file", pq.display()))?;
        let have = || {
            df.get_column_names()
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let get = |name: &str, role: &'static str| -> Result<Column> {
            df.column(name).cloned().map_err(|_| {
                SetError::MissingColumn {
                    file: pq.clone(),
                    column: name.to_string(),
                    role,
                    have: have(),
                }
                .into()
            })
        };
        let n = df.height();
        let workload_col = get("workload", "workload id")?;
        let workload_col = workload_col.cast(&DataType::String)?;
        let workloads: Vec<Option<&str>> = workload_col.str()?.iter().collect();
        let workloads_for_errors = &workloads;
        // Every number is checked as import checks it (issue 18: a set written by other
        // means reached fit with negative times and NaN): knobs and targets in their physical
        // range, counters and static features finite.
        use crate::quantity::{check_value, Dimension};
        let f64s = |name: &str, role: &'static str| -> Result<Vec<Option<f64>>> {
            let c = get(name, role)?
                .cast(&DataType::Float64)
                .with_context(|| format!("{}: column `{name}` is not numeric", pq.display()))?;
            let vals: Vec<Option<f64>> = c.f64()?.iter().collect();
            let dim = match (role, name) {
                ("knob", k) => Some(Dimension::of_knob(k)),
                (_, "time_s") => Some(Dimension::Time),
                (_, "power_w") => Some(Dimension::Power),
                (_, "energy_j") => Some(Dimension::Energy),
                _ => None,
            };
            for (i, v) in vals.iter().enumerate() {
                let Some(x) = *v else { continue };
                let r = match dim {
                    Some(d) => check_value(d, role, x),
                    None if !x.is_finite() => Err("is not a finite number".to_string()),
                    None => Ok(()),
                };
                if let Err(why) = r {
                    anyhow::bail!(
                        "{}: row {} (workload `{}`), column `{name}` ({role}): `{x}` {why} (fix: correct the data and import it again)",
                        pq.display(),
                        i + 1,
                        workloads_for_errors.get(i).copied().flatten().unwrap_or("?")
                    );
                }
            }
            Ok(vals)
        };
        let repeats: Vec<Option<i64>> = match df.column("repeat") {
            Ok(c) => c.cast(&DataType::Int64)?.i64()?.iter().collect(),
            Err(_) => vec![None; n],
        };
        let mut points: Vec<Point> = (0..n)
            .map(|i| Point {
                workload: workloads[i].unwrap_or_default().to_string(),
                repeat: repeats[i],
                ..Point::default()
            })
            .collect();
        for k in &meta.knobs {
            for (p, v) in points.iter_mut().zip(f64s(k, "knob")?) {
                if let Some(v) = v {
                    p.knobs.insert(k.clone(), v);
                }
            }
        }
        for t in TARGETS {
            let vals = if df.column(t).is_ok() {
                f64s(t, "target")?
            } else {
                vec![None; n]
            };
            for (p, v) in points.iter_mut().zip(vals) {
                match t {
                    "time_s" => p.time_s = v,
                    "power_w" => p.power_w = v,
                    _ => p.energy_j = v,
                }
            }
        }
        for c in meta.counters.keys() {
            for (p, v) in points.iter_mut().zip(f64s(c, "counter")?) {
                if let Some(v) = v {
                    p.counters.insert(c.clone(), v);
                }
            }
        }
        for s in &meta.static_features {
            for (p, v) in points.iter_mut().zip(f64s(s, "static feature")?) {
                if let Some(v) = v {
                    p.static_features.insert(s.clone(), v);
                }
            }
        }
        Ok(TrainingSet { meta, points })
    }
}

/// Knobs read from a run's `[knobs]` into set columns.
pub const RUN_KNOBS: [&str; 4] = ["core_freq_mhz", "mem_freq_mhz", "threads", "power_limit_w"];

/// The devices of a collected run's knobs (issue 20, item 4): `core_freq_mhz` is cpufreq's
/// clock of CPU 0 (run.toml `knobs.core_freq_mhz`, docs/run-format.md), so `cpu`. The
/// others are left unknown (`mem_freq_mhz` names no device in a run; `threads` is no
/// clock).
pub fn run_knob_devices(points: &[Point]) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    if points.iter().any(|p| p.knobs.contains_key("core_freq_mhz")) {
        m.insert("core_freq_mhz".to_string(), "cpu".to_string());
    }
    m
}

/// A set column name for a collected event: every character other than an ASCII letter,
/// digit or `_` becomes `_` (`cache-misses` -> `cache_misses`).
pub fn counter_column_name(event: &str) -> String {
    event
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Make a training set from run directories written by `powerperf collect` (each holds a
/// `run.toml`, read with [`crate::run::RunMeta::read`]). Same as
/// [`from_runs_labelled`] without a label; the notes are dropped.
///
/// # Errors
/// As [`from_runs_labelled`].
pub fn from_runs(dirs: &[PathBuf]) -> Result<TrainingSet> {
    Ok(from_runs_labelled(dirs, None)?.0)
}

/// Make a training set from run directories, one point per run.
///
/// - workload: `workload` when given, else the run's `[run] workload` (collect's
///   `--workload`, which defaults to the command's base name), else the base name of
///   `[run] command[0]`
///   (the run id when the command is empty);
/// - knobs: `core_freq_mhz`, `mem_freq_mhz`, `threads` from `[knobs]` where the run has
///   them (a knob no run has is not a column);
/// - repeat: 0, 1, … over runs with the same workload and knob values, in argument order;
/// - `time_s` = `duration_ns` × 1e-9;
/// - `energy_j` = sum of the totals of the `rapl` events with a value whose name or column
///   names a package domain (`energy-package-0`, `energy_package_1_j`), converted from
///   their unit (J, mJ, uJ; J when absent); absent when the run has none;
///   `power_w` = energy / time;
/// - counters: the totals of `perf_event` and `papi` events with a value (counted or
///   multiplexed, already scaled), named by [`counter_column_name`], kind
///   [`CounterKind::Count`]. A counter a run lacks is absent (null), never zero.
///
/// Runs that did not exit with status 0, or that are marked truncated, are skipped; each
/// skip is a note.
///
/// # Errors
/// A directory without a readable `run.toml` (naming it); no usable run at all.
pub fn from_runs_labelled(
    dirs: &[PathBuf],
    workload: Option<&str>,
) -> Result<(TrainingSet, Vec<String>)> {
    use crate::run::{Backend, Ending, RunMeta};
    let mut notes = Vec::new();
    let mut points: Vec<Point> = Vec::new();
    let mut counters: BTreeMap<String, CounterKind> = BTreeMap::new();
    let mut hosts: Vec<String> = Vec::new();
    for dir in dirs {
        let meta = RunMeta::read(dir)?;
        if meta.run.truncated || meta.run.ended != Ending::Exited || meta.run.exit_status != Some(0)
        {
            notes.push(format!(
                "skipped {}: the command did not complete normally (exit status {}{})",
                dir.display(),
                meta.shell_status(),
                if meta.run.truncated {
                    ", run truncated"
                } else {
                    ""
                }
            ));
            continue;
        }
        let label = match workload.or(meta.run.workload.as_deref()) {
            Some(w) => w.to_string(),
            None => meta
                .run
                .command
                .first()
                .and_then(|c| Path::new(c).file_name())
                .map(|s| s.to_string_lossy().to_string())
                .unwrap_or_else(|| meta.run.id.clone()),
        };
        let mut knobs = BTreeMap::new();
        let k = &meta.knobs;
        for (name, v) in [
            ("core_freq_mhz", k.core_freq_mhz),
            ("mem_freq_mhz", k.mem_freq_mhz),
            ("threads", k.threads.map(f64::from)),
            ("power_limit_w", k.power_limit_w),
        ] {
            if let Some(v) = v {
                knobs.insert(name.to_string(), v);
            }
        }
        let time_s = meta.duration_s();
        let mut energy: Option<f64> = None;
        let mut point_counters = BTreeMap::new();
        for e in &meta.events {
            let Some(total) = e.total.filter(|_| e.status.has_value()) else {
                continue;
            };
            match e.backend {
                Backend::Rapl => {
                    let is_package = e.name.contains("package")
                        || e.column.as_deref().is_some_and(|c| c.contains("package"));
                    if is_package {
                        let unit = e.unit.as_deref().unwrap_or("J");
                        let factor =
                            crate::quantity::Dimension::Energy
                                .factor(unit)
                                .map_err(|why| {
                                    anyhow::anyhow!(
                                        "{}: RAPL event {}: {why}",
                                        dir.display(),
                                        e.name
                                    )
                                })?;
                        *energy.get_or_insert(0.0) += total * factor;
                    }
                }
                Backend::Import if e.unit.as_deref() == Some("J") => {
                    *energy.get_or_insert(0.0) += total;
                }
                Backend::PerfEvent | Backend::Papi | Backend::Import => {
                    let name = counter_column_name(&e.name);
                    counters.insert(name.clone(), CounterKind::Count);
                    point_counters.insert(name, total);
                }
                Backend::Nvml | Backend::Cupti | Backend::Sysfs => {}
            }
        }
        // A run of a GPU sweep (`[gpu_setting]`): its energy is the swept GPU's, from NVML's
        // energy counter, else its mean sampled power times the run time (the CPU's RAPL
        // energy is not the target of a GPU knob).
        if let Some(g) = &meta.gpu_setting {
            let counter = meta
                .events
                .iter()
                .find(|e| {
                    e.backend == Backend::Nvml
                        && e.name == format!("gpu{}-energy", g.gpu)
                        && e.status.has_value()
                })
                .and_then(|e| e.total);
            energy = counter.or_else(|| g.observed_power_w.map(|w| w * time_s));
        }
        let repeat = points
            .iter()
            .filter(|p| p.workload == label && p.knobs == knobs)
            .count() as i64;
        if !hosts.contains(&meta.run.host) {
            hosts.push(meta.run.host.clone());
        }
        points.push(Point {
            workload: label,
            knobs,
            repeat: Some(repeat),
            time_s: Some(time_s),
            power_w: energy.filter(|_| time_s > 0.0).map(|e| e / time_s),
            energy_j: energy,
            counters: point_counters,
            static_features: BTreeMap::new(),
        });
    }
    if points.is_empty() {
        anyhow::bail!(
            "no usable run among {} director{} (see the notes above: {})",
            dirs.len(),
            if dirs.len() == 1 { "y" } else { "ies" },
            notes.join("; ")
        );
    }
    let knobs = RUN_KNOBS
        .iter()
        .filter(|k| points.iter().any(|p| p.knobs.contains_key(**k)))
        .map(|k| k.to_string())
        .collect();
    let targets = TARGETS
        .iter()
        .filter(|t| points.iter().any(|p| p.target(t).is_some()))
        .map(|t| t.to_string())
        .collect();
    let meta = SetMeta {
        source: "collect".into(),
        description: format!(
            "{} runs collected by powerperf on {}",
            points.len(),
            hosts.join(", ")
        ),
        knobs,
        targets,
        counters,
        static_features: Vec::new(),
        unreliable: Vec::new(),
        knob_devices: run_knob_devices(&points),
    };
    Ok((TrainingSet { meta, points }, notes))
}

fn distinct_sorted(it: impl Iterator<Item = f64>) -> Vec<f64> {
    let mut v: Vec<f64> = it.filter(|x| !x.is_nan()).collect();
    v.sort_by(f64::total_cmp);
    v.dedup();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> TrainingSet {
        let meta = SetMeta {
            source: "test".into(),
            description: "tiny".into(),
            knobs: vec!["core_freq_mhz".into(), "threads".into()],
            targets: vec!["time_s".into(), "power_w".into(), "energy_j".into()],
            counters: BTreeMap::from([
                ("instructions".into(), CounterKind::Count),
                ("sm_active".into(), CounterKind::Rate),
            ]),
            static_features: vec!["ptx_add".into()],
            unreliable: vec![Unreliable {
                target: "time_s".into(),
                workloads: vec!["b".into()],
                reason: "copied".into(),
            }],
            knob_devices: BTreeMap::from([("core_freq_mhz".into(), "cpu".into())]),
        };
        let pt = |w: &str, f: f64, r: i64, t: f64, ins: Option<f64>| Point {
            workload: w.into(),
            knobs: BTreeMap::from([("core_freq_mhz".into(), f), ("threads".into(), 4.0)]),
            repeat: Some(r),
            time_s: Some(t),
            power_w: if r == 0 { Some(10.0) } else { None },
            energy_j: Some(t * 10.0),
            counters: ins
                .map(|v| BTreeMap::from([("instructions".to_string(), v)]))
                .unwrap_or_default(),
            static_features: BTreeMap::from([("ptx_add".into(), 3.0)]),
        };
        TrainingSet {
            meta,
            points: vec![
                pt("a", 1000.0, 0, 2.0, Some(100.0)),
                pt("a", 1000.0, 1, 4.0, Some(300.0)),
                pt("a", 2000.0, 0, 1.0, None),
                pt("b", 2000.0, 0, 5.0, Some(7.0)),
            ],
        }
    }

    #[test]
    fn write_read_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let set = tiny();
        set.write(dir.path()).unwrap();
        assert!(dir.path().join(SET_TOML).exists());
        let back = TrainingSet::read(dir.path()).unwrap();
        assert_eq!(back, set);
        assert!(!back.meta.is_reliable("time_s", "b"));
    }

    #[test]
    fn means_average_repeats() {
        let m = tiny().means();
        assert_eq!(m.points.len(), 3);
        let a1 = &m.points[0];
        assert_eq!(
            (a1.workload.as_str(), a1.knobs["core_freq_mhz"]),
            ("a", 1000.0)
        );
        assert_eq!(a1.time_s, Some(3.0));
        assert_eq!(a1.energy_j, Some(30.0));
        assert_eq!(a1.power_w, Some(10.0)); // only repeat 0 has power
        assert_eq!(a1.counters["instructions"], 200.0);
        assert_eq!(a1.repeat, None);
        assert!(m.points[1].counters.is_empty());
        assert_eq!(m.points[2].workload, "b");
    }

    #[test]
    fn helpers() {
        let s = tiny();
        assert_eq!(s.knob_values("core_freq_mhz"), vec![1000.0, 2000.0]);
        assert_eq!(s.knob_values_of("b", "core_freq_mhz"), vec![2000.0]);
        assert_eq!(s.reference_knobs("a")["core_freq_mhz"], 2000.0);
        assert_eq!(s.workloads(), vec!["a".to_string(), "b".to_string()]);
        assert_eq!(s.points_of("a").count(), 3);
        assert_eq!(s.filter(|p| p.workload == "b").points.len(), 1);
    }

    #[test]
    fn undeclared_counter_is_an_error() {
        let mut s = tiny();
        s.points[0].counters.insert("cycles".into(), 1.0);
        let err = s.write(tempfile::tempdir().unwrap().path()).unwrap_err();
        assert!(format!("{err:#}").contains("`cycles`"), "{err:#}");
    }

    /// A hand-written `run.toml` as `powerperf collect` writes it (text, so fields added
    /// later with defaults keep this fixture valid).
    fn write_run(dir: &Path, cmd: &str, threads: u32, dur_ns: u64, exit: i32) {
        std::fs::create_dir_all(dir).unwrap();
        let text = format!(
            r#"[run]
id = "r"
command = ["{cmd}", "-x"]
ended = "exited"
exit_status = {exit}
start_unix_ns = 0
start_monotonic_ns = 0
duration_ns = {dur_ns}
host = "h"
cpu_model = "cpu"
kernel = "k"
tool_version = "0"
interval_ns = 10000000
samples = 1

[knobs]
threads = {threads}

[[events]]
name = "instructions"
backend = "perf_event"
status = "counted"
total = {ins}.0

[[events]]
name = "cache-misses"
backend = "perf_event"
status = "not_supported"
reason = "no PMU"

[[events]]
name = "energy-package-0"
backend = "rapl"
status = "counted"
total = 3.0
unit = "J"

[[events]]
name = "energy-package-1"
backend = "rapl"
status = "counted"
total = 1000.0
unit = "mJ"

[[events]]
name = "energy-dram-0"
backend = "rapl"
status = "counted"
total = 5.0
unit = "J"
"#,
            ins = 1000 * threads
        );
        std::fs::write(dir.join("run.toml"), text).unwrap();
        crate::run::RunMeta::read(dir).expect("fixture is a valid run.toml");
    }

    #[test]
    fn runs_become_points() {
        let tmp = tempfile::tempdir().unwrap();
        let mut dirs = Vec::new();
        for (i, (t, exit)) in [(1, 0), (2, 0), (2, 0), (4, 3)].iter().enumerate() {
            let d = tmp.path().join(format!("run{i}"));
            write_run(&d, "/usr/bin/gzip", *t, 2_000_000_000, *exit);
            dirs.push(d);
        }
        let (set, notes) = from_runs_labelled(&dirs, None).unwrap();
        assert_eq!(set.points.len(), 3);
        assert_eq!(notes.len(), 1, "{notes:?}");
        let p = &set.points[1];
        assert_eq!(p.workload, "gzip");
        assert_eq!(p.knobs["threads"], 2.0);
        assert_eq!(p.time_s, Some(2.0));
        assert_eq!(p.energy_j, Some(4.0)); // 3 J + 1000 mJ, dram excluded
        assert_eq!(p.power_w, Some(2.0));
        assert_eq!(p.counters["instructions"], 2000.0);
        assert!(!p.counters.contains_key("cache_misses"));
        assert_eq!(
            (set.points[1].repeat, set.points[2].repeat),
            (Some(0), Some(1))
        );
        assert_eq!(set.meta.knobs, vec!["threads"]);
        assert_eq!(set.meta.source, "collect");
        let labelled = from_runs_labelled(&dirs[..1], Some("zip")).unwrap().0;
        assert_eq!(labelled.points[0].workload, "zip");
        // The set writes and reads back.
        let out = tmp.path().join("set");
        set.write(&out).unwrap();
        assert_eq!(TrainingSet::read(&out).unwrap(), set);
        assert!(from_runs(&[tmp.path().join("nope")]).is_err());
    }

    #[test]
    fn missing_column_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let set = tiny();
        set.write(dir.path()).unwrap();
        let mut meta = set.meta.clone();
        meta.counters.insert("cycles".into(), CounterKind::Count);
        std::fs::write(dir.path().join(SET_TOML), toml::to_string(&meta).unwrap()).unwrap();
        let err = TrainingSet::read(dir.path()).unwrap_err();
        let msg = format!("{err:#}");
        assert!(
            msg.contains("`cycles`")
                && msg.contains("points.parquet")
                && msg.contains("instructions"),
            "{msg}"
        );
    }
}
