//! GPU PC sampling (`collect --pc-sampling gpu`): the samples the CUDA injection took with
//! CUPTI's PC Sampling API (`rt/src/cupti_pcsamp.rs`), as `gpu_pc_samples.parquet` (the
//! columns of docs/architecture.md's `pc_samples.parquet`) and `gpu_pc_sampling.parquet` (one row per
//! sampled context: period, totals, dropped samples, SMs, clock), and HPCToolkit's metrics
//! over them.
//!
//! Stall reasons: CUPTI's PC Sampling API names them after the Nsight Compute metrics
//! `smsp__pcsamp_warps_issue_stalled_<reason>[_not_issued]`. [`STALL_TABLE`] maps each to
//! the reason of CUPTI's older PC Sampling Activity API through CUPTI's own table (CUPTI
//! docs, section 2.8.2 "Stall Reasons Mapping Table"), and that reason to HPCToolkit's
//! metric through HPCToolkit's `convert_stall_type`
//! (`src/tool/hpcrun/gpu/api/nvidia/cupti-activity-translate.c`):
//!
//! | CUPTI PC Sampling API (`smsp__pcsamp_warps_issue_stalled_`) | Activity API (`CUPTI_ACTIVITY_PC_SAMPLING_STALL_`) | HPCToolkit |
//! |---|---|---|
//! | `selected` | `NONE` | `GINST:STL_NONE` |
//! | `branch_resolving`, `no_instructions` | `INST_FETCH` | `GINST:STL_IFET` |
//! | `short_scoreboard`, `wait` | `EXEC_DEPENDENCY` | `GINST:STL_IDEP` |
//! | `long_scoreboard` | `MEMORY_DEPENDENCY` | `GINST:STL_GMEM` |
//! | `tex_throttle` | `TEXTURE` | `GINST:STL_TMEM` |
//! | `barrier`, `membar` | `SYNC` | `GINST:STL_SYNC` |
//! | `imc_miss` | `CONSTANT_MEMORY_DEPENDENCY` | `GINST:STL_CMEM` |
//! | `mio_throttle`, `math_pipe_throttle` | `PIPE_BUSY` | `GINST:STL_PIPE` |
//! | `drain`, `lg_throttle` | `MEMORY_THROTTLE` | `GINST:STL_MTHR` |
//! | `not_selected` | `NOT_SELECTED` | `GINST:STL_NSEL` |
//! | `misc`, `dispatch_stall` | `OTHER` | `GINST:STL_OTHR` |
//! | `sleeping` | `SLEEPING` | `GINST:STL_SLP` |
//! | any other (newer GPUs add reasons, e.g. Hopper's warpgroup and tensor reasons) | | `GINST:STL_OTHR` |
//!
//! The `_not_issued` variants are latency samples (the warp's scheduler issued nothing in
//! the sampled cycle). CUPTI counts such a sample under both names: the
//! `long_scoreboard_not_issued` count at a PC is a subset of its `long_scoreboard` count
//! (measured on the H100: 14,096 of 14,119 at the chase kernel's load; the sum over all
//! names is about twice CUPTI's `totalSamples`). So `GINST` and `GINST:STL_*` sum the base
//! reasons only, and the `_not_issued` counts are reported apart as latency samples, like
//! the `samples` and `latencySamples` of CUPTI's older PC Sampling Activity API that
//! HPCToolkit reads. `GINST` counts all samples, `GINST:STL_ANY` all but `STL_NONE`
//! (HPCToolkit's "any stall").
//!
//! Sampling summary (HPCToolkit's `GSAMP`, Zhou et al. 2021; `cupti_sm_efficiency_analyze`
//! in HPCToolkit's `cupti-analysis.c`): `GSAMP:TOT` samples taken, `GSAMP:DRP` samples
//! dropped, `GSAMP:PER` the period in cycles, `GSAMP:EXP` samples expected if every SM had a
//! warp to sample all the time = Σ over the kernel's launches of ⌊clock × duration /
//! period⌋ × SMs, and `GSAMP:UTIL` = 100 · TOT / EXP (an estimate of SM efficiency).
//!
//! This module owns the two tables (file names, row types, writer, reader) and the report
//! over them; turning the CUPTI recordings into rows is `collect`'s
//! (`powerperf_core::collect::gpu_pcsamp::rows`).

