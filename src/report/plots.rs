//! Plots of a run and of model outputs, drawn with plotters to SVG or PNG.
//!
//! - the timeline of a run: power (W), clocks (MHz), CPUs utilized (task-clock / wall time)
//!   and counter rates (/s, log axis), with
//!   the program's outermost regions shaded (`region_events/`, powerperf-rt);
//! - LCPI stacked bars (PerfExpert's upper bounds, [`crate::events_dsl::lcpi`]) for the whole
//!   run and for each region path;
//! - predicted against measured, with the y = x line, from the CSV of `powerperf evaluate -o`;
//! - the time–energy Pareto front over knob settings from `powerperf predict --format json`,
//!   with a plan's choice (`PLAN.toml`, docs/plan-format.md) marked.
//!
//! Text is laid out with DejaVu Sans compiled into the binary (the `dejavu` crate), so neither
//! fontconfig nor system fonts are needed, for SVG as for PNG.

use crate::events_dsl::{alias::Resolver, constants, lcpi};
use crate::store::run::{Backend, RunMeta};
use anyhow::{bail, Context, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use powerperf_format::regions::RegionRecord;
use std::collections::BTreeMap;
use std::path::Path;

/// Width and height of every plot, pixels.
pub const SIZE: (u32, u32) = (960, 420);

/// Image formats a plot can be written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
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

const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
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

/// (lo, hi) of `v` with 5 % padding; a unit range around a single value; (0, 1) when empty.
fn padded(v: impl Iterator<Item = f64>) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for x in v.filter(|x| x.is_finite()) {
        lo = lo.min(x);
        hi = hi.max(x);
    }
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    if hi - lo <= f64::EPSILON * hi.abs().max(1.0) {
        let d = if lo == 0.0 { 1.0 } else { lo.abs() * 0.1 };
        return (lo - d, hi + d);
    }
    let d = 0.05 * (hi - lo);
    (lo - d, hi + d)
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

fn draw_timeline<DB: DrawingBackend>(p: &TimelinePlot, root: &DrawingArea<DB, Shift>) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let (x0, x1) = padded(
        p.lines
            .iter()
            .flat_map(|l| l.points.iter().map(|q| q.0))
            .chain(std::iter::once(0.0))
            .chain(p.spans.iter().flat_map(|s| [s.start_s, s.end_s])),
    );
    let x0 = x0.max(0.0);
    let (mut y0, mut y1) = padded(p.lines.iter().flat_map(|l| l.points.iter().map(|q| q.1)));
    if !p.log10_y && y0 > 0.0 && y0 < 0.5 * y1 {
        y0 = 0.0;
    }
    let mut y_labels = 10;
    if p.log10_y {
        // Whole decades, one label each.
        y0 = y0.floor();
        y1 = y1.ceil().max(y0 + 1.0);
        y_labels = (y1 - y0) as usize + 1;
    }
    let mut chart = ChartBuilder::on(root)
        .caption(&p.title, ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(x0..x1, y0..y1)?;
    let log = p.log10_y;
    let yfmt = move |v: &f64| {
        if log {
            short(10f64.powf(*v))
        } else {
            short(*v)
        }
    };
    chart
        .configure_mesh()
        .x_desc("time since start (s)")
        .y_desc(p.y_label.as_str())
        .y_labels(y_labels)
        .y_label_formatter(&yfmt)
        .light_line_style(WHITE.mix(0.0))
        .draw()?;
    // Regions: one colour per label, drawn under the lines; one legend entry per label.
    let mut labels: Vec<&str> = Vec::new();
    for s in &p.spans {
        if !labels.contains(&s.label.as_str()) {
            labels.push(&s.label);
        }
    }
    for (i, label) in labels.iter().enumerate() {
        let c = color(i + 5);
        let rects = p
            .spans
            .iter()
            .filter(|s| s.label == *label)
            .map(|s| Rectangle::new([(s.start_s, y0), (s.end_s, y1)], c.mix(0.18).filled()));
        chart
            .draw_series(rects)?
            .label(format!("region {label}"))
            .legend(move |(x, y)| {
                Rectangle::new([(x, y - 6), (x + 16, y + 6)], c.mix(0.35).filled())
            });
    }
    for (i, l) in p.lines.iter().enumerate() {
        let c = color(i);
        // A non-finite y (a zero on the log axis, a failed read) breaks the line.
        let segments: Vec<&[(f64, f64)]> = l
            .points
            .split(|q| !q.1.is_finite())
            .filter(|s| !s.is_empty())
            .collect();
        for (k, seg) in segments.iter().enumerate() {
            let s = chart.draw_series(LineSeries::new(seg.iter().copied(), c.stroke_width(2)))?;
            if k == 0 {
                s.label(l.name.as_str()).legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2))
                });
            }
            if seg.len() == 1 {
                chart.draw_series(seg.iter().map(|q| Circle::new(*q, 3, c.filled())))?;
            }
        }
    }
    if !p.lines.is_empty() || !labels.is_empty() {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.4))
            .label_font(("sans-serif", 13))
            .position(SeriesLabelPosition::UpperRight)
            .draw()?;
    }
    if p.lines.is_empty() {
        root.draw(&Text::new(
            "no samples with these columns",
            (SIZE.0 as i32 / 2 - 120, SIZE.1 as i32 / 2),
            ("sans-serif", 16),
        ))?;
    }
    Ok(())
}

