//! `powerperf predict --from RUN --knob core_freq_mhz=…` without `--model`: the time at
//! other SM clocks from the run's own GPM activity fractions
//! ([`crate::models::from_counters`]), per region and for the whole run.

use crate::models::from_counters::{self, Measured, CLOCK_KNOB};
use crate::output::predict::{PredictOutput, PredictionRow};
use crate::output::OutputFormat as Format;
use crate::store::run::RunMeta;
use anyhow::{Context, Result};
use std::collections::BTreeMap;
use std::path::Path;

/// The name of the whole run among the regions.
pub const WHOLE_RUN: &str = "(whole run)";

/// What the output says about where the prediction comes from.
pub const PROVENANCE: &str = "from counters: the run's GPM activity fractions through the bound-and-bottleneck time model (analytic_counters, combine = max, nothing fitted; docs/models.md); not validated on this GPU (its error was measured on a V100's DCGM sweep: time 9.57 % in workload holdout, docs/models.md)";

/// The note on power and energy.
pub const NO_POWER: &str = "time only: power and energy need a fitted model of this GPU (powerperf sweep --gpu-clock … then powerperf fit; predict --model MODEL)";

/// The GPM fractions the form reads, by DCGM name.
const FRACTIONS: [&str; 5] = [
    "gr_engine_active",
    "dram_active",
    "fp64_active",
    "fp32_active",
    "fp16_active",
];
const TENSOR: &str = "tensor_active";

/// Per fraction: (Σ value × time, Σ time).
type WeightedSums = BTreeMap<String, (f64, f64)>;

/// One GPU's fractions in a run: the whole run and its regions, and the clock it ran at.
struct GpuRun {
    gpu: u32,
    clock_mhz: f64,
    clock_from: String,
    measured: Vec<Measured>,
}

/// Mean of `v` weighted by `w` over the samples with a finite value (`None` without any).
fn weighted_mean(v: &[Option<f64>], w: &[f64]) -> Option<f64> {
    let (mut s, mut ws) = (0.0, 0.0);
    for (x, w) in v.iter().zip(w) {
        if let Some(x) = x.filter(|x| x.is_finite()) {
            s += x * w;
            ws += w;
        }
    }
    (ws > 0.0).then(|| s / ws)
}

/// GPU `i`'s fractions over the whole timeline and over each region.
fn gpu_run(
    dir: &Path,
    meta: &RunMeta,
    tl: &crate::collect::timeline::Timeline,
    i: u32,
) -> Result<Option<GpuRun>> {
    let col = |m: &str| {
        let name = format!("gpu{i}_{m}");
        tl.columns.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    };
    let names: Vec<&str> = FRACTIONS.iter().copied().chain([TENSOR]).collect();
    if col("dram_active").is_none() {
        return Ok(None);
    }
    let w: Vec<f64> = tl.dur_ns.iter().map(|d| *d as f64).collect();
    let mut fractions = BTreeMap::new();
    for m in &names {
        if let Some(v) = col(m).and_then(|v| weighted_mean(v, &w)) {
            fractions.insert(m.to_string(), v);
        }
    }
    // The clock while the GPU works: the SM clock weighted by time × engine activity (an
    // idle GPU drops its clock), else by time.
    let (clock_mhz, clock_from) = {
        let sm = col("sm_clock_mhz").with_context(|| {
            format!(
                "run {}: the timeline has gpu{i}'s GPM fractions but no gpu{i}_sm_clock_mhz: the clock the run ran at is unknown",
                dir.display()
            )
        })?;
        let busy: Option<Vec<f64>> = col("gr_engine_active").map(|a| {
            a.iter()
                .zip(&w)
                .map(|(a, w)| a.filter(|a| a.is_finite()).unwrap_or(0.0) * w)
                .collect()
        });
        match busy.as_deref().and_then(|b| weighted_mean(sm, b)) {
            Some(f) => (
                f,
                "mean SM clock over the run, weighted by gr_engine_active".to_string(),
            ),
            None => (
                weighted_mean(sm, &w).with_context(|| {
                    format!("run {}: gpu{i}_sm_clock_mhz has no value", dir.display())
                })?,
                "mean SM clock over the run".to_string(),
            ),
        }
    };
    let run_s = meta.run.duration_ns as f64 * 1e-9;
    let mut measured = vec![Measured {
        name: WHOLE_RUN.into(),
        clock_mhz,
        time_s: run_s,
        fractions,
    }];
    // Regions: GPM means over each region's time (attribution.rs); instances of one path
    // on several threads pooled, weighted by their time.
    if let Some(rows) = crate::collect::attribution::read_regions(dir)? {
        let mut by_path: BTreeMap<String, (f64, WeightedSums)> = BTreeMap::new();
        for r in &rows {
            let t = r.incl_ns as f64 * 1e-9;
            let e = by_path.entry(r.path.clone()).or_default();
            e.0 += t;
            for m in &names {
                if let Some(v) = r
                    .values
                    .get(&format!("gpu{i}_{m}"))
                    .filter(|v| v.is_finite())
                {
                    let s = e.1.entry(m.to_string()).or_default();
                    s.0 += v * t;
                    s.1 += t;
                }
            }
        }
        for (path, (t, sums)) in by_path {
            let fr: BTreeMap<String, f64> = sums
                .into_iter()
                .filter(|(_, (_, w))| *w > 0.0)
                .map(|(k, (s, w))| (k, s / w))
                .collect();
            if t > 0.0 && from_counters::has_fractions(&fr) {
                measured.push(Measured {
                    name: path,
                    clock_mhz,
                    time_s: t,
                    fractions: fr,
                });
            }
        }
    }
    Ok(Some(GpuRun {
        gpu: i,
        clock_mhz,
        clock_from,
        measured,
    }))
}