use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;

/// File of the GPU PC samples in a run directory (docs/architecture.md's `pc_samples.parquet` columns).
pub const SAMPLES_FILE: &str = "gpu_pc_samples.parquet";
/// File of the per-context sampling summary in a run directory.
pub const SUMMARY_FILE: &str = "gpu_pc_sampling.parquet";

/// Common prefix of CUPTI's stall reason names.
pub const CUPTI_PREFIX: &str = "smsp__pcsamp_warps_issue_stalled_";

/// CUPTI stall reason (without [`CUPTI_PREFIX`] and `_not_issued`) -> HPCToolkit metric
/// (module docs for the sources).
pub const STALL_TABLE: &[(&str, &str)] = &[
    ("selected", "GINST:STL_NONE"),
    ("branch_resolving", "GINST:STL_IFET"),
    ("no_instructions", "GINST:STL_IFET"),
    ("short_scoreboard", "GINST:STL_IDEP"),
    ("wait", "GINST:STL_IDEP"),
    ("long_scoreboard", "GINST:STL_GMEM"),
    ("tex_throttle", "GINST:STL_TMEM"),
    ("barrier", "GINST:STL_SYNC"),
    ("membar", "GINST:STL_SYNC"),
    ("imc_miss", "GINST:STL_CMEM"),
    ("mio_throttle", "GINST:STL_PIPE"),
    ("math_pipe_throttle", "GINST:STL_PIPE"),
    ("drain", "GINST:STL_MTHR"),
    ("lg_throttle", "GINST:STL_MTHR"),
    ("not_selected", "GINST:STL_NSEL"),
    ("misc", "GINST:STL_OTHR"),
    ("dispatch_stall", "GINST:STL_OTHR"),
    ("sleeping", "GINST:STL_SLP"),
];

/// HPCToolkit's stall metrics in its order (`GINST:STL_ANY` first).
pub const STALL_METRICS: [&str; 13] = [
    "GINST:STL_ANY",
    "GINST:STL_NONE",
    "GINST:STL_IFET",
    "GINST:STL_IDEP",
    "GINST:STL_GMEM",
    "GINST:STL_TMEM",
    "GINST:STL_SYNC",
    "GINST:STL_CMEM",
    "GINST:STL_PIPE",
    "GINST:STL_MTHR",
    "GINST:STL_NSEL",
    "GINST:STL_OTHR",
    "GINST:STL_SLP",
];

/// CUPTI's name without the common prefix (and with `_not_issued` kept).
pub fn short_reason(cupti: &str) -> &str {
    cupti.strip_prefix(CUPTI_PREFIX).unwrap_or(cupti)
}

/// Whether a CUPTI stall reason is a latency sample (`_not_issued`: the warp scheduler
/// issued no instruction in the sampled cycle; CUPTI docs 2.8.2).
pub fn is_latency(cupti: &str) -> bool {
    cupti.ends_with("_not_issued")
}

/// HPCToolkit's metric for a CUPTI stall reason name ([`STALL_TABLE`]; unknown reasons are
/// `GINST:STL_OTHR`).
pub fn hpctoolkit_stall(cupti: &str) -> &'static str {
    let base = short_reason(cupti);
    let base = base.strip_suffix("_not_issued").unwrap_or(base);
    STALL_TABLE
        .iter()
        .find(|(c, _)| *c == base)
        .map(|(_, h)| *h)
        .unwrap_or("GINST:STL_OTHR")
}

/// One row of `gpu_pc_samples.parquet`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PcRow {
    /// `gpu<i>` (CUDA device ordinal).
    pub device: String,
    /// Function as CUPTI names it (mangled).
    pub function: String,
    pub file: Option<String>,
    pub line: Option<u32>,
    /// Byte offset of the instruction in its function.
    pub pc: u64,
    /// CUPTI's stall reason name.
    pub stall_reason: String,
    pub samples: u64,
    /// Region open on the launching thread (kernel-serialised mode only; `None` in
    /// continuous mode, where PC records carry no launch).
    pub region: Option<String>,
}