fn draw_streams<DB: DrawingBackend>(p: &GpuStreamsPlot, root: &DrawingArea<DB, Shift>) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let n = p.rows.len().max(1);
    let t1 = p
        .bars
        .iter()
        .map(|b| b.2)
        .chain(p.spans.iter().map(|s| s.end_s))
        .fold(0.0, f64::max);
    let t1 = if t1 > 0.0 { t1 * 1.02 } else { 1.0 };
    let mut chart = ChartBuilder::on(root)
        .caption(&p.title, ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(120)
        .build_cartesian_2d(0.0..t1, (0..n).into_segmented())?;
    let names = p.rows.clone();
    let yfmt = move |v: &SegmentValue<usize>| match v {
        SegmentValue::CenterOf(i) => names.get(*i).cloned().unwrap_or_default(),
        _ => String::new(),
    };
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(n)
        .y_label_formatter(&yfmt)
        .x_desc("time since the start of the run (s)")
        .draw()?;
    for (k, s) in p.spans.iter().enumerate() {
        let c = color(k).mix(0.08);
        chart.draw_series(std::iter::once(Rectangle::new(
            [
                (s.start_s, SegmentValue::Exact(0)),
                (s.end_s, SegmentValue::Exact(n)),
            ],
            c.filled(),
        )))?;
    }
    let mut legends: Vec<String> = Vec::new();
    for b in &p.bars {
        if !legends.contains(&b.3) {
            legends.push(b.3.clone());
        }
    }
    for (k, name) in legends.iter().enumerate() {
        let c = color(k);
        let rects: Vec<_> = p
            .bars
            .iter()
            .filter(|b| &b.3 == name)
            .map(|b| {
                // At least a hair wide so that microsecond kernels show.
                let end = b.2.max(b.1 + t1 * 2e-4);
                let mut r = Rectangle::new(
                    [
                        (b.1, SegmentValue::Exact(b.0)),
                        (end, SegmentValue::Exact(b.0 + 1)),
                    ],
                    c.filled(),
                );
                r.set_margin(6, 6, 0, 0);
                r
            })
            .collect();
        chart
            .draw_series(rects)?
            .label(name.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 16, y + 6)], c.filled()));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .label_font(("sans-serif", 12))
        .position(SeriesLabelPosition::UpperRight)
        .draw()?;
    Ok(())
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

