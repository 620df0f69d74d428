//! `RUN/pc_samples.parquet` (`collect --pc-sampling cpu`): one row per (pid, tid, region,
//! module, function, file, line) with its samples, the writer and reader, and the summaries
//! `report` prints (top functions, samples per region). Taking and symbolising the samples is
//! `collect`'s (`powerperf_core::collect::pc_samples`, docs/pc-sampling.md).

use anyhow::{Context, Result};
use polars::prelude::{Column, DataFrame};
use std::collections::HashMap;
use std::path::Path;

/// File name of the PC sample table inside a run directory.
pub const PC_SAMPLES: &str = "pc_samples.parquet";

/// Function name of a sample that could not be symbolised (as `perf report` prints it).
pub const UNKNOWN: &str = "[unknown]";

/// One row of `pc_samples.parquet`: samples of one (pid, tid, region, module, function,
/// file, line).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PcRow {
    /// `cpu` (CPU samples; `gpu<i>` is reserved for GPU PC sampling).
    pub device: String,
    pub pid: u32,
    pub tid: u32,
    /// Path of the innermost region open on the thread (`solve/step`), `None` outside
    /// regions.
    pub region: Option<String>,
    /// The ELF file, pseudo mapping (`[vdso]`, `//anon`) or `[kernel.kallsyms]`; `None`
    /// when no mapping covered the address.
    pub module: Option<String>,
    /// Function name, or `[unknown]`.
    pub function: String,
    pub file: Option<String>,
    pub line: Option<u32>,
    /// A representative instruction address of the row as sampled (the most frequent one;
    /// ties: the lowest), in the process's address space.
    pub pc: u64,
    /// `pc` as the module's ELF file has it (`objdump -d` addresses), where known.
    pub module_addr: Option<u64>,
    /// Stall reason (GPU PC sampling); `None` for CPU samples.
    pub stall_reason: Option<String>,
    /// Number of samples.
    pub samples: u64,
    /// Sum of the samples' periods, in the sampled event's unit (ns of CPU time for
    /// cpu-clock, cycles for cycles); `perf report` weighs its overhead column by this.
    pub period: u64,
}

/// Write `rows` as `path` (Parquet, the columns of [`PcRow`] in order).
///
/// # Errors
/// An unwritable file.
pub fn write(rows: &[PcRow], path: &Path) -> Result<()> {
    let n = rows.len();
    let strs = |f: &dyn Fn(&PcRow) -> Option<&str>| {
        rows.iter()
            .map(|r| f(r).map(String::from))
            .collect::<Vec<Option<String>>>()
    };
    let cols = vec![
        Column::new(
            "device".into(),
            rows.iter().map(|r| r.device.clone()).collect::<Vec<_>>(),
        ),
        Column::new("pid".into(), rows.iter().map(|r| r.pid).collect::<Vec<_>>()),
        Column::new("tid".into(), rows.iter().map(|r| r.tid).collect::<Vec<_>>()),
        Column::new("region".into(), strs(&|r| r.region.as_deref())),
        Column::new("module".into(), strs(&|r| r.module.as_deref())),
        Column::new(
            "function".into(),
            rows.iter().map(|r| r.function.clone()).collect::<Vec<_>>(),
        ),
        Column::new("file".into(), strs(&|r| r.file.as_deref())),
        Column::new(
            "line".into(),
            rows.iter().map(|r| r.line).collect::<Vec<_>>(),
        ),
        Column::new("pc".into(), rows.iter().map(|r| r.pc).collect::<Vec<_>>()),
        Column::new(
            "module_addr".into(),
            rows.iter().map(|r| r.module_addr).collect::<Vec<_>>(),
        ),
        Column::new("stall_reason".into(), strs(&|r| r.stall_reason.as_deref())),
        Column::new(
            "samples".into(),
            rows.iter().map(|r| r.samples).collect::<Vec<_>>(),
        ),
        Column::new(
            "period".into(),
            rows.iter().map(|r| r.period).collect::<Vec<_>>(),
        ),
    ];
    let mut df = DataFrame::new(n, cols).context("building the PC sample table")?;
    crate::timeline::write_frame(&mut df, path)
}