/// One row of `gpu_pc_sampling.parquet`: a sampled context.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PcSummary {
    pub device: String,
    pub pid: u32,
    pub context: u32,
    /// `continuous` or `serialized`.
    pub mode: String,
    /// `GSAMP:PER`, cycles (0 unknown).
    pub period_cycles: u64,
    /// `GSAMP:TOT` as CUPTI counts it (`totalSamples`).
    pub total_samples: u64,
    /// `GSAMP:DRP`.
    pub dropped_samples: u64,
    /// Samples in kernels that are not the user's (CUPTI's `nonUsrKernelsTotalSamples`).
    pub non_user_samples: u64,
    /// Batches in which CUPTI's hardware buffer was full.
    pub hardware_buffer_full: u32,
    /// SMs of the device (0 unknown).
    pub sm_count: u32,
    /// SM clock used for `GSAMP:EXP`, MHz: the mean NVML SM clock of the run where sampled,
    /// else the device's clock rate from CUPTI.
    pub clock_mhz: f64,
    /// `nvml` or `device` (which clock `clock_mhz` is).
    pub clock_source: String,
}

/// Write `gpu_pc_samples.parquet` and `gpu_pc_sampling.parquet`.
///
/// # Errors
/// I/O errors with the path.
pub fn write(dir: &Path, rows: &[PcRow], sums: &[PcSummary]) -> anyhow::Result<()> {
    use polars::prelude::{Column, DataFrame};
    let mut df = DataFrame::new(
        rows.len(),
        vec![
            Column::new(
                "device".into(),
                rows.iter().map(|r| r.device.clone()).collect::<Vec<_>>(),
            ),
            Column::new(
                "function".into(),
                rows.iter().map(|r| r.function.clone()).collect::<Vec<_>>(),
            ),
            Column::new(
                "file".into(),
                rows.iter().map(|r| r.file.clone()).collect::<Vec<_>>(),
            ),
            Column::new(
                "line".into(),
                rows.iter().map(|r| r.line).collect::<Vec<_>>(),
            ),
            Column::new("pc".into(), rows.iter().map(|r| r.pc).collect::<Vec<_>>()),
            Column::new(
                "stall_reason".into(),
                rows.iter()
                    .map(|r| r.stall_reason.clone())
                    .collect::<Vec<_>>(),
            ),
            Column::new(
                "samples".into(),
                rows.iter().map(|r| r.samples).collect::<Vec<_>>(),
            ),
            Column::new(
                "region".into(),
                rows.iter().map(|r| r.region.clone()).collect::<Vec<_>>(),
            ),
        ],
    )?;
    crate::timeline::write_frame(&mut df, &dir.join(SAMPLES_FILE))?;
    let mut df = DataFrame::new(
        sums.len(),
        vec![
            Column::new(
                "device".into(),
                sums.iter().map(|s| s.device.clone()).collect::<Vec<_>>(),
            ),
            Column::new("pid".into(), sums.iter().map(|s| s.pid).collect::<Vec<_>>()),
            Column::new(
                "context".into(),
                sums.iter().map(|s| s.context).collect::<Vec<_>>(),
            ),
            Column::new(
                "mode".into(),
                sums.iter().map(|s| s.mode.clone()).collect::<Vec<_>>(),
            ),
            Column::new(
                "period_cycles".into(),
                sums.iter().map(|s| s.period_cycles).collect::<Vec<_>>(),
            ),
            Column::new(
                "total_samples".into(),
                sums.iter().map(|s| s.total_samples).collect::<Vec<_>>(),
            ),
            Column::new(
                "dropped_samples".into(),
                sums.iter().map(|s| s.dropped_samples).collect::<Vec<_>>(),
            ),
            Column::new(
                "non_user_samples".into(),
                sums.iter().map(|s| s.non_user_samples).collect::<Vec<_>>(),
            ),
            Column::new(
                "hardware_buffer_full".into(),
                sums.iter()
                    .map(|s| s.hardware_buffer_full)
                    .collect::<Vec<_>>(),
            ),
            Column::new(
                "sm_count".into(),
                sums.iter().map(|s| s.sm_count).collect::<Vec<_>>(),
            ),
            Column::new(
                "clock_mhz".into(),
                sums.iter().map(|s| s.clock_mhz).collect::<Vec<_>>(),
            ),
            Column::new(
                "clock_source".into(),
                sums.iter()
                    .map(|s| s.clock_source.clone())
                    .collect::<Vec<_>>(),
            ),
        ],
    )?;
    crate::timeline::write_frame(&mut df, &dir.join(SUMMARY_FILE))
}

