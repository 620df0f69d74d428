//! `powerperf predict --from RUN --knob core_freq_mhz=…` without `--model`: the time at
//! other SM clocks from the run's own GPM activity fractions
//! ([`powerperf_core::models::from_counters`]), per region and for the whole run.

use anyhow::{Context, Result};
use powerperf_core::models::from_counters::{self, Measured, CLOCK_KNOB};
use powerperf_core::models::Predictor as _;
use powerperf_core::output::predict::{PredictOutput, PredictionRow};
use powerperf_core::output::OutputFormat as Format;
use powerperf_format::run::RunMeta;
use std::collections::BTreeMap;
use std::path::Path;

/// The name of the whole run among the regions.
pub const WHOLE_RUN: &str = "(whole run)";

/// What the output says about where the prediction comes from.
pub const PROVENANCE: &str = "from counters: the run's GPM activity fractions through the bound-and-bottleneck time model (analytic_counters, combine = max, nothing fitted; docs/models.md); not validated on this GPU (its error was measured on a V100's DCGM sweep: time 9.57 % in workload holdout, docs/models.md)";

/// The note on power and energy.
pub const NO_POWER: &str = "time only: power and energy need a fitted model of this GPU (powerperf sweep --gpu-clock … then powerperf fit; predict --model MODEL)";

/// A fitted model of the GPU that gives power (`predict --from RUN --model MODEL`): the
/// time still comes from the run's counters; power from the model at each clock; energy =
/// time × power.
pub struct PowerModel {
    /// `--model`, as given.
    pub path: std::path::PathBuf,
    pub model: powerperf_core::models::ModelFile,
    /// The model's workload whose power is used.
    pub workload: String,
    /// The model's other knobs, held at these values (from the run, else the reference
    /// setting of the training grid).
    pub fill: powerperf_node::plan_file::Knobs,
    /// How the workload was chosen (for the note).
    pub workload_from: String,
}

impl PowerModel {
    /// Power, W, at SM clock `f` MHz (`None`: the model predicts no power).
    fn power_w(&self, f: f64) -> Result<Option<f64>> {
        let mut k = self.fill.clone();
        k.insert(CLOCK_KNOB.into(), f);
        let p = self.model.predict(&self.workload, &k).with_context(|| {
            format!(
                "model {}: predicting the power of {} at {}",
                self.path.display(),
                self.workload,
                powerperf_core::models::features::knob_key(&k)
            )
        })?;
        match p.power_w {
            Some(w) if !(w.is_finite() && w >= 0.0) => anyhow::bail!(
                "model {} predicts power_w = {w} for {} at {f} MHz: not a valid value (fix: predict within the training grid, or fit the model again)",
                self.path.display(),
                self.workload
            ),
            w => Ok(w),
        }
    }

    /// The note saying where power and energy come from.
    fn note(&self) -> String {
        let err = self
            .model
            .held_out_error
            .as_ref()
            .and_then(|e| {
                e.targets
                    .get("power_w")
                    .map(|t| format!("held-out power error {:.2} % ({})", t.mape_pct, e.protocol))
            })
            .unwrap_or_else(|| "held-out power error not measured".into());
        format!(
            "power_w: from the fitted model {} ({}, workload {} {}; {err}), at each clock; energy_j = time_s (from counters) × power_w (from the model); the model's own time is not used",
            self.path.display(),
            self.model.kind(),
            self.workload,
            self.workload_from
        )
    }
}

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
    tl: &powerperf_format::timeline::Timeline,
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
    if let Some(rows) = powerperf_core::collect::attribution::read_regions(dir)? {
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
    let Ok(Some(df)) = powerperf_format::timeline::read_run(dir) else {
        return false;
    };
    df.get_column_names()
        .iter()
        .any(|n| powerperf_core::collect::gpm::is_gpm_column(n) && n.ends_with("_dram_active"))
}

