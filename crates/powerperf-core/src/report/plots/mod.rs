//! Plots of a run and of model outputs, drawn with plotters to SVG or PNG.
//!
//! - the timeline of a run: power (W), clocks (MHz), CPUs utilized (task-clock / wall time)
//!   and counter rates (/s, log axis), with
//!   the program's outermost regions shaded (`region_events/`, powerperf-rt);
//! - LCPI stacked bars (PerfExpert's upper bounds, [`powerperf_events::lcpi`]) for the whole
//!   run and for each region path;
//! - predicted against measured, with the y = x line, from the CSV of `powerperf evaluate -o`;
//! - the time–energy Pareto front over knob settings from `powerperf predict --format json`,
//!   with a plan's choice (`PLAN.toml`, docs/plan-format.md) marked.
//!
//! Text is laid out with DejaVu Sans compiled into the binary (the `dejavu` crate), so neither
//! fontconfig nor system fonts are needed, for SVG as for PNG.

use anyhow::{bail, Context, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use powerperf_events::{alias::Resolver, constants, lcpi};
use powerperf_format::regions::RegionRecord;
use powerperf_format::run::{Backend, RunMeta};
use std::collections::BTreeMap;
use std::path::Path;

mod draw;
use draw::{draw_pareto, draw_pvm, draw_stacked, draw_streams, draw_timeline};

/// Width and height of every plot, pixels.
pub const SIZE: (u32, u32) = (960, 420);

/// Image formats a plot can be written in (`--plot-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum ImageFormat {
    Svg,
    Png,
}

impl ImageFormat {
    /// File extension, without the dot.
    pub fn ext(self) -> &'static str {
        match self {
            ImageFormat::Svg => "svg",
            ImageFormat::Png => "png",
        }
    }

    /// The format named by a path's extension (`.svg`, `.png`).
    ///
    /// # Errors
    /// Any other extension.
    pub fn from_path(path: &Path) -> Result<Self> {
        match path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_lowercase)
        {
            Some(e) if e == "svg" => Ok(ImageFormat::Svg),
            Some(e) if e == "png" => Ok(ImageFormat::Png),
            _ => bail!(
                "{}: the plot's format comes from the extension, which must be .svg or .png",
                path.display()
            ),
        }
    }
}

/// A named line: (x, y) points.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// A shaded time interval, seconds since the run's start.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    pub label: String,
    pub start_s: f64,
    pub end_s: f64,
}

/// Lines over time with shaded regions. With `log10_y` the y values are log10 of the data
/// and the axis is labelled in powers of ten.
#[derive(Debug, Clone, PartialEq)]
pub struct TimelinePlot {
    pub title: String,
    pub y_label: String,
    pub log10_y: bool,
    pub lines: Vec<Line>,
    pub spans: Vec<Span>,
}

/// Stacked bars: one bar per label, one stack segment per category.
#[derive(Debug, Clone, PartialEq)]
pub struct StackedBars {
    pub title: String,
    pub y_label: String,
    pub categories: Vec<String>,
    /// (bar label, one value per category; NaN where not computable, drawn as 0).
    pub bars: Vec<(String, Vec<f64>)>,
}

/// One panel of predicted against measured values.
#[derive(Debug, Clone, PartialEq)]
pub struct ScatterPanel {
    /// The target (`time_s`, `power_w`, `energy_j`).
    pub target: String,
    /// (group, measured, predicted).
    pub points: Vec<(String, f64, f64)>,
}

/// Predicted against measured, one panel per target, with the y = x line.
#[derive(Debug, Clone, PartialEq)]
pub struct PredictedVsMeasured {
    pub title: String,
    pub panels: Vec<ScatterPanel>,
}