/// Whether the run in `dir` has GPM activity fractions (a `gpu<i>_dram_active` column).
pub fn run_has_fractions(dir: &Path) -> bool {
    let Ok(Some(df)) = crate::collect::timeline::read_run(dir) else {
        return false;
    };
    df.get_column_names()
        .iter()
        .any(|n| crate::collect::gpm::is_gpm_column(n) && n.ends_with("_dram_active"))
}

/// Predict from the run's counters at the `--knob core_freq_mhz` values.
///
/// # Errors
/// An unreadable run, a run without GPM fractions (the fix named), a knob other than
/// `core_freq_mhz`.
pub fn run(dir: &Path, lists: &[(String, Vec<f64>)], format: Format) -> Result<i32> {
    if let Some((k, _)) = lists.iter().find(|(k, _)| k != CLOCK_KNOB) {
        anyhow::bail!(
            "--knob {k}: predict --from RUN without --model predicts the GPU SM clock only (--knob {CLOCK_KNOB}=MHZ,…); other knobs need a fitted model (--model)"
        );
    }
    let clocks: Vec<f64> = lists.iter().flat_map(|(_, v)| v.iter().copied()).collect();
    if clocks.is_empty() {
        anyhow::bail!("--knob {CLOCK_KNOB}=MHZ,… is required");
    }
    let meta = RunMeta::read(dir).with_context(|| format!("reading run {}", dir.display()))?;
    let df = crate::collect::timeline::read_run(dir)?
        .with_context(|| format!("run {} has no timeline", dir.display()))?;
    let tl = crate::collect::timeline::Timeline::from_frame(&df)?;
    let mut gpus = Vec::new();
    for i in 0..64 {
        if let Some(g) = gpu_run(dir, &meta, &tl, i)? {
            gpus.push(g);
        }
    }
    let busiest = |g: &GpuRun| {
        g.measured[0]
            .fractions
            .get("gr_engine_active")
            .copied()
            .unwrap_or(0.0)
    };
    let Some(g) = gpus.iter().max_by(|a, b| busiest(a).total_cmp(&busiest(b))) else {
        anyhow::bail!(
            "run {} has no GPU activity fractions (no gpu<i>_dram_active column): predict --from without --model needs a run collected on a GPU with GPM metrics (Hopper or newer; `powerperf quickstart` says whether this node's GPUs have them), or pass --model MODEL",
            dir.display()
        );
    };
    let mut notes = vec![PROVENANCE.to_string(), NO_POWER.to_string()];
    notes.push(format!(
        "gpu{}: measured at {:.0} MHz ({}); time of the whole run {:.3} s",
        g.gpu, g.clock_mhz, g.clock_from, g.measured[0].time_s
    ));
    if gpus.len() > 1 {
        notes.push(format!(
            "{} GPUs have fractions; gpu{} is the busiest (gr_engine_active) and is predicted",
            gpus.len(),
            g.gpu
        ));
    }
    let model = from_counters::model_of(&g.measured).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut rows = Vec::new();
    for m in &g.measured {
        for &f in &clocks {
            let t = from_counters::predict_time(&model, &m.name, f)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            rows.push((m, f, t));
        }
    }
    match format {
        Format::Json => {
            let out = PredictOutput {
                held_out_error: None,
                kind: "analytic_counters (combine = max, from the run's counters)".into(),
                model: String::new(),
                predictions: rows
                    .iter()
                    .map(|(m, f, t)| PredictionRow {
                        energy_j: None,
                        knobs: [(CLOCK_KNOB.to_string(), *f)].into(),
                        power_w: None,
                        time_s: Some(*t),
                        workload: m.name.clone(),
                    })
                    .collect(),
                notes,
            };
            outln!("{}", out.to_json()?);
        }
        _ => {
            let mut t = crate::output::Table {
                header: ["region", CLOCK_KNOB, "time_s", "vs_measured", "a", "c", "m"]
                    .map(String::from)
                    .to_vec(),
                rows: Vec::new(),
            };
            for (m, f, time) in &rows {
                let (a, c, mm) = from_counters::fractions_used(&model, &m.name).unwrap_or_default();
                t.rows.push(vec![
                    m.name.clone(),
                    format!("{f}"),
                    format!("{time:.4}"),
                    format!("{:.3}", time / m.time_s),
                    format!("{a:.3}"),
                    format!("{c:.3}"),
                    format!("{mm:.3}"),
                ]);
            }
            if format == Format::Table {
                outln!("predicted {}", PROVENANCE);
                let w: Vec<usize> = (0..t.header.len())
                    .map(|j| {
                        t.rows
                            .iter()
                            .map(|r| r[j].chars().count())
                            .chain([t.header[j].len()])
                            .max()
                            .unwrap_or(0)
                    })
                    .collect();
                for r in std::iter::once(&t.header).chain(&t.rows) {
                    let cells: Vec<String> = r
                        .iter()
                        .zip(&w)
                        .enumerate()
                        .map(|(j, (c, w))| {
                            if j == 0 {
                                format!("{c:<w$}")
                            } else {
                                format!("{c:>w$}")
                            }
                        })
                        .collect();
                    outln!("{}", cells.join("  "));
                }
            } else {
                out!("{}", t.render(format).unwrap_or_default());
            }
            if format == Format::Table {
                outln!("a = gr_engine_active, c = the busiest of fp64/fp32/fp16/tensor_active, m = dram_active (measured at the run's clock); vs_measured = predicted time / measured time");
                for n in &notes[1..] {
                    outln!("note: {n}");
                }
            } else {
                for n in &notes {
                    eprintln!("note: {n}");
                }
            }
        }
    }
    Ok(0)
}