fn draw_stacked<DB: DrawingBackend>(p: &StackedBars, root: &DrawingArea<DB, Shift>) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let n = p.bars.len().max(1);
    let top = p
        .bars
        .iter()
        .map(|(_, v)| v.iter().filter(|x| x.is_finite()).sum::<f64>())
        .fold(0.0, f64::max);
    let top = if top > 0.0 { top * 1.25 } else { 1.0 };
    let mut chart = ChartBuilder::on(root)
        .caption(&p.title, ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d((0..n).into_segmented(), 0.0..top)?;
    let names: Vec<String> = p.bars.iter().map(|b| b.0.clone()).collect();
    let xfmt = move |v: &SegmentValue<usize>| match v {
        SegmentValue::CenterOf(i) => names.get(*i).cloned().unwrap_or_default(),
        _ => String::new(),
    };
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n)
        .x_label_formatter(&xfmt)
        .y_desc(p.y_label.as_str())
        .draw()?;
    let mut base = vec![0.0; p.bars.len()];
    for (k, cat) in p.categories.iter().enumerate() {
        let c = color(k);
        let mut rects = Vec::new();
        for (i, (_, vals)) in p.bars.iter().enumerate() {
            let v = vals
                .get(k)
                .copied()
                .filter(|x| x.is_finite())
                .unwrap_or(0.0);
            let mut r = Rectangle::new(
                [
                    (SegmentValue::Exact(i), base[i]),
                    (SegmentValue::Exact(i + 1), base[i] + v),
                ],
                c.filled(),
            );
            r.set_margin(0, 0, 12, 12);
            rects.push(r);
            base[i] += v;
        }
        chart
            .draw_series(rects)?
            .label(cat.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 16, y + 6)], c.filled()));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .label_font(("sans-serif", 13))
        .position(SeriesLabelPosition::UpperRight)
        .draw()?;
    Ok(())
}

fn draw_pvm<DB: DrawingBackend>(
    p: &PredictedVsMeasured,
    root: &DrawingArea<DB, Shift>,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let root = root.titled(&p.title, ("sans-serif", 20))?;
    let cols = p.panels.len().max(1);
    let areas = root.split_evenly((1, cols));
    for (panel, area) in p.panels.iter().zip(areas.iter()) {
        let (lo, hi) = padded(panel.points.iter().flat_map(|q| [q.1, q.2]));
        let mut chart = ChartBuilder::on(area)
            .caption(&panel.target, ("sans-serif", 16))
            .margin(8)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(lo..hi, lo..hi)?;
        chart
            .configure_mesh()
            .x_desc("measured")
            .y_desc("predicted")
            .x_labels(5)
            .y_labels(5)
            .x_label_formatter(&|v| short(*v))
            .y_label_formatter(&|v| short(*v))
            .draw()?;
        chart
            .draw_series(LineSeries::new(
                [(lo, lo), (hi, hi)],
                BLACK.mix(0.5).stroke_width(1),
            ))?
            .label("y = x")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], BLACK.mix(0.5)));
        let mut groups: Vec<&str> = Vec::new();
        for q in &panel.points {
            if !groups.contains(&q.0.as_str()) {
                groups.push(&q.0);
            }
        }
        for (i, g) in groups.iter().enumerate() {
            let c = color(i);
            let s = chart.draw_series(
                panel
                    .points
                    .iter()
                    .filter(|q| q.0 == *g)
                    .map(|q| Circle::new((q.1, q.2), 4, c.filled())),
            )?;
            if groups.len() <= 10 {
                s.label(*g)
                    .legend(move |(x, y)| Circle::new((x + 8, y), 4, c.filled()));
            }
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.4))
            .label_font(("sans-serif", 11))
            .position(SeriesLabelPosition::UpperLeft)
            .draw()?;
    }
    Ok(())
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