/// Time–energy points of one workload over its knob settings, the Pareto front (no other
/// point is both faster and cheaper), and optionally the plan's choice.
#[derive(Debug, Clone, PartialEq)]
pub struct ParetoPlot {
    pub title: String,
    /// (setting label, time s, energy J).
    pub points: Vec<(String, f64, f64)>,
    /// (label, time s, energy J) of the plan's choice.
    pub chosen: Option<(String, f64, f64)>,
}

/// GPU work over time, one row per (device, stream): kernels, copies and memsets as bars,
/// coloured by kind (kernels by name for the most expensive ones).
#[derive(Debug, Clone, PartialEq)]
pub struct GpuStreamsPlot {
    pub title: String,
    /// Row labels (`gpu0 stream 7`), top to bottom.
    pub rows: Vec<String>,
    /// (row, start s, end s, legend entry).
    pub bars: Vec<(usize, f64, f64, String)>,
    /// Regions shaded behind (host side), as in the timeline plots.
    pub spans: Vec<Span>,
}

/// Any plot.
#[derive(Debug, Clone, PartialEq)]
pub enum Plot {
    Timeline(TimelinePlot),
    Stacked(StackedBars),
    PredictedVsMeasured(PredictedVsMeasured),
    Pareto(ParetoPlot),
    GpuStreams(GpuStreamsPlot),
}

/// A plot and the file stem it is written under (`timeline_power`).
#[derive(Debug, Clone, PartialEq)]
pub struct NamedPlot {
    pub name: String,
    pub plot: Plot,
}

/// Register the embedded font once (plotters' ab_glyph font store).
fn fonts() -> Result<()> {
    static DONE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let ok = *DONE.get_or_init(|| {
        let r1 = plotters::style::register_font(
            "sans-serif",
            FontStyle::Normal,
            dejavu::sans::regular(),
        );
        let r2 =
            plotters::style::register_font("sans-serif", FontStyle::Bold, dejavu::sans::bold());
        r1.is_ok() && r2.is_ok()
    });
    if ok {
        Ok(())
    } else {
        bail!("the embedded DejaVu Sans font could not be loaded")
    }
}

/// Short number for axis labels and point labels.
fn short(v: f64) -> String {
    let a = v.abs();
    if a != 0.0 && !(1e-3..1e6).contains(&a) {
        format!("{v:.2e}")
    } else if a >= 100.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.3}")
    }
}

impl Plot {
    /// Draw on any plotters drawing area.
    ///
    /// # Errors
    /// Errors of the backend (I/O, font).
    pub fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        fonts()?;
        root.fill(&WHITE)?;
        match self {
            Plot::Timeline(p) => draw_timeline(p, root)?,
            Plot::Stacked(p) => draw_stacked(p, root)?,
            Plot::PredictedVsMeasured(p) => draw_pvm(p, root)?,
            Plot::Pareto(p) => draw_pareto(p, root)?,
            Plot::GpuStreams(p) => draw_streams(p, root)?,
        }
        root.present()?;
        Ok(())
    }

    /// The plot as an SVG document (`<svg …>…</svg>`), [`SIZE`] pixels.
    ///
    /// # Errors
    /// Font or drawing errors.
    pub fn svg(&self) -> Result<String> {
        let mut buf = String::new();
        {
            let root = SVGBackend::with_string(&mut buf, SIZE).into_drawing_area();
            self.draw(&root)?;
        }
        Ok(buf)
    }

    /// Write the plot to `path` as SVG or PNG.
    ///
    /// # Errors
    /// I/O errors, with the path.
    pub fn write(&self, path: &Path, format: ImageFormat) -> Result<()> {
        match format {
            ImageFormat::Svg => std::fs::write(path, self.svg()?)
                .with_context(|| format!("cannot write {}", path.display())),
            ImageFormat::Png => {
                let root = BitMapBackend::new(path, SIZE).into_drawing_area();
                self.draw(&root)
                    .with_context(|| format!("cannot write {}", path.display()))
            }
        }
    }
}