/// Read what [`write`] wrote; `None` when the run has no GPU PC samples.
///
/// # Errors
/// Unreadable or malformed files, with the path.
pub fn read(dir: &Path) -> anyhow::Result<Option<(Vec<PcRow>, Vec<PcSummary>)>> {
    use polars::prelude::DataFrame;
    let path = dir.join(SAMPLES_FILE);
    if !path.is_file() {
        return Ok(None);
    }
    use crate::timeline::{column_str, column_u32, column_u64, or_default, read_parquet};
    let df = read_parquet(&path)?;
    let s = |df: &DataFrame, n: &str| column_str(df, n);
    let u64c = |df: &DataFrame, n: &str| column_u64(df, n).map(or_default);
    let u32c = |df: &DataFrame, n: &str| column_u32(df, n).map(or_default);
    let (dev, func, file, reason, region) = (
        s(&df, "device")?,
        s(&df, "function")?,
        s(&df, "file")?,
        s(&df, "stall_reason")?,
        s(&df, "region")?,
    );
    let line: Vec<Option<u32>> = df.column("line")?.u32()?.iter().collect();
    let (pc, samples) = (u64c(&df, "pc")?, u64c(&df, "samples")?);
    let rows = (0..df.height())
        .map(|i| PcRow {
            device: dev[i].clone().unwrap_or_default(),
            function: func[i].clone().unwrap_or_default(),
            file: file[i].clone(),
            line: line[i],
            pc: pc[i],
            stall_reason: reason[i].clone().unwrap_or_default(),
            samples: samples[i],
            region: region[i].clone(),
        })
        .collect();
    let mut sums = Vec::new();
    let sp = dir.join(SUMMARY_FILE);
    if sp.is_file() {
        let df = read_parquet(&sp)?;
        let (dev, mode, src) = (s(&df, "device")?, s(&df, "mode")?, s(&df, "clock_source")?);
        let (pid, ctx, full, sms) = (
            u32c(&df, "pid")?,
            u32c(&df, "context")?,
            u32c(&df, "hardware_buffer_full")?,
            u32c(&df, "sm_count")?,
        );
        let (per, tot, drp, nu) = (
            u64c(&df, "period_cycles")?,
            u64c(&df, "total_samples")?,
            u64c(&df, "dropped_samples")?,
            u64c(&df, "non_user_samples")?,
        );
        let clk: Vec<f64> = df
            .column("clock_mhz")?
            .f64()?
            .iter()
            .map(|x| x.unwrap_or(0.0))
            .collect();
        for i in 0..df.height() {
            sums.push(PcSummary {
                device: dev[i].clone().unwrap_or_default(),
                pid: pid[i],
                context: ctx[i],
                mode: mode[i].clone().unwrap_or_default(),
                period_cycles: per[i],
                total_samples: tot[i],
                dropped_samples: drp[i],
                non_user_samples: nu[i],
                hardware_buffer_full: full[i],
                sm_count: sms[i],
                clock_mhz: clk[i],
                clock_source: src[i].clone().unwrap_or_default(),
            });
        }
    }
    Ok(Some((rows, sums)))
}

/// HPCToolkit's PC sampling metrics of one kernel (or of the whole run).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct KernelStalls {
    /// Function name (mangled), or `(all)`.
    pub name: String,
    /// `GINST` (all samples) and `GINST:STL_*`.
    pub ginst: BTreeMap<String, u64>,
    /// `GSAMP:TOT` (samples at this kernel's PCs, each counted once).
    pub tot: u64,
    /// `GSAMP:EXP` (`None` when the period, SM count, clock or kernel times are unknown).
    pub exp: Option<f64>,
    /// `GSAMP:UTIL`, percent.
    pub util: Option<f64>,
    /// Latency samples (`_not_issued` reasons; also counted in `GINST`).
    pub latency: u64,
    /// The dominant stall (largest `GINST:STL_*` other than `STL_ANY`, `STL_NONE`).
    pub dominant: Option<String>,
}

