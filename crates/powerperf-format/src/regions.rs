//! `RUN/regions.parquet`: one row per (process, thread, region path) with its GPTL
//! statistics and its share of every additive timeline column (docs/run-format.md). The
//! attribution that fills the rows is `collect`'s (`powerperf_core::collect::attribution`); the
//! region-event files it reads (`RUN/region_events/<pid>.{bin,tsv}`) are powerperf-rt's
//! format ([`powerperf_rt::events`]).

use anyhow::{Context, Result};
use polars::prelude::{Column, DataFrame};
use powerperf_rt::events::Stats;
use std::path::Path;

/// File name of the per-region table inside a run directory.
pub const REGIONS: &str = "regions.parquet";

/// Folder of the region-event files (`<pid>.bin`, `<pid>.tsv`) inside a run directory.
pub const REGION_EVENTS: &str = "region_events";

/// The completed region instances of the run in `run_dir`, every thread's, from its
/// region-event files (`RUN/region_events/<pid>.{bin,tsv}`, powerperf-rt's format, read by
/// [`powerperf_rt::events::read_dir`] and paired by [`powerperf_rt::events::intervals`]):
/// the reader for the run directory's region events that everything above this crate uses.
///
/// # Errors
/// An unreadable region-events folder or file.
pub fn read_region_intervals(
    run_dir: &Path,
) -> std::io::Result<Vec<powerperf_rt::events::Interval>> {
    Ok(powerperf_rt::events::intervals(
        &powerperf_rt::events::read_dir(run_dir)?,
    ))
}

/// One row of `regions.parquet`: a region path on one thread, with its GPTL statistics and
/// its share of every additive timeline column.
#[derive(Debug, Clone, PartialEq)]
pub struct RegionRow {
    pub stats: Stats,
    /// Same order as the column names returned with it.
    pub values: Vec<f64>,
}

/// Write `rows` as `path` (`RUN/regions.parquet`): `names` are the attributed columns (same
/// order as [`RegionRow::values`]), `rt_counters` the events powerperf-rt counted at every
/// region begin and end (written as `rt_<name>`).
///
/// # Errors
/// I/O errors with the path.
pub fn write(
    path: &Path,
    names: &[String],
    rows: &[RegionRow],
    rank: Option<u32>,
    rt_counters: &[String],
) -> Result<()> {
    let mut df = to_frame(names, rows, rank, rt_counters)?;
    crate::timeline::write_frame(&mut df, path)
}

fn to_frame(
    names: &[String],
    rows: &[RegionRow],
    rank: Option<u32>,
    rt_counters: &[String],
) -> Result<DataFrame> {
    let n = rows.len();
    let u32s = |f: &dyn Fn(&Stats) -> u32| rows.iter().map(|r| f(&r.stats)).collect::<Vec<_>>();
    let u64s = |f: &dyn Fn(&Stats) -> u64| rows.iter().map(|r| f(&r.stats)).collect::<Vec<_>>();
    let strs = |f: &dyn Fn(&Stats) -> &str| {
        rows.iter()
            .map(|r| f(&r.stats).to_string())
            .collect::<Vec<_>>()
    };
    let mut cols = vec![
        Column::new("rank".into(), vec![rank; n]),
        Column::new("pid".into(), u32s(&|s| s.pid)),
        Column::new("tid".into(), u32s(&|s| s.tid)),
        Column::new("region".into(), strs(&|s| s.region.as_str())),
        Column::new("path".into(), strs(&|s| s.path.as_str())),
        Column::new("depth".into(), u32s(&|s| s.depth)),
        Column::new("calls".into(), u64s(&|s| s.calls)),
        Column::new("incl_ns".into(), u64s(&|s| s.incl_ns)),
        Column::new("min_ns".into(), u64s(&|s| s.min_ns)),
        Column::new("max_ns".into(), u64s(&|s| s.max_ns)),
        Column::new("exit_closed".into(), u64s(&|s| s.exit_closed)),
    ];
    for (k, name) in names.iter().enumerate() {
        cols.push(Column::new(
            name.as_str().into(),
            rows.iter().map(|r| r.values[k]).collect::<Vec<f64>>(),
        ));
    }
    // Exact counts from powerperf-rt (null where no instance of the row had values).
    for (k, name) in rt_counters.iter().enumerate() {
        cols.push(Column::new(
            format!("rt_{name}").into(),
            rows.iter()
                .map(|r| {
                    (r.stats.counted_calls > 0)
                        .then(|| r.stats.counters.get(k).map(|&v| v as f64))
                        .flatten()
                })
                .collect::<Vec<Option<f64>>>(),
        ));
    }
    DataFrame::new(n, cols).context("building the regions table")
}

/// One row of `regions.parquet` read back.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RegionRecord {
    pub pid: u32,
    pub tid: u32,
    pub region: String,
    pub path: String,
    pub depth: u32,
    pub calls: u64,
    pub incl_ns: u64,
    pub min_ns: u64,
    pub max_ns: u64,
    pub exit_closed: u64,
    /// Attributed values by column name (counters, `energy_*_j`, `gpu<i>_energy_j`).
    pub values: std::collections::BTreeMap<String, f64>,
}

/// Read `RUN/regions.parquet`; `None` when the run has none.
///
/// # Errors
/// An unreadable file or one without the documented columns.
pub fn read_regions(run_dir: &Path) -> Result<Option<Vec<RegionRecord>>> {
    let path = run_dir.join(REGIONS);
    if !path.exists() {
        return Ok(None);
    }
    let df = crate::timeline::read_parquet(&path)?;
    let ctx = || format!("{}: not a regions table", path.display());
    use crate::timeline::{column_str, column_u32, column_u64, or_default};
    let u32c =
        |n: &str| -> Result<Vec<u32>> { Ok(or_default(column_u32(&df, n).with_context(ctx)?)) };
    let u64c =
        |n: &str| -> Result<Vec<u64>> { Ok(or_default(column_u64(&df, n).with_context(ctx)?)) };
    let strc =
        |n: &str| -> Result<Vec<String>> { Ok(or_default(column_str(&df, n).with_context(ctx)?)) };
    let (pid, tid, depth) = (u32c("pid")?, u32c("tid")?, u32c("depth")?);
    let (region, rpath) = (strc("region")?, strc("path")?);
    let (calls, incl, min, max, xc) = (
        u64c("calls")?,
        u64c("incl_ns")?,
        u64c("min_ns")?,
        u64c("max_ns")?,
        u64c("exit_closed")?,
    );
    let fixed = [
        "rank",
        "pid",
        "tid",
        "region",
        "path",
        "depth",
        "calls",
        "incl_ns",
        "min_ns",
        "max_ns",
        "exit_closed",
    ];
    let mut value_cols = Vec::new();
    for c in df.columns() {
        if !fixed.contains(&c.name().as_str()) {
            let v: Vec<Option<f64>> = c.f64().with_context(ctx)?.iter().collect();
            value_cols.push((c.name().to_string(), v));
        }
    }
    Ok(Some(
        (0..df.height())
            .map(|i| RegionRecord {
                pid: pid[i],
                tid: tid[i],
                region: region[i].clone(),
                path: rpath[i].clone(),
                depth: depth[i],
                calls: calls[i],
                incl_ns: incl[i],
                min_ns: min[i],
                max_ns: max[i],
                exit_closed: xc[i],
                // A null (an rt_ counter the row has no value for) is absent, not zero.
                values: value_cols
                    .iter()
                    .filter_map(|(n, v)| Some((n.clone(), v[i]?)))
                    .collect(),
            })
            .collect(),
    ))
}