/// The GPU kernel timeline per stream of a run collected with `collect --gpu`; `None`
/// without GPU activities. The six kernels with the most total time get their own colour,
/// other kernels share one; copies are coloured by direction, memsets together.
pub fn gpu_streams_plot(dir: &Path, meta: &RunMeta) -> Result<Option<NamedPlot>> {
    use powerperf_format::gpu_activity::Kind;
    let Some((acts, _)) = powerperf_format::gpu_activity::read(dir)? else {
        return Ok(None);
    };
    let mut rows: Vec<(u32, u32)> = acts
        .iter()
        .filter(|a| matches!(a.kind, Some(Kind::Kernel | Kind::Memcpy | Kind::Memset)))
        .map(|a| (a.device, a.stream))
        .collect();
    rows.sort_unstable();
    rows.dedup();
    if rows.is_empty() {
        return Ok(None);
    }
    let top: Vec<String> = powerperf_format::gpu_activity::kernels(&acts)
        .into_iter()
        .take(6)
        .map(|k| k.name)
        .collect();
    let bars = acts
        .iter()
        .filter_map(|a| {
            let legend = match a.kind? {
                Kind::Kernel => match &a.name {
                    Some(n) if top.contains(n) => super::gpu::short_name(n, 32),
                    _ => "other kernels".into(),
                },
                Kind::Memcpy => format!("copy {}", a.subkind.as_deref().unwrap_or("UNK")),
                Kind::Memset => "memset".into(),
                _ => return None,
            };
            let row = rows.iter().position(|r| *r == (a.device, a.stream))?;
            Some((
                row,
                a.start_ns as f64 * 1e-9,
                a.end_ns as f64 * 1e-9,
                legend,
            ))
        })
        .collect();
    let spans = region_spans(dir, meta.run.start_monotonic_ns, 2000);
    Ok(Some(NamedPlot {
        name: "gpu_streams".into(),
        plot: Plot::GpuStreams(GpuStreamsPlot {
            title: "GPU work per stream (CUPTI)".into(),
            rows: rows
                .iter()
                .map(|(d, s)| format!("gpu{d} stream {s}"))
                .collect(),
            bars,
            spans,
        }),
    }))
}

/// Indices of the Pareto-optimal points (minimising both time and energy), by time.
pub fn pareto_front(points: &[(String, f64, f64)]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..points.len())
        .filter(|&i| points[i].1.is_finite() && points[i].2.is_finite())
        .collect();
    idx.sort_by(|&a, &b| {
        points[a]
            .1
            .total_cmp(&points[b].1)
            .then(points[a].2.total_cmp(&points[b].2))
    });
    let mut front = Vec::new();
    let mut best_e = f64::INFINITY;
    for i in idx {
        if points[i].2 < best_e {
            best_e = points[i].2;
            front.push(i);
        }
    }
    front
}

// ---------------------------------------------------------------------------------------
// Data of a run.

/// The outermost region instances of a run as spans (seconds since the start), merged per
/// region name where they overlap or touch (threads), at most `max` spans (the rest dropped).
pub fn region_spans(dir: &Path, origin_ns: u64, max: usize) -> Vec<Span> {
    let Ok(intervals) = powerperf_format::regions::read_region_intervals(dir) else {
        return Vec::new();
    };
    let mut by: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for iv in intervals.into_iter().filter(|i| i.depth == 0) {
        let s = iv.start_ns.saturating_sub(origin_ns) as f64 * 1e-9;
        let e = iv.end_ns.saturating_sub(origin_ns) as f64 * 1e-9;
        by.entry(iv.region).or_default().push((s, e));
    }
    let mut out = Vec::new();
    for (label, mut v) in by {
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut cur: Option<(f64, f64)> = None;
        for (s, e) in v {
            cur = match cur {
                Some((cs, ce)) if s <= ce => Some((cs, ce.max(e))),
                Some((cs, ce)) => {
                    out.push(Span {
                        label: label.clone(),
                        start_s: cs,
                        end_s: ce,
                    });
                    Some((s, e))
                }
                None => Some((s, e)),
            };
        }
        if let Some((cs, ce)) = cur {
            out.push(Span {
                label: label.clone(),
                start_s: cs,
                end_s: ce,
            });
        }
    }
    out.truncate(max);
    out
}

