//! A report over the shards of an MPI job: a directory whose subdirectories are run
//! directories, one per rank (`collect -o job/rank%r`). Per event and per region: the
//! minimum, mean and maximum over ranks and the imbalance, (max − mean) / max, as IPM and
//! HPCToolkit report load imbalance. Each shard's tables are read one at a time (polars'
//! Parquet reader; the region table only its `path` and `incl_ns` columns) and reduced to
//! per-shard sums before the next is read, so a job of thousands of ranks never holds more
//! than one table.

use crate::store::run::{RunMeta, RUN_TOML, TIMELINE};
use anyhow::Result;
use polars::prelude::*;
use powerperf_format::regions::REGIONS;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// Min, mean and max of one quantity over ranks.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Spread {
    pub name: String,
    pub ranks: usize,
    pub min: f64,
    pub mean: f64,
    pub max: f64,
    /// (max − mean) / max, 0 when perfectly balanced.
    pub imbalance: f64,
}

/// The whole cross-rank report.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RankReport {
    pub dir: String,
    pub shards: Vec<String>,
    /// Wall time of each shard's command, and event totals (from the timelines).
    pub events: Vec<Spread>,
    /// Inclusive time per region path (summed over the threads of a rank), seconds.
    pub regions: Vec<Spread>,
}

/// The run directories directly under `dir` (those holding a run.toml), sorted by name;
/// empty when `dir` is itself a run or holds none.
pub fn shards(dir: &Path) -> Vec<PathBuf> {
    if dir.join(RUN_TOML).is_file() {
        return vec![];
    }
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| p.join(RUN_TOML).is_file())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

impl Spread {
    /// Min, mean, max and imbalance of one quantity's values, one per rank.
    fn of(name: impl Into<String>, v: &[f64]) -> Spread {
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        let (min, max) = v
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| {
                (a.min(x), b.max(x))
            });
        Spread {
            name: name.into(),
            ranks: v.len(),
            min,
            mean,
            max,
            imbalance: if max > 0.0 { (max - mean) / max } else { 0.0 },
        }
    }
}

/// One Parquet file, all columns or only `columns`.
fn read_parquet(path: &Path, columns: Option<&[&str]>) -> Result<DataFrame> {
    let f = std::fs::File::open(path)
        .map_err(|e| anyhow::anyhow!("cannot open {}: {e}", path.display()))?;
    let mut r = ParquetReader::new(f);
    if let Some(c) = columns {
        r = r.with_columns(Some(c.iter().map(|s| s.to_string()).collect()));
    }
    r.finish()
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))
}

/// Build the report of the shards under `dir`.
///
/// # Errors
/// No shard, or a shard whose files cannot be read.
pub fn rank_report(dir: &Path) -> Result<RankReport> {
    let shards = shards(dir);
    anyhow::ensure!(
        !shards.is_empty(),
        "{} holds no run directories (collect -o {}/rank%r writes one per rank)",
        dir.display(),
        dir.display()
    );
    // Per shard: the total of every timeline column. A column a shard lacks (an event it
    // could not count) is left out of that shard's statistics, never counted as zero.
    let mut durations = Vec::new();
    let mut per_col: std::collections::BTreeMap<String, Vec<f64>> = Default::default();
    for s in &shards {
        let meta = RunMeta::read(s)?;
        durations.push(meta.run.duration_ns as f64 * 1e-9);
        let tl = s.join(TIMELINE);
        let df = if tl.is_file() {
            read_parquet(&tl, None)?
        } else {
            // A shard whose timeline.parquet was never written (a full disk, a killed
            // powerperf): the samples of its journal.
            match powerperf_format::timeline::read_run(s)? {
                Some(df) => df,
                None => continue,
            }
        };
        for c in df.columns() {
            if c.name() == "t_ns" || c.name() == "dur_ns" {
                continue;
            }
            // Nulls count as nothing, and an all-null column sums to 0 (polars' `sum`).
            let total = c
                .as_materialized_series()
                .cast(&DataType::Float64)
                .and_then(|v| v.sum::<f64>())
                .map_err(|e| {
                    anyhow::anyhow!("cannot sum `{}` of {}: {e}", c.name(), tl.display())
                })?;
            per_col.entry(c.name().to_string()).or_default().push(total);
        }
    }
    let mut events = vec![Spread::of("wall time (s)", &durations)];
    events.extend(per_col.iter().map(|(name, v)| Spread::of(name.as_str(), v)));
    // Regions: inclusive time per (shard, path) summed over threads, then spread over shards.
    let mut per_path: std::collections::BTreeMap<String, Vec<f64>> = Default::default();
    for p in shards
        .iter()
        .map(|s| s.join(REGIONS))
        .filter(|p| p.is_file())
    {
        let df = read_parquet(&p, Some(&["path", "incl_ns"]))?;
        let paths = df.column("path")?.str()?;
        let incl = df
            .column("incl_ns")?
            .as_materialized_series()
            .cast(&DataType::Int64)?;
        let incl = incl.i64()?;
        // Summed exactly in integer nanoseconds, then converted (nulls count as nothing).
        let mut shard: std::collections::BTreeMap<&str, i128> = Default::default();
        for (path, ns) in paths.iter().zip(incl.iter()) {
            if let Some(path) = path {
                *shard.entry(path).or_default() += i128::from(ns.unwrap_or(0));
            }
        }
        for (path, ns) in shard {
            per_path
                .entry(path.to_string())
                .or_default()
                .push(ns as f64 * 1e-9);
        }
    }
    let regions = per_path
        .iter()
        .map(|(p, v)| Spread::of(p.as_str(), v))
        .collect();
    Ok(RankReport {
        dir: dir.display().to_string(),
        shards: shards.iter().map(|s| s.display().to_string()).collect(),
        events,
        regions,
    })
}

/// The report as text: one line per event and region, min / mean / max / imbalance.
pub fn render_text(r: &RankReport) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "\n Job report over {} ranks in {}:\n",
        r.shards.len(),
        r.dir
    );
    let _ = writeln!(
        o,
        "  {:<34} {:>6} {:>16} {:>16} {:>16} {:>10}",
        "event", "ranks", "min", "mean", "max", "imbalance"
    );
    let line = |o: &mut String, s: &Spread| {
        let _ = writeln!(
            o,
            "  {:<34} {:>6} {:>16.6} {:>16.6} {:>16.6} {:>9.2}%",
            s.name,
            s.ranks,
            s.min,
            s.mean,
            s.max,
            100.0 * s.imbalance
        );
    };
    for s in &r.events {
        line(&mut o, s);
    }
    if !r.regions.is_empty() {
        let _ = writeln!(
            o,
            "\n  {:<34} {:>6}  (inclusive seconds per rank, summed over threads)",
            "region", "ranks"
        );
        for s in &r.regions {
            line(&mut o, s);
        }
    }
    let _ = writeln!(o, "\n  imbalance = (max - mean) / max over ranks");
    o
}
