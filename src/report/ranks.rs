//! A report over the shards of an MPI job: a directory whose subdirectories are run
//! directories, one per rank (`collect -o job/rank%r`). Per event and per region: the
//! minimum, mean and maximum over ranks and the imbalance, (max − mean) / max, as IPM and
//! HPCToolkit report load imbalance. Timelines and regions are read with polars lazy scans
//! (`scan_parquet` over every shard, then one group-by), so the same code reads a job of
//! thousands of ranks without loading every table at once.

use crate::collect::attribution::REGIONS;
use crate::store::run::{RunMeta, RUN_TOML, TIMELINE};
use anyhow::Result;
use polars::prelude::*;
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
    // Per shard: one row of totals of every timeline column, through lazy scans.
    let mut rows: Vec<DataFrame> = Vec::new();
    let mut durations = Vec::new();
    for s in &shards {
        let meta = RunMeta::read(s)?;
        durations.push(meta.run.duration_ns as f64 * 1e-9);
        let tl = s.join(TIMELINE);
        let lf = if tl.is_file() {
            anyhow::Context::with_context(
                LazyFrame::scan_parquet(PlRefPath::try_from_path(&tl)?, ScanArgsParquet::default()),
                || format!("cannot scan {}", tl.display()),
            )?
        } else {
            // A shard whose timeline.parquet was never written (a full disk, a killed
            // powerperf): the samples of its journal.
            match crate::collect::timeline::read_run(s)? {
                Some(df) => df.lazy(),
                None => continue,
            }
        };
        let summed = anyhow::Context::with_context(
            lf.select([all()
                .exclude_cols(["t_ns", "dur_ns"])
                .as_expr()
                .cast(DataType::Float64)
                .sum()])
                .collect(),
            || format!("cannot read {}", tl.display()),
        )?;
        rows.push(summed);
    }
    let mut events = vec![Spread::of("wall time (s)", &durations)];
    // Column totals per shard; a column a shard lacks (an event it could not count) is
    // left out of that shard's statistics, never counted as zero.
    let mut per_col: std::collections::BTreeMap<String, Vec<f64>> = Default::default();
    for df in &rows {
        for c in df.columns() {
            if let Some(v) = c.f64()?.get(0) {
                per_col.entry(c.name().to_string()).or_default().push(v);
            }
        }
    }
    events.extend(per_col.iter().map(|(name, v)| Spread::of(name.as_str(), v)));
    // Regions: inclusive time per (shard, path) summed over threads, then spread over shards.
    let mut regions = Vec::new();
    let region_files: Vec<PathBuf> = shards
        .iter()
        .map(|s| s.join(REGIONS))
        .filter(|p| p.is_file())
        .collect();
    if !region_files.is_empty() {
        let scans: Vec<LazyFrame> = region_files
            .iter()
            .enumerate()
            .map(|(k, p)| {
                let lf = anyhow::Context::with_context(
                    LazyFrame::scan_parquet(
                        PlRefPath::try_from_path(p)?,
                        ScanArgsParquet::default(),
                    ),
                    || format!("cannot scan {}", p.display()),
                )?;
                Ok(lf
                    .select([col("path"), col("incl_ns")])
                    .with_column(lit(k as u32).alias("shard")))
            })
            .collect::<Result<_>>()?;
        let per_rank = concat(scans, UnionArgs::default())?
            .group_by([col("shard"), col("path")])
            .agg([(col("incl_ns").sum().cast(DataType::Float64) * lit(1e-9)).alias("s")])
            .sort(["path"], SortMultipleOptions::default())
            .collect()?;
        let mut per_path: std::collections::BTreeMap<String, Vec<f64>> = Default::default();
        let paths = per_rank.column("path")?.str()?;
        let secs = per_rank.column("s")?.f64()?;
        for (p, v) in paths.iter().zip(secs.iter()) {
            if let (Some(p), Some(v)) = (p, v) {
                per_path.entry(p.to_string()).or_default().push(v);
            }
        }
        regions.extend(per_path.iter().map(|(p, v)| Spread::of(p.as_str(), v)));
    }
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