/// A u64 column of the timeline, nulls as 0.
fn u64_col(df: &polars::prelude::DataFrame, name: &str) -> Result<Vec<u64>> {
    use powerperf_format::timeline::{column_u64, or_default};
    Ok(or_default(column_u64(df, name).context("in the timeline")?))
}

/// The timeline plots of a run: power (`gpu<i>_power_w`, `energy_*_j` / sample length),
/// clocks (`gpu<i>_*_clock_mhz`, cycles / task-clock) and counter rates (per second,
/// log axis), regions shaded. Empty when the run has no timeline.
///
/// # Errors
/// An unreadable timeline.
pub fn timeline_plots(dir: &Path, meta: &RunMeta) -> Result<Vec<NamedPlot>> {
    let Some(df) = powerperf_format::timeline::read_run(dir)? else {
        return Ok(Vec::new());
    };
    let t = u64_col(&df, "t_ns")?;
    let dur = u64_col(&df, "dur_ns")?;
    let names: Vec<String> = df
        .columns()
        .iter()
        .map(|c| c.name().as_str().to_string())
        .collect();
    let col = |n: &str| powerperf_format::timeline::column_f64(&df, n).ok();
    let ts: Vec<f64> = t.iter().map(|&v| v as f64 * 1e-9).collect();
    let per_s = |vals: &[Option<f64>], f: &dyn Fn(f64, f64) -> Option<f64>| -> Vec<(f64, f64)> {
        vals.iter()
            .zip(&dur)
            .zip(&ts)
            .filter_map(|((v, d), x)| {
                let v = (*v)?;
                let d = *d as f64 * 1e-9;
                if d <= 0.0 {
                    return None;
                }
                f(v, d).map(|y| (*x, y))
            })
            .collect()
    };
    let raw = |vals: &[Option<f64>]| -> Vec<(f64, f64)> {
        vals.iter()
            .zip(&ts)
            .filter_map(|(v, x)| v.map(|y| (*x, y)))
            .collect()
    };
    let spans = region_spans(dir, meta.run.start_monotonic_ns, 2000);

    let mut power = Vec::new();
    let mut clocks = Vec::new();
    let mut rates = Vec::new();
    for n in &names {
        let Some(vals) = col(n) else { continue };
        if n.starts_with("gpu") && n.ends_with("_power_w") {
            power.push(Line {
                name: n.clone(),
                points: raw(&vals),
            });
        } else if n.starts_with("energy_") && n.ends_with("_j") {
            let domain = n.trim_start_matches("energy_").trim_end_matches("_j");
            power.push(Line {
                name: format!("{domain} (RAPL) W"),
                points: per_s(&vals, &|v, d| Some(v / d)),
            });
        } else if n.starts_with("gpu") && n.ends_with("_clock_mhz") {
            clocks.push(Line {
                name: n.clone(),
                points: raw(&vals),
            });
        }
    }
    // The sysfs power devices (amdgpu, xe, i915, hwmon): power and clock as sampled.
    for d in &meta.power_devices {
        if let Some(vals) = col(&format!("{}_power_w", d.stem)) {
            power.push(Line {
                name: format!("{} ({}) W", d.stem, d.origin),
                points: raw(&vals),
            });
        }
        if let Some(vals) = col(&format!("{}_clock_mhz", d.stem)) {
            clocks.push(Line {
                name: format!("{}_clock_mhz", d.stem),
                points: raw(&vals),
            });
        }
    }
    if let (Some(cy), Some(tc)) = (
        col("cycles").or_else(|| col("cpu-cycles")),
        col("task-clock"),
    ) {
        let pts = cy
            .iter()
            .zip(&tc)
            .zip(&ts)
            .filter_map(|((c, t), x)| match (c, t) {
                (Some(c), Some(t)) if *t > 0.0 => Some((*x, c / t * 1e3)),
                _ => None,
            })
            .collect();
        clocks.push(Line {
            name: "CPU cycles / task-clock".into(),
            points: pts,
        });
    }
    let mut busy = Vec::new();
    for n in ["task-clock", "cpu-clock"] {
        if let Some(vals) = col(n) {
            busy.push(Line {
                name: format!("{n} / wall time"),
                points: per_s(&vals, &|v, d| Some(v * 1e-9 / d)),
            });
            break;
        }
    }
    for e in &meta.events {
        let Some(c) = &e.column else { continue };
        let counter = matches!(
            e.backend,
            Backend::PerfEvent | Backend::Papi | Backend::Import
        ) && e.unit.as_deref().is_none_or(|u| u != "ns" && u != "J");
        if !counter || !e.status.has_value() {
            continue;
        }
        if let Some(vals) = col(c) {
            rates.push(Line {
                name: e.name.clone(),
                points: per_s(&vals, &|v, d| {
                    Some(if v > 0.0 { (v / d).log10() } else { f64::NAN })
                }),
            });
        }
    }
    let mut out = Vec::new();
    let mut push = |name: &str, title: &str, y: &str, log: bool, lines: Vec<Line>| {
        out.push(NamedPlot {
            name: name.into(),
            plot: Plot::Timeline(TimelinePlot {
                title: title.into(),
                y_label: y.into(),
                log10_y: log,
                lines,
                spans: spans.clone(),
            }),
        })
    };
    if !power.is_empty() {
        push(
            "timeline_power",
            "Power over time",
            "power (W)",
            false,
            power,
        );
    }
    if !clocks.is_empty() {
        push(
            "timeline_clocks",
            "Clocks over time",
            "clock (MHz)",
            false,
            clocks,
        );
    }
    if !busy.is_empty() {
        push(
            "timeline_cpus",
            "CPUs utilized over time",
            "CPUs utilized",
            false,
            busy,
        );
    }
    if !rates.is_empty() {
        push(
            "timeline_rates",
            "Counter rates over time",
            "rate (/s, log scale)",
            true,
            rates,
        );
    }
    Ok(out)
}

