//! The GPU activity section of `report` (runs collected with `collect --gpu`): HPCToolkit's
//! coarse metrics, the kernels by time with their launch characteristics, GPU time and host
//! idle per region (`powerperf_format::gpu_activity`, docs/gpu.md).

use powerperf_format::gpu_activity::{self, Activity, ApiCall, KernelSummary, RegionGpu};
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
    /// GPU PC sampling (`collect --pc-sampling gpu`): HPCToolkit's `GINST:STL_*` and
    /// `GSAMP:*` per kernel and source line.
    pub pc_sampling: Option<powerperf_format::gpu_pcsamp::PcReport>,
    /// Kernels per region attribution rule (`thread`, `process`, `process_latest`, and
    /// `none` for `(no region)`): launches and `GKER` seconds (docs/gpu.md, "Attribution to
    /// regions"). Runs written before the rule was recorded count every kernel with a region
    /// as `thread`.
    pub region_rules: BTreeMap<String, RuleShare>,
}

/// Kernels attributed by one rule.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Default)]
pub struct RuleShare {
    pub kernels: u64,
    pub gker_s: f64,
}

/// Kernels and kernel time per attribution rule.
fn region_rules(acts: &[Activity]) -> BTreeMap<String, RuleShare> {
    let mut m: BTreeMap<String, RuleShare> = BTreeMap::new();
    for a in acts
        .iter()
        .filter(|a| a.kind == Some(gpu_activity::Kind::Kernel))
    {
        let rule = match (&a.region, &a.region_rule) {
            (None, _) => "none",
            (Some(_), Some(r)) => r.as_str(),
            (Some(_), None) => "thread",
        };
        let e = m.entry(rule.to_string()).or_default();
        e.kernels += 1;
        e.gker_s += a.dur_ns() as f64 * 1e-9;
    }
    m
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
        pc_sampling: None,
        region_rules: region_rules(acts),
    }
}

/// Kernel durations (ns) per kernel name, for `GSAMP:EXP`.
fn kernel_durations(acts: &[Activity]) -> BTreeMap<String, Vec<u64>> {
    let mut m: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for a in acts {
        if a.kind == Some(gpu_activity::Kind::Kernel) {
            if let Some(n) = &a.name {
                m.entry(n.clone()).or_default().push(a.dur_ns());
            }
        }
    }
    m
}

/// Read and summarise `RUN/gpu_activity.parquet`; `None` when the run has none.
///
/// # Errors
/// Unreadable files.
pub fn load(dir: &std::path::Path) -> anyhow::Result<Option<GpuActivity>> {
    let Some((a, c)) = gpu_activity::read(dir)? else {
        return Ok(None);
    };
    let mut g = summarize(&a, &c);
    if let Some((rows, sums)) = powerperf_format::gpu_pcsamp::read(dir)? {
        let durs = kernel_durations(&a);
        g.pc_sampling = Some(powerperf_format::gpu_pcsamp::report(&rows, &sums, &|n| {
            durs.get(n).cloned().unwrap_or_default()
        }));
    }
    Ok(Some(g))
}

/// Lines of the PC sampling table in the text report.
const TOP_PC_KERNELS: usize = 10;
const TOP_PC_LINES: usize = 15;

