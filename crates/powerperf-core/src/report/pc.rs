//! The "Top functions (PC samples)" section of `report`, for runs collected with
//! `collect --pc-sampling cpu` (`RUN/pc_samples.parquet`; docs/pc-sampling.md), in the
//! manner of `perf report --stdio`: overhead %, samples, function, module and source line.

use powerperf_format::pc_samples::{self, PcRow, RegionSamples, TopFunction};
use powerperf_format::run::{PcSampling, RunMeta};
use serde::Serialize;
use std::fmt::Write;

/// Functions listed in the text report (JSON lists [`JSON_TOP`]).
const TEXT_TOP: usize = 15;
/// Functions listed in JSON.
const JSON_TOP: usize = 100;

/// What `report` shows of a run's PC samples.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PcReport {
    /// run.toml's `[pc_sampling]`.
    pub sampling: Option<PcSampling>,
    /// Samples in `pc_samples.parquet`.
    pub samples: u64,
    /// Functions by overhead (share of the sampled period), at most 100.
    pub top_functions: Vec<TopFunction>,
    /// Samples per innermost region (`null`: outside regions).
    pub regions: Vec<RegionSamples>,
}

/// Summarise rows.
pub fn summarize(rows: &[PcRow], sampling: Option<PcSampling>) -> PcReport {
    PcReport {
        sampling,
        samples: rows.iter().map(|r| r.samples).sum(),
        top_functions: pc_samples::top_functions(rows, JSON_TOP),
        regions: pc_samples::per_region(rows),
    }
}

/// Read and summarise `RUN/pc_samples.parquet`; `None` when the run has none (a
/// `[pc_sampling]` that says why sampling did not happen is still reported).
///
/// # Errors
/// An unreadable file.
pub fn load(dir: &std::path::Path, meta: &RunMeta) -> anyhow::Result<Option<PcReport>> {
    match pc_samples::read(dir)? {
        Some(rows) => Ok(Some(summarize(&rows, meta.pc_sampling.clone()))),
        None => Ok(meta.pc_sampling.clone().map(|s| summarize(&[], Some(s)))),
    }
}

fn base(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}

/// The text section.
pub fn render_text(r: &PcReport) -> String {
    let mut o = String::new();
    if let Some(s) = &r.sampling {
        if !s.status.has_value() {
            let _ = writeln!(
                o,
                " PC samples: none ({}: {})",
                s.status.perf_marker(),
                s.reason.as_deref().unwrap_or("")
            );
            return o;
        }
        let _ = writeln!(
            o,
            " Top functions (PC samples): {} samples of {} at {} Hz{}, lost {}",
            r.samples,
            s.event,
            s.frequency_hz,
            if s.user_only {
                " (user space only)"
            } else {
                ""
            },
            s.lost
        );
    } else {
        let _ = writeln!(o, " Top functions (PC samples): {} samples", r.samples);
    }
    let _ = writeln!(
        o,
        "\n  {:>8} {:>9}  {:<32} {:<20} source",
        "Overhead", "Samples", "function", "module"
    );
    for f in r.top_functions.iter().take(TEXT_TOP) {
        let src = match (&f.file, f.line) {
            (Some(file), Some(l)) => format!("{}:{l}", base(file)),
            (Some(file), None) => base(file).to_string(),
            _ => "-".into(),
        };
        let _ = writeln!(
            o,
            "  {:>7.2}% {:>9}  {:<32} {:<20} {src}",
            f.overhead_pct,
            f.samples,
            super::gpu::short_name(&f.function, 32),
            super::gpu::short_name(f.module.as_deref().map(base).unwrap_or("-"), 20),
        );
    }
    if r.top_functions.len() > TEXT_TOP {
        let _ = writeln!(
            o,
            "  … more functions in --format json and pc_samples.parquet"
        );
    }
    if r.regions.iter().any(|g| g.region.is_some()) {
        let _ = writeln!(
            o,
            "\n  {:>8} {:>9}  {:<32} top function",
            "Overhead", "Samples", "region (innermost)"
        );
        for g in &r.regions {
            let _ = writeln!(
                o,
                "  {:>7.2}% {:>9}  {:<32} {}",
                g.overhead_pct,
                g.samples,
                super::gpu::short_name(g.region.as_deref().unwrap_or("(no region)"), 32),
                g.top_function
            );
        }
    }
    o
}