/// LCPI tables (PerfExpert's upper bounds) of the whole run and of each region path (summed
/// over threads), with the shipped machine constants of the run's CPU where there are some.
pub fn lcpi_tables(meta: &RunMeta, regions: &[RegionRecord]) -> Vec<(String, lcpi::Table)> {
    let consts = match (
        &meta.run.cpu_vendor,
        meta.run.cpu_family,
        meta.run.cpu_model_number,
    ) {
        (Some(v), Some(f), Some(m)) => constants::select(v, f, m)
            .map(|(_, c)| c.as_map())
            .unwrap_or_default(),
        _ => BTreeMap::new(),
    };
    let totals = meta.totals();
    let whole = Resolver {
        values: totals.values,
        constants: consts,
        duration_s: Some(totals.duration_s),
        missing: totals.missing,
    };
    lcpi_tables_with(&whole, regions)
}

/// The LCPI table of the whole run (`base`: its totals, constants and missing events) and of
/// every region path, whose counters are its shares summed over threads
/// ([`super::regions::sum_over_threads`]) and whose duration is its inclusive time.
pub fn lcpi_tables_with(base: &Resolver, regions: &[RegionRecord]) -> Vec<(String, lcpi::Table)> {
    let mut out = vec![("whole run".to_string(), lcpi::table(&|n: &str| base.get(n)))];
    for s in super::regions::sum_over_threads(regions) {
        let r = Resolver {
            values: s.values,
            duration_s: Some(s.incl_ns as f64 * 1e-9),
            ..base.clone()
        };
        out.push((s.path, lcpi::table(&|n: &str| r.get(n))));
    }
    out
}