/// Samples per source line.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LineStalls {
    pub function: String,
    pub file: String,
    pub line: u32,
    pub ginst: u64,
    /// Largest stall metric at the line and its samples.
    pub dominant: Option<(String, u64)>,
}

/// Everything `report` shows of GPU PC sampling.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PcReport {
    /// Per-run `GSAMP:PER` (cycles; the first context's), `GSAMP:TOT`, `GSAMP:DRP`,
    /// `GSAMP:EXP`, `GSAMP:UTIL`.
    pub gsamp: BTreeMap<String, f64>,
    /// All samples, by metric.
    pub total: KernelStalls,
    /// Per kernel, most samples first.
    pub kernels: Vec<KernelStalls>,
    /// Per source line, most samples first (only PCs with line information).
    pub lines: Vec<LineStalls>,
    /// Collection mode(s) and clock source, for the reader.
    pub notes: Vec<String>,
}

fn add_row(k: &mut KernelStalls, r: &PcRow) {
    if is_latency(&r.stall_reason) {
        // Counted under the base reason too (module docs).
        k.latency += r.samples;
        return;
    }
    let m = hpctoolkit_stall(&r.stall_reason);
    *k.ginst.entry("GINST".into()).or_default() += r.samples;
    *k.ginst.entry(m.into()).or_default() += r.samples;
    if m != "GINST:STL_NONE" {
        *k.ginst.entry("GINST:STL_ANY".into()).or_default() += r.samples;
    }
    k.tot += r.samples;
}

fn dominant(m: &BTreeMap<String, u64>) -> Option<(String, u64)> {
    m.iter()
        .filter(|(k, v)| {
            k.starts_with("GINST:STL_")
                && *k != "GINST:STL_ANY"
                && *k != "GINST:STL_NONE"
                && **v > 0
        })
        .max_by_key(|(_, v)| **v)
        .map(|(k, v)| (k.clone(), *v))
}

/// Expected samples of `kernel_ns` ns of kernel time on a device: ⌊clock × t / period⌋ × SMs
/// (HPCToolkit `cupti_sm_efficiency_analyze`).
pub fn expected_samples(
    kernel_ns: f64,
    clock_mhz: f64,
    period_cycles: u64,
    sm_count: u32,
) -> Option<f64> {
    if period_cycles == 0 || sm_count == 0 || clock_mhz <= 0.0 || kernel_ns <= 0.0 {
        return None;
    }
    Some((clock_mhz * 1e-3 * kernel_ns / period_cycles as f64).floor() * f64::from(sm_count))
}