/// The GPU PC sampling part of the text section.
fn render_pc(o: &mut String, p: &powerperf_format::gpu_pcsamp::PcReport) {
    let g = |k: &str| p.gsamp.get(k).copied();
    let f = |v: Option<f64>, d: usize| v.map(|x| format!("{x:.d$}")).unwrap_or_else(|| "-".into());
    let _ = writeln!(
        o,
        "\n  GPU PC sampling (CUPTI): GSAMP:TOT {}  GSAMP:DRP {}  GSAMP:PER {} cycles  GSAMP:EXP {}  GSAMP:UTIL {} %",
        f(g("GSAMP:TOT"), 0),
        f(g("GSAMP:DRP"), 0),
        f(g("GSAMP:PER"), 0),
        f(g("GSAMP:EXP"), 0),
        f(g("GSAMP:UTIL"), 1)
    );
    for n in &p.notes {
        let _ = writeln!(o, "  ({n})");
    }
    let cols = [
        "STL_GMEM", "STL_IDEP", "STL_SYNC", "STL_PIPE", "STL_MTHR", "STL_NSEL", "STL_NONE",
    ];
    let _ = write!(o, "  {:<32} {:>9} {:>6}", "kernel", "GINST", "UTIL%");
    for c in cols {
        let _ = write!(o, " {c:>8}");
    }
    let _ = writeln!(o, " {:>8}  dominant", "other");
    let pct = |k: &powerperf_format::gpu_pcsamp::KernelStalls, m: &str| -> f64 {
        let all = k.ginst.get("GINST").copied().unwrap_or(0).max(1) as f64;
        100.0 * k.ginst.get(m).copied().unwrap_or(0) as f64 / all
    };
    let mut list: Vec<&powerperf_format::gpu_pcsamp::KernelStalls> =
        p.kernels.iter().take(TOP_PC_KERNELS).collect();
    list.push(&p.total);
    for k in list {
        let _ = write!(
            o,
            "  {:<32} {:>9} {:>6}",
            short_name(&k.name, 32),
            k.ginst.get("GINST").copied().unwrap_or(0),
            k.util
                .map(|u| format!("{u:.1}"))
                .unwrap_or_else(|| "-".into())
        );
        let mut shown = 0.0;
        for c in cols {
            let v = pct(k, &format!("GINST:{c}"));
            shown += v;
            let _ = write!(o, " {:>7.1}%", v);
        }
        let _ = writeln!(
            o,
            " {:>7.1}%  {}",
            (100.0 - shown).max(0.0),
            k.dominant.as_deref().unwrap_or("-")
        );
    }
    if p.kernels.len() > TOP_PC_KERNELS {
        let _ = writeln!(
            o,
            "  … {} more kernels (--format json lists all)",
            p.kernels.len() - TOP_PC_KERNELS
        );
    }
    if !p.lines.is_empty() {
        let _ = writeln!(
            o,
            "\n  {:<44} {:>9}  dominant stall",
            "source line", "GINST"
        );
        for l in p.lines.iter().take(TOP_PC_LINES) {
            let file = std::path::Path::new(&l.file)
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_else(|| l.file.clone());
            let _ = writeln!(
                o,
                "  {:<44} {:>9}  {}",
                short_name(&format!("{file}:{} ({})", l.line, l.function), 44),
                l.ginst,
                l.dominant
                    .as_ref()
                    .map(|(m, n)| format!(
                        "{m} ({:.0} %)",
                        100.0 * *n as f64 / l.ginst.max(1) as f64
                    ))
                    .unwrap_or_else(|| "-".into())
            );
        }
    }
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
        let other: u64 = g
            .region_rules
            .iter()
            .filter(|(k, _)| k.starts_with("process"))
            .map(|(_, r)| r.kernels)
            .sum();
        if other > 0 {
            let total_k: u64 = g.region_rules.values().map(|r| r.kernels).sum();
            let total_s: f64 = g.region_rules.values().map(|r| r.gker_s).sum();
            let _ = write!(o, "  kernels by region rule (docs/gpu.md):");
            for (rule, r) in &g.region_rules {
                let _ = write!(
                    o,
                    "  {rule} {} ({:.1} % of kernels, {:.1} % of GKER)",
                    r.kernels,
                    100.0 * r.kernels as f64 / total_k.max(1) as f64,
                    if total_s > 0.0 {
                        100.0 * r.gker_s / total_s
                    } else {
                        0.0
                    }
                );
            }
            let _ = writeln!(o);
        }
    }
    if let Some(p) = &g.pc_sampling {
        render_pc(&mut o, p);
    }
    o
}
