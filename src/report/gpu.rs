//! The GPU activity section of `report` (runs collected with `collect --gpu`): HPCToolkit's
//! coarse metrics, the kernels by time with their launch characteristics, GPU time and host
//! idle per region (`crate::collect::gpu_activity`, docs/gpu.md).

use crate::collect::gpu_activity::{self, Activity, ApiCall, KernelSummary, RegionGpu};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write;

/// Kernels listed in the text report (all are in JSON).
const TOP_KERNELS: usize = 15;

/// What `report` shows of a run's GPU activities.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct GpuActivity {
    /// `GPUOP`, `GKER`, `GMEM`, `GMSET`, `GXCOPY`, `GSYNC` (s), `GXCOPY:H2D` … (bytes),
    /// `…:COUNT`.
    pub metrics: BTreeMap<String, f64>,
    /// Per kernel name, longest total time first.
    pub kernels: Vec<KernelSummary>,
    /// Per region path: GPU time of the work launched there and IPM's `@CUDA_HOST_IDLE`.
    pub regions: BTreeMap<String, RegionGpu>,
    /// Activities and API calls read.
    pub activities: usize,
    pub api_calls: usize,
    /// Streams that ran work, as (device, stream).
    pub streams: Vec<(u32, u32)>,
}

/// Summarise a run's activities and calls.
pub fn summarize(acts: &[Activity], calls: &[ApiCall]) -> GpuActivity {
    let mut streams: Vec<(u32, u32)> = acts
        .iter()
        .filter(|a| {
            matches!(
                a.kind,
                Some(
                    gpu_activity::Kind::Kernel
                        | gpu_activity::Kind::Memcpy
                        | gpu_activity::Kind::Memset
                )
            )
        })
        .map(|a| (a.device, a.stream))
        .collect();
    streams.sort_unstable();
    streams.dedup();
    GpuActivity {
        metrics: gpu_activity::metrics(acts),
        kernels: gpu_activity::kernels(acts),
        regions: gpu_activity::per_region(acts, calls),
        activities: acts.len(),
        api_calls: calls.len(),
        streams,
    }
}

/// Read and summarise `RUN/gpu_activity.parquet`; `None` when the run has none.
///
/// # Errors
/// Unreadable files.
pub fn load(dir: &std::path::Path) -> anyhow::Result<Option<GpuActivity>> {
    Ok(gpu_activity::read(dir)?.map(|(a, c)| summarize(&a, &c)))
}

fn secs(v: f64) -> String {
    if v >= 1.0 {
        format!("{v:.3} s")
    } else if v >= 1e-3 {
        format!("{:.3} ms", v * 1e3)
    } else {
        format!("{:.3} us", v * 1e6)
    }
}

/// Shorten a mangled or long kernel name for a table.
pub fn short_name(n: &str, max: usize) -> String {
    if n.chars().count() <= max {
        n.to_string()
    } else {
        let head: String = n.chars().take(max.saturating_sub(1)).collect();
        format!("{head}…")
    }
}

/// The text section.
pub fn render_text(g: &GpuActivity, wall_s: f64) -> String {
    let mut o = String::new();
    let m = |k: &str| g.metrics.get(k).copied().unwrap_or(0.0);
    let _ = writeln!(
        o,
        " GPU activity (CUPTI; HPCToolkit metric names): {} activities on {} stream(s), {} API calls",
        g.activities,
        g.streams.len(),
        g.api_calls
    );
    for k in ["GPUOP", "GKER", "GXCOPY", "GMSET", "GMEM", "GSYNC"] {
        let pct = if wall_s > 0.0 {
            format!("  {:5.1} % of wall", 100.0 * m(k) / wall_s)
        } else {
            String::new()
        };
        let _ = writeln!(
            o,
            "  {k:<8} {:>14}  {:>8} ops{pct}",
            secs(m(k)),
            m(&format!("{k}:COUNT")) as u64
        );
    }
    let bytes: Vec<String> = g
        .metrics
        .iter()
        .filter(|(k, v)| {
            (k.starts_with("GXCOPY:") || k.starts_with("GMSET:") || k.starts_with("GMEM:"))
                && !k.ends_with(":COUNT")
                && **v > 0.0
        })
        .map(|(k, v)| format!("{k} {} B", super::thousands(*v)))
        .collect();
    if !bytes.is_empty() {
        let _ = writeln!(o, "  bytes: {}", bytes.join(", "));
    }
    if !g.kernels.is_empty() {
        let _ = writeln!(
            o,
            "\n  {:<40} {:>8} {:>12} {:>8} {:>9} {:>7} {:>8} {:>8} {:>8}",
            "kernel",
            "GKER:COUNT",
            "GKER",
            "BLK_THR",
            "BLK",
            "THR_REG",
            "STMEM",
            "DYMEM",
            "OCC_THR"
        );
        for k in g.kernels.iter().take(TOP_KERNELS) {
            let occ = k
                .occ_thr
                .map(|x| format!("{:.1} %", 100.0 * x))
                .unwrap_or_else(|| "-".into());
            let _ = writeln!(
                o,
                "  {:<40} {:>10} {:>12} {:>8.0} {:>9.0} {:>7.0} {:>8.0} {:>8.0} {:>8}",
                short_name(&k.name, 40),
                k.count,
                secs(k.time_s),
                k.blk_thr,
                k.blk,
                k.thr_reg,
                k.stmem,
                k.dymem,
                occ
            );
        }
        if g.kernels.len() > TOP_KERNELS {
            let _ = writeln!(
                o,
                "  … {} more kernels (--format json lists all)",
                g.kernels.len() - TOP_KERNELS
            );
        }
    }
    if !g.regions.is_empty() {
        let _ = writeln!(
            o,
            "\n  {:<32} {:>12} {:>12} {:>12} {:>16} {:>9}",
            "region", "GPUOP", "GKER", "GXCOPY", "@CUDA_HOST_IDLE", "launches"
        );
        for (path, r) in &g.regions {
            let _ = writeln!(
                o,
                "  {:<32} {:>12} {:>12} {:>12} {:>16} {:>9}",
                short_name(path, 32),
                secs(r.gpuop_s),
                secs(r.gker_s),
                secs(r.gxcopy_s),
                secs(r.host_idle_s),
                r.launches
            );
        }
    }
    o
}