/// Aggregate rows per kernel and line; `kernel_ns(name)` gives the launches' durations (ns)
/// of a kernel name from `gpu_activity.parquet` (each launch floored separately, as
/// HPCToolkit does per launch).
pub fn report(
    rows: &[PcRow],
    sums: &[PcSummary],
    kernel_ns: &dyn Fn(&str) -> Vec<u64>,
) -> PcReport {
    let mut per: BTreeMap<&str, KernelStalls> = BTreeMap::new();
    let mut total = KernelStalls {
        name: "(all)".into(),
        ..Default::default()
    };
    let mut lines: BTreeMap<(&str, &str, u32), BTreeMap<String, u64>> = BTreeMap::new();
    for r in rows {
        let k = per
            .entry(r.function.as_str())
            .or_insert_with(|| KernelStalls {
                name: r.function.clone(),
                ..Default::default()
            });
        add_row(k, r);
        add_row(&mut total, r);
        if let (Some(f), Some(l), false) = (r.file.as_deref(), r.line, is_latency(&r.stall_reason))
        {
            let m = lines.entry((r.function.as_str(), f, l)).or_default();
            *m.entry("GINST".into()).or_default() += r.samples;
            *m.entry(hpctoolkit_stall(&r.stall_reason).into())
                .or_default() += r.samples;
        }
    }
    // One device's parameters (the runs this is built for sample one GPU; with several the
    // first context's period, SMs and clock are used and a note says so).
    let cfg = sums.iter().find(|s| s.period_cycles > 0);
    let mut exp_all = 0.0;
    let mut have_exp = false;
    let mut kernels: Vec<KernelStalls> = per
        .into_values()
        .map(|mut k| {
            if let Some(c) = cfg {
                let e: f64 = kernel_ns(&k.name)
                    .iter()
                    .filter_map(|&d| {
                        expected_samples(d as f64, c.clock_mhz, c.period_cycles, c.sm_count)
                    })
                    .sum();
                if e > 0.0 {
                    k.exp = Some(e);
                    k.util = Some(100.0 * k.tot as f64 / e);
                    exp_all += e;
                    have_exp = true;
                }
            }
            k.dominant = dominant(&k.ginst).map(|d| d.0);
            k
        })
        .collect();
    kernels.sort_by(|a, b| b.tot.cmp(&a.tot).then_with(|| a.name.cmp(&b.name)));
    total.dominant = dominant(&total.ginst).map(|d| d.0);
    let mut gsamp = BTreeMap::new();
    gsamp.insert("GSAMP:TOT".into(), total.tot as f64);
    gsamp.insert(
        "GSAMP:DRP".into(),
        sums.iter().map(|s| s.dropped_samples as f64).sum(),
    );
    if let Some(c) = cfg {
        gsamp.insert("GSAMP:PER".into(), c.period_cycles as f64);
    }
    if have_exp {
        total.exp = Some(exp_all);
        total.util = Some(100.0 * total.tot as f64 / exp_all);
        gsamp.insert("GSAMP:EXP".into(), exp_all);
        gsamp.insert("GSAMP:UTIL".into(), 100.0 * total.tot as f64 / exp_all);
    }
    let mut lines: Vec<LineStalls> = lines
        .into_iter()
        .map(|((f, file, l), m)| LineStalls {
            function: f.to_string(),
            file: file.to_string(),
            line: l,
            ginst: m.get("GINST").copied().unwrap_or(0),
            dominant: dominant(&m),
        })
        .collect();
    lines.sort_by(|a, b| {
        b.ginst
            .cmp(&a.ginst)
            .then_with(|| (&a.file, a.line).cmp(&(&b.file, b.line)))
    });
    let mut notes = Vec::new();
    let mut modes: Vec<&str> = sums.iter().map(|s| s.mode.as_str()).collect();
    modes.sort_unstable();
    modes.dedup();
    if let Some(c) = cfg {
        notes.push(format!(
            "{} mode, period {} cycles, {} SMs, clock {:.0} MHz ({})",
            modes.join("+"),
            c.period_cycles,
            c.sm_count,
            c.clock_mhz,
            if c.clock_source == "nvml" {
                "mean NVML SM clock"
            } else {
                "device clock rate: run with --nvml on for the measured clock"
            }
        ));
    }
    let devices: std::collections::BTreeSet<&str> =
        sums.iter().map(|s| s.device.as_str()).collect();
    if devices.len() > 1 {
        notes.push(format!(
            "{} devices sampled: GSAMP:EXP uses the first context's period, SMs and clock",
            devices.len()
        ));
    }
    let full: u32 = sums.iter().map(|s| s.hardware_buffer_full).sum();
    if full > 0 {
        notes.push(format!("CUPTI's hardware buffer was full in {full} batches: samples were lost (longer period: --gpu-pc-period)"));
    }
    PcReport {
        gsamp,
        total,
        kernels,
        lines,
        notes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stall_mapping_follows_cupti_and_hpctoolkit() {
        assert_eq!(
            hpctoolkit_stall("smsp__pcsamp_warps_issue_stalled_long_scoreboard"),
            "GINST:STL_GMEM"
        );
        assert_eq!(
            hpctoolkit_stall("smsp__pcsamp_warps_issue_stalled_long_scoreboard_not_issued"),
            "GINST:STL_GMEM"
        );
        assert_eq!(
            hpctoolkit_stall("smsp__pcsamp_warps_issue_stalled_barrier"),
            "GINST:STL_SYNC"
        );
        assert_eq!(
            hpctoolkit_stall("smsp__pcsamp_warps_issue_stalled_membar"),
            "GINST:STL_SYNC"
        );
        assert_eq!(
            hpctoolkit_stall("smsp__pcsamp_warps_issue_stalled_wait"),
            "GINST:STL_IDEP"
        );
        assert_eq!(
            hpctoolkit_stall("smsp__pcsamp_warps_issue_stalled_short_scoreboard"),
            "GINST:STL_IDEP"
        );
        assert_eq!(
            hpctoolkit_stall("smsp__pcsamp_warps_issue_stalled_math_pipe_throttle"),
            "GINST:STL_PIPE"
        );
        assert_eq!(
            hpctoolkit_stall("smsp__pcsamp_warps_issue_stalled_selected"),
            "GINST:STL_NONE"
        );
        assert_eq!(
            hpctoolkit_stall("smsp__pcsamp_warps_issue_stalled_lg_throttle"),
            "GINST:STL_MTHR"
        );
        assert_eq!(
            hpctoolkit_stall("smsp__pcsamp_warps_issue_stalled_sleeping"),
            "GINST:STL_SLP"
        );
        assert_eq!(
            hpctoolkit_stall("smsp__pcsamp_warps_issue_stalled_some_future_reason"),
            "GINST:STL_OTHR"
        );
        assert!(is_latency(
            "smsp__pcsamp_warps_issue_stalled_wait_not_issued"
        ));
        // Every table target is one of HPCToolkit's metrics.
        for (_, h) in STALL_TABLE {
            assert!(STALL_METRICS.contains(h), "{h}");
        }
    }

    fn row(f: &str, reason: &str, n: u64, line: Option<u32>) -> PcRow {
        PcRow {
            device: "gpu0".into(),
            function: f.into(),
            file: line.map(|_| "k.cu".into()),
            line,
            pc: 16,
            stall_reason: format!("{CUPTI_PREFIX}{reason}"),
            samples: n,
            region: None,
        }
    }

    #[test]
    fn aggregation_and_utilisation() {
        let rows = vec![
            row("a", "long_scoreboard", 70, Some(10)),
            row("a", "selected", 20, Some(11)),
            row("a", "long_scoreboard_not_issued", 10, Some(10)),
            row("b", "barrier", 5, None),
        ];
        let sums = vec![PcSummary {
            device: "gpu0".into(),
            pid: 1,
            context: 1,
            mode: "continuous".into(),
            period_cycles: 1024,
            total_samples: 105,
            dropped_samples: 3,
            non_user_samples: 0,
            hardware_buffer_full: 0,
            sm_count: 2,
            clock_mhz: 1000.0,
            clock_source: "device".into(),
        }];
        // kernel a: two launches of 51,200 ns at 1 GHz / 1024 cycles = 50 samples per SM each.
        let r = report(&rows, &sums, &|n| {
            if n == "a" {
                vec![51_200, 51_200]
            } else {
                vec![]
            }
        });
        let a = &r.kernels[0];
        assert_eq!(a.name, "a");
        // The 10 latency samples are among the 70 long_scoreboard ones: not added again.
        assert_eq!(a.ginst["GINST"], 90);
        assert_eq!(a.ginst["GINST:STL_GMEM"], 70);
        assert_eq!(a.ginst["GINST:STL_NONE"], 20);
        assert_eq!(a.ginst["GINST:STL_ANY"], 70);
        assert_eq!(a.latency, 10);
        assert_eq!(a.exp, Some(200.0));
        assert_eq!(a.util, Some(45.0));
        assert_eq!(a.dominant.as_deref(), Some("GINST:STL_GMEM"));
        let b = &r.kernels[1];
        assert_eq!(b.dominant.as_deref(), Some("GINST:STL_SYNC"));
        assert_eq!(b.exp, None);
        assert_eq!(r.gsamp["GSAMP:TOT"], 95.0);
        assert_eq!(r.gsamp["GSAMP:DRP"], 3.0);
        assert_eq!(r.gsamp["GSAMP:PER"], 1024.0);
        assert_eq!(r.gsamp["GSAMP:EXP"], 200.0);
        assert_eq!(r.gsamp["GSAMP:UTIL"], 47.5);
        assert_eq!(r.lines.len(), 2);
        assert_eq!((r.lines[0].line, r.lines[0].ginst), (10, 70));
    }

    #[test]
    fn expected_samples_formula() {
        // 1 ms at 1980 MHz, period 2^10, 132 SMs: floor(1,980,000 / 1024) * 132.
        assert_eq!(
            expected_samples(1e6, 1980.0, 1024, 132),
            Some(1933.0 * 132.0)
        );
        assert_eq!(expected_samples(1e6, 1980.0, 0, 132), None);
    }
}