fn draw_pareto<DB: DrawingBackend>(p: &ParetoPlot, root: &DrawingArea<DB, Shift>) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let all = || {
        p.points
            .iter()
            .map(|q| (q.1, q.2))
            .chain(p.chosen.iter().map(|c| (c.1, c.2)))
    };
    let (x0, x1) = padded(all().map(|q| q.0));
    let (y0, y1) = padded(all().map(|q| q.1));
    let mut chart = ChartBuilder::on(root)
        .caption(&p.title, ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(x0..x1, y0..y1)?;
    chart
        .configure_mesh()
        .x_desc("predicted time (s)")
        .y_desc("predicted energy (J)")
        .x_label_formatter(&|v| short(*v))
        .y_label_formatter(&|v| short(*v))
        .draw()?;
    let front = pareto_front(&p.points);
    let grey = RGBColor(120, 120, 120);
    chart
        .draw_series(
            p.points
                .iter()
                .map(|q| Circle::new((q.1, q.2), 4, grey.filled())),
        )?
        .label("settings")
        .legend(move |(x, y)| Circle::new((x + 8, y), 4, grey.filled()));
    let blue = color(0);
    chart
        .draw_series(LineSeries::new(
            front.iter().map(|&i| (p.points[i].1, p.points[i].2)),
            blue.stroke_width(2),
        ))?
        .label("Pareto front")
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], blue.stroke_width(2)));
    chart.draw_series(front.iter().map(|&i| {
        let q = &p.points[i];
        EmptyElement::at((q.1, q.2))
            + Circle::new((0, 0), 5, blue.filled())
            + Text::new(q.0.clone(), (6, -14), ("sans-serif", 11))
    }))?;
    if let Some((label, t, e)) = &p.chosen {
        let red = color(3);
        chart
            .draw_series(std::iter::once(
                EmptyElement::at((*t, *e))
                    + TriangleMarker::new((0, 0), 9, red.filled())
                    + Text::new(format!("plan: {label}"), (10, 4), ("sans-serif", 13)),
            ))?
            .label("plan's choice")
            .legend(move |(x, y)| TriangleMarker::new((x + 8, y), 6, red.filled()));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .label_font(("sans-serif", 13))
        .position(SeriesLabelPosition::UpperRight)
        .draw()?;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Data of a run.

/// The outermost region instances of a run as spans (seconds since the start), merged per
/// region name where they overlap or touch (threads), at most `max` spans (the rest dropped).
pub fn region_spans(dir: &Path, origin_ns: u64, max: usize) -> Vec<Span> {
    let Ok(events) = powerperf_rt::events::read_dir(dir) else {
        return Vec::new();
    };
    let mut by: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for iv in powerperf_rt::events::intervals(&events)
        .into_iter()
        .filter(|i| i.depth == 0)
    {
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
    let mut panels: Vec<(usize, usize, ScatterPanel)> = crate::store::set::TARGETS
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

fn knob_label(k: &serde_json::Map<String, serde_json::Value>) -> String {
    k.iter()
        .map(|(n, v)| {
            format!(
                "{n}={}",
                v.as_f64().map(short).unwrap_or_else(|| v.to_string())
            )
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Time–energy Pareto plots, one per workload, from `powerperf predict --format json`
/// (`{"predictions": [{"workload", "knobs": {…}, "time_s", "energy_j", …}]}`), with the
/// `[[region]]` of the same name in `plan` (a `powerperf plan` TOML) marked as the choice.
///
/// # Errors
/// An unreadable file, JSON without `predictions`, an unreadable plan.
pub fn pareto_plots(predict_json: &Path, plan: Option<&Path>) -> Result<Vec<NamedPlot>> {
    let text = std::fs::read_to_string(predict_json)
        .with_context(|| format!("cannot read {}", predict_json.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("{} is not JSON", predict_json.display()))?;
    let preds = v["predictions"].as_array().with_context(|| {
        format!(
            "{}: no `predictions` array (expected the output of `powerperf predict --format json`)",
            predict_json.display()
        )
    })?;
    let plan = plan
        .map(crate::dvfs::plan_file::Plan::read)
        .transpose()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut by: BTreeMap<String, Vec<(String, f64, f64)>> = BTreeMap::new();
    for p in preds {
        let (Some(t), Some(e)) = (p["time_s"].as_f64(), p["energy_j"].as_f64()) else {
            continue;
        };
        let w = p["workload"].as_str().unwrap_or("").to_string();
        let label = p["knobs"].as_object().map(knob_label).unwrap_or_default();
        by.entry(w).or_default().push((label, t, e));
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
mod tests {
    use super::*;

    fn timeline() -> Plot {
        Plot::Timeline(TimelinePlot {
            title: "Power <&> over time".into(),
            y_label: "power (W)".into(),
            log10_y: false,
            lines: vec![Line {
                name: "gpu0_power_w".into(),
                points: vec![(0.1, 50.0), (0.2, 80.0), (0.3, 75.0)],
            }],
            spans: vec![Span {
                label: "solve".into(),
                start_s: 0.12,
                end_s: 0.25,
            }],
        })
    }

    #[test]
    fn svg_has_text_lines_and_escapes() {
        let s = timeline().svg().unwrap();
        assert!(s.starts_with("<svg"), "{}", &s[..80.min(s.len())]);
        assert!(s.contains("Power &lt;&amp;&gt; over time"));
        assert!(s.contains("gpu0_power_w"));
        assert!(s.contains("region solve"));
        assert!(s.contains("<polyline") || s.contains("<path"));
    }

    #[test]
    fn png_renders_text_without_system_fonts() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.png");
        timeline().write(&p, ImageFormat::Png).unwrap();
        let bytes = std::fs::read(&p).unwrap();
        assert_eq!(&bytes[1..4], b"PNG");
        assert!(bytes.len() > 5000, "{}", bytes.len());
    }

    #[test]
    fn pareto_front_keeps_non_dominated_points() {
        let pts: Vec<(String, f64, f64)> = [(1.0, 10.0), (2.0, 8.0), (2.5, 9.0), (3.0, 7.0)]
            .iter()
            .map(|&(t, e)| (String::new(), t, e))
            .collect();
        assert_eq!(pareto_front(&pts), vec![0, 1, 3]);
    }

    #[test]
    fn stacked_and_scatter_and_pareto_draw() {
        let st = Plot::Stacked(StackedBars {
            title: "LCPI".into(),
            y_label: "CPI".into(),
            categories: vec!["a".into(), "b".into()],
            bars: vec![
                ("whole run".into(), vec![0.5, f64::NAN]),
                ("r".into(), vec![0.2, 0.3]),
            ],
        });
        assert!(st.svg().unwrap().contains("whole run"));
        let pv = Plot::PredictedVsMeasured(PredictedVsMeasured {
            title: "pvm".into(),
            panels: vec![ScatterPanel {
                target: "time_s".into(),
                points: vec![("w".into(), 1.0, 1.1), ("w".into(), 2.0, 1.9)],
            }],
        });
        assert!(pv.svg().unwrap().contains("y = x"));
        let pa = Plot::Pareto(ParetoPlot {
            title: "p".into(),
            points: vec![("f=1".into(), 2.0, 5.0), ("f=2".into(), 1.0, 6.0)],
            chosen: Some(("f=1".into(), 2.0, 5.0)),
        });
        assert!(pa.svg().unwrap().contains("plan: f=1"));
    }

    /// A run with RAPL, GPU and hardware-counter columns (which this development VM lacks)
    /// and region events: every timeline plot is made, regions shaded.
    #[test]
    fn timeline_plots_of_a_run_with_every_source() {
        let meta = crate::report::tests::sample_meta();
        let dir = tempfile::tempdir().unwrap();
        let names: Vec<String> = [
            "task-clock",
            "page-faults",
            "cycles",
            "instructions",
            "energy_package_0_j",
            "gpu0_power_w",
            "gpu0_sm_clock_mhz",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let mut t = powerperf_format::timeline::Timeline::new(&names);
        for i in 1..=20u64 {
            let f = i as f64;
            t.push(
                i * 10_000_000,
                10_000_000,
                &[
                    Some(9e6),
                    Some(if i % 3 == 0 { 0.0 } else { 12.0 }),
                    Some(2.7e7),
                    Some(4e7 + f),
                    Some(0.3 + 0.01 * f),
                    Some(100.0 + f),
                    Some(1410.0),
                ],
            );
        }
        t.write_parquet(&dir.path().join(crate::store::run::TIMELINE))
            .unwrap();
        let ev = dir.path().join("region_events");
        std::fs::create_dir_all(&ev).unwrap();
        std::fs::write(
            ev.join("7.tsv"),
            "# powerperf-rt region events v1 pid=7\nR\t1\tsolve\nB\t50000000\t7\t1\nE\t120000000\t7\t1\n",
        )
        .unwrap();
        let plots = timeline_plots(dir.path(), &meta).unwrap();
        let names: Vec<&str> = plots.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "timeline_power",
                "timeline_clocks",
                "timeline_cpus",
                "timeline_rates"
            ]
        );
        let Plot::Timeline(power) = &plots[0].plot else {
            panic!("not a timeline")
        };
        let pkg = power
            .lines
            .iter()
            .find(|l| l.name.starts_with("package_0"))
            .unwrap();
        assert!((pkg.points[0].1 - 31.0).abs() < 1e-9, "{:?}", pkg.points[0]);
        assert_eq!(power.spans.len(), 1);
        assert!((power.spans[0].start_s - 0.05).abs() < 1e-12);
        let Plot::Timeline(clocks) = &plots[1].plot else {
            panic!("not a timeline")
        };
        let cpu = clocks
            .lines
            .iter()
            .find(|l| l.name.starts_with("CPU"))
            .unwrap();
        assert!(
            (cpu.points[0].1 - 3000.0).abs() < 1e-6,
            "{:?}",
            cpu.points[0]
        );
        let Plot::Timeline(rates) = &plots[3].plot else {
            panic!("not a timeline")
        };
        let pf = rates
            .lines
            .iter()
            .find(|l| l.name == "page-faults")
            .unwrap();
        assert!(pf.points[2].1.is_nan(), "a zero breaks the log line");
        for p in &plots {
            let svg = p.plot.svg().unwrap();
            assert!(svg.contains("region solve"), "{}", p.name);
        }
        let written = write_all(&plots, &dir.path().join("plots"), ImageFormat::Png).unwrap();
        assert_eq!(written.len(), 4);
    }

    #[test]
    fn lcpi_bars_only_when_something_is_computable() {
        let table = |v: Result<f64, String>| lcpi::Table {
            source: "papi".into(),
            overall_cpi: Ok(1.2),
            rows: lcpi::CATEGORIES
                .iter()
                .map(|(c, l)| lcpi::Row {
                    category: c.to_string(),
                    label: l.to_string(),
                    value: v.clone(),
                })
                .collect(),
        };
        let none = vec![("whole run".to_string(), table(Err("missing".into())))];
        assert!(lcpi_plot(&none).is_none());
        let some = vec![
            ("whole run".to_string(), table(Ok(0.25))),
            ("solve".to_string(), table(Err("missing".into()))),
        ];
        let p = lcpi_plot(&some).unwrap();
        let Plot::Stacked(b) = &p.plot else {
            panic!("not bars")
        };
        assert_eq!(b.bars[0].1, vec![0.25; 6]);
        assert!(b.bars[1].1.iter().all(|v| v.is_nan()));
        let svg = p.plot.svg().unwrap();
        assert!(svg.contains("data accesses") && svg.contains("solve"));
    }

    #[test]
    fn image_format_from_extension() {
        assert_eq!(
            ImageFormat::from_path(Path::new("a.SVG")).unwrap(),
            ImageFormat::Svg
        );
        assert_eq!(
            ImageFormat::from_path(Path::new("a.png")).unwrap(),
            ImageFormat::Png
        );
        assert!(ImageFormat::from_path(Path::new("a.jpg")).is_err());
    }
}