/// Predict from the run's counters at the `--knob core_freq_mhz` values.
///
/// # Errors
/// An unreadable run, a run without GPM fractions (the fix named), a knob other than
/// `core_freq_mhz`.
pub fn run(
    dir: &Path,
    lists: &[(String, Vec<f64>)],
    format: Format,
    power: Option<&PowerModel>,
) -> Result<i32> {
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
    let df = powerperf_format::timeline::read_run(dir)?
        .with_context(|| format!("run {} has no timeline", dir.display()))?;
    let tl = powerperf_format::timeline::Timeline::from_frame(&df)?;
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
    let mut notes = vec![
        format!("time_s: {PROVENANCE}"),
        match power {
            Some(pm) => pm.note(),
            None => NO_POWER.to_string(),
        },
    ];
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
            let w = match power {
                Some(pm) => pm.power_w(f)?,
                None => None,
            };
            rows.push((m, f, t, w));
        }
    }
    if let Some(pm) = power {
        if rows.iter().all(|r| r.3.is_none()) {
            notes[1] = format!(
                "time only: the model {} ({}) predicts no power; power and energy need a model fitted with power readings",
                pm.path.display(),
                pm.model.kind()
            );
        }
    }
    print_rows(format, power, &model, &rows, &notes)?;
    Ok(0)
}

/// One predicted row: the measured region, the clock (MHz), the predicted time (s) and the
/// power model's power (W) at that clock.
type Row<'a> = (&'a Measured, f64, f64, Option<f64>);

/// Print the predicted rows in `format`: JSON (with the notes), or a table (the notes after
/// a text table, on stderr after CSV or Markdown).
///
/// # Errors
/// A closed or full stdout.
fn print_rows(
    format: Format,
    power: Option<&PowerModel>,
    model: &powerperf_core::models::analytic_counters::AnalyticCountersModel,
    rows: &[Row<'_>],
    notes: &[String],
) -> Result<()> {
    match format {
        Format::Json => {
            let out = PredictOutput {
                held_out_error: None,
                kind: match power {
                    Some(pm) => format!(
                        "analytic_counters (combine = max, from the run's counters) for time; {} for power",
                        pm.model.kind()
                    ),
                    None => "analytic_counters (combine = max, from the run's counters)".into(),
                },
                model: power
                    .map(|pm| pm.path.display().to_string())
                    .unwrap_or_default(),
                predictions: rows
                    .iter()
                    .map(|(m, f, t, w)| PredictionRow {
                        energy_j: w.map(|w| w * t),
                        knobs: [(CLOCK_KNOB.to_string(), *f)].into(),
                        power_w: *w,
                        time_s: Some(*t),
                        workload: m.name.clone(),
                    })
                    .collect(),
                notes: notes.to_vec(),
            };
            outln!("{}", out.to_json()?);
        }
        _ => {
            let with_power = rows.iter().any(|r| r.3.is_some());
            let mut header: Vec<String> = ["region", CLOCK_KNOB, "time_s", "vs_measured"]
                .map(String::from)
                .to_vec();
            if with_power {
                header.extend(["power_w", "energy_j"].map(String::from));
            }
            header.extend(["a", "c", "m"].map(String::from));
            let mut t = powerperf_core::output::Table {
                header,
                rows: Vec::new(),
            };
            for (m, f, time, w) in rows {
                let (a, c, mm) = from_counters::fractions_used(model, &m.name).unwrap_or_default();
                let mut r = vec![
                    m.name.clone(),
                    format!("{f}"),
                    format!("{time:.4}"),
                    format!("{:.3}", time / m.time_s),
                ];
                if with_power {
                    r.push(w.map_or("-".into(), |w| format!("{w:.2}")));
                    r.push(w.map_or("-".into(), |w| format!("{:.4}", w * time)));
                }
                r.extend([format!("{a:.3}"), format!("{c:.3}"), format!("{mm:.3}")]);
                t.rows.push(r);
            }
            if format == Format::Table {
                outln!("predicted time_s {}", PROVENANCE);
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
                for n in notes {
                    eprintln!("note: {n}");
                }
            }
        }
    }
    Ok(())
}