/// Read `RUN/pc_samples.parquet`; `None` when the run has none.
///
/// # Errors
/// An unreadable file, or one without the documented columns.
pub fn read(run_dir: &Path) -> Result<Option<Vec<PcRow>>> {
    let path = run_dir.join(PC_SAMPLES);
    if !path.is_file() {
        return Ok(None);
    }
    let df = crate::timeline::read_parquet(&path)?;
    let ctx = || format!("{}: not a PC sample table", path.display());
    use crate::timeline::{column_str, column_u32, column_u64};
    let strc = |n: &str| column_str(&df, n).with_context(ctx);
    let u32c = |n: &str| column_u32(&df, n).with_context(ctx);
    let u64c = |n: &str| column_u64(&df, n).with_context(ctx);
    let (device, region, module, function, file, stall) = (
        strc("device")?,
        strc("region")?,
        strc("module")?,
        strc("function")?,
        strc("file")?,
        strc("stall_reason")?,
    );
    let (pid, tid, line) = (u32c("pid")?, u32c("tid")?, u32c("line")?);
    let (pc, maddr, samples, period) = (
        u64c("pc")?,
        u64c("module_addr")?,
        u64c("samples")?,
        u64c("period")?,
    );
    Ok(Some(
        (0..df.height())
            .map(|i| PcRow {
                device: device[i].clone().unwrap_or_default(),
                pid: pid[i].unwrap_or(0),
                tid: tid[i].unwrap_or(0),
                region: region[i].clone(),
                module: module[i].clone(),
                function: function[i].clone().unwrap_or_else(|| UNKNOWN.into()),
                file: file[i].clone(),
                line: line[i],
                pc: pc[i].unwrap_or(0),
                module_addr: maddr[i],
                stall_reason: stall[i].clone(),
                samples: samples[i].unwrap_or(0),
                period: period[i].unwrap_or(0),
            })
            .collect(),
    ))
}

/// One function in the report's "Top functions" table.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TopFunction {
    pub function: String,
    pub module: Option<String>,
    /// The function's hottest source line (most samples), where known.
    pub file: Option<String>,
    pub line: Option<u32>,
    pub samples: u64,
    pub period: u64,
    /// Share of all samples' period, % (of samples when no period was recorded), as
    /// `perf report`'s Overhead column.
    pub overhead_pct: f64,
}

/// Functions over all threads and regions, by overhead (descending), at most `n`.
pub fn top_functions(rows: &[PcRow], n: usize) -> Vec<TopFunction> {
    let total_period: u64 = rows.iter().map(|r| r.period).sum();
    let total_samples: u64 = rows.iter().map(|r| r.samples).sum();
    let weight = |samples: u64, period: u64| -> f64 {
        if total_period > 0 {
            100.0 * period as f64 / total_period as f64
        } else if total_samples > 0 {
            100.0 * samples as f64 / total_samples as f64
        } else {
            0.0
        }
    };
    type Lines<'a> = HashMap<(Option<&'a str>, Option<u32>), u64>;
    let mut by_fn: HashMap<(&str, Option<&str>), (u64, u64, Lines<'_>)> = HashMap::new();
    for r in rows {
        let e = by_fn
            .entry((r.function.as_str(), r.module.as_deref()))
            .or_insert((0, 0, HashMap::new()));
        e.0 += r.samples;
        e.1 += r.period;
        *e.2.entry((r.file.as_deref(), r.line)).or_default() += r.samples;
    }
    let mut out: Vec<TopFunction> = by_fn
        .into_iter()
        .map(|((function, module), (samples, period, lines))| {
            let ((file, line), _) = lines
                .into_iter()
                .max_by_key(|((f, l), n)| (*n, std::cmp::Reverse((*f, *l))))
                .unwrap_or(((None, None), 0));
            TopFunction {
                function: function.to_string(),
                module: module.map(String::from),
                file: file.map(String::from),
                line,
                samples,
                period,
                overhead_pct: weight(samples, period),
            }
        })
        .collect();
    out.sort_by(|a, b| {
        b.overhead_pct
            .total_cmp(&a.overhead_pct)
            .then_with(|| b.samples.cmp(&a.samples))
            .then_with(|| a.function.cmp(&b.function))
    });
    out.truncate(n);
    out
}

/// Samples per region path (`None`: outside regions), with the overhead % as in
/// [`top_functions`] and the region's top function; most first.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RegionSamples {
    pub region: Option<String>,
    pub samples: u64,
    pub overhead_pct: f64,
    pub top_function: String,
}

/// Samples per innermost region (see [`RegionSamples`]).
pub fn per_region(rows: &[PcRow]) -> Vec<RegionSamples> {
    let total_period: u64 = rows.iter().map(|r| r.period).sum();
    let total_samples: u64 = rows.iter().map(|r| r.samples).sum();
    let mut by: HashMap<Option<&str>, Vec<&PcRow>> = HashMap::new();
    for r in rows {
        by.entry(r.region.as_deref()).or_default().push(r);
    }
    let mut out: Vec<RegionSamples> = by
        .into_iter()
        .map(|(region, rs)| {
            let owned: Vec<PcRow> = rs.iter().map(|r| (*r).clone()).collect();
            let samples: u64 = rs.iter().map(|r| r.samples).sum();
            let period: u64 = rs.iter().map(|r| r.period).sum();
            RegionSamples {
                region: region.map(String::from),
                samples,
                overhead_pct: if total_period > 0 {
                    100.0 * period as f64 / total_period as f64
                } else if total_samples > 0 {
                    100.0 * samples as f64 / total_samples as f64
                } else {
                    0.0
                },
                top_function: top_functions(&owned, 1)
                    .first()
                    .map(|f| f.function.clone())
                    .unwrap_or_default(),
            }
        })
        .collect();
    out.sort_by(|a, b| {
        b.overhead_pct
            .total_cmp(&a.overhead_pct)
            .then_with(|| a.region.cmp(&b.region))
    });
    out
}