/// LCPI stacked bars from [`lcpi_tables`]; `None` when no category is computable anywhere.
pub fn lcpi_plot(tables: &[(String, lcpi::Table)]) -> Option<NamedPlot> {
    let any = tables
        .iter()
        .any(|(_, t)| t.rows.iter().any(|r| r.value.is_ok()));
    if !any {
        return None;
    }
    let categories: Vec<String> = lcpi::CATEGORIES.iter().map(|c| c.1.to_string()).collect();
    let bars = tables
        .iter()
        .map(|(name, t)| {
            let vals = lcpi::CATEGORIES
                .iter()
                .map(|(c, _)| {
                    t.rows
                        .iter()
                        .find(|r| r.category == *c)
                        .and_then(|r| r.value.clone().ok())
                        .unwrap_or(f64::NAN)
                })
                .collect();
            (name.clone(), vals)
        })
        .collect();
    Some(NamedPlot {
        name: "lcpi".into(),
        plot: Plot::Stacked(StackedBars {
            title: "LCPI per region (upper bounds)".into(),
            y_label: "cycles per instruction".into(),
            categories,
            bars,
        }),
    })
}

/// Every plot of a run: the timeline plots and, where computable, the LCPI bars.
///
/// # Errors
/// An unreadable timeline.
pub fn run_plots(dir: &Path, meta: &RunMeta, regions: &[RegionRecord]) -> Result<Vec<NamedPlot>> {
    let mut out = timeline_plots(dir, meta)?;
    out.extend(lcpi_plot(&lcpi_tables(meta, regions)));
    Ok(out)
}

// ---------------------------------------------------------------------------------------
// Model outputs.

/// Predicted against measured from the CSV of `powerperf evaluate -o FILE` (columns
/// `workload`, the knobs, `measured_<t>` and `predicted_<t>` for `time_s`, `power_w`,
/// `energy_j`); points are grouped (coloured) by workload.
///
/// # Errors
/// An unreadable file, or one without any `measured_*`/`predicted_*` pair.
pub fn predicted_vs_measured(csv_path: &Path) -> Result<NamedPlot> {
    let mut rd = csv::Reader::from_path(csv_path)
        .with_context(|| format!("cannot read {}", csv_path.display()))?;
    let headers = rd
        .headers()
        .with_context(|| format!("{}: no header row", csv_path.display()))?
        .clone();
    let pos = |n: &str| headers.iter().position(|h| h == n);
    let wl = pos("workload");
    let mut panels: Vec<(usize, usize, ScatterPanel)> = powerperf_format::set::TARGETS
        .iter()
        .filter_map(|t| {
            Some((
                pos(&format!("measured_{t}"))?,
                pos(&format!("predicted_{t}"))?,
                ScatterPanel {
                    target: t.to_string(),
                    points: Vec::new(),
                },
            ))
        })
        .collect();
    if panels.is_empty() {
        bail!(
            "{}: no measured_<target>/predicted_<target> columns (is it the CSV of `powerperf evaluate -o`?)",
            csv_path.display()
        );
    }
    for (line, rec) in rd.records().enumerate() {
        let rec = rec.with_context(|| format!("{}: row {}", csv_path.display(), line + 2))?;
        let group = wl.and_then(|i| rec.get(i)).unwrap_or("").to_string();
        for (m, p, panel) in &mut panels {
            let num = |i: usize| rec.get(i).and_then(|s| s.trim().parse::<f64>().ok());
            if let (Some(mv), Some(pv)) = (num(*m), num(*p)) {
                panel.points.push((group.clone(), mv, pv));
            }
        }
    }
    Ok(predicted_vs_measured_plot(
        format!(
            "Predicted against measured ({})",
            csv_path
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default()
        ),
        panels.into_iter().map(|p| p.2).collect(),
    ))
}

/// The `predicted_vs_measured` plot from panels already in memory (one per target, points
/// as (workload, measured, predicted)); `powerperf evaluate --plot` and
/// [`predicted_vs_measured`] (the CSV of `evaluate -o`) both draw through it. Panels without
/// points are left out.
pub fn predicted_vs_measured_plot(title: String, panels: Vec<ScatterPanel>) -> NamedPlot {
    NamedPlot {
        name: "predicted_vs_measured".into(),
        plot: Plot::PredictedVsMeasured(PredictedVsMeasured {
            title,
            panels: panels
                .into_iter()
                .filter(|p| !p.points.is_empty())
                .collect(),
        }),
    }
}

fn knob_label(k: &crate::models::Knobs) -> String {
    k.iter()
        .map(|(n, v)| format!("{n}={}", short(*v)))
        .collect::<Vec<_>>()
        .join(",")
}

/// Time–energy Pareto plots, one per workload, from `powerperf predict --format json`
/// ([`PredictOutput`](crate::output::predict::PredictOutput)), with the `[[region]]` of the
/// same name in `plan` (a `powerperf plan` TOML) marked as the choice.
///
/// # Errors
/// An unreadable file, JSON without `predictions`, an unreadable plan.
pub fn pareto_plots(predict_json: &Path, plan: Option<&Path>) -> Result<Vec<NamedPlot>> {
    let text = std::fs::read_to_string(predict_json)
        .with_context(|| format!("cannot read {}", predict_json.display()))?;
    let preds = crate::output::predict::PredictOutput::from_json(&text).map_err(|e| {
        use serde_json::error::Category;
        match e.classify() {
            Category::Syntax | Category::Eof | Category::Io => {
                anyhow::anyhow!("{} is not JSON: {e}", predict_json.display())
            }
            Category::Data => anyhow::anyhow!(
                "{}: not the output of `powerperf predict --format json` (an object with a `predictions` array): {e}",
                predict_json.display()
            ),
        }
    })?;
    let plan = plan
        .map(powerperf_node::plan_file::Plan::read)
        .transpose()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut by: BTreeMap<String, Vec<(String, f64, f64)>> = BTreeMap::new();
    for p in preds.predictions {
        let (Some(t), Some(e)) = (p.time_s, p.energy_j) else {
            continue;
        };
        by.entry(p.workload)
            .or_default()
            .push((knob_label(&p.knobs), t, e));
    }
    if by.is_empty() {
        bail!(
            "{}: no prediction has time_s and energy_j",
            predict_json.display()
        );
    }
    let many = by.len() > 1;
    Ok(by
        .into_iter()
        .map(|(w, points)| {
            let chosen = plan.as_ref().and_then(|pl| {
                pl.regions.iter().find(|r| r.name == w).map(|r| {
                    let label = r
                        .setting
                        .iter()
                        .map(|(k, v)| format!("{k}={}", short(*v)))
                        .collect::<Vec<_>>()
                        .join(",");
                    (label, r.time_s, r.energy_j)
                })
            });
            let safe: String = w
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '-' {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            NamedPlot {
                name: if many {
                    format!("pareto_{safe}")
                } else {
                    "pareto".into()
                },
                plot: Plot::Pareto(ParetoPlot {
                    title: format!("Time–energy over settings: {w}"),
                    points,
                    chosen,
                }),
            }
        })
        .collect())
}

/// Write `plots` into `dir` as `<name>.<ext>`; returns the paths written.
///
/// # Errors
/// A directory that cannot be created, or a plot that cannot be written.
pub fn write_all(
    plots: &[NamedPlot],
    dir: &Path,
    format: ImageFormat,
) -> Result<Vec<std::path::PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut out = Vec::new();
    for p in plots {
        let path = dir.join(format!("{}.{}", p.name, format.ext()));
        p.plot.write(&path, format)?;
        out.push(path);
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
